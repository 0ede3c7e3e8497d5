"""Client actors on a Ray cluster (`bench --ray ADDRESS|auto --clients N [--weights 2,1,1]`, docs/design/ray.md).

When one client machine cannot drive a server, N client actors, one per node (a placement group spreads them),
each send their share of the one seeded open-loop schedule (clients.Segment, weighted where --weights says so)
from one start. The driver (this process):

- measures each actor's perf_counter against its own by round trips (the actor's reading lies between the send
  and the receive: offset = its reading − the midpoint, bound = half the round trip; the shortest of
  ROUND_TRIPS kept), and gives each actor the one start on its own clock;
- polls every actor every POLL_S for the records written since, and appends them, moved onto the driver's clock
  and marked with their client, to the one records.jsonl as they arrive;
- names a client whose actor died (Ray says so at the next poll) or that has not answered for STALL_S, stops
  one silent for `lost_s`, keeps its records so far and says the share of the schedule it did not send;
- writes the combined cell: `report --combine`'s figures over every client's records pooled on the driver's clock.

Ray is an optional extra (pip install 'inference-top[cluster]'): imported inside the functions that use it, its
plumbing (joining the cluster, the one actor class, placing the actors, their clocks, the poll that names a dead or
stalled client) in measure/machine/ray_cluster.py's ClientGroup, which the live dashboard's clients use too
(sources/ray_clients.py); here: each actor's job (BenchShare) and what a bench does with its clients. Every node
runs the same inference-top (the actors import this module).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, TypedDict

from measure.control.bench.cell import Cell
from measure.control.plan import RunPlan
from measure.control.wiring import make_source
from measure.control.bench.sweep import SweepConfig
from measure.core.clients import ClientShare, shares
from measure.core.records import RequestRecord, shifted
from measure.machine.ray_cluster import ROUND_TRIPS, ClientGroup, ClusterError, ClusterSpec, RayClient, one_line

NS = 1_000_000_000
LOST_S = 15.0  # … and for this long is stopped and counted as lost (its unsent share said)
LEAD_S = 1.0  # the start is this far after the last clock check (every actor told before it)
PROGRESS_S = 2.0  # a progress line this often


def parse_weights(text: str | None, n: int | None) -> list[int] | None:
    """--weights 2,1,1 → [2, 1, 1]: one whole number ≥ 1 for each of the N clients (n None: as many as given).
    ClusterError: one line."""
    if not text:
        return None
    try:
        w = [int(x) for x in text.split(",")]
    except ValueError:
        raise ClusterError(f"--weights {text!r}: whole numbers separated by commas, one per client, e.g. 2,1,1") \
            from None
    if min(w) < 1:
        raise ClusterError(f"--weights {text}: each weight is a whole number ≥ 1, e.g. 2,1,1")
    if n is not None and len(w) != n:
        raise ClusterError(f"--weights {text}: give {n} weights, one per --clients {n}, e.g. "
                           f"{','.join(['2'] + ['1'] * (n - 1))}")
    return w


def refusal(plan: RunPlan, cells: int, reps: int, find: bool) -> str | None:
    """Why this bench cannot run on client actors (one line), or None."""
    if not plan.engine_is_remote:
        return "--ray runs clients of a server: give --engine http --url … (the server every node can reach)"
    if find or plan.sessions is not None:
        return "--ray runs one load of a sweep: not with --find or --turns"
    if plan.arrivals is None:
        return ("--ray splits one open-loop schedule over the clients (--rate, --arrivals or a trace:): in a closed "
                "loop each client's users would make their own times")
    if plan.arrivals.after is not None:
        return (f"--ray: --workload {plan.workload.key}'s follow-ups wait for their parents' answers, which one "
                "client sees only for its own requests: run it from one client")
    if cells > 1 or reps > 1:
        return (f"--ray runs one load: one cell and one rep (this asks {cells} cells × {reps} reps); run one bench "
                "per cell")
    return None


# ---- the actor -----------------------------------------------------------------------------------------

class Taken(NamedTuple):
    """What a client actor's take() hands the driver: the records and lines since the last take, and how many
    requests of its share were sent."""

    records: list[RequestRecord]
    lines: list[str]
    sent: int


class BenchShare:
    """A client actor's job in a bench (machine/ray_cluster.ClientJob): its share of the schedule through its own
    load source, made and started on its node (`start`), sent from the one start (`run`, through the actor's
    `call`), its records kept until the driver takes them (`take`, answered while `run` runs)."""

    CALLS: ClassVar[tuple[str, ...]] = ("run",)

    def __init__(self, plan: RunPlan, cfg: SweepConfig, i: int, n: int, weights: list[int] | None) -> None:
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []
        self._lines: list[str] = []
        self._plan, self._cfg = plan, replace(cfg, out_dir=None)
        self._share = ClientShare((i, n), None, weights=weights)
        self._cfg.client = self._share
        assert plan.arrivals is not None  # refusal(): an open loop
        self._total = shares(cfg.requests, weights or [1] * n)[i - 1]
        self._source: Any = None

    def _keep(self, rec: RequestRecord) -> None:
        with self._lock:
            self._records.append(rec)

    def _say(self, line: str) -> None:
        with self._lock:
            self._lines.append(line)

    def start(self) -> int:
        """The source made and started (connections, client processes), nothing sent: its share's size."""
        self._source = make_source(self._plan, events=False, on_record=self._keep, per_cell=True)
        self._source.start()
        return self._total

    def run(self, t0_ns: int) -> list[dict[str, Any]]:
        """The share from t0 (this machine's perf_counter): its cells (one) as dicts."""
        from measure.control.bench.sweep import run_sweep

        self._share.t0_ns = t0_ns
        self._cfg.cell_timeout_s += max(0.0, (t0_ns - time.perf_counter_ns()) / NS)  # the wait is not the cell's
        try:
            cells, _, self._source = run_sweep(self._source, self._plan.workload, self._cfg, self._say)
        finally:
            self.close()
        return [c.to_json() for c in cells]

    def take(self) -> Taken:
        """The records and lines since the last take, and how many requests of the share were sent."""
        with self._lock:
            recs, lines = self._records, self._lines
            self._records, self._lines = [], []
        made = self._share.made
        return Taken(recs, lines, made.issued if made else 0)

    def close(self) -> None:
        if self._source is not None:
            self._source.close()
            self._source = None


