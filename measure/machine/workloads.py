"""--workload as given on the command line (docs/design.md §15): a preset, synthetic prompts of drawn lengths, or
a file (core/datasets.py reads JSONL, ShareGPT and timestamped traces, core/traces.py the public traces); an
inference-top records file as a trace is read with the recorder's reader (machine/recorder.read_jsonl), and
ShareGPT replies are counted with the embedded model's tokenizer. Here, not in core, because it reaches the
machine's files and the recorder."""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from measure.core import traces
from measure.core.datasets import (KINDS, Dataset, DatasetError, LengthDist, data_file, load_jsonl, load_sharegpt,
                                   load_trace, parse_length)
from measure.machine.recorder import read_jsonl
from presets import PresetError, Workload, workload


def _embedded_counter() -> Callable[[str], int]:
    """Token counts with the embedded model's tokenizer: the same count whatever engine runs."""
    from engines.base import EngineError
    from engines.embedded import embedded_model_path
    from engines.tokenizer import GGUFTokenizer

    try:
        tok = GGUFTokenizer(embedded_model_path(lambda m: None))
    except (EngineError, OSError, ValueError) as exc:
        raise DatasetError(f"--workload sharegpt: counting the replies' tokens needs the embedded model's tokenizer "
                           f"({exc}); give --output-len instead") from None
    return lambda text: max(1, len(tok.text_ids(text)))


def resolve(spec: str, *, prompt_len: str | None = None, output_len: str | None = None,
            max_tokens: int | None = None, seed: int = 0, count_tokens: Callable[[str], int] | None = None,
            turns: bool = False, model_filter: str | None = None) -> Workload:
    """--workload: a preset or synthetic:N (presets.workload), or KIND:FILE (jsonl, sharegpt, trace; the public
    traces mooncake, bailian, burstgpt, azure: core/traces.py); with --prompt-len / --output-len a Dataset. A
    preset with neither is returned as it is. `turns`: multi-turn sessions will run (a ShareGPT file's later
    turns are read too). `model_filter`: a BurstGPT trace's rows of that Model. DatasetError: one line."""
    kind, colon, name = spec.partition(":")
    from_file = colon and kind in KINDS
    if not from_file:
        try:
            base = workload(spec)
        except PresetError as exc:
            more = (", jsonl:FILE, sharegpt:FILE, trace:FILE, mooncake:FILE, bailian:FILE, burstgpt:FILE or azure:FILE"
                    if str(exc).startswith("unknown") else "")
            raise DatasetError(f"{exc}{more}") from None
    pl = parse_length(prompt_len, "--prompt-len", seed) if prompt_len else None
    ol = parse_length(output_len, "--output-len", seed) if output_len else None
    if not from_file:
        if pl is None and ol is None:
            return base
        if pl is not None and spec != "default":
            raise DatasetError(f"--prompt-len makes synthetic prompts of drawn lengths: it replaces --workload "
                               f"{spec}'s prompts; drop one of them")
        key = f"prompt-len:{pl.describe()}" if pl else base.key
        desc = ", ".join(x for x in (f"synthetic prompts, {pl.describe()} tokens" if pl else base.description,
                                     f"answers {ol.describe()} tokens" if ol else "") if x)
        fields = {f: getattr(base, f) for f in ("prompts", "synthetic_tokens", "source", "long_every", "long_tokens")}
        return Dataset(key, desc, **fields, prompt_len=pl, output_len=ol, cap=max_tokens if ol else None,
                       info={"prompt_len": prompt_len, "output_len": output_len, "length_seed": seed})
    if pl is not None:
        raise DatasetError(f"--prompt-len makes synthetic prompts; --workload {kind}: brings its own prompts: drop "
                           "one of them")
    if model_filter and kind != "burstgpt":
        raise DatasetError(f"--model-filter picks a BurstGPT trace's rows by their Model column: it does not apply "
                           f"to --workload {kind}:")
    if kind in ("mooncake", "bailian", "burstgpt", "azure"):
        return traces.load(kind, name, data_file(kind, name), output_len=ol, max_tokens=max_tokens,
                           model_filter=model_filter, seed=seed, output_spec=output_len)
    return _file_dataset(kind, name, ol, output_len, max_tokens, seed, count_tokens, turns)


def _file_dataset(kind: str, name: str, ol: LengthDist | None, output_len: str | None, max_tokens: int | None,
                  seed: int, count_tokens: Callable[[str], int] | None, turns: bool) -> Dataset:
    """resolve's jsonl:, sharegpt: and trace: files: their requests (and a trace's times) as a Dataset whose info
    names the file and its sha256 prefix."""
    times = None
    info: dict[str, Any] = {}
    skipped = 0
    if kind == "jsonl":
        path, text, items = load_jsonl(name)
    elif kind == "sharegpt":
        counter = None if ol is not None else (count_tokens or _embedded_counter())
        path, text, items, skipped = load_sharegpt(name, counter, later_turns=turns)
    else:
        path, text, items, times, info = load_trace(name, read_jsonl)
    file_items = tuple(items)
    desc = f"{len(file_items)} requests from {path.name}"
    if skipped:
        desc += f" ({skipped} conversations without a human turn and a reply skipped)"
    info = {"workload_file": str(path.resolve()), "workload_sha256": hashlib.sha256(text.encode()).hexdigest()[:16],
            "workload_items": len(file_items), "output_len": output_len, "length_seed": seed, **info}
    return Dataset(f"{kind}:{name}", desc, source=str(path), items=file_items, output_len=ol,
                   cap=max_tokens if (ol or any(it.output_tokens for it in file_items)) else None,
                   times_s=tuple(times) if times is not None else None, info=info)

__all__ = ["resolve"]
