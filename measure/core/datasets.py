"""The workloads users bring (docs/design/workloads.md): a JSONL file of prompts, a ShareGPT JSON file, a timestamped
trace (or an inference-top records.jsonl) and seeded length distributions (--prompt-len, --output-len).

Each becomes a `Dataset`, a presets.Workload that also knows each request's prompt and answer length by its
index in the load; the dispatcher asks it (request_for, here). --workload as given on the command line is
resolved by machine/workloads.py. Index i is the same request in every cell,
rep and engine: the same prompt, the same prompt id, the same lengths (fairness, docs/design/fairness.md). Nothing is downloaded.
"""
from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engines.base import Prompt
from measure.core.lines import Lines
from presets import Workload

KINDS = ("jsonl", "sharegpt", "trace")  # the public traces: core/traces.py's TRACE_FORMATS
SAMPLES = {"jsonl": "prompts.jsonl", "sharegpt": "sharegpt.json", "trace": "trace.jsonl"}
CHECK_DRAWS = 1000  # a length distribution's first draws checked against --ctx before anything starts


# machine/recorder.read_jsonl's shape: a records file → its lines by kind
RecordsReader = Callable[[Path], Lines]


class DatasetError(ValueError):
    """A workload file or length that cannot be used: one line naming what was wrong and what to do."""


# ---- length distributions ------------------------------------------------------------------------------------

LENGTH_FORMS = ("N, N±D (uniform over N−D … N+D; +- for ±), uniform:A-B, normal:MEAN,SD, lognormal:MEAN,SD "
                "(the lengths' mean and standard deviation) or fixed:N")


@dataclass(frozen=True)
class LengthDist:
    """Token lengths drawn per request index, seeded: draw(i) is the same in every cell, rep and run."""

    kind: str  # fixed | uniform | normal | lognormal
    a: float
    b: float = 0.0
    text: str = ""
    seed: int = 0
    salt: str = ""

    def draw(self, index: int) -> int:
        if self.kind == "fixed":
            return int(self.a)
        rng = random.Random(f"{self.salt}:{self.seed}:{index}")
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        if self.kind == "normal":
            v = rng.gauss(self.a, self.b)
        else:  # lognormal with the lengths' mean a and sd b
            s2 = math.log1p((self.b / self.a) ** 2)
            v = rng.lognormvariate(math.log(self.a) - s2 / 2, math.sqrt(s2))
        return max(1, round(v))

    def describe(self) -> str:
        return self.text


def parse_length(text: str, what: str, seed: int = 0) -> LengthDist:
    """--prompt-len / --output-len: see LENGTH_FORMS. DatasetError names the flag and the forms."""
    t = text.strip().lower().replace("+/-", "±").replace("+-", "±")
    salt = what.lstrip("-")

    def bad(why: str) -> DatasetError:
        return DatasetError(f"{what} {text!r}: {why}; write {LENGTH_FORMS}, e.g. {what} 512±128")

    def whole(s: str) -> int:
        if not re.fullmatch(r"\s*\d+\s*", s):
            raise bad(f"{s.strip()!r} is not a whole number of tokens")
        return int(s)

    def number(s: str) -> float:
        try:
            v = float(s)
        except ValueError:
            raise bad(f"{s.strip()!r} is not a number") from None
        if not math.isfinite(v):
            raise bad(f"{s.strip()!r} is not a finite number")
        return v

    if "±" in t:
        n_text, _, d_text = t.partition("±")
        if not n_text.strip() or not d_text.strip():
            raise bad("± needs a length on each side")
        n, d = whole(n_text), whole(d_text)
        if n < 1 or d >= n:
            raise bad(f"{n}±{d} reaches {n - d} tokens; the spread must stay below the length")
        return LengthDist("uniform", n - d, n + d, text, seed, salt)
    name, colon, arg = t.partition(":")
    if not colon:
        n = whole(t)
        if n < 1:
            raise bad("a length is at least 1 token")
        return LengthDist("fixed", n, text=text, seed=seed, salt=salt)
    if name == "fixed":
        n = whole(arg)
        if n < 1:
            raise bad("a length is at least 1 token")
        return LengthDist("fixed", n, text=text, seed=seed, salt=salt)
    if name == "uniform":
        lo, sep, hi = arg.replace(",", "-").partition("-")
        if not sep:
            raise bad("uniform needs A-B")
        a, b = whole(lo), whole(hi)
        if not 1 <= a <= b:
            raise bad("uniform:A-B needs 1 ≤ A ≤ B")
        return LengthDist("uniform", a, b, text, seed, salt)
    if name in ("normal", "lognormal"):
        mean, sep, sd = arg.partition(",")
        if not sep:
            raise bad(f"{name} needs MEAN,SD")
        m, s = number(mean), number(sd)
        if m < 1 or s < 0:
            raise bad(f"{name} needs a mean of at least 1 token and a standard deviation of 0 or more")
        return LengthDist(name, m, s, text, seed, salt)
    raise DatasetError(f"{what} {text!r}: unknown distribution {name!r}; the distributions are fixed, uniform, "
                       f"normal and lognormal: write {LENGTH_FORMS}")


