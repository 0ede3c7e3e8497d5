"""The one synchronous HTTP client (docs/design/shape.md): the few plain requests beside the streams (which are
aiohttp's, engines/http_openai.py) — GET {base}/models (is the server there, which model it serves), POST
/tokenize (the server's own token ids), the `Date` header of GET /models (the clock check,
measure/machine/clock.py) and another inference-top's /metrics (--peer, measure/control/live/peers.py).

httpx, never through a proxy from the environment (`trust_env` off, as the streams' aiohttp session): every
request goes straight to the address given."""
from __future__ import annotations

from typing import Any

import httpx

HTTPError = httpx.HTTPError  # what a request that got no answer (or a broken one) raises
InvalidURL = httpx.InvalidURL  # a URL httpx cannot send to (raised before any request)
Response = httpx.Response


def client(timeout: float, headers: dict[str, str] | None = None) -> httpx.Client:
    """A client keeping its connections alive (the clock check asks one server back to back): use it in a with."""
    return httpx.Client(timeout=timeout, headers=headers, trust_env=False)


def get(url: str, timeout: float, headers: dict[str, str] | None = None) -> httpx.Response:
    """GET url, the answer whatever its status; HTTPError where none came."""
    with client(timeout, headers) as c:
        return c.get(url)


def post_json(url: str, body: Any, timeout: float, headers: dict[str, str] | None = None) -> httpx.Response:
    """POST url with a JSON body, the answer whatever its status; HTTPError where none came."""
    with client(timeout, headers) as c:
        return c.post(url, json=body)


def reason(exc: BaseException) -> str:
    """Why a request got no answer, in a few words: the OS's reason where a socket error is behind it
    ("Connection refused"), else the error's own text, else its name."""
    e: BaseException | None = exc
    while e is not None:
        if isinstance(e, OSError) and e.strerror:
            return e.strerror
        e = e.__cause__ or e.__context__
    return str(exc) or type(exc).__name__


__all__ = ["HTTPError", "InvalidURL", "Response", "client", "get", "post_json", "reason"]
