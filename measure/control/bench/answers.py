"""Does the faster configuration change the answers? (issue 58; docs/design/compare.md)

Speed knobs are not all lossless: the batch size changes llama.cpp's arithmetic (which rows share a matmul, how
a step is split), a quantised KV cache (q8_0, q4_0) changes it more. compare's sides answer the same prompts
greedily (every local engine here takes the argmax; the HTTP client sends temperature 0), so where a side's
configuration leaves the arithmetic alone its answers are the other's token for token. Each answer is read
from its record, keyed by its prompt's index in the run (request i of a closed loop is the workload's prompt i
on both sides: the rank of its request id among the run's records). What is compared is the answer's token ids
where the records carry them (`extra.output_ids`, which a local engine's worker sends back where its spec asks,
options `answer_ids`); a server streams text, not ids (`extra.output_text`, HttpOptions.answers), and there the
text's whitespace-separated words are compared, and said to be. Two sides of different kinds (ids against
text) are not compared, nor records that carry neither (a bench output written before): the verdict says so
rather than calling them the same.

The share of prompts answered alike compares each side's first counted run; every later run of a side is
compared with its own first, so a side whose own runs disagree (a batch whose composition changes from run to
run) is named: then not only the other configuration changes the answers. A pure function of the records.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, TypedDict

if TYPE_CHECKING:
    from measure.core.records import RequestRecord

IDS = "token ids, greedy"
WORDS = "answer text split at whitespace: the server sent text, not token ids"
UNIT = {IDS: "token", WORDS: "word"}
Answer = tuple[int, ...] | tuple[str, ...]


class Answers(NamedTuple):
    """One run's answers: what they are (IDS or WORDS) and each by its prompt's index in the run."""

    basis: str
    by_prompt: dict[int, Answer]
    prefixed: bool = False  # its prompts went with a unique prefix naming the request (HTTP, --prefix-cache off)


def answers_of(records: Sequence[RequestRecord]) -> Answers | None:
    """One run's answers by prompt index (the rank of each request id among the run's records, failed ones
    included: a failed request keeps its prompt's place and has no answer): token ids where the records carry
    them, else the text's words; None where no record carries either (or a run mixes the two)."""
    out: dict[int, Answer] = {}
    bases = set()
    prefixed = False
    for i, r in enumerate(sorted(records, key=lambda r: r.request_id)):
        extra = r.extra or {}
        prefixed = prefixed or bool(extra.get("prompt_prefix"))
        ids, text = extra.get("output_ids"), extra.get("output_text")
        if isinstance(ids, list):
            bases.add(IDS)
            answer: Answer = tuple(ids)
        elif isinstance(text, str):
            bases.add(WORDS)
            answer = tuple(text.split())
        else:
            continue
        if r.error is None:
            out[i] = answer
    return Answers(bases.pop(), out, prefixed) if len(bases) == 1 else None


