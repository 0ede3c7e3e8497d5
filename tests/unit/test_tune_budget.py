"""tune's time (issue 58): every run starts its candidate afresh, so a run's estimate counts its own start-up
whole (scaled with the requests, the last step's short runs under-counted it and the last step overran the
budget); a stop by q is said as a stop, not as the budget's cut."""
import presets
from measure.control.tune import Settings, Tune, TuneControl, candidates
from measure.control.tune.record import Trial
from measure.control.tune.search import Carried

STARTUP_S, PER_REQUEST_S = 20.0, 0.5


def settings(**kw):
    base = dict(engines=["llama"], users=2, requests=4, max_tokens=8, ctx=512, budget_s=600.0,
                slo=presets.slo("ttft=300ms,tpot=12ms"), workload=presets.workload("synthetic:8"),
                final_compare=True)
    return Settings(**{**base, **kw})


def slow_start(clock, score):
    """A measure whose every run spends STARTUP_S starting its candidate, then PER_REQUEST_S a request."""
    def measure(c, n, timeout, *suffix):
        clock[0] += STARTUP_S + PER_REQUEST_S * n
        return Trial(requests=n, status="ok", goodput_tps=score(c), output_throughput=score(c) + 1,
                     p99_ttft_ms=100.0, load_s=PER_REQUEST_S * n)
    return measure


def test_a_run_is_estimated_with_its_start_up_whole():
    clock = [0.0]
    cands = [c for c in candidates(["llama"], cores=2, users=2) if c.default_knobs][:2]
    tune = Tune(settings(), cands, slow_start(clock, lambda c: 10.0), say=lambda m: None, clock=lambda: clock[0])
    row = tune.rows[cands[0].key]
    tune.run(row, 16)  # measured at 16 requests: 20 s of start-up, 8 s of requests (28 s on the tune's clock)
    assert row.trials[-1].seconds == STARTUP_S + 8.0
    assert tune.estimate(row, 4) == STARTUP_S + PER_REQUEST_S * 4  # not (20 + 8) × 4 ÷ 16 + a fifth of 20


def test_the_last_step_stays_within_the_budget():
    """Every budget from 100 to 1190 s: the search, its halving and the winner against the runner-up in turns
    (12 runs of 20 s start-up each) end within the budget on the tune's clock (the start-up scaled with the
    requests: budgets 410 … 500 s ended at 538 s)."""
    cands = [c for c in candidates(["llama"], cores=2, users=2) if c.default_knobs]
    for budget in map(float, range(100, 1200, 10)):
        clock = [0.0]
        tune = Tune(settings(budget_s=budget), cands, slow_start(clock, lambda c: float(c.k * c.b + c.threads)),
                    say=lambda m: None, clock=lambda c=clock: c[0])
        tune.search()
        assert clock[0] <= budget, (budget, clock[0], tune.notes)


def test_a_stop_by_q_is_said_as_a_stop():
    clock, control, lines = [0.0], TuneControl(), []
    cands = [c for c in candidates(["llama"], cores=2, users=2) if c.default_knobs]
    runs = []

    def measure(c, n, timeout, *suffix):
        clock[0] += 5
        runs.append(n)
        if n > 4 and len(runs) > len(cands) + 1:
            control.stop()  # q while the second halving round goes on
        return Trial(requests=n, status="ok", goodput_tps=float(len(runs)), output_throughput=float(len(runs)) + 1,
                     p99_ttft_ms=100.0, load_s=4)

    tune = Tune(settings(), cands, measure, say=lines.append, clock=lambda: clock[0],
                carried=Carried(control=control))
    tune.search()
    assert tune.stopped == "stopped"
    assert not [x for x in lines if "the budget cut" in x], lines
    assert [x for x in lines if "stopped (q)" in x], lines
    from measure.control.tune import format_result

    text = format_result(tune.result("m.gguf", 512))
    assert "stopped by q" in text and "the budget stopped it" not in text


def _stopped_at(budget: float, stop_at: int):
    """A tune of the planted clock (5 s a run) whose q is pressed during its `stop_at`-th run: (tune, lines, runs)."""
    clock, control, lines, runs = [0.0], TuneControl(), [], []

    def measure(c, n, timeout, *suffix):
        clock[0] += 5
        runs.append(n)
        if len(runs) == stop_at:
            control.stop()
        return Trial(requests=n, status="ok", goodput_tps=float(len(runs)), output_throughput=len(runs) + 1.0,
                     p99_ttft_ms=100.0, load_s=4)

    tune = Tune(settings(budget_s=budget), candidates(["llama"], cores=2, users=2), measure, say=lines.append,
                clock=lambda: clock[0], carried=Carried(control=control))
    tune.search()
    return tune, lines, runs


def test_a_stop_by_q_is_a_stop_whenever_it_comes_and_whatever_the_budget_cut_before():
    """q pressed at any run (the 1st … 9th) of a tune at any budget from 20 to 75 s: the tune ends `stopped`, no
    line says the budget cut a round or stopped it, the footer says q (a round the budget held for its best few
    before q still says so on those rows: it did)."""
    import itertools

    from measure.control.tune import format_result

    for budget, stop_at in itertools.product(range(20, 80, 5), range(1, 10)):
        tune, lines, runs = _stopped_at(float(budget), stop_at)
        if len(runs) < stop_at:
            continue  # the budget ended it before q
        text = format_result(tune.result("m.gguf", 512))
        assert tune.stopped == "stopped", (budget, stop_at)
        assert not [x for x in lines if "the budget cut" in x or "the budget:" in x], (budget, stop_at, lines)
        assert "stopped by q" in text and "the budget stopped it" not in text, (budget, stop_at)
