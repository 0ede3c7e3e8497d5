"""Does a server batch: the pure detection (measure/core/serving.py, docs/design/server-vs-engine.md) on figures, then the null
server's two modes (engines/null_server.py --serve) told apart by it over real loopback streams."""
import json
import subprocess
import sys
import time

import pytest

from measure.core import serving as S

MS = 1_000_000


def test_decoding_concurrency_counts_overlapping_token_spans():
    # two streams decoding side by side over the whole second: 2; taking turns: 1
    side = [[0, 500 * MS, 1000 * MS], [0, 1000 * MS]]
    turns = [[0, 500 * MS], [500 * MS, 1000 * MS]]
    assert S.decoding_concurrency(side, 0, 1000 * MS) == pytest.approx(2.0)
    assert S.decoding_concurrency(turns, 0, 1000 * MS) == pytest.approx(1.0)
    # only the part inside the window counts; a one-token stream has no span
    assert S.decoding_concurrency([[-500 * MS, 500 * MS], [700 * MS]], 0, 1000 * MS) == pytest.approx(0.5)
    assert S.decoding_concurrency([], 5, 5) is None


def test_batching_verdict_live():
    assert S.batching(1.0, 1.0, None) is None  # B = 1: nothing to tell
    v = S.batching(4.0, 0.98, None)
    assert v is not None and v.verdict == "serialises" and v.source == "token timing"
    assert S.batching(4.0, 3.6, None).verdict == "batches"
    assert S.batching(2.0, 1.7, None).verdict == "batches"  # two streams with prefill gaps still batch
    assert S.batching(2.0, 1.1, None).verdict == "serialises"
    # serialising only where every figure there is says so; the larger one is the served concurrency
    v = S.batching(4.0, 0.9, 1.0)
    assert v.verdict == "serialises" and v.source == "its /metrics" and v.served == 1.0
    v = S.batching(4.0, 3.9, 1.0)  # the gauge aliased short requests; their tokens overlapped
    assert v.verdict == "batches" and v.source == "token timing"
    v = S.batching(4.0, 0.8, 3.8)  # long prefills, short answers: the timing undercounts; the server says 3.8
    assert v.verdict == "batches" and v.source == "its /metrics"
    assert S.batching(8.0, None, 4.0).verdict == "batches"  # -np 4 at B = 8: batches, four at a time
    assert S.batching(3.0, None, None) is None
    assert S.batching(4.0, 1.0, None, span_s=1.0) is None  # the load just began
    v = S.batching(4.0, 3.8, 0.0)  # a gauge scraped before the load: the timing is read
    assert v.verdict == "batches" and v.source == "token timing"


def _cell(b, tps, tpot=20.0, ttft=50.0):
    return {"b": b, "output_throughput": tps, "median_tpot_ms": tpot, "median_ttft_ms": ttft}


def test_compare_verdicts():
    engine = [_cell(1, 50), _cell(2, 90), _cell(4, 160)]
    serial = [_cell(1, 48, ttft=60), _cell(2, 49, ttft=900), _cell(4, 50, ttft=2800)]
    table = S.rows(engine, serial)
    assert [r.b for r in table] == [1, 2, 4] and table[2].share == pytest.approx(50 / 160)
    v, why = S.batching_verdict(table)
    assert v == "serialises" and "TTFT" in why
    full = [_cell(1, 49), _cell(2, 88), _cell(4, 150)]
    assert S.batching_verdict(S.rows(engine, full))[0] == "batches fully"
    part = [_cell(1, 45), _cell(2, 70), _cell(4, 120)]
    assert S.batching_verdict(S.rows(engine, part))[0] == "batches with 25% overhead"
    interrupted = [_cell(1, 48), dict(_cell(2, 10), errors=7, completed=1), _cell(4, 150)]
    v, why = S.batching_verdict(S.rows(engine, interrupted))
    assert v == "fails streams" and why == "B=2: 7 of 8 streams failed"
    assert S.batching_verdict(S.rows(engine, [_cell(1, 49), dict(_cell(2, 88), errors=1, completed=15), _cell(4, 150)]))[0] \
        == "batches fully"  # one failed stream in 16 is not the verdict
    flat_engine = [_cell(1, 50), _cell(4, 52)]
    assert S.batching_verdict(S.rows(flat_engine, serial))[0] == "undecided"
    assert S.batching_verdict(S.rows(engine[:1], serial[:1]))[0] == "undecided"
    assert S.batching_verdict(S.rows(engine, [])) == ("undecided", "needs B = 1 and a B ≥ 2 measured on both sides")


