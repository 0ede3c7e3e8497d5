"""The truth matrix's mutation score (docs/design/truth-matrix.md): bugs planted in the measurement code, one at a time, and
whether the matrix (benchmarks/truth_matrix.py) fails on each.

Each mutant is a source-text patch (an exact string of one file replaced) applied to a temporary copy of this tree
(the files git tracks, and those it does not ignore), never to the tree itself: every process the matrix starts (the
fleet's workers, a pool's client processes, the null servers, `inference-top bench`) runs the planted code. A patch
whose text is no longer in its file is reported as stale (the code moved: the mutant must be rewritten), not counted.

A kill stands only where the cell that failed, run again on its own, fails again with the mutant, with a kind of
failure (its text up to its first figure) that the cell run without the mutant has not: a failure that does not
repeat, or that the unpatched tree shares, was a stall of this busy machine, and the mutant is not counted killed
("UNCONFIRMED"). (This confirms the score; the matrix itself never runs a cell twice.)

A mutant is killed by `make test`'s sample when `truth_matrix.py --cover SEED` (tests/integration/test_truth_matrix.py's draw:
one cell of each load kind over every source, its --find searches, live steps and the command line) fails, and by
the full matrix when `truth_matrix.py` does; both stop at the first failing cell. The sample's cells are cells of
the full matrix, so a mutant the sample kills is counted killed by the full matrix without running it again; the
full matrix runs only on the sample's survivors. Before any mutant the unpatched copy runs the sample: a baseline
that fails gives no score.

    python benchmarks/mutants.py                 # every mutant; ends with one JSON line
    python benchmarks/mutants.py --quick         # the bench cells of the sample only, no full matrix (4.5–5.5 min)
    python benchmarks/mutants.py --only tpot_x2  # one mutant by name (repeatable)

How long, on the shared 2-core machine it was written on (load average 6–10): --quick 268–331 s for 32 mutants;
the sample with its searches, live steps and command lines ≈ 45 s a mutant, so ≈ 25 min for all; the full matrix
of a survivor ≈ 35 min (40 of its cells took 3 min 51 s), so a whole run ≈ 25 min + 35 min per survivor of the
sample. Under such load a cell can fail on a stall (its failure says STALLED): a kill's first failures are printed
beside it, to be read.

The JSON line: {"mutants", "killed_full", "killed_sample", "survivors": [{"name", "why"}], "stale", "seconds"}
(killed_full null with --quick).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    what: str  # the bug, said
    where: str = ""  # where the matrix can see it, if only some cells can (a survivor's why)
    sign: str = ""  # the failure that shows this bug ("|" between alternatives): a kill must show one of them


M = "measure/core/metrics.py"
MUTANTS = [
    # a scale factor on each figure
    Mutant("tpot_x2", M, "    return (token_ns[-1] - token_ns[0]) / (n - 1) / NS",
           "    return (token_ns[-1] - token_ns[0]) / (n - 1) / NS * 2", "TPOT × 2"),
    Mutant("goodput_x0.5", M, "    return Goodput(len(met) / span_s, sum(r.output_tokens for r in met) / span_s,",
           "    return Goodput(len(met) / span_s, 0.5 * sum(r.output_tokens for r in met) / span_s,", "goodput × 0.5"),
    Mutant("tps_x0.75", M, "    return aggregate_tps(records, span[0], span[1] + 1)",
           "    return 0.75 * aggregate_tps(records, span[0], span[1] + 1)", "output tok/s × 0.75"),
    Mutant("ttft_engine_x1.5", M, "    return (_set(r.t_first_token_ns) - _set(r.t_started_ns)) / NS",
           "    return 1.5 * (_set(r.t_first_token_ns) - _set(r.t_started_ns)) / NS", "engine TTFT × 1.5"),
    Mutant("itl_x1.5", M, "    return d[d > 0] / NS", "    return d[d > 0] / NS * 1.5", "ITL × 1.5"),  # inside ITL p50's +3.5 ms tolerance; killed by the per-request identities
    Mutant("concurrency_x0.8", M, "    return busy / (b_ns - a_ns)", "    return 0.8 * busy / (b_ns - a_ns)",
           "achieved concurrency × 0.8"),
    Mutant("attainment_off_by_one", M, "len(met) / len(finished),", "len(met) / (len(finished) + 1),",
           "SLO attainment over one request more than finished"),
    Mutant("slo_too_strict", M, "tp is not None and tp > slo.tpot_s:", "tp is not None and tp > slo.tpot_s / 100:",
           "the TPOT bound judged 100 × too strictly"),
    Mutant("e2e_from_first_token", M, "    return (_set(r.t_done_ns) - r.t_scheduled_ns) / NS",
           "    return (_set(r.t_done_ns) - _set(r.t_first_token_ns)) / NS", "E2E timed from the first token"),
    Mutant("span_from_first_token", M, "    starts = [r.t_scheduled_ns for r in records]",
           "    starts = [r.t_first_token_ns or r.t_scheduled_ns for r in records]",
           "a run's span (tok/s, goodput) from its first token, not its first scheduled request",
           "tok/s +7 % on an open loop's 0.3 s span, +15 % on a closed loop's 0.14 s: inside ± 10 % + the stall ÷ "
           "the span"),
    Mutant("concurrency_from_scheduled", M, "        start, done = (r.t_started_ns, r.t_done_ns)",
           "        start, done = (r.t_scheduled_ns, r.t_done_ns)", "achieved concurrency counts the queue",
           "only where requests queue (a closed loop's users above its slots, a capped or fleet open loop)"),
    # a wrong label
    Mutant("p99_ttft_is_p50", M, '"p99_ttft_ms": ms(percentile(ttfts, 99)),', '"p99_ttft_ms": ms(percentile(ttfts, 50)),',
           "TTFT p99 labelled on the median", "only where TTFTs spread (requests queue)"),
    Mutant("cell_b_plus_1", "measure/control/bench/cell.py", "    cell = Cell(k=spec.k, b=spec.b,",
           "    cell = Cell(k=spec.k, b=spec.b + 1,", "the cell labelled B + 1"),
    Mutant("client_procs_plus_1", "measure/control/bench/cell.py",
           "len(procs) if procs and is_remote(spec.mode) else None)",
           "len(procs) + 1 if procs and is_remote(spec.mode) else None)", "client processes counted one too many",
           "pool cells only"),
    Mutant("endpoint_label_first", "measure/sources/http.py", "extra.update(endpoint=ep.info.label,",
           "extra.update(endpoint=self._eps[0].info.label,", "every request labelled with the first endpoint",
           "http and pool cells over two endpoints"),
    # a record dropped or doubled, a token lost
    Mutant("record_dropped", M, "    good = ok(records)\n", "    good = ok(records)[1:]\n",
           "one record left out of the request figures"),
    Mutant("record_doubled", M, "    good = ok(records)\n", "    good = ok(records) + ok(records)[:1]\n",
           "one record counted twice in the request figures"),
    Mutant("token_dropped", "measure/core/records.py", "    toks = list(out.token_ns)",
           "    toks = list(out.token_ns)[1:]", "every record's first token lost"),
    # a clock offset, a hidden wait
    Mutant("first_token_clock_10ms", "measure/core/records.py", "t_first_token_ns=toks[0] if toks else None,",
           "t_first_token_ns=toks[0] + 10_000_000 if toks else None,", "the first token stamped 10 ms late"),
    Mutant("ttft_clock_offset", M, "    return (_set(r.t_first_token_ns) - r.t_scheduled_ns) / NS",
           "    return (_set(r.t_first_token_ns) - r.t_scheduled_ns) / NS + 0.005", "TTFT + 5 ms (a clock offset)"),  # inside TTFT p50's 15 ms; killed by the identities
    Mutant("queue_hidden", "measure/core/records.py", "t_started_ns=out.t_started_ns,",
           "t_started_ns=req.t_scheduled_ns,", "a request's start stamped at its schedule: its queue hidden",
           "only where requests queue"),
    Mutant("client_wait_25ms", "measure/sources/http.py", "        t_started = time.perf_counter_ns()\n",
           "        await asyncio.sleep(0.025)\n        t_started = time.perf_counter_ns()\n",
           "a silent 25 ms client-side wait before every HTTP request", "http and pool cells"),
    Mutant("lateness_plus_10ms", "measure/core/arrivals.py",
           "    late = [(r.t_submitted_ns - r.t_scheduled_ns) / 1e6 for r",
           "    late = [(r.t_submitted_ns - r.t_scheduled_ns) / 1e6 + 10 for r", "lateness read 10 ms high"),
    Mutant("combine_clock_offset", "measure/core/records.py", "t_scheduled_ns=rec.t_scheduled_ns + d,",
           "t_scheduled_ns=rec.t_scheduled_ns + d + 1_000_000,",
           "records put on another clock (report --combine, Ray clients) shift the schedule 1 ms against the rest",
           "two-segment cells only"),
    # a rate × 0.5, the schedule wrong
    Mutant("rate_x0.5", "measure/core/arrivals.py", "_scaled(gaps, (total - 1) / self._rate())",
           "_scaled(gaps, 2 * (total - 1) / self._rate())", "constant, Poisson and gamma sent at half the rate",
           "constant, Poisson and gamma cells"),
    Mutant("ramp_x0.5", "measure/core/arrivals.py", "        big_t = 2 * (n - 1) / (r0 + r1)",
           "        big_t = 4 * (n - 1) / (r0 + r1)", "a ramp at half its rates", "ramp cells"),
    Mutant("trace_half_speed", "measure/core/arrivals.py",
           "yield round((ts[i % n] + (i // n) * period) / self.speed * NS)",
           "yield round((ts[i % n] + (i // n) * period) * 2 / self.speed * NS)", "a trace replayed at half speed",
           "trace cells"),
    Mutant("arrival_rate_reported_x0.5", "measure/core/arrivals.py",
           "    return (len(times_ns) - 1) / ((times_ns[-1] - times_ns[0]) / NS)",
           "    return 0.5 * (len(times_ns) - 1) / ((times_ns[-1] - times_ns[0]) / NS)",
           "the realised arrival rate reported at half"),
    # a user count off by one, a request sent twice
    Mutant("users_plus_1", "measure/core/workload.py", "        n = max(0, self.users - outstanding)",
           "        n = max(0, self.users + 1 - outstanding)", "a closed loop runs one user more than asked",
           "closed-loop cells of the fleet, batch and http (a pool's processes each run their share of the loop)"),
    Mutant("request_sent_twice", "measure/core/workload.py", "        for index, t_sched in due:",
           "        for index, t_sched in (due + due[:1] if len(due) > 1 else due):",
           "a request sent twice where several fall due at once", "where two requests fall due in one wakeup"),
    # the kinds of rounds past
    Mutant("open_loop_capped", "measure/sources/dispatch.py",
           "        if spill and not self.cap_open_loop and load is not None and is_open_loop(load.arrivals):",
           "        if False:", "an open loop silently capped by the client's B streams",
           "uncapped http open loops whose load exceeds K × B streams"),
    Mutant("level_timed_from_key_press", "measure/control/live/controller.py", "        if self.caps.level_ready:",
           "        if False:", "a live level timed from the key press, its warmup inside it", "live steps"),
    # issue 56's survivors of the matrix before it recomputed each figure class on its own (these six kinds)
    Mutant("percentile_rank_n", M, "    vi = (n - 1) * (p / 100)", "    vi = n * (p / 100)",
           "a percentile's rank n·p, not (n − 1)·p", "every cell: its percentiles against numpy's", sign="figures recomputed with numpy"),
    Mutant("itl_first_gap_dropped", M, "        out.extend(itl_gaps(r.token_ns).tolist())",
           "        out.extend(itl_gaps(r.token_ns).tolist()[1:])", "each request's first gap left out of ITL",
           "cells whose engine's gaps vary (fleet, http, pool), the first unlike the rest", sign="figures recomputed with numpy"),
    Mutant("usage_chunk_counted", "engines/http_openai.py", "        if not has_text:\n            return\n",
           "        if not has_text and not usage:\n            return\n", "a usage-only SSE chunk counted as a token",
           "http and pool cells on the server that sends usage only in a last chunk of its own", sign="tokens stamped, counted|lengths: |the cell counts "),
    Mutant("bandwidth_file_bytes", M,
           '    return Bandwidth(agg_tps * work.read_bytes(1) / 1e9, f"aggregate tok/s × W, {formula}")',
           '    return Bandwidth(agg_tps * work.file_bytes / 1e9, f"aggregate tok/s × W, {formula}")',
           "the bandwidth product from the file's bytes, not the bytes a token reads",
           "fleet cells (measured again with a mixture of experts' work)", sign="bandwidth product"),
    Mutant("poisson_constant", "measure/core/arrivals.py", '            "poisson": lambda: rng.expovariate(self._rate()),',
           '            "poisson": lambda: 1.0 / self._rate(),', "Poisson arrivals made constant",
           "Poisson cells (their gaps against the exponential)", sign="arrivals: KS distance"),
    Mutant("queued_counted_twice", "measure/sources/dispatch.py", "len(self.pending) + outstanding",
           "2 * len(self.pending) + outstanding", "a closed loop counts its queued requests twice: fewer users in "
           "flight on average (the peak still reached)", "closed loops of two users more than slots", sign="users in flight on average"),
]


def copy_tree(dst: Path) -> None:
    """The files git tracks and those it does not ignore, copied (the tree the matrix runs)."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                         check=True).stdout.decode()
    for rel in filter(None, out.split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)


