"""The live dashboard's composition root: from a RunPlan (control/plan.py), its parts started — the load source (the
plan's, control/wiring.py, or client actors on a Ray cluster, sources/ray_clients.py), the recording, the roofline,
the controller and its notes, the /metrics server (--prometheus) and the other clients watched (--peer); LiveRun
holds them and close() stops them. tui/app.py only runs the screen over it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from measure.control.live.controller import LiveSettings
from measure.control.plan import RunPlan
from measure.control.wiring import make_source

if TYPE_CHECKING:
    from measure.machine.ray_cluster import ClusterSpec


@dataclass
class LiveRun:
    """What the live dashboard drives, started by start_live: the controller, the screen's title, the
    other clients watched (--peer: control/live/peers.Peers) and the /metrics server (--prometheus: control/
    prometheus.serve's (server, thread)); close() stops the three in that order."""

    controller: Any
    title: str
    peers: Any = None
    metrics_server: Any = None

    def close(self) -> None:
        self.controller.close()
        if self.peers:
            self.peers.close()
        if self.metrics_server:  # prometheus.serve's (server, thread)
            self.metrics_server[0].shutdown()


def start_live(plan: RunPlan, record: str | None = None, brake: bool = True,
               prometheus: tuple[str, int] | None = None, peers: list[str] | None = None,
               ray: ClusterSpec | None = None) -> LiveRun:
    """The live dashboard's parts, started: the source (a remote one checked before the screen takes over:
    SourceError when nothing answers), the recording, the roofline, the controller and its notes, the
    /metrics server (--prometheus) and the other clients watched (--peer)."""
    from measure.control.live.controller import LiveController
    from measure.machine.recorder import Recorder

    settings = LiveSettings.from_plan(plan, brake)
    source: Any
    if ray is not None:  # --ray: the load from client actors (sources/ray_clients.py)
        from functools import partial

        from measure.sources.ray_clients import RayClients

        source = RayClients(plan, partial(make_source, plan, events=True, k=plan.ks[0]), ray.address, ray.n,
                            ray.weights, say=lambda t: print(t, flush=True))
    else:
        source = make_source(plan, k=plan.ks[0])
    if plan.engine_is_remote:
        source.start()  # nothing answers: one line before the screen takes over
    recorder = None
    if record:
        from dataclasses import asdict

        extra = {"ray": source.header()} if ray is not None else {}
        recorder = Recorder(record, plan.header({"command": "dashboard", "k": plan.ks[0],
                                                 "settings": asdict(settings), **extra}))
    roofline = plan.roofline(say=lambda t: print(t, flush=True))
    controller = LiveController(source, plan.workload, settings, recorder=recorder, roofline=roofline)
    if recorder:
        recorder.on_error = lambda m: controller.log("error", f"{m}: the recording stops here, the dashboard "
                                                              "goes on")
    controller.start()
    for note in plan.notes:
        controller.log("info", note)
    for warning in plan.warnings:
        controller.log("warn", warning)
    metrics_server = None
    if prometheus:
        from measure.control.live.prometheus import serve

        addr, port = prometheus
        try:
            metrics_server = serve(controller, port, addr)
            controller.log("info", f"/metrics at http://{addr}:{port}/metrics")
        except OSError as exc:
            controller.log("error", f"--prometheus {port}: cannot listen on {addr}:{port} ({exc.strerror or exc})")
    watch: Any = source if ray is not None else None  # one row per client actor
    if peers:
        from measure.control.live.peers import Peers

        watch = Peers(peers)
        watch.start()
        controller.log("info", f"watching {len(peers)} other client(s)' /metrics: "
                       f"{', '.join(r.label for r in watch.readings())}")
    title = plan.choice.name if plan.choice else source.meta.model
    return LiveRun(controller, title, watch, metrics_server)


__all__ = ["LiveRun", "start_live"]
