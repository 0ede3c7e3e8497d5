"""`inference-top compare`: is B slower than A, beyond this machine's noise (measure/control/bench/compare.py,
docs/design/compare.md).

    inference-top compare [bench options for both] -A "A's options" -B "B's options" [--metric tok/s]
                          [--budget 120] [--precision 2%] [--requests 16] [--out DIR]
    inference-top compare DIR_A DIR_B [--metric tok/s]        (two bench outputs on disk, from their records)

Each side's options are bench's (--engine, --model, --k, --b, --threads, --url, --no-flash-attn, …) added to
the shared ones (a side's win), and --kv-type f16|q8_0|q4_0 (the llama engine's KV cache type); `--engine null`
(simulated: a fixed schedule, no model) takes --null-ttft-ms, --null-itl-ms and, to plant a changed answer token,
--null-change-token P (1-based) with --null-change-every M (the prompts whose ids sum to a multiple of M).
Beside the speed verdict, the sides' greedy answers are compared prompt by prompt (measure/control/bench/answers.py).
Every bad input is one line and exit 2; a run that fails is one line and exit 1.
"""
from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from tui.options import EXIT_FAILED, OneLineParser, build_parser, fail, positive_int, writable

NULL_OPTS = {"--null-ttft-ms": "ttft_s", "--null-itl-ms": "itl_s"}
# the null engine's planted change of one answer token (engines/null.changed_at): tests of the answers' verdict
NULL_INTS = {"--null-change-token": "change_token", "--null-change-every": "change_every"}
KV_TYPE = "--kv-type"  # a side's llama.cpp KV cache type (engines/llama_cpp.kv_types), not a bench option


def compare_parser() -> OneLineParser:
    p = OneLineParser(prog="inference-top compare", allow_abbrev=False, description="Two configurations measured "
                      "in turns (A B B A, "
                      "B A A B, …) under one closed-loop load until the difference in --metric is resolved at 95 % "
                      "confidence or --budget ends; or two bench outputs (DIR_A DIR_B) from their records. The "
                      "options not named here are bench's, for both sides.")
    p.add_argument("-A", "--config-a", metavar="OPTIONS", help="A's bench options, quoted: e.g. \"--threads 1\"; "
                   "or the first of two bench output folders: compare DIR_A DIR_B")
    p.add_argument("-B", "--config-b", metavar="OPTIONS", help="B's bench options, quoted: e.g. \"--threads 2\"")
    p.add_argument("--metric", default="tok/s", help="tok/s (default), goodput (needs --slo), tpot (TPOT p50) or "
                   "ttft-p99")
    p.add_argument("--budget", default="120", help="time for the rounds: 120 (s), 90s, 10m (default 120 s); at "
                   "least --min-rounds run whatever it says")
    p.add_argument("--precision", help="stop early once the interval lies within ± this (e.g. 2%%): no "
                   "difference above it (default: only a difference, or the budget, stops it)")
    p.add_argument("--min-rounds", type=positive_int, default=3, help="rounds of four runs before the first look "
                   "(default 3, at least 2)")
    p.add_argument("--requests", type=positive_int, default=16, help="requests a run (default 16)")
    p.add_argument("--warmup", type=int, default=1, help="runs of each side before the rounds, not counted "
                   "(default 1)")
    p.add_argument("--out", help="output folder (default ./out/compare-YYYYmmdd-HHMMSS)")
    p.add_argument(KV_TYPE, metavar="TYPE", help="the llama engine's KV cache type: f16 (llama.cpp's default), q8_0 or "
                   "q4_0; given inside -A or -B, that side's (e.g. -A \"--kv-type f16\" -B \"--kv-type q4_0\": does "
                   "q4_0 change the answers?)")
    return p


def _glued(argv: list[str]) -> list[str]:
    """-A VALUE as --config-a=VALUE: a side's options start with '-', which argparse would take for an option."""
    out, it = [], iter(argv)
    for a in it:
        name = {"-A": "--config-a", "-B": "--config-b"}.get(a, a)
        if name in ("--config-a", "--config-b"):
            v = next(it, None)
            out.append(name if v is None else f"{name}={v}")
        else:
            out.append(a)
    return out


