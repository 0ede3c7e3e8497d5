"""B concurrent streams per endpoint against one or more OpenAI-compatible servers (llama-server, vLLM,
mlx_lm.server, exo …): a LoadSource (sources/base.py) that spawns nothing. One asyncio loop in a thread
keeps up to B streams open per endpoint (an aiohttp session per stream slot, its connection kept), fed from
one shared queue by the same closed-loop users or Poisson arrivals as the local fleet, with TTFT counted
from the scheduled time. Token timestamps reach the live window as each chunk arrives. Every ≥ 1 s it
scrapes each server's Prometheus /metrics where there is one (absent metrics stay absent).

Many endpoints (K = endpoints in use): a request goes to the endpoint with the fewest outstanding requests
(ties: the one after the last chosen), or round robin. An endpoint that stops answering (connection
refused, reset, dropped mid-stream) is marked down: its in-flight requests end as failed records, the
others go on; it is asked for /models every second and rejoins, after a warmup, when it answers again.
"""
from __future__ import annotations

import asyncio
import heapq
import queue
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from engines.http_openai import (EndpointError, api_headers, endpoint_body, models_answer, new_session,
                                 new_stream_session, public_url, scrape_metrics, served_model, server_tokens,
                                 StreamResult, stream_one, stream_url, text_server_tokens)
from measure.core.metrics import ttft
from measure.core.records import Outcome, Request, RequestRecord, RunMeta, ServedBy, build_record
from measure.core.workload import Load, PrefixCache
from measure.sources.base import (Capabilities, Event, EventSink, LevelReady, LoadStarted,
                                  RecordCollector, SourceError, Started, Tokens, WorkerInfo, WorkerState)
from measure.sources.dispatch import Dispatcher
from measure.sources.loop_turns import Wake, eager_task_factory
from measure.sources.warmup import Warmup, WarmsUp

if TYPE_CHECKING:
    import aiohttp

    from engines.http_openai import StreamSession

    from engines.base import Prompt

WARMUP_TOKENS = 2
PROBE_EVERY_S = 1.0  # a down endpoint is asked for /models this often
ROUTING = ("least", "round-robin")
JUNCTION_CHARS = 64  # a text-only server's prompt: the prefix's merge with the body read over its first characters
READINGS_KEPT = 256  # prompt bodies whose reading is kept (HttpSource._reading)

S = WorkerState


class PromptTokenizer(Protocol):
    """engines/tokenizer.py's shape: a prompt's token ids as the local engines read them, and a text's."""

    def __call__(self, prompt: Prompt) -> list[int]: ...

    def text_ids(self, text: str) -> list[int]: ...

    def text_of(self, ids: list[int]) -> str: ...


@dataclass(frozen=True)
class Endpoint:
    """One server behind the shared queue: its API base, the chip it runs on (its β), a label for screens."""

    url: str
    chip: str | None = None
    label: str | None = None
    bandwidth_gbps: float | None = None  # the chip's spec figure, where the chip is known

    def shown(self) -> str:
        return public_url(self.url.rstrip("/"))

    def name(self) -> str:
        from urllib.parse import urlsplit

        if self.label:
            return self.label
        p = urlsplit(self.url)
        return (p.hostname or "?") + (f":{p.port}" if p.port else "")


@dataclass
class _Ep:
    """An endpoint's live state (loop thread; `info` under the source's lock)."""

    idx: int
    spec: Endpoint
    url: str
    shown: str
    info: WorkerInfo
    in_use: bool = True
    up: bool = True
    send_ids: bool = False
    count_text: bool = False  # takes text only, tokenizes as we do: the text of our ids goes, counted by ours
    model: str | None = None
    view: dict[str, float] | None = None  # its /metrics figures (None: not scraped yet; {}: none exposed)
    load_start: dict[str, float] | None = None  # …scraped once its streams warmed, before the load's first request
    clients: dict[int, StreamSession] = field(default_factory=dict)  # stream slot → its session (http_lean's)
    free: list[int] = field(default_factory=list)  # free slot numbers, a heap
    spare: list[int] = field(default_factory=list)  # free streams opened beyond B for an open loop (slots < 0)
    opened: int = 0  # streams opened beyond B so far
    used: int = 0  # slots 1..used exist
    warmed: int = 0  # streams warmed since it (re)joined
    warming: bool = False
    probing: bool = False
    outstanding: int = 0
    down_since: float | None = None
    last_probe: float = 0.0

    def capacity(self, b: int) -> int:
        return min(b, self.warmed)

    @property
    def base(self) -> str:
        """The server's root (its /tokenize and /metrics), the API base without /v1."""
        return self.url[:-3] if self.url.endswith("/v1") else self.url