@pytest.mark.parametrize("serve,expect", [("serialising", "serialises"), ("batching", "batches")])
def test_null_server_modes_told_apart(serve, expect, tmp_path):
    """B = 4 streams from `bench` at the null server in each mode; the records' decoding concurrency and
    achieved concurrency go through the product's live detection (its timing path: the dashboard test below
    reads the server's own gauge)."""
    from engines.null_server import Behaviour, NullServer
    from measure.core import metrics as M
    from measure.core.records import RequestRecord

    with NullServer(Behaviour(ttft_ms=5, itl_ms=10, serve=serve)) as srv:
        out = tmp_path / serve
        p = subprocess.run([sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--url", srv.url,
                            "--tokenizer", "none", "--b", "4", "--requests", "8", "--max-tokens", "12",
                            "--out", str(out)], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
    lines = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()[1:]]
    recs = [RequestRecord.from_dict(d) for d in lines if d.get("kind") == "request" and d.get("t_done_ns")]
    assert len(recs) == 8
    a = min(r.t_started_ns for r in recs)
    b = max(r.t_done_ns for r in recs)
    open_streams = M.achieved_concurrency(recs, a, b)
    decoding = S.decoding_concurrency([r.token_ns for r in recs], a, b)
    v = S.batching(open_streams, decoding, None)
    assert v is not None and v.verdict == expect, (open_streams, decoding)


@pytest.mark.parametrize("serve,expect", [("serialising", "serialises"), ("batching", "batches")])
def test_dashboard_names_a_serialising_server(serve, expect, tmp_path):
    """The live path: the dashboard's controller over the HTTP source at B = 4, the null server in a process of
    its own; its numbers say serialises or batches within 30 s (its running gauge and the token timing), and a
    serialising server is logged."""
    from engines.null_server import spawn
    from measure.control.builder import make_plan
    from tui.options import plan_options
    from measure.control.live.start import start_live
    from tui.options import build_parser
    from tui.panels import serving_text

    proc, url = spawn(5.0, 10.0, "--serve", serve, *(("--step-clock",) if serve == "batching" else ()))  # a batcher
    # steps its streams together (on their own phases they read as taking turns: tests/integration/test_server_verdicts)
    try:
        dash, _ = build_parser()
        plan = make_plan(plan_options(dash.parse_args(["--engine", "http", "--url", url, "--tokenizer", "none", "--b", "4",
                                          "--max-tokens", "10"])), default_max_tokens=10)
        run = start_live(plan, None, True, None, None)
        try:
            found, end = None, time.monotonic() + 30
            while time.monotonic() < end:
                time.sleep(0.5)
                snap = run.controller.snapshot()
                found = snap.numbers.batching if snap else None
                if found is not None and found.verdict == expect:
                    break
            assert found is not None and found.verdict == expect, found
            text = " ".join(t for t, _ in serving_text(snap.numbers, snap.b))
            assert text.startswith(f"server {expect}:")
            logged = [x[3] for x in snap.log if "serialises" in x[3]]
            assert bool(logged) == (serve == "serialising"), snap.log
        finally:
            run.close()
    finally:
        proc.kill()
        proc.wait()


