"""Issue 15: the live step table, goodput per level, the knee search, sizing for N users."""
import pytest

import presets
from sim import run_for, sim_controller
from tui.app import InferenceTop


@pytest.mark.asyncio
async def test_plus_twice_and_b_three_times_leave_settled_rows_with_goodput():
    """K=1 → + → + (K=3), m, then ] three times (B=2, 3, 4): every level settles (≥ 5 s steady, ≥ 8 requests,
    tok/s CV < 0.10) and becomes a row with its goodput under the interactive SLO; the best is marked."""
    c, fleet, clock = sim_controller(k=1)
    c.settings.slo = c.steps.slo = presets.slo("interactive")
    c.stats.set_slo(c.settings.slo)
    app = InferenceTop(c, live=False)
    async with app.run_test(size=(160, 48)) as pilot:
        run_for(c, fleet, clock, 12)
        for key in ("plus", "plus", "m", "right_square_bracket", "right_square_bracket", "right_square_bracket"):
            await pilot.press(key)
            run_for(c, fleet, clock, 12)
        rows = c.snapshot().steps
        settled = [r for r in rows if r.settled]
        assert len(settled) >= 5, [(r.level, r.progress) for r in rows]
        assert all(r.goodput_tps is not None and r.attainment is not None for r in settled)
        assert sum(r.best for r in rows) == 1
        assert [r.level for r in settled][:3] == ["K=1 B=1 instances", "K=2 B=1 instances", "K=3 B=1 instances"]
        await pilot.press("v")
        app.refresh_numbers()
        text = str(app.query_one("#steps").render())
        assert "step table" in text and "★" in text and "K=3 B=4 batch" in text
        assert app.query_one("#charts").display is False
        await pilot.press("v")
        assert app.query_one("#charts").display is True


def synthetic(knee_at: int, wall_at: int | None = None):
    """A machine whose TTFT p99 crosses 450 ms above `knee_at` users (a known knee), counting the levels run."""
    from measure.control.bench.knee import Level, judge

    ran = []

    def run(level):
        ran.append(level)
        if wall_at is not None and level >= wall_at:
            return Level(level, False, "wall", "the memory wall: swap growing")
        att = 1.0 if level <= knee_at else 0.5
        cell = {"status": "ok", "slo_attainment": att, "p99_ttft_ms": 100 if level <= knee_at else 1900,
                "median_ttft_ms": 80 if level <= knee_at else 1500, "median_queue_wait_ms": 1200,
                "median_tpot_ms": 20, "completed": 10, "span_s": 1.0}
        return judge(cell, presets.slo("interactive"), "users", level)

    return run, ran


def test_knee_search_finds_a_known_knee():
    """Knee at 6 users: doubling runs 1, 2, 4, 8 (8 fails, confirmed by a second run), bisecting 6 (in), 7 (out):
    the answer is 6, and the sentence says why 7 fails (TTFT p99 ≈1.90 s, queue: a p99 of 10 requests)."""
    from measure.control.bench.knee import find_knee

    run, ran = synthetic(6)
    k = find_knee(run, "users")
    assert ran == [1, 2, 4, 8, 8, 6, 7] and k.passed.level == 6 and k.failed.level == 7
    s = k.sentence("interactive", "the CPU cores")
    assert s.startswith("this machine serves 6 concurrent users of this workload within the interactive SLO; "
                        "at 7, TTFT p99 is ≈1.90 s (queue)") and s.endswith("the wall is the CPU cores")


def test_knee_search_stops_at_the_first_wall_and_never_runs_forever():
    from measure.control.bench.knee import find_knee

    run, ran = synthetic(100, wall_at=4)
    k = find_knee(run, "users")  # the wall ends it: no bisecting against a fleet the wall paused
    assert k.failed.stop == "wall" and k.passed.level == 2 and ran == [1, 2, 4]
    run, ran = synthetic(10**9)
    k = find_knee(run, "users", limit=64)
    assert k.passed.level == 64 and k.failed is None and len(ran) == 7


