"""The mlx-lm engine on the embedded model converted from the same GGUF: prompt ids, greedy ids against
llama.cpp, timestamps, EOS, continuous batching on BatchGenerator, the CLI, and bad inputs."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from measure.machine.recorder import read_jsonl
from measure.machine.model_choice import build_spec, resolve_model
from engines.base import EngineError, Prompt

# not importorskip: importing mlx here, before the engine loads its BLAS shim, would bind mlx to its own BLAS
pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlx_lm") is None,
                                reason="mlx-lm is installed by the test extra; this run lacks it")

CLI = [sys.executable, "-m", "tui.cli"]
PROMPTS = ["The capital of France is", "Warm up: count from one to ten.",
           "hi <bos> there <start_of_turn>user\n", "Ünïcödé — 日本語\t\tand   spaces", " leading space", ""]


@pytest.fixture(scope="session")
def mlx_model():
    return resolve_model("mlx", None)


@pytest.fixture(scope="module")
def mlx_engine(mlx_model):
    from engines.mlx_lm import MlxLmEngine

    e = MlxLmEngine(build_spec("mlx", mlx_model, 2, 256, 1))
    e.load()
    e.warmup()
    yield e
    e.close()


def run(args, env=None):
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run(CLI + args, capture_output=True, text=True, timeout=600, env=env)


def test_conversion_is_cached_beside_the_gguf(mlx_model, model):
    from engines.gguf_to_mlx import MARKER, converted

    assert mlx_model.path.parent == model.path.parent and mlx_model.path.name.endswith(".mlx")
    assert converted(model.path) == mlx_model.path
    cfg = json.loads((mlx_model.path / "config.json").read_text())
    assert (cfg["model_type"], cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_key_value_heads"],
            cfg["head_dim"], cfg["eos_token_id"]) == ("gemma3_text", 640, 18, 1, 256, [1, 106])
    assert json.loads((mlx_model.path / MARKER).read_text())["source"]["size"] == model.file_bytes
    # W for the bandwidth figures is what mlx reads: float32 weights, ≈ 4 bytes × 268M parameters
    assert 1.0e9 < mlx_model.file_bytes < 1.1e9
    # KV per token: 2 · 18 layers · 1 KV head · 256 · 4 bytes (float32)
    assert mlx_model.kv_bytes_per_token() == 2 * 18 * 1 * 256 * 4


def test_norm_weights_lose_llama_cpps_plus_one(mlx_model, model):
    from gguf import GGUFReader
    from safetensors.numpy import load_file

    w = load_file(str(mlx_model.path / "model.safetensors"))
    r = GGUFReader(str(model.path))
    norm = next(t for t in r.tensors if t.name == "blk.0.attn_q_norm.weight")
    assert np.allclose(w["model.layers.0.self_attn.q_norm.weight"], np.asarray(norm.data) - 1.0)
    assert w["model.embed_tokens.weight"].shape == (262144, 640) and "lm_head.weight" not in w


def test_blas_shim_is_in_use(mlx_engine):
    if not sys.platform.startswith("linux"):
        pytest.skip("the OpenBLAS shim is for mlx[cpu] on Linux")
    assert "OpenBLAS" in mlx_engine.spec.options["blas"]
    assert mlx_engine.blas_calls() > 0  # mlx's cblas_sgemm went through the shim


def test_without_a_compiler_mlx_keeps_its_own_blas_and_says_so(tmp_path, monkeypatch):
    from engines.mlx_blas import prepare

    if not sys.platform.startswith("linux"):
        pytest.skip("the OpenBLAS shim is for mlx[cpu] on Linux")
    monkeypatch.setenv("INFERENCE_TOP_CACHE", str(tmp_path))  # nothing built yet
    monkeypatch.setenv("CC", "false")  # a compiler that fails
    choice = prepare()
    assert choice.shim is None and "reference BLAS" in choice.label and "shim failed" in choice.label
    assert not list(tmp_path.rglob("*.so"))


def test_prompt_ids_equal_llama_cpps(mlx_engine, engine):
    for text in PROMPTS:
        assert mlx_engine.tokenize(Prompt("p", text=text)) == engine.tokenize(Prompt("p", text=text)), text
    for n in (1, 7, 200):
        assert mlx_engine.tokenize(Prompt("s", synthetic_tokens=n)) == engine.tokenize(Prompt("s", synthetic_tokens=n))


def test_first_16_greedy_ids_agree_with_llama_cpp(mlx_engine, engine):
    """Measured: 15 of the first 16 ids equal; at the 16th mlx's top two logits are 0.015 apart and
    llama.cpp picks the other one. The reason: llama.cpp multiplies quantized weights by activations it
    quantizes to 8 bits (Q8 dot products); mlx multiplies the same dequantized weights in float32, so a
    near-tie may fall either way. So this asserts the measured agreement and that every disagreement is
    a near-tie, judged with llama.cpp's ids fed to mlx (teacher forcing)."""
    import mlx.core as mx

    ids = engine.tokenize(Prompt("p", text=PROMPTS[0]))
    ours = [t for t, _ in engine.generate(ids, 16, True)]
    theirs = [t for t, _ in mlx_engine.generate(ids, 16, True)]
    same_prefix = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), 16)
    assert same_prefix >= 15, (ours, theirs)

    logits = np.array(mlx_engine.model(mx.array(ids + ours)[None])[0].astype(mx.float32))
    agree = 0
    for i, tok in enumerate(ours):
        row = logits[len(ids) - 1 + i]
        if int(row.argmax()) == tok:
            agree += 1
        else:
            assert row.max() - row[tok] < 0.1, f"step {i}: llama.cpp's id is {row.max() - row[tok]:.3f} below mlx's"
    assert agree >= 15