# ---- the dataset ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One request of a file: a text prompt or a synthetic one of `prompt_tokens`, and its answer length."""

    prompt_id: str
    text: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    more: tuple[tuple[str, int | None], ...] = ()  # a conversation's later turns: (human text, reply's tokens)


@dataclass(frozen=True)
class Dataset(Workload):
    """A workload with per-request prompts and lengths. Without items and without prompt_len, its prompts are
    the preset's it wraps (the fields of presets.Workload are copied), and only the answer lengths vary."""

    items: tuple[Item, ...] = ()
    prompt_len: LengthDist | None = None
    output_len: LengthDist | None = None
    cap: int | None = None  # --max-tokens given beside per-request lengths: none is longer
    times_s: Sequence[float] | None = None  # a trace: each item's arrival, s from its first
    info: dict[str, Any] = field(default_factory=dict, compare=False)  # what the run header records about it

    @property
    def varies(self) -> bool:
        """Whether answer lengths differ by request (a cell's max_tokens is then not each request's)."""
        return self.output_len is not None or any(it.output_tokens for it in self.items)

    def prompt_at(self, index: int) -> Prompt | None:
        """The index-th request's prompt; None where the wrapped preset's prompts apply."""
        if self.items:
            it = self.items[index % len(self.items)]
            if it.text is not None:
                return Prompt(it.prompt_id, text=it.text)
            return Prompt(it.prompt_id, synthetic_tokens=it.prompt_tokens)
        if self.prompt_len is not None:
            n = self.prompt_len.draw(index)
            return Prompt(f"prompt-len-{index + 1}", synthetic_tokens=n)
        return None

    def output_at(self, index: int, default: int) -> int:
        """The index-th request's max_tokens: --output-len's draw, else the file's length, else `default`
        (--max-tokens); a given --max-tokens caps the first two."""
        n = None
        if self.output_len is not None:
            n = self.output_len.draw(index)
        elif self.items:
            n = self.items[index % len(self.items)].output_tokens
        if n is None:
            return default
        return min(n, self.cap) if self.cap else n

    def turn_at(self, index: int) -> int:
        """Request index's turn in its conversation (1-based): a trace's own (TraceDataset), else 1."""
        return 1

    def longest(self, count: int, default: int) -> tuple[int, int, int] | None:
        """(index, prompt tokens, answer tokens) of the longest known request among the first `count`:
        the one a context must hold. None when no prompt length is known in tokens (text prompts)."""
        best = None
        for i in range(count):
            p = self.prompt_at(i)
            n = p.synthetic_tokens if p is not None else (self.synthetic_tokens or None)
            out = self.output_at(i, default)
            total = (n or 0) + out
            if best is None or total > best[1] + best[2]:
                best = (i, n or 0, out)
        return best


# ---- a load's index-th request -----------------------------------------------------------------------------


