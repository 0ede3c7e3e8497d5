"""inference-top tune (docs/design/tune.md): the search finds a planted best configuration among null-engine
fleets measured for real (every candidate the same closed loop, seed and workload); a candidate that crashes
is a row with its reason; the roofline prunes with a reason; the budget stops it and says what it did not
try; --resume measures nothing twice; the winner's command lines; the CLI's one-line errors."""
import json
import random
import subprocess
import sys

import pytest

import presets
from engines.base import EngineSpec
from measure.control.tune import (Candidate, Predicted, Settings, Tune, TuneControl, TuneError, TuneResult,
                                  bench_command, candidates, cell_measure, format_result, load_done, local_opener,
                                  memory_refusal, parse_budget, serve_command, write_result)
from measure.control.tune.record import Trial
from measure.control.tune.search import Carried
from measure.core.records import RunMeta

META = RunMeta("null", "null", 0, simulated=True)
PLANTED = Candidate("llama", "instances", 2, 1, 1)  # two one-thread instances: the planted best
CRASHES = Candidate("llama", "batch", 1, 2, 2)


def settings(**kw):
    base = dict(engines=["llama"], users=2, requests=4, max_tokens=8, ctx=512, budget_s=600.0,
                slo=presets.slo("ttft=300ms,tpot=12ms"), workload=presets.workload("synthetic:8"))
    return Settings(**{**base, **kw})


def null_opener(seen):
    """Null-engine fleets: 2 ms a token for the planted candidate, 30 ms for every other (out of the 12 ms
    TPOT bound), and the CRASHES shape's worker killed by SIGSEGV while it loads."""
    def open_source(c, on_record):
        opts = {"ttft_s": 0.005, "itl_s": 0.002 if c == PLANTED else 0.03}
        if c.shape == CRASHES.shape:
            opts["crash_in"] = "load"
        seen.append(c)
        return local_opener(EngineSpec("null", "", threads=c.threads, ctx=512, options=opts), META,
                            ready_s=30)(c, on_record)
    return open_source


def test_the_search_finds_the_planted_best_and_keeps_the_crash_as_a_row(tmp_path):
    s = settings()
    seen = []
    cands = candidates(["llama"], cores=2, users=2)
    assert PLANTED in cands and CRASHES in cands
    tune = Tune(s, cands, cell_measure(null_opener(seen), s, tmp_path, {"engine": "null"}, lambda m: None),
                say=lambda m: None)
    winner = tune.search()
    assert winner is not None and winner.candidate == PLANTED
    res = tune.result("null.gguf", s.ctx)
    rows = {c.key: c for c in res.candidates}
    crash = rows[CRASHES.key]
    assert crash.status == "crashed" and crash.reason, crash  # a row with its reason, never dropped
    # every run: the same closed loop of 2 users over the same requests (ids and prompts by index)
    for c in res.candidates:
        for t in c.trials:
            lines = (tmp_path / t.records).read_text().splitlines()
            head = json.loads(lines[0])
            assert head["users"] == 2 and head["candidate_key"] == c.key
            recs = [json.loads(x) for x in lines[1:]]
            if t.status == "ok":
                assert len(recs) == t.requests
    won = rows[PLANTED.key].trials
    assert len(won) >= 3 and [t.requests for t in won] == sorted(t.requests for t in won)  # halving: longer runs
    assert won[-1].goodput_tps > 0
    assert all((c.trials[-1].goodput_tps or 0) == 0 for k, c in rows.items() if k != PLANTED.key
               and c.trials and c.trials[-1].status == "ok")
    assert res.winner.key == PLANTED.key and PLANTED.key in res.front
    assert "--k 2 --threads 1" in res.winner.bench_command
    text = format_result(res)
    assert "★ " + PLANTED.key in text and "CRASHED" in text
    path = write_result(tmp_path, res)
    assert json.loads(path.read_text())["winner"]["key"] == PLANTED.key