def _split_null(argv: list[str]) -> tuple[list[str], dict[str, float] | None]:
    """A side's argv with `--engine null` made the embedded llama plan's (the load, the context) and its
    --null-* options taken out; the null engine's schedule (None: not the null engine)."""
    from engines.registry import ENGINES

    out, opts, simulated = [], {}, False
    it = iter(argv)
    for a in it:
        name, eq, val = a.partition("=")
        if name in NULL_OPTS or name in NULL_INTS or name == "--engine":
            v = val if eq else next(it, None)
            if v is None:
                fail(f"{name} needs a value")
            if name == "--engine":
                e = ENGINES.get(v)  # an unknown name is the bench parser's to refuse
                simulated = e is not None and e.simulated
                out += ["--engine", e.plan_engine if e and simulated else v]
                continue
            try:
                opts[{**NULL_OPTS, **NULL_INTS}[name]] = float(v) / 1e3 if name in NULL_OPTS else int(v)
            except ValueError:
                fail(f"{name} {v!r} is not " + ("a number of milliseconds" if name in NULL_OPTS else "a whole number"))
            continue
        out.append(a)
    if opts and not simulated:
        fail(f"{', '.join([*NULL_OPTS, *NULL_INTS])} apply to --engine null")
    return out, ({"ttft_s": 0.02, "itl_s": 0.01, **opts} if simulated else None)


def _split_kv(argv: list[str]) -> tuple[list[str], str | None]:
    """A side's argv without --kv-type, and the KV cache type it asked (the last given: a side's own after the
    shared one); None: llama.cpp's default, f16."""
    out, kv = [], None
    it = iter(argv)
    for a in it:
        name, eq, val = a.partition("=")
        if name != KV_TYPE:
            out.append(a)
            continue
        kv = val if eq else next(it, None)
        if kv is None:
            fail(f"{KV_TYPE} needs a value")
    return out, kv


def _with_kv(name: str, plan: Any, kv: str, simulated: bool) -> None:
    """The side's llama.cpp KV cache type (options kv_type, engines/llama_cpp.kv_types): the llama engine only."""
    from dataclasses import replace

    from engines.llama_cpp import KV_TYPES

    if kv not in KV_TYPES:
        fail(f"-{name}: {KV_TYPE} {kv!r}: choose one of {', '.join(KV_TYPES)}")
    if not plan.decl.kv_types or plan.spec is None or simulated:
        fail(f"-{name}: {KV_TYPE} applies to --engine llama (in-process llama.cpp); a llama-server takes -ctk/-ctv "
             "on its own command line")
    if kv != "f16" and not plan.spec.flash_attn:
        fail(f"-{name}: a {kv} KV cache needs flash attention (llama.cpp's quantised V cache): drop --no-flash-attn")
    plan.spec = replace(plan.spec, options={**plan.spec.options, "kv_type": kv})


def _side(name: str, shared: list[str], options: str) -> Any:
    from measure.control.bench.compare import Side
    from measure.control.builder import make_plan
    from measure.control.plan import StartError
    from tui.options import plan_options

    try:
        own = shlex.split(options)
    except ValueError as exc:
        fail(f"-{name} {options!r}: {exc}")
    argv, kv = _split_kv(shared + own)
    argv, null = _split_null(argv)
    _, bench = build_parser()
    bench.prog = f"inference-top compare -{name}"
    args = bench.parse_args(argv)
    for opt in ("k", "b"):
        v = getattr(args, opt)
        if isinstance(v, list) and len(v) > 1:
            fail(f"-{name}: --{opt} {','.join(map(str, v))}: a side runs one K and one B (compare two sides)")
    if args.rate or args.arrivals or args.turns or args.find or args.contexts or args.segment or args.start_at \
            or args.ray or args.clients:
        fail(f"-{name}: compare runs a closed loop of --users from here: drop --rate, --arrivals, --turns, --find, "
             "--contexts, --segment, --start-at, --ray, --clients")
    try:
        plan = make_plan(plan_options(args), default_max_tokens=64, progress=lambda m: None)
    except StartError as exc:
        fail(f"-{name}: {exc}")
    if kv is not None:
        _with_kv(name, plan, kv, null is not None)
    return Side(name, options, plan, null), args


def _one_load(a: Any, b: Any) -> int:
    """The users both sides run (the same load): --users, else the larger K × B; exit 2 where the sides' own
    options set two loads."""
    pa, pb = a.plan, b.plan
    for what, f in (("workload", lambda p: p.workload.key), ("--max-tokens", lambda p: p.max_tokens),
                    ("--stop-at-eos", lambda p: p.ignore_eos), ("--slo", lambda p: p.slo and p.slo.describe()),
                    ("--users", lambda p: p.users)):
        if f(pa) != f(pb):
            fail(f"-A and -B set two loads ({what}: {f(pa)!r} against {f(pb)!r}); give the load's options once, "
                 "outside -A and -B")
    return pa.users or max(p.sweep_ks[0] * (p.bs or [1])[0] for p in (pa, pb))


