"""`inference-top plan`: what fits in memory (KV bytes per token, KV per request at each context, the largest B and
K under the budget), and with --chip the chip's predictions and the machines N users need. No engine starts; every
bad input is one line and exit 2."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from tui.options import OneLineParser, fail, int_list, positive_int

if TYPE_CHECKING:
    from measure.core.sizing import ChipPredictions, Plan


def plan_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="inference-top plan", description="What fits in memory: KV bytes per token, KV per "
                      "request at each context, the largest B and K under the budget. No engine starts.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="a Hugging Face / mlx-lm config.json")
    src.add_argument("--model", help="a GGUF file")
    src.add_argument("--preset", help="a model preset (presets/models.toml)")
    p.add_argument("--context", type=int_list, default=[2048], help="context lengths, comma list")
    p.add_argument("--users", type=positive_int, help="concurrent users: the context at which they stop fitting")
    p.add_argument("--memory", help="memory to plan for: 48G = 48GB = 48GiB = 48×2³⁰ B, as RAM is sold "
                   "(default: this machine's)")
    p.add_argument("--memory-budget", type=float, default=None, help="fraction of memory usable (default 0.85; "
                   "on an Apple chip or this Mac: the GPU's working set less what macOS holds)")
    p.add_argument("--kv-dtype", default=None, help="KV cache dtype: f16, bf16, q8_0, fp8 … (default: model's)")
    p.add_argument("--kv-cache-tokens", type=positive_int, help="a server's KV cache in tokens (vLLM's log line)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--chip", help="also predict TPOT, tok/s and TTFT for K = 1..4 and B = 1..64 on a chip from "
                   "presets (spec figures × assumed efficiencies), or 'this' (this machine, from its probe)")
    p.add_argument("--prompt", type=positive_int, default=128, help="prompt tokens for the prediction (default 128)")
    p.add_argument("--output", type=positive_int, default=256, help="output tokens for the prediction (default 256)")
    p.add_argument("--slo", help="with --users and --chip: size for this SLO (interactive, server, or "
                   "ttft=450ms,tpot=40ms)")
    return p


def plan_main(argv: list[str]) -> int:
    args = plan_parser().parse_args(argv)
    from measure.core.guard import GuardError, parse_memory_size, shape_from_preset
    from measure.machine.model_files import shape_from_config, shape_from_gguf, work_model
    from measure.core.sizing import PlanError, PlanMachine, chip_memory, chip_predictions, plan, unified_memory
    from measure.machine.probes import total_memory_bytes
    from engines.base import EngineError
    from presets import PresetError, model

    if args.memory_budget is not None and not 0 < args.memory_budget <= 1:
        fail(f"--memory-budget {args.memory_budget} must be a fraction in (0, 1], e.g. 0.85")
    try:
        if args.config:
            shape = shape_from_config(args.config)
        elif args.model:
            shape = shape_from_gguf(args.model)
        else:
            shape = shape_from_preset(args.preset)
        dtype = args.kv_dtype or (model(args.preset).kv_dtype if args.preset else "f16")
        memory = parse_memory_size(args.memory) if args.memory else chip_memory(args.chip) or total_memory_bytes()
        result = plan(shape, args.context, memory, dtype, args.users, args.memory_budget, args.kv_cache_tokens,
                      PlanMachine(unified=unified_memory(args.chip)))
    except (GuardError, EngineError, PresetError) as exc:
        fail(str(exc))
    predictions = None
    if args.chip:
        try:
            from measure.core.readings import Ceilings
            from measure.machine import ceilings

            def probed() -> Ceilings:
                try:
                    return ceilings.get(say=lambda t: print(t, file=sys.stderr))
                except ceilings.ProbeError as exc:
                    raise PlanError(f"--chip this: {exc}") from None

            predictions = chip_predictions(lambda: work_model(args.config, args.model, args.preset),
                                           probed if args.chip == "this" else args.chip, args.prompt, args.output,
                                           context=max(args.context), result=result)
        except PlanError as exc:
            fail(str(exc))
    _print_plan(args, shape, result, predictions)
    return 0


def _print_plan(args, shape, result: Plan, predictions: ChipPredictions | None) -> None:
    """plan's output: JSON, or the table, then the chip's predictions and the machines N users need."""
    from measure.core.sizing import PlanError, format_plan, size_for_users

    if args.json:
        import json
        from dataclasses import asdict

        if predictions:
            result["predictions"] = [asdict(p) for p in predictions.rows]
        print(json.dumps(result, indent=2))
        return
    print(format_plan(result, shape))
    if predictions:
        from measure.machine.residency import predictions_text  # the roofline's table, the wall marked

        print()
        print(predictions_text(predictions, result, args.chip, args.prompt, args.output, max(args.context)))
        if args.users:
            print()
            try:
                print(size_for_users(args.users, args.slo, args.context, result, predictions.work,
                                     predictions.machine, args.prompt, args.output))
            except PlanError as exc:
                fail(str(exc))