def request_for(workload: Workload, index: int, max_tokens: int) -> tuple[Prompt, int]:
    """The index-th request of a load: its prompt and its max_tokens (`max_tokens` unless the workload gives
    each request its own answer length: a file's, or --output-len's draw)."""
    if isinstance(workload, Dataset):
        return prompt_for(workload, index), workload.output_at(index, max_tokens)
    return prompt_for(workload, index), max_tokens


def prompt_for(workload: Workload, index: int) -> Prompt:
    """The index-th prompt of a workload, cycling through the set in order (a mixed workload puts a long
    document at every long_every-th request; its prompt_id starts with "long-", the class in summaries)."""
    if isinstance(workload, Dataset) and (p := workload.prompt_at(index)) is not None:
        return p
    if workload.long_every and index % workload.long_every == 0:
        return Prompt(f"long-{workload.long_tokens}", synthetic_tokens=workload.long_tokens)
    if workload.long_every:
        index -= index // workload.long_every + 1
    if workload.synthetic_tokens:
        return Prompt(f"synthetic-{workload.synthetic_tokens}", synthetic_tokens=workload.synthetic_tokens)
    i = index % len(workload.prompts)
    return Prompt(f"{workload.key}-{i + 1}", text=workload.prompts[i])


# ---- reading files (machine/workloads.py reads them; these parse the text) ---------------------------------------


FORMATS = {
    "jsonl": 'JSONL file, one {"prompt": "…", "output_tokens": 128} per line (output_tokens optional)',
    "sharegpt": 'ShareGPT JSON file, a list of {"conversations": [{"from": "human", "value": "…"}, '
                '{"from": "gpt", "value": "…"}]}',
    "trace": 'JSONL trace, one {"timestamp": s, "prompt_tokens": N, "output_tokens": M} per line, or an '
             "inference-top records.jsonl",
}


def _what(kind: str) -> str:
    """What a file of `kind` holds, for error lines."""
    return FORMATS[kind]


def _count(obj: dict[str, Any], names: tuple[str, ...], where: str, what: str) -> int | None:
    for n in names:
        if n in obj and obj[n] is not None:
            v = obj[n]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v < 1:
                raise DatasetError(f"{where}: {n} {v!r} must be a whole number of tokens, at least 1 ({what})")
            return int(v)
    return None


PROMPT_KEYS = ("prompt", "text", "input")
PROMPT_TOKEN_KEYS = ("prompt_tokens", "input_tokens", "input_length", "prompt_len", "context_tokens")
OUTPUT_KEYS = ("output_tokens", "max_tokens", "output_length", "output_len", "generated_tokens")


def _lines(kind: str, name: str, path: Path, text: str) -> Iterator[tuple[int, str, Any]]:
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        where = f"--workload {kind}:{name} line {i}"
        try:
            yield i, where, json.loads(s)
        except ValueError as exc:
            raise DatasetError(f"{where}: not JSON ({getattr(exc, 'msg', exc)}); each line is a "
                               f"{_what(kind).split(', ', 1)[1]}") from None


def parse_jsonl(name: str, path: Path, text: str) -> list[Item]:
    """--workload jsonl:NAME's requests from its file's text (`path` names them)."""
    stem = path.stem
    items = []
    for i, where, obj in _lines("jsonl", name, path, text):
        what = '{"prompt": "…", "output_tokens": 128}'
        if isinstance(obj, str):
            obj = {"prompt": obj}
        if not isinstance(obj, dict):
            raise DatasetError(f"{where}: a JSON {type(obj).__name__}, not an object; write {what}")
        prompt = next((obj[k] for k in PROMPT_KEYS if k in obj), None)
        n_prompt = _count(obj, PROMPT_TOKEN_KEYS, where, what)
        if prompt is not None and (not isinstance(prompt, str) or not prompt.strip()):
            raise DatasetError(f"{where}: the prompt must be a non-empty string; write {what}")
        if prompt is None and n_prompt is None:
            raise DatasetError(f"{where}: no prompt (keys: {', '.join(PROMPT_KEYS)}, or prompt_tokens for a "
                               f"synthetic prompt of that many tokens); write {what}")
        pid = str(obj.get("id")) if obj.get("id") is not None else f"{stem}-{i}"
        items.append(Item(pid, prompt, None if prompt is not None else n_prompt,
                          _count(obj, OUTPUT_KEYS, where, what)))
    if not items:
        raise DatasetError(f"--workload jsonl:{name}: holds no prompts; give a {_what('jsonl')}")
    return items


