"""tune.json: the answer of a tune as records, written whole after every run and read back by `tune --resume`
(docs/design/tune.md).

Each record is a frozen dataclass written and read through its key table, as the bench cell's summary.json is
(cell.py's KEYS): `KEYS` lists the record's JSON names in the order tune.json has always had them, the attribute
each one is (a path: a candidate's fields are written flat beside the record's own), when it is written (None:
where not None; ALWAYS: null included; else a rule of the record) and the record a nested value is read as (an
object, or a list of them). Keys this version does not name are kept in `extra` and written after the rest: a
tune.json written by main before these records (tests/data/written_by_main/tune) reads back and rewrites byte
for byte.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from engines.registry import ENGINES as DECLARED
from measure.control.bench.compare import Interval
from measure.control.tune.space import Candidate, Predicted, Settings, TuneError

TUNE_VERSION = 1
R = TypeVar("R", bound="Record")
Rule = Callable[[Any], bool] | None  # None: written where not None


def ALWAYS(_r: object) -> bool:
    """Written, null included."""
    return True


@dataclass(frozen=True)
class Key:
    """One JSON name of a record: the attribute path it is, when it is written, what its value is read as."""

    name: str
    path: tuple[str, ...]
    when: Rule = ALWAYS
    kind: Callable[..., Any] | None = None  # a record or another dataclass (written by asdict) the value is read as
    many: bool = False  # a list of `kind`


def many(name: str, kind: Callable[..., Any]) -> Key:
    """A list of records, named as its attribute."""
    return Key(name, (name,), ALWAYS, kind, many=True)


def keys(names: str, when: Rule = ALWAYS, part: str | None = None) -> tuple[Key, ...]:
    """Keys named as their attributes (of `part`, a flat part, where given)."""
    return tuple(Key(n, (part, n) if part else (n,), when) for n in names.split())


class RecordError(ValueError):
    """A tune.json object that is not the record it should be."""


@dataclass(frozen=True, kw_only=True)
class Record:
    """A record of tune.json: its KEYS and flat PARTS (name → the class its flat keys make), and the keys read
    that this version does not name."""

    KEYS: ClassVar[tuple[Key, ...]] = ()
    PARTS: ClassVar[Mapping[str, Callable[..., Any]]] = {}
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        """Its object: KEYS' names in their order (where their rule says), then `extra`."""
        out = {}
        for k in self.KEYS:
            v = _get(self, k.path)
            if v is not None if k.when is None else k.when(self):
                out[k.name] = _encode(v)
        return out | self.extra

    @classmethod
    def from_json(cls: type[R], d: object) -> R:
        """The record of a tune.json object (RecordError where it is not one)."""
        if not isinstance(d, Mapping):
            raise RecordError(f"{cls.__name__}: an object was expected, not {type(d).__name__}")
        by = {k.name: k for k in cls.KEYS}
        top: dict[str, object] = {}
        parts: dict[str, dict[str, object]] = {}
        extra = {}
        for name, v in d.items():
            k = by.get(name)
            if k is None:
                extra[name] = v
            elif len(k.path) == 1:
                top[k.path[0]] = [_decode(x, k.kind) for x in _list(v, k)] if k.many else _decode(v, k.kind)
            else:
                parts.setdefault(k.path[0], {})[k.path[1]] = v
        try:
            top.update({name: cls.PARTS[name](**kw) for name, kw in parts.items()})
            return cls(**top, extra=extra)  # (the key table names its fields)
        except TypeError as exc:
            raise RecordError(f"{cls.__name__}: {exc}") from None


def _get(r: object, path: tuple[str, ...]) -> object:
    for name in path:
        r = getattr(r, name)
    return r


def _encode(v: object) -> object:
    if isinstance(v, Record):
        return v.to_json()
    if isinstance(v, list | tuple):
        return [_encode(x) for x in v]
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return dataclasses.asdict(v)
    return v


def _list(v: object, k: Key) -> list[object]:
    if not isinstance(v, list):
        raise RecordError(f"{k.name}: a list was expected, not {type(v).__name__}")
    return v


