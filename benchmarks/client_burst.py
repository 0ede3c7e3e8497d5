"""What a request's start costs the HTTP client: B requests due at once, each on its own kept-alive connection to
engines/null_server.py, started one after another in one turn of an eager loop (as the HTTP source starts a
closed loop's burst), with aiohttp's session and with engines/http_lean.py's, alternating rounds in one run.

A request's start is everything from taking it up to its bytes on the socket (the body's JSON, the session's
request objects, the kernel's send): with eager tasks each create_task returns once its request is written, so the
burst's CPU time ÷ B is that cost, and the last of the burst waits B times it (docs/design/client-processes.md).

    python benchmarks/client_burst.py [--streams 64] [--rounds 20]

The last line is one JSON object: {"streams": B, "aiohttp_us": …, "lean_us": …, "ratio": aiohttp ÷ lean} (medians
over the rounds of CPU µs per request started).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from engines.http_lean import LeanSession  # noqa: E402
from engines.http_openai import endpoint_body, new_session, stream_one  # noqa: E402
from engines.null_server import spawn  # noqa: E402
from measure.sources.loop_turns import eager_task_factory  # noqa: E402


async def rounds(url: str, make, streams: int, n: int) -> list[float]:
    """CPU µs per request started, one figure per round (the first round opens the connections: not counted)."""
    sessions = [make() for _ in range(streams)]
    body = endpoint_body("completions", None, "hello hello hello", 2, True)
    out = []
    try:
        for i in range(n + 1):
            t0 = time.thread_time_ns()
            tasks = [asyncio.create_task(stream_one(s, url, body, {}, 10.0)) for s in sessions]
            cpu = time.thread_time_ns() - t0
            results = await asyncio.gather(*tasks)
            if errors := [r.error for r in results if r.error]:
                raise RuntimeError(errors[0])
            if i:
                out.append(cpu / streams / 1e3)
    finally:
        for s in sessions:
            await s.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    server, base = spawn(5.0, 5.0)
    got: dict[str, list[float]] = {"aiohttp": [], "lean": []}
    try:
        for _ in range(3):  # alternating, so a busy moment of the machine falls on both
            for name, make in (("aiohttp", new_session), ("lean", LeanSession)):
                loop = asyncio.new_event_loop()
                loop.set_task_factory(eager_task_factory())
                try:
                    got[name] += loop.run_until_complete(rounds(base + "/completions", make, a.streams, a.rounds))
                finally:
                    loop.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    med = {k: statistics.median(v) for k, v in got.items()}
    for k, v in got.items():
        print(f"{k:8s} B={a.streams}: {med[k]:6.1f} µs of CPU per request started (median of {len(v)} rounds; "
              f"the burst's last request waits {med[k] * a.streams / 1e3:.2f} ms)")
    print(json.dumps({"streams": a.streams, "aiohttp_us": round(med["aiohttp"], 1), "lean_us": round(med["lean"], 1),
                      "ratio": round(med["aiohttp"] / med["lean"], 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
