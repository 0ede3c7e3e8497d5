"""Issue 55 item 4: a model as people download it. `plan --config` on hand-written copies of published config.json
files (tests/data/configs/<repo>/config.json, no weights beside them): the weights a token reads and the KV a token
holds within 5 % of the arithmetic written out here from each architecture (parameters of each tensor, bytes a
weight, which layers slide), the defaults transformers' config class fills in named in `assumed`, never 0 B of
weights.

Conventions of the hand arithmetic: bf16 = 2 B a weight; MXFP4 = 4-bit values and one 8-bit scale a 32 =
17/32 B a weight; a decode step of one token reads every matrix but the routed experts it is not sent to, and one
row of an untied input embedding (a tied one is the output projection: read whole); KV a layer and token =
2 (K, V) × kv_heads × head_dim × 2 B; a sliding layer holds at most its window (what a step reads) or, in
llama.cpp's window cache (plan's table), pad₂₅₆(window + 512) cells."""
import json
import math
from pathlib import Path

import pytest

from measure.core import hf_config, work
from measure.machine import model_files

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"
CTX = 32768  # the context the KV is taken at


def _pad(n: int) -> int:
    return -(-n // 256) * 256


def _kv(layers: int, full: int, kv_heads: int, head_dim: int, window: int, ctx: int, cells: int | None = None) -> float:
    """KV bytes of one sequence at `ctx`: full layers the whole context, sliding ones min(ctx, `cells` or window)."""
    per = 2 * kv_heads * head_dim * 2
    return per * (full * ctx + (layers - full) * min(ctx, cells or window or ctx))


def _sliding_full(layers: int, pattern: int) -> int:
    """Full-attention layers where layer i slides unless (i + 1) is a multiple of `pattern` (transformers)."""
    return sum(1 for i in range(layers) if (i + 1) % pattern == 0)


# ---- the hand arithmetic, one architecture each ------------------------------------------------------------
def llama_31_8b() -> dict[str, float]:
    """32 layers: q 4096×4096, k and v 4096×1024 (8 KV heads × 128), o 4096×4096, MLP gate/up/down 3 × 4096×14336,
    2 norms × 4096; untied: lm_head 128,256×4096 read, the input embedding one 4096 row; final norm 4096."""
    layer = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336 + 2 * 4096
    params = 32 * layer + 2 * 128256 * 4096 + 4096
    read = 2 * (32 * layer + 128256 * 4096 + 4096 + 4096)
    return {"params": params, "file": 2 * params, "read": read, "kv_read": _kv(32, 32, 8, 128, 0, CTX),
            "kv_alloc": _kv(32, 32, 8, 128, 0, CTX)}


def mixtral_8x7b() -> dict[str, float]:
    """32 layers: attention as Llama's (4096, 32 heads, 8 KV heads × 128), a router 8 × 4096, 8 experts of
    3 × 4096×14336 each, 2 of them a token; vocab 32,000 untied; sliding_window null: every layer full."""
    attn, expert = 4096 * 4096 * 2 + 4096 * 1024 * 2, 3 * 4096 * 14336
    layer_all = attn + 8 * 4096 + 8 * expert + 2 * 4096
    params = 32 * layer_all + 2 * 32000 * 4096 + 4096
    read = 2 * (32 * (attn + 8 * 4096 + 2 * expert + 2 * 4096) + 32000 * 4096 + 4096 + 4096)
    return {"params": params, "file": 2 * params, "read": read, "kv_read": _kv(32, 32, 8, 128, 0, CTX),
            "kv_alloc": _kv(32, 32, 8, 128, 0, CTX)}


def gpt_oss_20b() -> dict[str, float]:
    """24 layers: q 2880×4096 (64 heads × 64), k and v 2880×512 (8 KV heads × 64), o 4096×2880 and their biases
    (4096 + 512 + 512 + 2880), a router 32 × 2880, 2 norms, in bf16; 32 experts of gate_up 2880×5760 and down
    2880×2880 in MXFP4 (17/32 B), 4 a token; vocab 201,088 untied, bf16. Alternating layers slide over 128
    tokens (layer_types, sliding first): 12 full."""
    attn = 2880 * 4096 * 2 + 2880 * 512 * 2 + (4096 + 512 + 512 + 2880)
    dense = attn + 32 * 2880 + 2 * 2880
    expert = 2880 * 5760 + 2880 * 2880
    params = 24 * (dense + 32 * expert) + 2 * 201088 * 2880 + 2880
    file = 2 * (params - 24 * 32 * expert) + 17 / 32 * 24 * 32 * expert
    read = 24 * (2 * dense + 4 * expert * 17 / 32) + 2 * (201088 * 2880 + 2880 + 2880)
    return {"params": params, "file": file, "read": read, "kv_read": _kv(24, 12, 8, 64, 128, CTX),
            "kv_alloc": _kv(24, 12, 8, 64, 128, CTX, _pad(128 + 512))}


def gemma3(hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, inter: int) -> dict[str, float]:
    """Gemma 3's text model: q hidden×(heads·head_dim), k and v hidden×(kv_heads·head_dim), o back, MLP
    3 × hidden×inter, 4 norms of hidden and q/k norms of head_dim a layer; vocab 262,208 (Gemma3TextConfig's
    default: the config does not say) tied, so the embedding is read whole as the output projection; layers
    slide over 1024 tokens but every 6th (sliding_window_pattern 6, the class's default)."""
    layer = (hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2 + 3 * hidden * inter
             + 4 * hidden + 2 * head_dim)
    params = layers * layer + 262208 * hidden + hidden
    full = _sliding_full(layers, 6)
    return {"params": params, "file": 2 * params, "read": 2 * params,
            "kv_read": _kv(layers, full, kv_heads, head_dim, 1024, CTX),
            "kv_alloc": _kv(layers, full, kv_heads, head_dim, 1024, CTX, _pad(1024 + 512))}


HAND = {
    # google/gemma-3-12b-it: no head_dim in its text_config (256, the class's; hidden ÷ heads would be 240)
    "gemma-3-12b-it": gemma3(3840, 48, 16, 8, 256, 15360),
    "gemma-3-27b-it": gemma3(5376, 62, 32, 16, 128, 21504),  # head_dim 128 stated
    "gpt-oss-20b": gpt_oss_20b(),
    "Mixtral-8x7B-v0.1": mixtral_8x7b(),
    "Llama-3.1-8B": llama_31_8b(),
}


def _plan(capsys, name: str, *extra: str) -> dict:
    from tui.cli import main

    assert main(["plan", "--config", str(CONFIGS / name / "config.json"), "--context", f"2048,{CTX}",
                 "--memory", "24G", "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", sorted(HAND))
def test_plan_config_matches_the_hand_arithmetic(capsys, name):
    """plan --config as people download the model: the bytes a token reads, the KV a token holds at 32k (read
    and as llama.cpp allocates it) and the weights, each within 5 % of the hand arithmetic; never 0 B."""
    hand = HAND[name]
    got = _plan(capsys, name)
    assert got["read_bytes_per_token"] == pytest.approx(hand["read"], rel=0.05)
    assert got["weights"] == pytest.approx(hand["file"], rel=0.05) and got["weights"] > 0
    row = next(r for r in got["rows"] if r["context"] == CTX)
    assert row["kv_per_request"] / CTX == pytest.approx(hand["kv_alloc"] / CTX, rel=0.05)
    w = model_files.work_from_config(CONFIGS / name / "config.json")
    assert w.params == pytest.approx(hand["params"], rel=0.01)
    assert w.kv_read_bytes(CTX) / CTX == pytest.approx(hand["kv_read"] / CTX, rel=0.05)
    assert w.file_bytes == got["weights"]


def test_the_hand_arithmetic_is_the_published_sizes():
    """The hand arithmetic against what the model cards and repositories publish: Llama 3.1 8B 8.03 B
    parameters, Mixtral 8x7B 46.7 B, gpt-oss-20b 20.9 B and 13.8 GB of safetensors (MXFP4 experts), Gemma 3
    12B's text model 11.77 B (Keras' gemma3_12b_text: 11,765,788,416 with a 262,144 vocabulary)."""
    assert HAND["Llama-3.1-8B"]["params"] == pytest.approx(8.03e9, rel=0.002)
    assert HAND["Mixtral-8x7B-v0.1"]["params"] == pytest.approx(46.7e9, rel=0.002)
    assert HAND["gpt-oss-20b"]["params"] == pytest.approx(20.91e9, rel=0.002)
    assert HAND["gpt-oss-20b"]["file"] == pytest.approx(13.76e9, rel=0.01)
    assert HAND["gemma-3-12b-it"]["params"] - 64 * 3840 == 11_765_788_416


def test_gemma3_defaults_are_filled_and_named():
    """Gemma 3's text_config leaves vocab_size, head_dim, the window pattern and tied embeddings to
    Gemma3TextConfig: filled as transformers does (configuration_gemma3.py), each named in `assumed`; the top
    level's torch_dtype reaches the text model; the vision tower is said not to be counted."""
    cf = model_files.read_config(CONFIGS / "gemma-3-12b-it" / "config.json")
    t = cf.text
    assert (t["vocab_size"], t["head_dim"], t["tie_word_embeddings"], t["torch_dtype"]) == (262208, 256, True,
                                                                                          "bfloat16")
    assert [i for i, k in enumerate(t["layer_types"]) if k == "full_attention"] == [5, 11, 17, 23, 29, 35, 41, 47]
    said = " | ".join(cf.assumed)
    for what in ("Gemma3TextConfig", "vocab_size 262208", "head_dim 256", "tie_word_embeddings True",
                 "40 of 48 layers sliding (window 1024)", "vision_config not counted"):
        assert what in said
    w = work.from_config(cf)
    assert (w.window, w.window_layers, w.full_layers, w.head_dim, w.embd_row_bytes) == (1024, 40, 8, 256, 0.0)
    assert set(cf.assumed) <= set(w.assumed)


def test_gemma3_1b_reads_its_embedding_tied(capsys):
    """gemma-3-1b-it states no tie_word_embeddings: Gemma3TextConfig ties them, so a token's step reads the
    262,144 × 1152 embedding whole as its output projection (all 1.0 B parameters × 2 B), and `assumed` says so."""
    got = _plan(capsys, "gemma-3-1b-it")
    layer = 1152 * 4 * 256 * 2 + 1152 * 1 * 256 * 2 + 3 * 1152 * 6912 + 4 * 1152 + 2 * 256
    params = 26 * layer + 262144 * 1152 + 1152
    assert params == pytest.approx(999_885_952, rel=0.001)  # Keras' gemma3_1b
    assert got["read_bytes_per_token"] == pytest.approx(2 * params, rel=0.05)
    assert any("tie_word_embeddings True" in a for a in got["assumed"])


def test_mixtral_does_not_fit_24_gib(capsys):
    """93.4 GB of bf16 weights: no engine fits a 24 GiB card (it "fitted" 18 times with 0 B of weights)."""
    got = _plan(capsys, "Mixtral-8x7B-v0.1")
    assert got["weights"] == pytest.approx(93.4e9, rel=0.01)
    assert all(r["max_k_one_seq_each"] == 0 and r["max_b_one_engine"] == 0 for r in got["rows"])


def test_gpt_oss_prices_its_experts_mxfp4_beside_its_files(tmp_path):
    """quantization_config mxfp4: the experts at 17/32 B, attention, router, embeddings and lm_head (its
    modules_to_not_convert) at 2 B, with or without its 13.8 GB of safetensors beside the config (the file's
    average a weight, 0.66 B, priced a token 36 % low); no torch_dtype: bf16 assumed, and said."""
    hand = HAND["gpt-oss-20b"]
    (tmp_path / "config.json").write_text((CONFIGS / "gpt-oss-20b" / "config.json").read_text())
    with (tmp_path / "model.safetensors").open("wb") as fh:  # sparse: its size, no disk
        fh.truncate(int(hand["file"]))
    w = model_files.work_from_config(tmp_path / "config.json")
    assert w.file_bytes == int(hand["file"])
    assert w.read_bytes(1) == pytest.approx(hand["read"], rel=0.05)
    assert w.experts is not None and w.experts.bytes_each == pytest.approx(24 * 24_883_200 * 17 / 32, rel=0.001)
    assert any("no torch_dtype" in a for a in w.assumed)


def test_a_config_that_cannot_be_sized_is_one_line(tmp_path, capsys):
    """No weights beside it and a precision this reader does not price, or no shape: one line, exit 2; never
    0 B of weights."""
    from tui.cli import main

    cfg = json.loads((CONFIGS / "Llama-3.1-8B" / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    for argv in (["plan", "--config", str(tmp_path / "config.json")],
                 ["plan", "--config", str(tmp_path / "config.json"), "--chip", "nvidia-h100"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "bitsandbytes" in err and "safetensors" in err
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "newarch", "num_hidden_layers": 4,
                                                      "num_attention_heads": 4, "head_dim": 64}))
    with pytest.raises(SystemExit):
        main(["plan", "--config", str(tmp_path / "config.json")])
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "hidden_size" in err


def test_plan_chip_reads_a_gemma3_config(capsys):
    """plan --chip on Gemma 3 12B's config stopped on `error: 'vocab_size'`; now it predicts, from 23.5 GB a
    token, and prints what was assumed."""
    from tui.cli import main

    assert main(["plan", "--config", str(CONFIGS / "gemma-3-12b-it" / "config.json"), "--chip", "nvidia-h100",
                 "--context", "4096"]) == 0
    out = capsys.readouterr().out
    assert "assumed: where the config is silent, transformers' Gemma3TextConfig defaults" in out
    assert "23.53 GB" in out and "40 of 48 attention layers windowed (1024 tokens)" in out


def test_mlx_and_awq_precisions():
    """mlx-lm's quantization (4-bit, group 64: 0.5 + 4/64 B a weight, embeddings too) and AWQ's (4-bit,
    group 128: 0.5 + 2.5/128, embeddings and lm_head at the dtype)."""
    q4 = {"group_size": 64, "bits": 4}
    mlx = hf_config.precision({"torch_dtype": "bfloat16", "quantization": q4})
    assert mlx.of("experts") == mlx.of("embedding") == 0.5625 and mlx.of("norms") == 2.0
    assert hf_config.precision({"quantization": q4, "quantization_config": q4}) == mlx.__class__(  # mlx-lm's copy
        2.0, 0.5625, mlx.converted, mlx.what, ("no torch_dtype or dtype in the config: the weights outside any "
                                               "quantization read as bf16 (2 B)",))
    awq = hf_config.precision({"torch_dtype": "float16",
                               "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}})
    assert awq.of("attention") == pytest.approx(0.5 + 2.5 / 128) and awq.of("head") == awq.of("embedding") == 2.0
    assert math.isclose(hf_config.precision({"torch_dtype": "float32"}).of("mlp"), 4.0)


# ---- over HTTP: the bandwidth product counts what a step's tokens read, not the file ------------------------
def _stream(user: int, n_req: int = 4, tpot_ms: float = 20.0, tokens: int = 6) -> list:
    """One closed-loop user of an HTTP server: `n_req` requests back to back, `tokens` tokens `tpot_ms` apart."""
    from measure.core.records import RequestRecord

    NS, out = 1_000_000_000, []
    for j in range(n_req):
        start = int(j * (5e6 + tokens * tpot_ms * 1e6))
        toks = [start + int(5e6) + int(i * tpot_ms * 1e6) for i in range(tokens)]
        out.append(RequestRecord(
            run_id="r", request_id=user * 100 + j, mode="http", engine="http", model="m", model_bytes=0, k=1, b=1,
            prompt_id=f"default-{j}", prompt_tokens=16, t_scheduled_ns=start, t_submitted_ns=start,
            t_started_ns=start, t_first_token_ns=toks[0], t_done_ns=toks[-1] + NS // 10_000, token_ns=toks,
            output_tokens=tokens, finish_reason="length", worker=0, rep=0))
    return out


def test_http_bandwidth_uses_what_a_token_reads(tmp_path):
    """gpt-oss-20b served over HTTP, one stream, TPOT 20 ms: the server reads 3.71 GB a step (the hand
    arithmetic: 4 of 32 experts), 185 GB/s — not the 13.76 GB file ÷ 20 ms = 688 GB/s. --model-bytes takes the
    model's config.json: the plan carries its work and the file's bytes, and makes no roofline of this machine."""
    from measure.control.bench.cell import Cell, Spec
    from measure.control.builder import make_plan
    from measure.control.live.controller import LiveSettings
    from measure.core import metrics as M
    from tui.options import build_parser, plan_options

    hand = HAND["gpt-oss-20b"]
    cfg = str(CONFIGS / "gpt-oss-20b" / "config.json")
    dash, _ = build_parser()
    plan = make_plan(plan_options(dash.parse_args(["--engine", "http", "--url", "http://127.0.0.1:9/v1",
                                                   "--tokenizer", "none", "--model-bytes", cfg])),
                     default_max_tokens=8)
    served = plan.work()
    assert served is not None and plan.served is served and plan.roofline() is None
    assert plan.model_bytes == pytest.approx(hand["file"], rel=0.01) and LiveSettings.from_plan(plan).served is served
    assert plan.header({})["read_bytes_per_token"] == pytest.approx(hand["read"], rel=0.05)
    cell = Cell.measure(_stream(0), Spec(1, 1, plan.model_bytes, mode="http", served=served))
    assert cell.bandwidth.gbps == pytest.approx(hand["read"] / 0.020 / 1e9, rel=0.05)
    assert "W = bytes read per token" in cell.bandwidth.formula
    assert M.http_bandwidth(plan.model_bytes, [0.020]).gbps == pytest.approx(688, rel=0.01)  # the file's, before
    # four streams a step: the union of their experts (more than one token's, less than four tokens' each alone)
    four = M.http_read_bandwidth(served, [(0.020, 4 / 0.020)]).gbps
    assert four == pytest.approx(served.read_bytes(4) / 0.020 / 1e9)
    assert hand["read"] / 0.020 / 1e9 < four < 4 * hand["read"] / 0.020 / 1e9
    with pytest.raises(Exception, match="--model-bytes"):  # a file that is neither: one line
        (tmp_path / "x.json").write_text("[]")
        make_plan(plan_options(dash.parse_args(["--engine", "http", "--url", "http://127.0.0.1:9/v1",
                                                "--tokenizer", "none", "--model-bytes", str(tmp_path / "x.json")])),
                  default_max_tokens=8)


def test_the_dashboard_over_http_shows_what_a_step_reads(tmp_path):
    """The dashboard against a null server (20 ms a token, B = 1) with --model-bytes gpt-oss-20b's config.json:
    each tick's bandwidth product is W(tokens a step) ÷ TPOT p50 ≈ 3.71 GB ÷ 20 ms ≈ 185 GB/s, as a bench cell
    of the same records says, not the 13.76 GB file's 688 GB/s."""

    from conftest import NullServerProcess, record_dashboard

    from measure.control.bench import runs as RU
    from measure.control.bench.cell import Cell, Spec

    srv = NullServerProcess(ttft_ms=5.0, itl_ms=20.0)
    try:
        path, plan = record_dashboard(tmp_path, srv.url, ["--b", "1", "--max-tokens", "8", "--model-bytes",
                                                          str(CONFIGS / "gpt-oss-20b" / "config.json")], 6)
    finally:
        srv.kill()
    run = RU.load_run(path)
    shown = sorted(s.bw_gbps for s in run.samples if s.bw_gbps)
    assert shown, "the dashboard showed no bandwidth product"
    served = plan.served
    assert served is not None
    bench = Cell.measure([r for r in run.records if r.mode == "http"],
                         Spec(1, 1, plan.model_bytes, mode="http", served=served))
    hand = HAND["gpt-oss-20b"]["read"]
    assert bench.bandwidth.gbps == pytest.approx(hand / (bench.requests.tpot.p50 / 1e3) / 1e9, rel=0.1)
    assert shown[len(shown) // 2] == pytest.approx(bench.bandwidth.gbps, rel=0.25)
    assert shown[-1] < plan.model_bytes / 0.020 / 1e9 / 2  # never the file ÷ TPOT
    # the report of the recording and its replay count what the dashboard counted (the header keeps the work)
    assert run.header.served is not None and work.work_from_dict(run.header.served) == served
    (cell,) = [c for c in run.cells if c.mode == "http"]
    assert cell.bandwidth.gbps == pytest.approx(bench.bandwidth.gbps, rel=0.05)
    from measure.control.live.replay import ReplayController
    from measure.sources.replay import Recording

    assert ReplayController(Recording.load(path)).live.settings.served == served


def test_what_is_not_known_is_said(tmp_path):
    """An architecture whose transformers defaults are not in the table and a config silent on tied embeddings:
    read as untied, and said; safetensors far from what the config prices (a 4-bit file for a bf16 config): every
    weight at the files' average, and said."""
    cfg = json.loads((CONFIGS / "Llama-3.1-8B" / "config.json").read_text())
    del cfg["tie_word_embeddings"]
    cfg["model_type"] = "newarch"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with (tmp_path / "model.safetensors").open("wb") as fh:
        fh.truncate(4_500_000_000)
    w = model_files.work_from_config(tmp_path / "config.json")
    said = " | ".join(w.assumed)
    assert "tie_word_embeddings not in the config, and newarch's default not known here: read as untied" in said
    assert "every weight priced at their average, 0.560 B" in said
    assert w.read_bytes(1) == pytest.approx((8_030_261_248 - 128256 * 4096 + 4096) * 4.5e9 / 8_030_261_248)
