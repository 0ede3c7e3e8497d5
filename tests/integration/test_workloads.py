"""The workloads users bring (issue 24, parts 1, 3, 4): JSONL / ShareGPT / trace files and seeded length
distributions, trace and records replay as load, the open-loop arrival patterns and the generator's lateness.
Quick: the null engine and the null server; the real model only in test_bench_real_model_over_jsonl."""
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engines.base import EngineSpec
from measure.core.arrivals import LATE_MS, lateness_figures, parse_arrivals, realised_rate
from measure.core.datasets import Dataset, DatasetError, parse_length
from measure.machine.workloads import load_jsonl, load_sharegpt, load_trace
from measure.machine.workloads import resolve
from measure.machine.recorder import read_jsonl
from measure.core.records import RunMeta
from measure.core.datasets import request_for
from measure.core.workload import Load, RequestMaker

CLI = [sys.executable, "-m", "tui.cli"]
SAMPLES = Path(__file__).resolve().parents[2] / "presets" / "samples"
NS = 1_000_000_000
KW = dict(rep=0, k=1, b=1, mode="instances")


def run(args, timeout=300):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(CLI + args, capture_output=True, text=True, timeout=timeout, env=env)


def schedule(spec, n, rep=0):
    s = spec.make(n, rep)
    return s.due(0, 0) + s.due(10**16, 0)


def cv(times):
    gaps = [b - a for a, b in zip(times, times[1:])]
    return statistics.pstdev(gaps) / statistics.mean(gaps)


# ---- part 4: arrival patterns -------------------------------------------------------------------------------

@pytest.mark.parametrize("text, rate, asked, shape", [
    ("constant", 8.0, 8.0, (0.0, 0.0)),
    ("poisson", 8.0, 8.0, (0.85, 1.15)),  # exponential gaps: CV 1
    ("gamma:0.5", 8.0, 8.0, (1.2, 1.65)),  # burstiness 0.5: CV √2
    ("gamma:4", 8.0, 8.0, (0.4, 0.6)),  # burstiness 4: CV ½
    ("ramp:2-14", None, 8.0, (0.9, 2.0)),
])
def test_arrival_patterns_offer_the_rate_asked_over_500_requests(text, rate, asked, shape):
    times = schedule(parse_arrivals(text, rate, seed=0), 500)
    assert len(times) == 500 and times == sorted(times)
    got = realised_rate(times)
    assert abs(got - asked) / asked < 0.05, (text, got)
    assert shape[0] <= cv(times) <= shape[1] + 1e-9, (text, cv(times))


def test_a_ramp_climbs():
    """ramp:2-14 over 500 requests: T = 2·499/16 s; Λ(T/2) = 2·T/2 + 12·T/8 of the 499 arrivals after the first
    fall in the first half of the time (≈ 156), the rest in the second (≈ 343): the rate rises."""
    times = schedule(parse_arrivals("ramp:2-14", None), 500)
    big_t = times[-1] - times[0]
    first = sum(1 for t in times[1:] if t - times[0] <= big_t / 2)
    expect = (2 * big_t / 2 + 12 * big_t / 8) / NS
    assert abs(first - expect) / expect < 0.15, (first, expect)
    early = realised_rate([t for t in times if t - times[0] < big_t / 5])
    late = realised_rate([t for t in times if t - times[0] > 4 * big_t / 5])
    assert late > 3 * early


def test_open_ended_patterns_keep_their_rate():
    """Without a count (no conditioning) the draws alone hold the rate: over 5000 arrivals within 5 %."""
    for text in ("constant", "poisson", "gamma:0.5"):
        s = parse_arrivals(text, 20.0).make(None)
        times = s.due(0, 0) + s.due(250 * NS, 0)
        assert abs(realised_rate(times) - 20.0) / 20.0 < 0.05, text


def test_schedules_are_seeded_per_rep():
    spec = parse_arrivals("gamma:0.5", 5.0, seed=3)
    assert schedule(spec, 50, rep=0) == schedule(spec, 50, rep=0)
    assert schedule(spec, 50, rep=0) != schedule(spec, 50, rep=1)
    assert schedule(spec, 50) != schedule(parse_arrivals("gamma:0.5", 5.0, seed=4), 50)