def test_same_prompts_for_every_candidate(tmp_path):
    """Request i is the same prompt for every candidate (one workload, one seed)."""
    s = settings(requests=4)
    seen = []
    measure = cell_measure(null_opener(seen), s, tmp_path, {}, lambda m: None)
    a = measure(Candidate("llama", "instances", 1, 1, 2), 4, 60)
    b = measure(PLANTED, 4, 60)

    def prompts(t):
        recs = [json.loads(x) for x in (tmp_path / t.records).read_text().splitlines()[1:]]
        return sorted((r["request_id"], r["prompt_id"], r["prompt_tokens"]) for r in recs)

    assert a.status == b.status == "ok"
    assert prompts(a) == prompts(b)


def fake(scores, clock, secs=10.0, calls=None):
    """A measure whose goodput is planted per candidate key; each run takes `secs` on the fake clock."""
    def measure(c, n, timeout):
        clock[0] += secs
        if calls is not None:
            calls.append((c.key, n))
        g = scores.get(c.key, 1.0)
        return Trial(requests=n, status="ok", goodput_tps=g, output_throughput=g + 1, p99_ttft_ms=100.0 / g,
                     load_s=secs - 1)
    return measure


def test_roofline_prunes_with_a_reason_and_the_budget_says_what_it_did_not_try():
    clock = [0.0]
    cands = candidates(["llama-server"], cores=4, users=8)
    assert {c.b for c in cands} == {1, 2, 4, 8} and {c.threads for c in cands if c.mode == "slots"} == {4, 2}
    assert {(c.k, c.threads) for c in cands if c.mode == "servers"} == {(2, 2), (4, 1)}  # the cores dealt over them
    pred = {c.key: Predicted(10.0 * c.b, 0.1, 0.02, 10.0 * c.b, "cores") for c in cands}
    tune = Tune(settings(engines=["llama-server"], users=8, budget_s=45.0), cands,
                fake({c.key: 10.0 * c.b for c in cands}, clock), predict=lambda c: pred[c.key],
                say=lambda m: None, clock=lambda: clock[0])
    tune.search()
    res = tune.result("m.gguf", 512)
    rows = {c.key: c for c in res.candidates}
    pruned = [c for c in rows.values() if c.status == "pruned"]
    assert {c.candidate.b for c in pruned} == {1, 2}  # predicted 10 and 20 tok/s, under half of the best 80
    assert all("under 50% of the best predicted goodput 80.0 tok/s" in c.reason for c in pruned)
    assert res.stopped == "budget"
    untried = [c for c in rows.values() if c.status == "not tried"]
    assert untried and all(c.reason.startswith("the budget:") for c in untried)
    assert set(res.not_tried) >= {c.key for c in untried + pruned}
    assert "the budget stopped it" in format_result(res)


def test_memory_guard_refuses_with_numbers():
    c = Candidate("llama-server", "slots", 1, 64, 2)
    why = memory_refusal(c, 4096, 1 << 30, 1 << 20, 8 << 30)
    assert why and "refused" in why  # 64 slots × 4096 tokens × 1 MiB = 256 GiB of KV
    q8 = memory_refusal(Candidate("llama-server", "slots", 1, 8, 2, kv_type="q8_0"), 4096, 1 << 30, 1 << 20, 30 << 30)
    f16 = memory_refusal(Candidate("llama-server", "slots", 1, 8, 2), 4096, 1 << 30, 1 << 20, 30 << 30)
    assert q8 is None and f16 is not None  # 8 × 4096 tokens of KV: 32 GiB in f16, 17 GiB in q8_0


