"""Ray's plumbing for the client actors (docs/design/ray.md), and the one client-group seam both uses share: Ray
imported (ClusterError, one line, without it), the cluster's address checked and joined, one actor class
(ClientActor: a job made on its node by the driver, run, polled, closed) and one driver-side group of them
(ClientGroup: placement, prepare within PREPARE_S, clock offsets by round trips, the poll that names a dead or a
stalled actor, teardown). Used by a bench's client actors (control/bench/cluster.py: a job = its share of a
schedule) and the live dashboard's (sources/ray_clients.py: a job = an HTTP source and its setters).

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
from typing import Any, ClassVar, Generic, Protocol, TypedDict, TypeVar

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


def one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [x for x in text.splitlines() if x.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]


# ---- the one actor class ----------------------------------------------------------------------------------

class ClientJob(Protocol):
    """What a client actor holds: made on its node by the driver's `make`, started there, polled by `take`. Its
    `CALLS` are the methods the driver may run through the actor's `call` (a bench's `run` of its share, the live
    source's setters)."""

    CALLS: ClassVar[tuple[str, ...]]

    def start(self) -> Any: ...  # made and started (connections, client processes), nothing sent: what it says

    def take(self) -> Any: ...  # what it has for the driver since the last take

    def close(self) -> None: ...


class Placed(TypedDict):
    """Where a client actor runs, as it says of itself once prepared (ClientActor.prepare), and what its job's
    start said."""

    node_id: str
    ip: str
    host: str
    pid: int
    version: str | None  # inference-top's, where installed as a package
    said: Any


class ClientActor:
    """One client actor, the one class of both uses: it holds the job the driver's `make` builds on its node
    (picklable: a partial of a module-level class; every node runs the same inference-top) and answers `clock`,
    `call`, `take` and `close`. A plain class; ClientGroup makes it a Ray actor (several of its methods run at once:
    `take` and `clock` answer while `call` runs a bench's share)."""

    def __init__(self) -> None:
        self._job: ClientJob | None = None

    def prepare(self, make: Callable[[], ClientJob]) -> Placed:
        """The job made and started here: where it runs (node, address, host, pid, inference-top's version) and what
        the job says of itself."""
        ray = ray_module()
        from importlib.metadata import PackageNotFoundError, version

        self._job = make()
        said = self._job.start()
        try:
            ver = version("inference-top")
        except PackageNotFoundError:
            ver = None
        return {"node_id": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address(),
                "host": socket.gethostname(), "pid": os.getpid(), "version": ver, "said": said}

    def clock(self) -> int:
        return time.perf_counter_ns()

    def call(self, name: str, *args: Any) -> Any:
        """One of the job's CALLS."""
        job = self._job
        if job is None or name not in job.CALLS:
            raise AttributeError(f"a client actor's job has no call {name!r}")
        return getattr(job, name)(*args)

    def take(self) -> Any:
        assert self._job is not None  # prepare() first
        return self._job.take()

    def close(self) -> None:
        if self._job is not None:
            self._job.close()


# ---- the driver's group ----------------------------------------------------------------------------------

@dataclass
class RayClient:
    """What a driver knows of one client actor, whichever its use (bench's Client and live's LiveClient add
    theirs)."""

    i: int
    n: int
    weight: int = 1
    actor: Any = None
    node_id: str = "?"
    ip: str = "?"
    host: str = "?"
    pid: int | None = None
    version: str | None = None
    offset_ns: int = 0  # its perf_counter − the driver's
    bound_ns: int = 0  # ± this (half the shortest round trip)
    rtt_ns: int = 0
    asked_at: float | None = None  # monotonic: when the poll now outstanding (or the last one) was sent
    poll: Any = None  # that poll (a take), while unanswered
    stall_said: bool = False

    @property
    def name(self) -> str:
        return f"client {self.i}/{self.n} on {self.ip} ({self.host}, pid {self.pid})"


C = TypeVar("C", bound=RayClient)


