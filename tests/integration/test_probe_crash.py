"""A probe whose engine process dies (a segfault in the engine's C code, an OOM kill) says so in one line
within seconds, naming the stage and the signal, and the probe goes on; it never waits out a timeout.
The null engine's fault injection (options crash_in) ends its process with the signal at each stage."""
import time

import pytest

from measure.machine import ceilings

CORES = 2
STAGES = [  # (the engine's crash point, its options, the probe stage it falls in)
    ("load", {}, "load"),
    ("warmup", {}, "warmup"),
    ("generate", {}, "decode"),
    # decode runs DECODE_RUNS generates per thread count
    ("generate", {"crash_nth": ceilings.DECODE_RUNS * CORES + 1}, "prefill"),
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


def test_a_batch_worker_that_segfaults_mid_step_is_one_line_within_seconds_and_its_log_has_the_stack(
        tmp_path, monkeypatch):
    """Batch mode (B=4) on the null engine whose process dies by SIGSEGV in its first batch step, as a crash in
    an engine's C code would: the requests it held are recorded as failed within seconds, each with one line
    naming the signal, the worker reads dead, and its engine log holds the Python stack (faulthandler)."""
    import presets
    from engines.base import EngineSpec
    from measure.core.records import RunMeta
    from measure.core.workload import ClosedLoop, Load
    from measure.sources.fleet import Fleet

    monkeypatch.setenv("INFERENCE_TOP_LOGS", str(tmp_path))
    spec = EngineSpec("null", "", options={"ttft_s": 0.01, "itl_s": 0.01, "crash_in": "batch_step"})
    fleet = Fleet(spec, RunMeta("null", "none", 0, simulated=True), k=1, threads=1)
    try:
        fleet.start()
        fleet.set_batch("batch", 4)
        t0 = time.monotonic()
        recs = fleet.run_requests(Load(presets.workload("synthetic:4"), ClosedLoop(4, total=4), 3), timeout=30)
        assert time.monotonic() - t0 < 10
        failed = [r for r in recs if r.error]
        assert failed and all("(SIGSEGV)" in r.error and "\n" not in r.error for r in failed)
        assert any(w.state == "dead" for w in fleet.workers())
        logs = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
        assert "Segmentation fault" in logs and "batch" in logs
    finally:
        fleet.close()
