"""`inference-top tune`: the best configuration of the chosen engines for this model, load and SLO, measured
(measure/control/tune/, docs/design/tune.md): its parser, a run plan per engine family made as bench makes one, and
the search on stdout or on a screen (--live: tui/tune_app.py). Every bad input is one line and exit 2."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from tui.options import (DISPLAY, ENGINE, EXIT_FAILED, LOAD, RECORDING, SEARCH, SLO, OneLineParser, build_parser, fail,
                         llama_server_bin, positive_float, positive_int, run_plan, shown_argv, sigterm_to_exit,
                         writable)
from tui.signals import hold


def tune_parser() -> OneLineParser:
    p = OneLineParser(prog="inference-top tune", description="Search the configurations the engines take (K "
                      "instances, B batch, llama-server slots, threads, flash attention, KV cache type, n_ubatch) "
                      "within the memory budget: the roofline orders and prunes them, short runs then longer ones "
                      "(successive halving) judge them by goodput under the SLO; writes tune.json and the command "
                      "line that serves the winner")
    eng, load, slo, search = p.group(ENGINE), p.group(LOAD), p.group(SLO), p.group(SEARCH)
    eng.add_argument("--engine", default="llama", help="comma list of llama, llama-server, mlx, mlx-server "
                     "(mlx_lm.server), vllm (default llama; one not installed here is named skipped)")
    eng.add_argument("--model", help="a .gguf (llama, llama-server) or an mlx-lm folder; default the embedded model")
    slo.add_argument("--slo", default="interactive", help="interactive (default), server, or ttft=450ms,tpot=40ms")
    search.add_argument("--budget", default="15m", help="wall-clock budget: 600, 600s, 10m, 1h (default 15m)")
    load.add_argument("--users", type=positive_int, help="closed-loop users every candidate serves (default 2 × "
                   "physical cores)")
    load.add_argument("--requests", type=positive_int, help="first round's requests per candidate; each later round "
                   "doubles them (default 2 × users, at least 8)")
    load.add_argument("--max-tokens", type=positive_int, default=32, help="tokens generated per request (default 32)")
    load.add_argument("--workload", default="default", help="workload preset or file, as bench takes")
    eng.add_argument("--ctx", type=positive_int, default=2048, help="context each request needs (tokens)")
    load.add_argument("--seed", type=int, default=0, help="seed of the workload's draws (the same for every candidate)")
    search.add_argument("--first-round", type=positive_int, default=8, help="shapes the first round runs at most "
                   "(the best predicted; default 8)")
    eng.add_argument("--memory-budget", help="as bench: a fraction of memory or a size (20G; "
                     "default 0.85)")
    eng.add_argument("--force", action="store_true", help="do not refuse candidates over the memory budget")
    load.add_argument("--stop-at-eos", action="store_true", help="end a request at EOS (default: ignore EOS)")
    eng.add_argument("--chip", help="chip preset (default: detected)")
    slo.add_argument("--watts", type=positive_float, help="power draw to assume where no meter reads one (W; "
                     "default: none)")
    slo.add_argument("--price-per-hour", type=positive_float, help="rented hardware: $ per hour (default: none)")
    p.group(RECORDING).add_argument("--out", help="output folder (default ./out/tune-YYYYmmdd-HHMMSS)")
    search.add_argument("--resume", metavar="OUT", help="go on from the tune in OUT (its runs are read back, not run "
                   "again); writes there (default: a new tune)")
    p.group(DISPLAY).add_argument("--live", action="store_true", help="run it on a screen: a row per candidate as "
                                  "it settles, the Pareto front as it grows; p pauses before the next run, s skips "
                                  "the candidate being measured, q stops the tune (the answer is what was measured)")
    search.add_argument("--find", choices=["rate"], help="then search the winner's knee: the open-loop rate it serves "
                   "within the SLO (as bench --find rate), in what is left of the budget; default: none")
    search.add_argument("--no-compare", action="store_true", help="skip the last step: the winner and the runner-up "
                        "measured in turns until their difference is resolved (compare), or said to be within noise "
                        "(default: the last step runs)")
    return p


def tune_plans(args, engines: list[str], users: int) -> dict:
    """A RunPlan per engine family (llama for llama and llama-server, mlx), made as bench makes one from tune's
    options."""
    from engines.registry import declared

    plans = {}
    _, bench = build_parser()
    for fam in dict.fromkeys(declared(e).plan_engine for e in engines):
        ns = bench.parse_args(["--engine", fam])
        for name in ("model", "slo", "workload", "ctx", "seed", "memory_budget", "force", "stop_at_eos", "chip",
                     "watts", "price_per_hour", "max_tokens"):
            setattr(ns, name, getattr(args, name))
        ns.users, ns.requests = users, args.requests
        plans[fam] = run_plan(ns, default_max_tokens=args.max_tokens)
    return plans


def tune_main(argv: list[str]) -> int:
    """tune: the best configuration of the chosen engines for this model, load and SLO, measured
    (measure/control/tune/, docs/design/tune.md)."""
    args = tune_parser().parse_args(argv)
    from measure.control.tune import (ENGINES, Settings, TuneError, TuneIO, TuneResult, format_result, parse_budget,
                                      run_tune)

    engines = list(dict.fromkeys(e.strip() for e in args.engine.split(",") if e.strip()))
    for e in engines or [""]:
        if e not in ENGINES:
            fail(f"--engine {e or args.engine!r}: tune takes a comma list of {', '.join(ENGINES)}")
    try:
        budget = parse_budget(args.budget)
    except TuneError as exc:
        fail(str(exc))
    resume = Path(args.resume) if args.resume else None
    if resume is not None and not (resume / "tune.json").is_file():
        fail(f"--resume {resume}: no tune.json there; give the --out folder of an earlier tune")
    out = resume or Path(args.out or f"out/tune-{time.strftime('%Y%m%d-%H%M%S')}")
    writable(out, "--out", folder=True)
    from engines.registry import declared

    runnable = _runnable(engines)
    server_bin = llama_server_bin() if any(declared(e).serve_argv[:1] == ("llama-server",) for e in runnable) else None
    from measure.machine.probes import physical_cores

    users = args.users or 2 * physical_cores()
    plans = tune_plans(args, runnable, users)
    plan = next(iter(plans.values()))
    assert plan.slo is not None  # --slo has a default
    wl = plan.workload
    s = Settings(engines=engines, users=users, requests=args.requests or max(8, 2 * users),
                 max_tokens=plan.max_tokens, ctx=plan.ctx, budget_s=budget, slo=plan.slo, workload=wl,
                 seed=args.seed, ignore_eos=plan.ignore_eos, memory_budget=plan.memory_budget, cost=plan.cost,
                 first_round=args.first_round, prompt_tokens=wl.synthetic_tokens or 32,
                 final_compare=not args.no_compare)
    sigterm_to_exit()
    say = lambda m: print(m, flush=True)  # noqa: E731
    from measure.sources.base import SourceError

    def start(io: TuneIO) -> TuneResult:
        return run_tune(plans, s, out, resume, io, server_bin, shown_argv(["tune", *argv]), args.find)

    if args.live:
        return _live_tune(start, format_result, out)
    try:
        res = start(TuneIO(say))
    except TuneError as exc:
        fail(str(exc))
    except SourceError as exc:
        fail(f"{exc} (tune.json so far is in {out})", EXIT_FAILED)
    except KeyboardInterrupt:
        hold()
        fail(f"interrupted (Ctrl-C): the runs so far are in {out}/tune.json; tune --resume {out} goes on", 130)
    say("")
    say(format_result(res))
    say(f"\nwrote {out}/tune.json (runs' records in {out}/runs/)")
    return 0


def _runnable(engines: list[str]) -> list[str]:
    """The engines asked for that can run here (the tune names the others skipped, in its output and tune.json);
    none: one line, exit 2."""
    from measure.control.tune import unavailable

    skipped = unavailable(engines)
    if len(skipped) == len(engines):
        fail("no engine asked for can run here: " + "; ".join(f"{e}: {why}" for e, why in skipped.items()))
    return [e for e in engines if e not in skipped]


def _live_tune(start, summary, out: Path) -> int:
    """tune --live: the search on the screen (tui/tune_app.py); what it wrote said after the screen closes."""
    from tui.tune_app import run_tune_app

    code, res = run_tune_app(start, summary)
    if res is None:
        print(f"inference-top tune: the tune stopped before its answer; the runs so far are in {out}/tune.json",
              file=sys.stderr)
        return EXIT_FAILED
    print(summary(res))
    print(f"\nwrote {out}/tune.json (runs' records in {out}/runs/)")
    return code
