"""The headless sweep: one fleet, scaled cell by cell, `requests` per rep, raw records + a summary."""
from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from measure.control.bench.cell import (Cell, CellMachine, CellPrediction, CellRow, Spec, add_scaling, answer_notes, client_note, fmt,
                                  prediction_error, prediction_text,
                                  skipped as skipped_cell, write_summary)
from measure.machine import host
from measure.core import metrics as M
from measure.core.guard import (DEFAULT_OVERHEAD_BYTES, EngineMemory, OomKill, admit, engine_footprint, fmt_gib,
                                oom_refusal, overhead_after_oom)
from measure.core.readings import ThermalLog, crowded
from measure.core.residency import LevelFit, LevelMemory, budget_skip, level_fit, past_wall_note, residency
from measure.machine.probes import OtherWork, SystemProbe, WallCheck, auto_threads, physical_cores
from measure.core.records import MODES, RequestRecord
from measure.core.roofline import OTHERS_SAID
from measure.core.sessions import turn_note
from measure.core.server_cache import cache_note
from measure.core.workload import ClosedLoop, Load, Poisson, closed_loop_users
from measure.sources.base import CellStopped, FiniteLoadSource, LoadSource, SourceError, finite
from presets import Workload

CLIENT_THERMAL = "this client machine's, not the servers': "  # an HTTP cell's thermal state is read where it runs

if TYPE_CHECKING:
    from measure.control.plan import RunPlan
    from measure.core.arrivals import ArrivalSpec, Schedule
    from measure.core.clients import ClientShare, Segment
    from measure.core.cost import Cost
    from measure.core.guard import Footprint
    from measure.core.roofline import Roofline
    from measure.core.sessions import Sessions, SessionSpec
    from measure.core.work import WorkModel
    from presets import SLO


@dataclass
class SweepConfig:
    ks: Sequence[int] = (1,)
    bs: Sequence[int] = (1,)
    requests: int = 16
    max_tokens: int = 256
    reps: int = 1
    rate: float | None = None
    ignore_eos: bool = True
    mode: str = "instances"
    kv_bytes_per_token: float | None = None
    contexts: Sequence[int] | None = None  # rows: a synthetic prompt of context − max_tokens tokens
    ctx: int = 2048
    memory_budget: int | None = None
    force: bool = False
    overhead_bytes: int = DEFAULT_OVERHEAD_BYTES
    bandwidth_gbps: float | None = None
    roofline: Roofline | None = None  # predicted columns and their errors
    served: WorkModel | None = None  # http: the served model's work (--model-bytes its config.json or GGUF)
    slo: SLO | None = None  # goodput per cell
    cost: Cost | None = None  # $/Mtok per cell
    arrivals: ArrivalSpec | None = None  # each rep's open-loop schedule (else rate / users)
    sessions: SessionSpec | None = None  # the users hold multi-turn sessions (--turns)
    client: ClientShare | None = None  # --segment / --start-at, applied to the first load
    users: int | None = None  # closed-loop users in every cell (None: K × B, workload.closed_loop_users)
    max_b: int = 16  # sequences one engine batches at most (bench --find users)
    threads: int | None = None  # per worker (None: physical cores ÷ K)
    cell_timeout_s: float = 1800.0
    out_dir: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    engine_on_gpu: bool = True  # the engine's layers run on a GPU: its thermal state is the GPU's (else the CPU's)

    @classmethod
    def from_plan(cls, plan: RunPlan, ks: Sequence[int], out_dir: Path, requests: int, reps: int = 1,
                  contexts: Sequence[int] | None = None, cell_timeout_s: float = 1800.0) -> SweepConfig:
        """A bench's sweep from the run plan, over `ks` (the plan's sweep Ks), with the command's own counts."""
        return cls(ks=ks, bs=plan.bs or [1], mode=plan.mode, requests=requests, max_tokens=plan.max_tokens, reps=reps,
                   rate=plan.rate, ignore_eos=plan.ignore_eos, bandwidth_gbps=plan.bandwidth_gbps,
                   cell_timeout_s=cell_timeout_s, out_dir=out_dir, contexts=contexts, ctx=plan.ctx,
                   kv_bytes_per_token=plan.choice.kv_bytes_per_token() if plan.choice else None,
                   memory_budget=plan.memory_budget, force=plan.force, threads=plan.threads, slo=plan.slo,
                   max_b=plan.max_b, cost=plan.cost, arrivals=plan.arrivals, users=plan.users, sessions=plan.sessions,
                   engine_on_gpu=plan.engine_on_gpu(), served=plan.served)


