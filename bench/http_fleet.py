"""B concurrent streams against an OpenAI-compatible server (llama-server, vLLM, mlx_lm.server …).

The same face as bench.fleet.Fleet to the sweep and the dashboard, but nothing is spawned: one asyncio
loop in a thread keeps up to B streams open (httpx, connection limit ≥ B), fed by the same closed-loop
users or Poisson arrivals, with TTFT counted from the scheduled time. Every ≥ 1 s it scrapes the server's
Prometheus /metrics where there is one (absent metrics stay absent, never zero).
"""
from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable

from bench.fleet import FleetError, RecordCollector, RunMeta, WorkerInfo
from bench.records import RequestRecord
from bench.workload import Request, prompt_for
from engines.http_openai import api_headers, endpoint_body, stream_one

SERVER_METRICS = {
    "running": ("vllm:num_requests_running", "llamacpp:requests_processing"),
    "waiting": ("vllm:num_requests_waiting", "llamacpp:requests_deferred"),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "llamacpp:kv_cache_usage_ratio"),
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
}


def parse_prometheus(text: str) -> dict:
    """The server-view figures found in a /metrics page (sums over label sets); missing ones are absent."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        try:
            name_labels, value = line.rsplit(" ", 1)
            name = name_labels.split("{", 1)[0]
            values[name] = values.get(name, 0.0) + float(value)
        except ValueError:
            continue
    out = {}
    for key, names in SERVER_METRICS.items():
        for n in names:
            if n in values:
                out[key] = values[n]
                break
    return out


class HttpFleet:
    def __init__(self, url: str, meta: RunMeta, b: int = 1, endpoint: str = "completions",
                 model: str | None = None, api_key_env: str | None = None, stall_s: float = 60.0,
                 on_record: Callable[[RequestRecord], None] | None = None, events: bool = True):
        self.url = url.rstrip("/")
        self.endpoint = endpoint
        self.model = model
        self.api_key_env = api_key_env
        self.stall_s = stall_s
        self.meta = RunMeta(**{**meta.__dict__, "mode": "http"})
        self.on_record = on_record
        self.events: queue.Queue | None = queue.Queue() if events else None
        self.target_k = 1
        self.mode = "http"
        self.b = b
        self.b_cap = 1 << 30
        self.rep = 0
        self.run_id = uuid.uuid4().hex[:12]
        self.server_view: dict | None = None  # None: never scraped; {}: the server exposes none
        self._pending: deque[Request] = deque()
        self._active: dict[int, tuple[int, Request]] = {}  # request id → (slot, request)
        self._slots: dict[int, WorkerInfo] = {}
        self._load = None
        self._paused = False
        self._collector = None
        self._ids = itertools.count(1)
        self._prompt_index = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._stop = False
        self._lock = threading.Lock()

    # ---- the Fleet face ---------------------------------------------------------------------
    def start(self, wait_ready: bool = True, timeout: float = 30.0) -> None:
        import httpx

        if self._thread is not None:
            return

        try:
            r = httpx.get(f"{self.url}/models", headers=api_headers(self.api_key_env), timeout=min(timeout, 10))
        except httpx.HTTPError as exc:
            raise FleetError(f"nothing answers at {self.url} ({type(exc).__name__}); start the server or fix --url")
        if r.status_code in (401, 403):
            raise FleetError(f"{self.url}/models answered HTTP {r.status_code}: pass the key's variable with "
                             "--api-key-env")
        if r.status_code >= 400:
            raise FleetError(f"{self.url}/models answered HTTP {r.status_code}: is --url the API base (…/v1)?")
        if not self.model:
            try:
                self.model = r.json()["data"][0]["id"]
            except (ValueError, KeyError, IndexError, TypeError):
                pass
        self._thread = threading.Thread(target=self._run, name="http-fleet", daemon=True)
        self._thread.start()
        self._emit("log", f"streaming to {self.url}/{'chat/completions' if self.endpoint == 'chat' else 'completions'}"
                          f" as {self.model or 'the server default'}")

    def wait_ready(self, timeout: float = 0) -> None:
        pass

    def scale_to(self, k: int) -> None:
        if k != 1:
            self._emit("log", "K does not apply to a remote server: B sets the concurrent streams")

    def set_batch(self, mode: str, b: int, b_cap: int | None = None, seq_ctx: int | None = None) -> None:
        self.b = b
        self._poke()

    def set_load(self, workload, arrivals, max_tokens: int, ignore_eos: bool = True) -> None:
        with self._lock:
            self._load = (workload, arrivals, max_tokens, ignore_eos)
        self._poke()

    def set_users(self, users: int | None) -> None:
        with self._lock:
            if users is not None and self._load and hasattr(self._load[1], "users"):
                self._load[1].users = users
            self._auto_users = users is None
        self._poke()

    _auto_users = True

    def pause(self, paused: bool = True) -> None:
        self._paused = paused
        if not paused and self._load:
            self._load[1].resume(time.perf_counter_ns())
        self._poke()

    def workers(self) -> list[WorkerInfo]:
        with self._lock:
            return [WorkerInfo(**w.__dict__) for w in self._slots.values()]

    def run_requests(self, workload, arrivals, max_tokens: int, ignore_eos: bool = True,
                     timeout: float | None = None, should_stop=None) -> list[RequestRecord]:
        self._collector = RecordCollector(arrivals.total)
        self.set_load(workload, arrivals, max_tokens, ignore_eos)
        try:
            return self._collector.wait(timeout, should_stop)
        finally:
            self._collector = None

    def close(self, grace: float = 1.0) -> None:
        self._stop = True
        self._poke()
        if self._thread:
            self._thread.join(timeout=grace + 2)

    # ---- the loop ----------------------------------------------------------------------------
    def _emit(self, kind, *payload) -> None:
        if self.events is not None:
            self.events.put((kind, *payload))

    def _poke(self) -> None:
        if self._loop and self._wake:
            self._loop.call_soon_threadsafe(self._wake.set)

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        import httpx

        self._wake = asyncio.Event()
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        tasks: set[asyncio.Task] = set()
        last_scrape = 0.0
        async with httpx.AsyncClient(limits=limits) as client:
            while not self._stop:
                now = time.perf_counter_ns()
                self._arrivals(now)
                while self._pending and len(self._active) < self.b:
                    req = self._pending.popleft()
                    slot = next(i for i in itertools.count(1) if i not in {s for s, _ in self._active.values()})
                    self._active[req.request_id] = (slot, req)
                    t = asyncio.create_task(self._one(client, slot, req))
                    tasks.add(t)
                    t.add_done_callback(tasks.discard)
                if time.monotonic() - last_scrape >= 1.0:
                    last_scrape = time.monotonic()
                    tasks.add(asyncio.create_task(self._scrape(client)))
                self._wake.clear()
                nxt = self._load[1].next_wakeup_ns() if self._load and not self._paused else None
                wait = 0.5 if nxt is None else max(0.0, min(0.5, (nxt - time.perf_counter_ns()) / 1e9))
                try:
                    await asyncio.wait_for(self._wake.wait(), wait)
                except asyncio.TimeoutError:
                    pass
            for t in tasks:
                t.cancel()

    def _arrivals(self, now: int) -> None:
        if not self._load or self._paused:
            return
        workload, arrivals, max_tokens, ignore_eos = self._load
        if self._auto_users and hasattr(arrivals, "users"):
            arrivals.users = self.b
        for t_sched in arrivals.due(now, len(self._pending) + len(self._active)):
            req = Request(next(self._ids), prompt_for(workload, next(self._prompt_index)), max_tokens, ignore_eos,
                          t_scheduled_ns=t_sched, rep=self.rep, k=1, b=self.b, mode="http")
            req.t_submitted_ns = time.perf_counter_ns()
            self._pending.append(req)

    async def _scrape(self, client) -> None:
        base = self.url[:-3] if self.url.endswith("/v1") else self.url
        try:
            r = await client.get(f"{base}/metrics", timeout=2.0)
            self.server_view = parse_prometheus(r.text) if r.status_code == 200 else {}
        except Exception:  # noqa: BLE001 - a server without /metrics simply has no view
            self.server_view = {}

    async def _one(self, client, slot: int, req: Request) -> None:
        with self._lock:
            info = self._slots.setdefault(slot, WorkerInfo(slot, state="idle", ready_ns=time.perf_counter_ns()))
            info.state, info.current, info.active = "serving", req.request_id, 1
        t_started = time.perf_counter_ns()
        text = req.prompt.text or ("hello " * max(1, (req.prompt.synthetic_tokens or 1) - 1)).strip()
        url = f"{self.url}/{'chat/completions' if self.endpoint == 'chat' else 'completions'}"
        body = endpoint_body(self.endpoint, self.model, text, req.max_tokens, req.ignore_eos)
        res = await stream_one(client, url, body, api_headers(self.api_key_env), self.stall_s)
        if res.token_ns:
            self._emit("tokens", slot, req.request_id, res.token_ns)
        rec = RequestRecord(
            run_id=self.run_id, request_id=req.request_id, mode="http", engine=self.meta.engine,
            model=self.model or self.meta.model, model_bytes=self.meta.model_bytes, k=1, b=req.b, worker=slot,
            prompt_id=req.prompt.prompt_id, prompt_tokens=res.prompt_tokens or 0, output_tokens=len(res.token_ns),
            t_scheduled_ns=req.t_scheduled_ns, t_submitted_ns=req.t_submitted_ns, t_started_ns=t_started,
            t_first_token_ns=res.token_ns[0] if res.token_ns else None, t_done_ns=time.perf_counter_ns(),
            token_ns=res.token_ns, finish_reason=res.finish_reason if res.error is None else "error",
            error=res.error, rep=req.rep,
            server_output_tokens=(res.server_output_tokens
                                  if res.server_output_tokens not in (None, len(res.token_ns)) else None),
            server_view=dict(self.server_view or {}, **({"timings": res.timings} if res.timings else {})) or None,
        )
        with self._lock:
            self._active.pop(req.request_id, None)
            info.requests_done += 1
            info.tokens += len(res.token_ns)
            info.current, info.active, info.state = None, 0, "idle"
            if rec.t_first_token_ns:
                info.last_ttft_s = (rec.t_first_token_ns - rec.t_scheduled_ns) / 1e9
        self._emit("record", rec)
        if self.on_record:
            self.on_record(rec)
        collect = self._collector  # read once: run_requests may clear it meanwhile
        if collect:
            collect(rec)
        if self._wake:
            self._wake.set()
