"""Public serving traces read as they are published (docs/design/traces.md): each format is one class below (its
columns, time unit, block size, sessions and parse), and TRACE_FORMATS is their table, the one place the rest of
the code finds a trace kind (`--workload KIND:FILE`).

Files are **streamed**: one pass reads and checks every row (a bad row is one line naming the file, the line
and what was expected), hashes the file, and keeps only a byte offset every CHUNK rows; a request's row is read
again from there when the load reaches it (the rows of the CHUNKS_KEPT last chunks are kept), so a 16.8 M-row
week does not sit in memory. Rows must be sorted by time, as the published files are. The file itself is opened
by measure/machine/workloads.py (a TraceFile hands its lines here from a byte offset).

Block ids become text: block id h is BLOCK_WORDS words drawn from VOCAB seeded by h (each word one token in
common tokenizers), the same words wherever h appears, so a server's prefix cache sees the reuse the trace
recorded; `--prefix-cache off` puts a unique prefix before each prompt and defeats it.
"""
from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
import json
import math
import random
import re
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, overload

from engines.base import Prompt
from measure.core.datasets import Dataset, DatasetError, LengthDist
from presets import Workload

CHUNK = 4096  # rows between two kept byte offsets
CHUNKS_KEPT = 4

# Common English words, each one token (with its leading space) in the Gemma, Llama 3 and Qwen tokenizers.
VOCAB = tuple("""the of and to in is was for on as with by he at from his an were are which this be or had not
but have one they you all her she there their been has who can more when will would so no if out new up two what
time into only some other could first than then its also after them way about over many may these just any most
well like people such where should each back those both year good great must while city world state day life made
part long own down even war game work same high still three found before house under home during between water
little name very because last being through might place small world open left little since power number used took
light school group never came best early church family run music line end point king team mother father free
book set few name high left hand show four age less best land form night death side five three young six real
word body town need food help case city head tree dark kind half river road army head heart field love play
sea sun black white green red blue gold stone fire wind rain snow ice star moon light color voice face eye door
wall floor table chair bed room window garden street bridge train ship car plane bird fish horse dog cat lion
bear wolf song story letter paper page picture film art dance sport ball money price market bank trade law court
police doctor teacher student child baby friend brother sister uncle queen prince lord god spirit mind idea
fact truth peace fear hope dream sleep walk talk read write sing swim fly drive build grow cook eat drink""".split())
VOCAB = tuple(dict.fromkeys(VOCAB))  # each once


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of a trace: its time (s from the first kept row), lengths, block ids, and in a trace of
    sessions its parent's row index (−1: a root) and turn."""

    index: int
    line: int
    t: float
    prompt: int
    output: int
    hash_ids: tuple[int, ...] = ()
    parent: int = -1
    turn: int = 1


class Parsed(NamedTuple):
    """One row as its format reads it: its time in s (raw: from the file's zero), lengths, block ids, and in a
    format of sessions its chat, its parent's chat and its turn."""

    t: float
    prompt: int
    output: int
    hash_ids: tuple[int, ...] = ()
    chat: int = 0
    parent: int = 0
    turn: int = 1


@dataclass(frozen=True)
class TraceFile:
    """A trace file as machine/workloads.trace_file opens it: the path as given (its name and stem name the
    requests), its absolute path for the run header, and its raw lines from a byte offset (bytes, each with its
    line ending; OSError where it cannot be read)."""

    path: Path
    resolved: str
    lines_from: Callable[[int], Iterator[bytes]]