class CellRunner:
    """One cell on a load source, the same for the sweep and each --find level (knee.py): the source scaled to K,
    set to the mode and B and waited for; a warmed-up worker's overhead learnt (later cells are admitted with it);
    each load under the memory wall's check; the cell summarised with every figure asked (K·W/β, power and cost,
    the SLO, the roofline); a step the OOM killer ended refused from then on, the guard's overhead raised."""

    def __init__(self, source: LoadSource, cfg: SweepConfig, say: Callable[[str], None]):
        from measure.machine.power import PowerMeter

        self.source, self.cfg, self.say = finite(source), cfg, say  # SourceError: it serves a live view only
        self.caps = source.capabilities()
        self.local = self.caps.local
        self.power = PowerMeter(cfg.cost.watts if cfg.cost else None)
        self.probe = SystemProbe(host.ThermalReader(gpu=cfg.engine_on_gpu))
        self.heat = ThermalLog()  # a cell's thermal states
        self.energy: host.EnergyWindow | None = None  # a Mac's energy per rail over the cell
        self.kills: list[OomKill] = []  # steps at which the kernel's OOM killer ended a worker in this run
        self._killed_before = 0
        self._wall: WallCheck | None = None
        self._warmups = 0  # the source's warmup requests before this cell (sources/warmup.py)
        self._residency = _residency_probe(source) if self.local else None  # docs/residency.md
        self._res0 = None
        self.others = OtherWork()  # the cores other work keeps busy over each cell (local engines)
        from measure.machine import storage
        from measure.machine.probes import machine_key

        self.storage = storage.cached_rates(machine_key()) if self.local else None  # the probe's, where it ran

    def footprint(self, mode: str, k: int, b: int, seq_ctx: int) -> Footprint:
        return engine_footprint(mode, k, b, EngineMemory(
            b_cap=b, seq_ctx=seq_ctx, ctx=self.cfg.ctx, weight_bytes=self.source.meta.model_bytes,
            kv_per_token=self.cfg.kv_bytes_per_token or 0.0, overhead_bytes=self.cfg.overhead_bytes))

    def oom_refusal(self, mode: str, k: int, b: int) -> str | None:
        """Why this step is refused: a worker was OOM-killed at it or below it in this run (None: it is not)."""
        return oom_refusal(self.kills, mode, k, b) if self.local and not self.cfg.force else None

    def budget_refusal(self, mode: str, k: int, b: int, seq_ctx: int) -> str | None:
        """Why this step is refused: its estimated footprint is over the memory budget (None: it fits)."""
        if not (self.local and self.cfg.memory_budget and not self.cfg.force):
            return None
        return admit(self.footprint(mode, k, b, seq_ctx), self.cfg.memory_budget)

    def past_wall(self, mode: str, k: int, b: int, seq_ctx: int) -> LevelFit | None:
        """The level's residency roofline where its footprint is over the memory budget (docs/residency.md): its
        predicted tok/s past the wall; None where it fits or nothing predicts it."""
        cfg = self.cfg
        if not (self.local and cfg.roofline and cfg.memory_budget):
            return None
        fp = self.footprint(mode, k, b, seq_ctx)
        if fp.total <= cfg.memory_budget:
            return None
        p = cfg.roofline.level(mode, k, b, cfg.threads, max(1, seq_ctx - cfg.max_tokens), cfg.max_tokens)
        if p is None:
            return None
        seqs = max(1, fp.b if mode == "batch" else 1)
        mem = LevelMemory(fp.weights / k, fp.overhead / k, fp.kv / (k * seqs),
                          mmapped="mlx" not in self.source.meta.engine.lower())
        return level_fit(f"K={k} B={b}", (k, seqs), p.tpot_s, p.bytes_per_s * p.tpot_s, mem, cfg.memory_budget,
                         self.storage)

    def start(self, mode: str, k: int, b: int, seq_ctx: int, users: int | None = None, watch_wall: bool = True
              ) -> None:
        """The source at this step, ready; `users`: a closed loop's, told to the source (else it may follow its
        streams × endpoints); the power meter and the wall's check count from here (`watch_wall` False: no
        check, for a level run past the wall on purpose: run_sweep)."""
        src = self.source
        src.scale_to(k)
        assert mode in MODES  # the sweep's and --find's modes are a source's
        src.set_batch(mode, b, b_cap=b, seq_ctx=seq_ctx)
        src.wait_ready()
        rss = [w.rss for w in src.workers() if w.rss and w.ready_ns]
        if rss and self.local:
            self.cfg.overhead_bytes = max(self.cfg.overhead_bytes, max(rss) - src.meta.model_bytes)
        if users is not None:
            src.set_users(users)
        self._warmups = getattr(src, "warmup_requests", 0)
        self._killed_before = len(src.oom_killed)
        self.power.sample()  # a meter's reading counts from here
        self.heat.mark()  # the thermal states seen from here, in the wall check's samples
        self.energy = host.EnergyWindow("inference-top cell") if host.is_mac() else None
        if self.energy and not self.energy.begin():  # zeus-apple-silicon not installed, or IOReport closed
            self.energy = None
        self._wall = WallCheck(self.probe, self.heat) if watch_wall else None
        self._res0 = self._residency.read(self._pids(), 0) if self._residency else None
        if self.local:  # over HTTP nothing is recorded (_other_work)
            self.others.start()

    def _pids(self) -> list[int | None]:
        return [w.pid for w in self.source.workers()]

    def load(self, workload: Workload, arrivals: ClosedLoop | Poisson | Schedule | Segment | Sessions,
             stop: Callable[[], str | None] | None = None) -> list[RequestRecord]:
        """One load to completion (CellStopped at the memory wall, or where `stop` says why: the live tune's s;
        TimeoutError past the cell's timeout)."""
        cfg, wall = self.cfg, self._wall
        return self.source.run_requests(Load(workload, arrivals, cfg.max_tokens, cfg.ignore_eos), cfg.cell_timeout_s,
                                        wall if stop is None else lambda: stop() or (wall() if wall else None))

    def finish(self, records: list[RequestRecord], workload: Workload, mode: str, k: int, b: int,
               row: CellRow | None = None) -> Cell:
        """The cell of these records (`row`: the sweep's row it is in), with the machine's thermal states and
        energy per rail over it, and what read its power."""
        cfg, src = self.cfg, self.source
        cell = Cell.measure(records, Spec(
            k, b, src.meta.model_bytes, cfg.bandwidth_gbps, mode, cfg.kv_bytes_per_token, cfg.roofline,
            cfg.threads or auto_threads(k), None if getattr(workload, "varies", False) else cfg.max_tokens, cfg.slo,
            cfg.cost, self.power.sample(),
            [w.bandwidth_gbps for w in src.workers()] if self.caps.per_endpoint_bandwidth else None, cfg.ignore_eos,
            served=cfg.served))
        cell.row = row
        if warmed := getattr(src, "warmup_requests", 0) - self._warmups:  # an HTTP level's warmup, not in the figures
            cell.load = replace(cell.load, warmup_requests=warmed)
        machine = cell.machine
        if thermal := self.heat.describe():  # docs/design/unified-memory.md: a cell whose thermal state changed is not one machine's figure
            if not self.local:  # over HTTP the engines run on the servers: this is the client's state, said so
                thermal = f"{CLIENT_THERMAL}{thermal}"
            machine = replace(machine, thermal=thermal, thermal_changed=True if self.heat.changed else None)
        if self.energy:
            rails = self.energy.end(busy=bool(records))
            self.energy = None
            if read := {r.rail: r.watts for r in rails if r.watts is not None}:
                machine = replace(machine, rails_watts=read, rails_joules_per_token=host.rails_joules_per_token(
                    rails, cell.requests.total_output_tokens or 0) or None)
            if unread := "; ".join(r.label() for r in rails if r.watts is None):
                machine = replace(machine, rails_unread=unread)
        if self._residency is not None and self._res0 is not None and self._res0.procs:  # live workers only (a replay
            # has none): the residency over the cell (docs/residency.md)
            res = residency(self._res0, self._residency.read(self._pids(), cell.requests.total_output_tokens or 0))
            machine = replace(machine, residency=res.fields(), weights_resident_share=round(res.weights_share, 4),
                              major_faults_per_token=res.fields()["major_faults_per_token"],
                              swap_in_mbps=round(res.swap_in_mbps, 3), file_read_mbps=round(res.file_read_mbps, 3))
        cell.machine = self._other_work(machine, k, cfg.threads or auto_threads(k))
        if cell.cost is not None and cell.cost.watts is not None:  # mean power over the cell, and what read it
            cell.cost = replace(cell.cost, power_source=self.power.source)
        return cell

    def _other_work(self, machine: CellMachine, k: int, threads: int) -> CellMachine:
        """`machine` with the cores other work kept busy over the cell, and from a quarter of the cores what that
        means for the engines' threads (docs/design/wall.md "Threads beside other work"). Local engines only: over
        HTTP a server on this machine is other work to the client, and the engines' own threads are not known; a
        replay has no workers of its own to tell apart."""
        others = self.others.cores_busy() if self.local and any(self._pids()) else None
        if others is None:
            return machine
        cores, others = physical_cores(), round(others, 2)  # the words from the figure recorded
        said = (f"{others:.1f} of {cores} cores{crowded(k * threads, k, cores, others)}"
                if others >= OTHERS_SAID * cores else None)
        return replace(machine, other_work_cores=others, other_work=said)

    def learn(self, cell: Cell, mode: str, k: int, b: int, seq_ctx: int) -> None:
        """A worker OOM-killed while this cell ran: the estimate was too low here, so raise it and refuse ≥ it."""
        if len(self.source.oom_killed) <= self._killed_before:
            return
        cfg = self.cfg
        fp = self.footprint(mode, k, b, seq_ctx)
        budget = cfg.memory_budget or fp.total
        self.kills.append(OomKill(mode, k, b, fp.total, budget))
        cfg.overhead_bytes = overhead_after_oom(fp, budget, cfg.overhead_bytes)
        cell.machine = replace(cell.machine, oom_killed=True)
        self.say(f"  the kernel's OOM killer ended a worker at K={k} B={b} (estimated {fmt_gib(fp.total)}): "
                 "larger cells of this mode are refused in this run")