class ClientHeader(TypedDict):
    """A client in records.jsonl's header (ray.client_list): where it ran and its clock against the driver's."""

    client: int
    node_id: str
    ip: str
    host: str
    pid: int | None
    requests: int
    clock_offset_ns: int
    clock_bound_ns: int
    rtt_ns: int


class ClientOutcome(TypedDict):
    """How a client ended: the `client` event's fields at the end of records.jsonl."""

    client: int
    state: str
    why: str | None
    sent: int
    requests: int
    records: int


# ---- the driver ----------------------------------------------------------------------------------------

@dataclass
class Client(RayClient):
    """What the driver knows of one client actor in a bench (machine/ray_cluster.RayClient's, and its share)."""

    requests: int = 0  # its share of the schedule
    state: str = "starting"  # starting | running | done | died (its process) | failed (its load raised) | lost
    why: str | None = None
    sent: int = 0  # requests of its share sent, as it last said
    records: list[RequestRecord] = field(default_factory=list)  # on the driver's clock
    cells: list[dict[str, Any]] | None = None

    def header(self) -> ClientHeader:
        return {"client": self.i, "node_id": self.node_id, "ip": self.ip, "host": self.host, "pid": self.pid,
                "requests": self.requests, "clock_offset_ns": self.offset_ns, "clock_bound_ns": self.bound_ns,
                "rtt_ns": self.rtt_ns}

    def outcome(self) -> ClientOutcome:
        """How it ended (the `client` event at the end of records.jsonl)."""
        return {"client": self.i, "state": self.state, "why": self.why, "sent": self.sent, "requests": self.requests,
                "records": len(self.records)}


@dataclass
class ClusterRun:
    cells: list[Cell]
    clients: list[Client]
    warnings: list[str]

    @property
    def failed(self) -> list[Client]:
        return [c for c in self.clients if c.state in ("died", "failed", "lost")]


