"""A probe whose engine process dies (a segfault in the engine's C code, an OOM kill) says so in one line
within seconds, naming the stage and the signal, and the probe goes on; it never waits out a timeout.
The null engine's fault injection (options crash_in) ends its process with the signal at each stage."""
import time

import pytest

from measure.core import ceilings

CORES = 2
STAGES = [  # (the engine's crash point, its options, the probe stage it falls in)
    ("load", {}, "load"),
    ("warmup", {}, "warmup"),
    ("generate", {}, "decode"),
    ("generate", {"crash_nth": CORES + 1}, "prefill"),  # decode runs one generate per thread count
    ("batch", {}, "batch"),
    ("batch_step", {}, "batch"),
]


@pytest.mark.parametrize("point,extra,stage", STAGES, ids=[f"{p}-{s}" for p, _, s in STAGES])
def test_probe_engine_dying_at_each_stage_is_named_within_5_s(point, extra, stage):
    opts = {"crash_in": point, "ttft_s": 0.001, "itl_s": 0.001, **extra}
    t0 = time.monotonic()
    out = ceilings.engine_rates("null", CORES, engine="null", options=opts)
    took = time.monotonic() - t0
    assert out.get("stage") == stage, out
    assert out["error"] == f"the null engine process died in its {stage} stage (killed by SIGSEGV)"
    assert took < 5, took


def test_probe_engine_killed_by_another_signal_names_it():
    out = ceilings.engine_rates("null", CORES, engine="null",
                                options={"crash_in": "warmup", "crash_signal": "SIGKILL"})
    assert out["error"] == "the null engine process died in its warmup stage (killed by SIGKILL)"


def test_probe_engine_that_lives_gives_its_rates():
    out = ceilings.engine_rates("null", CORES, engine="null", options={"ttft_s": 0.001, "itl_s": 0.002})
    assert "error" not in out, out
    # the null engine's schedule: one token every 2 ms at every thread count
    assert out["decode_tps"]["1"] == pytest.approx(500, rel=0.1)
    assert set(out["batch_steps_per_s"]) == {"2", "8"}


def test_probe_stage_past_its_limit_is_ended():
    t0 = time.monotonic()
    out = ceilings.engine_rates("null", CORES, engine="null", options={"load_s": 30}, stage_timeout_s=1)
    assert out["error"] == "the null engine's load stage ran past 1 s and was ended"
    assert time.monotonic() - t0 < 5
