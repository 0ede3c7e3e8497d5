"""An OpenAI-compatible server as the engine: one streamed request, token timestamps from the SSE chunks.

Used by measure/sources/http.py, which keeps B such streams open at once. Each content chunk is stamped with
perf_counter_ns() when it arrives: when the socket read that completed it was handed over (on an http:// URL the
lean connection's data_received, which parses the events there and then; on https:// aiohttp's, through
_ArrivalClock), not when the reading coroutine got to it, a turn of the event loop later (under load, a busy
one). Its token
count: where chunks carry a running usage.completion_tokens (vLLM's continuous_usage_stats), the rise since
the previous chunk ("continuous-usage"); else a per-chunk completion_tokens_delta where sent, else one
("chunks"). If the final usage then reports more tokens than
the chunks gave (a server packing several tokens per chunk), the missing ones are spread evenly over the
chunks' arrival times ("chunks+final-usage"). A role-only chunk is not a token. A reasoning model's thinking
(delta.reasoning_content, as vLLM and llama-server send it, or delta.reasoning) is tokens like the answer's;
the arrival of the first answer chunk (text or delta.content) is kept apart, for the time to the first
answer token. The API key is read from the environment and never stored.

What else the source asks a server, and how its answers are read, is here too: its models (GET /models, the
check that a URL is an API base), its tokenizer (POST /tokenize, llama-server's or vLLM's), and its own
figures (GET /metrics, vLLM's and llama-server's names).
"""
from __future__ import annotations

import functools
import json
import os
import time
from collections import deque
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from engines.base import EngineError
from engines.spec import EngineDecl

if TYPE_CHECKING:
    import aiohttp

    from engines.http_lean import LeanResponse, LeanSession

    StreamSession = aiohttp.ClientSession | LeanSession
    Answer = aiohttp.ClientResponse | LeanResponse

SERVER_METRICS = {
    "running": ("vllm:num_requests_running", "llamacpp:requests_processing", "null:requests_running"),
    "waiting": ("vllm:num_requests_waiting", "llamacpp:requests_deferred", "null:requests_waiting"),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "llamacpp:kv_cache_usage_ratio"),
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    # counters: a run's figure is their rise over it (the report takes deltas, never totals)
    "generated_tokens_total": ("vllm:generation_tokens_total", "llamacpp:tokens_predicted_total"),
    "prompt_tokens_total": ("vllm:prompt_tokens_total", "llamacpp:prompt_tokens_total"),
    "requests_total": ("vllm:request_success_total",),
    # prefix cache and speculative decoding (vLLM's counters; llama-server's come per response, in its timings)
    "prefix_cache_hits_total": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "prefix_cache_queries_total": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "spec_decode_drafts_total": ("vllm:spec_decode_num_drafts_total",),
    "spec_decode_draft_tokens_total": ("vllm:spec_decode_num_draft_tokens_total",),
    "spec_decode_accepted_tokens_total": ("vllm:spec_decode_num_accepted_tokens_total",),
}

# a server of its own at --url, any OpenAI-compatible one
HTTP = EngineDecl("http", "http", "remote")


class EndpointError(EngineError):
    """A server that does not answer as an OpenAI-compatible API base: one line saying why and what to do."""