def _idle_until(t0_ns: int | None, runner: CellRunner) -> None:
    """--start-at: wait here for the asked start (the load would wait for it anyway), then count the power meter
    from it, so the idle wait is not in the cell's watts."""
    if t0_ns is None:
        return
    wait = (t0_ns - time.perf_counter_ns()) / 1e9 - 0.05  # the load's own timers take the last 50 ms
    if wait > 0:
        time.sleep(wait)
        runner.power.sample()


def run_sweep(fleet: LoadSource, workload: Workload, cfg: SweepConfig, say: Callable[[str], None] = print,
              new_fleet: Callable[[], LoadSource] | None = None, cells: list[Cell] | None = None
              ) -> tuple[list[Cell], list[RequestRecord], FiniteLoadSource]:
    """Cells in rows (one row per context), each row over B then K. A cell the admission check
    refuses is skipped with every larger cell of its row; a cell that hits the wall or its timeout
    ends the row there (the source is replaced, so nothing of it lingers). Never hangs. `cells`, where
    given, is filled as cells finish (what an interrupted sweep still has): Ctrl-C or a signal during a cell adds
    that cell, marked "cut", before it goes on up."""
    runner = CellRunner(fleet, cfg, say)
    cells = [] if cells is None else cells
    all_records: list[RequestRecord] = []
    contexts: Sequence[int | None] = cfg.contexts or [None]
    for context in contexts:
        wl = _row_workload(workload, context, cfg.max_tokens)
        blocked: tuple[int, int, str, str] | None = None  # (k, b, status, reason) at which the row stopped
        for b in cfg.bs:
            for k in cfg.ks:
                where = f"K={k} B={b}" + (f" context {context}" if context else "")
                if blocked and k >= blocked[0] and b >= blocked[1]:
                    cells.append(skipped_cell(k, b, context, blocked[2], f"after {blocked[3]}"))
                    continue
                fit = runner.past_wall(cfg.mode, k, b, context or cfg.ctx)
                if fit and (skip := budget_skip(fit.tps, cfg.requests * cfg.max_tokens * cfg.reps, cfg.cell_timeout_s)):
                    past = f"{skip} ({past_wall_note(fit)})"  # never sits in swap for its whole timeout
                    say(f"{where}: {past}")
                    cells.append(skipped_cell(k, b, context, "skipped", past))
                    blocked = (k, b, "skipped", f"K={k} B={b} skipped past the memory wall")
                    continue
                oom = runner.oom_refusal(cfg.mode, k, b)  # (not the budget: refused here, the row goes on)
                if why := oom or runner.budget_refusal(cfg.mode, k, b, context or cfg.ctx):
                    if fit and not oom:  # refused, and what it would have been (docs/residency.md)
                        why = f"{why}; past the wall it would run at {fit.tps:.1f} tok/s"
                    say(f"{where}: {why}")
                    cells.append(skipped_cell(k, b, context, "refused", why))
                    blocked = blocked if oom else (k, b, "refused", f"K={k} B={b} refused")
                    continue
                try:
                    records, status = _run_reps(runner, wl, k, b, context or cfg.ctx, where, fit)
                    cell = None if status else _finish(runner, records, wl, k, b, context)
                    if cell is not None and fit is not None:  # measured past the wall: its prediction is that
                        cell.prediction = past_prediction(cell, fit)
                except (KeyboardInterrupt, SystemExit) as exc:  # the cut cell marked, for the caller's summary
                    cells.append(skipped_cell(k, b, context, "cut", f"interrupted ({interruption(exc)[1]}) while "
                                              "this cell ran"))
                    raise
                all_records += records
                if status:
                    cells.append(skipped_cell(k, b, context, *status))
                    blocked = (k, b, status[0], f"K={k} B={b} {status[0]}")
                    if new_fleet:  # whatever the stopped cell left running goes with the old fleet
                        runner.source.close()
                        runner.source = finite(new_fleet())
                    continue
                assert cell is not None
                cells.append(cell)
    add_scaling([c for c in cells if c.ok])
    return cells, all_records, runner.source  # the fleet (or the last one it was replaced by), as a finite source


