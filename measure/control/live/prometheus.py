"""inference-top's own /metrics (`--prometheus PORT`): the live numbers for a cluster's Prometheus and Grafana.

Served by prometheus-client on loopback unless another address is asked for. Names follow Prometheus
conventions: `inference_top_` prefix, base units (seconds, bytes), `_total` for counters. Every value is
read from the controller's latest snapshot when scraped; nothing here can hold up the dashboard, and no
credential (an API key, a URL's password) is ever part of a label.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

from measure.control.live.protocol import Controller
from measure.core.server_cache import live_rates

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

PREFIX = "inference_top"


class SnapshotCollector:
    def __init__(self, controller: Controller):
        self.c = controller

    def collect(self) -> Iterator[Metric]:
        snap = self.c.snapshot()
        if snap is None:
            return
        n = snap.numbers
        info = self.c.info
        labels = ["engine", "mode"]
        values = [info.engine, snap.mode]

        def gauge(name: str, doc: str, value: float | None, extra: dict[str, str] | None = None) -> GaugeMetricFamily:
            g = GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=labels + list((extra or {}).keys()))
            if value is not None:
                g.add_metric(values + list((extra or {}).values()), float(value))
            return g

        yield gauge("output_tokens_per_second", "aggregate output tok/s over the live window", n.agg_tps)
        yield gauge("instances", "K: engine instances asked for", snap.k)
        yield gauge("batch_size", "B: sequences per engine (or concurrent streams) asked for", snap.b)
        yield gauge("achieved_concurrency", "requests in service (started to done), time-averaged over the window",
                    n.concurrency)
        for q, v in (("0.5", n.tpot_p50), ("0.9", n.tpot_p90)):
            yield gauge("tpot_seconds", "per-stream time per output token over the window", v, {"quantile": q})
        for q, v in (("0.5", n.ttft_p50), ("0.99", n.ttft_p99)):
            yield gauge("ttft_seconds", "queue-inclusive time to first token, this level's requests", v,
                        {"quantile": q})
        yield gauge("predicted_tpot_seconds", "the roofline's TPOT for this level", n.predicted_tpot)
        yield gauge("bandwidth_product_bytes_per_second", "weights (and KV) read per second", None
                    if n.bw_gbps is None else n.bw_gbps * 1e9)
        if snap.system is not None:
            yield gauge("memory_used_bytes", "memory used on this machine", snap.system.mem_used)
            yield gauge("swap_used_bytes", "swap used on this machine", snap.system.swap_used)
        yield gauge("at_wall", "1 while the memory wall holds", 1 if snap.state == "WALL" else 0)
        rates = live_rates(n.server_view)  # what the server says of its caches, where it does
        for key, name, doc in (("kv_cache_usage", "server_kv_cache_usage_ratio", "the server's KV cache in use "
                                "(vLLM's gauge; llama-server's /slots)"),
                               ("prefix_cache_hit_rate", "server_prefix_cache_hit_ratio", "prompt tokens served "
                                "from the server's prefix cache, since it started (vLLM's counters)"),
                               ("spec_acceptance_rate", "server_spec_decode_acceptance_ratio", "draft tokens "
                                "accepted, since the server started (vLLM's counters)")):
            if key in rates:
                yield gauge(name, doc, rates[key])
        if n.goodput_rps is not None:
            yield gauge("goodput_requests_per_second", "requests per second within every SLO bound", n.goodput_rps)
            yield gauge("slo_attainment_ratio", "share of this level's requests within the SLO", n.slo_attainment)
        totals = self.c.totals
        for name, doc, key in (("requests", "requests finished", "requests"),
                               ("request_errors", "requests that failed", "errors"),
                               ("output_tokens", "output tokens generated", "tokens")):
            cm = CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=labels)
            cm.add_metric(values, float(totals[key]))
            yield cm


def serve(controller: Controller, port: int, addr: str = "127.0.0.1") -> tuple[WSGIServer, threading.Thread]:
    """Start the /metrics server in a thread of its own: (server, thread), both to close on exit."""
    from prometheus_client import start_http_server

    registry = CollectorRegistry()
    registry.register(SnapshotCollector(controller))
    return start_http_server(port, addr=addr, registry=registry)