def parse_prometheus(text: str) -> dict[str, float]:
    """The server-view figures found in a /metrics page (sums over label sets); missing ones are absent. Read
    with prometheus_client's parser; a page it cannot read past some line gives the samples before it."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    try:
        for fam in text_string_to_metric_families(text):
            for smp in fam.samples:
                values[smp.name] = values.get(smp.name, 0.0) + smp.value
    except ValueError:
        pass
    out: dict[str, float] = {}
    for key, names in SERVER_METRICS.items():
        for n in names:
            if n in values:
                out[key] = values[n]
                break
    return out


def parse_slots(slots: Any) -> dict[str, float]:
    """KV occupancy from llama-server's /slots (its /metrics lost llamacpp:kv_cache_usage_ratio): the tokens
    the slots hold (their prompt and what they generated, kept for reuse after a request ends) over their
    n_ctx, summed. With a unified KV cache (-np auto) the slots share one context of n_ctx: kv_tokens ÷ n_ctx is
    then the cache's own share. {} for an answer without slots."""
    if not isinstance(slots, list):
        return {}
    held = room = 0
    for s in slots:
        if not isinstance(s, dict) or not isinstance(s.get("n_ctx"), int) or s["n_ctx"] <= 0:
            return {}
        held += int(s.get("n_prompt_tokens") or 0)
        room += s["n_ctx"]
    if not room:
        return {}
    return {"kv_cache_usage": min(1.0, held / room), "kv_tokens": float(held), "kv_slots_ctx": float(room)}


def stream_url(base: str, endpoint: str) -> str:
    """Where a streamed request goes: the API base's /chat/completions (endpoint "chat") or /completions."""
    return f"{base}/{'chat/completions' if endpoint == 'chat' else 'completions'}"


