"""How much of a number is the harness's own? The null engine emits tokens on a fixed schedule (TTFT, then
one every ITL; no model), so whatever inference-top measures beyond that schedule is its own overhead.

Process fleet: K = 1, 2, 4, 8 workers running engines/null.py, closed loop with K users, through the same
Fleet, records and metrics as any run. HTTP: B = 1, 8, 64 (and 256 with --streams) concurrent streams of
inference-top's HTTP source against engines/null_server.py, a separate process on loopback.

Per level: measured ÷ scheduled aggregate tok/s (scheduled = streams × N ÷ (TTFT + (N − 1) · ITL), i.e.
zero gap between a stream's requests), and the TTFT bias = measured queue-inclusive TTFT − the set TTFT
(median and p99). Goals (issue 13): ratio ≥ 0.99 and median bias ≤ 1 ms at every level.

Closed loop with B users against a fixed schedule keeps the streams in lockstep: all B start together,
end together and start again, so the loop pays B request starts in one burst (the last waits for the rest).
--open-loop adds, per stream level, Poisson arrivals at the rate that holds B streams on average (B ÷ the
request's scheduled duration), with slots for B + 4√B: the same concurrency, the starts spread as users'
are. Its ratio is measured ÷ offered tok/s (rate × tokens).

    python benchmarks/harness_overhead.py [--tokens 64] [--ttft-ms 20] [--itl-ms 10] [--streams 1,8,64]
                                          [--open-loop] [--k 1,2,4,8 | --k 0 (no process levels)]

The last line is one JSON object: {"min_ratio": …, "max_median_ttft_bias_ms": …, "levels": [...]}.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import presets  # noqa: E402
from engines.base import EngineSpec  # noqa: E402
from measure.core import metrics as M  # noqa: E402
from measure.core.records import RunMeta  # noqa: E402
from measure.core.workload import ClosedLoop, Load, Poisson  # noqa: E402
from measure.sources.fleet import Fleet  # noqa: E402
from measure.sources.http import HttpSource  # noqa: E402

META = RunMeta(engine="null (scheduled tokens, no model)", model="none", model_bytes=0, simulated=True)


def level(name: str, streams: int, recs, a, offered_tps: float | None = None) -> dict:
    good = M.ok(recs)
    measured = M.output_throughput(good)
    per_request_s = a.ttft_ms / 1e3 + (a.tokens - 1) * a.itl_ms / 1e3
    scheduled = offered_tps or streams * a.tokens / per_request_s
    bias = [(M.ttft(r) - a.ttft_ms / 1e3) * 1e3 for r in good]
    return {"level": name, "streams": streams, "requests": len(recs), "errors": len(recs) - len(good),
            "tokens": sum(r.output_tokens for r in good), "measured_tps": measured, "scheduled_tps": scheduled,
            "ratio": measured / scheduled if measured else 0.0,
            "achieved_concurrency": M.achieved_concurrency(good, *M.run_span_ns(good)) if good else None,
            "ttft_bias_median_ms": M.percentile(bias, 50), "ttft_bias_p99_ms": M.percentile(bias, 99),
            "tpot_median_ms": (M.percentile([t for t in map(M.tpot, good) if t], 50) or 0) * 1e3}


def fleet_levels(a) -> list[dict]:
    wl = presets.workload("synthetic:16")
    out = []
    for k in a.k:
        spec = EngineSpec("null", "", threads=1, ctx=4096,
                          options={"ttft_s": a.ttft_ms / 1e3, "itl_s": a.itl_ms / 1e3})
        fleet = Fleet(spec, META, k=k, threads=1, events=False)
        try:
            fleet.start(timeout=120)
            n = max(a.min_requests, a.per_stream * k)
            recs = fleet.run_requests(Load(wl, ClosedLoop(k, total=n), a.tokens), timeout=600)
        finally:
            fleet.close()
        out.append(level(f"K={k} processes", k, recs, a))
        print(_row(out[-1]), flush=True)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_levels(a) -> list[dict]:
    import httpx

    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "engines.null_server", "--port", str(port), "--ttft-ms",
                               str(a.ttft_ms), "--itl-ms", str(a.itl_ms)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    out = []
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            try:
                if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        wl = presets.workload("synthetic:16")
        for b in a.streams:
            n = max(a.min_requests, a.per_stream * b)
            out.append(http_level(url, f"B={b} HTTP streams", b, b, Load(wl, ClosedLoop(b, total=n), a.tokens), a))
            print(_row(out[-1]), flush=True)
            if a.open_loop:  # B streams on average, Poisson arrivals: rate = B ÷ the scheduled request duration
                rate = b / (a.ttft_ms / 1e3 + (a.tokens - 1) * a.itl_ms / 1e3)
                out.append(http_level(url, f"~{b} open loop", b, b + int(4 * b ** 0.5) + 4,
                                      Load(wl, Poisson(rate, total=n, seed=1), a.tokens), a, rate))
                print(_row(out[-1]), flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)
    return out


def http_level(url: str, name: str, streams: int, slots: int, load: Load, a, rate: float | None = None) -> dict:
    """One level through inference-top's HTTP source with `slots` streams open; an open loop's ratio is
    measured ÷ offered (rate × tokens)."""
    src = HttpSource(url, RunMeta("http", "null", 0, simulated=True), b=slots, events=False)
    try:
        src.start()
        src.wait_ready(60)
        recs = src.run_requests(load, timeout=600)
    finally:
        src.close()
    lv = level(name, streams, recs, a, offered_tps=rate * a.tokens if rate else None)
    if rate:
        lv["rate"] = rate
    late = _server_late(url)
    if late is not None:
        lv["server_late_median_ms"] = late
    return lv


def _server_late(url: str) -> float | None:
    """The null server's own median lateness (send − due), which the client sees as bias it did not add."""
    import httpx

    try:
        text = httpx.get(url[:-3] + "/metrics", timeout=2).text
    except httpx.HTTPError:
        return None
    for line in text.splitlines():
        if line.startswith('null:chunk_late_seconds{quantile="0.5"}'):
            return float(line.split()[-1]) * 1e3
    return None


