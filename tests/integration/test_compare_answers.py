"""Does the faster configuration change the answers? (issue 58 item 5; measure/control/bench/answers.py,
docs/design/compare.md): the answers' agreement as a pure function of records, then compare end to end over the
null engine (SIMULATED) with one side planted to change one answer token at a known position in a known set of
prompts, and on the embedded model (KV cache f16 against q4_0)."""
import json
import subprocess
import sys

import pytest

from measure.control.bench.answers import (IDS, WORDS, Answers, agree, answers_of, first_difference, of_cells,
                                           verdict_clause)
from measure.control.bench.compare import METRICS, Interval, Comparison
from measure.core.records import RequestRecord

TOKS = METRICS["tok/s"]


def rec(rid, ids, *, error=None, rep=0, b=1, extra=None):
    return RequestRecord(run_id="r", request_id=rid, mode="instances", engine="e", model="m", model_bytes=0, k=1,
                         b=b, output_tokens=len(ids or []), error=error, rep=rep,
                         extra=extra if extra is not None else {"output_ids": list(ids or [])})


def test_first_difference_is_one_based_and_a_shorter_answer_differs_after_its_end():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [9, 2, 3]) == 1
    assert first_difference([1, 2, 3, 4], [1, 2, 3, 5]) == 4
    assert first_difference([1, 2], [1, 2, 3]) == 3 and first_difference([1, 2, 3], [1, 2]) == 3


def test_answers_are_keyed_by_the_prompt_s_place_in_the_run_and_a_failed_request_keeps_its_place():
    # ids 12, 10, 11 arrive out of order: ranks 0, 1, 2 are ids 10, 11, 12; 11 failed (no answer, its place kept)
    got = answers_of([rec(12, [7, 8]), rec(10, [1, 2]), rec(11, [], error="boom")])
    assert got == (IDS, {0: (1, 2), 2: (7, 8)}, False)
    assert answers_of([rec(1, [1], extra={}), rec(2, [2], extra={"proc": 1})]) is None  # no answers recorded: None
    text = answers_of([rec(1, None, extra={"output_text": " The  cat\nsat"})])  # a server's text: its words
    assert text == (WORDS, {0: ("The", "cat", "sat")}, False)
    assert answers_of([rec(1, [1]), rec(2, None, extra={"output_text": "x"})]) is None  # a run of two kinds


def test_agreement_names_the_share_the_earliest_divergence_and_a_side_whose_own_runs_disagree():
    a = {0: (1, 2, 3, 4), 1: (5, 6, 7, 8), 2: (9, 9, 9, 9), 3: (4, 3, 2, 1)}
    b = {0: (1, 2, 3, 4), 1: (5, 6, 0, 8), 2: (9, 9, 9, 9), 3: (4, 0, 2, 1)}
    ag = agree([Answers(IDS, a), Answers(IDS, a)], [Answers(IDS, b), Answers(IDS, {**b, 2: (9, 9, 9, 0)})])
    assert (ag.prompts, ag.identical, ag.share, ag.first, ag.at) == (4, 2, 0.5, 2, {1: 3, 3: 2})
    assert ag.unstable == {"A": 0, "B": 1} and ag.runs == {"A": 2, "B": 2}
    w = ag.words()
    assert w.startswith("answers differ in 2 of 4 prompts from token 2 (token ids, greedy")
    assert "B's own 2 runs differ in 1 of 4: not only the configuration changes them" in w
    same = agree([Answers(IDS, a)], [Answers(IDS, dict(a))])
    assert same.words() == "answers identical in 4 of 4 prompts (token ids, greedy)" and same.first is None
    d = ag.to_dict()
    assert (d["share"], d["first_divergence"], d["divergence_at"]) == (0.5, 2, {"1": 3, "3": 2})
    assert agree([], [Answers(IDS, b)]) is None
    words = agree([Answers(WORDS, {0: ("a", "b")})], [Answers(WORDS, {0: ("a", "c")})])
    assert words.words().startswith("answers differ in 1 of 1 prompts from word 2 (answer text split at whitespace")
    mixed = agree([Answers(IDS, a)], [Answers(WORDS, {0: ("a",)})])
    assert not mixed.comparable and mixed.words() == f"answers not compared: A's are {IDS}; B's are {WORDS}"
    assert "wins" not in verdict_clause(mixed, "B")