def served_model(url: str, shown: str, headers: dict[str, str], timeout: float, which: str = "") -> str | None:
    """GET {url}/models: the first model the server lists (None where its answer names none). An EndpointError
    where nothing answers, the key is refused or the URL is not the API base (`which`: the endpoint's place
    among several, said in the line)."""
    from engines import http_sync

    try:
        r = http_sync.get(f"{url}/models", timeout, headers)
    except http_sync.HTTPError as exc:
        raise EndpointError(f"nothing answers at {shown}{which} ({type(exc).__name__}); start the server or "
                            "fix --url") from None
    if r.status_code in (401, 403):
        raise EndpointError(f"{shown}/models answered HTTP {r.status_code}{which}: pass the key's variable "
                            "with --api-key-env")
    if r.status_code >= 400:
        raise EndpointError(f"{shown}/models answered HTTP {r.status_code}{which}: is --url the API base "
                            "(…/v1)?")
    try:
        return cast("str | None", r.json()["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def server_tokens(base: str, text: str, headers: dict[str, str]) -> list[int] | None:
    """The server's own token ids for a text: llama-server's /tokenize, else vLLM's (`base`: the server's root,
    without /v1); None where neither answers."""
    from engines import http_sync

    for body in ({"content": text, "add_special": True}, {"prompt": text}):  # llama-server, vLLM
        try:
            r = http_sync.post_json(f"{base}/tokenize", body, 5, headers)
            if r.status_code == 200:
                return cast("list[int] | None", r.json().get("tokens"))
        except (http_sync.HTTPError, ValueError):
            break
    return None


def text_server_tokens(base: str, text: str, headers: dict[str, str]) -> list[int] | None:
    """The token ids of a server that tokenizes but takes prompts as text only: python -m llama_cpp.server's
    /extras/tokenize (its completions read a string, never ids, and stream no usage); None where it does not answer."""
    from engines import http_sync

    try:
        r = http_sync.post_json(f"{base}/extras/tokenize", {"input": text}, 5, headers)
        return cast("list[int] | None", r.json().get("tokens")) if r.status_code == 200 else None
    except (http_sync.HTTPError, ValueError, AttributeError):
        return None


async def models_answer(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> bool:
    """Whether GET {url}/models answers below HTTP 400 within 2 s (a down endpoint asked again)."""
    import asyncio

    import aiohttp

    try:
        async with session.get(f"{url}/models", headers=headers, timeout=aiohttp.ClientTimeout(total=2.0)) as r:
            return r.status < 400
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
        return False


_NO_SLOTS: set[str] = set()  # servers whose /slots did not answer: not asked again


async def scrape_metrics(session: aiohttp.ClientSession, base: str) -> dict[str, float]:
    """The server's own figures from its /metrics (parse_prometheus); {} where it has none. Where /metrics
    gives no KV use (llama-server now), its /slots does (parse_slots), asked while it answers."""
    try:
        import aiohttp

        async with session.get(f"{base}/metrics", timeout=aiohttp.ClientTimeout(total=2.0)) as r:
            out = parse_prometheus(await r.text()) if r.status == 200 else {}
    except Exception:  # noqa: BLE001 - a server without /metrics simply has no view
        out = {}
    if "kv_cache_usage" not in out and base not in _NO_SLOTS:
        slots: dict[str, float] = {}
        try:
            async with session.get(f"{base}/slots", timeout=aiohttp.ClientTimeout(total=2.0)) as r:
                slots = parse_slots(await r.json(content_type=None)) if r.status == 200 else {}
                if not slots:  # not llama-server, or its /slots is off (--no-slots): not asked again
                    _NO_SLOTS.add(base)
        except Exception:  # noqa: BLE001 - no answer this time: asked again at the next scrape
            pass
        out.update(slots)
    return out


@dataclass
class StreamResult:
    token_ns: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    prompt_tokens: int | None = None
    server_output_tokens: int | None = None
    timings: dict[str, Any] | None = None  # llama-server's per-response timings block, where sent
    # how len(token_ns) was counted: "continuous-usage" | "chunks" | "chunks+final-usage"
    token_count: str = "chunks"
    unreachable: bool = False  # the server could not be reached or dropped the connection (not an HTTP error)
    reasoning_tokens: int = 0  # tokens of reasoning chunks (in token_ns too)
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens: prompt tokens from its cache
    t_first_answer_ns: int | None = None  # the first chunk with answer text, where reasoning came before it
    text: str = ""  # the answer's text as streamed (a multi-turn session's next turn carries it)
    resent: bool = False  # sent again on a new connection: the kept-alive one was closed under it (stream_one)


def endpoint_body(endpoint: str, model: str | None, prompt: str | list[int], max_tokens: int, ignore_eos: bool,
                  cache_prompt: bool | None = False, continuous_usage: bool | None = True) -> dict[str, Any]:
    """The streaming request body. `prompt` is a text, or token ids (the completions endpoint only, so
    engines that share a tokenizer get the same ids). cache_prompt (llama-server honours it, others ignore
    it) and stream_options.continuous_usage_stats (vLLM) are sent unless None."""
    if not isinstance(prompt, str):
        if endpoint == "chat":
            raise ValueError("the chat endpoint takes a text prompt, not token ids")
        if (not isinstance(prompt, list) or not prompt
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in prompt)):
            raise ValueError("prompt must be a text or a non-empty list of int token ids")
    stream_options: dict[str, Any] = {"include_usage": True}
    if continuous_usage is not None:
        stream_options["continuous_usage_stats"] = continuous_usage
    body: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0, "stream": True,
                            "stream_options": stream_options}
    if cache_prompt is not None:
        body["cache_prompt"] = cache_prompt
    if ignore_eos:
        body["ignore_eos"] = True  # vLLM and llama-server honour it; others ignore it
    if model:
        body["model"] = model
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


@functools.lru_cache(maxsize=64)  # asked once per request: parsing it again was ≈ 5 % of a client's CPU
def public_url(url: str) -> str:
    """The URL as it may be shown, logged or recorded: credentials written into it (user:password@) hidden."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@functools.lru_cache(maxsize=64)
def _without_userinfo(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    p = urlsplit(url)
    return urlunsplit((p.scheme, (p.hostname or "") + (f":{p.port}" if p.port else ""), p.path, p.query, p.fragment))


def api_headers(api_key_env: str | None) -> dict[str, str]:
    if not api_key_env:
        return {}
    key = os.environ.get(api_key_env)
    return {"Authorization": f"Bearer {key}"} if key else {}


class _Counter:
    """Turns SSE chunks into token timestamps (the counting rules in this module's docstring)."""

    def __init__(self, res: StreamResult, on_tokens: Callable[[list[int]], None] | None):
        self.res = res
        self.on_tokens = on_tokens
        self.counted = 0  # tokens in res.token_ns so far
        self.continuous: bool | None = None  # decided by the first content chunk: a running usage or not
        self.chunk_ts: list[tuple[int, int]] = []  # (arrival ns, tokens counted) per content chunk
        self.chunk_chars: list[int] = []  # the text (answer or thinking) each content chunk carried, in characters
        self.answer_seen = False  # a chunk with answer text has come
        self.reasoning_chunks = 0  # content chunks of thinking before the answer's first
        self.server_reasoning: int | None = None  # usage.completion_tokens_details.reasoning_tokens, where sent
        self.texts: list[str] = []  # the answer's pieces, joined into res.text at the end (not a copy per chunk)

    def chunk(self, chunk: dict[str, Any], t: int) -> None:
        res = self.res
        usage = chunk.get("usage") or {}
        if usage:
            res.prompt_tokens = usage.get("prompt_tokens", res.prompt_tokens)
            res.server_output_tokens = usage.get("completion_tokens", res.server_output_tokens)
            done = usage.get("completion_tokens_details")  # OpenAI's, vLLM's: the thinking tokens counted
            if isinstance(done, dict) and isinstance(done.get("reasoning_tokens"), int):
                self.server_reasoning = done["reasoning_tokens"]
            details = usage.get("prompt_tokens_details")  # vLLM, SGLang, mlx_lm.server, llama-server
            if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                res.cached_tokens = details["cached_tokens"]
        if chunk.get("timings"):
            res.timings = chunk["timings"]
        has_text = has_answer = False
        chars = 0
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            text = choice.get("text") if "text" in choice else delta.get("content")
            if text:  # a role-only or empty chunk carries no token
                has_text = has_answer = True
                self.texts.append(str(text))
                chars += len(str(text))
            if thought := delta.get("reasoning_content") or delta.get("reasoning"):  # a reasoning model's thinking
                has_text = True
                chars += len(str(thought))
            if choice.get("finish_reason"):
                res.finish_reason = choice["finish_reason"]
        if not has_text:
            return
        running = usage.get("completion_tokens")
        if "completion_tokens_delta" in usage:
            n = max(1, int(usage["completion_tokens_delta"]))
            self.continuous = False
        elif isinstance(running, int) and self.continuous is not False:
            self.continuous = True
            n = max(0, running - self.counted)
        else:
            if self.continuous is None:
                self.continuous = False
            n = 1
        self.chunk_ts.append((t, n))
        self.chunk_chars.append(chars)
        if not self.answer_seen:
            if not has_answer:  # still thinking (a chunk carrying both is the answer's first)
                res.reasoning_tokens += n
                self.reasoning_chunks += 1
            else:
                self.answer_seen = True
                if res.reasoning_tokens:
                    res.t_first_answer_ns = t
        if n:
            ts = [t] * n
            res.token_ns.extend(ts)
            self.counted += n
            if self.on_tokens is not None:
                self.on_tokens(ts)

    def finish(self) -> None:
        res = self.res
        res.text = "".join(self.texts)
        res.token_count = "continuous-usage" if self.continuous else "chunks"
        server = res.server_output_tokens
        if isinstance(server, int) and server > self.counted and self.chunk_ts:
            # several tokens per chunk and only a final count: spread the missing ones over the chunks
            per = self._spread(server)
            res.token_ns = [t for (t, n), k in zip(self.chunk_ts, per) for _ in range(n + k)]
            extra = [t for (t, _), k in zip(self.chunk_ts, per) for _ in range(k)]
            res.token_count = "chunks+final-usage"
            if res.reasoning_tokens:  # the thinking chunks' tokens, not the chunks: each holds its share too
                r = self.reasoning_chunks
                res.reasoning_tokens = sum(n + k for (_, n), k in zip(self.chunk_ts[:r], per[:r]))
            if self.on_tokens is not None:
                self.on_tokens(extra)
        if self.server_reasoning is not None and res.reasoning_tokens:  # the server's own count, where it gives one
            res.reasoning_tokens = self.server_reasoning

    def _spread(self, server: int) -> list[int]:
        """The tokens a final count adds to each chunk: each chunk's share of `server` by the characters it carried
        (thinking and answer may pack tokens differently: spread evenly, the thinking's count read 2–4× off), less
        what it was counted already; evenly over the chunks where the text does not say (none, or a share would
        fall below a chunk's count)."""
        n_chunks, missing = len(self.chunk_ts), server - self.counted
        even = [(i + 1) * missing // n_chunks - i * missing // n_chunks for i in range(n_chunks)]
        total = sum(self.chunk_chars)
        if not total:
            return even
        cum, at, per = 0, 0, []
        for (_, n), chars in zip(self.chunk_ts, self.chunk_chars):
            cum += chars
            upto = round(server * cum / total)
            per.append(upto - at - n)
            at = upto
        return per if min(per) >= 0 else even


class _ArrivalClock:
    """When each byte of one response's body came off the socket: the connection's protocol is asked to
    note, for each read it is handed, when (as it is handed over, just after the recv) and how many body
    bytes have come by its end (the response's own reads only: removed at its end). at(offset) is the time
    of the read that brought the body's byte `offset`; bytes already there when the clock was set get that
    moment. Where the protocol cannot be reached (another transport that binds data_received once, a closed
    connection), there are no marks and at() is now: the coroutine's own time, as before."""

    def __init__(self, r: Any):
        self.t0 = time.perf_counter_ns()
        self.content = r.content
        self.base = int(getattr(r.content, "total_bytes", 0) or 0)
        self.marks: deque[tuple[int, int]] = deque()
        self.proto = getattr(getattr(r, "connection", None), "protocol", None)
        if self.proto is None or "data_received" in vars(self.proto):
            self.proto = None
            return
        received = self.proto.data_received
        content, marks, clock = self.content, self.marks, time.perf_counter_ns

        def noted(data: bytes) -> None:
            if not data:  # aiohttp resuming its parser after a read (every read, 3.14): no bytes came
                received(data)
                return
            t = clock()
            received(data)
            marks.append((content.total_bytes, t))

        self.proto.data_received = noted

    def at(self, offset: int) -> int:
        """When the read came that brought the body's byte `offset` (asked in order: the marks before it are spent);
        now, for a byte not come."""
        if offset <= self.base:
            return self.t0
        marks = self.marks
        while marks and marks[0][0] < offset:
            marks.popleft()
        return marks[0][1] if marks else time.perf_counter_ns()

    def close(self) -> None:
        if self.proto is not None:
            vars(self.proto).pop("data_received", None)
            self.proto = None


async def _refusal(r: Answer, shown: str) -> str | None:
    """Why the server's answer is not a stream to read (an HTTP error, another content type); None: it is one."""
    if r.status >= 400:
        text = (await r.content.read(200)).decode("utf-8", "replace").replace("\n", " ")
        retry = r.headers.get("retry-after")
        return f"HTTP {r.status} from {shown}: {text}" + (f" (retry after {retry} s)" if retry else "")
    ctype = r.headers.get("content-type", "")
    if "text/event-stream" not in ctype:
        return f"not a stream: {shown} answered content-type {ctype or 'none'} (is stream supported?)"
    return None


MAX_LINE = 1 << 20  # an SSE line longer than this (no newline within 1 MiB) is not a stream we can read


class _Events:
    """The stream's SSE events, cut into lines from the body's pieces as they come and counted (_Counter.chunk):
    take(data, t) is True once [DONE] came, or a `data:` line that is not JSON (`malformed`; res.error says
    which). A chunk's time is its last byte's: the piece's t, or at(its end offset) where a clock is given (aiohttp's
    readany may join several reads in one piece)."""

    def __init__(self, res: StreamResult, counter: _Counter, at: Callable[[int], int] | None = None):
        self.res, self.counter, self.at = res, counter, at
        self.offset = 0  # the body's bytes taken so far
        self.rest = b""  # the last line's start, not ended yet
        self.malformed = False

    def take(self, data: bytes, t: int) -> bool:
        rest, at = self.rest, self.at
        end = self.offset - len(rest)  # the body offset where `rest` starts
        self.offset += len(data)
        lines = (rest + data).split(b"\n") if rest else data.split(b"\n")
        self.rest = rest = lines.pop()
        if len(rest) > MAX_LINE:
            raise ValueError(f"an SSE line longer than {MAX_LINE} bytes")
        for raw in lines:
            end += len(raw) + 1
            if not raw.startswith(b"data:"):
                continue
            body = raw[5:].strip()
            if body == b"[DONE]":
                return True
            try:
                chunk = json.loads(body)
            except ValueError:
                self.res.error = f"malformed JSON in the stream: {body[:80].decode('utf-8', 'replace')!r}"
                self.malformed = True
                return True
            self.counter.chunk(chunk, at(end) if at is not None else t)  # when the chunk's last byte came
        return False


async def _read_events(r: Answer, res: StreamResult, counter: _Counter, read_to_end: bool) -> bool | None:
    """The stream's events counted as they come: True at [DONE], False where the body ended without it, None at
    a line that is not JSON (res.error says which).

    A lean response (http://) hands its body over inside the connection's data_received (http_lean's hand_over):
    every event is parsed and counted as its read comes, and this task wakes once, at the end. aiohttp's body
    (https://) is taken as it comes (readany: whatever the socket reads brought, one wait each) and cut into
    lines here: aiohttp's line iterator cost three waits and buffer walks per token, ≈ a third of the client's
    CPU per token at 64 streams (docs/design/client-processes.md)."""
    import asyncio

    import aiohttp

    from engines.http_lean import LeanResponse

    content = r.content
    if isinstance(r, LeanResponse):
        events = _Events(res, counter)
        done = await r.content.hand_over(events.take)
    else:
        clock = _ArrivalClock(r)
        events = _Events(res, counter, clock.at)
        done = False
        try:
            while not done and (data := await content.readany()):
                done = events.take(data, 0)
        finally:
            clock.close()
    if events.malformed:
        return None
    if done and read_to_end and not content.is_eof():  # (the body's end has mostly come with [DONE])
        try:
            await asyncio.wait_for(content.read(), 0.05)
        except (asyncio.TimeoutError, aiohttp.ClientError):
            pass
    return done


def _failure(exc: BaseException, shown: str, stall_s: float, answered: bool) -> tuple[str, bool, bool]:
    """What a request's exception says: (its error, whether the server is unreachable, whether the connection
    dropped before any answer came: then it is sent once more)."""
    import asyncio

    import aiohttp

    from engines.http_lean import LeanConnectError

    if isinstance(exc, aiohttp.ClientConnectorError | LeanConnectError):
        return f"cannot connect to {shown}: {exc}", True, False
    if isinstance(exc, asyncio.TimeoutError):
        return f"stalled: no data from {shown} for {stall_s:g} s", False, False
    if isinstance(exc, aiohttp.ClientPayloadError):
        return f"stream broken mid-body (truncated: did the server stop?): {exc}", True, False
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
        return f"{type(exc).__name__} talking to {shown}: {exc}", True, not answered
    if isinstance(exc, aiohttp.ClientError):
        return f"{type(exc).__name__} talking to {shown}: {exc}", False, False
    # ValueError, HttpProcessingError: a line beyond aiohttp's buffer
    return (f"unreadable stream from {shown}: "
            f"{str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__}"), False, False


def new_session(connections: int = 1) -> aiohttp.ClientSession:
    """An aiohttp session: the scrape's and the probes' (and a stream slot's for an https:// endpoint)."""
    import aiohttp

    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections, force_close=False),
                                 auto_decompress=False)


def new_stream_session(url: str) -> StreamSession:
    """A stream slot's session (a connection kept alive across its requests): engines/http_lean.py's for an
    http:// URL (its request start costs under a third of aiohttp's: docs/design/client-processes.md), aiohttp's for https://."""
    if url.startswith("http://"):
        from engines.http_lean import LeanSession

        return LeanSession()
    return new_session()


_COMPACT_JSON = json.JSONEncoder(separators=(",", ":")).encode  # (json.dumps makes an encoder per call for these)


@functools.lru_cache(maxsize=8)
def _stream_timeout(stall_s: float) -> aiohttp.ClientTimeout:
    """A stream's timeouts (one object per stall: each request sent asks)."""
    import aiohttp

    return aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=stall_s)


