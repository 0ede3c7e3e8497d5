"""An OpenAI-compatible server as the engine: one streamed request, token timestamps from the SSE chunks.

Used by bench/http_fleet.py, which keeps B such streams open at once. Each content chunk is stamped with
perf_counter_ns() when it arrives; its token count is the per-chunk usage where the server sends it, else
one. A role-only chunk is not a token. The API key is read from the environment and never stored.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field


@dataclass
class StreamResult:
    token_ns: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    prompt_tokens: int | None = None
    server_output_tokens: int | None = None
    timings: dict | None = None  # llama-server's per-response timings block, where sent


def endpoint_body(endpoint: str, model: str | None, prompt: str, max_tokens: int, ignore_eos: bool) -> dict:
    body: dict = {"max_tokens": max_tokens, "temperature": 0, "stream": True,
                  "stream_options": {"include_usage": True}}
    if ignore_eos:
        body["ignore_eos"] = True  # vLLM and llama-server honour it; others ignore it
    if model:
        body["model"] = model
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def api_headers(api_key_env: str | None) -> dict:
    if not api_key_env:
        return {}
    key = os.environ.get(api_key_env)
    return {"Authorization": f"Bearer {key}"} if key else {}


async def stream_one(client, url: str, body: dict, headers: dict, stall_s: float) -> StreamResult:
    """POST one streaming request; every failure becomes `error`, never an exception."""
    import httpx

    res = StreamResult()
    done = False
    try:
        async with client.stream("POST", url, json=body, headers=headers,
                                 timeout=httpx.Timeout(stall_s, connect=10.0)) as r:
            if r.status_code >= 400:
                text = (await r.aread()).decode("utf-8", "replace")[:200].replace("\n", " ")
                res.error = f"HTTP {r.status_code} from {url}: {text}"
                return res
            ctype = r.headers.get("content-type", "")
            if "text/event-stream" not in ctype:
                res.error = f"not a stream: {url} answered content-type {ctype or 'none'} (is stream supported?)"
                return res
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                try:
                    chunk = json.loads(data)
                except json.JSONDecodeError:
                    res.error = f"malformed JSON in the stream: {data[:80]!r}"
                    return res
                t = time.perf_counter_ns()
                usage = chunk.get("usage") or {}
                if usage:
                    res.prompt_tokens = usage.get("prompt_tokens", res.prompt_tokens)
                    res.server_output_tokens = usage.get("completion_tokens", res.server_output_tokens)
                if chunk.get("timings"):
                    res.timings = chunk["timings"]
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    text = choice.get("text") if "text" in choice else delta.get("content")
                    if text:  # a role-only or empty chunk carries no token
                        n = int(usage.get("completion_tokens_delta", 1)) if usage else 1
                        res.token_ns.extend([t] * max(1, n))
                    if choice.get("finish_reason"):
                        res.finish_reason = choice["finish_reason"]
    except httpx.ConnectError as exc:
        res.error = f"cannot connect to {url}: {exc}"
    except httpx.ReadTimeout:
        res.error = f"stalled: no data from {url} for {stall_s:g} s"
    except httpx.HTTPError as exc:
        res.error = f"{type(exc).__name__} talking to {url}: {exc}"
    if res.error is None and not done:
        res.error = "stream ended without [DONE] (truncated: did the server interrupt it?)"
    elif res.error is None and res.finish_reason is None:
        # llama_cpp.server with interrupt_requests=True ends a stream this way when another request arrives
        res.error = (f"stream ended after {len(res.token_ns)} tokens without a finish_reason (truncated: the "
                     "server interrupted it?)")
    return res
