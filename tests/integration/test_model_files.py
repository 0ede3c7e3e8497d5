"""Issue 48: the core reads no file; the one model-file reader (machine/model_files.py) reads config.json, the
safetensors' sizes and GGUF headers for the physics of models (core/work.py) and the guard (core/guard.py), and
machine/workloads.py reads the workload files and opens a trace's lines."""
import json
import re
from pathlib import Path

import pytest

from measure.core import guard, work
from measure.core.guard import GuardError
from measure.machine import model_files
from measure.machine.workloads import trace_file

ROOT = Path(__file__).resolve().parents[2]
READS = re.compile(r"open\(|read_text|read_bytes\(\)|stat\(\)|glob\(|\.exists\(|\.is_dir\(|\.is_file\(|\.resolve\(|"
                   r"importlib\.resources|inspect_gguf")

LLAMA_31_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "tie_word_embeddings": False,
               "torch_dtype": "bfloat16"}


def test_the_core_reads_no_file():
    """`grep -rnE 'open\\(|read_text|stat\\(\\)|glob\\(' measure/core` finds nothing (6 before issue 48), nor a
    file's existence, a path resolved, the packaged samples or a GGUF's header (10 more), nor does the core import
    the GGUF reader (engines.gguf_file) at run time."""
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in sorted((ROOT / "measure" / "core").rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if READS.search(line)]
    assert found == []
    runtime = [str(p.relative_to(ROOT)) for p in (ROOT / "measure" / "core").rglob("*.py")
               if re.search(r"^\s+from engines\.gguf_file import (?!GGUFInfo$)", p.read_text(), re.M)]
    assert runtime == []


def _folder(tmp_path: Path, cfg: object, weights: tuple[int, ...]) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    for i, n in enumerate(weights):
        (tmp_path / f"model-{i:05d}.safetensors").write_bytes(b"\0" * n)
    (tmp_path / "tokenizer.json").write_bytes(b"\0" * 999)  # beside the weights, not one of them
    return tmp_path / "config.json"


def test_one_read_of_a_config_feeds_the_work_model_and_the_guard(tmp_path):
    """The safetensors beside a config.json are summed once (3 files: 1,000 + 2,000 + 4,000 B) and both the
    work model's file bytes and the guard's weights are that sum; bytes a parameter = 7,000 / params."""
    p = _folder(tmp_path, LLAMA_31_8B, (1000, 2000, 4000))
    cf = model_files.read_config(p)
    assert cf.safetensors_bytes == 7000 and cf.text["hidden_size"] == 4096 and cf.path == p
    w = model_files.work_from_config(p)
    assert w.file_bytes == 7000 and w == work.from_config(cf)
    assert w.embd_row_bytes == pytest.approx(4096 * 7000 / 8_030_261_248)
    shape = model_files.shape_from_config(p)
    assert (shape.weight_bytes, shape.layers, shape.kv_heads, shape.head_dim) == (7000, 32, 8, 128)
    assert shape.work == w and shape == guard.shape_of_config(cf) and shape.source == f"config {p}"
    assert model_files.work_model(str(p), None, None) == w


def test_a_config_without_weights_counts_params_by_dtype(tmp_path):
    p = _folder(tmp_path, {"model_type": "mllama", "text_config": LLAMA_31_8B}, ())
    w = model_files.work_from_config(p)
    assert w.file_bytes == 2 * 8_030_261_248 and w.weight_bytes == 15_009_849_344  # bf16, the text_config's
    assert model_files.shape_from_config(p).weight_bytes == w.file_bytes  # never 0 B (issue 55)


@pytest.mark.parametrize("content, why", [("[1, 2]", "a JSON list, not an object"), ("{oops", "Expecting")])
def test_a_bad_config_is_one_line(tmp_path, content, why):
    (tmp_path / "config.json").write_text(content)
    with pytest.raises(GuardError, match=f"cannot read .*config.json as a config.json: {why}"):
        model_files.shape_from_config(tmp_path / "config.json")
    with pytest.raises(GuardError, match="cannot read .*nope.json as a config.json"):
        model_files.shape_from_config(tmp_path / "nope.json")


def test_a_gguf_is_read_through_the_reader(model, tmp_path):
    """The embedded GGUF: its shape and work model from one read of its header; a file that does not start
    with GGUF is not one."""
    assert model_files.is_gguf(Path(model.path)) and not model_files.is_gguf(tmp_path)
    (tmp_path / "x.gguf").write_bytes(b"GGUX")
    assert not model_files.is_gguf(tmp_path / "x.gguf")
    info = model_files.read_gguf(model.path)
    shape = model_files.shape_from_gguf(model.path)
    assert shape == guard.shape_of_gguf(info, str(model.path)) and shape.weight_bytes == info.file_bytes
    assert shape.work == work.from_gguf(info) == model_files.work_from_gguf(model.path)
    assert model_files.work_model(None, str(model.path), "llama-3.1-8b") == shape.work  # the file before a preset
    # the matrices a step multiplies by type (the CPU's batch path, kernels.toml [cpu]): Gemma 3 270M Q4_K_M ties
    # its Q8_0 embedding (640 × 262,144, 34 bytes a block of 32: 179,824,640 B), and every byte a step reads is one
    types = dict(shape.work.matmul_type_bytes)
    assert types["Q8_0"] >= 640 * 262144 // 32 * 34 and set(types) == {"Q4_K", "Q5_0", "Q6_K", "Q8_0"}
    assert sum(types.values()) == pytest.approx(shape.work.read_bytes(1), rel=0.005)  # norms (F32, 1-D) aside


def test_a_trace_file_is_read_from_any_offset(tmp_path):
    """machine/workloads.trace_file: the raw lines from a byte offset, each time asked (a chunk read again)."""
    f = tmp_path / "t.jsonl"
    f.write_bytes(b'{"a": 1}\n{"b": 2}\r\nlast')
    src = trace_file(f)
    assert src.path == f and src.resolved == str(f.resolve())
    assert list(src.lines_from(0)) == [b'{"a": 1}\n', b'{"b": 2}\r\n', b"last"]
    assert list(src.lines_from(9)) == [b'{"b": 2}\r\n', b"last"] == list(src.lines_from(9))