def past_prediction(cell: Cell, fit: LevelFit) -> CellPrediction:
    """A cell measured past the memory wall, predicted by the residency roofline (docs/residency.md): its step
    (TPOT) and tok/s, each with its error against the measurement, the storage named as what binds."""
    tpot_ms = fit.step.t_step_s * 1e3
    return CellPrediction("roofline", tpot_ms, fit.tps, f"past the memory wall: {fit.step.via}",
                          prediction_error(tpot_ms, cell.requests.tpot.p50),
                          prediction_error(fit.tps, cell.output_throughput))


def interruption(exc: BaseException) -> tuple[int, str]:
    """What ended a run early: its exit status and its name. Ctrl-C (KeyboardInterrupt) is 130, "Ctrl-C"; a signal
    comes as SystemExit(128 + its number) (the command line's handlers raise it so), "signal SIGTERM"; another
    exit, "exit"."""
    code = 130 if isinstance(exc, KeyboardInterrupt) else (exc.code if isinstance(exc, SystemExit)
                                                           and isinstance(exc.code, int) else 1)
    why = "Ctrl-C" if code == 130 else f"signal {signal.Signals(code - 128).name}" if code > 128 else "exit"
    return code, why


def _residency_probe(source: LoadSource) -> Any:
    """The residency reader of a local fleet's workers (machine/residency.py): the model file's mapping is read
    where the source says which file it serves."""
    from measure.machine.residency import ResidencyProbe

    spec = getattr(source, "spec", None)
    path = getattr(spec, "model_path", None)
    return ResidencyProbe(path if isinstance(path, str) else None, source.meta.model_bytes, mincore=False)


