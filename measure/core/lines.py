"""Every line on disk, typed (docs/design.md §3): a recording's or records.jsonl's `header` (RunHeader), `request`
(records.RequestRecord), `event`, `sample` and `step_row` lines, and the one validator every reader uses.

The validator is built from each dataclass's annotations (typing.get_type_hints over its fields): a field
without a default must be present, every field present must have its annotated type (an int is a float, a
bool is neither), and keys the dataclass does not name are allowed and kept (a newer writer's fields, the
header's descriptive ones), as every reader did before. Writers build the dataclass and serialise it with
`to_line`: its fields in their declared order, so the bytes on disk are the ones the dict literals wrote.
"""
from __future__ import annotations

import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal, Union

from measure.core.records import RequestRecord


class LineError(ValueError):
    """A line that is not one inference-top wrote: one line naming the field."""


@dataclass(frozen=True, kw_only=True)
class RunHeader:
    """The first line of every records file and recording. Its typed fields are the ones readers use; the rest
    (environment, argv, the engine's settings …) describes the run and is kept, in its order, in `line`.
    Build it with `RunHeader.of(the header dict)`."""

    kind: Literal["header"] = "header"
    command: str | None = None  # dashboard | bench | tune; absent in a test's or truth matrix's recording
    engine: str = "?"
    model: str | None = None  # an http server's model may be unknown
    model_bytes: int | None = 0  # W; None: not given
    bandwidth_gbps: float | None = None
    chip: str | None = None
    simulated: bool = False
    settings: dict[str, Any] = field(default_factory=dict)  # a dashboard's LiveSettings, as asdict wrote them
    max_tokens: int | None = None
    url: str | None = None
    started_unix: float | None = None
    start_perf_ns: int | None = None  # several clients (§17): their common start on this client's clock
    start_at_unix: float | None = None
    line: Mapping[str, Any] = field(default_factory=dict, repr=False)  # the header as written, every key

    @classmethod
    def of(cls, line: Mapping[str, Any], where: str = "the header") -> RunHeader:
        check(cls, line, where, "header")
        return cls(**{f.name: line[f.name] for f in fields(cls) if f.name in line and f.name != "line"},
                   line=dict(line))

    def to_line(self) -> dict[str, Any]:
        return dict(self.line, kind="header")


@dataclass(frozen=True, kw_only=True)
class EventLine:
    """A dashboard's log line, marker, level change or load start. Its other keys (`level`, `type`, a client's
    outcome) come before these three on disk."""

    kind: Literal["event"] = "event"
    t_ns: int
    text: str = ""


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One sampler tick of the dashboard: everything a replay needs to draw that moment again. The defaults
    are what a reader assumed of a sample written before the field existed."""

    kind: Literal["sample"] = "sample"
    t_ns: int
    t: float = 0.0  # s since the session began
    k: int = 1
    b: int = 1
    mode: str = "instances"
    paused: bool = False
    state: str = ""
    users: int | None = None
    system: dict[str, Any]  # probes.SystemSample's fields
    workers: list[dict[str, Any]] = field(default_factory=list)  # base.WorkerInfo's fields
    procs: dict[str, list[float]] = field(default_factory=dict)  # pid → (RSS, CPU %)
    agg_tps: float | None = None
    tpot_p50: float | None = None
    bw_gbps: float | None = None
    concurrency: float | None = None


@dataclass(frozen=True)
class StepRow:
    """A row of the live step table (control/live/steps.py, docs/design.md §9); on disk a `step_row` line, its
    fields after the kind and the time it was written (`step_row_line`)."""

    level: str
    mode: str
    k: int
    b: int
    settled: bool
    progress: str  # "settled", or what it still waits for
    concurrency: float | None
    agg_tps: float | None
    per_user_tps: float | None  # 1 ÷ TPOT p50
    tpot_p50: float | None
    ttft_p50: float | None
    ttft_p99: float | None
    requests: int
    goodput_rps: float | None
    goodput_tps: float | None
    attainment: float | None
    mem_used: int | None
    bw_gbps: float | None
    predicted_tps: float | None
    wall: str
    watts: float | None = None
    usd_per_mtok: float | None = None
    best: bool = False

    def to_dict(self) -> dict[str, Any]:
        return to_line(self)  # every field is a number or a string


@dataclass(frozen=True, kw_only=True)
class _Stamp:
    """What a step_row line carries before its row's fields."""

    kind: Literal["step_row"] = "step_row"
    t_ns: int


def to_line(obj: Any, first: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A line's dict: `first` (keys beyond the schema a writer puts before it), then the dataclass's fields in
    their declared order."""
    return {**(first or {}), **{f.name: getattr(obj, f.name) for f in fields(obj)}}


def step_row_line(row: StepRow, t_ns: int) -> dict[str, Any]:
    return {**to_line(_Stamp(t_ns=t_ns)), **to_line(row)}


def event_line(t_ns: int, text: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    first = {k: v for k, v in extra.items() if k not in ("kind", "t_ns", "text")}
    return to_line(EventLine(t_ns=t_ns, text=text), first=first)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls)}


def _required(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)


def fits(value: Any, tp: Any) -> bool:
    """`value` (as json.loads gives it) has the annotated type `tp`."""
    if tp is Any:
        return True
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return any(fits(value, t) for t in typing.get_args(tp))
    if origin is Literal:
        return value in typing.get_args(tp)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return isinstance(value, list) and all(fits(v, item) for v in value)
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        key, val = typing.get_args(tp) or (Any, Any)
        return isinstance(value, dict) and all(fits(k, key) and fits(v, val) for k, v in value.items())
    raise TypeError(f"no check for the annotation {tp!r}")  # a field of a type this module does not know


def _type_name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")


def check(cls: type, line: Mapping[str, Any], where: str, what: str) -> None:
    """LineError naming the first field of `cls` that `line` lacks or has of another type. `where`: the file
    and line number; `what`: the kind of line, as the message says it."""
    hints = _hints(cls)
    for name in _required(cls):
        if name not in line:
            raise LineError(f"{where}: a {what} line without its {name}: not one inference-top wrote")
    for name, tp in hints.items():
        if name in line and name != "line" and not fits(line[name], tp):
            shown = repr(line[name])
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            raise LineError(f"{where}: a {what} line whose {name} is {shown}, not {_type_name(tp)}: not one "
                            "inference-top wrote")


def request_of(line: Mapping[str, Any], where: str) -> RequestRecord:
    """A request line's record, its fields checked: the types every metric relies on, and a first token only
    after a start (every TTFT subtracts the start)."""
    check(RequestRecord, line, where, "request")
    rec = RequestRecord.from_dict(dict(line))
    if rec.t_first_token_ns is not None and rec.t_started_ns is None:
        raise LineError(f"{where}: a request line whose t_started_ns is null but t_first_token_ns is set: not one "
                        "inference-top wrote")
    return rec


LINES: dict[str, type] = {"header": RunHeader, "request": RequestRecord, "event": EventLine, "sample": Sample,
                          "step_row": StepRow}


def check_line(line: Mapping[str, Any], where: str) -> str:
    """A line's kind, its fields checked against that kind's schema (a kind this version does not know passes:
    a newer writer's); LineError naming the field otherwise."""
    kind = line.get("kind", "request")
    if not isinstance(kind, str):
        raise LineError(f"{where}: a line whose kind is {kind!r}, not a string: not one inference-top wrote")
    if kind == "step_row":
        check(_Stamp, line, where, kind)
    if kind in LINES and kind != "request":
        check(LINES[kind], line, where, kind)
    return kind
