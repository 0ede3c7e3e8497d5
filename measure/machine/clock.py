"""The clock check (docs/design/client-machines.md): this client's clock against a server's, from its HTTP `Date` header
(core/clients.py's offset_from_ticks brackets the tick; describe_clock says the result)."""
from __future__ import annotations

import email.utils
import time
from typing import Any

from engines import http_sync
from engines.http_openai import public_url
from measure.core.clients import Tick, offset_from_ticks


def clock_check(url: str, headers: dict[str, Any] | None = None, timeout_s: float = 3.0, coarse_every_s: float = 0.02,
                fine_s: float = 0.06) -> dict[str, Any]:
    """This client's clock against the server's, from the `Date` header of GET {url}/models: polled every
    20 ms until the Date ticks (≤ 1.05 s), then back to back around the next tick (predicted from the first),
    ≤ 2.2 s in all. One connection, kept alive (engines/http_sync.py). Returns {method, server, offset_s
    (server − this client), bound_s, samples, why}; offset_s None with `why` where it cannot tell (no Date,
    nothing answers).

    It detects a client clock that is off from the server's (the same error on every client's check shows
    the clients agree with each other even when the server's clock is wrong). It cannot see an asymmetric
    path (the bound assumes the server read its clock somewhere between send and receive), a server that
    caches its Date (uvicorn refreshes it every 0.1 s: read up to that much late), or drift after the check;
    on loopback client and server share one clock, so it can only show ≈ 0."""
    out: dict[str, Any] = {"method": "the server's HTTP Date header (whole seconds; its tick bracketed)",
                           "server": public_url(url), "offset_s": None, "bound_s": None, "samples": 0, "why": None}
    models = url.rstrip("/") + "/models"
    samples: list[Tick] = []

    with http_sync.client(timeout_s, {str(k): str(v) for k, v in (headers or {}).items()}) as conn:
        def ask() -> bool:
            s = time.time()
            resp = conn.get(models)
            r = time.time()
            date = resp.headers.get("Date")
            if not date:
                return False
            parsed = email.utils.parsedate_to_datetime(date)
            samples.append(Tick(s, r, int(parsed.timestamp())))
            return True

        try:
            end = time.monotonic() + 1.05
            while True:
                if not ask():
                    out["why"] = "the server sends no Date header: its clock cannot be compared"
                    return out
                if len(samples) > 1 and samples[-1][2] != samples[-2][2] or time.monotonic() > end:
                    break
                time.sleep(coarse_every_s)
            if len(samples) > 1 and samples[-1][2] != samples[-2][2]:  # next tick ≈ 1 s after this one
                tick_local = (samples[-2][0] + samples[-1][1]) / 2 + 1.0
                time.sleep(max(0.0, tick_local - fine_s / 2 - time.time()))
                d_before = samples[-1][2]
                end = time.monotonic() + fine_s * 2
                while time.monotonic() < end:
                    ask()
                    if samples[-1][2] != d_before:
                        break
        except (http_sync.HTTPError, http_sync.InvalidURL, OSError, ValueError, TypeError) as exc:
            if not samples:
                out["why"] = f"cannot ask {out['server']} for its Date: {http_sync.reason(exc)}"
                return out
    got = offset_from_ticks(samples)
    out["samples"] = len(samples)
    if got is None:
        out["why"] = "the server's Date headers contradict each other (a cached Date, or its clock stepped)"
        return out
    out["offset_s"], out["bound_s"] = got
    return out


__all__ = ["clock_check"]
