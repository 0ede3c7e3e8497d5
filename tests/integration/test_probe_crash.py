"""A probe whose engine process dies (a segfault in the engine's C code, an OOM kill) says so in one line
within seconds, naming the stage and the signal, and the probe goes on; it never waits out a timeout.
The null engine's fault injection (options crash_in) ends its process with the signal at each stage."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from measure.machine import ceilings
from measure.machine.storage import remove_group

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


def test_the_readers_buffer_fits_the_tightest_memory_limit():
    """Each bandwidth reader's buffer: 256 MiB where memory is plenty; a quarter of a container's limit between
    the readers, in whole MiB, where that is less (a 400 MiB cgroup: 50 MiB each for two); never under 32 MiB."""
    MiB = 1 << 20
    assert ceilings.read_bytes_within(24 << 30, 2) == ceilings.READ_BYTES == 256 * MiB
    assert ceilings.read_bytes_within(400 * MiB, 2) == 50 * MiB
    assert ceilings.read_bytes_within(401 * MiB, 3) == 33 * MiB
    assert ceilings.read_bytes_within(64 * MiB, 2) == ceilings.MIN_READ_BYTES == 32 * MiB


CG_V1 = "/sys/fs/cgroup/memory"


def _in_group(limit_mib: int, code: str) -> subprocess.CompletedProcess[str]:
    """`code` run by a Python of its own inside a cgroup v1 memory group of `limit_mib`, the group removed after."""
    group = Path(CG_V1) / f"inference-top-test-probe-{os.getpid()}"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(limit_mib << 20))

        def enter() -> None:
            (group / "cgroup.procs").write_text(str(os.getpid()))

        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              preexec_fn=enter, cwd=Path(__file__).resolve().parents[2])
    finally:
        remove_group(group, tries=100)


@pytest.mark.skipif(not os.path.exists(f"{CG_V1}/memory.limit_in_bytes") or os.geteuid() != 0,
                    reason="root and cgroup v1's memory controller")
def test_the_bandwidth_probe_in_a_container_measures_or_says_why_in_one_line():
    """In a 400 MiB memory cgroup the two readers' 256 MiB buffers were OOM-killed and the dashboard ended on a
    traceback (queue.Empty after 60 s): their buffers now fit the limit and they measure. In an 80 MiB group,
    where even 32 MiB readers cannot live, the probe ends within seconds with one line (ProbeError) naming the
    signal and the limit, and the dashboard's plan goes on without a roofline (RunPlan.roofline). What a container
    measures is cached under a key of its own (machine_key names the limit)."""
    code = ("from measure.machine.ceilings import ProbeError, probe_read_gbps\n"
            "try:\n    print('GB/s', probe_read_gbps(2))\nexcept ProbeError as exc:\n    print('error', exc)\n")
    roomy = _in_group(400, code + "from measure.machine.ceilings import machine_key\nprint(machine_key())\n")
    assert roomy.returncode == 0 and roomy.stdout.startswith("GB/s ") and float(roomy.stdout.split()[1]) > 0, roomy
    # the container's probe is cached as the container's: the key names the limit (the machine's does not)
    key = roomy.stdout.splitlines()[1]  # (this test's own process may be in a limited group too: its 4 fields)
    assert key.split("|")[:4] == ceilings.machine_key().split("|")[:4], key
    assert key.endswith(f"|cgroup v1 memory.limit_in_bytes {400 << 20}") and len(key.split("|")) == 5, key
    t0 = time.monotonic()
    tight = _in_group(80, code)
    assert tight.returncode == 0 and tight.stdout.startswith("error the memory bandwidth probe's reader ended "
                                                             "(signal 9) with 32 MiB"), tight
    assert "cgroup v1 memory.limit_in_bytes" in tight.stdout and len(tight.stdout.strip().splitlines()) == 1
    assert time.monotonic() - t0 < 30


def test_a_plan_whose_probe_cannot_measure_has_no_roofline_and_says_why(monkeypatch):
    """RunPlan.roofline on a ProbeError: None (the dashboard runs with no prediction) and a warning line kept."""
    from measure.control.builder import make_plan
    from tui.options import build_parser, plan_options

    def refuse(**_kw):
        raise ceilings.ProbeError("the memory bandwidth probe's reader ended (signal 9)")

    monkeypatch.setattr(ceilings, "get", refuse)
    dash, _ = build_parser()
    plan = make_plan(plan_options(dash.parse_args(["--engine", "llama"])), default_max_tokens=8)
    said: list[str] = []
    assert plan.roofline(say=said.append) is None
    assert said == ["warning: no roofline: the memory bandwidth probe's reader ended (signal 9)"]
    assert plan.warnings[-1] == "no roofline: the memory bandwidth probe's reader ended (signal 9)"


def test_a_probe_inside_a_memory_limit_takes_the_engines_rates_from_the_machines_probe_outside_it(tmp_path,
                                                                                                   monkeypatch):
    """The dashboard in a 400 MiB memory cgroup probed its engine in there: the model, its KV and 128 rows of
    logits paged against the limit for 2 min 40 s and the engine was OOM-killed in its batch stage (no engine
    rates, so no prediction past the wall). A limit changes what stays resident, not what a core does: where this
    machine's quiet probe outside any limit is cached, the probe inside one takes its engine rates (and says whose)
    and measures only what the limit changes (the readers' buffers, the storage under it); with none cached it
    measures the engine there."""
    from measure.machine import probes

    monkeypatch.setenv("INFERENCE_TOP_CACHE", str(tmp_path))
    outside_key = ceilings.machine_key()
    limit = (400 << 20, "cgroup v1 memory.limit_in_bytes")
    monkeypatch.setattr(probes, "effective_memory", lambda limits=None: limit)
    assert ceilings.machine_key() == f"{outside_key}|cgroup v1 memory.limit_in_bytes {400 << 20}"
    assert ceilings.machine_key(within=False) == outside_key
    engine = {"model": "gemma-3-270m-q4_k_m", "decode_tps": {"1": 40.0, "2": 70.0}, "prefill_tps": 900.0}
    outside = {"machine": "m", "chip": "c", "cores": 2, "memory_bytes": 1 << 34, "swap_bytes": 0,
               "read_gbps": {"1": 20.0, "2": 38.0}, "engine": engine, "measured_at": "2026-12-07T22:00:00",
               "seconds": 30.0, "busy_cores": 0.0, "version": ceilings.PROBE_VERSION}
    (tmp_path / "probe.json").write_text(json.dumps({outside_key: outside}))
    measured: list[str] = []
    monkeypatch.setattr(ceilings, "probe_read_gbps", lambda n, within=None, timeout_s=60.0: 30.0 + n)
    monkeypatch.setattr(ceilings, "_storage", lambda model, say: None)
    monkeypatch.setattr(ceilings, "engine_rates", lambda *a, **k: measured.append("engine") or {"error": "x"})
    said: list[str] = []
    c = ceilings.probe(say=said.append)
    assert c.engine == engine and c.read_gbps == {"1": 31.0, "2": 32.0} and measured == []
    assert said[1] == ("the engine's rates: this machine's probe of 2026-12-07T22:00:00, taken outside the cgroup v1 "
                       "memory.limit_in_bytes of 0.39 GiB (a memory limit changes what stays resident, not what a "
                       "core does)")
    # a disturbed probe outside is not this machine's figure: the engine is measured inside
    (tmp_path / "probe.json").write_text(json.dumps({outside_key: dict(outside, busy_cores=1.5)}))
    said.clear()
    assert ceilings.probe(say=said.append).engine == {} and measured == ["engine"]
    assert said[1].startswith("probing llama.cpp on ") and said[2] == "the engine could not be probed: x"