def run_cluster(spec: ClusterSpec, plan: RunPlan, cfg: SweepConfig, header: dict[str, Any], out: Path,
                say: Callable[[str], None] = print, lost_s: float = LOST_S,
                on_start: Callable[[list[Client]], None] | None = None) -> ClusterRun:
    """The bench's one load from N client actors (machine/ray_cluster.ClientGroup, each actor's job a
    BenchShare); records.jsonl and the combined cell in `out` (the caller writes the summary). `header`: the run's
    header (plan.header(…)); the clients' fields are added. ClusterError where it cannot start. `on_start` is called
    with the clients once they run (the tests stop one there)."""
    group: ClientGroup[Client] = ClientGroup(spec.address, lambda text, level: say(text))
    try:
        n = spec.n
        if n is None:
            n = group.nodes()
            say(f"--clients not given: one client per node of the cluster, {n}")
        weights = spec.weights or [1] * n
        clients = [Client(i, n, w) for i, w in enumerate(weights, 1)]
        shares = group.open(clients, [partial(BenchShare, plan, cfg, c.i, n, spec.weights) for c in clients])
        for c, requests in zip(clients, shares):
            c.requests = requests
        warnings = _placement_warnings(clients, plan)
        for w in warnings:
            say(f"warning: {w}")
        group.sync_clocks()
        for c in clients:
            say(f"{c.name}: {c.requests} of {cfg.requests} requests; clock {c.offset_ns / 1e6:+.3f} ms from this "
                f"driver's, ± {c.bound_ns / 1e6:.3f} ms (half the shortest of {ROUND_TRIPS} round trips)")
        t0 = time.perf_counter_ns() + int(LEAD_S * NS)
        start_unix = time.time() + LEAD_S
        runs = {c.i: c.actor.call.remote("run", t0 + c.offset_ns) for c in clients}
        for c in clients:
            c.state = "running"
        from measure.machine.recorder import Recorder

        head = _run_header(header, clients, spec, group.spread, t0, start_unix)
        recorder = Recorder(out / "records.jsonl", head, on_error=lambda m: say(f"warning: {m}; later records are "
                                                                                  "not kept"))
        say(f"{n} clients start together in {LEAD_S:.1f} s; records → {out}/records.jsonl")
        try:
            if on_start:
                on_start(clients)
            _Follow(group, runs, recorder, say, lost_s, cfg.cell_timeout_s + LEAD_S + 30.0).run()
        finally:
            for c in clients:
                text = f"{c.name} {c.state}" + (f": {c.why}; {unsent(c, cfg.requests)}" if c.why else "")
                recorder.event(time.perf_counter_ns(), text, type="client", **c.outcome())
            recorder.close()
        warnings += [f"{c.name} {c.state}: {c.why}; {unsent(c, cfg.requests)}" for c in clients
                     if c.state in ("died", "failed", "lost")]
        cells = combined_cells(clients, head, spec.weights)
        return ClusterRun(cells, clients, warnings)
    finally:
        group.close()


def _run_header(header: dict[str, Any], clients: list[Client], spec: ClusterSpec, spread: bool, t0: int,
                start_unix: float) -> dict[str, Any]:
    """records.jsonl's header: the run's, with the common start and the clients (their clocks)."""
    return dict(header, segment=None, start_perf_ns=t0, start_at_unix=round(start_unix, 6),
                clock_anchor={"unix": start_unix, "perf_ns": t0},
                ray={"address": spec.address, "clients": len(clients), "weights": spec.weights, "spread": spread,
                     "clock": "each actor's perf_counter − the driver's, by round trips: bound = half the "
                              "round trip (docs/design/ray.md)",
                     "client_list": [c.header() for c in clients]})


def _placement_warnings(clients: list[Client], plan: RunPlan) -> list[str]:
    out = []
    versions = {c.version for c in clients}
    if len(versions) > 1:
        out.append(f"the nodes run different inference-top versions ({', '.join(sorted(map(str, versions)))})")
    from urllib.parse import urlsplit

    hosts = {urlsplit(e.url).hostname for e in plan.endpoints} or {urlsplit(plan.url or "").hostname}
    if len({c.ip for c in clients}) > 1 and hosts & {"127.0.0.1", "localhost", "::1"}:
        out.append("the --url is loopback: each node asks its own 127.0.0.1; give an address every node reaches")
    return out