def test_generate_stamps_each_id_and_reuses_no_cache(mlx_engine):
    ids = mlx_engine.tokenize(Prompt("p", text=PROMPTS[1]))
    gen = mlx_engine.generate(ids, 10, True)
    out = []
    while True:
        try:
            out.append(next(gen))
        except StopIteration as stop:
            assert stop.value == "length"
            break
    ts = [t for _, t in out]
    assert len(out) == 10 and ts == sorted(ts) and len(set(ts)) == 10
    # the same prompt after another one: the same ids (a fresh KV cache each time)
    list(mlx_engine.generate(mlx_engine.tokenize(Prompt("q", text=PROMPTS[0])), 4, True))
    assert [t for t, _ in mlx_engine.generate(ids, 10, True)] == [t for t, _ in out]


def test_stop_at_eos_when_asked(mlx_engine, monkeypatch):
    ids = mlx_engine.tokenize(Prompt("p", text=PROMPTS[0]))
    first = next(iter(mlx_engine.generate(ids, 1, True)))[0]
    monkeypatch.setattr(mlx_engine, "eos", {first})  # make the first greedy id an end of generation
    gen = mlx_engine.generate(ids, 8, False)
    assert next(gen)[0] == first
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value == "stop"
    assert len(list(mlx_engine.generate(ids, 8, True))) == 8  # ignore-EOS: the fixed max_tokens


def test_batch_generator_continuous_batching(mlx_engine):
    """Up to B sequences in one BatchGenerator; one is inserted while the others decode; each gets the ids
    it gets alone; all ids of one step share that step's stamp."""
    prompts = {k: mlx_engine.tokenize(Prompt(k, text=t)) for k, t in zip("abc", PROMPTS[:3])}
    alone = {k: [t for t, _ in mlx_engine.generate(p, 8, True)] for k, p in prompts.items()}
    batch = mlx_engine.batch(3, 256)
    batch.add("a", prompts["a"], 8, True)
    batch.add("b", prompts["b"], 6, True)
    got = {"a": [], "b": [], "c": []}
    finished = {}
    steps = 0
    while batch.active() or "c" not in finished:
        t, toks, done = batch.step()
        steps += 1
        for key, tok in toks:
            got[key].append(tok)
        finished.update(done)
        if steps == 3:
            batch.add("c", prompts["c"], 8, True)  # continuous: admitted while a and b run
        assert steps < 60
    assert finished == {"a": "length", "b": "length", "c": "length"}
    assert got["a"] == alone["a"] and got["b"] == alone["b"][:6] and got["c"] == alone["c"]
    with pytest.raises(EngineError, match="exceeds"):
        batch.add("d", list(range(250)), 16, True)


