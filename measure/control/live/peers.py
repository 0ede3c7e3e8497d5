"""Other clients' inference-top, watched from this dashboard (`--peer URL`, docs/design/client-machines.md): each peer's own
/metrics (`--prometheus PORT` there, control/live/prometheus.py) read once a second in a thread of its own; its tok/s,
requests and errors summed with this client's, one row per client. A peer that does not answer, or answers
with something else, is down (with the reason) and counts in no sum; nothing here can stop the dashboard."""
from __future__ import annotations

import threading
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from engines import http_sync
from measure.control.live.prometheus import PREFIX
from measure.sources.base import PeerReading

# the /metrics samples a peer row reads (a counter's sample carries _total), summed over label sets
_SAMPLES = {f"{PREFIX}_output_tokens_per_second": "tps", f"{PREFIX}_requests_total": "requests",
            f"{PREFIX}_request_errors_total": "errors", f"{PREFIX}_instances": "k"}
_COUNTS = ("requests", "errors", "k")


def peer_url(text: str) -> tuple[str, str]:
    """--peer as given (host:PORT, http://host:PORT, or its full /metrics URL) → (the /metrics URL, its label:
    host:port, never a credential). ValueError: one line."""
    t = (text or "").strip()
    if "://" not in t:
        t = "http://" + t
    parts = urllib.parse.urlsplit(t)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--peer {text!r}: give the other client's /metrics address: host:PORT or "
                         "http://host:PORT (the --prometheus PORT it runs with)")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = host + (f":{port}" if port else "")
    path = parts.path.rstrip("/") or "/metrics"
    return urllib.parse.urlunsplit((parts.scheme, netloc, path, parts.query, "")), netloc


def parse_peer_metrics(text: str) -> dict[str, Any]:
    """An inference-top /metrics page → {tps, requests, errors, k}: the ones it has (a gauge without a value,
    e.g. tok/s before any token, is left out). ValueError when it has none of inference-top's."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Any] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = _SAMPLES.get(s.name)
            if key is not None:
                out[key] = out.get(key, 0) + s.value
    if not out and PREFIX not in text:
        raise ValueError(f"no {PREFIX}_* metrics: not an inference-top /metrics (run it there with --prometheus PORT)")
    return {k: int(v) if k in _COUNTS else float(v) for k, v in out.items()}


class Peers:
    """The --peer URLs, scraped every `every_s` seconds (each with `timeout_s`) by one daemon thread."""

    with_own = True  # this client sends load of its own: its row comes first (client_rows)

    def __init__(self, urls: Sequence[str], every_s: float = 1.0, timeout_s: float = 0.8):
        self.every_s, self.timeout_s = every_s, timeout_s
        self._readings = [PeerReading(*peer_url(u)) for u in urls]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._http = http_sync.client(timeout_s)  # one for all scrapes (its connections kept alive)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="peers", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s * max(1, len(self._readings)) + 1)
        if self._thread is None or not self._thread.is_alive():
            self._http.close()

    def readings(self) -> list[PeerReading]:
        with self._lock:
            return list(self._readings)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            for i, old in enumerate(self.readings()):
                if self._stop.is_set():
                    return
                new = self.scrape(old)
                with self._lock:
                    self._readings[i] = new
            self._stop.wait(max(0.0, self.every_s - (time.monotonic() - t0)))

    def scrape(self, p: PeerReading) -> PeerReading:
        """One reading of one peer: up with its figures, or down with the reason (never raises)."""
        try:  # asked directly (http_sync): a scrape of another client never goes through a proxy
            r = self._http.get(p.url)
            why = f"HTTP {r.status_code}" if r.status_code >= 400 else None
            figures = {} if why else parse_peer_metrics(r.content.decode("utf-8", "replace"))
        except (http_sync.HTTPError, http_sync.InvalidURL) as exc:
            why = http_sync.reason(exc)
        except (OSError, ValueError) as exc:
            why = str(exc) or type(exc).__name__
        if why is None:
            return PeerReading(p.url, p.label, True, True, figures.get("tps"), figures.get("requests"),
                               figures.get("errors"), figures.get("k"), None, time.monotonic())
        return replace(p, up=False, scraped=True, error=why[:120])


def client_rows(own: dict[str, Any], peers: Sequence[PeerReading], with_own: bool = True
                ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One row per client (this one first, from its own figures {tps, requests, errors}, unless `with_own` is
    False: the live Ray clients', whose rows are every client there is) and their sum over the clients that
    answer: {tps, requests, errors, clients (answering), down}."""
    rows = [dict(label="this client", up=True, error=None, **own)] if with_own else []
    rows += [{"label": p.label, "up": p.up, "tps": p.tps, "requests": p.requests, "errors": p.errors,
              "error": p.error if p.scraped else "not read yet"} for p in peers]
    up = [r for r in rows if r["up"]]
    total = {"tps": sum(r["tps"] or 0.0 for r in up), "requests": sum(r["requests"] or 0 for r in up),
             "errors": sum(r["errors"] or 0 for r in up), "clients": len(up), "down": len(rows) - len(up)}
    return rows, total


__all__ = ["Peers", "peer_url", "parse_peer_metrics", "client_rows"]