def _decode(v: object, kind: Callable[..., Any] | None) -> object:
    if kind is None or v is None:
        return v
    if not isinstance(v, Mapping):
        raise RecordError(f"{getattr(kind, '__name__', kind)}: an object was expected, not {type(v).__name__}")
    if isinstance(kind, type) and issubclass(kind, Record):
        return kind.from_json(v)
    try:
        return kind(**v)
    except TypeError as exc:
        raise RecordError(f"{getattr(kind, '__name__', kind)}: {exc}") from None


# ---- one run of a candidate ----------------------------------------------------------------------------------
FIGURES = ("goodput_tps", "goodput_rps", "slo_attainment", "output_throughput", "p99_ttft_ms", "median_ttft_ms",
           "median_tpot_ms", "completed", "errors", "achieved_concurrency", "joules_per_token", "usd_per_mtok", "watts",
           "error_output_throughput", "binding")  # the cell's figures a run keeps (summary.json's names)


@dataclass(frozen=True, kw_only=True)
class Trial(Record):
    """One run of a candidate: the cell's figures the search judges by (those the cell has), and where its
    records are. status: ok | crashed | timeout | failed | wall | skipped | stopped."""

    requests: int
    status: str
    reason: str = ""
    seconds: float = 0.0
    records: str | None = None
    goodput_tps: float | None = None
    goodput_rps: float | None = None
    slo_attainment: float | None = None
    output_throughput: float | None = None
    p99_ttft_ms: float | None = None
    median_ttft_ms: float | None = None
    median_tpot_ms: float | None = None
    completed: int | None = None
    errors: int | None = None
    achieved_concurrency: float | None = None
    joules_per_token: float | None = None
    usd_per_mtok: float | None = None
    watts: float | None = None
    error_output_throughput: float | None = None
    binding: str | None = None
    load_s: float | None = None  # the seconds its requests took (the rest: start-up)

    KEYS = (*keys("requests status reason seconds records"), *keys(" ".join(FIGURES), None), *keys("load_s", None))

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def score(self) -> tuple[float, float]:
        """What the search ranks runs of one length by: goodput, then tok/s."""
        return (self.goodput_tps or 0.0, self.output_throughput or 0.0)

    def figure(self, name: str) -> float | None:
        """A figure by its summary.json name (compare's metric field)."""
        v = getattr(self, name) if name in FIGURES else None
        return v if isinstance(v, int | float) else None


# ---- one candidate --------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class PredictedRecord(Record):
    """The roofline's figures for a candidate, as tune.json writes them (ms)."""

    output_throughput: float
    ttft_ms: float
    tpot_ms: float
    goodput_tps: float
    binding: str

    KEYS = keys("output_throughput ttft_ms tpot_ms goodput_tps binding")

    @classmethod
    def of(cls, p: Predicted) -> PredictedRecord:
        return cls(output_throughput=p.tps, ttft_ms=p.ttft_s * 1e3, tpot_ms=p.tpot_s * 1e3,
                   goodput_tps=p.goodput_tps, binding=p.binding)


# its fields, written flat; a knob of one engine only where that engine declares it (a tune.json of main reads
# back byte for byte)
OWN_KNOBS = ("prompt_concurrency",)
CANDIDATE = " ".join(f.name for f in dataclasses.fields(Candidate) if f.name not in OWN_KNOBS)


def _own_knob(name: str) -> Key:
    """A knob written only for a candidate whose engine declares it."""
    def when(r: CandidateRecord) -> bool:
        d = DECLARED.get(r.candidate.engine)
        return d is not None and name in d.tune_knobs

    return Key(name, ("candidate", name), when)


def _judged(c: CandidateRecord) -> bool:
    """A candidate with a prediction and a measured run has the prediction's errors (null where not known)."""
    return c.predicted is not None and any(t.ok for t in c.trials)


