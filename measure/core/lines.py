"""Every line on disk, typed (docs/design/record.md): a recording's or records.jsonl's `header` (RunHeader), `request`
(records.RequestRecord), `event` (EventLine), `sample` (Sample) and `step_row` (StepLine) lines, the one validator
every reader uses, and the dataclasses a reader gets back (`of`: a line's dict → its dataclass; `Lines`).

The validator is built from each dataclass's annotations (typing.get_type_hints over its fields): a field
without a default must be present, every field present must have its annotated type (an int is a float, a
bool is neither; a field typed as a dataclass is a JSON object checked against that dataclass's fields), and
keys the dataclass does not name are allowed (a newer writer's fields, the header's descriptive ones), as every
reader did before. Writers build the dataclass and serialise it with `to_line`: its fields in their declared
order, so the bytes on disk are the ones the dict literals wrote; `as_line` gives any line's dict back, so a file
read and written again is the same bytes.
"""
from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal, NamedTuple, Union

from measure.core.records import Mode, RequestRecord


class LineError(ValueError):
    """A line that is not one inference-top wrote: one line naming the field."""


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """One of an HTTP run's endpoints as its header lists them."""

    url: str | None = None
    chip: str | None = None
    label: str | None = None
    bandwidth_gbps: float | None = None


@dataclass(frozen=True, kw_only=True)
class ClockCheck:
    """A client's clock against the server's (machine/clock.clock_check; docs/design/client-machines.md): offset_s None with
    `why` where it could not tell."""

    offset_s: float | None = None
    bound_s: float | None = None
    samples: int = 0  # reads of the server's Date
    why: str | None = None


@dataclass(frozen=True, kw_only=True)
class Environment:
    """The machine a run ran on (machine/envinfo.environment), the parts a reader shows."""

    os: str = "?"
    cpu: str | None = "?"


@dataclass(frozen=True, kw_only=True)
class RunHeader:
    """The first line of every records file and recording. Its typed fields are the ones readers use; the rest
    (argv's neighbours, the engine's settings, the workload's file …) describes the run and is kept, in its order,
    in `line`. Build it with `RunHeader.of(the header dict)`."""

    kind: Literal["header"] = "header"
    command: str | None = None  # dashboard | bench | tune | compare; absent in a test's or truth matrix's recording
    engine: str = "?"
    model: str | None = None  # an http server's model may be unknown
    model_bytes: int | None = 0  # W; None: not given
    model_sha256_prefix: str | None = None
    bandwidth_gbps: float | None = None
    bandwidth_source: str | None = None
    chip: str | None = None
    simulated: bool = False
    environment: Environment | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # a dashboard's LiveSettings, as asdict wrote them
    engine_settings: dict[str, object] | None = None  # a local engine's threads, ctx, seed …: shown, not read
    max_tokens: int | None = None
    ignore_eos: bool = False
    kv_bytes_per_token: float | None = None
    served: dict[str, Any] | None = None  # http: the served model's work (core/work.WorkModel as asdict wrote it)
    url: str | None = None
    endpoints: list[Endpoint] | None = None  # HTTP: each endpoint (a header from before many endpoints: none)
    run_id: str | None = None
    argv: list[str] | None = None  # bench: its command line
    slo: str | None = None  # "interactive: TTFT ≤ 450 ms, TPOT ≤ 40 ms" (runs.slo_of reads it back)
    cost: str | None = None
    workload: str | None = None
    arrivals: str | None = None  # the arrival process described; None: closed loop
    seed: int | None = None
    requests: int | None = None
    started_unix: float | None = None
    # several clients (docs/design/client-machines.md): this one's share of the schedule, its common start and its clock against the server's
    segment: list[int] | None = None  # [i, n] of --segment i/n
    start_perf_ns: int | None = None  # the common start on this client's clock
    start_at_unix: float | None = None
    clock_check: ClockCheck | None = None
    line: Mapping[str, Any] = field(default_factory=dict, repr=False)  # the header as written, every key

    @classmethod
    def of(cls, line: Mapping[str, Any], where: str = "the header") -> RunHeader:
        check(cls, line, where, "header")
        header: RunHeader = dataclasses.replace(of(cls, line), line=dict(line))
        return header

    def to_line(self) -> dict[str, object]:
        return dict(self.line, kind="header")