def test_serving_text_lines():
    from dataclasses import replace

    from measure.control.live.snapshot import Numbers
    from tui.panels import serving_text

    n = Numbers(level="K=1 B=4 http", agg_tps=40.0, streams=4, concurrency=4.0, tpot_p50=None, tpot_p90=None,
                predicted_tpot=None, predicted_tps=None, predicted_by="", mbu=None, bw_gbps=None, bw_formula="",
                ttft_p50=None, ttft_p99=None, ttft_engine_p50=None, ttft_engine_p99=None, itl_p50=None, requests=0,
                errors=0, server_view=None, workers_cpu_percent=0.0, footprint=None, budget=None, wall=None,
                ceiling="")
    assert serving_text(n, 4) == []
    n = replace(n, batching=S.Batching("serialises", 1.0, 4.0, "token timing"), server_efficiency=0.25,
                engine_tps=160.0)
    lines = [t for t, _ in serving_text(n, 4)]
    assert lines == ["server efficiency 25% of the engine's own batched 160.0 tok/s at B=4",
                     "server serialises: 1.0 served at once of 4.0 streams open (token timing); B > 1 only queues"]


@pytest.mark.parametrize("args,says", [
    ([], "give the server as --url URL"),
    (["--url", "http://127.0.0.1:9/v1", "--serve", "llama-server"], "one of them"),
    (["--url", "http://127.0.0.1:9/v1", "--b", "2,4"], "--b needs 1"),
    (["--serve", "vllm"], "invalid choice"),
])
def test_server_vs_engine_refuses_bad_input(args, says):
    p = subprocess.run([sys.executable, "-m", "tui.cli", "server-vs-engine", *args], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_baseline_refusals(tmp_path):
    from measure.control.bench.server_vs_engine import engine_baseline

    with pytest.raises(ValueError, match="cannot read"):
        engine_baseline(tmp_path / "nothing.json")
    (tmp_path / "x.json").write_text('{"command": "bench"}')
    with pytest.raises(ValueError, match="not a server-vs-engine output"):
        engine_baseline(tmp_path / "x.json")
    (tmp_path / "server-vs-engine.json").write_text(json.dumps(
        {"command": "server-vs-engine", "rows": [{"b": 1, "engine_tps": 50.0}, {"b": 4, "engine_tps": 160.0}]}))
    assert engine_baseline(tmp_path) == {1: 50.0, 4: 160.0}


def test_server_vs_engine_runs_both_sweeps_and_reuses_the_engine(tmp_path):
    """The command end to end, small: the embedded model's batch mode in-process, then a null server at the same
    B (its figures are the schedule's, not the model's: this checks the pairing, the files and the JSON line);
    then --engine-from pairs the same engine cells with another server, and refuses other options."""
    from engines.null_server import Behaviour, NullServer

    cli = [sys.executable, "-m", "tui.cli", "server-vs-engine", "--b", "1,2", "--requests", "2", "--max-tokens", "4",
           "--ctx", "256", "--threads", "1"]
    with NullServer(Behaviour(ttft_ms=5, itl_ms=10, serve="serialising")) as srv:
        p = subprocess.run([*cli, "--url", srv.url, "--out", str(tmp_path / "a")], capture_output=True, text=True,
                           timeout=300)
    assert p.returncode == 0, p.stderr + p.stdout[-2000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["command"] == "server-vs-engine" and [r["b"] for r in res["rows"]] == [1, 2]
    assert all(r["engine_tps"] > 0 and r["server_tps"] > 0 for r in res["rows"])
    assert res == json.loads((tmp_path / "a" / "server-vs-engine.json").read_text())
    for side in ("engine", "server"):
        assert [c["b"] for c in json.loads((tmp_path / "a" / side / "summary.json").read_text())] == [1, 2]
    with NullServer(Behaviour(ttft_ms=5, itl_ms=10)) as srv:
        q = subprocess.run([*cli, "--url", srv.url, "--engine-from", str(tmp_path / "a"), "--out",
                            str(tmp_path / "b")], capture_output=True, text=True, timeout=120)
        assert q.returncode == 0, q.stderr
        again = json.loads(q.stdout.strip().splitlines()[-1])
        assert [r["engine_tps"] for r in again["rows"]] == [r["engine_tps"] for r in res["rows"]]
        bad = subprocess.run([*cli[:-2], "--threads", "2", "--url", srv.url, "--engine-from", str(tmp_path / "a"),
                              "--out", str(tmp_path / "c")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "its engine ran with other options" in bad.stderr, bad.stderr


def _rec(rid, b, started_ms, tokens_ms):
    from measure.core.records import RequestRecord

    ts = [t * MS for t in tokens_ms]
    return RequestRecord("r", rid, "http", "http", "m", 0, 1, b, t_started_ns=started_ms * MS,
                         t_first_token_ns=ts[0], t_done_ns=ts[-1], token_ns=ts, output_tokens=len(ts))


def test_the_verdict_reads_the_server_records_before_the_rates():
    """Two streams open together at B = 2: taking turns (the second's tokens after the first's) is serialising
    whatever the tok/s say (a noisy B = 1 cell made llama_cpp.server read 'batches fully' from rates alone)."""
    turns = [_rec(1, 2, 0, range(0, 1000, 100)), _rec(2, 2, 0, range(1000, 2000, 100))]
    side = [_rec(1, 2, 0, range(0, 1000, 100)), _rec(2, 2, 0, range(0, 1000, 100))]
    # over 0 → 1.9 s: open 0.9 + 1.9 s, decoding 0.9 + 0.9 s; side by side over 0 → 0.9 s: 2 open, 2 decoding
    assert S.concurrency_of(turns) == (pytest.approx(2.8 / 1.9), pytest.approx(1.8 / 1.9))
    assert S.concurrency_of(side) == (pytest.approx(2.0), pytest.approx(2.0))
    assert S.concurrency_of([]) == (None, None)
    engine = [_cell(1, 50), _cell(2, 90)]
    looks_full = [_cell(1, 30), _cell(2, 88)]  # rates alone: ≥ 90 % of the engine at B = 2
    four = [_rec(i, 2, 0, range(1000 * i, 1000 * i + 1000, 100)) for i in range(4)]  # 4 in turns, all open at 0
    v, why = S.batching_verdict(S.rows(engine, looks_full, four))
    assert v == "serialises" and "(B=2)" in why, why
    # streams that overlap (served 2 of 2) while the tok/s stays flat and TTFT rises: interleaved, not batched
    # (mlx_lm.server here: 1.4 → 1.6 tok/s from B = 1 to 4, the engine ×4.3)
    flat = [_cell(1, 30, ttft=100), _cell(2, 31, ttft=400)]
    v, why = S.batching_verdict(S.rows(engine, flat, side))
    assert v == "interleaves" and "overlap" in why, why
    both = [_rec(i, 2, 0, range(0, 1000, 100)) for i in range(2)] + [_rec(i + 2, 2, 1000, range(1000, 2000, 100))
                                                                      for i in range(2)]
    assert S.batching_verdict(S.rows(engine, looks_full, both))[0] == "batches fully"


def test_a_stall_in_turns_is_not_a_step():
    """Two streams in 10 ms turns (a token each every 20 ms), each stalled once 400 ms by a third stream's prefill
    taken in turn: their mean gap is 45 ms, and 0.5 × 45 ÷ 2 = 11 ms would call every 10 ms turn a shared step;
    without the stall (steady_tpot: 20 ms) none is."""
    ms = 1_000_000
    a = [i * 20 * ms for i in range(8)] + [540 * ms + i * 20 * ms for i in range(8)]
    b = [t + 10 * ms for t in a]
    assert (a[-1] - a[0]) / 15 == pytest.approx(45.33 * ms, rel=1e-3)
    assert S.steady_tpot(a) == pytest.approx(20 * ms)
    assert S.stepped_share([a, b], 2.0) == 0.0
    assert S.stepped_share([a, [t + ms for t in a]], 2.0) == pytest.approx(16 / 31)  # one step: 1 ms apart
