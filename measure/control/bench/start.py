"""A bench's composition root, as live/start.py is the dashboard's: from a RunPlan (control/plan.py) and its
SweepConfig, the run's parts started — the records file under the run header (machine/recorder.py), a load source made
for each cell (control/wiring.py), the roofline, a client's share of one schedule (--segment, --start-at: this clock
checked against the server's) — then the sweep (sweep.py) or --find's knee search (knee.py), and the summary and the
table at the end; or --ray's load from client actors on a Ray cluster (cluster.py). What ran comes back as a BenchRun:
the cells, among them the one an interruption cut, and what went wrong at the end. tui/bench_cmd.py parses and checks
the command line and turns a BenchRun into its last line and exit status."""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from measure.control.bench.cell import Cell
from measure.control.bench.sweep import SweepConfig, format_table, interruption, run_sweep, write_summary
from measure.control.plan import RunPlan
from measure.control.wiring import make_source

if TYPE_CHECKING:
    from measure.machine.ray_cluster import ClusterSpec
    from measure.sources.base import FiniteLoadSource, LoadSource


@dataclass(frozen=True)
class Find:
    """bench --find: what to search (users, rate or b), the share of requests within the SLO a level needs, and the
    first level (--rate; None: 0.5 requests/s for rate, else 1)."""

    what: str
    target: float
    start: float | None = None


@dataclass(frozen=True)
class BenchIO:
    """How a bench talks to whoever runs it: its lines (`say`), a warning that the run goes on after (`warn`: a
    record not kept), and `on_interrupt`, called first when Ctrl-C or a signal ends the run (the command line's:
    ignore further signals, so that a second Ctrl-C cannot cut the cleanup)."""

    say: Callable[[str], None] = print
    warn: Callable[[str], None] = print
    on_interrupt: Callable[[], None] = lambda: None


@dataclass
class BenchRun:
    """What a bench ran: its cells (a cell an interruption cut among them, status "cut"); `interrupted`, where Ctrl-C
    or a signal ended it (sweep.interruption's exit status and name); `problems`, what went wrong at the end (the
    summary not written, records not kept), each one line."""

    cells: list[Cell] = field(default_factory=list)
    interrupted: tuple[int, str] | None = None
    problems: list[str] = field(default_factory=list)


def client_share(plan: RunPlan, cfg: SweepConfig, segment: tuple[int, int], start: float | None) -> dict[str, object]:
    """--segment and --start-at, checked by the caller: the run header's client fields (this clock checked against
    the server's where one is named), and the sweep's ClientShare set in `cfg` (the wait added to its timeout)."""
    from measure.core.clients import ClientShare, perf_ns_at
    from measure.machine.clock import clock_check

    out: dict[str, object] = {"segment": list(segment) if segment[1] > 1 else None,
                           "seed": getattr(plan.arrivals, "seed", None), "start_at_unix": start}
    t0 = None
    if start is not None:
        if plan.url:  # a server's clock to compare with
            from engines.http_openai import api_headers

            out["clock_check"] = clock_check(plan.url, api_headers(plan.api_key_env))
        else:
            out["clock_check"] = {"offset_s": None, "why": "a local engine: no server clock to compare with"}
        t0, anchor = perf_ns_at(start)
        out.update(start_perf_ns=t0, clock_anchor=anchor)
        cfg.cell_timeout_s += max(0.0, start - time.time())  # the wait is not the cell's
    cfg.client = ClientShare(segment, t0)
    return out


def run_bench(plan: RunPlan, cfg: SweepConfig, header: Mapping[str, object], io: BenchIO, find: Find | None = None,
              client: Mapping[str, object] | None = None) -> BenchRun:
    """A bench in `cfg.out_dir`: records.jsonl under `plan.header(header)`, then the sweep (a fresh source for a
    local one's stuck workers; `client`: client_share's fields, said before the load starts) or --find's knee
    search, then the summary and the table. SourceError goes through (the records so far kept); Ctrl-C or a signal
    (KeyboardInterrupt, SystemExit) ends it with the finished cells and the cut one in summary.json."""
    from measure.machine.recorder import Recorder

    assert cfg.out_dir is not None
    out = cfg.out_dir
    recorder = Recorder(out / "records.jsonl", plan.header(header),
                        on_error=lambda m: io.warn(f"{m}; the sweep goes on, later records are not kept"))

    def new_source() -> LoadSource:  # the sweep sets each cell's mode, B and batch context (made for that cell)
        src = make_source(plan, events=False, on_record=recorder.record, per_cell=True)
        src.start()
        return src

    cfg.roofline = plan.roofline(io.say)
    for line in plan.start_lines(f"{out}/records.jsonl"):
        io.say(line)
    run = BenchRun()
    source: LoadSource | FiniteLoadSource | None = None
    try:
        source = new_source()
        if find is not None:
            run_find(source, plan, cfg, find, io.say)
            return run  # (knee.json and summary.json written by the search)
        if client:
            say_client_start(client, io.say)
        _, _, source = run_sweep(source, plan.workload, cfg, io.say,  # a local source's stuck workers: a fresh one
                                 new_fleet=new_source if source.capabilities().local else None, cells=run.cells)
    except (KeyboardInterrupt, SystemExit) as exc:
        io.on_interrupt()
        run.interrupted = interruption(exc)
        if run.cells:  # the finished cells and the cut one (run_sweep marks it), as far as they can be written
            try:
                write_summary(out, run.cells)
            except OSError:
                pass
        return run
    finally:
        if source is not None:
            source.close()
        recorder.close()
    run.problems = [p for p in (finish(out, run.cells, io.say),
                                recorder.failed and f"{recorder.failed}: {recorder.lost} records were not kept (the "
                                                    "lines written parse)") if p]
    return run


