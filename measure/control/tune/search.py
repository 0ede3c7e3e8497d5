"""The search of `inference-top tune` (docs/design/tune.md; the package's docstring, tune/__init__.py, says how it
searches): successive halving over the candidates, pure of `measure(candidate, requests)` and a clock.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from measure.control.tune.live import TuneControl, TuneRowView, TuneView
from measure.control.tune.record import CompareRun, Done, FinalCompare, Round, SettingsRecord, Trial, TuneResult, Winner
from measure.control.tune.rows import Measure, Row, prune_bar, standing, trial_of
from measure.control.tune.space import PRUNE, Candidate, Predicted, Settings
from measure.control.tune.text import Serving, bench_command, serve_command

if TYPE_CHECKING:
    from measure.control.bench.answers import Answers

OFF_BY = 2.0  # a roofline off by more than this factor on the first round (median) has its pruned shapes run too
START_S = 8.0  # seconds assumed to start a candidate (workers load, warm up) until one has been timed


@dataclass(frozen=True)
class Carried:
    """What a Tune carries beyond its search: `done`, the runs of an earlier tune by (candidate, requests) and
    `spent_s`, the seconds it took (--resume); `on_change`, called after every change (tune.json rewritten);
    `control`, the live tune's keys."""

    done: Done | None = None
    on_change: Callable[[Tune], None] | None = None
    spent_s: float = 0.0
    control: TuneControl | None = None
    answers: Callable[[Trial], Answers | None] | None = None  # a run's answers from its records (answers.py)
    serving: Mapping[str, Serving] | None = None  # by engine: the model and environment its serve command names
    skipped_engines: Mapping[str, str] | None = None  # engines asked for that cannot run here: why (tune.json)


@dataclass
class TuneIO:
    """How a tune talks to whoever runs it: its lines (`say`), the live screen's keys (`control`; None from the
    command line) and a hook called after every change with the Tune (the screen's rows and front)."""

    say: Callable[[str], None] = print
    control: TuneControl | None = None
    on_change: Callable[[Tune], None] | None = None