HEAD = (f"{'level':<20} {'streams':>7} {'req':>5} {'tokens':>7} {'sched tok/s':>11} {'meas tok/s':>10} "
        f"{'ratio':>6} {'conc':>5} {'TTFT bias p50':>13} {'p99':>7} {'TPOT p50':>8}")


def _row(lv: dict) -> str:
    return (f"{lv['level']:<20} {lv['streams']:>7} {lv['requests']:>5} {lv['tokens']:>7} {lv['scheduled_tps']:>11.1f} "
            f"{lv['measured_tps'] or 0:>10.1f} {lv['ratio']:>6.3f} {lv['achieved_concurrency'] or 0:>5.2f} "
            f"{lv['ttft_bias_median_ms'] or 0:>10.2f} ms {lv['ttft_bias_p99_ms'] or 0:>5.1f}ms "
            f"{lv['tpot_median_ms']:>6.2f}ms" + (f"  (server late p50 {lv['server_late_median_ms']:.2f} ms)"
                                                if "server_late_median_ms" in lv else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=64, help="tokens per request (default 64)")
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--k", type=lambda t: [int(x) for x in t.split(",")], default=[1, 2, 4, 8])
    ap.add_argument("--streams", type=lambda t: [int(x) for x in t.split(",")], default=[1, 8, 64])
    ap.add_argument("--per-stream", type=int, default=4, help="requests per stream and level (default 4)")
    ap.add_argument("--min-requests", type=int, default=16, help="at least this many per level (default 16)")
    ap.add_argument("--open-loop", action="store_true", help="also Poisson arrivals holding B streams on average")
    a = ap.parse_args()
    a.k = [k for k in a.k if k > 0]
    os.environ.setdefault("INFERENCE_TOP_LOGS", tempfile.mkdtemp(prefix="it-harness-"))
    print(f"null engine: TTFT {a.ttft_ms:g} ms, ITL {a.itl_ms:g} ms, {a.tokens} tokens per request; "
          f"{os.cpu_count()} CPUs")
    print(HEAD)
    levels = fleet_levels(a) + http_levels(a)
    worst = min(levels, key=lambda lv: lv["ratio"])
    bias = max(levels, key=lambda lv: lv["ttft_bias_median_ms"] or 0)
    print(f"\nlowest measured ÷ scheduled: {worst['ratio']:.4f} at {worst['level']}; largest median TTFT bias "
          f"{bias['ttft_bias_median_ms']:.2f} ms at {bias['level']} (goals: ≥ 0.99, ≤ 1 ms)")
    print(json.dumps({"min_ratio": round(worst["ratio"], 4),
                      "max_median_ttft_bias_ms": round(bias["ttft_bias_median_ms"], 3),
                      "levels": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in lv.items()}
                                 for lv in levels]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