class RowReader:
    """A trace file's rows, line by line, in its format: what the format keeps between rows (a CSV's header
    columns, the first row's absolute time) and the checks every format shares; bad() names the line."""

    def __init__(self, fmt: TraceFormat, name: str, model_filter: str | None):
        self.fmt, self.name = fmt, name
        self.model_filter = model_filter.lower() if model_filter else None
        self.cols: dict[str, int] = {}
        self.ncols = 0
        self.t0: tuple[int, float] | None = None  # a format of absolute times: the first row's (whole s, fraction)
        self.offset: bool | None = None  # whether those times name a UTC offset

    def resume(self, scanned: RowReader) -> RowReader:
        """This reader, holding what the scan's reader learnt (its header, its first time): to read rows again
        from a chunk's offset."""
        self.cols, self.ncols, self.t0, self.offset = scanned.cols, scanned.ncols, scanned.t0, scanned.offset
        return self

    def bad(self, line: int, why: str) -> DatasetError:
        return DatasetError(f"--workload {self.fmt.name}:{self.name} line {line}: {why}; expected: {self.fmt.what}")

    def header(self, line: int, text: str) -> None:
        names = [c.strip().lower() for c in text.rstrip("\r\n").lstrip("\ufeff").split(",")]
        missing = [n for n in self.fmt.columns if n not in names]
        if missing:
            raise self.bad(line, f"the header {text.strip()!r} lacks the column{'s' if len(missing) > 1 else ''} "
                                 + ", ".join(repr(m) for m in missing))
        self.cols = {n: i for i, n in enumerate(names)}
        self.ncols = len(names)

    def count(self, line: int, col: str, v: Any) -> int:
        """A number of tokens, 0 or more."""
        raw = v
        if isinstance(v, str):
            try:
                v = float(v) if v.strip() else None
            except ValueError:
                raise self.bad(line, f"{col} {v!r} is not a number") from None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v) or v < 0:
            raise self.bad(line, f"{col} {raw!r} must be a whole number of tokens, 0 or more")
        return int(v)

    def time(self, line: int, col: str, v: Any) -> float:
        """A time ≥ 0 in the file's unit."""
        if isinstance(v, str):
            try:
                v = float(v)
            except ValueError:
                raise self.bad(line, f"{col} {v!r} is not a number") from None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise self.bad(line, f"{col} {v!r} must be a time ≥ 0")
        return float(v)

    def signed(self, line: int, key: str, v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.bad(line, f"{key} {v!r} must be a whole number")
        return v

    def parse(self, line: int, text: str) -> Parsed | None:
        """The row of this line, None for a row dropped by --model-filter. A row of 0 tokens comes back with its
        zeros (the caller counts and drops it)."""
        return self.fmt.parse(self, line, text)


class TraceFormat(ABC):
    """A published trace format, declared: its name (`--workload NAME:FILE`), what a file holds, the columns a
    row needs, its time unit, its block size, whether rows link sessions or name their model; parse() reads one
    row. Each format is a subclass below registered in TRACE_FORMATS by @_declared."""

    name: ClassVar[str]
    title: ClassVar[str]  # as its authors write it
    what: ClassVar[str]  # what a file holds, for error lines
    columns: ClassVar[tuple[str, ...]]  # the keys (JSONL) or header columns (CSV, lower case) every row needs
    csv: ClassVar[bool] = False  # a CSV with a header line (else JSONL)
    units_per_s: ClassVar[float] = 1.0  # the timestamps' unit: 1000.0 for milliseconds
    block: ClassVar[int] = 0  # tokens per hash id, prefix-chained (0: rows carry no block ids)
    sessions: ClassVar[bool] = False  # rows name their parent: a follow-up waits for its parent's answer
    model_column: ClassVar[bool] = False  # rows name their model (--model-filter picks them)

    @property
    def ext(self) -> str:
        return "csv" if self.csv else "jsonl"

    @abstractmethod
    def parse(self, r: RowReader, line: int, text: str) -> Parsed | None:
        """The row of this line (None: dropped by --model-filter); r.bad(line, why) for a bad one."""

    def variant(self, r: RowReader) -> str:
        """Which of its variants the file is, seen in its rows ('' for a format of one)."""
        return ""


TRACE_FORMATS: dict[str, TraceFormat] = {}  # name → format, in the order of the classes below


def _declared(cls: type[TraceFormat]) -> type[TraceFormat]:
    fmt = cls()
    TRACE_FORMATS[fmt.name] = fmt
    return cls


class _Jsonl(TraceFormat):
    """One JSON object a line: `timestamp`, `input_length`, `output_length`, `hash_ids`, and in a format of
    sessions `chat_id`, `parent_chat_id` and `turn`."""

    columns: ClassVar[tuple[str, ...]] = ("timestamp", "input_length", "output_length", "hash_ids")

    def parse(self, r: RowReader, line: int, text: str) -> Parsed:
        try:
            obj = json.loads(text.lstrip("\ufeff") if line == 1 else text)
        except ValueError as exc:
            raise r.bad(line, f"not JSON ({getattr(exc, 'msg', exc)}; a truncated line?)") from None
        if not isinstance(obj, dict):
            raise r.bad(line, f"a JSON {type(obj).__name__}, not an object")
        missing = [k for k in self.columns if k not in obj]
        if missing:
            raise r.bad(line, "no " + ", ".join(repr(m) for m in missing))
        t = r.time(line, "timestamp", obj["timestamp"]) / self.units_per_s
        ids = obj["hash_ids"]
        if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
            raise r.bad(line, "hash_ids must be a list of whole numbers")
        chat = parent = turn = 0
        if self.sessions:
            chat, parent = (r.signed(line, k, obj[k]) for k in ("chat_id", "parent_chat_id"))
            turn = r.signed(line, "turn", obj.get("turn", 1))
        return Parsed(t, r.count(line, "input_length", obj["input_length"]),
                      r.count(line, "output_length", obj["output_length"]), tuple(ids), chat, parent, turn)


@_declared
class Mooncake(_Jsonl):
    """FAST'25 Mooncake traces (JSONL): `timestamp` in **milliseconds**, `input_length`, `output_length`,
    `hash_ids`: one id per 512-token block, prefix-chained (an equal id means that block and all before it are
    the same tokens)."""

    name = "mooncake"
    title = "Mooncake"
    what = ('Mooncake JSONL, one {"timestamp": ms, "input_length": N, "output_length": M, "hash_ids": [...]} '
            'per line')
    units_per_s = 1000.0
    block = 512


@_declared
class Bailian(_Jsonl):
    """Alibaba Qwen-Bailian traces (JSONL): `chat_id`, `parent_chat_id` (−1 for a root), `timestamp` in
    seconds, `input_length` (a follow-up's includes its history), `output_length`, `type`, `turn`, `hash_ids`
    over 16-token blocks. A follow-up is sent after its parent's answer has ended: at its own time, or then,
    whichever is later (arrivals.TraceSessions)."""

    name = "bailian"
    title = "Bailian"
    what = ('Bailian JSONL, one {"chat_id", "parent_chat_id", "timestamp": s, "input_length", "output_length", '
            '"type", "turn", "hash_ids"} per line')
    columns = _Jsonl.columns + ("chat_id", "parent_chat_id")
    block = 16
    sessions = True


class _Csv(TraceFormat):
    """A CSV with a header line naming its columns (any order, any case); row() reads a row's fields."""

    csv = True

    def parse(self, r: RowReader, line: int, text: str) -> Parsed | None:
        s = text.rstrip("\r\n")
        if '"' in s:
            import csv

            fields = next(csv.reader([s]))
        else:
            fields = s.split(",")
        if len(fields) != r.ncols:
            raise r.bad(line, f"{len(fields)} fields where the header has {r.ncols} (a truncated line?)")
        return self.row(r, line, fields)

    @abstractmethod
    def row(self, r: RowReader, line: int, fields: list[str]) -> Parsed | None:
        """The row of these fields (the header's columns in r.cols)."""


@_declared
class BurstGPT(_Csv):
    """BurstGPT (CSV): `Timestamp` (s from the trace's start), `Model`, `Request tokens`, `Response tokens`,
    `Total tokens`, `Log Type`; newer files add `Session ID` and `Elapsed time`. Rows with 0 request or
    response tokens (failures, ≈ 1.8 % of the published file) are dropped and counted; `--model-filter`."""

    name = "burstgpt"
    title = "BurstGPT"
    what = "BurstGPT CSV with the header Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
    columns = ("timestamp", "model", "request tokens", "response tokens")
    model_column = True

    def row(self, r: RowReader, line: int, fields: list[str]) -> Parsed | None:
        c = r.cols
        if r.model_filter and fields[c["model"]].strip().lower() != r.model_filter:
            return None
        return Parsed(r.time(line, "Timestamp", fields[c["timestamp"]]),
                      r.count(line, "Request tokens", fields[c["request tokens"]]),
                      r.count(line, "Response tokens", fields[c["response tokens"]]))


@_declared
class Azure(_Csv):
    """Azure LLM inference traces (CSV `TIMESTAMP,ContextTokens,GeneratedTokens`): 2023's naive times with 7
    fractional digits, 2024's with a `+00:00` offset; told apart by the first row."""

    name = "azure"
    title = "Azure"
    what = "Azure LLM inference trace CSV with the header TIMESTAMP,ContextTokens,GeneratedTokens"
    columns = ("timestamp", "contexttokens", "generatedtokens")
    TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?(Z|[+-]\d\d:?\d\d)?")

    @classmethod
    def parse_time(cls, raw: str) -> tuple[int, float, bool] | None:
        """A TIMESTAMP: (whole seconds since 0001-01-01 UTC, the fraction, whether it named an offset), any
        number of fractional digits (2023's files have 7, more than strptime's %f and Python 3.10's
        fromisoformat take); None for anything else."""
        m = cls.TIME.fullmatch(raw)
        if m is None:
            return None
        y, mo, d, h, mi, sec = (int(g) for g in m.groups()[:6])
        try:
            day = date(y, mo, d).toordinal()
        except ValueError:
            return None
        if h > 23 or mi > 59 or sec > 60:
            return None
        tz, frac = m.group(8), m.group(7)
        off = 0 if tz in (None, "Z") else (-1 if tz[0] == "-" else 1) * (int(tz[1:3]) * 3600 + int(tz[-2:]) * 60)
        whole = day * 86400 + h * 3600 + mi * 60 + sec - off
        return whole, int(frac) / 10 ** len(frac) if frac else 0.0, tz is not None

    def row(self, r: RowReader, line: int, fields: list[str]) -> Parsed:
        c = r.cols
        raw = fields[c["timestamp"]].strip()
        got = self.parse_time(raw)
        if got is None:
            raise r.bad(line, f"TIMESTAMP {raw!r} is not a time like 2023-11-16 18:15:46.6805900 or "
                              "2024-05-10 00:00:00.009930+00:00")
        whole, frac, has_offset = got
        if r.t0 is None:
            r.t0, r.offset = (whole, frac), has_offset
        elif has_offset != r.offset:
            raise r.bad(line, f"TIMESTAMP {raw!r} {'lacks' if r.offset else 'has'} a UTC offset where "
                              "the first row's time " + ("has one" if r.offset else "does not"))
        return Parsed((whole - r.t0[0]) + (frac - r.t0[1]),
                      r.count(line, "ContextTokens", fields[c["contexttokens"]]),
                      r.count(line, "GeneratedTokens", fields[c["generatedtokens"]]))

    def variant(self, r: RowReader) -> str:
        return "2024 (UTC offsets)" if r.offset else "2023 (naive times)"


def model_filter_error(kind: str) -> DatasetError:
    """--model-filter given with a trace whose rows name no model."""
    which = " or ".join(f"{f.title} trace's" for f in TRACE_FORMATS.values() if f.model_column)
    return DatasetError(f"--model-filter picks a {which} rows by their Model column: it does not apply to "
                        f"--workload {kind}:")


class TraceTable(Sequence[TraceRow]):
    """A trace file's kept rows, streamed: scanned once at open (checks, counts, sha256, a byte offset every
    CHUNK rows), each row read again from its chunk when asked for (the CHUNKS_KEPT last chunks kept)."""

    def __init__(self, fmt: TraceFormat, name: str, source: TraceFile, model_filter: str | None = None):
        self.fmt, self.kind, self.name, self.source, self.path = fmt, fmt.name, name, source, source.path
        self.model_filter = model_filter
        self.block = fmt.block
        self._offsets: list[tuple[int, int]] = []  # (byte offset, line number) of rows 0, CHUNK, 2·CHUNK …
        self._chunks: OrderedDict[int, list[TraceRow]] = OrderedDict()
        self.parents: array[int] | None = array("q") if fmt.sessions else None
        self.zero_rows = self.filtered = self.orphans = self.mismatched = 0
        self.sessions = 0
        self.n = 0
        self.last_t = 0.0
        self.t0 = 0.0
        self.sha256 = ""
        self.variant = ""
        self._header_line: str | None = None
        self._scan()

    # -- the one pass
    def _lines(self, start: int = 0, line_no: int = 0) -> Iterator[tuple[int, int, str, bytes]]:
        """(line number, byte offset, text, raw bytes) from byte `start` (whose line is line_no + 1)."""
        try:
            off = start
            for raw in self.source.lines_from(start):
                line_no += 1
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise DatasetError(f"--workload {self.kind}:{self.name} line {line_no}: not UTF-8 text; "
                                       f"expected: {self.fmt.what}") from None
                yield line_no, off, text, raw
                off += len(raw)
        except OSError as exc:
            raise DatasetError(f"--workload {self.kind}:{self.name}: cannot read it ({exc.strerror or exc})") from None

    def _scan(self) -> None:
        p = RowReader(self.fmt, self.name, self.model_filter)
        h = hashlib.sha256()
        chats: dict[int, int] = {}  # a format of sessions: chat id → its row index
        prev_t: float | None = None
        prev_line = 0
        csv = self.fmt.csv
        for line, off, text, raw in self._lines():
            h.update(raw)
            if not text.strip():
                continue
            if csv and self._header_line is None:
                p.header(line, text)
                self._header_line = text
                continue
            got = p.parse(line, text)
            if got is None:
                self.filtered += 1
                continue
            t, n_in, n_out, ids, chat, parent, _ = got
            if prev_t is not None and t < prev_t:
                raise p.bad(line, f"its time is {prev_t - t:g} s before line {prev_line}'s: the rows must be sorted "
                                  "by time")
            prev_t, prev_line = t, line
            if n_in == 0 or n_out == 0:
                self.zero_rows += 1
                continue
            if self.n == 0:
                self.t0 = t  # times count from the first kept row
            if self.block and len(ids) != -(-n_in // self.block):
                self.mismatched += 1
            if self.parents is not None:
                if parent >= 0 and parent not in chats:
                    self.orphans += 1  # its parent is not in the file (a sampled trace): sent as a root
                self.parents.append(chats.get(parent, -1) if parent >= 0 else -1)
                if parent < 0 or parent not in chats:
                    self.sessions += 1
                chats[chat] = self.n
            if self.n % CHUNK == 0:
                self._offsets.append((off, line - 1))
            self.n += 1
            self.last_t = t - self.t0
        self.sha256 = h.hexdigest()[:16]
        if self._header_line is None and csv:
            raise DatasetError(f"--workload {self.kind}:{self.name}: the file is empty; expected: {self.fmt.what}")
        self.variant = self.fmt.variant(p)
        self._scanned = p

    # -- reading rows back
    def _chunk(self, c: int) -> list[TraceRow]:
        if c in self._chunks:
            self._chunks.move_to_end(c)
            return self._chunks[c]
        p = RowReader(self.fmt, self.name, self.model_filter).resume(self._scanned)
        start, line0 = self._offsets[c]
        rows: list[TraceRow] = []
        i = c * CHUNK
        for line, _, text, _ in self._lines(start, line0):
            if len(rows) == CHUNK or i >= self.n:
                break
            if not text.strip():
                continue
            got = p.parse(line, text)
            if got is None or got[1] == 0 or got[2] == 0:
                continue
            t, n_in, n_out, ids, _, _, turn = got
            rows.append(TraceRow(i, line, t - self.t0, n_in, n_out, ids,
                            self.parents[i] if self.parents is not None else -1, turn))
            i += 1
        self._chunks[c] = rows
        while len(self._chunks) > CHUNKS_KEPT:
            self._chunks.popitem(last=False)
        return rows

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, i: int) -> TraceRow: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[TraceRow]: ...

    def __getitem__(self, i: int | slice) -> TraceRow | Sequence[TraceRow]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self._chunk(i // CHUNK)[i % CHUNK]


class TraceTimes(Sequence[float]):
    """A trace's arrival times (s from its first row) as a sequence, read through its table: what
    arrivals.ArrivalSpec replays, without a list of every time."""

    def __init__(self, table: TraceTable):
        self.table = table

    def __len__(self) -> int:
        return self.table.n

    @overload
    def __getitem__(self, i: int) -> float: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[float]: ...

    def __getitem__(self, i: int | slice) -> float | Sequence[float]:
        if isinstance(i, slice):
            return [self.table[j].t for j in range(*i.indices(self.table.n))]
        if i == -1 or i == self.table.n - 1:
            return self.table.last_t
        return self.table[i].t


class TraceAfter(Sequence[int]):
    """Each request's parent's index (−1: none): a trace's session links, for TraceSessions."""

    def __init__(self, parents: array[int]):
        self.parents = parents

    def __len__(self) -> int:
        return len(self.parents)

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[int]: ...

    def __getitem__(self, i: int | slice) -> int | Sequence[int]:
        return list(self.parents[i]) if isinstance(i, slice) else self.parents[i]


# ---- block ids as text ------------------------------------------------------------------------------------------


@lru_cache(maxsize=8192)
def block_words(block: int, h: int) -> tuple[str, ...]:
    """The words of block id h in a trace of `block`-token blocks: the same wherever h appears."""
    return tuple(random.Random(f"block:{block}:{h}").choices(VOCAB, k=block))


def blocks_text(ids: Sequence[int], n_tokens: int, block: int, own: str) -> str:
    """A prompt of about n_tokens tokens (one word each) from its block ids: block j is block_words(ids[j]),
    the last one cut to what is left; tokens past the ids (a trace whose ids cover less) are words of blocks
    only this request has (`own`, its id)."""
    words: list[str] = []
    j = 0
    while len(words) < n_tokens:
        if j < len(ids):
            h = block_words(block, ids[j])
        else:  # a block only this request has, its id from sha256: str hash() is salted per process
            own_id = int(hashlib.sha256(f"own:{own}:{j}".encode()).hexdigest()[:16], 16)
            h = block_words(block, own_id & (2**62 - 1))
        words.extend(h[:n_tokens - len(words)])
        j += 1
    return " ".join(words)


# ---- the dataset ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceDataset(Dataset):
    """A public trace as a workload: request i is row i (cycling), its prompt the row's block ids as text (or a
    synthetic prompt of its length where the trace has no ids), its answer length the row's output."""

    table: TraceTable | None = field(default=None, compare=False)

    @property
    def varies(self) -> bool:
        return True

    @property
    def shares_prefixes(self) -> bool:
        """Whether its prompts carry the trace's block ids (a prefix cache has something to find)."""
        return self.table is not None and self.table.block > 0

    def row(self, index: int) -> TraceRow:
        assert self.table is not None
        return self.table[index % self.table.n]

    def turn_at(self, index: int) -> int:
        return self.row(index).turn

    def prompt_at(self, index: int) -> Prompt | None:
        r = self.row(index)
        assert self.table is not None
        pid = f"{self.table.path.stem}-{r.line}"
        if self.table.block:
            return Prompt(pid, text=blocks_text(r.hash_ids, r.prompt, self.table.block, pid))
        return Prompt(pid, synthetic_tokens=r.prompt)

    def output_at(self, index: int, default: int) -> int:
        if self.output_len is not None:
            n = self.output_len.draw(index)
        else:
            n = self.row(index).output
        return min(n, self.cap) if self.cap else n

    def longest(self, count: int, default: int) -> tuple[int, int, int] | None:
        best = None
        for i in range(count):
            n, out = self.row(i).prompt, self.output_at(i, default)
            if best is None or n + out > best[1] + best[2]:
                best = (i, n, out)
        return best


def load(kind: str, name: str, source: TraceFile, *, output_len: LengthDist | None, max_tokens: int | None,
         model_filter: str | None, seed: int, output_spec: str | None) -> TraceDataset:
    """--workload KIND:FILE for the public traces (KIND in TRACE_FORMATS; `source` the file as
    machine/workloads.trace_file opens it). DatasetError: one line."""
    fmt = TRACE_FORMATS[kind]
    if model_filter and not fmt.model_column:
        raise model_filter_error(kind)
    table = TraceTable(fmt, name, source, model_filter)
    path = source.path
    if not table.n:
        why = (f"no row of Model {model_filter!r} ({table.filtered} rows of other models)" if table.filtered
               else f"no request with tokens ({table.zero_rows} rows of 0 tokens)" if table.zero_rows
               else "no requests")
        raise DatasetError(f"--workload {kind}:{name}: {why}; expected: {fmt.what}")
    desc = f"{table.n} requests from {path.name} ({kind}" + (f" {table.variant}" if table.variant else "")
    notes = []
    if table.zero_rows:
        notes.append(f"{table.zero_rows} rows of 0 tokens dropped")
    if table.filtered:
        notes.append(f"{table.filtered} rows of other models dropped")
    if table.parents is not None:
        notes.append(f"{table.sessions} sessions")
    desc += "".join(f"; {n}" for n in notes) + ")"
    info: dict[str, Any] = {
        "workload_file": source.resolved, "workload_sha256": table.sha256, "workload_items": table.n,
        "trace_format": kind + (f" {table.variant}" if table.variant else ""), "output_len": output_spec,
        "length_seed": seed, "trace_span_s": table.last_t}
    if table.block:
        info["trace_block_tokens"] = table.block
    if fmt.csv:
        info["trace_zero_token_rows"] = table.zero_rows
    if model_filter:
        info.update(trace_model_filter=model_filter, trace_filtered_rows=table.filtered)
    if table.parents is not None:
        info.update(trace_sessions=table.sessions, trace_orphans=table.orphans)
    if table.mismatched:
        info["trace_hash_mismatch_rows"] = table.mismatched
    return TraceDataset(f"{kind}:{name}", desc, source=str(path), output_len=output_len, cap=max_tokens,
                        times_s=TraceTimes(table), info=info, table=table)


def after_of(wl: Workload) -> Sequence[int] | None:
    """A trace's session links (each request's parent's index, −1 for none) where its format has sessions, else
    None."""
    if isinstance(wl, TraceDataset) and wl.table is not None and wl.table.parents is not None:
        return TraceAfter(wl.table.parents)
    return None


# ---- a trace's sessions -----------------------------------------------------------------------------------------


__all__ = ["TRACE_FORMATS", "TraceFormat", "TraceFile", "TraceDataset", "TraceTable", "TraceTimes", "TraceRow", "load",
           "after_of", "model_filter_error", "blocks_text", "block_words", "VOCAB"]