def test_a_winner_whose_answers_differ_says_so_and_records_without_ids_say_not_compared():
    ag = agree([Answers(IDS, {0: (1, 2), 1: (3, 4)})], [Answers(IDS, {0: (1, 2), 1: (3, 5)})])
    faster = Comparison("B is 20.0% ± 2.0% faster than A in tok/s (…) — decided after 3 rounds", "difference",
                     Interval(0.2, 0.18, 0.22, 0.95, 3), (100.0, 120.0), [])
    s = faster.with_answers(ag, TOKS).sentence
    assert s.endswith("; B wins, but its answers differ in 1 of 2 prompts from token 2 (token ids, greedy; A's "
                      "first run against B's)"), s
    slower = Comparison("x", "difference", Interval(-0.2, -0.22, -0.18, 0.95, 3), (100.0, 80.0), [])
    assert "A wins, but its answers differ" in slower.with_answers(ag, TOKS).sentence
    assert "B wins, but" in slower.with_answers(ag, METRICS["tpot"]).sentence  # TPOT 20 % lower: B wins
    none = Comparison("no difference above 3.0%", "budget", Interval(0.01, -0.02, 0.03, 0.95, 3), (1.0, 1.0), [])
    assert none.with_answers(ag, TOKS).sentence == "no difference above 3.0%; " + ag.words()
    assert verdict_clause(None, "B").startswith("answers not compared (the records carry no answers")
    assert none.with_answers(ag, TOKS).to_dict()["answers"]["identical"] == 1
    assert none.to_dict()["answers"] is None


def test_of_cells_groups_each_rep_s_answers_and_leaves_the_warm_up_out():
    recs = [rec(1, [1], rep=-1), rec(2, [2], rep=0), rec(3, [3], rep=0), rec(4, [4], rep=1), rec(5, [9], rep=0, b=2)]
    assert of_cells(recs) == {(1, 1, "instances"): [(IDS, {0: (2,), 1: (3,)}, False), (IDS, {0: (4,)}, False)],
                              (1, 2, "instances"): [(IDS, {0: (9,)}, False)]}


def cli(*argv, timeout=300):
    return subprocess.run([sys.executable, "-m", "tui.cli", "compare", *argv], capture_output=True, text=True,
                          timeout=timeout)


def planted(requests: int, every: int) -> list[int]:
    """The prompts (0-based index in a run) whose answer the null engine's planted change alters: those whose ids
    sum to a multiple of `every` (engines/null.changed_at), over the default workload compare runs."""
    from engines.base import EngineSpec
    from engines.null import NullEngine, changed_at
    from measure.core.datasets import prompt_for
    from measure.machine.workloads import resolve

    w, e = resolve("default"), NullEngine(EngineSpec("null", ""))
    return [i for i in range(requests) if changed_at(e.tokenize(prompt_for(w, i)), {"change_token": 1,
                                                                                     "change_every": every}) == 0]


def test_cli_names_a_planted_changed_token_its_share_and_its_position(tmp_path):
    """B (SIMULATED, the null engine in batch mode at B = 2) changes the 5th answer token of the prompts whose ids
    sum to a multiple of 3; A (instances) does not: the verdict names the share and token 5, compare.json the
    prompts, and each side's own runs agree. The records read back from disk give the same."""
    changed = planted(8, 3)
    assert 0 < len(changed) < 8, changed  # the planted set is neither empty nor everything
    out = tmp_path / "c"
    p = cli("--max-tokens", "8", "--requests", "8", "--budget", "5", "--min-rounds", "2", "--warmup", "0",
            "--out", str(out), "-A", "--engine null --null-ttft-ms 2 --null-itl-ms 1",
            "-B", "--engine null --null-ttft-ms 2 --null-itl-ms 1 --b 2 --null-change-token 5 --null-change-every 3")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    res = json.loads((out / "compare.json").read_text())
    ans = res["answers"]
    assert (ans["prompts"], ans["identical"], ans["first_divergence"]) == (8, 8 - len(changed), 5), ans
    assert ans["divergence_at"] == {str(i): 5 for i in changed} and ans["unstable"] == {"A": 0, "B": 0}
    assert ans["runs"] == {"A": 2 * res["rounds"], "B": 2 * res["rounds"]}
    assert "note: answers: the first differing token (1-based) by prompt (its index in the run, from 0): " + \
        ", ".join(f"{i} → 5" for i in changed) in p.stdout
    assert f"answers differ in {len(changed)} of 8 prompts from token 5 (token ids, greedy" in p.stdout, p.stdout
    a_recs = [json.loads(x) for x in (out / "A" / "records.jsonl").read_text().splitlines()[1:]]
    assert all(len(r["extra"]["output_ids"]) == 8 for r in a_recs)
    from measure.machine.recorder import read_jsonl

    (ra,), (rb,) = of_cells(read_jsonl(out / "A" / "records.jsonl").records).values(), \
        of_cells(read_jsonl(out / "B" / "records.jsonl").records).values()
    again = agree(ra, rb)
    assert (again.identical, again.at) == (8 - len(changed), {i: 5 for i in changed})


