"""The headless command as a user runs it: outputs, bad inputs, signals, a killed run's records."""
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from measure.machine.recorder import read_jsonl
from measure.control.bench.cell import Cell, Spec

CLI = [sys.executable, "-m", "tui.cli"]


def run(args, **kw):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(CLI + args, capture_output=True, text=True, timeout=300, env=env, **kw)


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    p = run(["bench", "--k", "1,2", "--requests", "4", "--max-tokens", "8", "--threads", "1", "--ctx", "512",
             "--out", str(out)])
    assert p.returncode == 0, p.stderr
    return out, p


def test_bench_writes_three_files_and_a_table(bench_run):
    out, p = bench_run
    for name in ("records.jsonl", "summary.json", "summary.csv"):
        assert (out / name).exists()
    assert "tok/s" in p.stdout and "TTFT p99" in p.stdout
    cells = json.loads((out / "summary.json").read_text())
    assert [(c["k"], c["b"]) for c in cells] == [(1, 1), (2, 1)]
    for c in cells:
        for key in ("output_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
                    "p99_tpot_ms", "median_itl_ms", "rss_gb_sum", "bandwidth_gbps", "cv", "noisy"):
            assert key in c
        assert c["completed"] == 4 and c["errors"] == 0


def test_summary_is_recomputable_from_records(bench_run):
    out, _ = bench_run
    headers, records, _ = read_jsonl(out / "records.jsonl")
    h = headers[0]
    assert h.model_sha256_prefix and h.environment.os and h.engine_settings["threads"] == 1
    cells = json.loads((out / "summary.json").read_text())
    for c in cells:
        mine = [r for r in records if r.k == c["k"] and r.b == c["b"]]
        again = Cell.measure(mine, Spec(c["k"], c["b"], h.model_bytes, h.bandwidth_gbps, h.line["mode"])).to_json()
        for key in ("output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "median_itl_ms",
                    "rss_gb_sum"):
            assert again[key] == pytest.approx(c[key]), key
        # and by hand for one figure: tokens ÷ (first scheduled → last done)
        toks = sum(len(r.token_ns) for r in mine)
        span = (max(r.t_done_ns for r in mine) - min(r.t_scheduled_ns for r in mine)) / 1e9
        assert c["output_throughput"] == pytest.approx(toks / span, rel=1e-6)
        assert all(len(r.token_ns) == 8 for r in mine)  # ignore-EOS: every request the same length
        # instances mode: every stream reads W per token, so aggregate tok/s × W (never the nominal K); W the bytes a
        # token reads (the header's, docs/design/model-reads.md: Gemma's tied embedding is read whole, its file's rest not)
        assert h.line["read_bytes_per_token"] == 246_587_904 < h.model_bytes
        assert c["bandwidth_gbps"] == pytest.approx(toks / span * h.line["read_bytes_per_token"] / 1e9, rel=1e-6)
        busy = sum(r.t_done_ns - r.t_started_ns for r in mine) / 1e9
        assert c["achieved_concurrency"] == pytest.approx(busy / span, rel=1e-6)


def test_report_on_a_bench_output(bench_run, tmp_path):
    out, _ = bench_run
    p = run(["report", str(out), "--out", str(tmp_path / "rep")])
    assert p.returncode == 0, p.stderr
    for name in ("throughput_vs_k.png", "tpot_vs_k.png", "bandwidth_vs_k.png", "ttft_vs_concurrency.png",
                 "memory_per_cell.png", "report.md"):
        assert (tmp_path / "rep" / name).stat().st_size > 1000
    assert "| 2 | 1 |" in (tmp_path / "rep" / "report.md").read_text()


def test_sweep_marks_a_cell_over_the_budget_refused(tmp_path):
    out = tmp_path / "r"
    p = run(["bench", "--k", "1,2,3", "--requests", "3", "--max-tokens", "4", "--ctx", "512", "--memory-budget", "0.5G",
             "--out", str(out)])
    assert p.returncode == 0, p.stderr
    cells = json.loads((out / "summary.json").read_text())
    assert [c["status"] for c in cells] == ["ok", "refused", "refused"]
    assert "K=2 B=1 needs ≈" in cells[1]["reason"] and "budget" in cells[1]["reason"]
    assert cells[2]["reason"] == "after K=2 B=1 refused"
    assert "REFUSED" in p.stdout