class Tune:
    """The search. `measure` runs one candidate for n requests within a timeout; `predict` is the roofline's
    (None: no prediction, every shape runs in the order given); `done` holds the runs of an earlier tune
    (--resume): a run found there is not measured again."""

    def __init__(self, s: Settings, cands: Sequence[Candidate], measure: Measure,
                 predict: Callable[[Candidate], Predicted | None] | None = None,
                 refuse: Callable[[Candidate], str | None] | None = None,
                 say: Callable[[str], None] = print, clock: Callable[[], float] = time.monotonic,
                 carried: Carried = Carried()):
        self.s, self.measure, self.predict, self.refuse = s, measure, predict, refuse
        self.say, self.clock, self.done = say, clock, dict(carried.done or {})
        self.on_change = carried.on_change or (lambda t: None)
        self.control = carried.control
        self.answers_of = carried.answers
        self.serving = dict(carried.serving or {})
        self.skipped_engines = dict(carried.skipped_engines or {})
        spent_s = carried.spent_s
        self.rows: dict[str, Row] = {}
        for c in cands:
            self.rows.setdefault(c.key, Row(c))
        self.rounds: list[Round] = []
        self.spent_before = spent_s  # what the tune being resumed took (its runs are not run again)
        self.t0 = clock()
        self.start_s: list[float] = []  # seconds a candidate took beyond its requests (start, warm-up)
        self.paused_s = 0.0  # the live tune's pauses (p): not counted against the budget
        self.stopped = "done"
        self.winner: Row | None = None
        self.notes: list[str] = []  # what the answer must say beside the winner
        self.runner_up: Row | None = None  # second of the halving's last ranking
        self.final: FinalCompare | None = None  # the winner and the runner-up compared in turns
        self.within_noise: list[str] = []  # the top two, the cheaper first, where their interval overlaps 0

    # -- time --
    def left(self) -> float:
        return self.s.budget_s - (self.clock() - self.t0 - self.paused_s)

    def estimate(self, row: Row, n: int) -> float:
        """Seconds a run of n requests should take: its last run's requests scaled by the requests plus its own
        start-up whole (every run starts its candidate afresh: scaled with the requests, the final step's short
        runs under-counted it and the last step overran its budget, issue 58), else the prediction's tok/s plus
        the longest start-up seen so far."""
        start = max(self.start_s) if self.start_s else START_S
        prev = [t for t in row.trials if t.ok and t.output_throughput]
        if prev:
            t = prev[-1]
            if t.load_s is not None:
                return float(t.load_s) * n / float(t.requests) + max(0.0, float(t.seconds) - float(t.load_s))
            return float(t.seconds) * n / float(t.requests) + start
        tps = row.predicted.tps if row.predicted and row.predicted.tps > 0 else None
        tokens = n * self.s.max_tokens
        return start + (tokens / tps if tps else tokens / 20.0)

    # -- one run --
    def run(self, row: Row, n: int) -> Trial | None:
        """One run of row's candidate for n requests: from `done` where an earlier tune ran it; None where the
        budget cannot hold it (the row says so)."""
        key = (row.candidate.key, n)
        if key in self.done:
            t = self.done.pop(key)
            self.say(f"  {row.candidate.key}: {n} requests — from the earlier tune: {_line(t)}")
        elif self.control is not None and self.control.stopped:  # q: said as a stop, never as the budget's cut
            return self._held(row, n)
        else:
            est, left = self.estimate(row, n), self.left()
            if est > left:
                self._budget_cut()
                why = f"the budget: ≈ {est:.0f} s needed for {n} requests, {max(0.0, left):.0f} s left"
                if not row.trials:
                    row.status, row.reason = "not tried", why
                else:
                    row.reason = f"not run at {n} requests: {why}"
                self.on_change(self)
                return None
            if (held := self._held(row, n)) is not None or self.stopped == "stopped":
                return held
            self.say(f"{row.candidate.key}: {n} requests, closed loop of {self.s.users} users (≈ {est:.0f} s) …")
            t0 = self.clock()
            if self.control:
                self.control.running = row.candidate.key
            try:
                t = self.measure(row.candidate, n, max(30.0, min(left, 4 * est + 30)))
            finally:
                if self.control:
                    self.control.running = None
                    self.control.take_skip()  # a skip asked while this run went on was this run's
            took = self.clock() - t0
            t = replace(t, seconds=round(took, 2))
            if self.control and self.control.stopped:  # q during the run: the tune ends as stopped, whatever cut before
                self.stopped = "stopped"
            if t.ok and t.load_s is not None:
                self.start_s.append(max(0.0, took - t.load_s))
            self.say(f"  {_line(t)}")
        row.trials.append(t)
        if t.ok:
            row.status, row.reason = "measured", ""
        elif not any(x.ok for x in row.trials):
            row.status, row.reason = t.status, t.reason
        else:  # it ran before and failed now: the failure is its answer at this length
            row.status, row.reason = t.status, f"at {n} requests: {t.reason}"
        self.on_change(self)
        return t

    def _budget_cut(self) -> None:
        """The budget stopped something: said so, unless q stopped the tune first (a stop is said as a stop)."""
        if self.stopped != "stopped":
            self.stopped = "budget"

    def _held(self, row: Row, n: int) -> Trial | None:
        """The live keys before a run (TuneControl): waits while paused; where the tune was stopped, None with
        `stopped` set (the row says so, nothing more runs); a skipped trial where a skip was asked with no run
        going on; else None."""
        c = self.control
        if c is None:
            return None
        if c.paused:
            self.say(f"paused before {row.candidate.key} ({n} requests): p goes on (the pause is not the budget's)")
            t0 = self.clock()
            c.wait()
            self.paused_s += self.clock() - t0
        if c.stopped:
            self.stopped = "stopped"
            if not row.trials:
                row.status, row.reason = "not tried", "the tune was stopped (q) before it"
            self.on_change(self)
            return None
        if c.take_skip():
            t = trial_of(None, "skipped", "skipped (s) before it ran", 0.0, n)
            row.trials.append(t)
            if not any(x.ok for x in row.trials):
                row.status, row.reason = "skipped", t.reason
            self.say(f"  {row.candidate.key}: {n} requests — skipped (s)")
            self.on_change(self)
            return t
        return None

    # -- the whole search --
    def search(self) -> Row | None:
        """The first round on the best predicted shapes (the pruned ones too where the roofline was off), the knobs
        on each engine's best shape, then successive halving; the winner (None: nothing measured)."""
        s = self.s
        live = self._first_shapes()
        self.on_change(self)
        n = s.requests
        first = self._round(live, n, "shapes")
        if (off := self.prediction_off(first)) is not None:  # the roofline misjudged what it pruned: run those too
            back = sorted([r for r in self.rows.values() if r.status == "pruned" and r.predicted is not None],
                          key=lambda r: r.predicted.tps if r.predicted else 0.0, reverse=True)
            if back:
                for r in back:
                    r.status, r.reason = "pending", f"pruned by a prediction off by {off:.1f}× here: measured after all"
                first += self._round(back, n, f"the pruned shapes (the roofline was off by {off:.1f}× on the first "
                                              "round)")
        if extra := self._knob_rows(first):
            first += self._round(extra, n, "knobs (flash attention, KV cache type, n_ubatch) on the best shapes")
        pool = sorted([r for r in first if r.status == "measured"], key=lambda r: r.trials[-1].score, reverse=True)
        self.winner = self._halve(pool, n)
        if s.final_compare and self.winner is not None and self.runner_up is not None and self.stopped != "stopped":
            self._final(self.winner, self.runner_up)
        self.on_change(self)
        return self.winner

    def _first_shapes(self) -> list[Row]:
        """The shapes the first round runs: each refused or predicted, those far under the best prediction pruned,
        the best `first_round` of the rest (in the roofline's order)."""
        s = self.s
        shapes = [r for r in self.rows.values() if r.candidate.default_knobs]
        for r in self.rows.values():
            if self.refuse and (why := self.refuse(r.candidate)):
                r.status, r.reason = "refused", why
            elif self.predict:
                r.predicted = self.predict(r.candidate)
        live = [r for r in shapes if r.status == "pending"]
        if self.predict:
            live.sort(key=lambda r: (r.predicted.goodput_tps, r.predicted.tps) if r.predicted else (0.0, 0.0),
                      reverse=True)
            best, what = prune_bar([r.predicted for r in live if r.predicted])
            keep = []
            for r in live:
                p = r.predicted
                # a chip nobody measured: pruned only where even the fastest end of its range is under the bar
                top = p.tps_range[1] if p is not None and p.tps_range else (p.tps if p is not None else 0.0)
                if p is not None and best and top < PRUNE * best:
                    r.status = "pruned"
                    said = (f"{p.tps_range[0]:.1f}–{p.tps_range[1]:.1f} tok/s (its backend family's range)"
                            if p.tps_range else f"{p.tps:.1f} tok/s")
                    r.reason = f"predicted {said}, under {PRUNE:.0%} of the best predicted {what} {best:.1f} tok/s"
                else:
                    keep.append(r)
            live = keep
        for r in live[s.first_round:]:
            r.status, r.reason = "pruned", (f"the first round runs the {s.first_round} best predicted shapes; "
                                            "this one ranked below them")
        return live[:s.first_round]

    def _knob_rows(self, first: list[Row]) -> list[Row]:
        """The knobs the roofline does not see, on each engine's best measured shape: their rows to run."""
        extra: list[Row] = []
        for engine in self.s.engines:
            ok = [r for r in first if r.candidate.engine == engine and r.status == "measured"]
            if not ok:
                continue
            top = max(ok, key=lambda r: r.trials[-1].score)
            for v in top.candidate.variants():
                row = self.rows.setdefault(v.key, Row(v))
                if row.status != "pending":
                    continue
                if self.refuse and (why := self.refuse(v)):
                    row.status, row.reason = "refused", why
                    continue
                row.predicted = top.predicted  # the roofline does not tell the knobs apart
                extra.append(row)
        return extra

    def _halve(self, pool: list[Row], n: int) -> Row | None:
        """Successive halving from the ranked pool measured at n requests: the better half runs twice the requests,
        until one is left or the budget cuts a round (the last complete round's ranking stands); the winner."""
        ranked, complete = pool, True
        second = pool[1] if len(pool) > 1 else None  # the runner-up: second of the last ranking that had two
        while len(pool) > 1 and self.stopped != "budget":
            if self.control is not None and self.control.stopped:  # q between rounds: no round after it
                self.stopped = "stopped"
                self.say(f"the tune was stopped (q) before the round at {2 * n} requests: the winner is the best "
                         f"of the round at {n} requests")
                break
            keep = pool[:math.ceil(len(pool) / 2)]
            for r in pool[len(keep):]:
                r.reason = f"halved out after {n} requests ({_line(r.trials[-1])})"
            # a round the budget cannot hold whole is run with fewer, the best first (the last round: the winner's
            # longer run)
            cut = []
            while len(keep) > 1 and sum(self.estimate(r, 2 * n) for r in keep) > self.left():
                cut.append(keep.pop())
                self._budget_cut()
            for r in cut:
                r.reason = f"not run at {2 * n} requests: the budget held that round for the best {len(keep)} only"
            n *= 2
            ran = self._round(keep, n, "successive halving")
            measured = [r for r in ran if r.trials and r.trials[-1].requests == n and r.trials[-1].ok]
            complete = all(r.trials and r.trials[-1].requests == n for r in keep)
            if not complete:  # the budget cut the round: its ranking stands on the last complete one
                break
            if not measured:  # every run of the round failed: the last round that measured names the winner
                self.notes.append(f"every run at {n} requests failed: the winner is the best of the round at "
                                  f"{n // 2} requests")
                self.say(self.notes[-1])
                break
            pool = sorted(measured, key=lambda r: r.trials[-1].score, reverse=True)
            ranked = pool
            second = pool[1] if len(pool) > 1 else second
        winner = ranked[0] if ranked else None
        self.runner_up = second if second is not winner else None
        if winner is not None and not complete:
            how = "the tune was stopped (q) in" if self.stopped == "stopped" else "the budget cut"
            self.say(f"{how} the round at {n} requests: the winner is the best of the last complete round")
        return winner

    # -- the last step: the winner and the runner-up, in turns --
    def _final(self, w: Row, ru: Row) -> None:
        """The winner (A) and the runner-up (B) measured in turns at the first round's length (compare.py:
        rounds of ABBA / BAAB, the interval at 95 % over every look) in what is left of the budget. A resolved
        lead keeps the winner (or, where the runner-up is the faster, hands it the win); intervals that overlap
        are said, both named, the cheaper (fewer cores, fewer engines, fewer sequences) first, and it wins."""
        from measure.control.bench.compare import METRICS, CompareError, Sequential, run_rounds, verdict

        n = self.s.requests
        both = [w.last, ru.last]
        m = METRICS["goodput" if all(t and t.goodput_tps for t in both) else "tok/s"]
        need = 4 * 3 * max(self.estimate(w, n), self.estimate(ru, n))
        if need > self.left():
            self.notes.append(f"the winner and the runner-up ({ru.candidate.key}) were not compared in turns: ≈ "
                              f"{need:.0f} s needed, {max(0.0, self.left()):.0f} s of the budget left")
            return
        self.say(f"— the last step: {w.candidate.key} (A) against the runner-up {ru.candidate.key} (B) in turns, "
                 f"{m.name} of {n} requests a run, {self.left():.0f} s of the budget left")

        trials: dict[str, list[Trial]] = {"A": [], "B": []}

        def run_one(side: str, i: int) -> float:
            c = (w if side == "A" else ru).candidate
            est = self.estimate(w if side == "A" else ru, n)
            if self.control:
                self.control.running = f"{c.key} (in turns, {side})"
            try:
                t = self.measure(c, n, max(30.0, 4 * est + 30), f"-final-{i + 1}")
            finally:
                if self.control:
                    self.control.running = None
                    if self.control.stopped:  # q during the comparison: its run is `stopped`, the tune too
                        self.stopped = "stopped"
            trials[side].append(t)
            if not t.ok:
                raise CompareError(f"{c.key}'s run {i + 1} of the comparison: {t.status}: {t.reason}")
            if not (v := t.figure(m.field)):
                raise CompareError(f"{c.key}'s run {i + 1} of the comparison gave no {m.name} (no request within the "
                                   "SLO)")
            return float(v)

        seq = Sequential()
        try:
            out = run_rounds(run_one, m, self.left(), seq, self.say, self.clock)
        except CompareError as exc:
            self.notes.append(f"the comparison in turns stopped: {exc}; the winner stands on the halving's runs")
            return
        if out.interval is None:
            return
        text = verdict(out.interval, m, out.means, names=("the winner", "the runner-up"))
        if (said := self._answers(trials, out.interval.rel, out.state, m.higher_is_better)) is not None:
            text += f"; {said}"
            self.notes.append(f"the winner ({w.candidate.key}) against the runner-up ({ru.candidate.key}): {said}")
        self.final = FinalCompare(a=w.candidate.key, b=ru.candidate.key, metric=m.name, sentence=text, state=out.state,
                                  interval=out.interval, means=list(out.means),
                                  runs=[CompareRun.from_json(x) for x in out.runs], notes=list(out.notes))
        self._settle(w, ru, out.state, out.interval.rel, text, m.higher_is_better)

    def _answers(self, trials: dict[str, list[Trial]], rel: float, state: str, higher: bool) -> str | None:
        """What the last step's runs say of the two candidates' answers (answers.py: the winner A, the runner-up
        B, each run's answers read from its records); None where this tune reads no answers (a planted measure)
        or a side's records carry none."""
        if self.answers_of is None:
            return None
        from measure.control.bench.answers import agree, verdict_clause

        runs = {side: [a for t in ts if (a := self.answers_of(t)) is not None] for side, ts in trials.items()}
        ag = agree(runs["A"], runs["B"], ("the winner", "the runner-up"))
        if ag is None:
            return None
        better = None if state != "difference" else "the runner-up" if (rel > 0) == higher else "the winner"
        return verdict_clause(ag, better)

    def _settle(self, w: Row, ru: Row, state: str, rel: float, text: str, higher: bool) -> None:
        """What the comparison in turns says of the winner (A) and the runner-up (B)."""
        if state == "difference" and (rel > 0) == higher:
            self.winner = ru
            self.notes.append(f"compared in turns, the runner-up {ru.candidate.key} serves better than "
                              f"{w.candidate.key}: it wins ({text})")
        elif state == "difference":
            self.notes.append(f"compared in turns with the runner-up {ru.candidate.key}: {text}")
        else:
            a, b = sorted((w, ru), key=lambda r: r.candidate.holds)
            self.winner = a
            why = ("the cheaper first: fewer cores, fewer engines, fewer sequences"
                   if a.candidate.holds != b.candidate.holds
                   else "they hold the same cores, engines and sequences: the halving's winner first")
            self.notes.append(f"within noise: {a.candidate.key} and {b.candidate.key} ({why}) serve alike on this "
                              f"machine ({text})")
            self.within_noise = [a.candidate.key, b.candidate.key]

    def prediction_off(self, rows: list[Row]) -> float | None:
        """How far the roofline's tok/s was from the first round's, as a factor (the median over the shapes
        measured, either way); None within OFF_BY (its pruning stands)."""
        import statistics

        ratios = [abs(math.log(r.predicted.tps / r.last.output_throughput)) for r in rows
                  if r.predicted and r.predicted.tps > 0 and r.last and r.last.output_throughput]
        if not ratios:
            return None
        off = math.exp(statistics.median(ratios))
        return off if off > OFF_BY else None

    def _round(self, rows: list[Row], n: int, what: str) -> list[Row]:
        self.rounds.append(Round(requests=n, what=what, candidates=[r.candidate.key for r in rows]))
        self.say(f"— round {len(self.rounds)}: {what}, {len(rows)} candidate(s) × {n} requests "
                 f"({max(0.0, self.left()):.0f} s of the budget left)")
        for r in rows:
            self.run(r, n)
        return rows

    def view(self) -> TuneView:
        """What the live screen draws now (tui/panels.render_tune_rows and tune_front_chart)."""
        def one(r: Row) -> TuneRowView:
            t = r.last or (r.trials[-1] if r.trials else Trial(requests=0, status=r.status))
            return TuneRowView(r.candidate.key, r.status, t.requests, t.goodput_tps, t.output_throughput,
                               t.p99_ttft_ms, r.predicted.tps if r.predicted else None, r.reason)

        rows = sorted(self.rows.values(), key=lambda r: (r.last is None, [-x for x in standing(r)]))
        best = max((r for r in self.rows.values() if r.last), key=standing, default=None)
        c, lead = self.control, self.winner or best
        points = tuple((k, t.p99_ttft_ms, t.goodput_tps or 0.0) for k, t in self.front_runs().items())
        return TuneView(tuple(one(r) for r in rows), tuple(r.candidate.key for r in self.front()),
                        lead.candidate.key if lead else None,
                        c.running if c else None, bool(c and c.paused), self.stopped,
                        self.clock() - self.t0 - self.paused_s + self.spent_before,
                        self.s.budget_s + self.spent_before, points, self.front_n())

    # -- the answer --
    def front_n(self) -> int | None:
        """The run length the front compares at: the longest one every measured candidate has a run of (the first
        round's, once the halving has left any behind). A p99 over 8n requests reaches further into the tail than
        one over n, so runs of different lengths are never set against each other."""
        sets = [{t.requests for t in r.trials if t.ok} for r in self.rows.values() if r.last]
        common = set.intersection(*sets) if sets else set()
        return max(common) if common else (min(min(x) for x in sets) if sets else None)

    def front_runs(self) -> dict[str, Trial]:
        """Each measured candidate's run at front_n (where one has none there: its shortest)."""
        n, out = self.front_n(), {}
        for r in self.rows.values():
            ok = sorted((t for t in r.trials if t.ok), key=lambda t: t.requests)
            if ok:
                out[r.candidate.key] = next((t for t in ok if t.requests == n), ok[0])
        return out

    def front(self) -> list[Row]:
        """The Pareto front over the measured candidates' runs of one length (front_n): goodput (more), TTFT p99
        (less), and J/token or $/Mtok (less) where every one of them has it."""
        runs = self.front_runs()
        rows = [r for r in self.rows.values() if r.candidate.key in runs]
        third = next((f for f in ("usd_per_mtok", "joules_per_token")
                      if rows and all(t.figure(f) is not None for t in runs.values())), None)

        def vec(r: Row) -> tuple[float, ...]:
            t = runs[r.candidate.key]
            v: tuple[float, ...] = (-(t.goodput_tps or 0.0), t.p99_ttft_ms or math.inf)
            return v + ((t.figure(third) or 0.0,) if third else ())

        vs = {r.candidate.key: vec(r) for r in rows}

        def dominated(a: tuple[float, ...]) -> bool:
            return any(all(x <= y for x, y in zip(b, a)) and b != a for b in vs.values())

        return sorted([r for r in rows if not dominated(vs[r.candidate.key])], key=lambda r: vs[r.candidate.key])

    def result(self, model: str, ctx: int, machine: str | None = None,
               server_bin: str = "llama-server") -> TuneResult:
        """tune.json's record of the tune now (`machine`: the chip, run_tune's)."""
        s, w = self.s, self.winner
        winner = None
        if w is not None and w.last is not None:
            winner = Winner(key=w.candidate.key, candidate=w.candidate, trial=w.last,
                            serve_command=serve_command(w.candidate, model, ctx, server_bin,
                                                        self.serving.get(w.candidate.engine)),
                            bench_command=bench_command(w.candidate, model, s, w.last.requests))
        return TuneResult(machine=machine, settings=SettingsRecord.of(s), model=model,
                          elapsed_s=round(self.clock() - self.t0 + self.spent_before, 1),
                          this_session_s=round(self.clock() - self.t0, 1), stopped=self.stopped,
                          rounds=list(self.rounds), candidates=[r.record() for r in self.rows.values()],
                          front=[r.candidate.key for r in self.front()], front_requests=self.front_n(),
                          notes=list(self.notes), final_compare=self.final, within_noise=list(self.within_noise),
                          not_tried={r.candidate.key: r.reason for r in self.rows.values()
                                     if r.status in ("not tried", "pruned", "pending")},
                          skipped_engines=dict(self.skipped_engines), winner=winner)


def _line(t: Trial) -> str:
    if not t.ok:
        return f"{t.status.upper()}: {t.reason}"
    return (f"goodput {t.goodput_tps or 0:.1f} tok/s ({t.slo_attainment or 0:.0%} in SLO), {t.output_throughput or 0:.1f}"
            f" tok/s, TTFT p99 {t.p99_ttft_ms or 0:.0f} ms, TPOT p50 {t.median_tpot_ms or 0:.1f} ms")