def parse_sharegpt(name: str, path: Path, text: str, count_tokens: Callable[[str], int] | None,
                   later_turns: bool = False) -> tuple[list[Item], int]:
    """--workload sharegpt:NAME's requests from its file's text: the first human turn of each conversation as
    the prompt, the reply after it as the answer length (its tokens, counted by `count_tokens`, or None where
    --output-len decides); with later_turns, the later human turns and their replies' lengths too, in `more`
    (multi-turn sessions, core/sessions.py; two human turns in a row are one message). Conversations without a
    human turn, or (with `count_tokens`) without a reply to it, are skipped (their number is returned);
    docs/design/traces.md compares this with vLLM's and GuideLLM's loaders."""
    where = f"--workload sharegpt:{name}"
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DatasetError(f"{where}: not JSON ({getattr(exc, 'msg', exc)} at line {getattr(exc, 'lineno', '?')}); "
                           f"give a {_what('sharegpt')}") from None
    if isinstance(data, dict):
        data = data.get("data", data.get("conversations"))
    if not isinstance(data, list):
        raise DatasetError(f"{where}: not a list of conversations; give a {_what('sharegpt')}")
    items, skipped = [], 0
    for n, conv in enumerate(data, 1):
        turns = conv.get("conversations", conv.get("messages")) if isinstance(conv, dict) else None
        if not isinstance(turns, list):
            raise DatasetError(f"{where}: conversation {n} has no \"conversations\" list; give a {_what('sharegpt')}")
        pairs: list[list[Any]] = []  # [human text, reply text or None] per human turn
        for t in turns:
            if not isinstance(t, dict):
                continue
            who = str(t.get("from", t.get("role", ""))).lower()
            value = t.get("value", t.get("content"))
            if not isinstance(value, str) or not value.strip():
                continue
            if who in ("human", "user"):
                if pairs and pairs[-1][1] is None:  # two human turns in a row: one message
                    pairs[-1][0] += "\n" + value
                else:
                    pairs.append([value, None])
            elif pairs and pairs[-1][1] is None and who in ("gpt", "assistant", "chatgpt", "bard", "model"):
                pairs[-1][1] = value
        if not pairs or (count_tokens is not None and pairs[0][1] is None):
            skipped += 1  # no human turn, or (its reply giving the length) no reply: vLLM and GuideLLM drop it too
            continue
        pid = str(conv.get("id")) if conv.get("id") is not None else f"{path.stem}-{n}"
        if not later_turns:
            pairs = pairs[:1]
        lengths = [count_tokens(reply) if (reply is not None and count_tokens is not None) else None
                   for _, reply in pairs]
        items.append(Item(pid, pairs[0][0], None, lengths[0],
                          tuple((h, n_out) for (h, _), n_out in zip(pairs[1:], lengths[1:]))))
    if not items:
        raise DatasetError(f"{where}: no conversation with a human turn; give a {_what('sharegpt')}")
    return items, skipped


TIME_KEYS = ("timestamp", "time", "arrival_time", "t")