def test_resume_moves_the_rest_of_the_schedule_on():
    s = parse_arrivals("constant", 10.0).make(10)
    assert s.due(0, 0) == [0]
    assert s.due(NS // 10, 0) == [NS // 10]
    s.resume(5 * NS)  # paused for ~5 s: the next is due now, not ~48 missed arrivals in a burst
    assert s.due(5 * NS, 0) == [5 * NS]
    assert s.next_wakeup_ns() == 5 * NS + NS // 10


def test_lateness_counts_a_generator_that_fell_behind():
    """The dispatcher asked 0.2 s late: the requests it then sent carry their scheduled times, their lateness is
    seen (p99 ≥ 100 ms, behind schedule); asked on time, lateness stays under LATE_MS."""
    maker = RequestMaker()
    maker.set_load(Load(resolve("default"), parse_arrivals("constant", 100.0).make(30), 8))
    t0 = time.perf_counter_ns()
    reqs = maker.due(t0, 0, **KW)
    time.sleep(0.2)
    reqs += maker.due(time.perf_counter_ns(), 0, **KW)
    late = lateness_figures(reqs)
    assert len(reqs) >= 20 and late["behind_schedule"] and late["lateness_p99_ms"] > 100
    assert [r.t_scheduled_ns - t0 for r in reqs[:3]] == [0, NS // 100, 2 * NS // 100]

    maker.set_load(Load(resolve("default"), parse_arrivals("constant", 100.0).make(20), 8))
    on_time = []
    t = time.perf_counter_ns()
    while len(on_time) < 20:
        on_time += maker.due(time.perf_counter_ns(), 0, **KW)
        nxt = maker.next_wakeup_ns()
        if nxt:
            while time.perf_counter_ns() < nxt:
                pass
    late = lateness_figures(on_time)
    assert not late["behind_schedule"] and late["lateness_p99_ms"] < LATE_MS, late
    assert abs(late["arrival_rps"] - 100.0) < 1.0 and time.perf_counter_ns() - t < NS


@pytest.mark.parametrize("text, rate, says", [
    ("sometimes", 2.0, "unknown pattern"),
    ("gamma", 2.0, "gamma needs its burstiness"),
    ("gamma:-1", 2.0, "gamma needs its burstiness"),
    ("ramp:5", None, "ramp:FROM-TO"),
    ("ramp:1-8", 3.0, "drop --rate"),
    ("constant", None, "needs --rate"),
    ("poisson:3", 2.0, "takes no parameter"),
])
def test_bad_arrivals_say_what_to_write(text, rate, says):
    with pytest.raises(ValueError, match=says):
        parse_arrivals(text, rate)


# ---- part 1: datasets and length distributions ---------------------------------------------------------------

def test_jsonl_sample_same_prompts_same_order_same_lengths():
    wl = resolve("jsonl:sample", max_tokens=None)
    lines = [json.loads(ln) for ln in (SAMPLES / "prompts.jsonl").read_text().splitlines() if ln.strip()]
    got = [request_for(wl, i, 50) for i in range(len(lines) + 2)]
    assert [p.text for p, _ in got[:16]] == [ln["prompt"] for ln in lines]
    assert [p.prompt_id for p, _ in got[:3]] == ["prompts-1", "prompts-2", "prompts-3"]
    assert [n for _, n in got[:16]] == [ln.get("output_tokens", 50) for ln in lines]  # line 15 has none: --max-tokens
    assert got[16][0] == got[0][0]  # cycles in order
    capped = resolve("jsonl:sample", max_tokens=32)
    assert [request_for(capped, i, 32)[1] for i in range(4)] == [32, 32, 32, 32]
    assert request_for(capped, 10, 32)[1] == 16


def test_length_distributions_are_seeded_and_shaped():
    d = parse_length("512±128", "--prompt-len")
    draws = [d.draw(i) for i in range(2000)]
    assert min(draws) >= 384 and max(draws) <= 640 and abs(statistics.mean(draws) - 512) < 10
    assert draws == [parse_length("512+-128", "--prompt-len").draw(i) for i in range(2000)]
    assert draws != [parse_length("512±128", "--prompt-len", seed=1).draw(i) for i in range(2000)]
    assert parse_length("64", "--output-len").draw(7) == 64
    u = [parse_length("uniform:10-20", "--output-len").draw(i) for i in range(500)]
    assert min(u) == 10 and max(u) == 20
    for kind in ("normal", "lognormal"):
        xs = [parse_length(f"{kind}:200,60", "--output-len").draw(i) for i in range(4000)]
        assert abs(statistics.mean(xs) - 200) < 8 and abs(statistics.pstdev(xs) - 60) < 8, kind
        assert min(xs) >= 1
    # prompt and answer lengths are drawn independently
    wl = resolve("default", prompt_len="100±50", output_len="100±50")
    pairs = [request_for(wl, i, 1) for i in range(50)]
    assert [p.synthetic_tokens for p, _ in pairs] != [n for _, n in pairs]
    assert pairs[3][0].prompt_id == "prompt-len-4" and wl.key == "prompt-len:100±50"


@pytest.mark.parametrize("text, says", [
    ("512±", "± needs a length on each side"),
    ("512±abc", "'abc' is not a whole number"),
    ("100±200", "the spread must stay below the length"),
    ("gauss:1,2", "unknown distribution 'gauss'"),
    ("normal:5", "normal needs MEAN,SD"),
    ("uniform:9-3", "1 ≤ A ≤ B"),
    ("0", "at least 1 token"),
])
def test_bad_lengths_say_what_to_write(text, says):
    with pytest.raises(DatasetError, match=says) as exc:
        parse_length(text, "--output-len")
    assert "e.g. --output-len 512±128" in str(exc.value) or "the distributions are" in str(exc.value)


def test_sharegpt_sample_first_human_turn_and_reply_length():
    path, _, items, skipped = load_sharegpt("sample", lambda text: len(text.split()))
    data = json.loads(path.read_text())
    assert skipped == 1 and len(items) == len(data) - 1
    assert items[0].prompt_id == "sample-1" and items[0].text == data[0]["conversations"][0]["value"]
    assert items[3].output_tokens == 1  # "Canberra."
    assert items[0].output_tokens == len(data[0]["conversations"][1]["value"].split())


def test_sharegpt_counts_replies_with_the_embedded_tokenizer():
    pytest.importorskip("llama_cpp")
    wl = resolve("sharegpt:sample")
    assert isinstance(wl, Dataset) and len(wl.items) == 8
    assert 1 <= wl.items[3].output_tokens <= 4  # "Canberra." is a token or three
    assert wl.items[0].output_tokens > 30


def test_trace_sample_and_its_schedule():
    _, _, items, times, _ = load_trace("sample")
    rows = [json.loads(ln) for ln in (SAMPLES / "trace.jsonl").read_text().splitlines()]
    assert len(items) == 40 and times == sorted(times) and times[0] == 0
    assert [it.prompt_tokens for it in items] == [r["prompt_tokens"] for r in rows]
    wl = resolve("trace:sample")
    spec = parse_arrivals(None, None, speed=2.0, trace_times=wl.times_s)
    offsets = schedule(spec, 40)
    assert offsets == [round(r["timestamp"] / 2 * NS) for r in rows]
    past = schedule(spec, 45)  # past its end the trace starts again, one mean gap after its last request
    period = rows[-1]["timestamp"] * (1 + 1 / 39)
    assert past[40] == round(period / 2 * NS) and past[41] == round((rows[1]["timestamp"] + period) / 2 * NS)


def test_bad_files_name_the_line(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "a"}\n\n{"prompt": "b", oops}\n')
    with pytest.raises(DatasetError, match=r"jsonl:.*p.jsonl line 3: not JSON"):
        load_jsonl(str(f))
    f.write_text('{"prompt": "a", "output_tokens": -3}\n')
    with pytest.raises(DatasetError, match="line 1: output_tokens -3 must be a whole number"):
        load_jsonl(str(f))
    f.write_text('{"timestamp": 0, "prompt_tokens": 5}\n')
    with pytest.raises(DatasetError, match="line 1: needs prompt_tokens and output_tokens"):
        load_trace(str(f))
    with pytest.raises(DatasetError, match="file not found"):
        load_jsonl(str(tmp_path / "nope.jsonl"))


# ---- every source passes each request's own max_tokens -------------------------------------------------------

def test_simulated_source_honours_each_requests_length():
    from measure.core.workload import ClosedLoop
    from measure.sources.base import Finished
    from measure.sources.simulated import SimulatedFleet

    now = [10**12]
    src = SimulatedFleet(RunMeta("sim", "m", 100_000_000, simulated=True), k=1, bandwidth_gbps=100.0,
                         clock=lambda: now[0], threaded=False)
    src.start()
    wl = resolve("jsonl:sample")
    src.set_load(Load(wl, ClosedLoop(1), 40))
    recs = []
    for _ in range(20000):
        now[0] += 1_000_000
        src.advance(now[0])
        while not src.events.empty():
            ev = src.events.get()
            if isinstance(ev, Finished):
                recs.append(ev.record)
        if len(recs) >= 4:
            break
    assert [r.output_tokens for r in recs[:4]] == [request_for(wl, i, 40)[1] for i in range(4)] == [64, 96, 128, 112]


def test_fleet_null_engine_runs_a_trace_with_its_lengths(tmp_path, monkeypatch):
    """The process fleet on the null engine, through the sweep: the trace's prompt and answer lengths reach the
    workers per request, the schedule is the trace's (×4), and the cell has its lateness."""
    from measure.control.bench.sweep import SweepConfig, run_sweep
    from measure.sources.fleet import Fleet

    monkeypatch.setenv("INFERENCE_TOP_LOGS", str(tmp_path))
    wl = resolve("trace:sample")
    spec = parse_arrivals(None, None, speed=4.0, trace_times=wl.times_s)
    fleet = Fleet(EngineSpec("null", "", threads=1, ctx=1024, options={"ttft_s": 0.005, "itl_s": 0.002}),
                  RunMeta("null", "null", 0, simulated=True), k=2, threads=1, events=False)
    try:
        fleet.start(timeout=120)
        cells, recs, fleet = run_sweep(fleet, wl, SweepConfig(ks=[2], requests=40, max_tokens=999, arrivals=spec),
                                       say=lambda m: None)
    finally:
        fleet.close()
    recs.sort(key=lambda r: r.request_id)  # ids go out in schedule order (the trace has equal times)
    assert [r.output_tokens for r in recs] == [it.output_tokens for it in wl.items]
    assert [r.prompt_tokens for r in recs] == [it.prompt_tokens for it in wl.items]
    t0 = recs[0].t_scheduled_ns
    assert [r.t_scheduled_ns - t0 for r in recs] == [round(t / 4 * NS) for t in wl.times_s]
    c = cells[0].to_json()
    assert c["completed"] == 40 and c["lateness_p99_ms"] is not None and c["lateness_p50_ms"] >= 0
    assert c["arrivals"].startswith("trace replay, 40 requests")


# ---- the command line ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, says", [
    (["--workload", "jsonl:/nonexistent/prompts.jsonl"], "file not found"),
    (["--workload", "jsonl:BAD"], "line 2: not JSON"),
    (["--workload", "trace:/nonexistent.jsonl"], "file not found"),
    (["--output-len", "gauss:100,10"], "unknown distribution 'gauss'"),
    (["--prompt-len", "512±"], "± needs a length on each side"),
    (["--prompt-len", "64±64"], "the spread must stay below the length"),
    (["--arrivals", "bursty", "--rate", "2"], "unknown pattern"),
    (["--arrivals", "constant"], "needs --rate"),
    (["--speed", "2"], "applies to --workload trace:FILE"),
    (["--workload", "trace:sample", "--rate", "2"], "brings its own arrival times"),
    (["--workload", "jsonl:sample", "--prompt-len", "64"], "brings its own prompts"),
    (["--workload", "jsonl:sample", "--contexts", "512"], "--contexts makes its own synthetic prompts"),
    (["--prompt-len", "3000", "--ctx", "2048"], "raise --ctx to 3256"),
])
def test_bad_workload_inputs_give_one_line(args, says, tmp_path):
    args = [str(tmp_path / "bad.jsonl") if a == "jsonl:BAD" else a for a in args]
    args = ["jsonl:" + a if a.endswith("bad.jsonl") else a for a in args]
    (tmp_path / "bad.jsonl").write_text('{"prompt": "fine"}\n{"prompt": oops}\n')
    p = run(["bench", *args, "--requests", "4", "--max-tokens", "256", "--out", str(tmp_path / "out")])
    assert p.returncode != 0
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and says in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_dashboard_refuses_bench_only_arrivals():
    p = run(["--arrivals", "constant", "--rate", "2"])
    assert p.returncode != 0 and "run inference-top bench with them" in p.stderr
    assert len([ln for ln in p.stderr.splitlines() if ln.strip()]) == 1