def test_batch_sweep_b_list(tmp_path):
    out = tmp_path / "b"
    p = run(["bench", "--b", "1,4", "--requests", "4", "--max-tokens", "8", "--ctx", "256", "--out", str(out)])
    assert p.returncode == 0, p.stderr
    cells = json.loads((out / "summary.json").read_text())
    assert [(c["k"], c["b"], c["mode"]) for c in cells] == [(1, 1, "batch"), (1, 4, "batch")]
    _, records, _ = read_jsonl(out / "records.jsonl")
    b4 = [r for r in records if r.b == 4]
    # four users at B=4 in one engine: their tokens share step timestamps
    assert len({t for r in b4 for t in r.token_ns}) < sum(len(r.token_ns) for r in b4)
    assert "Σ workers steps/s × W" in cells[1]["bandwidth_formula"]


@pytest.mark.parametrize("args, says", [
    (["--model", "/nonexistent/model.gguf"], "model file not found"),
    (["--k", "0"], "must be at least 1"),
    (["--k", "-2"], "must be at least 1"),
    (["--k", "1,x"], "whole numbers separated by commas"),
    (["--workload", "nope"], "unknown workload"),
])
def test_bad_inputs_give_one_line(args, says):
    p = run(["bench", *args, "--requests", "1", "--max-tokens", "2"])
    assert p.returncode != 0
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and says in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_not_gguf_and_truncated_gguf(tmp_path, model):
    junk = tmp_path / "junk.gguf"
    junk.write_text("this is not a model\n")
    p = run(["bench", "--model", str(junk)])
    assert p.returncode == 2 and "not a GGUF file" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    cut = tmp_path / "cut.gguf"
    with open(model.path, "rb") as src:
        cut.write_bytes(src.read(50_000_000))
    p = run(["bench", "--model", str(cut)])
    assert p.returncode == 2 and "truncated" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    head = tmp_path / "head.gguf"
    with open(model.path, "rb") as src:
        head.write_bytes(src.read(1000))  # cut inside the metadata
    p = run(["bench", "--model", str(head)])
    assert p.returncode == 2 and ("truncated" in p.stderr or "damaged" in p.stderr), p.stderr
    assert "Traceback" not in p.stderr