def test_batch_stops_at_eos_when_asked(mlx_engine, monkeypatch):
    ids = mlx_engine.tokenize(Prompt("p", text=PROMPTS[0]))
    first = next(iter(mlx_engine.generate(ids, 1, True)))[0]
    monkeypatch.setattr(mlx_engine, "eos", {first})
    batch = mlx_engine.batch(2, 256)
    batch.add("x", ids, 8, False)
    batch.add("y", ids, 3, True)
    done = {}
    for _ in range(40):
        _, _, fin = batch.step()
        done.update(fin)
        if not batch.active():
            break
    assert done == {"x": "stop", "y": "length"}


def test_bench_k_and_b_sweep_writes_the_same_formats(tmp_path):
    out = tmp_path / "mlx"
    p = run(["bench", "--engine", "mlx", "--k", "1,2", "--b", "1,2", "--requests", "2", "--max-tokens", "6", "--force",
             "--ctx", "256", "--out", str(out)])
    assert p.returncode == 0, p.stderr[-2000:]
    cells = json.loads((out / "summary.json").read_text())
    assert [(c["b"], c["k"]) for c in cells] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert all(c["completed"] == 2 and c["errors"] == 0 and c["output_throughput"] > 0 for c in cells)
    assert all(c["achieved_concurrency"] <= 2.05 for c in cells)  # 2 requests: never the nominal K × B = 4
    headers, records, _ = read_jsonl(out / "records.jsonl")
    h = headers[0]
    assert h.engine == "mlx" and h.line["converted_from_sha256_prefix"] and "blas" in h.engine_settings
    assert {r.engine for r in records} == {"mlx-lm"} and all(len(r.token_ns) == 6 for r in records)
    assert (out / "summary.csv").read_text().count("\n") == 5


def test_http_engine_against_mlx_lm_server(mlx_model, tmp_path):
    """mlx-lm's own server with the converted model, measured by --engine http (streams, not processes)."""
    from conftest import serve

    proc, url = serve(["mlx_lm.server", "--model", str(mlx_model.path), "--host", "127.0.0.1"])
    try:
        out = tmp_path / "http"
        p = run(["bench", "--engine", "http", "--url", url, "--b", "1,2", "--requests", "2", "--max-tokens", "4",
                 "--out", str(out)])
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert p.returncode == 0, p.stderr[-2000:]
    cells = json.loads((out / "summary.json").read_text())
    assert [c["b"] for c in cells] == [1, 2] and all(c["completed"] == 2 and c["errors"] == 0 for c in cells)
    _, records, _ = read_jsonl(out / "records.jsonl")
    assert all(1 <= len(r.token_ns) <= 4 for r in records)


@pytest.mark.parametrize("what", ["folder", "gguf_arch", "missing_mlx"])
def test_bad_inputs_give_one_line(tmp_path, what):
    env = None
    if what == "folder":
        (tmp_path / "weights.bin").write_bytes(b"x")
        args, says = ["--model", str(tmp_path)], "not an mlx-lm model folder"
    elif what == "gguf_arch":
        import gguf

        path = tmp_path / "tiny-llama.gguf"
        w = gguf.GGUFWriter(str(path), "llama")
        w.add_block_count(1)
        w.add_embedding_length(8)
        w.add_head_count(2)
        w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        args, says = ["--model", str(path)], "is a llama GGUF; --engine mlx converts only gemma3"
    else:
        hide = tmp_path / "hide"
        hide.mkdir()
        (hide / "sitecustomize.py").write_text(
            "import sys\n"
            "class Hide:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('mlx', 'mlx_lm'):\n"
            "            raise ModuleNotFoundError(name)\n"
            "sys.meta_path.insert(0, Hide())\n")
        env = {"PYTHONPATH": f"{hide}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        args, says = [], "mlx is not installed"
    p = run(["bench", "--engine", "mlx", *args, "--requests", "1", "--max-tokens", "2"], env)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], p.stderr