@pytest.fixture(scope="module")
def null_server():
    from engines.null_server import Behaviour, NullServer

    with NullServer(Behaviour(ttft_ms=5, itl_ms=2)) as srv:
        yield srv.url


def test_bench_over_the_jsonl_sample_on_the_null_server(null_server, tmp_path):
    """Two cells (B=1, B=2): the same prompts in the same order with the same ids and lengths in each."""
    out = tmp_path / "out"
    p = run(["bench", "--engine", "http", "--url", null_server, "--tokenizer", "none", "--b", "1,2",
             "--workload", "jsonl:sample", "--requests", "16", "--max-tokens", "100", "--out", str(out)])
    assert p.returncode == 0, p.stderr
    headers, records, _ = read_jsonl(out / "records.jsonl")
    lines = [json.loads(ln) for ln in (SAMPLES / "prompts.jsonl").read_text().splitlines()]
    assert headers[0].workload == "jsonl:sample" and headers[0].line["workload_items"] == 16
    assert len(headers[0].line["workload_sha256"]) == 16
    for b in (1, 2):
        mine = sorted((r for r in records if r.b == b), key=lambda r: r.request_id)
        assert [r.prompt_id for r in mine] == [f"prompts-{i}" for i in range(1, 17)]
        assert [r.output_tokens for r in mine] == [min(ln.get("output_tokens", 100), 100) for ln in lines]
    cells = json.loads((out / "summary.json").read_text())
    assert [c["completed"] for c in cells] == [16, 16]
    assert all(c["lateness_p50_ms"] is not None for c in cells)