async def stream_one(session: StreamSession, url: str, body: dict[str, Any], headers: dict[str, str],
                     stall_s: float, on_tokens: Callable[[list[int]], None] | None = None,
                     read_to_end: bool = True) -> StreamResult:
    """POST one streaming request on a stream session (http_lean's or aiohttp's); every failure becomes `error`, never an
    exception (on_tokens' own exceptions pass through).

    A kept-alive connection the server closed as the request went out (its keep-alive timeout or request
    count: llama-server did it once in a test run of a fresh clone) drops before any answer: the request is sent
    once more, on a new connection, and `resent` says so; its TTFT still counts from the first send. A second
    drop is the error it is (the server is down). See _stream_once for the rest."""
    res, dropped = await _stream_once(session, url, body, headers, stall_s, on_tokens, read_to_end)
    if dropped:
        res, _ = await _stream_once(session, url, body, headers, stall_s, on_tokens, read_to_end)
        res.resent = True
    return res


async def _stream_once(session: StreamSession, url: str, body: dict[str, Any], headers: dict[str, str],
                       stall_s: float, on_tokens: Callable[[list[int]], None] | None = None,
                       read_to_end: bool = True) -> tuple[StreamResult, bool]:
    """One POST of a streaming request (stream_one): its result, and whether the connection dropped before any
    answer came.

    on_tokens(list_of_t_ns), where given, is called in the event loop as each chunk's tokens arrive (not
    for a chunk that counts none), and once more at the end with the timestamps a final usage added.

    read_to_end: after [DONE], read the rest of the body (≤ 50 ms) so the connection is reused rather
    than closed. aiohttp, not httpx: at 64 streams starting together, httpx spent ≈ 0.7 ms of CPU to start
    each request and aiohttp ≈ 0.2 ms (measured with engines/null_server.py), which is TTFT bias."""
    import asyncio

    import aiohttp
    import aiohttp.http_exceptions

    res = StreamResult()
    done: bool | None = False
    counter = _Counter(res, on_tokens)
    shown = public_url(url)
    if shown != url and any(k.lower() == "authorization" for k in headers):
        url = _without_userinfo(url)  # an API key is the credential then (aiohttp takes one or the other)
    timeout = _stream_timeout(stall_s)
    answered = dropped = False
    try:
        data = _COMPACT_JSON(body).encode()
        async with session.post(url, data=data, headers={"Content-Type": "application/json", **headers},
                                timeout=timeout) as r:
            answered = True
            if (refused := await _refusal(r, shown)) is not None:
                res.error = refused
                return res, False
            done = await _read_events(r, res, counter, read_to_end)
            if done is None:  # malformed JSON: said in res.error
                return res, False
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, aiohttp.http_exceptions.HttpProcessingError) as exc:
        res.error, unreachable, dropped = _failure(exc, shown, stall_s, answered)
        if unreachable:
            res.unreachable = True
    counter.finish()
    if res.error is None and not done:
        res.error = "stream ended without [DONE] (truncated: did the server interrupt it?)"
    elif res.error is None and res.finish_reason is None:
        # llama_cpp.server with interrupt_requests=True ends a stream this way when another request arrives
        res.error = (f"stream ended after {len(res.token_ns)} tokens without a finish_reason (truncated: the "
                     "server interrupted it?)")
    return res, dropped