@dataclass(frozen=True)
class HttpOptions:
    """How an HttpSource talks to its servers (each one a keyword of HttpSource, or given whole as `options`)."""

    endpoint: str = "completions"  # completions | chat
    model: str | None = None  # the model asked for (None: the one the server lists)
    api_key_env: str | None = None  # the environment variable holding the API key
    stall_s: float = 60.0  # a stream silent this long fails
    prefix_cache: PrefixCache = PrefixCache()
    tokenizer: PromptTokenizer | None = None  # engines/tokenizer.py's shape: prompts go as ids where it agrees
    routing: str = "least"  # over several endpoints: least | round-robin
    # an open loop's requests are sent when due, on a new stream where B are busy (the client never queues
    # them), unless B was asked as the client's cap (--b with an open loop): then they wait, and the cell says
    cap_open_loop: bool = False
    # a level's warmup before its first measured load (sources/warmup.py); bench's default is auto
    warmup: Warmup = Warmup(requests=0)
    answers: bool = False  # each record keeps its answer's text (extra.output_text: compare's answers, issue 58)


def _splice(ids: list[int], pre: list[int], keep: int | None = None) -> tuple[list[int], list[int]]:
    """A prompt's ids (BOS first) with a unique prefix's ids `pre` put in: (the prefix's ids sent, the prompt's ids
    after them; BOS in neither). The prefix's last `keep` ids (default: as many as fit with BOS and the prompt's
    last token kept) over the prompt's first ones, its end naming the request, so a server prefills what a local
    engine would (issue 58: the default workload's prompts of 8–15 tokens went as 24–31 with the prefix before
    them); a prompt of two tokens: the whole prefix before it."""
    room = len(ids) - 2
    if room < 1:
        return pre, ids[1:]
    keep = min(len(pre), room) if keep is None else keep
    return pre[len(pre) - keep:], ids[1 + keep:]