def test_cli_kv_type_is_the_llama_engine_s_and_one_line_elsewhere():
    p = cli("-A", "--engine null --kv-type q4_0", "-B", "--engine null", timeout=120)
    assert p.returncode == 2 and "--kv-type applies to --engine llama" in p.stderr, p.stderr
    p = cli("--kv-type", "q4_0", "-A", "--engine null", "-B", "", timeout=120)  # shared: both sides'
    assert p.returncode == 2 and "-A: --kv-type applies to --engine llama" in p.stderr, p.stderr
    p = cli("-A", "--kv-type q5_1", "-B", "", timeout=120)
    assert p.returncode == 2 and "choose one of f16, q8_0, q4_0" in p.stderr, p.stderr
    p = cli("-A", "--kv-type q4_0 --no-flash-attn", "-B", "", timeout=120)
    assert p.returncode == 2 and "needs flash attention" in p.stderr and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_on_the_embedded_model_kv_f16_against_q4_0_reports_the_share_and_first_divergence(model, tmp_path):
    """The real engine: KV cache f16 against q4_0, a few prompts and tokens. Whatever q4_0 does to the answers is
    this model's; the report must carry the share, the first divergence where they differ, and each side's ids."""
    out = tmp_path / "kv"
    p = cli("--max-tokens", "8", "--requests", "4", "--budget", "5", "--min-rounds", "2", "--warmup", "0",
            "--threads", "1", "--out", str(out), "-A", "--kv-type f16", "-B", "--kv-type q4_0", timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    res = json.loads((out / "compare.json").read_text())
    ans = res["answers"]
    assert ans["prompts"] == 4 and 0 <= ans["identical"] <= 4 and ans["runs"]["A"] == 2 * res["rounds"]
    assert (ans["first_divergence"] is None) == (ans["identical"] == 4)
    assert ans["first_divergence"] is None or 1 <= ans["first_divergence"] <= 8
    assert ans["sentence"] in p.stdout and ans["sentence"] in res["sentence"]
    head = json.loads((out / "B" / "records.jsonl").read_text().splitlines()[0])
    assert head["engine_settings"]["kv_type"] == "q4_0"


def test_cli_over_a_server_compares_the_answers_text_and_never_ids_against_text(tmp_path):
    """A server streams text: two sides on the null server (its answers the same text) are compared word by word,
    and said to be; the null engine's ids against the server's text are not compared, and the verdict says so."""
    from engines.null_server import Behaviour, NullServer

    with NullServer(Behaviour(ttft_ms=2.0, itl_ms=1.0)) as srv:
        http = f"--engine http --url {srv.url} --tokenizer none"
        both = tmp_path / "both"
        p = cli("--max-tokens", "4", "--requests", "4", "--budget", "2", "--min-rounds", "2", "--warmup", "0",
                "--out", str(both), "-A", http, "-B", http, timeout=180)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        ans = json.loads((both / "compare.json").read_text())["answers"]
        assert (ans["basis"], ans["prompts"], ans["identical"]) == (WORDS, 4, 4), ans
        assert f"answers identical in 4 of 4 prompts ({WORDS})" in p.stdout
        assert "the prompts carried a unique prefix naming each request" in ans["sentence"]  # --prefix-cache off
        mixed = tmp_path / "mixed"
        p = cli("--max-tokens", "4", "--requests", "4", "--budget", "2", "--min-rounds", "2", "--warmup", "0",
                "--out", str(mixed), "-A", "--engine null --null-ttft-ms 2 --null-itl-ms 1", "-B", http, timeout=180)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        ans = json.loads((mixed / "compare.json").read_text())["answers"]
        assert ans["prompts"] == 0 and ans["basis"] == f"A's are {IDS}; B's are {WORDS}", ans
        assert f"answers not compared: A's are {IDS}; B's are {WORDS}" in p.stdout


def test_tune_s_last_step_says_whether_the_winner_and_the_runner_up_answer_alike():
    """tune's last step (the winner and the runner-up in turns): each run's answers, read by the tune's reader,
    compared; the runner-up's answer to prompt 1 differs from its 2nd token: the comparison's sentence and the
    notes say so. A tune whose reader finds no answers (a planted measure) says nothing of them."""
    import random

    import presets
    from measure.control.tune import Candidate, Settings, Tune
    from measure.control.tune.record import Trial
    from measure.control.tune.search import Carried

    one, two = Candidate("llama", "instances", 1, 1, 2), Candidate("llama", "instances", 2, 1, 1)
    s = Settings(engines=["llama"], users=2, requests=4, max_tokens=8, ctx=512, budget_s=400.0, final_compare=True,
                 slo=presets.slo("ttft=300ms,tpot=12ms"), workload=presets.workload("synthetic:8"))

    def run(reader):
        clock, rng = [0.0], random.Random(4)

        def measure(c, n, timeout, tag=""):
            clock[0] += 5
            g = {one.key: 10.0, two.key: 7.0}.get(c.key, 5.0) * (1 + rng.gauss(0, 0.03))
            return Trial(requests=n, status="ok", goodput_tps=g, output_throughput=g + 1, p99_ttft_ms=100.0,
                         load_s=4, records=f"runs/{c.slug}-n{n}{tag}.jsonl")
        tune = Tune(s, [two, one], measure, say=lambda m: None, clock=lambda: clock[0], carried=Carried(answers=reader))
        tune.search()
        return tune.result("m.gguf", 512)

    def reader(t):
        return Answers(IDS, {0: (1, 2, 3), 1: (4, 5, 6) if t.records.startswith(f"runs/{one.slug}-n") else (4, 9, 6)})
    res = run(reader)
    fc = res.final_compare
    assert fc.state == "difference" and res.winner.key == one.key, fc
    said = "the winner wins, but its answers differ in 1 of 2 prompts from token 2 (token ids, greedy; the winner's"
    assert said in fc.sentence, fc.sentence
    assert any(n.startswith(f"the winner ({one.key}) against the runner-up ({two.key}): the winner wins, but")
               for n in res.notes), res.notes
    quiet = run(lambda t: None)
    assert "answers" not in quiet.final_compare.sentence and not any("answers" in n for n in quiet.notes)


def test_a_pool_of_client_processes_keeps_each_answer_s_text_and_its_place():
    """compare over a server with several client processes (http_pool.HttpPool.keep_answers): every record keeps
    its answer's text, and the answers are keyed by their place in the whole closed loop (ids dealt over the
    processes), prompt 0 … 7 once each."""
    import presets
    from engines.null_server import Behaviour, NullServer
    from measure.core.records import RunMeta
    from measure.core.workload import ClosedLoop, Load
    from measure.sources.http_pool import HttpPool

    with NullServer(Behaviour(ttft_ms=2, itl_ms=1)) as srv:
        pool = HttpPool(srv.url, RunMeta("http", "null", 0, simulated=True), b=4, procs=2, events=False)
        pool.keep_answers()
        pool.start(timeout=60)
        try:
            recs = pool.run_requests(Load(presets.workload("default"), ClosedLoop(4, total=8), 3), timeout=60)
            with pytest.raises(RuntimeError, match="after the pool's processes started"):
                pool.keep_answers()
        finally:
            pool.close()
    assert {r.extra["proc"] for r in recs} == {1, 2}
    assert all(isinstance(r.extra["output_text"], str) and len(r.extra["output_text"].split()) >= 1 for r in recs)
    from measure.core.datasets import prompt_for

    wl = presets.workload("default")  # the rank of a request id is its prompt's index in the load
    assert [r.prompt_id for r in sorted(recs, key=lambda r: r.request_id)] == [prompt_for(wl, i).prompt_id
                                                                                for i in range(8)]
    got = answers_of(recs)
    assert got.basis == WORDS and sorted(got.by_prompt) == list(range(8)) and got.prefixed