@pytest.fixture(scope="module")
def trace_bench(null_server, tmp_path_factory):
    out = tmp_path_factory.mktemp("trace")
    p = run(["bench", "--engine", "http", "--url", null_server, "--tokenizer", "none", "--b", "8",
             "--workload", "trace:sample", "--speed", "4", "--out", str(out)])
    assert p.returncode == 0, p.stderr
    return out, p


def test_bench_replays_the_shipped_trace(trace_bench):
    out, p = trace_bench
    rows = [json.loads(ln) for ln in (SAMPLES / "trace.jsonl").read_text().splitlines()]
    _, records, _ = read_jsonl(out / "records.jsonl")
    records.sort(key=lambda r: r.request_id)
    assert len(records) == 40 and all(r.error is None for r in records)  # --requests: the trace's length
    assert [r.output_tokens for r in records] == [r["output_tokens"] for r in rows]
    t0 = records[0].t_scheduled_ns
    assert [r.t_scheduled_ns - t0 for r in records] == [round(r["timestamp"] / 4 * NS) for r in rows]
    cell = json.loads((out / "summary.json").read_text())[0]
    assert cell["lateness_p99_ms"] is not None and cell["arrivals"].endswith("at ×4 speed")
    assert "late p50/p99" in p.stdout and "trace replay, 40 requests" in p.stdout