@dataclass(frozen=True, kw_only=True)
class EventLine:
    """A dashboard's log line (its `level`), marker, level change or load start (its `type`), or a Ray client's
    end (`type` "client", its outcome in `more`). On disk `type` or `level` and `more` come before the kind."""

    kind: Literal["event"] = "event"
    t_ns: int
    text: str = ""
    type: str | None = None  # marker | level | load_started | client; None: a log line
    level: str | None = None  # a log line's: info | warn | error
    more: Mapping[str, Any] = field(default_factory=dict)  # a client's outcome (cluster.Client.outcome)

    @classmethod
    def of(cls, line: Mapping[str, Any], where: str = "an event") -> EventLine:
        check(cls, line, where, "event")
        known = {f.name for f in fields(cls)}
        event: EventLine = dataclasses.replace(of(cls, line), more={k: v for k, v in line.items() if k not in known})
        return event

    def to_line(self) -> dict[str, object]:
        first = {**({"type": self.type} if self.type is not None else {}),
                 **({"level": self.level} if self.level is not None else {}), **self.more}
        return {**first, "kind": self.kind, "t_ns": self.t_ns, "text": self.text}


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One sampler tick of the dashboard: everything a replay needs to draw that moment again. The defaults
    are what a reader assumed of a sample written before the field existed."""

    kind: Literal["sample"] = "sample"
    t_ns: int
    t: float = 0.0  # s since the session began
    k: int = 1
    b: int = 1
    mode: Mode = "instances"
    paused: bool = False
    state: str = ""
    users: int | None = None
    system: dict[str, Any]  # probes.SystemSample's fields
    workers: list[dict[str, Any]] = field(default_factory=list)  # base.WorkerInfo's fields
    procs: dict[str, list[float]] = field(default_factory=dict)  # pid → (RSS, CPU %)
    ours_cpu: float | None = None  # CPU % (of one core) of inference-top's own processes (None: not recorded)
    agg_tps: float | None = None
    tpot_p50: float | None = None
    bw_gbps: float | None = None
    concurrency: float | None = None


@dataclass(frozen=True)
class StepRow:
    """A row of the live step table (control/live/steps.py, docs/design/steps.md); on disk a `step_row` line, its
    fields after the kind and the time it was written (`StepLine`)."""

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
    # a chip nobody measured: the level's tok/s at its backend family's slowest and fastest figures (Roofline.span)
    predicted_low: float | None = None
    predicted_high: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return to_line(self)  # every field is a number or a string


@dataclass(frozen=True, kw_only=True)
class _Stamp:
    """What a step_row line carries before its row's fields."""

    kind: Literal["step_row"] = "step_row"
    t_ns: int


@dataclass(frozen=True)
class StepLine:
    """A `step_row` line: the row and the time it was written."""

    t_ns: int
    row: StepRow

    def to_line(self) -> dict[str, object]:
        return step_row_line(self.row, self.t_ns)


@dataclass(frozen=True)
class UnknownLine:
    """A line of a kind this version does not know (a newer writer's): kept as written."""

    kind: str
    line: Mapping[str, Any]


OtherLine = EventLine | Sample | StepLine | UnknownLine
Line = RunHeader | RequestRecord | OtherLine


class Lines(NamedTuple):
    """A file's lines by kind (recorder.read_jsonl), each list in the file's order."""

    headers: list[RunHeader]
    records: list[RequestRecord]
    other: list[OtherLine]

    @property
    def samples(self) -> list[Sample]:
        return [o for o in self.other if isinstance(o, Sample)]

    @property
    def events(self) -> list[EventLine]:
        return [o for o in self.other if isinstance(o, EventLine)]

    @property
    def steps(self) -> list[StepLine]:
        return [o for o in self.other if isinstance(o, StepLine)]


