"""The OpenAI-compatible HTTP engine against real servers on loopback, and against broken ones."""
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import presets
import pytest

from conftest import free_port, serve, server_log
from engines.http_lean import LeanSession
from engines.http_openai import endpoint_body, new_session, parse_prometheus, stream_one

CLI = [sys.executable, "-m", "tui.cli"]


def start_server(model, interrupt: bool):
    return serve(["llama_cpp.server", "--model", str(model.path), "--host", "127.0.0.1", "--n_ctx", "1024",
                  "--interrupt_requests", str(interrupt)])


@pytest.fixture(scope="module")
def llama_server(model):
    """python -m llama_cpp.server with the embedded GGUF; interrupt_requests off so streams run to the end."""
    proc, url = start_server(model, interrupt=False)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def test_truncated_streams_are_detected(model, tmp_path):
    """llama_cpp.server's default interrupt_requests=True ends a running stream when another arrives."""
    proc, url = start_server(model, interrupt=True)
    try:
        out = tmp_path / "cut"
        p = subprocess.run(CLI + ["bench", "--engine", "http", "--url", url, "--b", "2", "--requests", "4",
                                  "--max-tokens", "48", "--out", str(out)], capture_output=True, text=True, timeout=300)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert p.returncode == 0, p.stderr
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()[1:]]
    cut = [r for r in recs if r["error"]]
    assert cut and all("truncated" in r["error"] and r["output_tokens"] < 48 for r in cut)
    assert json.loads((out / "summary.json").read_text())[0]["errors"] == len(cut)


