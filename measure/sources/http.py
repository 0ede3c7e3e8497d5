"""B concurrent streams against an OpenAI-compatible server (llama-server, vLLM, mlx_lm.server …): a
LoadSource (sources/base.py) that spawns nothing. One asyncio loop in a thread keeps up to B streams open
(httpx, connection limit ≥ B), fed by the same closed-loop users or Poisson arrivals as the local fleet,
with TTFT counted from the scheduled time. Token timestamps reach the live window as each chunk arrives.
Every ≥ 1 s it scrapes the server's Prometheus /metrics where there is one (absent metrics stay absent).
"""
from __future__ import annotations

import asyncio
import heapq
import queue
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable

from engines.http_openai import api_headers, endpoint_body, new_session, public_url, stream_one
from measure.core.records import RequestRecord, RunMeta, build_record
from measure.core.workload import Load, PrefixCache, Request, RequestMaker
from measure.sources.base import (Capabilities, EventSink, LoadStarted, RecordCollector, SourceError, Tokens,
                                  WorkerInfo, WorkerState)

WARMUP_TOKENS = 2

S = WorkerState

SERVER_METRICS = {
    "running": ("vllm:num_requests_running", "llamacpp:requests_processing"),
    "waiting": ("vllm:num_requests_waiting", "llamacpp:requests_deferred"),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "llamacpp:kv_cache_usage_ratio"),
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    # counters: a run's figure is their rise over it (the report takes deltas, never totals)
    "generated_tokens_total": ("vllm:generation_tokens_total", "llamacpp:tokens_predicted_total"),
    "prompt_tokens_total": ("vllm:prompt_tokens_total", "llamacpp:prompt_tokens_total"),
    "requests_total": ("vllm:request_success_total",),
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