def test_records_replayed_as_load_against_another_box(trace_bench, null_server, tmp_path):
    """A records.jsonl recorded on one box, replayed as load on another (here: the same null server): the same
    requests at the same scheduled offsets with the same prompt and answer lengths."""
    first, _ = trace_bench
    out = tmp_path / "again"
    p = run(["bench", "--engine", "http", "--url", null_server, "--tokenizer", "none", "--b", "8",
             "--workload", f"trace:{first}/records.jsonl", "--out", str(out)])
    assert p.returncode == 0, p.stderr
    _, before, _ = read_jsonl(first / "records.jsonl")
    headers, after, _ = read_jsonl(out / "records.jsonl")
    assert headers[0].line["trace_format"] == "inference-top records"
    before.sort(key=lambda r: (r.t_scheduled_ns, r.request_id))
    after.sort(key=lambda r: r.request_id)
    assert len(after) == len(before) == 40
    assert [r.output_tokens for r in after] == [r.output_tokens for r in before]
    t0, u0 = before[0].t_scheduled_ns, after[0].t_scheduled_ns
    assert [r.t_scheduled_ns - u0 for r in after] == [r.t_scheduled_ns - t0 for r in before]


def test_report_shows_the_lateness(trace_bench, tmp_path):
    pytest.importorskip("matplotlib")
    out, _ = trace_bench
    p = run(["report", str(out), "--out", str(tmp_path / "rep")])
    assert p.returncode == 0, p.stderr
    assert "sent late p50/p99" in (tmp_path / "rep" / "report.md").read_text()


def test_bench_real_model_over_jsonl(tmp_path):
    """The acceptance run on the embedded model: inference-top bench --workload jsonl:… --requests 8
    --max-tokens 16 (the sample's answers of 16–256 tokens capped to 16)."""
    pytest.importorskip("llama_cpp")
    out = tmp_path / "real"
    p = run(["bench", "--workload", "jsonl:sample", "--requests", "8", "--max-tokens", "16", "--threads", "1",
             "--out", str(out)], timeout=600)
    assert p.returncode == 0, p.stderr
    _, records, _ = read_jsonl(out / "records.jsonl")
    assert [r.prompt_id for r in sorted(records, key=lambda r: r.request_id)] == [f"prompts-{i}" for i in range(1, 9)]
    assert all(r.output_tokens == 16 and r.error is None for r in records)


def test_the_samples_ship_with_the_package():
    """Every file of presets/samples/ matches pyproject's package-data, so jsonl:sample works once installed."""
    import fnmatch
    import tomllib

    pyproject = tomllib.loads((SAMPLES.parent.parent / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["presets"]
    names = sorted(p.name for p in SAMPLES.iterdir())
    assert names == ["prompts.jsonl", "sharegpt.json", "trace.jsonl"]
    assert all(any(fnmatch.fnmatch(f"samples/{n}", g) for g in globs) for n in names), globs
