"""Does the faster configuration change the answers? (issue 58; docs/design/compare.md)

Speed knobs are not all lossless: the batch size changes llama.cpp's arithmetic (which rows share a matmul, how
a step is split), a quantised KV cache (q8_0, q4_0) changes it more. compare's sides answer the same prompts
greedily (every local engine here takes the argmax; the HTTP client sends temperature 0), so where a side's
configuration leaves the arithmetic alone its answers are the other's token for token. Each answer is read
from its record, keyed by its prompt's index in the run (request i of a closed loop is the workload's prompt i
on both sides: the rank of its request id among the run's records); what is compared is the answer's token
ids (`extra.output_ids`, which a local engine's worker sends back where its spec asks, options `answer_ids`).
A side whose records carry no ids (a server, a bench output written before) has no answers to compare, and
the verdict says so rather than calling them the same.

The share of prompts answered alike compares each side's first counted run; every later run of a side is
compared with its own first, so a side whose own runs disagree (a batch whose composition changes from run to
run) is named: then not only the other configuration changes the answers. A pure function of the records.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from measure.core.records import RequestRecord

Answers = dict[int, tuple[int, ...]]  # prompt index in the run → the answer's token ids
BASIS = "token ids, greedy"


def answers_of(records: Sequence[RequestRecord]) -> Answers | None:
    """One run's answers by prompt index (the rank of each request id among the run's records, failed ones
    included: a failed request keeps its prompt's place and has no answer); None where no record carries ids."""
    out: Answers = {}
    seen = False
    for i, r in enumerate(sorted(records, key=lambda r: r.request_id)):
        ids = (r.extra or {}).get("output_ids")
        if isinstance(ids, list):
            seen = True
            if r.error is None:
                out[i] = tuple(ids)
    return out if seen else None


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The 1-based position of the first token where two answers differ (one that stops before the other:
    the position after the shorter's end); None where they are the same."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i + 1
    return None if len(a) == len(b) else min(len(a), len(b)) + 1


class AgreementLine(TypedDict):
    """compare.json's `answers` (Agreement.to_dict)."""

    basis: str
    prompts: int
    identical: int
    share: float | None
    first_divergence: int | None  # 1-based token position, the earliest over the prompts that differ
    divergence_at: dict[str, int]  # prompt index → its first differing token (1-based)
    unstable: dict[str, int]  # side → prompts whose own runs differ from its first run
    runs: dict[str, int]  # runs compared per side
    sentence: str


@dataclass(frozen=True)
class Agreement:
    """What the two sides' answers say: `identical` of `prompts` the same; where they differ, the first
    differing token of each (`at`, 1-based); the prompts a side's own runs disagree on (`unstable`)."""

    prompts: int
    identical: int
    at: dict[int, int]
    unstable: dict[str, int]
    runs: dict[str, int]
    names: tuple[str, str] = ("A", "B")

    @property
    def share(self) -> float | None:
        return self.identical / self.prompts if self.prompts else None

    @property
    def first(self) -> int | None:
        return min(self.at.values()) if self.at else None

    @property
    def differ(self) -> bool:
        return self.identical < self.prompts

    def words(self) -> str:
        """'answers identical in 16 of 16 prompts (token ids, greedy)' or 'answers differ in 3 of 16 prompts from
        token 5 (…)', and where a side's own runs disagree, which."""
        a, b = self.names
        if not self.prompts:
            return "answers: no prompt answered on both sides"
        if not self.differ:
            head = f"answers identical in {self.identical} of {self.prompts} prompts ({BASIS})"
        else:
            n = self.prompts - self.identical
            spread = "" if n < 2 else f", median token {statistics.median(self.at.values()):g}"
            head = (f"answers differ in {n} of {self.prompts} prompts from token {self.first} ({BASIS}; "
                    f"{a}'s first run against {b}'s{spread})")
        own = [f"{s}'s own {self.runs[s]} runs differ in {k} of {self.prompts}" for s, k in self.unstable.items() if k]
        return head + (f"; {' and '.join(own)}: not only the configuration changes them" if own else "")

    def to_dict(self) -> AgreementLine:
        return {"basis": BASIS, "prompts": self.prompts, "identical": self.identical, "share": self.share,
                "first_divergence": self.first, "divergence_at": {str(k): v for k, v in sorted(self.at.items())},
                "unstable": dict(self.unstable), "runs": dict(self.runs), "sentence": self.words()}


def agree(a_runs: Sequence[Answers], b_runs: Sequence[Answers], names: tuple[str, str] = ("A", "B")
          ) -> Agreement | None:
    """The two sides' answers compared (None where either side has no run with answers): each side's first run
    against the other's, prompt by prompt over the prompts both answered; each later run against its side's
    first (the prompts it disagrees on count as that side's unstable)."""
    if not a_runs or not b_runs:
        return None
    first_a, first_b = a_runs[0], b_runs[0]
    common = sorted(set(first_a) & set(first_b))
    at = {i: d for i in common if (d := first_difference(first_a[i], first_b[i])) is not None}
    unstable = {}
    for name, runs in zip(names, (a_runs, b_runs)):
        unstable[name] = sum(1 for i in common if any(i in r and r[i] != runs[0][i] for r in runs[1:]))
    return Agreement(len(common), len(common) - len(at), at, unstable,
                     {names[0]: len(a_runs), names[1]: len(b_runs)}, names)


def verdict_clause(ag: Agreement | None, winner: str | None) -> str:
    """What the answers add to a speed verdict: `winner` (the side the interval finds better, or None) named
    where its answers differ ('B is faster, but answers differ in …'); 'answers not recorded' without ids."""
    if ag is None:
        return "answers not compared (the records carry no token ids: a server, or records written before)"
    if winner is not None and ag.differ:
        return f"{winner} wins, but its {ag.words()}"
    return ag.words()


def of_cells(records: Sequence[RequestRecord]) -> Mapping[tuple[int, int, str], list[Answers]]:
    """Records of a bench output (or a compare side) → each cell's (K, B, mode) answers, one per counted rep in
    rep order (warm-up runs, rep < 0, left out)."""
    runs: dict[tuple[int, int, str, int], list[RequestRecord]] = {}
    for r in records:
        if r.rep >= 0:
            runs.setdefault((r.k, r.b, r.mode, r.rep), []).append(r)
    out: dict[tuple[int, int, str], list[Answers]] = {}
    for (k, b, mode, _rep), recs in sorted(runs.items()):
        if (ans := answers_of(recs)) is not None:
            out.setdefault((k, b, mode), []).append(ans)
    return out


__all__ = ["Agreement", "AgreementLine", "Answers", "agree", "answers_of", "first_difference", "of_cells",
           "verdict_clause"]