class HttpSource(WarmsUp):
    def __init__(self, url: str | Endpoint | list[str] | list[Endpoint] | list[str | Endpoint], meta: RunMeta,
                 b: int = 1, on_record: Callable[[RequestRecord], None] | None = None, events: bool = True,
                 options: HttpOptions | None = None, **given: Any) -> None:
        """`given`: HttpOptions' fields as keywords (HttpSource(url, meta, endpoint="chat") is
        HttpSource(url, meta, options=HttpOptions(endpoint="chat"))), the same as HttpPool takes."""
        opts = replace(options, **given) if options else HttpOptions(**given)
        given_urls = url if isinstance(url, list) else [url]
        specs = [e if isinstance(e, Endpoint) else Endpoint(e) for e in given_urls]
        if not specs:
            raise ValueError("no endpoint")
        if opts.routing not in ROUTING:
            raise ValueError(f"routing must be one of {', '.join(ROUTING)}")
        self.options = opts
        self.routing, self.cap_open_loop = opts.routing, opts.cap_open_loop
        self.endpoint, self.model, self.stall_s = opts.endpoint, opts.model, opts.stall_s
        self.api_key_env = opts.api_key_env
        self.prefix_cache, self.tokenizer = opts.prefix_cache, opts.tokenizer
        self.warmup = opts.warmup
        self._eps = [_Ep(i, e, e.url.rstrip("/"), e.shown(),
                         WorkerInfo(i, state=S.STARTING, label=e.name(), bandwidth_gbps=e.bandwidth_gbps))
                     for i, e in enumerate(specs)]
        self.shown_url = ", ".join(ep.shown for ep in self._eps)  # what logs, records and screens say
        self.meta = RunMeta(**{**meta.__dict__, "mode": "http"})
        self._sink = EventSink(events, on_record)
        self.events: queue.Queue[Event] | None = self._sink.events
        self.target_k = len(self._eps)
        self.mode = "http"
        self.b = b
        self.rep = 0
        self.oom_killed: list[tuple[int, int, str]] = []  # nothing here runs under this machine's OOM killer
        self.run_id = uuid.uuid4().hex[:12]
        # the queue, the load's arrivals and start, the slot rule, pause and users (sources/dispatch.py)
        self._dispatch = Dispatcher(auto_users=True, on_start=lambda t: self._sink.put(LoadStarted(t)),
                                    cap_open_loop=self.cap_open_loop)
        self._active: dict[int, tuple[_Ep, int, Request]] = {}  # request id → (endpoint, slot, request)
        self._collector: RecordCollector | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: Wake | None = None
        self._spawn: Callable[[Coroutine[Any, Any, None]], None] | None = None  # the loop's, once it runs
        self._pumping = False
        self._scraper: aiohttp.ClientSession | None = None  # the loop's session for /metrics and /models
        self._thread: threading.Thread | None = None
        self._stop = False
        self._lock = threading.Lock()
        self._rr = 0  # the endpoint after the last one chosen
        self._level_sent = (self.target_k, b)  # the (K, B) the last LevelReady said (the first level: the load's)
        self.proc: int | None = None  # one process of a pool (sources/http_pool.py): its number, on each record
        self.level_b: int | None = None  # …and the pool's whole B, which its records say (self.b is its share)
        self._readings: dict[tuple[int, ...], tuple[str, int]] = {}  # a prompt body's text and count (_reading)

    @property
    def send_ids(self) -> bool:
        return any(ep.send_ids for ep in self._eps)

    # ---- the LoadSource face -----------------------------------------------------------------
    def capabilities(self) -> Capabilities:
        n = len(self._eps)
        return Capabilities(engine=self.meta.engine, weight_bytes=self.meta.model_bytes, modes=("http",),
                            scales_k=n > 1, local=False, batch_capacity=1 << 30, server_view=True,
                            simulated=False, endpoint=self.shown_url, max_k=n, level_ready=True)

    def server_view(self) -> dict[str, Any] | None:
        """One endpoint's figures; over several, the sum of each figure the scraped ones expose (KV use: the
        highest), None until one was scraped."""
        views = [ep.view for ep in self._eps if ep.in_use and ep.view is not None]
        if len(self._eps) == 1:
            return self._eps[0].view
        if not views:
            return None
        out: dict[str, float] = {}
        for v in views:
            for key, x in v.items():
                out[key] = max(out.get(key, 0.0), x) if key == "kv_cache_usage" else out.get(key, 0.0) + x
        return out

    def start(self, wait_ready: bool = True, timeout: float = 30.0) -> None:
        if self._thread is not None:
            return
        for ep in self._eps:
            self._check_endpoint(ep, timeout)
        models = sorted({ep.model for ep in self._eps if ep.model})
        self.meta.model = self.model or ", ".join(models) or self.meta.model
        self._thread = threading.Thread(target=self._run, name="http-source", daemon=True)
        self._thread.start()
        for ep in self._eps:
            self._sink.log(f"streaming to {public_url(self._url(ep))} as {ep.model or 'the server default'}"
                           + (f" ({ep.info.label})" if len(self._eps) > 1 else ""))
        if len(self._eps) > 1:
            self._sink.log(f"{len(self._eps)} endpoints behind one queue, routing: {self.routing_text()}")
        if wait_ready:
            self.wait_ready(timeout)

    def routing_text(self) -> str:
        return ("least outstanding requests (ties: the next in turn)" if self.routing == "least"
                else "round robin (an endpoint with no free stream is skipped)")

    def _check_endpoint(self, ep: _Ep, timeout: float) -> None:
        which = f" (endpoint {ep.idx + 1} of {len(self._eps)})" if len(self._eps) > 1 else ""
        try:
            listed = served_model(ep.url, ep.shown, api_headers(self.api_key_env), min(timeout, 10), which)
        except EndpointError as exc:
            raise SourceError(str(exc)) from None
        ep.model = self.model or listed
        ep.send_ids, ep.count_text = self._check_vocabulary(ep)

    PROBE = "The quick brown fox jumps over the lazy dog, 1234 times."

    def _check_vocabulary(self, ep: _Ep) -> tuple[bool, bool]:
        """(send ids, count text): prompt ids (as the local engines read them) go only where the server tokenizes
        as we do: llama-server's and vLLM's /tokenize must give our ids for a probe text. A server that takes text
        only but tokenizes as we do (python -m llama_cpp.server's /extras/tokenize) is sent the text of those ids,
        its prompt tokens counted by our tokenizer (it streams no usage). Else the prompt goes as text and the
        server's tokenizer decides its length (said in the log and in every record)."""
        if self.tokenizer is None or self.endpoint != "completions":
            return False, False
        from engines.base import Prompt

        ours = list(self.tokenizer(Prompt("probe", text=self.PROBE)))
        headers = api_headers(self.api_key_env)
        theirs, as_text = server_tokens(ep.base, self.PROBE, headers), False
        if theirs is None:
            theirs, as_text = text_server_tokens(ep.base, self.PROBE, headers), True
        who = f"{ep.info.label}: " if len(self._eps) > 1 else ""
        if theirs is not None and [t for t in theirs if t != ours[0]] == [t for t in ours if t != ours[0]]:
            self._sink.log(f"{who}the server tokenizes as the local model does: prompts go as "
                           + ("the text of the local ids, counted by the local tokenizer (it takes no ids)"
                              if as_text else "token ids"))
            return not as_text, as_text
        self._sink.log(f"{who}prompts go as text: the server's tokenizer decides their length ("
                       + ("its /tokenize disagrees with ours)" if theirs is not None else "no /tokenize)"))
        return False, False

    def _prompt_ids(self, req: Request, prefix: str) -> list[int]:
        assert self.tokenizer is not None  # prompts go as ids only where there is one (_check_vocabulary)
        ids = list(self.tokenizer(req.prompt))
        if not prefix:
            return ids
        head, body = _splice(ids, list(self.tokenizer.text_ids(prefix)))
        return ids[:1] + head + body

    def _prompt_text(self, req: Request, prefix: str) -> tuple[str, int]:
        """For a server that takes text only but tokenizes as we do (count_text): the text of our prompt ids with the
        unique prefix spliced in as _prompt_ids does (_splice), and its count (BOS included): the body's reading
        (_reading, once per body) and what the prefix adds before it, read over the junction. A junction can merge
        tokens ('1a6-2]' + '.' reads as one token fewer), so where the prefix lies over the prompt it moves a token
        earlier until the text reads as many as the ids (four tries; else the closest, counted)."""
        assert self.tokenizer is not None
        ids = list(self.tokenizer(req.prompt))
        pre = self.tokenizer.text_ids(prefix.rstrip()) if prefix else []
        head, body = _splice(ids, pre)
        want = 1 + len(head) + len(body)
        last = max(0, len(head) - 4) if head and len(ids) > 2 else len(head) - 1  # over the prompt: 4 junctions
        best: tuple[str, int] | None = None
        for keep in range(len(head), last, -1):  # each try the junction a token earlier
            h, b = _splice(ids, pre, keep)
            text, n_body = self._reading(tuple(b))
            h_text = self.tokenizer.text_of(h) if h else ""
            probe = text[:JUNCTION_CHARS]  # the body's first words: what the head adds is read over them
            n = 1 + n_body + len(self.tokenizer.text_ids(h_text + probe)) - len(self.tokenizer.text_ids(probe))
            if best is None or abs(n - want) < abs(best[1] - want):
                best = (h_text + text, n)
            if n == want:
                break
        assert best is not None
        return best

    def _reading(self, body: tuple[int, ...]) -> tuple[str, int]:
        """A prompt body's text and the tokens it reads as, made to read as many as its ids: a body that does not
        read back (a synthetic prompt's repeated filler merges) is cut to length in its own reading, or lengthened
        by its ids before the last where the last merged (four tries; else the closest). Kept per body (a
        2048-token synthetic prompt: ≈ 100 ms once, not per request)."""
        if (hit := self._readings.get(body)) is not None:
            return hit
        assert self.tokenizer is not None
        text = self.tokenizer.text_of(list(body))
        best = (text, len(self.tokenizer.text_ids(text)))
        for k in range(4):
            if best[1] == len(body):
                break
            read = self.tokenizer.text_ids(best[0])
            d = len(body) - len(read)
            text = self.tokenizer.text_of(read[:d] if d < 0 else read + list(body[len(body) - d - k:len(body) - k]))
            if abs((n := len(self.tokenizer.text_ids(text))) - len(body)) < abs(best[1] - len(body)):
                best = (text, n)
        if len(self._readings) >= READINGS_KEPT:
            self._readings.clear()
        self._readings[body] = best
        return best

    def _ready(self) -> bool:
        return all(ep.warmed >= self.b for ep in self._eps if ep.in_use and ep.up)

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until every endpoint in use that answers has warmed the current stream level (one short request
        per new stream)."""
        deadline = time.monotonic() + timeout
        while not self._ready() and not self._stop:
            if self._thread is None or not self._thread.is_alive() or time.monotonic() > deadline:
                raise SourceError(f"warmup of {self.b} streams at {self.shown_url} did not finish within "
                                  f"{timeout:.0f} s")
            time.sleep(0.02)
        if not any(ep.up for ep in self._eps if ep.in_use):
            raise SourceError(f"no endpoint answers ({self.shown_url})")

    def scale_to(self, k: int) -> None:
        """K endpoints in use: the first K given. One left out finishes what it holds, then retires."""
        n = len(self._eps)
        if n == 1:
            if k != 1:
                self._sink.log("K does not apply to one server: B sets the concurrent streams (give --url "
                               "several times for K endpoints)")
            return
        k = max(1, min(k, n))
        with self._lock:
            for ep in self._eps:
                want = ep.idx < k
                if want and not ep.in_use:
                    ep.in_use, ep.warmed = True, 0
                    ep.info.state = S.WARMING if ep.up else S.DOWN
                    ep.info.ready_ns = None
                elif not want and ep.in_use:
                    ep.in_use = False
                    if ep.up:
                        ep.info.state = S.RETIRING if ep.outstanding else S.RETIRED
            self.target_k = k
        self._poke()

    def set_batch(self, mode: str, b: int, b_cap: int | None = None, seq_ctx: int | None = None) -> None:
        self.b = b
        self._poke()

    def set_load(self, load: Load | None, first_id: int | None = None, id_step: int = 1) -> None:
        """`first_id`, `id_step`: this load's request ids run first_id, first_id + step … (a pool's process
        takes every step-th id of its closed loop; a segment's ids come from its index in the schedule)."""
        with self._lock:
            self._dispatch.set_load(load, first_id, id_step)
        self._poke()

    def set_users(self, users: int | None) -> None:
        with self._lock:
            self._dispatch.set_users(users)
        self._poke()

    def pause(self, paused: bool = True) -> None:
        with self._lock:
            self._dispatch.pause(paused)
        self._poke()

    def workers(self) -> list[WorkerInfo]:
        """One row per endpoint: its state, streams in use, requests, errors and server view."""
        with self._lock:
            out = []
            for ep in self._eps:
                w = ep.info.public()
                w.active, w.streams, w.server = ep.outstanding, self.b if ep.in_use else 0, ep.view
                out.append(w)
            return out

    def close(self, grace: float = 1.0) -> None:
        self._stop = True
        self._poke()
        if self._thread:
            self._thread.join(timeout=grace + 2)

    # ---- the loop ----------------------------------------------------------------------------
    def _url(self, ep: _Ep) -> str:
        return stream_url(ep.url, self.endpoint)

    def _poke(self) -> None:
        if self._loop and self._wake and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:  # closed meanwhile (the source closed): nothing left to wake
                pass

    def _run(self) -> None:
        from engines.null_server import precise_event_loop  # timers to the µs: an open loop's arrivals on time

        self._loop = precise_event_loop()
        # a task runs at once to its first wait: a request taken up is sent in the same turn of the loop, not the
        # next, and aiohttp's body with it (asyncio's eager tasks, or sources/loop_turns.py's on 3.11: docs/design/client-processes.md)
        self._loop.set_task_factory(eager_task_factory())
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._wake = Wake()
        tasks: set[asyncio.Task[None]] = set()

        def spawn(coro: Coroutine[Any, Any, None]) -> None:
            t = asyncio.create_task(coro)
            tasks.add(t)
            t.add_done_callback(tasks.discard)

        self._spawn = spawn

        last_scrape = 0.0
        scrape_client = self._scraper = new_session(len(self._eps))
        try:
            while not self._stop:
                now_s = time.monotonic()
                for ep in self._eps:
                    if not ep.in_use:
                        continue
                    if not ep.up:
                        if not ep.probing and now_s - ep.last_probe >= PROBE_EVERY_S:
                            ep.probing, ep.last_probe = True, now_s
                            spawn(self._probe(ep, scrape_client))
                        continue
                    while ep.used < self.b:
                        ep.used += 1
                        heapq.heappush(ep.free, ep.used)
                    if ep.warmed < self.b and not ep.warming:  # a new stream level: warm its new streams
                        ep.warming = True
                        spawn(self._warm(ep, self.b))
                asked = (self.target_k, self.b)  # read before _ready(): a step after it is seen next time
                if asked != self._level_sent and self._ready():
                    self._level_sent = asked
                    self._sink.put(LevelReady(time.perf_counter_ns(), *asked, "http"))
                self._pump()  # none until every endpoint in use has warmed its streams (the load's start)
                if now_s - last_scrape >= 1.0:
                    last_scrape = now_s
                    for ep in self._eps:
                        if ep.in_use and ep.up:
                            spawn(self._scrape(ep, scrape_client))
                self._wake.clear()
                await self._wake.wait(self._dispatch.wait_s(0.5))
        finally:
            # every stream closed (its generator and connection), not abandoned to the garbage collector
            for t in list(tasks):
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            for c in [scrape_client, *(c for ep in self._eps for c in ep.clients.values())]:
                await c.close()

    def _client(self, ep: _Ep, slot: int) -> StreamSession:
        if slot not in ep.clients:
            ep.clients[slot] = new_stream_session(self._url(ep))
        return ep.clients[slot]

    def _route(self) -> tuple[_Ep, bool] | None:
        """The endpoint for the next request (the dispatcher's rule, over the endpoints in use and answering from
        the one after the last chosen): one with a warmed stream free; in an open loop not capped by the client,
        where none is free, the one with the fewest outstanding (True: a stream beyond B)."""
        n = len(self._eps)
        order = [ep for i in range(n) if (ep := self._eps[(self._rr + i) % n]).in_use and ep.up]
        for ep in order:
            while ep.outstanding < ep.capacity(self.b) and ep.free and ep.free[0] > ep.capacity(self.b):
                heapq.heappop(ep.free)  # slots above a lowered B (or not warmed)
        got = self._dispatch.choose([ep for ep in order if ep.free], lambda ep: ep.outstanding,
                                    lambda ep: ep.capacity(self.b), first=self.routing == "round-robin",
                                    spill=[ep for ep in order if ep.warmed])
        if got is not None:
            self._rr = (got[0].idx + 1) % n
        return got

    def _send(self, choice: tuple[_Ep, bool], req: Request) -> bool:
        """A request on a free stream of the endpoint _route chose (or on a stream beyond B: one opened before and
        free again, else a new one)."""
        ep, beyond = choice
        if not beyond or (ep.free and ep.free[0] <= ep.capacity(self.b)):
            slot = heapq.heappop(ep.free)
        elif ep.spare:
            slot = ep.spare.pop()
        else:
            ep.opened += 1
            slot = -ep.opened
        req.k, req.b = self._serving_k(), self.level_b or self.b  # the level that serves it
        self._active[req.request_id] = (ep, slot, req)
        ep.outstanding += 1
        with self._lock:
            ep.info.state, ep.info.current = S.SERVING, req.request_id
        assert self._spawn is not None  # _pump sends only once the loop runs
        self._spawn(self._one(ep, slot, req))
        return True

    def _pump(self) -> None:
        """Release what is due and send it, on free streams: each turn of the loop's main task, and at once when a
        request ends (a closed loop's next request is due then: waiting for the main task's next turn, behind
        every stream's reads of that turn, was most of the dispatch time at 64 streams, docs/design/client-processes.md).
        Not re-entered: a request that ends inside its own send (it failed before its first wait) leaves the
        rest to the main task, which its end wakes."""
        if self._pumping or self._stop or self._spawn is None:
            return
        self._pumping = True
        try:
            self._arrivals()
            self._dispatch.dispatch(self._route, self._send)
        finally:
            self._pumping = False

    def _serving_k(self) -> int:
        """K on the records: the endpoints serving now (in use, answering, a stream warmed), not the K asked,
        so one that is down or still warming is not counted (as the fleet's records say K − 1 after a worker
        dies)."""
        return max(1, sum(1 for ep in self._eps if ep.in_use and ep.up and ep.warmed))

    def _arrivals(self) -> None:
        with self._lock:
            self._dispatch.release(len(self._active), rep=self.rep, k=self.target_k, b=self.b, mode="http",
                                   slots=self.b * max(1, sum(1 for ep in self._eps if ep.in_use and ep.up)),
                                   ready=self._ready())

    def _mark_down(self, ep: _Ep, why: str) -> None:
        if not ep.up:
            return
        ep.up, ep.warmed, ep.down_since = False, 0, time.monotonic()
        ep.last_probe = ep.down_since
        with self._lock:
            ep.info.state, ep.info.error, ep.info.ready_ns = S.DOWN, why, None
        left = sum(1 for e in self._eps if e.in_use and e.up)
        self._sink.log(f"endpoint {ep.info.label} down: {why}; its in-flight requests fail, "
                       + (f"{left} other endpoint{'s' if left != 1 else ''} go on" if left else
                          "no endpoint answers: requests wait") + "; it rejoins when it answers again"
                       + (f"; records say K={self._serving_k()} until then" if left else ""), "error")
        for slot in [s for s in ep.clients if not any(a[0] is ep and a[1] == s for a in self._active.values())]:
            asyncio.ensure_future(ep.clients.pop(slot).close())
        ep.free, ep.used, ep.spare = [], 0, []

    async def _probe(self, ep: _Ep, client: aiohttp.ClientSession) -> None:
        """A down endpoint: does /models answer again? Then warm its streams and let it rejoin."""
        try:
            ok = await models_answer(client, ep.url, api_headers(self.api_key_env))
        finally:
            ep.probing = False
        if ok and not ep.up and not self._stop:
            away = time.monotonic() - (ep.down_since or time.monotonic())
            ep.up, ep.view = True, None
            with self._lock:
                ep.info.state, ep.info.error = (S.WARMING if ep.in_use else S.RETIRED), None
            self._sink.log(f"endpoint {ep.info.label} answers again after {away:.1f} s: warming its streams, "
                           "then it rejoins")
            self._poke()

    async def _scrape(self, ep: _Ep, client: aiohttp.ClientSession) -> None:
        ep.view = await scrape_metrics(client, ep.base)

    def _body(self, ep: _Ep, prompt: str | list[int], max_tokens: int, ignore_eos: bool) -> dict[str, Any]:
        return endpoint_body(self.endpoint, ep.model, prompt, max_tokens, ignore_eos,
                             cache_prompt=self.prefix_cache.cache_prompt)

    async def _warm(self, ep: _Ep, b: int) -> None:
        """One short request per new stream, outside the records: the server's first-request costs are not
        a level's TTFT. An endpoint that does not answer is marked down."""
        try:
            with self._lock:
                if ep.info.state != S.SERVING:
                    ep.info.state = S.WARMING
            text, _ = self.prefix_cache.apply("Warm up.", self.run_id, 0)
            results = await asyncio.gather(*(
                stream_one(self._client(ep, s), self._url(ep), self._body(ep, text, WARMUP_TOKENS, True),
                           api_headers(self.api_key_env), self.stall_s, read_to_end=True)
                for s in range(ep.warmed + 1, b + 1)))
            lost = next((r for r in results if r.unreachable), None)
            if lost is not None:
                self._mark_down(ep, lost.error or "unreachable")
                return
            for r in results:
                if r.error:
                    self._sink.log(f"warmup request ({ep.info.label}): {r.error}", "warn")
            if ep.up and ep.load_start is None:  # the counters before the load: a rise counts its first wave
                assert self._scraper is not None
                ep.load_start = ep.view = await scrape_metrics(self._scraper, ep.base)
            if ep.up:
                ep.warmed = max(ep.warmed, b)
                with self._lock:
                    if ep.info.ready_ns is None:
                        ep.info.ready_ns = time.perf_counter_ns()
                    if ep.in_use and ep.outstanding == 0:
                        ep.info.state = S.IDLE
        finally:
            ep.warming = False
            if self._wake:
                self._wake.set()

    async def _one(self, ep: _Ep, slot: int, req: Request) -> None:
        t_started = time.perf_counter_ns()
        self._sink.put(Started(ep.idx, req.request_id, t_started))
        text = req.prompt.text or ("hello " * max(1, (req.prompt.synthetic_tokens or 1) - 1)).strip()
        text, prefix = self.prefix_cache.apply(text, self.run_id, req.request_id, req.session_key)
        ids = self._prompt_ids(req, prefix) if ep.send_ids else None
        counted = None
        if ep.count_text:
            text, counted = self._prompt_text(req, prefix)
        body = self._body(ep, ids or text, req.max_tokens, req.ignore_eos)
        if req.messages and self.endpoint == "chat":  # a session's turn: the conversation as messages
            body["messages"] = [dict(m) for m in req.messages]
            body["messages"][0]["content"] = prefix + body["messages"][0]["content"]

        def on_tokens(ts: list[int]) -> None:
            self._sink.put(Tokens(ep.idx, req.request_id, ts))

        client = self._client(ep, slot)
        try:
            res = await stream_one(client, self._url(ep), body, api_headers(self.api_key_env), self.stall_s,
                                   on_tokens=on_tokens if self._sink.events is not None else None, read_to_end=True)
        finally:
            self._active.pop(req.request_id, None)
            ep.outstanding -= 1
        t_done = time.perf_counter_ns()
        with self._lock:  # a session's user takes the answer into its history, then thinks
            self._dispatch.finished(req, None if res.error else res.text, t_done)
        if res.unreachable:
            self._mark_down(ep, res.error or "unreachable")
        if ep.up:
            if slot > 0:
                heapq.heappush(ep.free, slot)
            else:
                ep.spare.append(slot)
        elif ep.clients.get(slot) is client:
            await ep.clients.pop(slot).close()
        # what is due now (a closed loop's next request) goes out before this one's record is made: at 64 streams
        # ending together each one's record stood between the stream's end and the next request (docs/design/client-processes.md)
        self._pump()
        rec = build_record(
            req, self.meta, self.run_id,
            Outcome(res.token_ns, t_started, t_done,
                    res.prompt_tokens if res.prompt_tokens is not None else (len(ids) if ids else counted),
                    res.finish_reason, res.error),
            ServedBy(ep.idx, model=ep.model or self.meta.model),
            server_output_tokens=(res.server_output_tokens
                                  if res.server_output_tokens not in (None, len(res.token_ns)) else None),
            server_view=self._view(ep, res),
            extra=self._extra(ep, slot, req, res, prefix, bool(ids), t_started),
            reasoning_tokens=res.reasoning_tokens,
            t_first_answer_ns=res.t_first_answer_ns,
        )
        self._ended(ep, req, res, rec)

    @staticmethod
    def _view(ep: _Ep, res: StreamResult) -> dict[str, Any] | None:
        """What a record carries of its server: the latest scrape, the response's timings, and on the endpoint's
        first record the scrape before the load (server_cache's counter rises start there)."""
        view = dict(ep.view or {}, **({"timings": res.timings} if res.timings else {}))
        if ep.load_start:
            view["load_start"] = ep.load_start
            ep.load_start = {}  # carried once; {} (not None): not scraped again at a later warmup
        return view or None

    def _extra(self, ep: _Ep, slot: int, req: Request, res: StreamResult, prefix: str, as_ids: bool,
               t_started: int) -> dict[str, Any]:
        """A record's `extra`: how it was sent and what the client saw beside its timestamps."""
        extra: dict[str, Any] = {"token_count": res.token_count, "prefix_cache": self.prefix_cache.describe(),
                                 "prompt_prefix": prefix, "prompt_sent_as": "token ids" if as_ids else (
                                     "text of the local ids" if ep.count_text else "text"),
                                 "slot": slot}
        if len(self._eps) > 1:
            extra.update(endpoint=ep.info.label, url=ep.shown, routing=self.routing)
        if self.proc is not None:
            extra["proc"] = self.proc
        if res.unreachable:
            extra["endpoint_down"] = True
        if res.resent:  # its kept-alive connection was closed under it: sent again on a new one (stream_one)
            extra["resent"] = True
        if req.waited_for_stream:  # released on schedule, then queued in the client until a stream was free
            extra["client_queue_ms"] = round((t_started - req.t_submitted_ns) / 1e6, 3)
        if res.cached_tokens is not None:  # the server's usage.prompt_tokens_details (prefix-cache hits)
            extra["cached_tokens"] = res.cached_tokens
        if self.options.answers:  # the answer as streamed: a server sends text, not token ids
            extra["output_text"] = res.text
        return extra

    def keep_answers(self) -> None:
        """From the next record on, each keeps its answer's text (HttpOptions.answers)."""
        self.options = replace(self.options, answers=True)

    def _ended(self, ep: _Ep, req: Request, res: StreamResult, rec: RequestRecord) -> None:
        """A request's record made (its user has the answer and what was due is sent: _one): its endpoint's row
        counts it, the record goes out, the loop wakes (a stream is free)."""
        with self._lock:
            info = ep.info
            info.requests_done += 1
            info.tokens += len(res.token_ns)
            if res.error:
                info.errors += 1
            if ep.outstanding == 0 and ep.up:
                info.current = None
                info.state = (S.IDLE if ep.in_use else S.RETIRED) if ep.warmed else info.state
            if rec.t_first_token_ns:
                info.last_ttft_s = ttft(rec)
        self._sink.record(rec, self._collector)  # read once: run_requests may clear it meanwhile
        if self._wake:
            self._wake.set()