def _row_workload(workload: Workload, context: int | None, max_tokens: int) -> Workload:
    """A --contexts row's workload: a synthetic prompt of context − max_tokens tokens (None: the workload)."""
    if context is None:
        return workload
    n = max(1, context - max_tokens)
    return Workload(f"context-{context}", f"synthetic prompt of {n} tokens + {max_tokens} generated",
                    synthetic_tokens=n)


def _arrivals(cfg: SweepConfig, users: int, rep: int) -> ClosedLoop | Poisson | Schedule | Segment | Sessions:
    """One rep's arrivals: the sessions, the --arrivals schedule, Poisson at --rate, or a closed loop of users;
    with --segment / --start-at, this client's segment of it."""
    arrivals: ClosedLoop | Poisson | Schedule | Segment | Sessions = (
        cfg.sessions.make(users, cfg.requests, rep) if cfg.sessions
        else cfg.arrivals.make(cfg.requests, rep) if cfg.arrivals
        else Poisson(cfg.rate, total=cfg.requests, seed=rep) if cfg.rate
        else ClosedLoop(users, cfg.requests))
    return cfg.client.wrap(arrivals) if cfg.client is not None else arrivals


def _run_reps(runner: CellRunner, wl: Workload, k: int, b: int, seq_ctx: int, where: str,
              past: LevelFit | None = None) -> tuple[list[RequestRecord], tuple[str, str] | None]:
    """One cell's reps: its records, and (status, why) where the wall or its timeout stopped it. `past`: the
    level is predicted past the memory wall and within its time budget (run_sweep ran it knowing so, as --force
    asks): it is measured there, the wall's check off and its timeout bounding it (the check had stopped such a
    level in a 400 MiB memory cgroup before a request ended, on the pressure its own load left)."""
    cfg, say = runner.cfg, runner.say
    users = closed_loop_users(cfg.mode, k, b, cfg.users)
    closed = not (cfg.sessions or cfg.arrivals or cfg.rate)
    if past is not None:
        say(f"{where}: past the memory wall, predicted {past.tps:.2f} tok/s, within the level's budget of "
            f"{cfg.cell_timeout_s:.0f} s: measured there, the memory wall's check off ({past_wall_note(past)})")
    # a closed loop's or the sessions' users told to the source: it may otherwise follow its slots
    # (B × endpoints), and sessions of --users 4 ran B × endpoints users
    runner.start(cfg.mode, k, b, seq_ctx, users if cfg.sessions or (closed and cfg.users) else None, past is None)
    records: list[RequestRecord] = []
    for rep in range(cfg.reps):
        runner.source.rep = rep
        arrivals = _arrivals(cfg, users, rep)
        if cfg.client is not None:  # this client's segment of the schedule, from the asked start
            _idle_until(cfg.client.t0_ns, runner)
        t0 = time.monotonic()
        say(f"{where} rep {rep + 1}/{cfg.reps}: {cfg.requests} requests, {arrivals.describe()} …")
        try:
            recs = runner.load(wl, arrivals)
        except CellStopped as stop:
            say(f"  wall: memory wall: {stop}")
            return records + stop.records, ("wall", f"memory wall: {stop}")
        except TimeoutError as exc:
            say(f"  timeout: {exc}")
            return records, ("timeout", str(exc))
        records += recs
        errs = sum(1 for r in recs if r.error)
        say(f"  done in {time.monotonic() - t0:.1f} s" + (f", {errs} errors" if errs else ""))
    return records, None