def compare_main(argv: list[str]) -> int:
    from measure.control.bench.compare import CompareError, metric, parse_share
    from measure.control.tune import TuneError, parse_budget

    p = compare_parser()
    ns, shared = p.parse_known_args(_glued(argv))
    if ns.kv_type is not None:  # a shared option: both sides' (a side's own --kv-type wins, coming after it)
        shared = [KV_TYPE, ns.kv_type, *shared]
    try:
        m = metric(ns.metric)
        budget = parse_budget(ns.budget)
        precision = parse_share(ns.precision, "--precision") if ns.precision else None
    except (CompareError, TuneError) as exc:
        fail(str(exc))
    if ns.config_a is None and ns.config_b is None and shared and not any(x.startswith("-") for x in shared):
        if len(shared) != 2:
            fail("compare DIR_A DIR_B takes two bench outputs (and --metric); or -A \"…\" -B \"…\" to measure")
        return _on_disk(Path(shared[0]), Path(shared[1]), m)
    if not (ns.config_a is not None and ns.config_b is not None):
        fail("give both sides: -A \"A's bench options\" -B \"B's\" (or two bench output folders)")
    if ns.min_rounds < 2:
        fail("--min-rounds must be at least 2 (an interval needs two rounds)")
    (a, _), (b, _) = _side("A", shared, ns.config_a), _side("B", shared, ns.config_b)
    users = _one_load(a, b)
    out = Path(ns.out or f"out/compare-{time.strftime('%Y%m%d-%H%M%S')}")
    writable(out, "--out", folder=True)
    if ns.warmup < 0:
        fail(f"--warmup {ns.warmup}: give 0 or more runs")
    return _live(a, b, Stopping(m, budget, precision, ns.min_rounds), Loop(users, ns.requests, ns.warmup), out, argv)


def _on_disk(a: Path, b: Path, m: Any) -> int:
    from measure.control.bench.compare import CompareError, compare_dirs

    try:
        outcomes = compare_dirs(a, b, m)
    except CompareError as exc:
        fail(str(exc))
    print(f"compare: A = {a}, B = {b}, {m.name} of each rep, from their records")
    for o in outcomes:
        print(o.sentence)
        for n in o.notes:
            print(f"  note: {n}")
    return 0


class Stopping(NamedTuple):
    """When compare's rounds stop: the metric compared, the budget (s), the precision asked (None: the budget
    alone) and the rounds before an interval is read."""

    metric: Any
    budget_s: float
    precision: float | None
    min_rounds: int


class Loop(NamedTuple):
    """Each run's closed loop: users, requests, and the warm-up requests before the first round."""

    users: int
    requests: int
    warmup: int


def _live(a: Any, b: Any, how: Stopping, load: Loop, out: Path, argv: list[str]) -> int:
    from measure.control.bench.compare import (CompareError, LiveSides, Sequential, failed_outcome, run_rounds,
                                               write_result)
    from measure.sources.base import SourceError
    from tui.options import shown_argv, sigterm_to_exit

    m, budget, precision, min_rounds = how
    users, requests, warmup = load
    say = lambda line: print(line, flush=True)  # noqa: E731
    for s in (a, b):
        say(f"{s.name}: {s.options or '(the shared options)'}" + (" — the null engine, SIMULATED: a fixed schedule "
                                                                    f"{s.null}" if s.null else ""))
    say(f"{m.name} of each run: a closed loop of {users} user(s) × {requests} requests, the same on both; rounds of "
        f"ABBA / BAAB, the interval from round {min_rounds}; budget {budget:.0f} s; records → {out}/A, {out}/B; "
        "each side's greedy answers (a local engine's token ids, a server's text) compared prompt by prompt")
    sigterm_to_exit()
    seq = Sequential(precision=precision, min_rounds=min_rounds)
    sides = None
    head = {"command": "compare", "argv": argv, "metric": m.name, "users": users, "requests": requests,
            "budget_s": budget, "precision": precision, "a": a.options, "b": b.options}

    def keep(why: str) -> str:  # the rounds measured before a failure: written, not lost
        failed = failed_outcome(seq, m, why).with_answers(sides.agreement() if sides else None, m)
        write_result(out, {**head, **failed.to_dict()})
        return f"; the {len(seq.rounds)} round(s) measured are in {out}/compare.json"
    try:
        sides = LiveSides([a, b], users, requests, out, m, say, header={"argv": shown_argv(["compare", *argv])})
        t0 = time.monotonic()
        for line in sides.warm_up(warmup):
            say(line)
        res = run_rounds(sides.run_one, m, budget - (time.monotonic() - t0), seq, say).with_answers(
            sides.agreement(), m)
    except (CompareError, SourceError, TimeoutError) as exc:
        fail(f"{exc} (records so far in {out}{keep(str(exc))})", EXIT_FAILED)
    except KeyboardInterrupt:
        fail(f"interrupted (Ctrl-C) after {len(seq.rounds)} round(s); records so far in {out}{keep('interrupted')}", 130)
    finally:
        if sides is not None:
            sides.close()
    say(res.sentence)
    for n in res.notes:
        say(f"  note: {n}")
    write_result(out, {**head, **res.to_dict()})
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(compare_main(sys.argv[1:]))