def run_ray_bench(spec: ClusterSpec, plan: RunPlan, cfg: SweepConfig, header: Mapping[str, object],
                  say: Callable[[str], None]) -> BenchRun:
    """bench --ray: the one load from client actors on a Ray cluster (cluster.py, docs/design/ray.md) under
    `plan.header(header)`, then the summary and the table; the clients that did not finish are among the problems.
    ClusterError where it cannot start; an interruption goes through (the actors stopped on the way out)."""
    from measure.control.bench.cluster import run_cluster

    assert cfg.out_dir is not None
    cfg.roofline = plan.roofline(say)
    run = run_cluster(spec, plan, cfg, plan.header(header), cfg.out_dir, say)
    problems = [p for p in (finish(cfg.out_dir, run.cells, say),) if p]
    for w in run.warnings:
        say(f"warning: {w}")
    if run.failed:
        names = ", ".join(c.name for c in run.failed)
        problems.append(f"{len(run.failed)} of {len(run.clients)} clients did not finish ({names}): the summary "
                        "covers the records they left")
    return BenchRun(run.cells, problems=problems)


def say_client_start(fields: Mapping[str, object], say: Callable[[str], None]) -> None:
    """A client's share said before its load starts: its segment of the schedule, this clock against the server's,
    and the wait until --start-at."""
    from measure.core.clients import describe_clock
    from measure.core.lines import RunHeader

    h = RunHeader.of(fields)  # the header's client fields so far, typed
    if h.segment:
        i, n = h.segment
        say(f"segment {i}/{n} of one schedule (seed {h.seed}): the requests whose index ≡ {i - 1} (mod {n}), "
            "each with its id and at its scheduled time")
    if h.start_at_unix is not None:
        say(describe_clock(h.clock_check))
        from datetime import datetime

        at = datetime.fromtimestamp(h.start_at_unix).astimezone().isoformat(timespec="milliseconds")
        say(f"waiting until {at} (--start-at, {h.start_at_unix - time.time():.1f} s from now) …")


def run_find(source: LoadSource, plan: RunPlan, cfg: SweepConfig, find: Find, say: Callable[[str], None]) -> None:
    """bench --find: the knee in one sentence, the levels it measured in summary.json and the search in knee.json."""
    from measure.control.bench.knee import find_knee, measure_levels

    assert plan.slo is not None and cfg.out_dir is not None  # (bench gives --find the interactive SLO by default)
    if find.what == "users" and "batch" in source.capabilities().modes:
        cfg.mode = "batch"  # concurrent users, served the way a server serves them: batched in one engine
    cfg.cell_timeout_s = min(cfg.cell_timeout_s, 300.0)  # every level bounded
    run = measure_levels(source, plan.workload, find.what, cfg, say, k=plan.find_k, target=find.target)
    start = find.start or (0.5 if find.what == "rate" else 1)
    knee = find_knee(lambda lv: run(lv), find.what, start=start, limit=4096 if find.what == "rate" else 256)
    sentence = knee.sentence(plan.slo.key, knee.wall(cfg.roofline is not None))
    out = cfg.out_dir
    cells = knee.write(out, plan.slo, find.target, sentence)
    if cells:
        say("")
        say(format_table(cells))
    say(f"\n{sentence}")
    say(f"wrote {out}/records.jsonl, {out}/summary.json, {out}/knee.json")


def finish(out: Path, cells: list[Cell], say: Callable[[str], None]) -> str | None:
    """summary.json and summary.csv beside records.jsonl, and the table; a summary that cannot be written: the
    reason (None when written), for the caller's one line."""
    say("")
    say(format_table(cells))
    try:
        write_summary(out, cells)
    except OSError as exc:
        return f"cannot write the summary in {out}: {exc.strerror or exc} (the table above is all of it)"
    say(f"\nwrote {out}/records.jsonl, {out}/summary.json, {out}/summary.csv")
    return None


__all__ = ["BenchIO", "BenchRun", "Find", "client_share", "finish", "run_bench", "run_find", "run_ray_bench",
           "say_client_start"]