def parse_trace(name: str, path: Path, text: str, read_records: RecordsReader | None = None
                ) -> tuple[list[Item], list[float], dict[str, Any]]:
    """--workload trace:NAME's requests and times from its file's text: a timestamped trace (times in s;
    `timestamp_ms` in ms), or an inference-top records.jsonl (its requests' scheduled times, prompt and answer
    lengths, read with `read_records`: machine/recorder.read_jsonl). Sorted by time; times from the first."""
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    try:
        head = json.loads(first)
    except ValueError:
        head = None
    if isinstance(head, dict) and head.get("kind") == "header":
        if read_records is None:
            raise DatasetError(f"--workload trace:{name}: an inference-top records file, read only through "
                               "--workload (machine/workloads.resolve gives the recorder's reader)")
        return _records_trace(name, path, read_records)
    what = '{"timestamp": 0.25, "prompt_tokens": 512, "output_tokens": 128}'
    rows = []
    for i, where, obj in _lines("trace", name, path, text):
        if not isinstance(obj, dict):
            raise DatasetError(f"{where}: a JSON {type(obj).__name__}, not an object; write {what}")
        t = None
        for k in TIME_KEYS + ("timestamp_ms",):
            if k in obj:
                v = obj[k]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                    raise DatasetError(f"{where}: {k} {v!r} must be a number of seconds ≥ 0 (timestamp_ms for "
                                       f"milliseconds); write {what}")
                t = v / 1000 if k == "timestamp_ms" else float(v)
                break
        if t is None:
            raise DatasetError(f"{where}: no timestamp (s; timestamp_ms for ms); write {what}")
        n_prompt = _count(obj, PROMPT_TOKEN_KEYS, where, what)
        n_out = _count(obj, OUTPUT_KEYS, where, what)
        if n_prompt is None or n_out is None:
            raise DatasetError(f"{where}: needs prompt_tokens and output_tokens; write {what}")
        rows.append((t, Item(f"{path.stem}-{i}", None, n_prompt, n_out)))
    if not rows:
        raise DatasetError(f"--workload trace:{name}: holds no requests; give a {_what('trace')}")
    rows.sort(key=lambda r: r[0])
    t0 = rows[0][0]
    return [r[1] for r in rows], [r[0] - t0 for r in rows], {"trace_format": "timestamped JSONL"}


def _records_trace(name: str, path: Path, read_records: RecordsReader
                   ) -> tuple[list[Item], list[float], dict[str, Any]]:
    where = f"--workload trace:{name}"
    try:
        headers, records, _ = read_records(path)
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{where}: an inference-top records file that cannot be read ({exc})") from None
    default_out = headers[0].max_tokens if headers else None
    rows, skipped = [], 0
    for r in sorted(records, key=lambda r: (r.t_scheduled_ns, r.request_id)):
        out = r.output_tokens if not r.error and r.output_tokens else default_out
        if not r.prompt_tokens or not out:
            skipped += 1  # a prompt of unknown length (a server that sent no usage), or nothing to ask for
            continue
        rows.append((r.t_scheduled_ns, Item(f"{path.stem}-{r.request_id}", None, r.prompt_tokens, int(out))))
    if not rows:
        raise DatasetError(f"{where}: no request with a known prompt length to replay ({skipped} without); record "
                           "with a local engine or a server that reports usage")
    t0 = rows[0][0]
    info = {"trace_format": "inference-top records", "trace_run_id": headers[0].run_id if headers else None,
            "trace_skipped": skipped}
    return [r[1] for r in rows], [(t - t0) / 1e9 for t, _ in rows], info


def check_fits(wl: Workload, count: int, default_max: int, ctx: int) -> str | None:
    """The first `count` requests against a context of `ctx` tokens (local engines): a reason when the longest
    known prompt + answer does not fit, else None."""
    if not isinstance(wl, Dataset):
        return None
    worst = wl.longest(count, default_max)
    if worst is None:
        return None
    i, n_prompt, n_out = worst
    if n_prompt + n_out <= ctx:
        return None
    what = f"a prompt of {n_prompt} tokens + {n_out} answer tokens" if n_prompt else f"{n_out} answer tokens"
    return (f"--workload {wl.key}: request {i + 1} asks for {what} = {n_prompt + n_out}, over --ctx {ctx}; raise "
            f"--ctx to {n_prompt + n_out} or more, or cap the answers with --max-tokens")


def header_info(wl: Workload) -> dict[str, Any]:
    """What a run header records about the workload beyond its key (file, sha256 prefix, length specs)."""
    return dict(wl.info) if isinstance(wl, Dataset) else {}


__all__ = ["Dataset", "DatasetError", "Item", "LengthDist", "parse_length", "check_fits", "header_info",
           "parse_jsonl", "parse_sharegpt", "parse_trace", "SAMPLES", "FORMATS", "KINDS", "RecordsReader",
           "request_for", "prompt_for"]
