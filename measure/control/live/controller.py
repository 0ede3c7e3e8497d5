"""The live controller: the one object the dashboard talks to. No textual here.

It drives a LoadSource (sources/base.py) and composes the jobs of a live view, each in its own module:
statistics over a window (stats.py), admission against the memory budget (admission.py), the wall and
its brake (wall.py), the snapshot the UI reads (snapshot.py) and export (export.py). A sampler thread
(2 Hz by default) drains the source's events, samples the system probes and publishes an immutable
Snapshot; the UI only ever reads the latest one and calls the key actions, so it never blocks.
"""
from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from measure.control.live.admission import Admission
from measure.control.live.export import export
from measure.control.live.snapshot import HistoryPoint, LogLine, Numbers, RunInfo, Snapshot, WorkerRow
from measure.control.live.stats import LiveStats, Window
from measure.control.live.steps import StepLevel, StepReading, StepTable
from measure.core.cost import Cost, joules_per_token
from measure.control.live.wall import ResidencyView, Step, WallLoad, WallWatch, measured_wall, residency_watch
from measure.core import metrics as M
from measure.core import serving
from measure.core.lines import Sample, sample_line, step_row_line
from measure.core.readings import SystemSample, other_work_cores
from measure.machine.power import PowerMeter
from measure.machine.probes import ProcessProbe, SystemProbe, physical_cores, release_free_memory, total_memory_bytes
from measure.machine.host import ThermalReader
from measure.core.units import NS
from measure.core.workload import ClosedLoop, Load, Poisson, closed_loop_users
from measure.sources.base import (Finished, LevelReady, LoadSource, LoadStarted, Log, OutOfMemory, Started, Tokens,
                                  WorkerInfo, WorkerState)
from presets import SLO, Workload

if TYPE_CHECKING:
    from measure.control.plan import RunPlan
    from measure.core.guard import Footprint
    from measure.core.work import WorkModel
    from measure.machine.recorder import Recorder
    from measure.core.records import Mode
    from measure.core.roofline import Prediction, Roofline


class SystemSampler(Protocol):
    """The machine's figures now: probes.SystemProbe live, the recording's in a replay."""

    def sample(self) -> SystemSample: ...


class ProcessSampler(Protocol):
    """RSS and CPU % of each pid found: probes.ProcessProbe live, the recording's in a replay."""

    def sample(self, pids: Iterable[int | None]) -> Mapping[int, tuple[int, float]]: ...

    def ours(self) -> float | None:
        """CPU % (of one core) of inference-top's own processes since the last call (None: not known)."""


@dataclass
class LiveSettings:
    max_tokens: int = 128
    placement: str = ""  # where the engine's layers run (llama.cpp: CPU or GPU), for the header
    engine_on_gpu: bool = True  # the engine's layers run on a GPU: its thermal state is the GPU's (else the CPU's)
    rate: float | None = None
    users: int | None = None  # None: K × B
    window_s: float = 5.0
    history_s: float = 600.0
    sample_hz: float = 2.0
    bandwidth_gbps: float | None = None
    bandwidth_source: str = "unknown"
    chip: str = "unknown"
    ignore_eos: bool = True
    # the memory guard
    memory_budget: int | None = None  # bytes; None: DEFAULT_BUDGET_FRACTION of physical memory
    memory_budget_source: str = ""  # which limit set it (builder.resolve_budget)
    kv_bytes_per_token: float | None = None
    ctx: int = 2048
    force: bool = False
    brake: bool = True
    # goodput and the cost of a token
    slo: SLO | None = None
    cost: Cost | None = None
    engine_baseline: dict[int, float] | None = None  # http: B → the engine's own batched tok/s (--baseline, docs/design/compare.md)
    served: WorkModel | None = None  # http: the served model's work (--model-bytes its config.json or GGUF)

    @classmethod
    def from_plan(cls, plan: RunPlan, brake: bool = True) -> LiveSettings:
        """The live controller's settings from the run plan (`brake`: undo a step up into the memory wall; never
        over HTTP)."""
        return cls(max_tokens=plan.max_tokens, rate=plan.rate, users=plan.users, bandwidth_gbps=plan.bandwidth_gbps,
                   bandwidth_source=plan.bandwidth_source, chip=plan.chip, ignore_eos=plan.ignore_eos,
                   memory_budget=plan.memory_budget,
                   kv_bytes_per_token=plan.choice.kv_bytes_per_token(plan.ctx) if plan.choice else None,
                   memory_budget_source=plan.memory_budget_source, ctx=plan.ctx, force=plan.force,
                   brake=brake and not plan.engine_is_remote, slo=plan.slo, cost=plan.cost,
                   placement=plan.placement(), engine_on_gpu=plan.engine_on_gpu(),
                   engine_baseline=plan.engine_baseline, served=plan.served)