class HttpSource:
    def __init__(self, url: str, meta: RunMeta, b: int = 1, endpoint: str = "completions",
                 model: str | None = None, api_key_env: str | None = None, stall_s: float = 60.0,
                 on_record: Callable[[RequestRecord], None] | None = None, events: bool = True,
                 prefix_cache: PrefixCache = PrefixCache(), tokenizer=None):
        self.url = url.rstrip("/")
        self.shown_url = public_url(self.url)  # what logs, records and screens say
        self.prefix_cache = prefix_cache
        self.tokenizer = tokenizer  # engines/tokenizer.py's shape: (Prompt) → ids, .text_ids(text) → ids; or None
        self.send_ids = False  # decided at start: the server's /tokenize agrees with ours
        self.endpoint = endpoint
        self.model = model
        self.api_key_env = api_key_env
        self.stall_s = stall_s
        self.meta = RunMeta(**{**meta.__dict__, "mode": "http"})
        self._sink = EventSink(events, on_record)
        self.events: queue.Queue | None = self._sink.events
        self.target_k = 1
        self.mode = "http"
        self.b = b
        self.rep = 0
        self.run_id = uuid.uuid4().hex[:12]
        self._server_view: dict | None = None  # None: never scraped; {}: the server exposes none
        self._requests = RequestMaker()
        self._pending: deque[Request] = deque()
        self._active: dict[int, tuple[int, Request]] = {}  # request id → (slot, request)
        self._slots: dict[int, WorkerInfo] = {}
        self._paused = False
        self._auto_users = True
        self._collector: RecordCollector | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._stop = False
        self._lock = threading.Lock()
        self._warmed_b = 0  # stream levels warmed up so far: one short unrecorded request per new stream
        self._load_started = False

    # ---- the LoadSource face -----------------------------------------------------------------
    def capabilities(self) -> Capabilities:
        return Capabilities(engine=self.meta.engine, weight_bytes=self.meta.model_bytes, modes=("http",),
                            scales_k=False, local=False, batch_capacity=1 << 30, server_view=True,
                            simulated=False, endpoint=self.shown_url)

    def server_view(self) -> dict | None:
        return self._server_view

    def start(self, wait_ready: bool = True, timeout: float = 30.0) -> None:
        import httpx

        if self._thread is not None:
            return

        try:
            r = httpx.get(f"{self.url}/models", headers=api_headers(self.api_key_env), timeout=min(timeout, 10))
        except httpx.HTTPError as exc:
            raise SourceError(f"nothing answers at {self.shown_url} ({type(exc).__name__}); start the server or fix "
                              "--url") from None
        if r.status_code in (401, 403):
            raise SourceError(f"{self.shown_url}/models answered HTTP {r.status_code}: pass the key's variable with "
                              "--api-key-env")
        if r.status_code >= 400:
            raise SourceError(f"{self.shown_url}/models answered HTTP {r.status_code}: is --url the API base (…/v1)?")
        if not self.model:
            try:
                self.model = r.json()["data"][0]["id"]
            except (ValueError, KeyError, IndexError, TypeError):
                pass
        self.meta.model = self.model or self.meta.model
        self._check_vocabulary()
        self._thread = threading.Thread(target=self._run, name="http-source", daemon=True)
        self._thread.start()
        self._sink.log(f"streaming to {public_url(self._url())} as {self.model or 'the server default'}")

    PROBE = "The quick brown fox jumps over the lazy dog, 1234 times."

    def _check_vocabulary(self) -> None:
        """Send prompt ids (as the local engines read them) only where the server tokenizes as we do:
        llama-server's and vLLM's /tokenize must give our ids for a probe text. Else the prompt goes as text
        and the server's tokenizer decides its length (said in the log and in every record)."""
        import httpx

        if self.tokenizer is None or self.endpoint != "completions":
            return
        from engines.base import Prompt

        ours = list(self.tokenizer(Prompt("probe", text=self.PROBE)))
        base = self.url[:-3] if self.url.endswith("/v1") else self.url
        theirs = None
        for body in ({"content": self.PROBE, "add_special": True}, {"prompt": self.PROBE}):  # llama-server, vLLM
            try:
                r = httpx.post(f"{base}/tokenize", json=body, headers=api_headers(self.api_key_env), timeout=5)
                if r.status_code == 200:
                    theirs = r.json().get("tokens")
                    break
            except (httpx.HTTPError, ValueError):
                break
        if theirs is not None and [t for t in theirs if t != ours[0]] == [t for t in ours if t != ours[0]]:
            self.send_ids = True
            self._sink.log("the server tokenizes as the local model does: prompts go as token ids")
        else:
            self._sink.log("prompts go as text: the server's tokenizer decides their length ("
                           + ("its /tokenize disagrees with ours)" if theirs is not None else "no /tokenize)"))

    def _prompt_ids(self, req: Request, prefix: str) -> list[int]:
        ids = list(self.tokenizer(req.prompt))
        if not prefix:
            return ids
        return ids[:1] + list(self.tokenizer.text_ids(prefix)) + ids[1:]  # BOS, the unique prefix, the prompt

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until the current stream level has had its warmup (one short request per new stream)."""
        deadline = time.monotonic() + timeout
        while self._warmed_b < self.b and not self._stop:
            if self._thread is None or not self._thread.is_alive() or time.monotonic() > deadline:
                raise SourceError(f"warmup of {self.b} streams at {self.shown_url} did not finish within "
                                  f"{timeout:.0f} s")
            time.sleep(0.02)

    def scale_to(self, k: int) -> None:
        if k != 1:
            self._sink.log("K does not apply to a remote server: B sets the concurrent streams")

    def set_batch(self, mode: str, b: int, b_cap: int | None = None, seq_ctx: int | None = None) -> None:
        self.b = b
        self._poke()

    def set_load(self, load: Load | None) -> None:
        with self._lock:
            self._requests.set_load(load)
        self._poke()

    def set_users(self, users: int | None) -> None:
        with self._lock:
            if users is not None:
                self._requests.set_users(users)
            self._auto_users = users is None
        self._poke()

    def pause(self, paused: bool = True) -> None:
        self._paused = paused
        if not paused:
            self._requests.resume(time.perf_counter_ns())
        self._poke()

    def workers(self) -> list[WorkerInfo]:
        with self._lock:
            return [w.public() for w in self._slots.values()]

    def run_requests(self, load: Load, timeout: float | None = None, should_stop=None) -> list[RequestRecord]:
        self._collector = RecordCollector(load.arrivals.total)
        self.set_load(load)
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
    def _url(self) -> str:
        return f"{self.url}/{'chat/completions' if self.endpoint == 'chat' else 'completions'}"

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
        """One aiohttp session per stream slot, its connection kept across the slot's requests."""
        self._wake = asyncio.Event()
        tasks: set[asyncio.Task] = set()
        clients: dict = {}
        free: list[int] = []  # free slot numbers, lowest first
        used = 0  # slots 1..used exist

        def client_for(slot: int):
            if slot not in clients:
                clients[slot] = new_session()
            return clients[slot]

        def spawn(coro) -> None:
            t = asyncio.create_task(coro)
            tasks.add(t)
            t.add_done_callback(tasks.discard)

        last_scrape = 0.0
        scrape_client = new_session()
        try:
            while not self._stop:
                while used < self.b:
                    used += 1
                    heapq.heappush(free, used)
                if self._warmed_b < self.b:  # a new stream level: warm its new streams before measuring
                    b = self.b
                    await asyncio.gather(*(self._warmup(client_for(s)) for s in range(self._warmed_b + 1, b + 1)))
                    self._warmed_b = b
                    continue
                self._arrivals(time.perf_counter_ns())
                while self._pending and len(self._active) < self.b:
                    while free and free[0] > self.b:  # slots above a lowered B stay unused
                        heapq.heappop(free)
                    if not free:
                        break
                    slot = heapq.heappop(free)
                    req = self._pending.popleft()
                    req.k, req.b = 1, self.b  # the level that serves it
                    if not self._load_started:
                        self._load_started = True
                        self._sink.put(LoadStarted(time.perf_counter_ns()))
                    self._active[req.request_id] = (slot, req)
                    spawn(self._one(client_for(slot), slot, req, lambda s=slot: heapq.heappush(free, s)))
                if time.monotonic() - last_scrape >= 1.0:
                    last_scrape = time.monotonic()
                    spawn(self._scrape(scrape_client))
                self._wake.clear()
                nxt = self._requests.next_wakeup_ns() if not self._paused else None
                wait = 0.5 if nxt is None else max(0.0, min(0.5, (nxt - time.perf_counter_ns()) / 1e9))
                try:
                    await asyncio.wait_for(self._wake.wait(), wait)
                except asyncio.TimeoutError:
                    pass
        finally:
            # every stream closed (its generator and connection), not abandoned to the garbage collector
            for t in list(tasks):
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            for c in [scrape_client, *clients.values()]:
                await c.close()

    def _arrivals(self, now: int) -> None:
        if self._paused:
            return
        with self._lock:
            if self._auto_users:
                self._requests.set_users(self.b)
            self._pending.extend(self._requests.due(now, len(self._pending) + len(self._active), rep=self.rep, k=1,
                                                    b=self.b, mode="http"))

    async def _scrape(self, client) -> None:
        base = self.url[:-3] if self.url.endswith("/v1") else self.url
        try:
            import aiohttp

            async with client.get(f"{base}/metrics", timeout=aiohttp.ClientTimeout(total=2.0)) as r:
                self._server_view = parse_prometheus(await r.text()) if r.status == 200 else {}
        except Exception:  # noqa: BLE001 - a server without /metrics simply has no view
            self._server_view = {}

    def _body(self, prompt: str | list[int], max_tokens: int, ignore_eos: bool) -> dict:
        return endpoint_body(self.endpoint, self.model, prompt, max_tokens, ignore_eos,
                             cache_prompt=self.prefix_cache.cache_prompt)

    async def _warmup(self, client) -> None:
        """One short request outside the records: the server's first-request costs are not a level's TTFT."""
        text, _ = self.prefix_cache.apply("Warm up.", self.run_id, 0)
        res = await stream_one(client, self._url(), self._body(text, WARMUP_TOKENS, True),
                               api_headers(self.api_key_env), self.stall_s, read_to_end=True)
        if res.error:
            self._sink.log(f"warmup request: {res.error}", "warn")

    async def _one(self, client, slot: int, req: Request, release) -> None:
        with self._lock:
            info = self._slots.setdefault(slot, WorkerInfo(slot, state=S.IDLE, ready_ns=time.perf_counter_ns()))
            info.state, info.current, info.active = S.SERVING, req.request_id, 1
        t_started = time.perf_counter_ns()
        text = req.prompt.text or ("hello " * max(1, (req.prompt.synthetic_tokens or 1) - 1)).strip()
        text, prefix = self.prefix_cache.apply(text, self.run_id, req.request_id)
        ids = self._prompt_ids(req, prefix) if self.send_ids else None
        body = self._body(ids or text, req.max_tokens, req.ignore_eos)

        def on_tokens(ts: list[int]) -> None:
            self._sink.put(Tokens(slot, req.request_id, ts))

        try:
            res = await stream_one(client, self._url(), body, api_headers(self.api_key_env), self.stall_s,
                                   on_tokens=on_tokens if self._sink.events is not None else None, read_to_end=True)
        finally:
            release()
        rec = build_record(
            req, self.meta, self.run_id, res.token_ns, worker=slot, t_started_ns=t_started,
            prompt_tokens=res.prompt_tokens if res.prompt_tokens is not None else (len(ids) if ids else None),
            finish_reason=res.finish_reason, error=res.error,
            model=self.model or self.meta.model,
            server_output_tokens=(res.server_output_tokens
                                  if res.server_output_tokens not in (None, len(res.token_ns)) else None),
            server_view=dict(self._server_view or {}, **({"timings": res.timings} if res.timings else {})) or None,
            extra={"token_count": res.token_count, "prefix_cache": self.prefix_cache.describe(),
                   "prompt_prefix": prefix, "prompt_sent_as": "token ids" if ids else "text"},
        )
        with self._lock:
            self._active.pop(req.request_id, None)
            info.requests_done += 1
            info.tokens += len(res.token_ns)
            info.current, info.active, info.state = None, 0, S.IDLE
            if rec.t_first_token_ns:
                info.last_ttft_s = (rec.t_first_token_ns - rec.t_scheduled_ns) / 1e9
        self._sink.record(rec, self._collector)  # read once: run_requests may clear it meanwhile
        if self._wake:
            self._wake.set()
