"""--workload as given on the command line (docs/design/workloads.md): a preset, synthetic prompts of drawn lengths, or
a file. The files are read here (core/datasets.py parses the text of JSONL, ShareGPT and timestamped traces;
core/traces.py's formats the public traces' lines, streamed from the TraceFile opened here); an inference-top
records file as a trace is read with the recorder's reader (machine/recorder.read_jsonl), and ShareGPT replies
are counted with the embedded model's tokenizer. Here, not in core, because it reaches the machine's files and
the recorder."""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

from measure.core import traces
from measure.core.datasets import (FORMATS, KINDS, SAMPLES, Dataset, DatasetError, Item, LengthDist, RecordsReader,
                                   parse_jsonl, parse_length, parse_sharegpt, parse_trace)
from measure.core.traces import TRACE_FORMATS, TraceFile
from measure.machine.recorder import read_jsonl
from presets import PresetError, Workload, workload

FILE_KINDS = KINDS + tuple(TRACE_FORMATS)  # --workload KIND:FILE


# ---- reading the files --------------------------------------------------------------------------------------------


def _what(kind: str) -> str:
    """What a file of `kind` holds, for error lines."""
    return FORMATS[kind] if kind in FORMATS else TRACE_FORMATS[kind].what


def _ext(kind: str) -> str:
    return TRACE_FORMATS[kind].ext if kind in TRACE_FORMATS else "jsonl"


def _path(kind: str, name: str) -> Path:
    if name == "sample":
        return Path(str(files("presets").joinpath("samples").joinpath(SAMPLES[kind])))
    return Path(name).expanduser()


def data_file(kind: str, name: str) -> Path:
    """The file --workload KIND:NAME names, there and not a folder (DatasetError: one line)."""
    where = f"--workload {kind}:{name}"
    if not name or name == "sample" and kind not in SAMPLES:
        raise DatasetError(f"{where}: give a file after the colon, e.g. {kind}:trace.{_ext(kind)}")
    path = _path(kind, name)
    if not path.exists():
        raise DatasetError(f"{where}: file not found; give the path of a {_what(kind)}")
    if path.is_dir():
        raise DatasetError(f"{where}: is a folder; give the path of a {_what(kind)}")
    return path


def read_text(kind: str, name: str) -> tuple[Path, str]:
    """The text of the file --workload KIND:NAME names ('sample': the shipped one); DatasetError: one line."""
    where = f"--workload {kind}:{name}"
    if not name:
        raise DatasetError(f"{where}: give a file after the colon, e.g. {kind}:prompts.jsonl ({kind}:sample for "
                           "the shipped sample)")
    path = _path(kind, name)
    if not path.exists():
        raise DatasetError(f"{where}: file not found; give the path of a {_what(kind)} ({kind}:sample for the "
                           "shipped sample)")
    if path.is_dir():
        raise DatasetError(f"{where}: is a folder; give the path of a {_what(kind)}")
    try:
        return path, path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DatasetError(f"{where}: not UTF-8 text; give a {_what(kind)}") from None
    except OSError as exc:
        raise DatasetError(f"{where}: cannot read it ({exc.strerror or exc})") from None


def trace_file(path: Path) -> TraceFile:
    """A public trace's file for core/traces.py: its raw lines, read from a byte offset each time it asks
    (the scan from 0, then a chunk's rows again from the chunk's offset)."""

    def lines_from(start: int) -> Iterator[bytes]:
        with open(path, "rb") as f:
            f.seek(start)
            yield from f

    return TraceFile(path, str(path.resolve()), lines_from)


def load_jsonl(name: str) -> tuple[Path, str, list[Item]]:
    """--workload jsonl:NAME: (its path, its text, its requests)."""
    path, text = read_text("jsonl", name)
    return path, text, parse_jsonl(name, path, text)


def load_sharegpt(name: str, count_tokens: Callable[[str], int] | None, later_turns: bool = False
                  ) -> tuple[Path, str, list[Item], int]:
    """--workload sharegpt:NAME: (its path, its text, its requests, conversations skipped): datasets.parse_sharegpt."""
    path, text = read_text("sharegpt", name)
    return (path, text, *parse_sharegpt(name, path, text, count_tokens, later_turns))


def load_trace(name: str, read_records: RecordsReader | None = read_jsonl
               ) -> tuple[Path, str, list[Item], list[float], dict[str, Any]]:
    """--workload trace:NAME: (its path, its text, its requests, their times, what the header records about it);
    an inference-top records file is read with `read_records` (the recorder's)."""
    path, text = read_text("trace", name)
    return (path, text, *parse_trace(name, path, text, read_records))


# ---- --workload ---------------------------------------------------------------------------------------------------


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
    traces of core/traces.py's TRACE_FORMATS); with --prompt-len / --output-len a Dataset. A preset with neither
    is returned as it is. `turns`: multi-turn sessions will run (a ShareGPT file's later turns are read too).
    `model_filter`: a trace's rows of that Model (its format names each row's model). DatasetError: one line."""
    kind, colon, name = spec.partition(":")
    from_file = colon and kind in FILE_KINDS
    if not from_file:
        try:
            base = workload(spec)
        except PresetError as exc:
            forms = [f"{k}:FILE" for k in FILE_KINDS]
            more = f", {', '.join(forms[:-1])} or {forms[-1]}" if str(exc).startswith("unknown") else ""
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
    fmt = TRACE_FORMATS.get(kind)
    if model_filter and not (fmt and fmt.model_column):
        raise traces.model_filter_error(kind)
    if fmt is not None:
        return traces.load(kind, name, trace_file(data_file(kind, name)), output_len=ol, max_tokens=max_tokens,
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

__all__ = ["resolve", "FILE_KINDS", "data_file", "read_text", "trace_file", "load_jsonl", "load_sharegpt", "load_trace"]
