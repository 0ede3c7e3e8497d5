"""What the dashboard reads: one immutable Snapshot per sample, and the run's fixed facts (RunInfo)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from measure.core.readings import SystemSample
from measure.core.serving import Batching

if TYPE_CHECKING:
    from measure.control.live.steps import StepRow


class LogLine(NamedTuple):
    """One line of the live log: its sequence number, its time (s since the start), level and text."""

    seq: int
    t: float
    level: str
    text: str


@dataclass(frozen=True)
class RunInfo:
    """Facts that do not change during a run: the header line of the dashboard."""

    engine: str
    model: str
    weight_bytes: int
    chip: str
    bandwidth_gbps: float | None
    bandwidth_source: str
    simulated: bool
    endpoint: str | None = None  # a remote engine's URL: the gauges then show this machine, not the server's
    attainable_gbps: float | None = None  # measured by the probe: the second line on the bandwidth chart
    placement: str = ""  # where the engine's layers run (llama.cpp: CPU or GPU)


@dataclass(frozen=True)
class HistoryPoint:
    """One sample of the live run's history (Snapshot.history: the charts' series), not the roofline's Point."""

    t: float  # seconds since start
    agg_tps: float
    tpot_p50: float | None  # seconds
    tpot_p90: float | None
    predicted_tpot: float | None
    bw_gbps: float | None
    mem_used: int
    swap_used: int
    predicted_tps: float | None = None


@dataclass(frozen=True)
class WorkerRow:
    wid: int
    pid: int | None
    state: str
    threads: int | None
    rss: int | None
    cpu: float | None
    tps: float
    requests: int
    last_ttft: float | None
    # an endpoint's row (http)
    label: str | None = None
    errors: int = 0
    active: int = 0
    streams: int | None = None
    server: dict[str, Any] | None = None
    bandwidth_gbps: float | None = None  # its chip's β
    bw_gbps: float | None = None  # its bandwidth product: W ÷ its TPOT p50
    error: str | None = None  # why it died, or why an endpoint is down


@dataclass(frozen=True)
class Numbers:
    """The numbers panel. Times in seconds, bytes in bytes; None where there is nothing to show yet."""

    level: str  # the K/B/mode level the request figures (TTFT, ITL, requests) belong to
    agg_tps: float
    streams: int  # streams with ≥ 2 tokens in the window
    concurrency: float  # achieved: requests in service, time-averaged over the window (M.achieved_concurrency)
    tpot_p50: float | None
    tpot_p90: float | None
    predicted_tpot: float | None
    predicted_tps: float | None  # the roofline's aggregate tok/s at this level (None: no roofline)
    predicted_by: str  # "roofline (what a step spends its time on: Prediction.binds)" | "K·W/β" | ""
    mbu: float | None  # model bandwidth utilization: bytes moved per s ÷ attainable
    bw_gbps: float | None
    bw_formula: str
    ttft_p50: float | None
    ttft_p99: float | None
    ttft_engine_p50: float | None
    ttft_engine_p99: float | None
    itl_p50: float | None
    requests: int
    errors: int
    server_view: dict[str, Any] | None
    workers_cpu_percent: float
    footprint: int | None  # None: the engine's memory is not on this machine
    budget: int | None
    wall: str | None
    ceiling: str
    goodput_rps: float | None = None  # the level's requests that met every SLO bound, per second
    goodput_tps: float | None = None
    slo_attainment: float | None = None
    watts: float | None = None
    joules_per_token: float | None = None
    usd_per_mtok: float | None = None
    spec_gbps: float | None = None  # several endpoints: Σ β of those in use (the spec line), where all are known
    batching: Batching | None = None  # over HTTP: does the server batch the streams open (serving.batching, docs/design/compare.md)
    server_efficiency: float | None = None  # the server's tok/s ÷ the engine's batched tok/s at this B (--baseline)
    engine_tps: float | None = None  # that engine's tok/s
    # residency (docs/residency.md): the gauge, which memory gives out first with its headroom, and a level past the
    # wall: its predicted tok/s there and why (shown before its measured rate arrives)
    residency: str | None = None
    gives_out: str | None = None
    past_wall: str | None = None
    # a chip nobody measured: the level's tok/s at its backend family's slowest and fastest figures (Roofline.span)
    predicted_range: tuple[float, float] | None = None


@dataclass(frozen=True)
class Snapshot:
    version: int
    t: float
    state: str
    mode: str
    k: int
    b: int
    users: str
    paused: bool
    simulated: bool
    workers: tuple[WorkerRow, ...]
    numbers: Numbers
    system: SystemSample | None
    rss_sum: int
    history: tuple[HistoryPoint, ...]
    markers: tuple[tuple[float, str], ...]
    log: tuple[LogLine, ...]
    steps: tuple[StepRow, ...] = ()  # the levels visited, settled or settling