def _wait_for(pred, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_leaves_no_child_and_keeps_records(tmp_path, sig):
    from conftest import descendants

    out = tmp_path / "run"
    proc = subprocess.Popen(CLI + ["bench", "--k", "2", "--requests", "200", "--max-tokens", "16", "--threads", "1",
                                   "--ctx", "512", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    recs = out / "records.jsonl"
    assert _wait_for(lambda: recs.exists() and recs.read_text().count('"kind":"request"') >= 2, 120)
    kids = descendants(proc.pid)
    assert len(kids) >= 2
    proc.send_signal(sig)
    proc.wait(timeout=10)
    assert proc.returncode != 0
    assert _wait_for(lambda: not any(k.is_running() and k.status() != psutil.STATUS_ZOMBIE for k in kids), 5)
    _, records, _ = read_jsonl(recs)
    assert len(records) >= 2
    # the cut cell is in summary.json, marked; the message is one line
    cells = json.loads((out / "summary.json").read_text())
    assert [c["status"] for c in cells] == ["cut"]
    assert len(proc.stderr.read().strip().splitlines()) == 1


def test_sigkill_leaves_a_file_that_parses(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(CLI + ["bench", "--k", "1", "--requests", "200", "--max-tokens", "8", "--ctx", "512",
                                   "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    recs = out / "records.jsonl"
    assert _wait_for(lambda: recs.exists() and recs.read_text().count('"kind":"request"') >= 3, 120)
    from conftest import descendants

    kids = descendants(proc.pid)
    proc.kill()
    proc.wait(timeout=10)
    # the workers follow their parent (PR_SET_PDEATHSIG), even after a SIGKILL
    assert _wait_for(lambda: not any(k.is_running() and k.status() != psutil.STATUS_ZOMBIE for k in kids), 5)
    headers, records, _ = read_jsonl(recs)
    assert len(headers) == 1 and len(records) >= 3
    assert all(r.error is None and len(r.token_ns) == 8 for r in records)


def test_independent_recomputation_agrees(bench_run):
    """benchmarks/recompute_summary.py recomputes TTFT, TPOT, tok/s and achieved concurrency with plain json
    and numpy (not measure/core/metrics.py): within 1e-6 relative of summary.json."""
    out, _ = bench_run
    p = subprocess.run([sys.executable, "benchmarks/recompute_summary.py", str(out)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1])["max_rel_diff"] <= 1e-6
    wrong = subprocess.run([sys.executable, "benchmarks/recompute_summary.py", str(out / "nothing-here")],
                           capture_output=True, text=True, timeout=60)  # one clear line, not a traceback
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1 and "--out folder" in wrong.stderr


def test_the_plan_options_are_the_command_lines_by_name():
    """tui/options.plan_options hands the run plan's builder a PlanOptions by the options' names: every field is one
    of bench's options (a field named otherwise would silently keep its default), the dashboard lacks only bench's
    own, and a value given on the command line arrives."""
    from dataclasses import fields

    from measure.control.builder import PlanOptions
    from tui.options import build_parser, plan_options

    dash, bench = build_parser()
    names = {f.name for f in fields(PlanOptions)}
    assert names <= set(vars(bench.parse_args([])))
    assert names - set(vars(dash.parse_args([]))) == {"client_procs", "contexts", "requests", "think_time", "turns",
                                                      "warmup"}
    opts = plan_options(bench.parse_args(["--engine", "http", "--url", "http://127.0.0.1:9/v1", "--b", "2,4",
                                          "--client-procs", "auto", "--no-flash-attn", "--stall-timeout", "5"]))
    assert (opts.engine, opts.url, opts.b, opts.client_procs, opts.no_flash_attn, opts.stall_timeout) == \
        ("http", ["http://127.0.0.1:9/v1"], [2, 4], None, True, 5.0)
    assert plan_options(dash.parse_args([])).client_procs == 1  # the dashboard: one client process


@pytest.mark.parametrize("load", [["--rate", "3"], ["--users", "5"]])
def test_a_runs_settings_carry_every_field_they_share_with_the_plan(load):
    """SweepConfig.from_plan and LiveSettings.from_plan, beside their classes, are the one place a run's settings
    are read from the plan: every field a settings class shares by name with the RunPlan (a field, a property or
    a method of no argument: engine_on_gpu, placement) has the plan's value, so a field added to both cannot be
    left at its default. The roofline is the composition root's (bench/start.py, live/start.py: made at start)."""
    from dataclasses import fields
    from pathlib import Path

    from measure.control.bench.sweep import SweepConfig
    from measure.control.builder import make_plan
    from measure.control.live.controller import LiveSettings
    from tui.options import build_parser, plan_options

    _, bench = build_parser()
    args = bench.parse_args(["--engine", "http", "--url", "http://127.0.0.1:9/v1", "--tokenizer", "none", *load,
                             "--max-tokens", "7", "--ctx", "1024", "--slo", "interactive", "--memory-budget", "0.5",
                             "--force", "--stop-at-eos", "--price-per-hour", "2", "--b", "2,4", "--threads", "3"])
    plan = make_plan(plan_options(args), default_max_tokens=256)
    for settings in (SweepConfig.from_plan(plan, plan.sweep_ks, Path("out"), 16), LiveSettings.from_plan(plan)):
        shared = [f.name for f in fields(settings) if hasattr(plan, f.name) and f.name != "roofline"]
        assert len(shared) >= 15, shared
        for name in shared:
            want = getattr(plan, name)
            assert getattr(settings, name) == (want() if callable(want) else want), (type(settings).__name__, name)
    cfg = SweepConfig.from_plan(plan, plan.sweep_ks, Path("out"), 16, reps=2, contexts=[512], cell_timeout_s=9.0)
    assert (cfg.max_tokens, cfg.ctx, cfg.threads, cfg.force, cfg.ignore_eos, cfg.bs) == (7, 1024, 3, True, False, [2, 4])
    assert (cfg.requests, cfg.reps, cfg.contexts, cfg.cell_timeout_s, cfg.out_dir) == (16, 2, [512], 9.0, Path("out"))
    assert cfg.users == plan.users and (cfg.users == 5) == (load[0] == "--users")