def run_matrix(tree: Path, args: list[str], timeout_s: float, stop_first: bool = True) -> tuple[bool, str]:
    """(failed, its last JSON line or why it did not end) of truth_matrix.py run in `tree`. A run cut at the timeout
    did not fail: the mutant is not counted killed (its why says so)."""
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    try:
        p = subprocess.run([sys.executable, "benchmarks/truth_matrix.py", "--quiet",
                            *(["--stop-first"] if stop_first else []), *args],
                           cwd=tree, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False, f"not finished in {timeout_s:g} s (--timeout): not counted killed"
    last = (p.stdout.strip().splitlines() or [p.stderr.strip()[-300:]])[-1]
    return p.returncode != 0, last


def first_failed(line: str) -> str | None:
    """The first failing cell's name in truth_matrix.py's JSON line."""
    cells = failed_cells(line)
    return cells[0] if cells else None


def failed_cells(line: str) -> list[str]:
    try:
        return list(json.loads(line).get("failed_cells") or [])
    except (ValueError, AttributeError):
        return []


def shows(m: Mutant, found: set[str]) -> bool:
    """Whether these kinds of failure hold the mutant's sign (any kind, where it has none)."""
    if not m.sign:
        return bool(found)
    return any(s in k for s in m.sign.split("|") for k in found)


def kinds(line: str) -> set[str]:
    """The kinds of failure in truth_matrix.py's JSON line: each failure's text up to its first figure (the stall
    detector's note left out)."""
    import re

    try:
        fails = json.loads(line).get("first_failures") or []
    except (ValueError, AttributeError):
        return set()
    return {re.split(r"[0-9]", f, maxsplit=1)[0] for f in fails if "kept a thread off its cores" not in f}


def run_cell(tree: Path, cell: str, timeout_s: float) -> tuple[bool, set[str]]:
    """Whether the cell named (a bench cell, or the part of the matrix a search, live or cli cell is in) fails, and
    its kinds of failure."""
    part = next((p for p in ("find", "live", "cli") if cell.startswith(p)), None)
    failed, line = run_matrix(tree, ["--only", part] if part else ["--only", "bench", "--filter", cell], timeout_s)
    return failed, kinds(line) if failed else set()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0, help="the sample's seed (truth_matrix.py --cover)")
    ap.add_argument("--quick", action="store_true", help="the sample's bench cells only; no full matrix")
    ap.add_argument("--only", action="append", help="this mutant only (by name; repeatable)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds for one run of the matrix")
    ap.add_argument("--keep-going", action="store_true", help="score even where the unpatched copy fails the "
                    "sample (a machine too busy for its tolerances): each kill is still confirmed by its cell, run "
                    "again alone with the mutant and without it")
    a = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if not a.only or m.name in a.only]
    sample = ["--cover", str(a.seed)] + (["--only", "bench"] if a.quick else [])
    t0 = time.monotonic()
    killed_s, killed_f, survivors, stale = 0, 0, [], []
    with tempfile.TemporaryDirectory(prefix="mutants-") as d:
        tree = Path(d)
        copy_tree(tree)
        failed, line = run_matrix(tree, sample, a.timeout)
        print(f"baseline (no mutant): {'FAILS' if failed else 'passes'} {line}", flush=True)
        if failed and not a.keep_going:
            print(json.dumps({"error": "the unpatched tree fails the sample: no score", "baseline": line}))
            return 2
        for m in chosen:
            path = tree / m.path
            text = path.read_text()
            if text.count(m.old) != 1:
                stale.append(m.name)
                print(f"STALE {m.name}: its text is in {m.path} {text.count(m.old)} times", flush=True)
                continue
            path.write_text(text.replace(m.old, m.new))
            try:
                # --keep-going (a busy machine): every cell of the sample runs, and each that failed is confirmed
                by_sample, line = run_matrix(tree, sample, a.timeout, stop_first=not a.keep_going)
                by_full = by_sample
                if not by_sample and not a.quick:
                    by_full, line = run_matrix(tree, [], a.timeout)
                tried = (failed_cells(line) if a.keep_going else [first_failed(line)]) if by_full else []
                seen: dict[str, tuple[bool, set[str]]] = {}
                for c in filter(None, tried):  # the mutant fails it once more, with its sign where it has one …
                    seen[c] = run_cell(tree, c, a.timeout)
                    if shows(m, seen[c][1]):
                        break
            finally:
                path.write_text(text)
            # … and the tree without it has not the mutant's kind of failure there
            new = {c: sorted(k for k in mine - run_cell(tree, c, a.timeout)[1] if shows(m, {k}))
                   for c, (again, mine) in seen.items() if again and shows(m, mine)}
            confirmed = [c for c, k in new.items() if k]
            cell = (confirmed or list(seen) or [None])[0]
            if confirmed:
                line = f"confirmed on {cell}: {new[cell]}; {line}"
            again = bool(seen.get(cell, (False,))[0]) if cell else False
            if cell is not None and not confirmed:
                how = "failed again, but also without the mutant" if again else "passed with the mutant"
                line = f"UNCONFIRMED: {cell}, run alone, {how} (a stall); {line}"
                by_sample = by_full = False
            killed_s += by_sample
            killed_f += by_full
            if not by_full or (a.quick and not by_sample):
                why = m.where or "within the tolerances of every cell run"
                if "not finished" in line or line.startswith("UNCONFIRMED"):
                    why += "; " + line[:300]
                survivors.append({"name": m.name, "what": m.what, "why": why,
                                  "run": "the sample" if a.quick else "the sample and the full matrix"})
            print(f"{'killed ' if by_full else 'SURVIVED'} {m.name} ({m.what}): sample "
                  f"{'kills' if by_sample else 'misses'}; {line[:300]}", flush=True)
    print(json.dumps({"mutants": len(chosen) - len(stale), "killed_full": None if a.quick else killed_f,
                      "killed_sample": killed_s, "survivors": survivors, "stale": stale,
                      "seconds": round(time.monotonic() - t0, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
