"""Client actors on Ray against one client (issue 36; docs/design/ray.md): the same seeded open-loop schedule
against the null server, sent by one client (the bench's HTTP source, --client-procs 1 and 2) and by N client
actors on a Ray cluster (`bench --ray`: each its share, one start, records pooled on the driver's clock).

Per run, harness_overhead.py's figures: ratio = measured tok/s ÷ the schedule's own tok/s (its tokens ÷ first
arrival → last arrival + one request's scheduled duration), and the TTFT bias = measured queue-inclusive TTFT −
the set TTFT (median, p99). The rate holds `--streams` streams on average (streams ÷ one request's scheduled
duration), so N actors hold streams ÷ N each.

    python benchmarks/ray_clients.py --ray ADDRESS [--clients 2] [--streams 256] [--tokens 64] [--itl-ms 10]
    python benchmarks/ray_clients.py              # starts a two-node Ray cluster on this machine, stopped after

Needs Ray (pip install 'inference-top[cluster]'). The last line is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import harness_overhead as H  # noqa: E402
from engines.null_server import free_port, spawn  # noqa: E402


def _plan(url: str, a, rate: float, procs: int):
    from measure.control.bench.sweep import SweepConfig
    from plans import http_plan

    plan = http_plan(url, rate, a.requests, a.tokens, procs)
    cfg = SweepConfig(ks=[1], bs=[1], mode="http", requests=a.requests, max_tokens=a.tokens, ignore_eos=True,
                      arrivals=plan.arrivals, cell_timeout_s=600.0)
    return plan, cfg


def one_client(url: str, a, rate: float, procs: int) -> dict:
    from measure.control.bench.sweep import run_sweep
    from measure.control.wiring import make_source

    plan, cfg = _plan(url, a, rate, procs)
    src = make_source(plan, events=False, per_cell=True)
    src.start()
    try:
        _, recs, src = run_sweep(src, plan.workload, cfg, say=lambda m: None)
    finally:
        src.close()
    return dict(H.level(f"one client ×{procs} proc", a.streams, recs, a, offered_tps=rate * a.tokens), procs=procs)


def ray_clients(url: str, a, rate: float, address: str) -> dict:
    from measure.control.bench.cluster import run_cluster
    from measure.machine.ray_cluster import ClusterSpec

    plan, cfg = _plan(url, a, rate, 1)
    out = Path(tempfile.mkdtemp(prefix="it-ray-"))
    run = run_cluster(ClusterSpec(address, a.clients), plan, cfg, plan.header({"command": "bench"}), out,
                      say=lambda m: print(f"  {m}", flush=True))
    recs = [r for c in run.clients for r in c.records]
    lv = H.level(f"{a.clients} Ray actors", a.streams, recs, a, offered_tps=rate * a.tokens)
    lv["clients"] = [{"client": c.i, "state": c.state, "requests": c.requests, "clock_offset_ms": c.offset_ns / 1e6,
                      "clock_bound_ms": c.bound_ns / 1e6} for c in run.clients]
    lv["combined_tps"] = run.cells[0].output_throughput if run.cells else None
    return lv


def start_local_cluster(port: int, head_cpus: int = 1) -> str:
    """A head (`head_cpus` CPUs) and a second node (1 CPU, resource node2) on this machine, small object stores;
    its address. Stopped with stop_local_cluster(port)."""
    ray = Path(sys.executable).with_name("ray")
    exe = str(ray) if ray.exists() else "ray"
    small = ["--object-store-memory", "100000000", "--disable-usage-stats"]
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    subprocess.run([exe, "start", "--head", "--port", str(port), "--include-dashboard=false", "--num-cpus",
                    str(head_cpus), *small], check=True, capture_output=True, timeout=120, env=env)
    subprocess.run([exe, "start", "--address", f"127.0.0.1:{port}", "--resources", '{"node2": 1}', "--num-cpus", "1",
                    *small], check=True, capture_output=True, timeout=120, env=env)
    return f"127.0.0.1:{port}"


def stop_local_cluster(port: int) -> None:
    """What `ray stop --force` does (SIGKILL), to this cluster's processes only, found by their id: those of the
    session whose GCS listens on `port` (every Ray daemon names its session dir) and their children (agents,
    workers). `ray stop` would also stop any other Ray node running on this machine."""
    import psutil

    session = None
    for proc in psutil.process_iter(["cmdline"]):
        args = proc.info["cmdline"] or []
        if f"--gcs_server_port={port}" in args:
            session = next((a.split("=", 1)[1] for a in args if a.startswith("--session-dir=")), None)
    if session is None:
        return
    ours = [proc for proc in psutil.process_iter(["cmdline"]) if any(session in a for a in proc.info["cmdline"] or [])]
    family = {proc.pid: proc for proc in ours}
    for proc in ours:
        try:
            family.update({c.pid: c for c in proc.children(recursive=True)})
        except psutil.NoSuchProcess:
            pass
    for proc in family.values():
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(list(family.values()), timeout=15)
    assert not alive, f"Ray processes still running after SIGKILL: {[p.pid for p in alive]}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ray", help="a Ray cluster's address (default: start two nodes on this machine)")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--requests", type=int, default=None, help="default 4 × streams")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    a = p.parse_args(argv)
    a.requests = a.requests or 4 * a.streams
    rate = a.streams / (a.ttft_ms / 1e3 + (a.tokens - 1) * a.itl_ms / 1e3)
    server, url = spawn(a.ttft_ms, a.itl_ms)
    started = None
    levels = []
    try:
        address = a.ray
        if address is None:
            started = free_port()
            address = start_local_cluster(started)
        print(f"{a.requests} requests, Poisson {rate:.0f} req/s (≈ {a.streams} streams), {a.tokens} tokens, "
              f"TTFT {a.ttft_ms:g} ms, ITL {a.itl_ms:g} ms; {os.cpu_count()} cores", flush=True)
        for run in (lambda: one_client(url, a, rate, 1), lambda: one_client(url, a, rate, 2),
                    lambda: ray_clients(url, a, rate, address)):
            levels.append(run())
            lv = levels[-1]
            print(f"{lv['level']:<22} ratio {lv['ratio']:.3f}  TTFT bias p50 {lv['ttft_bias_median_ms']:.1f} ms "
                  f"p99 {lv['ttft_bias_p99_ms']:.1f} ms  {lv['requests']} requests, {lv['errors']} errors",
                  flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)
        if started is not None:
            stop_local_cluster(started)
    print(json.dumps({"streams": a.streams, "clients": a.clients, "levels": levels}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