def to_line(obj: Any, first: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A line's dict: `first` (keys beyond the schema a writer puts before it), then the dataclass's fields in
    their declared order."""
    return {**(first or {}), **{f.name: getattr(obj, f.name) for f in fields(obj)}}


def as_line(line: Line) -> dict[str, object]:
    """Any line read back as the dict it is written as (so a file read and written again is the same bytes)."""
    if isinstance(line, RequestRecord):
        return line.to_dict()
    if isinstance(line, UnknownLine):
        return dict(line.line)
    if isinstance(line, Sample):
        return sample_line(line)
    return line.to_line()


# fields written only where set, so that the bytes of lines written before they existed are unchanged
OPTIONAL_SAMPLE_FIELDS = ("ours_cpu",)
OPTIONAL_STEP_FIELDS = ("predicted_low", "predicted_high")


def _set_only(line: dict[str, Any], optional: tuple[str, ...]) -> dict[str, object]:
    return {k: v for k, v in line.items() if v is not None or k not in optional}


def sample_line(s: Sample) -> dict[str, object]:
    return _set_only(to_line(s), OPTIONAL_SAMPLE_FIELDS)


def step_row_line(row: StepRow, t_ns: int) -> dict[str, object]:
    return _set_only({**to_line(_Stamp(t_ns=t_ns)), **to_line(row)}, OPTIONAL_STEP_FIELDS)


def event_line(t_ns: int, text: str, extra: Mapping[str, Any]) -> dict[str, object]:
    more = {k: v for k, v in extra.items() if k not in ("kind", "t_ns", "text", "type", "level")}
    return EventLine(t_ns=t_ns, text=text, type=extra.get("type"), level=extra.get("level"), more=more).to_line()


@functools.cache
def _hints(cls: type) -> dict[str, object]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls)}


def _required(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)


def fits(value: Any, tp: Any) -> bool:
    """`value` (as json.loads gives it) has the annotated type `tp`."""
    if tp is Any or tp is object:
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
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # a JSON object with the dataclass's fields
        return (isinstance(value, dict) and _required(tp) <= value.keys()
                and all(fits(value[n], t) for n, t in _hints(tp).items() if n in value))
    raise TypeError(f"no check for the annotation {tp!r}")  # a field of a type this module does not know


def _built(value: Any, tp: Any) -> Any:
    """A checked value (`fits`) with its dataclasses built: a JSON object typed as a dataclass becomes one."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return next((_built(value, t) for t in typing.get_args(tp) if fits(value, t)), value)
    if origin is list and isinstance(value, list):
        (item,) = typing.get_args(tp) or (Any,)
        return [_built(v, item) for v in value]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return of(tp, value)
    return value


def of(cls: type, line: Mapping[str, Any]) -> Any:
    """The dataclass `cls` of a checked line: its fields from the line's keys (their dataclasses built), the
    keys it does not name left out (RunHeader and EventLine keep them)."""
    return cls(**{n: _built(line[n], t) for n, t in _hints(cls).items() if n in line and n not in ("line", "more")})


def _type_name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "").replace("measure.core.lines.", "")


def check(cls: type, line: Mapping[str, Any], where: str, what: str) -> None:
    """LineError naming the first field of `cls` that `line` lacks or has of another type. `where`: the file
    and line number; `what`: the kind of line, as the message says it."""
    hints = _hints(cls)
    for name in _required(cls):
        if name not in line:
            raise LineError(f"{where}: a {what} line without its {name}: not one inference-top wrote")
    for name, tp in hints.items():
        if name in line and name not in ("line", "more") and not fits(line[name], tp):
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


def line_of(line: Mapping[str, Any], where: str) -> Line:
    """A line read from a file as its dataclass, checked (LineError naming the field otherwise)."""
    kind = check_line(line, where)
    if kind == "header":
        return RunHeader.of(line, where)
    if kind == "request":
        return request_of(line, where)
    if kind == "event":
        return EventLine.of(line, where)
    if kind == "sample":
        return typing.cast(Sample, of(Sample, line))
    if kind == "step_row":
        return StepLine(line["t_ns"], typing.cast(StepRow, of(StepRow, line)))
    return UnknownLine(kind, dict(line))


def grouped(lines: list[Line]) -> Lines:
    """A file's lines by kind."""
    return Lines([x for x in lines if isinstance(x, RunHeader)], [x for x in lines if isinstance(x, RequestRecord)],
                 [x for x in lines if isinstance(x, (EventLine, Sample, StepLine, UnknownLine))])