@dataclass(frozen=True)
class LiveHooks:
    """What a LiveController reads the world through, where not the machine's own (a replay's recording, a test's
    fixed readings): the system and process probes and the clock (None: perf_counter_ns); `watch_wall` False for
    no wall watch and no power meter (a replay: the recording's WALL is in its samples)."""

    sys_probe: SystemSampler | None = None
    procs_probe: ProcessSampler | None = None
    clock: Callable[[], int] | None = None
    watch_wall: bool = True


class LiveController:
    def __init__(self, source: LoadSource, workload: Workload, settings: LiveSettings,
                 recorder: Recorder | None = None, roofline: Roofline | None = None,
                 hooks: LiveHooks = LiveHooks()) -> None:
        sys_probe, procs_probe, clock, watch_wall = hooks.sys_probe, hooks.procs_probe, hooks.clock, hooks.watch_wall
        self.source = source
        self.caps = source.capabilities()
        self.workload = workload
        self.settings = settings
        self.recorder = recorder
        self.mode = source.mode
        self.k = source.target_k
        self.b = source.b
        self.paused = False
        self._clock = clock or time.perf_counter_ns
        self.t0 = self._clock()
        self._sys: SystemSampler = sys_probe or SystemProbe(ThermalReader(gpu=settings.engine_on_gpu))
        self._procs: ProcessSampler = procs_probe or ProcessProbe()
        self.stats = LiveStats(settings.window_s, settings.slo)
        self.stats.level_label = f"K={self.k} B={self.b} {self.mode}"
        self.admission = Admission(total_memory_bytes(), settings.memory_budget, settings.force, settings.ctx,
                                   self.caps.weight_bytes, settings.kv_bytes_per_token)
        self.wall = WallWatch(settings.brake) if watch_wall else None
        self.residency = residency_watch(source, self.caps.weight_bytes, self.caps.engine) \
            if watch_wall and self.caps.local and not self.caps.simulated else None  # docs/residency.md
        self.cost = settings.cost or Cost()
        self.power = PowerMeter(self.cost.watts) if watch_wall else None  # a replay has no meter to read
        self.steps = StepTable(settings.slo, self.cost)
        self._rows_written = 0
        self.totals = {"requests": 0, "errors": 0, "tokens": 0}  # since start, for /metrics counters
        self.roofline = roofline  # core/roofline.Roofline: predictions and the attainable line
        self._prompt = 32  # the level's mean prompt tokens the last prediction used (_predict)
        self.info = RunInfo(self.caps.engine, source.meta.model, self.caps.weight_bytes, settings.chip,
                            settings.bandwidth_gbps, settings.bandwidth_source, self.caps.simulated,
                            self.caps.endpoint, roofline.attainable_gbps if roofline else None, settings.placement)
        maxlen = int(settings.history_s * settings.sample_hz)
        self._history: deque[HistoryPoint] = deque(maxlen=maxlen)
        self._markers: deque[tuple[float, str]] = deque(maxlen=64)
        self._log: deque[LogLine] = deque(maxlen=500)
        self._log_seq = 0
        self._version = 0
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._running: deque[tuple[int, float]] = deque()  # the server's running gauge over the window (docs/design/compare.md)
        self._serial_level: str | None = None  # the level a serialising server was last logged at
        self._verdict_since: tuple[str, str, int] | None = None  # (level, verdict, since ns): the verdict now read …
        self._steady: tuple[str, serving.Batching] | None = None  # … and the last one that held STEADY_S (its level)
        self._last_view: Mapping[str, Any] | None = None  # the scrape last read (a new one is a new object)
        self._log_findings = watch_wall  # a replay shows the recording's own log lines, not a second copy
        self._last_sys: SystemSample | None = None
        self._cores = physical_cores()
        self._tps_now = 0.0
        # a step's level begins when its workers are ready (LevelReady) where the source says when
        self._pending: tuple[str, int, int, Mode] | None = None  # (label, K, B, mode) asked, not ready yet
        self._level_kbm = (self.k, self.b, self.mode)  # the K, B, mode of the level the figures count now

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self, thread: bool = True) -> None:
        self.source.start(wait_ready=False)
        self.source.set_users(self.settings.users)  # None: users follow ready workers × B
        self.source.set_load(Load(self.workload, self._arrivals(), self.settings.max_tokens, self.settings.ignore_eos))
        self.log("info", f"serving {self.workload.key}: {self._arrivals_text()}, max_tokens {self.settings.max_tokens}")
        if thread:
            self._thread = threading.Thread(target=self._run, name="live-sampler", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=1.0)
        self.source.close()
        if self.recorder:
            self.recorder.close()

    TRIM_EVERY_S = 60.0

    def _run(self) -> None:
        period = 1.0 / self.settings.sample_hz
        last_trim = time.monotonic()
        while not self._stop.wait(period):
            try:
                self.tick()
            except Exception as exc:  # keep sampling; say what broke
                self.log("error", f"sampler: {type(exc).__name__}: {exc}")
            if time.monotonic() - last_trim >= self.TRIM_EVERY_S:  # RSS stays flat over an hours-long run
                last_trim = time.monotonic()
                release_free_memory()

    def banner(self) -> str | None:
        """A label above everything else (a replay's position); none live."""
        return None

    # ---- key actions (any thread) ------------------------------------------------------------
    def users(self) -> int:
        return closed_loop_users(self.mode, self.k, self.b, self.settings.users)

    def _arrivals(self) -> Poisson | ClosedLoop:
        return Poisson(self.settings.rate) if self.settings.rate else ClosedLoop(self.users())

    def _arrivals_text(self) -> str:
        return f"open loop {self.settings.rate:g} req/s" if self.settings.rate else f"closed loop, {self.users()} users"

    def budget(self) -> int:
        return self.admission.budget

    def footprint(self, k: int, b: int, mode: str | None = None) -> Footprint:
        """K × (weights + runtime overhead measured at warmup) + Σ KV of each worker's contexts."""
        return self.admission.footprint(mode or self.mode, k, b, self.source.capabilities().batch_capacity)

    def _admit(self, k: int, b: int, key: str, mode: str | None = None) -> str | None:
        if not self.caps.local:  # a remote server's memory is not ours to guard
            return None
        refusal, warning = self.admission.check(self.footprint(k, b, mode), key, mode or self.mode)
        if warning:
            self.log("warn", warning)
        return refusal

    def set_k(self, k: int, admit_check: bool = True) -> str | None:
        """Change K; returns a refusal message instead of acting when the change is not possible."""
        if not self.caps.scales_k:
            return "K does not apply here: B sets the concurrent streams"
        if k < 1:
            return "K cannot go below 1"
        if self.caps.max_k is not None and k > self.caps.max_k:
            return (f"K cannot go above {self.caps.max_k}: that many endpoints were given (--url several times, "
                    "or --urls FILE)")
        if admit_check and k > self.k:
            refusal = self._admit(k, self.b, "k")
            if refusal:
                return refusal
        self._step("k", self.k, k)
        old = self.k
        self.k = k
        self.source.scale_to(k)
        self.mark(f"K={k}")
        self.log("info", f"K {old} → {k} ({self._arrivals_text()})")
        return None

    def set_b(self, b: int, admit_check: bool = True) -> str | None:
        """Change B (sequences per engine, or concurrent streams); returns a refusal instead of acting."""
        if self.mode == "instances":
            return "B is the batch inside one engine: press m for batch mode first"
        if b < 1:
            return "B cannot go below 1"
        cap = self.source.capabilities().batch_capacity
        if b > cap:
            return f"B={b} exceeds the {cap} sequences each batch context holds (start with --max-b {b})"
        if admit_check and b > self.b:
            refusal = self._admit(self.k, b, "b")
            if refusal:
                return refusal
        self._step("b", self.b, b)
        old = self.b
        self.b = b
        self.source.set_batch(self.mode, b)
        self.mark(f"B={b}")
        self.log("info", f"B {old} → {b} ({self._arrivals_text()})")
        return None

    def toggle_mode(self) -> str | None:
        others = [m for m in self.caps.modes if m != self.mode]
        if not others:
            return f"{self.caps.engine}: B is the number of concurrent streams; there is no other mode"
        new = others[0]
        if new == "batch":  # batch mode makes a batch context in every worker
            refusal = self._admit(self.k, self.b, "m", mode="batch")
            if refusal:
                return refusal
        self._new_level(self.k, self.b, new, self._clock())
        if self.wall:
            self.wall.load_changed()
        self.mode = new
        self.source.set_batch(self.mode, self.b)
        self.mark(self.mode)
        self.log("info", f"mode → {self.mode}: " + ("+/- and ]/[ change B" if self.mode == "batch"
                                                    else "+/- change K, ]/[ change B in batch mode"))
        return None

    def toggle_pause(self) -> None:
        self.paused = not self.paused
        if self.wall:
            self.wall.load_changed()  # tok/s falls by itself now: never the memory wall
        self.source.pause(self.paused)
        self.mark("pause" if self.paused else "resume")

    def reset_stats(self) -> None:
        with self._lock:
            self.stats.reset(self._clock())
        self.log("info", "statistics reset: request figures count from now")

    def export(self, path: str | Path | None = None) -> Path:
        snap = self.snapshot() or self.tick()
        with self._lock:
            records = self.stats.records()
            levels = list(self.stats.levels)
        path, png = export(snap, self.info, records, self.settings.window_s, path, levels)
        self.log("info", f"exported statistics to {path}" + (f" and the charts to {png}" if png else
                                                               " (pip install matplotlib for a PNG too)"))
        return path

    def mark(self, label: str) -> None:
        t = (self._clock() - self.t0) / NS
        self._markers.append((t, label))
        if self.recorder:
            self.recorder.event(self._clock(), label, type="marker")

    def log(self, level: str, text: str) -> None:
        with self._lock:
            self._log_seq += 1
            self._log.append(LogLine(self._log_seq, (self._clock() - self.t0) / NS, level, text))
        if self.recorder:
            self.recorder.event(self._clock(), text, level=level)

    def snapshot(self) -> Snapshot | None:
        with self._lock:
            return self._snapshot

    def _step(self, kind: str, old: int, new: int) -> None:
        """K or B changes: the brake's memory of the last step, and a new level for the request figures."""
        now = self._clock()
        if self.wall:
            self.wall.step(Step(kind, old, new, now, self._tps_now))
        k, b = (new, self.b) if kind == "k" else (self.k, new)
        self._new_level(k, b, self.mode, now)

    def _new_level(self, k: int, b: int, mode: Mode, now: int) -> None:
        """The level asked begins now, or, where the source says when its workers are ready, then: requests
        served while new workers start or warm up count in the level before."""
        label = f"K={k} B={b} {mode}"
        if self.caps.level_ready:
            self._pending = (label, k, b, mode)
        else:
            self._level_kbm = (k, b, mode)
            self.begin_level(label, now)

    def level_ready(self, ev: LevelReady) -> None:
        """The source's workers of the level asked last are ready: that level begins at ev.t_ns."""
        p = self._pending
        if p is not None and (ev.k, ev.b, ev.mode) == p[1:]:
            self._pending = None
            self._level_kbm = p[1:]
            self.begin_level(p[0], ev.t_ns)

    def begin_level(self, label: str, t_ns: int) -> None:
        """Request figures count from here (a replay calls this at the recorded time)."""
        with self._lock:
            self.stats.new_level(label, t_ns)
        if self.recorder:
            self.recorder.event(t_ns, label, type="level")

    # ---- sampling ----------------------------------------------------------------------------
    def _drain(self) -> None:
        events = self.source.events
        while events is not None:
            try:
                ev = events.get_nowait()
            except queue.Empty:
                return
            if isinstance(ev, Tokens):
                self.stats.add_tokens(ev.worker, ev.request_id, ev.token_ns)
            elif isinstance(ev, Started):
                self.stats.add_started(ev.request_id, ev.t_ns)
            elif isinstance(ev, Finished):
                rec = ev.record
                with self._lock:
                    self.stats.add_record(rec)
                    self.totals["requests"] += 1
                    self.totals["errors"] += 1 if rec.error else 0
                    self.totals["tokens"] += rec.output_tokens
                if rec.error:  # one the source already explained (its endpoint went down) is not a new alarm
                    self.log("warn" if (rec.extra or {}).get("endpoint_down") else "error",
                             f"request {rec.request_id} failed: {rec.error}")
                if self.recorder:
                    self.recorder.record(rec)
            elif isinstance(ev, Log):
                self.log(ev.level, ev.text)
            elif isinstance(ev, LoadStarted):
                self.load_started(ev.t_ns)
            elif isinstance(ev, LevelReady):
                self.level_ready(ev)
            elif isinstance(ev, OutOfMemory):
                self.out_of_memory(ev)

    def out_of_memory(self, ev: OutOfMemory) -> None:
        """A worker was OOM-killed at a step: the guard refuses that step (and larger) from now on."""
        self.mark("OOM")
        self.log("error", self.admission.note_oom(ev.mode, ev.k, ev.b, self.source.capabilities().batch_capacity))

    def load_started(self, t_ns: int) -> None:
        """The load began flowing: rates count from here, not from when the controller was made."""
        with self._lock:
            self.stats.load_started(t_ns)
        if self.recorder:
            self.recorder.event(t_ns, "load started", type="load_started")

    def _check_wall(self, prev: SystemSample | None, cur: SystemSample, agg: float, now: int) -> None:
        hit = self.wall.check(prev, cur, agg, now) if self.wall else None
        if hit is None or not hit.first:
            return
        assert self.wall is not None  # the hit came from it
        self.mark("WALL")
        self.log("error", f"memory wall: {hit.why}")
        if hit.undo:
            u = hit.undo
            (self.set_k if u.kind == "k" else self.set_b)(u.old, admit_check=False)
            self.log("warn", f"brake: undid the last step, {u.kind.upper()} {u.new} → {u.old} ({hit.rates})")
        elif not self.wall.brake:
            self.log("warn", "--no-brake: the last step stays; lower K or B by hand")

    def _predicted_past(self, level: Prediction | None, workers: list[WorkerInfo], agg: float, now: int
                        ) -> tuple[float | None, float | None, str, ResidencyView]:
        """_predicted's (TPOT, tok/s, by what), the level's rate past the memory wall in its place where it is past
        it (the collapse drawn before the measured one arrives; docs/residency.md), its TPOT slower by as much (the
        same streams, each step longer: the screen said TPOT 14.0 ms predicted beside 6.6 tok/s), and the
        residency view."""
        pred, pred_tps, pred_by = self._predicted(level, workers)
        res = self._residency(workers, agg, now, level)
        if res.past_tps is not None:
            if pred is not None and pred_tps and res.past_tps > 0:
                pred *= pred_tps / res.past_tps
            pred_tps, pred_by = res.past_tps, f"residency roofline: {res.past_note}"
        return pred, pred_tps, pred_by, res

    def _residency(self, workers: list[WorkerInfo], agg: float, now: int, level: Prediction | None) -> ResidencyView:
        """The workers' residency, the memory that gives out first, and this level's rate past the wall; the wall's
        watch keeps the level's predicted rate for the brake's decision."""
        if self.residency is None:
            return ResidencyView()
        fp = self.footprint(self.k, self.b)
        view = self.residency.tick([w.pid for w in workers if not w.state.gone], agg, now, fp,
                                   fp.kv / max(1, fp.k * max(1, fp.b)), level)
        if self.wall:
            self.wall.predicted_tps = view.past_tps if view.past_tps is not None else (
                level.aggregate_tps if level else None)
        return view

    def _predict(self, workers: list[WorkerInfo]) -> Prediction | None:
        """The roofline's figures for the level now: its mode, K, B, the workers' threads, the prompts and
        answers being served (the level's own records where there are some)."""
        if self.roofline is None:
            return None
        with self._lock:
            prompts = list(self.stats.figures.prompt_tokens)
        prompt = round(sum(prompts) / len(prompts)) if prompts else 32
        threads = next((w.threads for w in workers if w.threads and not w.state.gone), None)
        self._prompt = prompt
        return self.roofline.level(self.mode, self.k, self.b, threads, prompt, self.settings.max_tokens)

    def _span(self, level: Prediction | None, past: bool) -> tuple[float, float] | None:
        """The level's predicted tok/s as a range where the machine is a chip nobody measured (Roofline.span);
        None for a measured one, and past the wall (the residency roofline's rate stands alone there)."""
        if level is None or past or self.roofline is None:
            return None
        return self.roofline.span(level, self._prompt, self.settings.max_tokens)

    def state(self, workers: list[WorkerInfo]) -> str:
        if self.wall and self.wall.active(self._clock()):
            return "WALL"
        if self.paused:
            return "paused"
        active = [w for w in workers if not w.state.leaving]
        if any(w.state == WorkerState.DOWN for w in active):
            return "degraded"
        if not any(w.ready_ns for w in active):
            return "loading"
        if any(not w.ready_ns for w in active) or len(active) < self.k:
            return "warming"
        return "steady"

    def tick(self, state: str | None = None) -> Snapshot:
        """One sample: drain, window, probes, wall, snapshot. `state`: a recorded state (replay)."""
        self._drain()
        now = self._clock()
        t = (now - self.t0) / NS
        with self._lock:
            win = self.stats.window(now)
            request_numbers = self.stats.request_numbers()
        p50, p90 = M.percentile(win.tpots, 50), M.percentile(win.tpots, 90)
        workers = self.source.workers()
        bw, ep_tpot = self._bandwidth(win)
        level = self._predict(workers)
        pred, pred_tps, pred_by, res = self._predicted_past(level, workers, win.agg_tps, now)
        attainable = self.roofline.attainable_gbps if self.roofline else None
        prev_sys, sysv = self._last_sys, self._sys.sample()
        self._last_sys, self._tps_now = sysv, win.agg_tps
        procs = self._procs.sample([w.pid for w in workers if not w.state.gone])
        ours = self._procs.ours()
        rows = self._worker_rows(workers, win, ep_tpot, procs)
        # the spec line of several endpoints: Σ β of those in use, where every one's chip is known
        in_use = [w for w in workers if w.streams]
        spec = M.sum_gbps(w.bandwidth_gbps for w in in_use) if self.caps.per_endpoint_bandwidth else None
        self.admission.observe([w.rss for w in workers if w.ready_ns and w.rss])
        self._check_wall(prev_sys, sysv, win.agg_tps, now)
        live_rows = [r for r in rows if r.state not in ("dead", "retired")]
        cpu_sum = sum(r.cpu or 0.0 for r in live_rows)
        numbers = Numbers(
            **request_numbers, level=self.stats.level_label, agg_tps=win.agg_tps, streams=len(win.tpots),
            concurrency=win.concurrency,
            tpot_p50=p50, tpot_p90=p90, predicted_tpot=pred, predicted_tps=pred_tps, predicted_by=pred_by,
            mbu=bw.gbps / attainable if bw.gbps is not None and attainable else None,
            bw_gbps=bw.gbps, bw_formula=bw.formula, spec_gbps=spec,
            server_view=(view := self.source.server_view()), workers_cpu_percent=cpu_sum,
            batching=self._batching(win, view, now), engine_tps=(engine := self._engine_tps()),
            server_efficiency=win.agg_tps / engine if engine else None,
            footprint=self.footprint(self.k, self.b).total if self.caps.local else None,
            budget=self.budget() if self.caps.local else None,
            wall=self.wall.reason if self.wall else None, **res.numbers(),
            predicted_range=self._span(level, res.past_tps is not None),
            ceiling=measured_wall(bw.gbps, self.settings.bandwidth_gbps, cpu_sum, self._cores, attainable,
                                  level.binding if level else None, self._wall_load(win, live_rows, sysv, ours)),
        )
        watts = self.power.sample() if self.power else None
        with self._lock:
            figures, level_start = self.stats.figures, self.stats.level_start_ns
        numbers = self._step_row(numbers, level_start, StepReading(
            now, self.state(workers) == "steady" and self._pending is None, figures, win.agg_tps, win.concurrency,
            sysv.mem_used, bw.gbps, pred_tps, numbers.ceiling, watts, sysv.thermal,
            numbers.predicted_range))  # pending: the row left stays
        self._history.append(HistoryPoint(t, win.agg_tps, p50, p90, pred, bw.gbps, sysv.mem_used, sysv.swap_used, pred_tps))
        state = state or self.state(workers)
        if self.recorder:  # everything a replay needs to draw this moment again
            self.recorder.write(sample_line(Sample(
                t_ns=now, t=t, k=self.k, b=self.b, mode=self.mode, paused=self.paused, state=state,
                users=self.users(), system=dict(vars(sysv)), workers=[vars(w) for w in workers],
                procs={str(p): list(v) for p, v in procs.items()}, ours_cpu=ours, agg_tps=win.agg_tps, tpot_p50=p50,
                bw_gbps=bw.gbps, concurrency=win.concurrency)))
        return self._publish(t, state, rows, numbers, sysv, sum(r.rss or 0 for r in live_rows))

    def _wall_load(self, win: Window, live_rows: list[WorkerRow], sysv: SystemSample, ours: float | None) -> WallLoad:
        """measured_wall's load: remote or not, the streams asked and decoding, the cores the workers' threads were
        given, and the cores other work holds (the machine's CPU less our own processes', where they were read)."""
        return WallLoad(remote=not self.caps.local, streams_asked=self.k * self.b, streams_decoding=win.concurrency,
                        threads=sum(r.threads or 0 for r in live_rows), engines=sum(1 for r in live_rows if r.threads),
                        others=0.0 if ours is None else other_work_cores(sysv.cpu_percent / 100.0 * self._cores,
                                                                           ours / 100.0))

    def _engine_tps(self) -> float | None:
        """The engine's own batched tok/s at this B, where --baseline measured that B (the server-efficiency line)."""
        return (self.settings.engine_baseline or {}).get(self.b)

    def _batching(self, win: Window, view: Mapping[str, Any] | None, now: int) -> serving.Batching | None:
        """Over HTTP: does the server batch the streams open (docs/design/server-vs-engine.md): its running gauge's median over
        the window's scrapes since the level began (each scrape once; at least GAUGE_SCRAPES of them), where its
        /metrics has one, else the window's decoding concurrency; a server newly found to serialise is logged
        once per level."""
        if self.caps.local:
            return None
        running = self._running
        if view is not None and "running" in view and view is not self._last_view:  # a new scrape (≈ 1 s)
            running.append((now, float(view["running"])))
        self._last_view = view
        while running and running[0][0] < max(now - int(self.settings.window_s * NS), self.stats.level_start_ns):
            running.popleft()
        gauge = M.percentile([r for _, r in running], 50) if len(running) >= serving.GAUGE_SCRAPES else None
        found = self._held(serving.batching(win.concurrency, win.decoding, gauge, win.span_s, win.stepped), now)
        if found is not None and found.verdict != "batches" and self._serial_level != self.stats.level_label \
                and self._log_findings:
            self._serial_level = self.stats.level_label
            self.log("warn", f"the server {found.verdict}: {found.served:.1f} streams served at once of "
                             f"{found.open:.1f} open ({found.source})")
        return found

    def _held(self, found: serving.Batching | None, now: int) -> serving.Batching | None:
        """The verdict once it has held serving.STEADY_S at this level (its figures the latest); until a new one
        has, the last that held at this level, else None: a moment's reading is neither shown nor logged."""
        level = self.stats.level_label
        if found is None:
            self._verdict_since = None
        elif self._verdict_since is None or self._verdict_since[:2] != (level, found.verdict):
            self._verdict_since = (level, found.verdict, now)
        if found is not None and self._verdict_since is not None \
                and now - self._verdict_since[2] >= serving.STEADY_S * NS:
            self._steady = (level, found)
        return self._steady[1] if self._steady is not None and self._steady[0] == level else None

    def _bandwidth(self, win: Window) -> tuple[M.Bandwidth, dict[int | None, float]]:
        """The bandwidth product now, and over HTTP each endpoint's TPOT p50 over its streams (metrics.http_bandwidth)."""
        W = self.caps.weight_bytes
        if self.caps.per_endpoint_bandwidth:
            ep_tpot = {wid: tp for wid, tp in (win.tpot_by_worker or {}).items() if tp}
            if self.settings.served is not None:  # what a step's tokens read (an MoE: its experts), not the file
                return M.http_read_bandwidth(self.settings.served, [(tp, win.per_worker_tps.get(wid))
                                                                     for wid, tp in ep_tpot.items()]), ep_tpot
            return M.http_bandwidth(W, ep_tpot.values()), ep_tpot
        if self.roofline is not None and self.caps.local:  # the bytes a token really reads (experts: not the file)
            return M.read_bandwidth(self.mode, self.roofline.work, agg_tps=win.agg_tps,
                                    steps_per_s=list(win.steps_per_s.values())), {}
        return M.bandwidth_product(self.mode, W, agg_tps=win.agg_tps, steps_per_s=list(win.steps_per_s.values())), {}

    def _worker_rows(self, workers: list[WorkerInfo], win: Window, ep_tpot: dict[int | None, float],
                     procs: Mapping[int, tuple[int, float]]) -> tuple[WorkerRow, ...]:
        W = self.caps.weight_bytes
        return tuple(
            WorkerRow(w.wid, w.pid, str(w.state), w.threads, *_rss_cpu(procs, w), win.per_worker_tps.get(w.wid, 0.0),
                      w.requests_done,
                      w.last_ttft_s, label=w.label, errors=w.errors, active=w.active, streams=w.streams,
                      server=w.server, bandwidth_gbps=w.bandwidth_gbps, error=w.error,
                      bw_gbps=(M.http_read_bandwidth(self.settings.served, [(ep_tpot.get(w.wid),
                                                                              win.per_worker_tps.get(w.wid))])
                               if self.settings.served is not None else M.http_bandwidth(W, [ep_tpot.get(w.wid)])
                               ).gbps)
            for w in workers
        )

    def _publish(self, t: float, state: str, rows: tuple[WorkerRow, ...], numbers: Numbers, sysv: SystemSample,
                 rss_sum: int) -> Snapshot:
        """The new Snapshot, the one the dashboard reads from now on."""
        table = tuple(self.steps.table())
        with self._lock:
            self._version += 1
            snap = Snapshot(
                version=self._version, t=t, state=state, mode=self.mode, k=self.k, b=self.b,
                users=f"{self.settings.rate:g}/s" if self.settings.rate else str(self.users()), paused=self.paused,
                simulated=self.caps.simulated, workers=rows, numbers=numbers, system=sysv,
                rss_sum=rss_sum, history=tuple(self._history), markers=tuple(self._markers), log=tuple(self._log),
                steps=table,
            )
            self._snapshot = snap
        return snap

    def _predicted(self, level: Prediction | None, workers: list[WorkerInfo]
                   ) -> tuple[float | None, float | None, str]:
        """(TPOT, aggregate tok/s, by what): the roofline's level, else K·W/β as a bench cell's, else nothing."""
        if level is not None:
            pred_by = f"roofline ({level.binds()})"
            if caveat := level.caveat():
                pred_by += f"; {caveat}"
            return level.tpot_s, level.aggregate_tps, pred_by
        eps_gbps = [w.bandwidth_gbps for w in workers] if self.caps.per_endpoint_bandwidth else None
        if (kwb := M.kwb_tpot(self.k, self.caps.weight_bytes, self.settings.bandwidth_gbps, self.mode,
                              eps_gbps)) is not None:
            return kwb, None, "K·W/β"  # as a bench cell's, in every mode
        return None, None, ""

    def _step_row(self, numbers: Numbers, level_start: int, reading: StepReading) -> Numbers:
        """The step table ticked with this reading (a settled row left behind written to the recording); the
        numbers with the level's goodput, power and cost from its row."""
        lk, lb, lmode = self._level_kbm if self._pending else (self.k, self.b, self.mode)
        row = self.steps.tick(StepLevel(self.stats.level_label, lmode, lk, lb, level_start), reading)
        watts, tps = reading.watts, reading.agg_tps
        numbers = replace(numbers, goodput_rps=row.goodput_rps, goodput_tps=row.goodput_tps,
                          slo_attainment=row.attainment, watts=watts, joules_per_token=joules_per_token(watts, tps),
                          usd_per_mtok=self.cost.usd_per_mtok(tps, watts))
        if self.recorder:
            while self._rows_written < len(self.steps.rows):  # a level left behind, settled: its row
                self.recorder.write(step_row_line(self.steps.rows[self._rows_written], reading.now_ns))
                self._rows_written += 1
        return numbers


def _rss_cpu(procs: Mapping[int, tuple[int, float]], w: WorkerInfo) -> tuple[int | None, float | None]:
    """A worker's RSS and CPU % as its process probe saw them; its own RSS and no CPU where the probe has no such pid
    (none, or it ended)."""
    got = procs.get(w.pid) if w.pid is not None else None
    return (w.rss, None) if got is None else got