class ClientGroup(Generic[C]):
    """The driver's side of N client actors (docs/design/ray.md), for a bench's share and the live dashboard's load
    alike: the cluster joined (and left, where this group joined it), the actors placed and their jobs prepared
    within PREPARE_S, each actor's clock against the driver's, the poll (one take in flight per actor, at most one
    every POLL_S) that names an actor that died (Ray's error at the poll) or that has not answered for STALL_S,
    and the teardown. `say(text, level)` says what happens."""

    def __init__(self, address: str, say: Callable[[str, str], None]) -> None:
        self.ray = ray_module()
        self.joined = not self.ray.is_initialized()
        if self.joined:
            connect(self.ray, address)
        self.say = say
        self.clients: list[C] = []
        self.pg: Any = None
        self.spread = True  # one client per node (open() says where not)
        self.stopped = threading.Event()  # close() sets it: a poll with nothing to wait for returns at once

    def nodes(self) -> int:
        """The cluster's live nodes."""
        return len([x for x in self.ray.nodes() if x.get("Alive")])

    def open(self, clients: list[C], makes: Sequence[Callable[[], ClientJob]]) -> list[Any]:
        """The actors placed (one per node where the cluster has the nodes, said where not) and each one's job
        made and started by `makes[i − 1]` on its node; where each runs set on its client. What each job's start
        said.
        ClusterError (one line) where they cannot be placed or started within PREPARE_S."""
        ray, n = self.ray, len(clients)
        self.clients = clients
        nodes = self.nodes()
        self.spread = nodes >= n
        if not self.spread:
            self.say(f"the cluster has {nodes} node{'s' * (nodes != 1)} for {n} clients: some nodes run more than "
                     "one client (their share of a machine is not a machine)", "warn")
        self.pg = _place(ray, clients, self.spread)
        try:
            infos: list[Placed] = ray.get([c.actor.prepare.remote(m) for c, m in zip(clients, makes)],
                                                  timeout=PREPARE_S)
        except ray.exceptions.GetTimeoutError:
            raise ClusterError(f"the client actors were not ready within {PREPARE_S:.0f} s") from None
        except ray.exceptions.RayError as exc:
            cause = getattr(exc, "cause", None)
            if cause is not None and not isinstance(cause, ImportError):  # its load could not start: its line
                raise ClusterError(f"a client actor could not start its load: {one_line(cause)}") from None
            raise ClusterError(f"a client actor could not start: {one_line(exc)} (is inference-top installed on "
                               "every node, the same version?)") from None
        for c, info in zip(clients, infos):
            c.node_id, c.ip, c.host, c.pid, c.version = (info["node_id"], info["ip"], info["host"], info["pid"],
                                                         info["version"])
        return [info["said"] for info in infos]

    def sync_clocks(self) -> None:
        """Each actor's clock against the driver's, by ROUND_TRIPS round trips, onto its client."""
        for c in self.clients:
            c.offset_ns, c.bound_ns, c.rtt_ns = measure_offset(actor_clock(self.ray, c.actor))

    def poll(self, following: Sequence[C], absorb: Callable[[C, Any], None], gone: Callable[[C, str, str], None],
             also: Sequence[Any] = (), lost_s: float | None = None) -> set[Any]:
        """One round: a take sent to each client of `following` due one; up to POLL_S (less where a take falls due)
        waited for the answers and for `also` (refs of the caller's); each answer to `absorb`; a client whose take
        raised is gone ("died", Ray's line); one silent past STALL_S is named as stalled once (and said again
        when it answers), past `lost_s` (where given) stopped and gone ("lost"). Which of `also` are ready."""
        ray, now = self.ray, time.monotonic()
        for c in following:
            if c.poll is None and now >= (c.asked_at or 0.0) + POLL_S:
                c.poll, c.asked_at = c.actor.take.remote(), now
        refs = [c.poll for c in following if c.poll is not None] + list(also)
        due = min(((c.asked_at or now) + POLL_S for c in following if c.poll is None), default=now + POLL_S)
        wait_s = max(0.01, min(POLL_S, due - now))
        if not refs:
            self.stopped.wait(wait_s)
            return set()
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=wait_s)[0])
        for c in following:
            if c.poll is not None and c.poll in ready:
                ref, c.poll = c.poll, None
                try:
                    absorb(c, ray.get(ref))
                except ray.exceptions.RayError as exc:
                    gone(c, "died", one_line(exc))
                    continue
                if c.stall_said:
                    self.say(f"{c.name} answers again", "info")
                    c.stall_said = False
        self._watch(following, gone, lost_s)
        return ready & set(also)

    def _watch(self, following: Sequence[C], gone: Callable[[C, str, str], None], lost_s: float | None) -> None:
        now = time.monotonic()
        for c in following:
            waited = now - (c.asked_at or now)
            if c.poll is None:
                continue
            if lost_s is not None and waited > lost_s:
                self.kill(c)
                gone(c, "lost", f"no answer for {waited:.0f} s (stalled), stopped")
            elif waited > STALL_S and not c.stall_said:
                then = f" (stopped after {lost_s:.0f} s)" if lost_s is not None else ""
                self.say(f"{c.name} has not answered for {waited:.0f} s: stalled?{then}", "warn")
                c.stall_said = True

    def drain(self, c: C, absorb: Callable[[C, Any], None], timeout: float) -> None:
        """A client's last answers: the take in flight (if any), then one more. Ray's error (GetTimeoutError is one)
        where it does not answer within `timeout`."""
        ref, c.poll = c.poll, None
        for r in ([ref] if ref is not None else []) + [c.actor.take.remote()]:
            absorb(c, self.ray.get(r, timeout=timeout))

    def kill(self, c: C) -> None:
        try:
            self.ray.kill(c.actor, no_restart=True)
        except Exception:  # noqa: BLE001,S110 - an actor already gone
            pass
        c.poll = None

    def close(self, ask: Sequence[C] = (), grace: float = 1.0) -> None:
        """The clients in `ask` told to close their jobs (each within grace + 5 s), every actor killed, the
        placement group removed, and the cluster left where this group joined it."""
        self.stopped.set()
        ray = self.ray
        for c in ask:
            try:
                ray.get(c.actor.close.remote(), timeout=grace + 5)
            except Exception:  # noqa: BLE001,S110 - an actor already gone
                pass
        for c in self.clients:
            if c.actor is not None:
                self.kill(c)
        if self.pg is not None:
            try:
                importlib.import_module("ray.util.placement_group").remove_placement_group(self.pg)
            except Exception:  # noqa: BLE001,S110 - the cluster already gone
                pass
        if self.joined and ray.is_initialized():
            ray.shutdown()


def _place(ray: Any, clients: Sequence[RayClient], spread: bool) -> Any:
    """A placement group of one CPU per client (one per node where `spread`) and a ClientActor in each bundle, set
    on each client's `.actor` (client `.i` in bundle i − 1); the placement group."""
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
    remote = ray.remote(ClientActor)
    for c in clients:
        c.actor = remote.options(num_cpus=1, max_concurrency=4, max_restarts=0,
                                 scheduling_strategy=PlacementGroupSchedulingStrategy(
                                     placement_group=pg, placement_group_bundle_index=c.i - 1)).remote()
    return pg


__all__ = ["ClusterError", "ClientActor", "ClientGroup", "ClientJob", "Placed", "RayClient", "ray_module", "reachable", "connect", "one_line", "actor_clock", "measure_offset",
           "POLL_S", "STALL_S", "ROUND_TRIPS", "PLACE_S", "PREPARE_S", "INSTALL"]


@dataclass(frozen=True)
class ClusterSpec:
    """Where the client actors run: the Ray cluster's address, how many client actors (None: one per node of
    the cluster) and their shares of the schedule (--weights; None: equal)."""

    address: str
    n: int | None = None
    weights: list[int] | None = None