def test_bench_against_llama_cpp_server(llama_server, model, tmp_path):
    out = tmp_path / "http"
    env = dict(os.environ, IT_SECRET_KEY="sk-very-secret-123")
    p = subprocess.run(CLI + ["bench", "--engine", "http", "--url", llama_server, "--b", "1,3", "--requests", "6",
                              "--max-tokens", "8", "--api-key-env", "IT_SECRET_KEY", "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr + server_log(llama_server)
    cells = json.loads((out / "summary.json").read_text())
    assert [(c["b"], c["completed"], c["errors"]) for c in cells] == [(1, 6, 0), (3, 6, 0)], server_log(llama_server)
    # this server decodes one request at a time: three streams queue behind each other. Medians: one request
    # held up by a busy machine made B=1's p99 (the largest of six) 3.0 s against B=3's 1.4 s
    assert cells[1]["median_ttft_ms"] > cells[0]["median_ttft_ms"], [(c["median_ttft_ms"], c["p99_ttft_ms"])
                                                                      for c in cells]
    text = (out / "records.jsonl").read_text()
    assert "sk-very-secret-123" not in text and "sk-very-secret-123" not in p.stdout + p.stderr
    recs = [json.loads(x) for x in text.splitlines()[1:]]
    assert all(r["mode"] == "http" and r["t_first_token_ns"] >= r["t_scheduled_ns"] for r in recs)
    assert all(0 < r["output_tokens"] <= 8 for r in recs)
    # it takes text only and streams no usage, yet tokenizes as the embedded model does (its /extras/tokenize):
    # each prompt goes as the text of the local ids, the unique prefix over its first tokens, and reads as many
    # tokens as the local engines read of it (issue 58: the prompt tokens per side equal)
    from engines.base import Prompt
    from engines.tokenizer import GGUFTokenizer

    tok, prompts = GGUFTokenizer(model.path), presets.workload("default").prompts
    local = {f"default-{i + 1}": len(tok(Prompt("p", text=t))) for i, t in enumerate(prompts)}  # datasets.py
    assert all(r["extra"]["prompt_sent_as"] == "text of the local ids" for r in recs)
    assert [r["prompt_tokens"] for r in recs] == [local[r["prompt_id"]] for r in recs]


class Broken(BaseHTTPRequestHandler):
    """Each path answers one way a server can go wrong."""

    def log_message(self, *a):
        pass

    def do_POST(self):  # noqa: C901 - one branch per failure
        self.rfile.read(int(self.headers.get("content-length", 0)))
        path = self.path
        if path.startswith("/s401"):
            return self._plain(401, b'{"error": "bad key"}')
        if path.startswith("/s500"):
            return self._plain(500, b"boom")
        if path.startswith("/nope404"):
            return self._plain(404, b"not found")
        if path.startswith("/plain"):
            return self._plain(200, b'{"choices": []}')
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        chunk = lambda text: f'data: {{"choices": [{{"text": "{text}", "finish_reason": null}}]}}\n\n'.encode()  # noqa
        if path.startswith("/bad"):
            self.wfile.write(chunk("a") + b"data: {not json\n\n")
        elif path.startswith("/stall"):
            self.wfile.write(chunk("a"))
            self.wfile.flush()
            time.sleep(3)
        elif path.startswith("/cut"):
            self.wfile.write(chunk("a") + chunk("b"))
        else:
            self.wfile.write(b'data: {"choices": [{"delta": {"role": "assistant"}}]}\n\n')  # not a token
            self.wfile.write(chunk("a") + chunk("b")
                             + b'data: {"choices": [{"text": "", "finish_reason": "length"}]}\n\n' + b"data: [DONE]\n\n")

    def _plain(self, code, body):
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def broken():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Broken)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


@pytest.mark.parametrize("path, says, tokens", [
    ("/ok", None, 2),
    ("/s401", "HTTP 401", 0),
    ("/nope404", "HTTP 404", 0),
    ("/s500", "HTTP 500", 0),
    ("/plain", "not a stream", 0),
    ("/bad", "malformed JSON", 1),
    ("/stall", "stalled", 1),
    ("/cut", "truncated", 2),
])
@pytest.mark.parametrize("make", [new_session, LeanSession], ids=["aiohttp", "lean"])
def test_every_failure_is_recorded_not_raised(broken, path, says, tokens, make):
    async def go():
        async with make() as client:
            return await stream_one(client, broken + path, endpoint_body("completions", None, "hi", 4, True), {},
                                    stall_s=1.0)

    res = asyncio.run(go())
    if says is None:
        assert res.error is None
    else:
        assert says in res.error
    assert len(res.token_ns) == tokens


def test_nothing_listening_is_one_line():
    p = subprocess.run(CLI + ["bench", "--engine", "http", "--url", f"http://127.0.0.1:{free_port()}/v1"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "nothing answers" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_prometheus_server_view_keeps_absent_metrics_absent():
    text = ('# HELP x\nvllm:num_requests_running{model="m"} 3\nvllm:num_requests_waiting{model="m"} 5\n'
            'vllm:kv_cache_usage_perc{model="m"} 0.42\n')
    assert parse_prometheus(text) == {"running": 3.0, "waiting": 5.0, "kv_cache_usage": 0.42}
    assert parse_prometheus("llamacpp:requests_processing 1\n") == {"running": 1.0}


def test_prefix_cache_off_measures_the_prefill_on_a_caching_server(llama_server, tmp_path):
    """llama_cpp.server reuses the longest cached prompt prefix. The same synthetic prompt four times: with
    --prefix-cache on, requests 2-4 hit the cache and TTFT falls to about one decode step; off (the
    default), each prompt starts unique and every TTFT pays its prefill."""
    ttft = {}
    for policy in ("on", "off"):
        out = tmp_path / policy
        p = subprocess.run(CLI + ["bench", "--engine", "http", "--url", llama_server, "--b", "1", "--requests", "4",
                                  "--max-tokens", "4", "--workload", "synthetic:128", "--prefix-cache", policy,
                                  "--out", str(out)], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        recs = sorted((json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()[1:]),
                      key=lambda r: r["request_id"])
        assert all(r["error"] is None and r["prompt_tokens"] != 0 for r in recs)
        ttft[policy] = sorted((r["t_first_token_ns"] - r["t_scheduled_ns"]) / 1e6 for r in recs[1:])[1]
    assert ttft["off"] > 3 * ttft["on"], ttft


def test_a_text_only_server_is_sent_prompts_that_read_as_many_tokens(model):
    """llama_cpp.server takes text only: the text of the local ids, the unique prefix over the prompt's first ones,
    must read as many tokens as the local engines read of the prompt. Read back naively it did not: a short
    prompt's '…1a6-2]' + '.' merged (8 → 7) and a 512-token synthetic prompt's repeated filler read 498."""
    from engines.base import Prompt
    from engines.tokenizer import GGUFTokenizer
    from measure.core.records import Request, RunMeta
    from measure.sources.http import HttpSource

    tok = GGUFTokenizer(model.path)
    src = HttpSource("http://127.0.0.1:9/v1", RunMeta("http", "?", 0), b=1, events=False, tokenizer=tok)
    naive = tok.text_of(tok(Prompt("p", synthetic_tokens=512))[1:])
    assert 1 + len(tok.text_ids(naive)) != 512  # the filler does not read back: the case is real
    prompts = [Prompt("p", text=t) for t in presets.workload("default").prompts]
    prompts += [Prompt("p", synthetic_tokens=n) for n in (3, 4, 12, 64, 512)]
    for i, p in enumerate(prompts):
        req = Request(i, p, 4, True, 0)
        text, n = src._prompt_text(req, f"[request 1f2e3d4c5b6a-{1000 + 97 * i}] ")
        assert n == len(tok(p)) == 1 + len(tok.text_ids(text)), (p, text)
    # a prompt of two tokens has no room under the prefix: the whole prefix goes before it (as ids do), unique
    two = Prompt("p", synthetic_tokens=2)
    text, n = src._prompt_text(Request(99, two, 4, True, 0), "[request 1f2e3d4c5b6a-99] ")
    assert text.startswith("[request 1f2e3d4c5b6a-99]") and n == 1 + len(tok.text_ids(text)) > len(tok(two))