@dataclass(frozen=True, kw_only=True)
class CandidateRecord(Record):
    """One candidate: its prediction, what became of it (status: measured | refused | pruned | not tried |
    crashed | timeout | failed | wall | skipped | stopped | pending) and every run of it."""

    key: str
    candidate: Candidate
    status: str
    reason: str = ""
    predicted: PredictedRecord | None = None
    trials: list[Trial] = field(default_factory=list)
    error_output_throughput: float | None = None  # (predicted − measured) ÷ measured, of its longest run
    error_p99_ttft: float | None = None
    error_goodput: float | None = None

    KEYS = (Key("key", ("key",)), *keys(CANDIDATE, part="candidate"), *map(_own_knob, OWN_KNOBS),
            *keys("status reason"),
            Key("predicted", ("predicted",), kind=PredictedRecord), many("trials", Trial),
            *keys("error_output_throughput error_p99_ttft error_goodput", _judged))
    PARTS = {"candidate": Candidate}

    @property
    def last(self) -> Trial | None:
        """Its longest measured run."""
        return longest(self.trials)


def longest(trials: list[Trial]) -> Trial | None:
    ok = [t for t in trials if t.ok]
    return max(ok, key=lambda t: t.requests) if ok else None


@dataclass(frozen=True, kw_only=True)
class Round(Record):
    requests: int
    what: str
    candidates: list[str]

    KEYS = keys("requests what candidates")


# ---- the winner, its knee, the last step ------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class KneeLevel(Record):
    rate: float
    within: bool
    stop: str | None
    why: str

    KEYS = keys("rate within stop why")


def _searched(k: Knee) -> bool:
    return k.levels is not None


@dataclass(frozen=True, kw_only=True)
class Knee(Record):
    """`tune --find rate`: the winner's knee (the rates within the SLO and first out, every level tried), or the
    sentence that says why it was not searched."""

    sentence: str
    knee_rps: float | None = None
    first_out_rps: float | None = None
    records: str | None = None
    levels: list[KneeLevel] | None = None

    KEYS = (*keys("knee_rps first_out_rps", _searched), *keys("sentence"), *keys("records", None),
            Key("levels", ("levels",), None, KneeLevel, many=True))


@dataclass(frozen=True, kw_only=True)
class CompareRun(Record):
    side: str
    round: int
    value: float
    seconds: float

    KEYS = keys("side round value seconds")


@dataclass(frozen=True, kw_only=True)
class FinalCompare(Record):
    """The winner (a) and the runner-up (b) measured in turns (compare.py)."""

    a: str
    b: str
    metric: str
    sentence: str
    state: str
    interval: Interval | None
    means: list[float]
    runs: list[CompareRun]
    notes: list[str]

    KEYS = (*keys("a b metric sentence state"), Key("interval", ("interval",), kind=Interval), *keys("means"),
            many("runs", CompareRun), *keys("notes"))


@dataclass(frozen=True, kw_only=True)
class Winner(Record):
    key: str
    candidate: Candidate
    trial: Trial
    serve_command: str
    bench_command: str
    knee: Knee | None = None

    KEYS = (Key("key", ("key",)), *keys(CANDIDATE, part="candidate"), Key("trial", ("trial",), kind=Trial),
            *keys("serve_command bench_command"), Key("knee", ("knee",), None, Knee))
    PARTS = {"candidate": Candidate}


# ---- the whole answer -------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class SettingsRecord(Record):
    """What every candidate was measured under, as tune.json says it (the SLO and cost in words)."""

    engines: list[str]
    users: int
    requests: int
    max_tokens: int
    ctx: int
    budget_s: float
    slo: str
    workload: str
    seed: int
    ignore_eos: bool
    memory_budget: int | None
    cost: str | None

    KEYS = keys("engines users requests max_tokens ctx budget_s slo workload seed ignore_eos memory_budget cost")

    @classmethod
    def of(cls, s: Settings) -> SettingsRecord:
        return cls(engines=list(s.engines), users=s.users, requests=s.requests, max_tokens=s.max_tokens, ctx=s.ctx,
                   budget_s=s.budget_s, slo=s.slo.describe(), workload=s.workload.key, seed=s.seed,
                   ignore_eos=s.ignore_eos, memory_budget=s.memory_budget,
                   cost=s.cost.describe() if s.cost and s.cost.set else None)


