"""A loopback OpenAI-compatible server with no model: harness calibration for the HTTP path.

Every stream follows the same fixed schedule, however many are open (no batching cost): its first
chunk at the request's arrival + TTFT, then one token every ITL. Its numbers are the schedule, not a
measurement; what a client measures beyond it is the client's (and the loopback's) own overhead.

    python -m engines.null_server --port 8000 [--host 127.0.0.1] [--ttft-ms 20] [--itl-ms 10]
                                  [--tokens-per-chunk 1] [--usage continuous|final|none] [--reasoning-tokens 0]
                                  [--eos-after N] [--cold-first-ms MS [--cold-over-tokens N]]
                                  [--serve batching|serialising] [--prefix-block N]
                                  [--itl-cv CV] [--first-gap-ms MS] [--gap-seed N] [--empty-chunks]
                                  [--step-clock]

In a test:  with NullServer(Behaviour(ttft_ms=20, itl_ms=10)) as srv: ... srv.url  (http://127.0.0.1:PORT/v1)
or          url, stop = start_null_server(Behaviour(usage="final")); ...; stop()

Standard library only: asyncio.start_server and a minimal HTTP/1.1 parser (keep-alive, Content-Length
bodies, chunked responses), so one process holds hundreds of concurrent streams cheaply. Endpoints:
GET /v1/models, POST /v1/completions and /v1/chat/completions (stream: true only; "prompt" a string or
a list of token ids; max_tokens honoured; cache_prompt, ignore_eos, stream_options, temperature are
accepted and ignored), POST /tokenize (llama-server style), GET /metrics, GET /health.

--usage continuous: every chunk carries the running usage (vLLM's continuous_usage_stats), then a final
usage-only chunk; final: only a last usage chunk with empty choices (OpenAI's include_usage); none: no
usage at all. --tokens-per-chunk N packs N tokens into a chunk, sent at its last token's due time (like
vLLM merging outputs, or speculative decoding). --reasoning-tokens N: on the chat endpoint, the first N
tokens of every answer come as delta.reasoning_content (a reasoning model's thinking, as vLLM and
llama-server stream it), the rest as delta.content. --eos-after N: every answer ends after N tokens with
finish_reason "stop" (at most max_tokens), whatever ignore_eos says: a server that does not honour it.
--cold-first-ms MS: the first request asking more than --cold-over-tokens tokens sends its first chunk MS later
(a cold first request; the client's warmup test).
Prompt tokens: a list's length, or words + 1 (BOS).
--itl-cv CV draws the gaps between tokens from a gamma distribution of mean --itl-ms and that coefficient of
variation, by position (engines/null.gap_schedule, seed --gap-seed: every request has the same gaps, so a run's
truth still follows from the schedule); --first-gap-ms sets the first gap apart from the rest (a real server's
first decode step after the prefill). --empty-chunks sends, before every chunk that carries tokens, one that
carries none (completions: text ""; chat: delta {} — as llama-server and others stream), and on the completions
endpoint a first chunk with no text (chat has its role-only chunk already).

--serve batching (the default): every open stream keeps its own schedule, as a server that batches them all
at no cost; serialising: one request at a time, the others wait in arrival order (FIFO) and a request's
schedule (TTFT, then ITL) starts when it gets the server: total tok/s stays that of one stream whatever B,
and TTFT grows with queue position, as `python -m llama_cpp.server` does; interleaving: every open stream is
answered, but the server does one thing at a time (a prefill, then one token of one stream) in turns, so the
streams overlap and total tok/s stays that of one stream (mlx_lm.server before it batched). --step-clock (batching
only): the streams step together, as a real batcher's do: every token due at a multiple of ITL since the server
started, a stream's first at the first step after its arrival + TTFT (TTFT up to one ITL longer); without it each
stream keeps its own phase, and a closed loop's streams drift apart by the client's jitter. /metrics says
null:requests_running (streams being answered) and null:requests_waiting (queued), as llama-server's
requests_processing and requests_deferred. --prefix-block N adds vLLM's prefix-cache counters
(vllm:prefix_cache_queries_total, _hits_total; PrefixCounter): a server whose hit rate comes from counter rises.

The last event before [DONE] carries `timings`, where llama-server puts its own, with the server's side of
one request on its perf_counter_ns clock (CLOCK_MONOTONIC on Linux: the same clock as a client's records on
this machine): null_arrival_ns (the request read), null_first_due_ns (arrival + TTFT) and null_first_sent_ns
(its first chunk handed to the kernel). benchmarks/harness_overhead.py splits each TTFT's bias with them.
"""
from __future__ import annotations