def test_resume_measures_nothing_twice(tmp_path):
    clock = [0.0]
    calls = []
    cands = candidates(["llama"], cores=2, users=2)
    s = settings(budget_s=35.0)
    scores = {c.key: float(i + 1) for i, c in enumerate(cands)}
    t1 = Tune(s, cands, fake(scores, clock, calls=calls), say=lambda m: None, clock=lambda: clock[0])
    t1.search()
    assert t1.stopped == "budget"
    write_result(tmp_path, t1.result("m.gguf", 512))
    first = list(calls)
    done, spent = load_done(tmp_path, s, "m.gguf")
    assert len(done) == len(first) and spent == clock[0]
    calls.clear()
    s2 = settings(budget_s=600.0)
    t2 = Tune(s2, cands, fake(scores, clock, calls=calls), say=lambda m: None, clock=lambda: clock[0],
              carried=Carried(done=done))
    w = t2.search()
    assert not set(calls) & set(first)  # what the first tune measured is read back, not run again
    assert w is not None and w.candidate.key == max(scores, key=lambda k: scores[k] if "fa=off" not in k else 0)
    with pytest.raises(TuneError, match="another users"):
        load_done(tmp_path, settings(users=3), "m.gguf")


def test_commands_serve_the_winner():
    s = settings()
    c = Candidate("llama-server", "slots", 1, 4, 2, flash_attn=False, kv_type="q8_0", ubatch=128)
    cmd = serve_command(c, "/m/x.gguf", 1024)
    assert cmd == ("llama-server -m /m/x.gguf --host 127.0.0.1 --port 8080 -np 4 -c 4096 -t 2 -fa off -ctk q8_0 "
                   "-ctv q8_0 -ub 128")
    assert bench_command(c, "/m/x.gguf", s, 16).startswith("inference-top bench --engine http --url "
                                                           "http://127.0.0.1:8080/v1 --tokenizer /m/x.gguf --b 2 --users 2")
    b = Candidate("llama", "batch", 1, 4, 2, flash_attn=False)
    assert serve_command(b, "m.gguf", 512) == ("inference-top --engine llama --model m.gguf --k 1 --b 4 --max-b 4 "
                                               "--threads 2 --ctx 512 --no-flash-attn")
    assert "--slo ttft=300ms,tpot=12ms" in bench_command(b, "m.gguf", s, 8)


def test_parse_budget():
    assert parse_budget("10m") == 600 and parse_budget("90") == 90 and parse_budget("1.5h") == 5400
    with pytest.raises(TuneError, match="600s, 10m or 1h"):
        parse_budget("soon")


