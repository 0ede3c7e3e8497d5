"""Ray's plumbing for the client actors (docs/design/ray.md): Ray imported (ClusterError, one line, without it),
the cluster's address checked and joined, a placement group of one CPU per client with an actor in each bundle,
an actor's clock read by round trips, and a remote failure said in one line. Used by a bench's client actors
(control/bench/cluster.py) and the live dashboard's (sources/ray_clients.py).

Ray is an optional extra (pip install 'inference-top[cluster]'): it is imported inside the functions that use it
(and by those two modules' functions), never at import time."""
from __future__ import annotations

import importlib
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

POLL_S = 0.2  # the driver asks every actor for its new records this often
STALL_S = 3.0  # an actor that has not answered a poll for this long is named as stalled
ROUND_TRIPS = 16  # clock round trips per actor; the shortest is kept
PLACE_S = 60.0  # the placement group must be placed within this
PREPARE_S = 120.0  # an actor's plan and source ready within this
INSTALL = "pip install 'inference-top[cluster]'"


class ClusterError(ValueError):
    """What stops a cluster run before it starts: one line."""


def ray_module() -> Any:
    """Ray, imported here only; ClusterError (one line: what to install) without it."""
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise ClusterError(f"--ray needs Ray on this machine and every node: {INSTALL}") from None


def actor_clock(ray: Any, actor: Any) -> Callable[[], int]:
    """An actor's clock read through Ray, bound to that actor (not to a loop's variable)."""
    return lambda: int(ray.get(actor.clock.remote()))


def measure_offset(read: Callable[[], int], trips: int = ROUND_TRIPS,
                   now: Callable[[], int] = time.perf_counter_ns) -> tuple[int, int, int]:
    """(the other clock − this one, ± bound, round trip) in ns, from `trips` round trips of `read` (the other
    clock's reading, taken somewhere between this send and this receive): offset = reading − the midpoint,
    bound = half the round trip; the shortest round trip's, where the bound is tightest."""
    best: tuple[int, int, int] | None = None
    for _ in range(trips):
        s = now()
        r_other = read()
        r = now()
        rtt = r - s
        if best is None or rtt < best[2]:
            best = (r_other - (s + r) // 2, rtt // 2 + 1, rtt)
    assert best is not None  # trips ≥ 1
    return best


def reachable(address: str) -> None:
    """The cluster's address (auto: RAY_ADDRESS, else the one `ray start` last wrote on this machine) answers a TCP
    connect within 3 s: ray.init would otherwise retry an address nobody listens on, without end."""
    hostport: str | None = address[len("ray://"):] if address.startswith("ray://") else address
    if not address.startswith("ray://"):
        try:
            hostport = importlib.import_module("ray._private.services").canonicalize_bootstrap_address(address)
        except Exception:  # noqa: BLE001 - Ray's own lookup failed: try the address as given
            hostport = None if address == "auto" else address
    if not hostport:
        raise ClusterError(f"--ray {address}: this machine is in no Ray cluster (no RAY_ADDRESS, no `ray start` here); "
                           "start one (ray start --head) or give its address, HOST:6379")
    host, _, port = str(hostport).rpartition(":")
    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=3.0).close()
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise ClusterError(f"--ray {address}: nothing answers at {hostport} ({why}): is the cluster up (ray status)?"
                           ) from None


def connect(ray: Any, address: str) -> None:
    import logging

    reachable(address)
    # the caller's SIGTERM handling stays (ray.init puts sys.exit in its place), and Ray's C++ failure handler does
    # not print a stack for a SIGTERM the bench handles itself
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    import signal

    on_term = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR, include_dashboard=False,
                 configure_logging=True)
    except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError …: said in one line
        where = "the cluster this machine is in (ray start on it first)" if address == "auto" else address
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ClusterError(f"--ray {address}: cannot join {where}: {msg}") from None
    finally:
        if on_term is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, on_term)


def place(ray: Any, clients: Sequence[Any], spread: bool, actor: type) -> Any:
    """A placement group of one CPU per client (one per node where the cluster has the nodes) and an actor of
    class `actor` in each bundle, set on each client's `.actor` (client `.i` in bundle i − 1); the placement
    group. (The live dashboard's clients, sources/ray_clients.py, are placed the same way.)"""
    pgs: Any = importlib.import_module("ray.util.placement_group")  # (Any: mypy never needs Ray installed)
    strategies: Any = importlib.import_module("ray.util.scheduling_strategies")
    PlacementGroupSchedulingStrategy = strategies.PlacementGroupSchedulingStrategy  # noqa: N806 - Ray's name
    n = len(clients)
    pg = pgs.placement_group([{"CPU": 1}] * n, strategy="STRICT_SPREAD" if spread else "SPREAD")
    try:
        ray.get(pg.ready(), timeout=PLACE_S)
    except ray.exceptions.GetTimeoutError:
        raise ClusterError(f"the cluster cannot place {n} client actors of 1 CPU each"
                           f"{', one per node' if spread else ''} within {PLACE_S:.0f} s (ray status shows "
                           "its free CPUs)") from None
    remote = ray.remote(actor)
    for c in clients:
        c.actor = remote.options(num_cpus=1, max_concurrency=4, max_restarts=0,
                                 scheduling_strategy=PlacementGroupSchedulingStrategy(
                                     placement_group=pg, placement_group_bundle_index=c.i - 1)).remote()
    return pg


def one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [x for x in text.splitlines() if x.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]


__all__ = ["ClusterError", "ray_module", "reachable", "connect", "place", "one_line", "actor_clock", "measure_offset",
           "POLL_S", "STALL_S", "ROUND_TRIPS", "PLACE_S", "PREPARE_S", "INSTALL"]


@dataclass(frozen=True)
class ClusterSpec:
    """Where the client actors run: the Ray cluster's address, how many client actors (None: one per node of
    the cluster) and their shares of the schedule (--weights; None: equal)."""

    address: str
    n: int | None = None
    weights: list[int] | None = None