import argparse
import asyncio
import email.utils
import gc
import json
import select
import selectors
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engines.null import gap_schedule, offsets_ns, text_ids

USAGE_MODES = ("continuous", "final", "none")
SERVE_MODES = ("batching", "serialising", "interleaving")
MODEL_ID = "null"
TOKEN_TEXT = " tok"  # JSON-safe as it is: spliced into the chunk templates
_TOKEN_BYTES = TOKEN_TEXT.encode()


class _HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            411: "Length Required", 500: "Internal Server Error"}


def _prompt_seq(req: dict[str, Any], chat: bool) -> list[Any]:
    """A prompt as the null server tokenizes it: token ids as given; text as BOS + its words (chat: every
    message's text words, roles aside)."""
    if chat:
        msgs = req.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise _HttpError(400, "messages must be a non-empty list")
        words: list[Any] = ["<s>"]
        for m in msgs:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list):  # content parts: count the text ones
                content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            words += str(content or "").split()
        return words
    prompt = req.get("prompt")
    if isinstance(prompt, str):
        return ["<s>", *prompt.split()]
    if isinstance(prompt, list) and prompt and all(isinstance(x, int) and not isinstance(x, bool) for x in prompt):
        return prompt
    raise _HttpError(400, "prompt must be a string or a non-empty list of token ids (one prompt per request)")


