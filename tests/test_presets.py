import pytest

import presets
from measure.core.datasets import prompt_for
from measure.core.workload import ClosedLoop, Poisson


def test_default_workload_is_the_inference_lab_set():
    wl = presets.workload("default")
    assert len(wl.prompts) == 12
    assert wl.source == "inference-lab prompt set"
    assert wl.prompts[0] == "Explain gradient descent in three sentences."
    assert prompt_for(wl, 12).text == wl.prompts[0]  # cycles in order


def test_synthetic_workload_and_bad_names():
    assert presets.workload("synthetic:300").synthetic_tokens == 300
    with pytest.raises(presets.PresetError, match="synthetic:N"):
        presets.workload("synthetic:abc")
    with pytest.raises(presets.PresetError, match="unknown workload"):
        presets.workload("nope")


def test_chips_have_spec_bandwidth_or_say_unknown():
    chips = presets.chips()
    assert chips["apple-m2-max"].bandwidth_gbps == 400
    assert chips["nvidia-h200"].bandwidth_gbps == 4800
    assert chips["apple-m5-max"].bandwidth_gbps is None  # known name, figure not verified: never guessed
    assert presets.match_chip("Apple M3 Max").key == "apple-m3-max"
    assert presets.match_chip("Apple M3").key == "apple-m3"
    assert presets.match_chip("NVIDIA H100 80GB HBM3").key == "nvidia-h100"
    assert presets.match_chip("AMD EPYC 7B13") is None


def test_closed_loop_keeps_u_outstanding_and_stops_at_total():
    cl = ClosedLoop(users=2, total=5)
    assert cl.due(100, outstanding=0) == [100, 100]
    assert cl.due(200, outstanding=2) == []
    assert cl.due(300, outstanding=1) == [300]
    assert cl.due(400, outstanding=0) == [400, 400]
    assert cl.due(500, outstanding=0) == []  # 5 issued
    assert cl.exhausted()


def test_poisson_keeps_scheduled_times():
    p = Poisson(rate=10.0, total=50, seed=1)
    got = p.due(0, 0)
    assert got == [0]
    times = got + p.due(10**12, 0)  # far in the future: every arrival is due, at its own scheduled time
    assert len(times) == 50 and times == sorted(times)
    mean_gap = (times[-1] - times[0]) / 49 / 1e9
    assert 0.05 < mean_gap < 0.2  # ≈ 1 / rate


def test_mixed_workload_every_fourth_is_a_long_document():
    wl = presets.workload("mixed")
    ps = [prompt_for(wl, i) for i in range(8)]
    assert [p.prompt_id for p in ps] == ["long-2048", "mixed-1", "mixed-2", "mixed-3", "long-2048",
                                         "mixed-4", "mixed-5", "mixed-6"]
    assert ps[0].synthetic_tokens == 2048 and ps[1].text == wl.prompts[0]


def test_ttft_by_class():
    from measure.core.records import RequestRecord
    from measure.control.cell import ttft_by_class

    def r(pid, ttft_ms):
        return RequestRecord("r", 1, "http", "e", "m", 0, 1, 4, prompt_id=pid, t_scheduled_ns=0, t_started_ns=0,
                             t_first_token_ns=ttft_ms * 1_000_000, t_done_ns=ttft_ms * 1_000_000,
                             token_ns=[ttft_ms * 1_000_000])

    got = ttft_by_class([r("long-2048", 900), r("long-2048", 1100), r("default-1", 50), r("default-2", 70)])
    assert got["long"]["median_ttft_ms"] == pytest.approx(1000) and got["short"]["median_ttft_ms"] == pytest.approx(60)
    assert got["long"]["p99_ttft_ms"] == pytest.approx(1098)  # 900 + 0.99 × 200
