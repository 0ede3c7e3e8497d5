"""A candidate's row in the search of `inference-top tune` and its runs: what became of it, every run of it
(`Trial`s, as tune.json keeps them), and how the search ranks and prunes rows."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from measure.control.tune.record import FIGURES, CandidateRecord, PredictedRecord, Trial, longest
from measure.control.tune.space import Candidate, Predicted

if TYPE_CHECKING:
    from measure.control.bench.cell import Cell


@dataclass
class Row:
    """One candidate: its prediction, what became of it, and every run of it."""

    candidate: Candidate
    predicted: Predicted | None = None
    status: str = "pending"  # pending | measured | refused | pruned | not tried | crashed | timeout | failed | wall
    # | skipped (s in the live tune) | stopped (q in the live tune, during its run)
    reason: str = ""
    trials: list[Trial] = field(default_factory=list)

    @property
    def last(self) -> Trial | None:
        """Its longest measured run."""
        return longest(self.trials)

    def record(self) -> CandidateRecord:
        """Its record in tune.json (with the prediction's errors, where it has a prediction and a measured run)."""
        last, p = self.last, self.predicted
        errs: tuple[float | None, ...] = (None, None, None)
        if last and p:
            errs = (_err(p.tps, last.output_throughput), _err(p.ttft_s * 1e3, last.p99_ttft_ms),
                    _err(p.goodput_tps, last.goodput_tps))
        return CandidateRecord(key=self.candidate.key, candidate=self.candidate, status=self.status, reason=self.reason,
                               predicted=PredictedRecord.of(p) if p else None, trials=list(self.trials),
                               error_output_throughput=errs[0], error_p99_ttft=errs[1], error_goodput=errs[2])


def _err(pred: float | None, meas: float | None) -> float | None:
    """(predicted − measured) ÷ measured."""
    return None if pred is None or not meas else (pred - meas) / meas


# (candidate, requests, timeout s[, tag]) → a trial; the tag names the final comparison's runs' records files apart
Measure = Callable[..., Trial]


def trial_of(cell: Cell | None, status: str, reason: str, seconds: float, requests: int,
             records: str | None = None, load_s: float | None = None) -> Trial:
    """One run of a candidate, as tune.json keeps it: the cell's figures the search judges by, and where its
    records are."""
    figures = cell.to_json() if cell is not None else {}  # (summary.json's names)
    return Trial(requests=requests, status=status, reason=reason, seconds=round(seconds, 2), records=records,
                 load_s=load_s, **{f: figures[f] for f in FIGURES if figures.get(f) is not None})


def standing(r: Row) -> tuple[float, float, float]:
    """How the search ranks a measured candidate while it goes on: how far the halving has taken it (its longest
    run: only the better half of a round runs longer), then its goodput and tok/s there, so a run is set only
    against runs of its own length (a candidate halved out after n requests never outranks one measured at 2n)."""
    t = r.last
    return (float(t.requests), *t.score) if t else (-1.0, 0.0, 0.0)


def prune_bar(preds: Sequence[Predicted]) -> tuple[float, str]:
    """What pruning measures a shape's predicted tok/s against: the best predicted goodput (a shape predicted to
    break the SLO serves nobody within it, so its raw tok/s sets no bar); where no shape is predicted within the
    SLO, the best predicted tok/s (the fastest is then what wins)."""
    good = max((p.goodput_tps for p in preds), default=0.0)
    if good > 0:
        return good, "goodput"
    return max((p.tps for p in preds), default=0.0), "tok/s (none predicted within the SLO)"
