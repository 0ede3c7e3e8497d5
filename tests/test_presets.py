import pytest

import presets
from bench.workload import ClosedLoop, Poisson, prompt_for


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