@pytest.mark.parametrize("argv, says", [
    (["--budget", "later"], "--budget 'later'"),
    (["--engine", "vllm2"], "--engine 'vllm2'"),
    (["--resume", "/nonexistent/tune"], "--resume /nonexistent/tune"),
])
def test_cli_bad_input_is_one_line(argv, says, tmp_path):
    p = subprocess.run([sys.executable, "-m", "tui.cli", "tune", "--out", str(tmp_path / "o"), *argv],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_a_roofline_far_off_has_its_pruned_shapes_measured_after_all():
    """Predicted 10 × slots tok/s, measured 400 ÷ slots (the other way round) (np=1 the fastest): off by far more
    than 2×, so the shapes it pruned are run in a round of their own and the real best wins."""
    clock = [0.0]
    cands = candidates(["llama-server"], cores=2, users=4)
    pred = {c.key: Predicted(10.0 * c.b, 0.1, 0.02, 10.0 * c.b, "cores") for c in cands}
    scores = {c.key: 400.0 / c.b for c in cands}
    tune = Tune(settings(engines=["llama-server"], users=4), cands, fake(scores, clock),
                predict=lambda c: pred[c.key], say=lambda m: None, clock=lambda: clock[0])
    w = tune.search()
    assert w is not None and w.candidate.b == 1
    assert any("the roofline was off by" in r.what for r in tune.rounds)
    assert all(r.trials for r in tune.rows.values() if r.candidate.default_knobs)


def test_report_draws_the_front(tmp_path):
    pytest.importorskip("matplotlib")
    from measure.control.reports import report

    clock = [0.0]
    cands = candidates(["llama"], cores=2, users=2)
    tune = Tune(settings(), cands, fake({c.key: float(c.k * c.b + c.threads) for c in cands}, clock),
                say=lambda m: None, clock=lambda: clock[0])
    tune.search()
    write_result(tmp_path / "t", tune.result("m.gguf", 512))
    files, md, warns = report([str(tmp_path / "t")], tmp_path / "r")
    assert [f.name for f in files] == ["tune_front_t.png"] and files[0].stat().st_size > 0
    text = md.read_text()
    assert f"Winner: **{tune.winner.candidate.key}**" in text and "inference-top bench" in text


def test_cli_tunes_the_embedded_model_and_resumes(tmp_path, model):
    """The command line end to end with llama-cpp-python: a short budget, every run's records on disk, the winner's
    commands; then --resume with the same options reads every run back and measures none again (the comparison in
    turns, which runs on until its interval resolves or the budget ends, is left out of the second: ≈ 90 s a run
    where the two candidates serve alike)."""
    out = tmp_path / "t"
    argv = [sys.executable, "-m", "tui.cli", "tune", "--engine", "llama", "--model", str(model.path), "--users", "1",
            "--requests", "2", "--max-tokens", "4", "--ctx", "256", "--slo", "server", "--first-round", "2",
            "--out", str(out)]
    p = subprocess.run([*argv, "--budget", "40s"], capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    res = TuneResult.from_json(json.loads((out / "tune.json").read_text()))
    ran = [(c.key, t) for c in res.candidates for t in c.trials]
    assert ran and all((out / t.records).exists() for _, t in ran)
    assert res.winner and "reproduce it:  inference-top bench --engine llama" in p.stdout
    mtimes = {t.records: (out / t.records).stat().st_mtime_ns for _, t in ran}
    p2 = subprocess.run([*argv[:-2], "--resume", str(out), "--budget", "40s", "--no-compare"], capture_output=True,
                        text=True, timeout=400)
    assert p2.returncode == 0, p2.stdout[-2000:] + p2.stderr[-2000:]
    assert f"{len(ran)} runs read back from {out}" in p2.stdout
    assert all((out / r).stat().st_mtime_ns == m for r, m in mtimes.items())


def test_find_rate_searches_the_winners_knee(tmp_path, monkeypatch):
    """--find rate: the planted winner (two null instances, 5 ms + 7 × 2 ms a request: ≈ 100 req/s between them)
    gets its open-loop knee searched from half the rate its closed loop completed; the sentence names a rate it
    served within the SLO and one it did not."""
    import measure.control.bench.knee as knee

    monkeypatch.setattr(knee, "LEVEL_S", 1.0)  # one second of arrivals a level (10 s by default)
    from measure.control.tune import winner_knee

    s = settings()
    t = cell_measure(null_opener([]), s, tmp_path, {}, lambda m: None)(PLANTED, 8, 60)
    rps = t.output_throughput / s.max_tokens
    k = winner_knee(null_opener([]), PLANTED, s, tmp_path, {}, lambda m: None, 120.0, rps / 2)
    assert k.knee_rps and k.first_out_rps and k.knee_rps < k.first_out_rps < 400, k
    assert "requests/s of this workload within the" in k.sentence
    assert (tmp_path / k.records).exists() and len(k.levels) >= 2


def test_a_candidate_past_its_timeout_is_a_row_with_its_reason(tmp_path):
    """A candidate that cannot finish its requests in the time given (1 s a token, 3 s allowed) is a 'timeout'
    trial with the reason, and its workers are stopped."""
    s = settings(requests=2)
    slow = Candidate("llama", "instances", 1, 1, 1)

    def opener(c, on_record):
        return local_opener(EngineSpec("null", "", threads=1, ctx=512, options={"ttft_s": 0.005, "itl_s": 1.0}),
                            META, ready_s=30)(c, on_record)

    t = cell_measure(opener, s, tmp_path, {}, lambda m: None)(slow, 2, 3.0)
    assert t.status == "timeout" and t.reason, t
    clock = [0.0]
    tune = Tune(s, [slow], lambda c, n, timeout: t, say=lambda m: None, clock=lambda: clock[0])
    assert tune.search() is None
    row = tune.result("m", 512).candidates[0]
    assert row.status == "timeout" and row.reason == t.reason
    assert "TIMEOUT" in format_result(tune.result("m", 512))


# ---- the four defects of issue 44: each test fails on the search before its fix ----------------------------------
def _ok(n, goodput, tps=None, p99=100.0):
    return Trial(requests=n, status="ok", goodput_tps=goodput, output_throughput=goodput + 1 if tps is None else tps,
                 p99_ttft_ms=p99, load_s=4)


def test_pruning_sets_its_bar_from_goodput_on_an_exact_roofline():
    """An exact roofline (every run measures what it predicted): llama-server np = 8 serves 100 tok/s but its TTFT
    breaks the SLO (goodput 0), np = 4 serves 45 tok/s within it. The bar is half the best predicted goodput (22.5
    tok/s), not np = 8's raw 100: only np = 1 (12 tok/s) is pruned, and np = 4 wins with its 45 tok/s of goodput."""
    clock = [0.0]
    cands = [c for c in candidates(["llama-server"], cores=4, users=8) if c.mode == "slots"]
    tps = {1: 12.0, 2: 25.0, 4: 45.0, 8: 100.0}

    def pred(c):
        return Predicted(tps[c.b], 0.2 if c.b < 8 else 5.0, 0.02, tps[c.b] if c.b < 8 else 0.0, "cores")

    def exact(c, n, timeout):
        clock[0] += 5
        p = pred(c)
        return _ok(n, p.goodput_tps, p.tps, p.ttft_s * 1e3)

    tune = Tune(settings(engines=["llama-server"], users=8), cands, exact, predict=pred, say=lambda m: None,
                clock=lambda: clock[0])
    w = tune.search()
    assert w is not None and w.candidate.b == 4 and w.last.goodput_tps == 45.0, w and w.candidate.key
    assert {r.candidate.b for r in tune.rows.values() if r.status == "pruned"} == {1}
    assert all("best predicted goodput 45.0 tok/s" in r.reason for r in tune.rows.values() if r.status == "pruned")
    assert "no candidate met the SLO" not in format_result(tune.result("m.gguf", 512))


def test_a_run_cut_by_q_is_measured_again_on_resume(tmp_path):
    """q during a run cuts it ('stopped'): --resume measures that run again (it never gave an answer), and the
    candidate it cut, the planted best, wins the resumed tune."""
    clock, calls, control = [0.0], [], TuneControl()
    s = settings()
    cands = [c for c in candidates(["llama"], cores=2, users=2) if c.default_knobs]
    best = cands[-1].key  # measured last in the first round (no roofline: the order given)
    score = {c.key: (50.0 if c.key == best else float(i + 1)) for i, c in enumerate(cands)}

    def measure(c, n, timeout):
        clock[0] += 10
        calls.append((c.key, n))
        if c.key == best and not control.stopped:  # q pressed while the best candidate's first run goes on
            control.stop()
            return Trial(requests=n, status="stopped", reason=f"the tune was stopped (q) after 1 of {n} requests")
        return _ok(n, score.get(c.key, 0.5))

    t1 = Tune(s, cands, measure, say=lambda m: None, clock=lambda: clock[0], carried=Carried(control=control))
    t1.search()
    assert t1.rows[best].status == "stopped" and t1.winner is not None and t1.winner.candidate.key != best
    write_result(tmp_path, t1.result("m.gguf", 512))
    done, _ = load_done(tmp_path, s, "m.gguf")
    assert (best, s.requests) not in done and done  # the cut run is not an answer; the finished ones are
    calls.clear()
    t2 = Tune(s, cands, measure, say=lambda m: None, clock=lambda: clock[0], carried=Carried(done=done))
    w = t2.search()
    assert (best, s.requests) in calls  # measured again, whole
    assert w is not None and w.candidate.key == best


def test_a_later_round_that_all_fails_leaves_the_winner_of_the_round_before():
    """Every run of the second halving round fails: the winner is the best of the first round, named, with a note
    that says why (not 'no candidate was measured')."""
    clock = [0.0]
    s = settings()
    cands = [c for c in candidates(["llama"], cores=2, users=2) if c.default_knobs]
    score = {c.key: float(10 * c.k + c.threads) for c in cands}
    top = max(score, key=lambda k: score[k])

    def measure(c, n, timeout):
        clock[0] += 5
        if n > s.requests:
            return Trial(requests=n, status="failed", reason="no request completed (server error 500)")
        return _ok(n, score.get(c.key, 0.5))

    tune = Tune(s, cands, measure, say=lambda m: None, clock=lambda: clock[0])
    w = tune.search()
    assert w is not None and w.candidate.key == top
    res = tune.result("m.gguf", 512)
    assert res.winner.key == top and res.winner.trial.requests == s.requests
    text = format_result(res)
    assert "no candidate was measured" not in text
    assert f"every run at {2 * s.requests} requests failed: the winner is the best of the round at {s.requests}" in text


def test_the_front_and_the_best_so_far_set_runs_of_one_length_against_each_other():
    """A ran 4 and 8 requests (its p99 over 8 reaches further into the tail: 300 ms), B was halved out at 4. At 4
    requests A (goodput 5, p99 100 ms) beats B (4.5, 150 ms) on both: the front is A alone, though A's longer run
    (p99 300 ms) would put B on it; and the best so far is A, though B's 4-request goodput (4.5) beats A's at 8 (4)."""
    a, b = Candidate("llama", "instances", 1, 1, 2), Candidate("llama", "instances", 2, 1, 1)
    tune = Tune(settings(), [a, b], lambda c, n, t: Trial(requests=n, status="ok"), say=lambda m: None)
    tune.rows[a.key].trials = [_ok(4, 5.0, p99=100.0), _ok(8, 4.0, p99=300.0)]
    tune.rows[b.key].trials = [_ok(4, 4.5, p99=150.0)]
    for r in tune.rows.values():
        r.status = "measured"
    v = tune.view()
    assert v.winner == a.key and v.rows[0].key == a.key and v.front == (a.key,)
    assert [r.candidate.key for r in tune.front()] == [a.key] and tune.front_n() == 4
    assert dict((k, (x, y)) for k, x, y in v.front_points) == {a.key: (100.0, 5.0), b.key: (150.0, 4.5)}
    res = tune.result("m.gguf", 512)
    assert res.front == [a.key] and res.front_requests == 4


# ---- the last step: the winner and the runner-up in turns (compare) -----------------------------------------------
ONE = Candidate("llama", "instances", 1, 1, 2)  # 2 cores in one engine: the cheaper of the two
TWO = Candidate("llama", "instances", 2, 1, 1)  # 2 cores in two engines (two copies of the weights)


def _noisy(planted, clock, seed, sd=0.03, lucky=None):
    """Goodput planted per candidate, each run off by a seeded N(0, sd) share; `lucky`: the candidate whose
    halving runs (not the final comparison's, which carry a tag) come out 30 % high."""
    rng = random.Random(seed)

    def measure(c, n, timeout, tag=""):
        clock[0] += 5
        g = planted.get(c.key, 5.0) * (1 + rng.gauss(0, sd)) * (1.3 if c.key == lucky and not tag else 1.0)
        return _ok(n, g)
    return measure


def _final_tune(planted, seed, lucky=None):
    clock = [0.0]
    tune = Tune(settings(final_compare=True, budget_s=400.0), [TWO, ONE], _noisy(planted, clock, seed, lucky=lucky),
                say=lambda m: None, clock=lambda: clock[0])
    tune.search()
    return tune.result("m.gguf", 512)


def test_the_last_step_names_both_when_the_top_two_are_within_noise(tmp_path):
    """Two candidates that serve alike (10 tok/s of goodput each, ±3 % a run): compared in turns, the interval
    covers 0; the answer names both, the cheaper first, and the cheaper is the winner; the report says it too."""
    res = _final_tune({ONE.key: 10.0, TWO.key: 10.0}, seed=3)
    assert res.final_compare and res.final_compare.state != "difference", res.final_compare
    assert len(res.final_compare.runs) >= 12 and res.within_noise == [ONE.key, TWO.key]
    assert res.winner.key == ONE.key
    said = f"within noise: {ONE.key} and {TWO.key} (the cheaper first"
    assert said in format_result(res)
    pytest.importorskip("matplotlib")
    from measure.control.reports import report

    write_result(tmp_path / "t", res)
    assert said in report([str(tmp_path / "t")], tmp_path / "r")[1].read_text()


def test_the_last_step_keeps_a_resolved_lead_and_hands_the_win_to_a_truly_better_runner_up():
    res = _final_tune({ONE.key: 10.0, TWO.key: 7.0}, seed=4)
    assert res.final_compare.state == "difference" and res.winner.key == ONE.key
    assert res.within_noise == [] and "slower than the winner in goodput" in format_result(res)
    # ONE planted the better (10 against 9), but TWO's single halving runs come out 30 % high (11.7): TWO wins the
    # halving, and the runs in turns hand the win back to ONE
    res = _final_tune({ONE.key: 10.0, TWO.key: 9.0}, seed=5, lucky=TWO.key)
    assert res.final_compare.a == TWO.key and res.final_compare.state == "difference"
    assert res.winner.key == ONE.key and "serves better than" in format_result(res)


FAKE_SERVER = """import sys
sys.path.insert(0, {root!r})
from engines.null_server import main
args = sys.argv[1:]
sys.exit(main(["--port", args[args.index("--port") + 1], "--ttft-ms", "5", "--itl-ms", "2"]))
"""


def test_several_llama_servers_behind_one_queue(tmp_path):
    """A `servers` candidate starts K llama-servers (here a stand-in that takes llama-server's flags and serves the
    null schedule on the --port given: SIMULATED) and spreads the closed loop over them; every one is stopped
    after; its serve and bench commands name K ports."""
    from pathlib import Path

    from measure.control.tune import server_opener
    from measure.control.tune.runs import ServerRun

    fake = tmp_path / "llama-server"
    fake.write_text("#!" + sys.executable + "\n" + FAKE_SERVER.format(root=str(Path(__file__).parents[2])))
    fake.chmod(0o755)
    c = Candidate("llama-server", "servers", 2, 1, 1)
    assert c.key.startswith("llama-server ×2 np=1 t=1") and c.concurrency == 2
    s = settings(engines=["llama-server"], users=2, requests=6)
    meta = RunMeta("llama-server", "null", 0, mode="http", b=2, simulated=True)
    opener = server_opener(ServerRun(str(fake), "m.gguf", 512, ready_s=30), meta, 2, tmp_path / "runs")
    t = cell_measure(opener, s, tmp_path, {}, lambda m: None)(c, 6, 60)
    assert t.status == "ok" and t.completed == 6, t
    recs = [json.loads(x) for x in (tmp_path / t.records).read_text().splitlines()[1:]]
    assert len({r["worker"] for r in recs}) == 2  # both servers served
    logs = sorted(p.name for p in (tmp_path / "runs").glob("*.server*.log"))
    assert len(logs) == 2
    assert serve_command(c, "m.gguf", 512).count("--port") == 2
    assert "--url http://127.0.0.1:8080/v1 --url http://127.0.0.1:8081/v1" in bench_command(c, "m.gguf", s, 6)


def test_an_engine_s_declaration_is_what_tune_asks_of_it(monkeypatch):
    """tune reads an engine's modes, knobs, threads and server command from its declaration (engines/spec.py):
    an engine declared here, in no module of tune's, gets its candidates, key, variants and commands."""
    from engines import registry
    from engines.spec import EngineDecl

    toy = EngineDecl("toy", "toy", "in-process", tune_modes=("instances",), tune_knobs=("kv_type",),
                     serve_argv=("toy-serve", "{model}", "--port", "{port}"))
    monkeypatch.setitem(registry.ENGINES, "toy", toy)
    cands = candidates(["toy"], cores=4, users=2)
    assert [(c.mode, c.k, c.threads) for c in cands] == [("instances", 1, 4), ("instances", 2, 2)]  # no half threads
    assert cands[0].key == "toy instances K=1 t=4 kv=f16" and [v.key for v in cands[0].variants()] == [
        "toy instances K=1 t=4 kv=q8_0"]
    assert serve_command(cands[0], "m", 512) == "toy-serve m --port 8080"
    assert serve_command(cands[1], "m", 512).startswith("inference-top --engine toy --model m --k 2 --threads 2")
    with pytest.raises(TuneError, match="--engine null: tune takes llama, llama-server, mlx"):
        candidates(["null"], cores=2, users=2)  # declared, but with no tune modes


def test_a_chip_nobody_measured_is_pruned_only_where_the_fastest_end_of_its_range_is_under_the_bar():
    """Issue 55 item 3: a prediction on a chip nobody measured is a range; pruning (under half the best) judges its
    fastest end, and the reason gives the range. B = 2 predicted 20 (range 15–45) stays against a best of 80; B = 1
    predicted 10 (range 8–30) goes."""
    clock = [0.0]
    cands = candidates(["llama-server"], cores=4, users=8)
    span = {1: (8.0, 30.0), 2: (15.0, 45.0)}
    pred = {c.key: Predicted(10.0 * c.b, 0.1, 0.02, 10.0 * c.b, "bandwidth", span.get(c.b, (8.0 * c.b, 12.0 * c.b)))
            for c in cands}
    tune = Tune(settings(engines=["llama-server"], users=8, budget_s=45.0), cands,
                fake({c.key: 10.0 * c.b for c in cands}, clock), predict=lambda c: pred[c.key],
                say=lambda m: None, clock=lambda: clock[0])
    tune.search()
    rows = {c.key: c for c in tune.result("m.gguf", 512).candidates}
    pruned = [c for c in rows.values() if c.status == "pruned" and "under 50%" in c.reason]
    assert {c.candidate.b for c in pruned} == {1}
    assert all("predicted 8.0–30.0 tok/s (its backend family's range), under 50%" in c.reason for c in pruned)


def test_the_roofline_predictor_gives_an_unmeasured_chip_its_range():
    from measure.control.tune.space import roofline_predictor
    from measure.core import work as W
    from measure.core.roofline import Machine
    from presets import Chip

    a = Chip("apple-a", "A", 100.0, backend="metal", effective_bandwidth_gbps=80.0, step_overhead_ms=4.0,
             prefill_tflops=2.0)
    b = Chip("apple-b", "B", 200.0, backend="metal", effective_bandwidth_gbps=180.0, step_overhead_ms=6.0,
             prefill_tflops=6.0)
    w = W.WorkModel(name="d", source="test", params=5 * 10**8, file_bytes=10**9, weight_bytes=10**9,
                    embd_row_bytes=0.0, matmul_params=5 * 10**8, layers=4, heads=8, kv_heads=2, head_dim=64)
    s = settings(engines=["llama-server"], users=4, budget_s=45.0)
    c = Candidate("llama-server", "slots", 1, 4, 2)
    new = roofline_predictor(w, Machine.from_chip(Chip("apple-new", "New", 400.0, backend="metal"), peers=[a, b]), s)(c)
    assert new is not None and new.tps_range is not None and new.tps_range[0] < new.tps < new.tps_range[1]
    known = roofline_predictor(w, Machine.from_chip(a), s)(c)
    assert known is not None and known.tps_range is None