class _Follow:
    """The bench's follow of its clients over the group's poll: each client's share run (`runs`) watched beside
    its takes until each is done, died, failed or lost; its records onto the driver's clock, into the file. A
    client silent past lost_s is stopped (the group's poll), all are stopped past the run's limit."""

    def __init__(self, group: ClientGroup[Client], runs: dict[int, Any], recorder: Any, say: Callable[[str], None],
                 lost_s: float, limit_s: float) -> None:
        self.group, self.runs, self.recorder, self.say = group, runs, recorder, say
        self.lost_s, self.limit_s = lost_s, limit_s
        self.end = time.monotonic() + limit_s
        self.next_progress = time.monotonic() + PROGRESS_S
        self.live = {c.i: c for c in group.clients}

    def run(self) -> None:
        while self.live:
            ready = self.group.poll(list(self.live.values()), self._absorb, self._gone,
                                    also=[self.runs[i] for i in self.live], lost_s=self.lost_s)
            for c in list(self.live.values()):
                if self.runs[c.i] in ready:
                    self._finish(c)
            self._watch(time.monotonic())

    def _finish(self, c: Client) -> None:
        """A client whose run returned: its cells and its last records."""
        ray = self.group.ray
        try:
            c.cells = ray.get(self.runs[c.i])
        except ray.exceptions.RayActorError as exc:
            self._gone(c, "died", one_line(exc))
            return
        except ray.exceptions.RayError as exc:  # its load raised (the actor lives): what it said
            self._gone(c, "failed", one_line(exc))
            return
        try:  # what it wrote after the last poll
            self.group.drain(c, self._absorb, self.lost_s)
        except ray.exceptions.RayError as exc:  # (GetTimeoutError is one)
            self._gone(c, "died", f"finished, then its last records were lost: {one_line(exc)}")
            return
        c.state = "done"
        self.live.pop(c.i)

    def _watch(self, now: float) -> None:
        """All are stopped past the limit; a progress line every PROGRESS_S."""
        if now > self.end:
            for c in list(self.live.values()):
                self.group.kill(c)
                self._gone(c, "lost", f"still running after {self.limit_s:.0f} s (the cell's timeout and the start), "
                                      "stopped")
        if now >= self.next_progress:
            self.next_progress = now + PROGRESS_S
            self.say("progress: " + " · ".join(f"{c.i}/{c.n} {c.state} {c.sent}/{c.requests} sent "
                                               f"{len(c.records)} done" for c in self.group.clients))

    def _absorb(self, c: Client, got: Taken) -> None:
        recs, lines, sent = got
        c.sent = max(c.sent, sent)
        for line in lines:
            self.say(f"  client {c.i}/{c.n}: {line.strip()}")
        for rec in recs:
            rec = shifted(rec, -c.offset_ns)
            rec.extra = dict(rec.extra or {}, client=c.i)
            c.records.append(rec)
            self.recorder.record(rec)

    def _gone(self, c: Client, state: str, why: str) -> None:
        c.state, c.why = state, why
        self.say(f"{c.name} {state}: {why}; its {len(c.records)} records kept")
        self.live.pop(c.i, None)
        c.poll = None


def unsent(c: Client, total: int) -> str:
    """The share of the schedule a client that died or was stopped did not send (from its last answer)."""
    not_sent = max(0, c.requests - c.sent)
    no_record = max(0, c.sent - len(c.records))
    return (f"{c.sent} of its {c.requests} requests sent, {len(c.records)} with a record; {not_sent} requests of "
            f"the schedule ({not_sent / max(1, total):.0%} of {total}) were not sent"
            + (f", {no_record} sent without a record" if no_record else ""))


def combined_cells(clients: list[Client], header: dict[str, Any], weights: list[int] | None) -> list[Cell]:
    """`report --combine`'s cells over every client's records, all on the driver's clock (one start for all): a
    client that died or was stopped counts with the records it left."""
    from measure.control.bench.runs import Run, cells_from_records, combine
    from measure.core.lines import RunHeader

    runs = []
    for c in clients:
        h = RunHeader.of(dict(header, segment=[c.i, c.n], weights=weights, ray=None))
        cells = ([Cell.from_json(d) for d in c.cells] if c.cells and any(d.get("status") == "ok" for d in c.cells)
                 else cells_from_records(c.records, h, []))
        runs.append(Run(f"client {c.i}/{c.n}", h, cells, records=c.records))
    if len(runs) == 1:
        return runs[0].cells
    return combine(runs).cells


__all__ = ["ClusterError", "ClusterRun", "Client", "BenchShare", "run_cluster", "parse_weights", "refusal",
           "unsent", "combined_cells", "LOST_S"]