class PrefixCounter:
    """vLLM's prefix-cache counters as the null server keeps them (`--prefix-block N`): every prompt token is a
    query; its hits are the longest run of whole N-token blocks from its start that an earlier prompt also began
    with (vLLM hashes full blocks, each chained to the one before); nothing is evicted."""

    def __init__(self, block: int):
        if block < 1:
            raise ValueError("prefix_block must be ≥ 1")
        self.block, self.queries, self.hits = block, 0, 0
        self._seen: set[int] = set()

    def add(self, tokens: list[Any]) -> None:
        self.queries += len(tokens)
        h, hit = 0, True
        for i in range(len(tokens) // self.block):
            h = hash((h, tuple(tokens[i * self.block:(i + 1) * self.block])))
            hit = hit and h in self._seen
            self.hits += self.block if hit else 0
            self._seen.add(h)


class LateHistogram:
    """Chunk lateness in fixed bins: 1 µs up to 1 ms, 10 µs up to 10 ms, 1 ms up to 1 s, then one bin. Adding is
    two comparisons; a quantile walks ≈ 2900 bins. (It kept the last 100 000 values and sorted them on every
    /metrics scrape: 10–20 ms each at 100 000, once a second from every client process, during which no chunk
    went out.)"""

    BINS = 1000 + 900 + 990 + 1

    def __init__(self) -> None:
        self.counts = [0] * self.BINS
        self.count = 0
        self.total_ns = 0

    def add(self, ns: int) -> None:
        ns = max(0, ns)
        self.count += 1
        self.total_ns += ns
        if ns < 1_000_000:
            self.counts[ns // 1_000] += 1
        elif ns < 10_000_000:
            self.counts[1000 + (ns - 1_000_000) // 10_000] += 1
        elif ns < 1_000_000_000:
            self.counts[1900 + (ns - 10_000_000) // 1_000_000] += 1
        else:
            self.counts[-1] += 1

    @staticmethod
    def upper_ns(i: int) -> int:
        """The upper edge of bin i (the last bin's: 1 s)."""
        if i < 1000:
            return (i + 1) * 1_000
        if i < 1900:
            return 1_000_000 + (i - 999) * 10_000
        return min(10_000_000 + (i - 1899) * 1_000_000, 1_000_000_000)

    def quantile(self, f: float) -> int:
        """The upper edge of the bin holding the f-quantile (0 for no chunks)."""
        if not self.count:
            return 0
        rank = min(self.count - 1, int(f * self.count))
        seen = 0
        for i, n in enumerate(self.counts):
            seen += n
            if seen > rank:
                return self.upper_ns(i)
        return self.upper_ns(self.BINS - 1)


@dataclass(frozen=True)
class Behaviour:
    """How the null server answers: its TTFT and ITL, tokens per chunk, where usage is reported (continuous,
    final, none), reasoning tokens before the answer, an end of sequence after N tokens, its Date header's skew,
    a cold first request (ms late, for answers over N tokens; None: none), how it serves (batching: every
    stream on its own schedule; serialising: one request at a time) and the block of vLLM's prefix-cache
    counters (0: not kept)."""

    ttft_ms: float = 20.0
    itl_ms: float = 10.0
    tokens_per_chunk: int = 1
    usage: str = "continuous"
    reasoning_tokens: int = 0
    eos_after: int | None = None
    clock_skew_s: float = 0.0
    cold_first: tuple[float, int] | None = None
    serve: str = "batching"
    prefix_block: int = 0
    itl_cv: float = 0.0  # the gaps drawn (gap_schedule), not constant
    first_gap_ms: float | None = None  # the first gap apart from the rest
    gap_seed: int = 0
    empty_chunks: bool = False  # a chunk with no token before every one with tokens
    step_clock: bool = False  # batching on one step clock: a stream's first chunk at the first step (a multiple of
    # ITL since the server started) at or after arrival + TTFT, then every step with the others', as a server
    # that batches its streams sends a token of each one per step


class NullApp:
    """The protocol handler and its counters; one per server. `late` counts each chunk's send time − its due
    time (LateHistogram), the server's own schedule accuracy."""

    def __init__(self, b: Behaviour = Behaviour()):
        ttft_ms, itl_ms, tokens_per_chunk, usage = b.ttft_ms, b.itl_ms, b.tokens_per_chunk, b.usage
        reasoning_tokens, eos_after, clock_skew_s, serve = b.reasoning_tokens, b.eos_after, b.clock_skew_s, b.serve
        cold_first_ms, cold_over_tokens = b.cold_first or (0.0, 0)
        self.prefix = PrefixCounter(b.prefix_block) if b.prefix_block else None
        if serve not in SERVE_MODES:
            raise ValueError(f"serve must be one of {', '.join(SERVE_MODES)}")
        self.serve = serve
        self._one: asyncio.Lock | None = None  # serialising: the server, one request at a time (FIFO)
        self.waiting = 0
        self.free_at = 0  # interleaving: when the server is next free (perf_counter_ns)
        if ttft_ms < 0 or itl_ms < 0 or cold_first_ms < 0:
            raise ValueError("ttft_ms and itl_ms must be ≥ 0")
        if reasoning_tokens < 0:
            raise ValueError("reasoning_tokens must be ≥ 0")
        self.reasoning_tokens = reasoning_tokens
        self.clock_skew_s = clock_skew_s  # its Date header reads this far ahead of this machine's clock
        if eos_after is not None and eos_after < 1:
            raise ValueError("eos_after must be ≥ 1")
        self.eos_after = eos_after
        if tokens_per_chunk < 1:
            raise ValueError("tokens_per_chunk must be ≥ 1")
        if usage not in USAGE_MODES:
            raise ValueError(f"usage must be one of {', '.join(USAGE_MODES)}")
        self.ttft_ns = round(ttft_ms * 1e6)
        self.itl_ns = round(itl_ms * 1e6)
        if b.itl_cv < 0 or (b.first_gap_ms is not None and b.first_gap_ms < 0):
            raise ValueError("itl_cv and first_gap_ms must be ≥ 0")
        self.gaps = (b.itl_cv, b.first_gap_ms, b.gap_seed) if b.itl_cv > 0 or b.first_gap_ms is not None else None
        self._due: list[int] = [0]  # each token's due time after the first (ns), for the longest answer so far
        if b.step_clock and (serve != "batching" or self.gaps is not None or self.itl_ns <= 0):
            raise ValueError("step_clock needs serve batching, itl_ms > 0 and constant gaps (no itl_cv, first_gap_ms)")
        self.step0 = time.perf_counter_ns() if b.step_clock else None  # step_clock: step 0 of the server's clock
        self.empty_chunks = b.empty_chunks
        self.tokens_per_chunk = tokens_per_chunk
        self.usage = usage
        self.requests_total = 0
        self.connections_total = 0  # TCP connections accepted: a client that keeps its streams' alive makes few
        self.running = 0
        self.late = LateHistogram()
        self._ids = 0
        # cold_first (ms, n): the first request asking more than n tokens starts ms later (a server whose first
        # real request is slow, past the short requests a client warms its streams with)
        self.cold_ns, self.cold_over_tokens = round(cold_first_ms * 1e6), cold_over_tokens

    # --- HTTP/1.1 --------------------------------------------------------------------------------
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: requests one after another while the client keeps it alive."""
        self.connections_total += 1
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                if line in (b"\r\n", b"\n"):
                    continue
                parts = line.decode("latin-1").split()
                if len(parts) != 3:
                    await self._json(writer, 400, {"error": {"message": "malformed request line"}}, keep=False)
                    break
                method, target, version = parts
                headers = {}
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                conn = headers.get("connection", "").lower()
                keep = conn != "close" if version.upper() == "HTTP/1.1" else conn == "keep-alive"
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    await self._json(writer, 411, {"error": {"message": "send a Content-Length body"}}, keep=False)
                    break
                try:
                    n = int(headers.get("content-length") or 0)
                except ValueError:
                    await self._json(writer, 400, {"error": {"message": "bad Content-Length"}}, keep=False)
                    break
                body = await reader.readexactly(n) if n > 0 else b""
                t_arrival = time.perf_counter_ns()
                keep = await self._route(writer, method.upper(), target.split("?", 1)[0], body, t_arrival, keep)
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass  # the client went away, or sent a line over the reader's limit
        finally:
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - closing a dead transport
                pass

    async def _json(self, writer: asyncio.StreamWriter, status: int, obj: object, keep: bool,
                    ctype: str = "application/json") -> bool:
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: {ctype}\r\n"
                f"Date: {email.utils.formatdate(time.time() + self.clock_skew_s, usegmt=True)}\r\n"
                f"Content-Length: {len(data)}\r\n" + ("" if keep else "Connection: close\r\n") + "\r\n")
        writer.write(head.encode() + data)
        await writer.drain()
        return keep

    async def _route(self, writer: asyncio.StreamWriter, method: str, path: str, body: bytes, t_arrival: int,
                     keep: bool) -> bool:
        p = path.rstrip("/")
        gets: dict[str, Callable[[], dict[str, Any] | bytes]] = {
            "/v1/models": self._models, "/models": self._models, "/metrics": self._metrics,
            "/health": lambda: {"status": "ok"}}
        posts = {"/v1/completions": False, "/completions": False,
                 "/v1/chat/completions": True, "/chat/completions": True}
        try:
            if p in gets:
                if method != "GET":
                    raise _HttpError(405, f"{path} takes GET")
                out = gets[p]()
                if isinstance(out, bytes):
                    return await self._json(writer, 200, out, keep, "text/plain; version=0.0.4")
                return await self._json(writer, 200, out, keep)
            if p in posts or p == "/tokenize":
                if method != "POST":
                    raise _HttpError(405, f"{path} takes POST")
                try:
                    req = json.loads(body or b"{}")
                except json.JSONDecodeError:
                    raise _HttpError(400, "the body is not JSON") from None
                if not isinstance(req, dict):
                    raise _HttpError(400, "the body must be a JSON object")
                if p == "/tokenize":
                    content = req.get("content")
                    if not isinstance(content, str):
                        raise _HttpError(400, "content must be a string")
                    return await self._json(writer, 200,
                                            {"tokens": text_ids(content, bos=bool(req.get("add_special")))}, keep)
                return await self._stream(writer, posts[p], req, t_arrival, keep)
            raise _HttpError(404, f"no route {method} {path}")
        except _HttpError as e:
            err = {"message": e.message, "type": "invalid_request_error", "code": e.status}
            return await self._json(writer, e.status, {"error": err}, keep)

    def offset_ns(self, i: int) -> int:
        """Token i's due time after the first token's (ns): i × ITL, or the running sum of the gaps where they vary."""
        if self.gaps is None:
            return i * self.itl_ns
        if i >= len(self._due):
            cv, first_ms, seed = self.gaps
            n = max(i + 1, 2 * len(self._due))
            gaps = gap_schedule(self.itl_ns / 1e9, n, first_s=None if first_ms is None else first_ms / 1e3, cv=cv,
                                seed=seed)
            self._due = offsets_ns(self.itl_ns, n, gaps)
        return self._due[i]

    def _models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "owned_by": "inference-top",
                                            "created": 0}]}

    def _metrics(self) -> bytes:
        q = {f: self.late.quantile(f) / 1e9 for f in (0.5, 0.9, 0.99, 1.0)}
        lines = [
            "# HELP null:requests_total Streaming requests received.",
            "# TYPE null:requests_total counter",
            f"null:requests_total {self.requests_total}",
            "# HELP null:requests_running Streams being answered now.",
            "# TYPE null:requests_running gauge",
            f"null:requests_running {self.running}",
            "# HELP null:requests_waiting Requests queued for the server (serialising mode).",
            "# TYPE null:requests_waiting gauge",
            f"null:requests_waiting {self.waiting}",
            "# HELP null:connections_total TCP connections accepted.",
            "# TYPE null:connections_total counter",
            f"null:connections_total {self.connections_total}",
            "# HELP null:chunk_late_seconds Chunk send time minus its scheduled time (every chunk; quantiles are "
            "their 1 µs, 10 µs or 1 ms bin's upper edge).",
            "# TYPE null:chunk_late_seconds summary",
            *(f'null:chunk_late_seconds{{quantile="{f:g}"}} {v:.9f}' for f, v in q.items()),
            f"null:chunk_late_seconds_sum {self.late.total_ns / 1e9:.9f}",
            f"null:chunk_late_seconds_count {self.late.count}",
            *([] if not self.prefix else [
                "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.",
                "# TYPE vllm:prefix_cache_queries_total counter",
                f'vllm:prefix_cache_queries_total{{engine="0",model_name="{MODEL_ID}"}} {self.prefix.queries}',
                "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.",
                "# TYPE vllm:prefix_cache_hits_total counter",
                f'vllm:prefix_cache_hits_total{{engine="0",model_name="{MODEL_ID}"}} {self.prefix.hits}']),
        ]
        return ("\n".join(lines) + "\n").encode()

    # --- the stream --------------------------------------------------------------------------------
    async def _stream(self, writer: asyncio.StreamWriter, chat: bool, req: dict[str, Any], t_arrival: int,
                      keep: bool) -> bool:
        max_tokens, stop = self._limits(req)
        seq = _prompt_seq(req, chat)
        n_prompt = len(seq)
        if self.prefix:
            self.prefix.add(seq)
        self.requests_total += 1
        self._ids += 1
        rid = f"{'chatcmpl' if chat else 'cmpl'}-null-{self._ids}"
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                     b"Transfer-Encoding: chunked\r\n" + (b"" if keep else b"Connection: close\r\n") + b"\r\n")
        # chunks come from bytes templates: ≈20 % less server CPU per chunk than json.dumps
        head = b'data: {"id":"%s","object":"%s","created":%d,"model":"%s","choices":[' % (
            rid.encode(), obj.encode(), created, MODEL_ID.encode())
        if self.serve == "serialising":
            lock = self._one = self._one or asyncio.Lock()
            self.waiting += 1
            try:
                await lock.acquire()
            finally:
                self.waiting -= 1
            try:  # its schedule starts when it gets the server
                return await self._answer(writer, chat, head, n_prompt, max_tokens, stop,
                                          max(t_arrival, time.perf_counter_ns()), keep)
            finally:
                lock.release()
        return await self._answer(writer, chat, head, n_prompt, max_tokens, stop, t_arrival, keep)

    async def _answer(self, writer: asyncio.StreamWriter, chat: bool, head: bytes, n_prompt: int, max_tokens: int,
                      stop: bytes, t_start: int, keep: bool) -> bool:
        """One answer on its schedule from t_start: its first chunk at t_start + TTFT, then one every ITL."""
        answer = _Answer(self, writer.transport, chat, head, n_prompt, max_tokens, stop, t_start)
        if self.cold_ns and max_tokens > self.cold_over_tokens:
            answer.cold_ns, self.cold_ns = self.cold_ns, 0
        self.running += 1
        if self.serve == "interleaving":  # its prefill takes the server in turn
            answer.take_turn(t_start, self.ttft_ns)
        elif self.step0 is not None:  # its first chunk waits for the next step of the shared clock
            answer.shift_ns = (self.step0 - t_start - answer.cold_ns - self.ttft_ns) % self.itl_ns
        try:
            answer.at(answer.due_of(min(answer.n, max_tokens)))
            if not await answer.ended:
                return False
            await writer.drain()  # the whole answer is in the transport: wait until it is out
        finally:
            if not answer.ended.done():
                answer.ended.set_result(False)
            self.running -= 1
        return keep

    def _limits(self, req: dict[str, Any]) -> tuple[int, bytes]:
        """The request's max_tokens (fewer where the server ends at EOS first) and the finish reason it ends with."""
        if req.get("stream") is not True:
            raise _HttpError(400, "only streaming requests (\"stream\": true) are served")
        max_tokens = req.get("max_tokens", req.get("max_completion_tokens", 16))
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise _HttpError(400, "max_tokens must be an integer ≥ 1")
        stop = b'"length"'
        if self.eos_after is not None and self.eos_after < max_tokens:  # EOS, ignore_eos or not
            max_tokens, stop = self.eos_after, b'"stop"'
        return max_tokens, stop


class _Answer:
    """One streamed answer: each chunk written from a timer callback at its due time (no task wakes per chunk: a
    third of the server's CPU per chunk went to the sleeping coroutine), then the next one's timer. `ended`
    is True once the last chunk is in the transport, False where the client went away."""

    __slots__ = ("app", "transport", "chat", "head", "n_prompt", "max_tokens", "stop", "t_arrival", "n",
                 "continuous", "loop", "ended", "sent", "first_sent", "cold_ns", "shift_ns")

    def __init__(self, app: NullApp, transport: asyncio.WriteTransport, chat: bool, head: bytes, n_prompt: int,
                 max_tokens: int, stop: bytes, t_arrival: int) -> None:
        self.app, self.transport, self.chat, self.head = app, transport, chat, head
        self.n_prompt, self.max_tokens, self.stop, self.t_arrival = n_prompt, max_tokens, stop, t_arrival
        self.n = app.tokens_per_chunk
        self.continuous = app.usage == "continuous"
        self.loop = asyncio.get_running_loop()
        self.ended: asyncio.Future[bool] = self.loop.create_future()
        self.sent = 0  # tokens sent so far
        self.first_sent = 0  # when the first chunk was handed to the kernel (perf_counter_ns)
        self.cold_ns = 0  # this answer's extra delay before its first chunk (NullApp's cold path)
        self.shift_ns = 0  # how much later than its own schedule its turns came (interleaving) or its steps (step_clock)

    def due_of(self, upto: int) -> int:
        return self.t_arrival + self.cold_ns + self.app.ttft_ns + self.app.offset_ns(upto - 1) + self.shift_ns

    def event(self, choices: bytes, done: int | None, timings: bytes = b"") -> bytes:
        if done is None:
            return self.head + choices + b"]" + timings + b"}\n\n"
        n_prompt = self.n_prompt
        return self.head + choices + (b'],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}%s}'
                                      b'\n\n' % (n_prompt, done, n_prompt + done, timings))

    def choice(self, done: int, upto: int, finish: bytes) -> bytes:
        """This chunk's tokens (tokens done+1 … upto) as its choice."""
        if not self.chat:
            return b'{"index":0,"text":"%s","logprobs":null,"finish_reason":%s}' % (
                _TOKEN_BYTES * (upto - done), finish)
        thinking = max(0, min(upto, self.app.reasoning_tokens) - done)  # of this chunk's tokens
        parts = ([b'"reasoning_content":"%s"' % (_TOKEN_BYTES * thinking)] if thinking else []) + (
            [b'"content":"%s"' % (_TOKEN_BYTES * (upto - done - thinking))] if upto - done > thinking else [])
        return b'{"index":0,"delta":{%s},"logprobs":null,"finish_reason":%s}' % (b",".join(parts), finish)

    def tick(self) -> None:
        if self.ended.done():
            return
        if self.transport.is_closing():
            self.ended.set_result(False)
            return
        done, max_tokens, n = self.sent, self.max_tokens, self.n
        upto = min(done + n, max_tokens)
        due = self.due_of(upto)
        out = b""
        if self.chat and done == 0:  # the role chunk carries no token
            out = self.event(b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
                             b'"finish_reason":null}', 0 if self.continuous else None)
        if self.app.empty_chunks:  # a chunk that carries no token (and, on completions, a first one with no text)
            empty = (b'{"index":0,"delta":{},"logprobs":null,"finish_reason":null}' if self.chat else
                     b'{"index":0,"text":"","logprobs":null,"finish_reason":null}')
            out += self.event(empty, done if self.continuous else None) * (2 if done == 0 and not self.chat else 1)
        choice = self.choice(done, upto, self.stop if upto == max_tokens else b"null")
        last = upto == max_tokens
        if done == 0:
            self.first_sent = time.perf_counter_ns()
        # the last event says when this request arrived and its first chunk went out (this module's doc)
        timings = (b',"timings":{"null_arrival_ns":%d,"null_first_due_ns":%d,"null_first_sent_ns":%d}'
                   % (self.t_arrival, self.due_of(min(n, max_tokens)), self.first_sent)) if last else b""
        usage = self.app.usage
        out += self.event(choice, upto if self.continuous else None, b"" if usage != "none" else timings)
        self.sent = upto
        if last:
            if usage != "none":
                out += self.event(b"", upto, timings)
            out += b"data: [DONE]\n\n"
        self.transport.write(b"%x\r\n%s\r\n" % (len(out), out) + (b"0\r\n\r\n" if last else b""))
        self.app.late.add(time.perf_counter_ns() - due)
        if last:
            self.ended.set_result(True)
        else:
            if self.app.serve == "interleaving":  # its next token takes the server in turn
                self.take_turn(due, self.due_of(min(upto + n, max_tokens)) - due)
            self.at(self.due_of(min(upto + n, max_tokens)))

    def take_turn(self, own_ns: int, cost_ns: int) -> None:
        """Interleaving: work of cost_ns that this answer's own schedule starts at own_ns waits for the server
        (now at the earliest) and holds it; the answer's later dues shift by the wait."""
        start = max(own_ns, self.app.free_at, time.perf_counter_ns())
        self.shift_ns += start - own_ns
        self.app.free_at = start + cost_ns

    def at(self, due: int) -> None:
        delay = due - time.perf_counter_ns()
        if delay > 0:
            self.loop.call_later(delay / 1e9, self.tick)
        else:
            self.loop.call_soon(self.tick)


FD_SETSIZE = 1024  # select() takes descriptors below this


class PreciseSelector(selectors.DefaultSelector):
    """An event loop's selector that waits to the microsecond. epoll_wait takes whole milliseconds and
    Python rounds a wait up, so a timer due in 0.3 ms fired ≈ 1 ms late (the null server's chunks and an open
    loop's arrivals, ≈ 0.5 ms on average); this one waits on the epoll descriptor itself with select(), whose
    timeout is in microseconds and which returns as soon as any registered descriptor is ready, then takes
    the events without waiting. Elsewhere (kqueue: nanoseconds) it is the default selector."""

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout > 0 and isinstance(self, getattr(selectors, "EpollSelector", ())) \
                and self.fileno() < FD_SETSIZE:
            select.select([self.fileno()], [], [], timeout)
            timeout = 0
        return super().select(timeout)


def precise_event_loop() -> asyncio.AbstractEventLoop:
    """A new asyncio loop whose timers fire on time to the microsecond (PreciseSelector)."""
    return asyncio.SelectorEventLoop(PreciseSelector())


async def _serve(app: NullApp, host: str, port: int) -> asyncio.Server:
    return await asyncio.start_server(app.handle, host, port, backlog=1024, reuse_address=True)


class NullServer:
    """The null server in a background thread with its own event loop: start() → base URL; stop().

    Also a context manager: `with NullServer(Behaviour(itl_ms=5)) as srv: srv.url`. port=0 takes a free port."""

    def __init__(self, behaviour: Behaviour = Behaviour(), host: str = "127.0.0.1", port: int = 0):
        self.app = NullApp(behaviour)
        self.host, self.port = host, port
        self.url: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self) -> str:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="null-server", daemon=True)
        self._thread.start()
        if not ready.wait(30):
            raise RuntimeError("the null server did not start within 30 s")
        if self._error is not None:
            raise self._error
        if self.url is None:
            raise RuntimeError("the null server started without an address")
        return self.url

    def _run(self, ready: threading.Event) -> None:
        loop = precise_event_loop()
        self._loop = loop
        server = None
        try:
            server = loop.run_until_complete(_serve(self.app, self.host, self.port))
            self.port = server.sockets[0].getsockname()[1]
            self.url = f"http://{self.host}:{self.port}/v1"
            ready.set()
            loop.run_forever()
        except BaseException as exc:  # noqa: BLE001 - handed to start()
            self._error = exc
            ready.set()
        finally:
            if server is not None:
                server.close()
            tasks = asyncio.all_tasks(loop)
            for t in tasks:
                t.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.close()

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> NullServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_null_server(behaviour: Behaviour = Behaviour()) -> tuple[str, Callable[[], None]]:
    """Start a NullServer answering so in a background thread: (base URL, stop)."""
    srv = NullServer(behaviour)
    return srv.start(), srv.stop


def free_port() -> int:
    """A TCP port free on loopback now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(ttft_ms: float, itl_ms: float, *args: str, timeout_s: float = 30.0) -> tuple[Any, str]:
    """The null server in a process of its own on a free loopback port (so a client's loop does not share its
    GIL), waited for until GET /v1/models answers: (the process, its base URL). RuntimeError, the process
    killed, when it does not answer within timeout_s. `args`: more of its flags (--usage final, …)."""
    import os
    import subprocess

    from engines import http_sync

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])]))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "engines.null_server", "--port", str(port), "--ttft-ms",
                             str(ttft_ms), "--itl-ms", str(itl_ms), *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    end = time.monotonic() + timeout_s
    while True:
        try:
            if http_sync.get(f"{url}/models", 1).status_code == 200:
                return proc, url
        except http_sync.HTTPError:
            pass
        if time.monotonic() > end or proc.poll() is not None:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"the null server at {url} did not answer within {timeout_s:.0f} s")
        time.sleep(0.05)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m engines.null_server", description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ttft-ms", type=float, default=20.0, help="arrival → first chunk (default 20)")
    ap.add_argument("--itl-ms", type=float, default=10.0, help="gap between tokens (default 10)")
    ap.add_argument("--tokens-per-chunk", type=int, default=1, help="tokens packed into one SSE chunk (default 1)")
    ap.add_argument("--usage", choices=USAGE_MODES, default="continuous",
                    help="usage in every chunk (continuous), only at the end (final), or never (none)")
    ap.add_argument("--reasoning-tokens", type=int, default=0,
                    help="chat: the first N tokens of an answer as delta.reasoning_content (default 0)")
    ap.add_argument("--eos-after", type=int, default=None,
                    help="end every answer after N tokens with finish_reason stop, ignoring ignore_eos")
    ap.add_argument("--clock-skew-s", type=float, default=0.0,
                    help="stamp the Date header this many seconds off this machine's clock (clock-check tests)")
    ap.add_argument("--cold-first-ms", type=float, default=0.0,
                    help="the first request asking more than --cold-over-tokens tokens starts this much later (a cold "
                         "first request; default 0)")
    ap.add_argument("--cold-over-tokens", type=int, default=0, help="see --cold-first-ms (default 0: any request)")
    ap.add_argument("--serve", choices=SERVE_MODES, default="batching",
                    help="batching: every stream on its own schedule (default); serialising: one request at a time, "
                         "the rest queued; interleaving: every stream answered, one prefill or token at a time")
    ap.add_argument("--itl-cv", type=float, default=0.0,
                    help="draw the gaps between tokens from a gamma distribution with this CV (default 0: constant)")
    ap.add_argument("--first-gap-ms", type=float, default=None, help="the first gap between tokens (default: as the rest)")
    ap.add_argument("--gap-seed", type=int, default=0, help="the seed of the gaps drawn (default 0)")
    ap.add_argument("--empty-chunks", action="store_true",
                    help="send a chunk with no token before every chunk with tokens (and a first one with no text)")
    ap.add_argument("--step-clock", action="store_true",
                    help="batching on one step clock: every stream's tokens at the same steps (multiples of --itl-ms "
                         "since the server started), a stream's first one at the first step after its TTFT")
    ap.add_argument("--prefix-block", type=int, default=0,
                    help="count vLLM's prefix-cache queries and hits in blocks of N tokens on /metrics (default 0: off)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    a = ap.parse_args(argv)
    try:
        app = NullApp(Behaviour(a.ttft_ms, a.itl_ms, a.tokens_per_chunk, a.usage, a.reasoning_tokens, a.eos_after,
                                a.clock_skew_s, cold_first=(a.cold_first_ms, a.cold_over_tokens), serve=a.serve,
                                prefix_block=a.prefix_block, itl_cv=a.itl_cv, first_gap_ms=a.first_gap_ms,
                                gap_seed=a.gap_seed, empty_chunks=a.empty_chunks, step_clock=a.step_clock))
    except ValueError as exc:
        ap.error(str(exc))

    async def run() -> None:
        server = await _serve(app, a.host, a.port)
        gc.collect()
        gc.freeze()  # what is here now is never garbage: full collections stay short (fewer late chunks)
        print(f"null server on http://{a.host}:{a.port}/v1 (ttft {a.ttft_ms:g} ms, itl {a.itl_ms:g} ms, "
              f"{a.tokens_per_chunk} token(s)/chunk, usage {a.usage}, {a.serve})", file=sys.stderr, flush=True)
        async with server:
            await server.serve_forever()

    loop = precise_event_loop()
    try:
        loop.run_until_complete(run())
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"null server: cannot listen on {a.host}:{a.port}: {exc}", file=sys.stderr)
        return 1
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