def _finish(runner: CellRunner, records: list[RequestRecord], wl: Workload, k: int, b: int,
            context: int | None) -> Cell:
    """A sweep's cell: the runner's, with its row and how its load was described; an OOM kill learnt."""
    cfg = runner.cfg
    cell = runner.finish(records, wl, cfg.mode, k, b, row=CellRow(context))
    if cfg.arrivals:
        cell.load = replace(cell.load, arrivals=cfg.arrivals.describe())
    if cfg.sessions:
        cell.turns = replace(cell.turns, sessions=cfg.sessions.describe())
    runner.learn(cell, cfg.mode, k, b, context or cfg.ctx)
    return cell


def format_table(cells: list[Cell]) -> str:
    head = (f"{'K':>3} {'B':>3} {'conc':>5} {'tok/s':>8} {'TPOT p50':>9} {'TTFT p50':>9} {'TTFT p99':>9} "
            f"{'RSS sum':>8} {'BW GB/s':>8} {'×K=1':>6} {'×B=1':>6} {'CV':>6} {'predicted TPOT, tok/s':>24}  note")
    lines = [head, "-" * len(head)]
    for c in cells:
        r, sc, p99 = c.requests, c.scaling, M.p99_mark(c.requests.completed)
        if not c.ok:
            ctx = f" context {c.context}" if c.context else ""
            why = c.reason or f"{r.errors or 0} errors, no request completed"
            assert c.status is not None  # a cell not ok says why: refused, wall, timeout, failed …
            lines.append(f"{c.k:>3} {c.b:>3} {c.status.upper():>8}{ctx}: {why[:110]}")
            continue
        lines.append(
            f"{c.k:>3} {c.b:>3} {fmt(c.achieved_concurrency, '.2f'):>5} {fmt(c.output_throughput):>8} "
            f"{fmt(r.tpot.p50):>7}ms {fmt(r.ttft.p50, '.0f'):>7}ms {p99 + fmt(r.ttft.p99, '.0f'):>7}ms "
            f"{fmt(c.machine.rss_gb_sum, '.2f'):>6}GB {fmt(c.bandwidth.gbps, '.2f'):>8} "
            f"{fmt(sc.vs_k1 if sc else None, '.2f'):>6} {fmt(sc.vs_b1 if sc else None, '.2f'):>6} "
            f"{fmt(c.cv, '.3f'):>6} {prediction_text(c):>24}  {_note(c).strip()}")
    lines += [f"SKIPPED K={c.k} B={c.b}: {c.reason}" for c in cells if c.status == "skipped" and c.reason
              and not c.reason.startswith("after ")]  # past the memory wall: the whole prediction, said why
    formula = next((c.bandwidth.formula for c in cells if c.bandwidth.formula), M.BANDWIDTH_FORMULA_INSTANCES)
    lines.append("conc: achieved concurrency = Σ (done − started) ÷ wall time, the streams actually served; tok/s: "
                 "output tokens ÷ (first scheduled → last done), mean over reps;")
    lines.append(f"TTFT queue-inclusive (first token − scheduled); TPOT = (t_last − t_first)/(N − 1); "
                 f"{M.P99_LEGEND}; late: sent − scheduled by the load generator (open loop; inside TTFT);")
    lines.append(f"BW = {formula}; "
                 f"CV over reps, NOISY above {M.NOISY_CV:.2f}; predicted: the roofline (inference-top probe), "
                 "error = (predicted − measured) ÷ measured")
    return "\n".join(lines)