def test_plan_sizes_50_users_with_seed_002s_kv_math():
    """Llama 3.1 8B: 128 KiB per token (2 × 32 × 8 × 128 × 2 B); a 16K request holds 2 GiB; 50 users at 4096
    tokens need 50 × 512 MiB = 25 GiB of KV."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "tui.cli", "plan", "--preset", "llama-3.1-8b", "--users", "50",
                        "--context", "4096,16384", "--slo", "interactive", "--chip", "nvidia-h100"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "131,072 B (128.0 KiB)" in out and "2.00 GiB" in out
    assert "50 users" in out and "machines" in out


def test_crossover_of_two_cost_curves():
    """A Mac at $0.80/Mtok flat vs a rented GPU measured at $4.00, 2.00, 1.00 and 0.50/Mtok at concurrency 1, 2, 4,
    8: between the points at 4 and 8 the GPU's curve is 1.0 − (c − 4)/8, which is 0.80 at c = 5.6."""
    from measure.control.bench.report import crossover

    mac = [(1.0, 0.8), (2.0, 0.8), (8.0, 0.8)]
    gpu = [(c, 4.0 / c) for c in (1.0, 2.0, 4.0, 8.0)]
    x = crossover(mac, gpu)
    assert x == pytest.approx(5.6, rel=0.01)
    assert crossover(mac, [(1.0, 0.5), (8.0, 0.4)]) is None


def test_own_metrics_endpoint_parses_and_names_follow_prometheus():
    """The exporter on loopback: /metrics parses with prometheus_client's parser, names are inference_top_*,
    base units, counters end in _total, and the values are the snapshot's."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    from conftest import free_port
    from measure.control.live.prometheus import serve

    c, fleet, clock = sim_controller(k=2)
    run_for(c, fleet, clock, 6)
    port = free_port()
    server = serve(c, port)
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        (server[0] if isinstance(server, tuple) else server).shutdown()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert "inference_top_output_tokens_per_second" in fams and "inference_top_requests" in fams
    assert fams["inference_top_requests"].type == "counter"
    assert any(s.name == "inference_top_requests_total" and s.value == c.totals["requests"] > 0
               for s in fams["inference_top_requests"].samples)
    tps = fams["inference_top_output_tokens_per_second"].samples[0]
    assert tps.value == pytest.approx(c.snapshot().numbers.agg_tps) and tps.labels["engine"] == "llama.cpp"
    assert {s.labels["quantile"] for s in fams["inference_top_tpot_seconds"].samples} == {"0.5", "0.9"}
    assert fams["inference_top_instances"].samples[0].value == 2
    assert all(n.startswith("inference_top_") for n in fams)


def test_the_servers_own_timings_checked_against_the_client():
    """llama-server's timings say 10 ms a token and 20 prompt tokens; the client measured a 12 ms TPOT and 20
    prompt tokens: the decode figures disagree by −17 % (a finding), the prompt counts agree."""
    from measure.control.bench.server_check import server_check
    from measure.core.records import RequestRecord

    def rec(i):
        ts = [int((1 + j * 0.012) * 1e9) for j in range(5)]
        return RequestRecord(run_id="r", request_id=i, mode="http", engine="http", model="m", model_bytes=0, k=1,
                             b=1, prompt_tokens=20, output_tokens=5, t_scheduled_ns=0, t_started_ns=0,
                             t_first_token_ns=ts[0], t_done_ns=ts[-1], token_ns=ts,
                             server_view={"timings": {"predicted_per_token_ms": 10.0, "prompt_n": 20,
                                                      "predicted_n": 5}})

    c = server_check([rec(1), rec(2)])
    assert c["server_tpot_ms"] == 10.0 and c["client_tpot_ms"] == pytest.approx(12.0)
    assert len(c["disagreements"]) == 1 and c["disagreements"][0].startswith("decode ms/token vs TPOT")
