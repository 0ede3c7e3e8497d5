"""Where the HTTP client's time per token goes: B streams of inference-top's HTTP source (one asyncio loop)
against engines/null_server.py, a closed loop of B users, recorded as a run records (core/recorder.Recorder), with
cProfile in the source's loop thread. Its own time is grouped by part (the asyncio loop, the kernel's socket
calls, engines/http_lean.py's reads and chunk decode and its request start (an http:// endpoint's streams),
aiohttp's response parse and buffers and request start (https://, and the scrape), our SSE line cut, JSON decode, our token
count, the record, the /metrics scrape; the rest: builtins every part calls, isinstance, list.append …, and the
thread's start, aiohttp's import among it: more requests make that smaller) and printed as shares of the loop thread's busy time and
µs per token. cProfile adds a cost to every Python call, so the shares lean towards Python-heavy parts and the
µs are not the unprofiled client's (benchmarks/harness_overhead.py's `cpu` gives those).

    python benchmarks/client_profile.py [--streams 256] [--requests 512] [--tokens 64]

The last line is one JSON object: {"streams": B, "tokens": …, "busy_us_per_token": …, "shares": {part: share}}.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import presets  # noqa: E402
from measure.core.records import RunMeta  # noqa: E402
from measure.core.workload import ClosedLoop, Load  # noqa: E402
from measure.machine.recorder import Recorder  # noqa: E402
from measure.sources.http import HttpSource  # noqa: E402

# (part, test on (file, function)): the first that matches takes a function's own time
PARTS = (
    ("idle: waiting in select()", lambda f, fn: fn == "<built-in method select.select>"),
    ("kernel: socket recv/send/connect", lambda f, fn: "_socket.socket" in fn),
    ("SSE line cut (ours)", lambda f, fn: "http_openai" in f and fn in ("_read_events", "take", "noted", "at")
     or fn in ("<method 'startswith' of 'bytes' objects>", "<method 'split' of 'bytes' objects>",
               "<method 'strip' of 'bytes' objects>")),
    ("JSON decode", lambda f, fn: "/json/" in f),
    ("token count (ours)", lambda f, fn: "http_openai" in f and fn in ("chunk", "finish")
     or fn == "<method 'get' of 'dict' objects>"),
    ("lean: response read (reads, chunk decode)", lambda f, fn: "http_lean" in f and fn in (
        "data_received", "piece", "wait", "_wake", "_stalled", "readany", "read", "hand_over", "_received", "_stop",
        "_feed", "_chunks", "_out", "is_eof")
     or fn in ("<method 'find' of 'bytearray' objects>", "<method 'popleft' of 'collections.deque' objects>")),
    ("lean: request start and connection", lambda f, fn: "http_lean" in f),
    ("aiohttp: response parse and buffers", lambda f, fn: "aiohttp" in f and any(
        x in f for x in ("client_proto", "streams", "http_parser", "base_protocol", "helpers"))),
    ("aiohttp: request start", lambda f, fn: "aiohttp" in f or "yarl" in f or "multidict" in f),
    ("record", lambda f, fn: any(x in f for x in ("records.py", "recorder.py", "metrics.py"))
     or fn in ("_ended", "_extra")),
    ("scrape", lambda f, fn: "prometheus" in f or fn in ("scrape_metrics", "parse_prometheus", "_scrape")),
    ("asyncio loop", lambda f, fn: "asyncio" in f or "selectors" in f or "null_server" in f
     or "contextvars" in fn),
)


def shares(prof: cProfile.Profile) -> dict[str, float]:
    """Own time (s) per part."""
    out = {p: 0.0 for p, _ in PARTS} | {"the rest": 0.0}
    for (f, _, fn), (_, _, tt, _, _) in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
        out[next((p for p, test in PARTS if test(f, fn)), "the rest")] += tt
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--requests", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--top", type=int, default=0, help="also name the rest's N largest functions (own time)")
    a = ap.parse_args()
    from engines.null_server import spawn

    prof = cProfile.Profile()
    run = HttpSource._run

    def profiled(self: HttpSource) -> None:
        prof.enable()
        try:
            run(self)
        finally:
            prof.disable()

    HttpSource._run = profiled  # type: ignore[method-assign]
    server, url = spawn(20.0, 10.0)
    rec = Recorder(os.path.join(tempfile.mkdtemp(prefix="it-profile-"), "records.jsonl"), {"command": "profile"})
    src = HttpSource(url, RunMeta("http", "null", 0, simulated=True), b=a.streams, events=False, on_record=rec.record)
    try:
        src.start()
        src.wait_ready(60)
        recs = src.run_requests(Load(presets.workload("synthetic:16"), ClosedLoop(a.streams, total=a.requests),
                                     a.tokens), timeout=600)
    finally:
        src.close()
        rec.close()
        server.terminate()
        server.wait(timeout=10)
    tokens = sum(len(r.token_ns) for r in recs)
    parts = shares(prof)
    busy = sum(v for k, v in parts.items() if not k.startswith("idle"))
    print(f"B={a.streams}: {len(recs)} requests, {tokens} tokens; the loop thread busy {busy:.2f} s profiled "
          f"({busy / tokens * 1e6:.1f} µs per token under cProfile), idle {parts['idle: waiting in select()']:.2f} s")
    if a.top:
        rest = [(tt, f"{f.rsplit('/', 1)[-1]}:{fn}") for (f, _, fn), (_, _, tt, _, _) in pstats.Stats(prof).stats.items()  # type: ignore[attr-defined]
                if next((p for p, test in PARTS if test(f, fn)), "the rest") == "the rest"]
        print("  the rest's largest: " + ", ".join(f"{name} {tt / tokens * 1e6:.1f}" for tt, name in sorted(rest)[::-1][:a.top])
              + " µs/token")
    out = {}
    for k, v in sorted(parts.items(), key=lambda kv: -kv[1]):
        if not k.startswith("idle"):
            out[k] = round(v / busy, 4)
            print(f"  {k:<38} {v / busy:6.1%}  {v / tokens * 1e6:6.1f} µs/token")
    print(json.dumps({"streams": a.streams, "tokens": tokens, "busy_us_per_token": round(busy / tokens * 1e6, 1),
                      "shares": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