def _note(c: Cell) -> str:
    """A measured cell's note in the bench table."""
    r, load = c.requests, c.load
    note = ("NOISY" if c.noisy else "") + answer_notes(c) + turn_note(c.turns) + cache_note(c.server)
    for cls, v in (r.ttft_by_class or {}).items():
        note += f" {cls} TTFT p50/p99 {v['median_ttft_ms']:.0f}/{M.p99_mark(v.get('n'))}{v['p99_ttft_ms']:.0f} ms"
    if c.context:
        note += f" context {c.context}"
    if r.errors:
        note += f" {r.errors} errors"
    if load.arrivals or load.behind_schedule:
        note += (f" {(load.arrivals or '') + ','} late p50/p99 {fmt(load.lateness.p50)}/{fmt(load.lateness.p99)} ms"
                 + (" BEHIND SCHEDULE" if load.behind_schedule else ""))
    note += client_note(c)
    if load.warmup_requests:
        note += f" after {load.warmup_requests} warmup requests"
    if c.prediction.caveat:
        note += f" PREDICTION: {c.prediction.caveat}"
    if c.machine.k_served_min:
        note += f" K={c.machine.k_served_min} after a worker died"
    if c.machine.oom_killed:
        note += " OOM-KILLED"
    if c.machine.other_work:
        note += f" OTHER WORK held {c.machine.other_work}"
    if c.goodput.tps is not None:
        note += f" goodput {c.goodput.tps:.1f} tok/s ({c.goodput.attainment:.0%} in SLO)"
    for d in (c.server.check or {}).get("disagreements", []):
        note += f" SERVER DISAGREES {d}"
    for e in c.bandwidth.endpoints or []:
        note += (f" [{e['endpoint']}: {fmt(e['output_throughput'])} tok/s, TTFT {fmt(e['median_ttft_ms'], '.0f')}"
                 f" ms, {e['requests']} req" + (f", {e['errors']} err" if e["errors"] else "") + "]")
    return note


__all__ = ["SweepConfig", "run_sweep", "CellRunner", "Cell", "format_table", "write_summary", "SourceError",
           "answer_notes", "client_note", "skipped_cell", "interruption"]