@dataclass(frozen=True, kw_only=True)
class TuneResult(Record):
    """tune.json: the settings, every round and candidate, the Pareto front (of runs of front_requests
    requests), the notes, the last step, what was not tried and why, and the winner (None: nothing measured)."""

    settings: SettingsRecord
    model: str
    elapsed_s: float
    this_session_s: float
    stopped: str  # done | budget | stopped
    command: str = "tune"
    version: int = TUNE_VERSION
    machine: str | None = None  # the chip (run_tune's)
    rounds: list[Round] = field(default_factory=list)
    candidates: list[CandidateRecord] = field(default_factory=list)
    front: list[str] = field(default_factory=list)
    front_requests: int | None = None
    notes: list[str] = field(default_factory=list)
    final_compare: FinalCompare | None = None
    within_noise: list[str] = field(default_factory=list)
    not_tried: dict[str, str] = field(default_factory=dict)
    skipped_engines: dict[str, str] = field(default_factory=dict)  # engines asked for that cannot run here: why
    winner: Winner | None = None

    KEYS = (*keys("command version"), *keys("machine", None), Key("settings", ("settings",), kind=SettingsRecord),
            *keys("model elapsed_s this_session_s stopped"), many("rounds", Round),
            many("candidates", CandidateRecord), *keys("front front_requests notes"),
            Key("final_compare", ("final_compare",), kind=FinalCompare), *keys("within_noise not_tried"),
            Key("skipped_engines", ("skipped_engines",), lambda r: bool(r.skipped_engines)),
            Key("winner", ("winner",), kind=Winner))

    def text(self) -> str:
        return json.dumps(self.to_json(), indent=2, default=str)


def write_result(out: Path, res: TuneResult) -> Path:
    """tune.json in `out`, whole or not at all (a budget or Ctrl-C never leaves half a file to resume from)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "tune.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(res.text())
    tmp.replace(path)
    return path


def load_result(f: Path) -> TuneResult:
    """A tune.json read back through its records; RecordError, one line naming the file, where it cannot be read or
    is not a tune's output (tune --resume's and report's reader)."""
    try:
        old = json.loads(f.read_text())
    except (OSError, ValueError) as exc:
        raise RecordError(f"cannot read {f} ({exc}); give the --out folder of an earlier tune") from None
    if not isinstance(old, dict) or old.get("command") != "tune":
        raise RecordError(f"{f} is not a tune's output")
    try:
        return TuneResult.from_json(old)
    except RecordError as exc:
        raise RecordError(f"{f} is not a tune.json this version reads ({exc})") from None


def read_result(f: Path, what: str) -> TuneResult:
    """load_result; TuneError (`what`: the option that named it) where it cannot be read."""
    try:
        return load_result(f)
    except RecordError as exc:
        raise TuneError(f"{what}: {exc}") from None


# ---- resume ----------------------------------------------------------------------------------------------
SAME = ("engines", "users", "requests", "max_tokens", "ctx", "slo", "workload", "seed", "ignore_eos")
# runs that never gave an answer: cut by q (the live tune's stop) or an interrupt; --resume measures them again (a
# skip, s, is the user's answer for that run and is read back as one)
UNFINISHED = ("cut", "stopped")
Done = dict[tuple[str, int], Trial]  # an earlier tune's runs by (candidate key, requests)


def load_done(path: Path, s: Settings, model: str) -> tuple[Done, float]:
    """The runs an earlier tune in `path` (its folder or tune.json) measured, by (candidate, requests), and the
    seconds it spent; TuneError where it was not the same tune (another model, load or SLO)."""
    f = path / "tune.json" if path.is_dir() else path
    old = read_result(f, f"--resume {path}")
    mine = SettingsRecord.of(s)
    diff = [k for k in SAME if getattr(old.settings, k) != getattr(mine, k)]
    if old.model != model:
        diff.insert(0, "model")
    if diff:
        was = old.model if diff[0] == "model" else getattr(old.settings, diff[0])
        raise TuneError(f"--resume {path}: that tune ran another {', '.join(diff)} (e.g. {diff[0]} {was!r}); resume "
                        "it with the same options, or start a new --out")
    done = {(c.key, t.requests): t for c in old.candidates for t in c.trials if t.status not in UNFINISHED}
    return done, float(old.elapsed_s or 0.0)