def first_difference(a: Sequence[object], b: Sequence[object]) -> int | None:
    """The 1-based position of the first token where two answers differ (one that stops before the other:
    the position after the shorter's end); None where they are the same."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i + 1
    return None if len(a) == len(b) else min(len(a), len(b)) + 1


class AgreementLine(TypedDict):
    """compare.json's `answers` (Agreement.to_dict)."""

    basis: str  # what was compared (token ids, or the text's words); two kinds: not compared
    prompts: int
    identical: int
    share: float | None
    first_divergence: int | None  # 1-based token (or word) position, the earliest over the prompts that differ
    divergence_at: dict[str, int]  # prompt index → its first differing token or word (1-based)
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
    basis: str = IDS  # IDS or WORDS; two kinds (ids against text): "A: …; B: …", nothing compared
    prefixed: bool = False  # a side's prompts carried a unique prefix naming each request (not the same prompts)

    @property
    def comparable(self) -> bool:
        return self.basis in UNIT

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
        if not self.comparable:
            return f"answers not compared: {self.basis}"
        if not self.prompts:
            return "answers: no prompt answered on both sides"
        unit = UNIT[self.basis]
        if not self.differ:
            head = f"answers identical in {self.identical} of {self.prompts} prompts ({self.basis})"
        else:
            n = self.prompts - self.identical
            spread = "" if n < 2 else f", median {unit} {statistics.median(self.at.values()):g}"
            head = (f"answers differ in {n} of {self.prompts} prompts from {unit} {self.first} ({self.basis}; "
                    f"{a}'s first run against {b}'s{spread})")
        own = [f"{s}'s own {self.runs[s]} runs differ in {k} of {self.prompts}" for s, k in self.unstable.items() if k]
        tail = (f"; {' and '.join(own)}: not only the configuration changes them" if own else "")
        if self.prefixed:
            tail += ("; the prompts carried a unique prefix naming each request, not the same text on both sides "
                     "(--prefix-cache on sends them as they are)")
        return head + tail

    def where(self) -> str:
        """Each differing prompt's first differing token (or word), by its index in the run (the first 12)."""
        shown = sorted(self.at.items())[:12]
        more = f" … ({len(self.at) - len(shown)} more)" if len(self.at) > len(shown) else ""
        return (f"answers: the first differing {UNIT.get(self.basis, 'token')} (1-based) by prompt (its index in the "
                "run, from 0): " + ", ".join(f"{i} → {d}" for i, d in shown) + more)

    def to_dict(self) -> AgreementLine:
        return {"basis": self.basis, "prompts": self.prompts, "identical": self.identical, "share": self.share,
                "first_divergence": self.first, "divergence_at": {str(k): v for k, v in sorted(self.at.items())},
                "unstable": dict(self.unstable), "runs": dict(self.runs), "sentence": self.words()}


def agree(a_runs: Sequence[Answers], b_runs: Sequence[Answers], names: tuple[str, str] = ("A", "B")
          ) -> Agreement | None:
    """The two sides' answers compared (None where either side has no run with answers): each side's first run
    against the other's, prompt by prompt over the prompts both answered; each later run against its side's
    first (the prompts it disagrees on count as that side's unstable)."""
    if not a_runs or not b_runs:
        return None
    runs = {names[0]: len(a_runs), names[1]: len(b_runs)}
    if a_runs[0].basis != b_runs[0].basis:  # token ids against a server's text: no common measure
        return Agreement(0, 0, {}, {}, runs, names, f"{names[0]}'s are {a_runs[0].basis}; {names[1]}'s are "
                                                  f"{b_runs[0].basis}")
    first_a, first_b = a_runs[0].by_prompt, b_runs[0].by_prompt
    common = sorted(set(first_a) & set(first_b))
    at = {i: d for i in common if (d := first_difference(first_a[i], first_b[i])) is not None}
    unstable = {}
    for name, side in zip(names, (a_runs, b_runs)):
        base = side[0].by_prompt
        unstable[name] = sum(1 for i in common if any(i in r.by_prompt and r.by_prompt[i] != base[i]
                                                      for r in side[1:]))
    prefixed = any(r.prefixed for r in (*a_runs, *b_runs))
    return Agreement(len(common), len(common) - len(at), at, unstable, runs, names, a_runs[0].basis, prefixed)


def verdict_clause(ag: Agreement | None, winner: str | None) -> str:
    """What the answers add to a speed verdict: `winner` (the side the interval finds better, or None) named
    where its answers differ ('B is faster, but answers differ in …'); 'answers not recorded' without ids."""
    if ag is None:
        return "answers not compared (the records carry no answers: records written before, or a run mixing kinds)"
    if winner is not None and ag.comparable and ag.differ:
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


__all__ = ["IDS", "WORDS", "Agreement", "AgreementLine", "Answer", "Answers", "agree", "answers_of", "first_difference", "of_cells",
           "verdict_clause"]
