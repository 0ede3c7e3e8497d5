"""Issue 14: the model of the work, the predictor on synthetic ceilings, the probe's format. Hand-computed."""
import json

import pytest

import presets
from measure.core.ceilings import Ceilings
from measure.core.roofline import Machine, Point, calibrate, predict
from measure.core.work import config_params, from_config, from_gguf, from_preset


def test_work_of_the_embedded_gemma(model):
    """Gemma 3 270M Q4_K_M: no output.weight, so the embedding (Q8_0, 178,257,920 B of the 246,587,904 B of
    tensors) is the output projection and is read whole every step; every one of the 268,098,176 params is
    multiplied: 2 × 268,098,176 = 536,196,352 FLOP per token, + 4 × 18 layers × 4 heads × 256 = 73,728 FLOP
    per token of context. KV: 2 × 18 × 1 × 256 × 2 B = 18,432 B per token."""
    w = from_gguf(model.info)
    assert (w.weight_bytes, w.params, w.embd_row_bytes) == (246_587_904, 268_098_176, 0.0)
    assert w.file_bytes == 253_113_024 and "tied" in w.note
    assert w.flops_per_token(0) == 536_196_352 and w.flops_per_token(1000) == 536_196_352 + 73_728_000
    assert w.kv_bytes_per_token == 18_432
    assert w.bytes_per_step([100, 300]) == 246_587_904 + 18_432 * 400


LLAMA_31_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "tie_word_embeddings": False,
               "torch_dtype": "bfloat16"}


def test_work_of_a_llama_31_8b_config(tmp_path):
    """Per layer: q 4096×4096 + k, v 2 × 4096×1024 + o 4096×4096 + MLP 3 × 4096×14336 + 2 norms × 4096
    = 218,112,000; × 32 = 6,979,584,000; + embedding and lm_head 2 × 128,256 × 4096 = 1,050,673,152 + the final
    norm 4096 = 8,030,261,248 params (the model card's 8.03 B). bf16, untied: a step reads all but the input
    embedding (1,050,673,152 B) = 15,009,849,344 B, plus one 8,192 B row per sequence; FLOPs per token =
    2 × (8,030,261,248 − 525,336,576) = 15,009,849,344, + 4 × 32 × 32 × 128 = 524,288 per token of context."""
    assert config_params(LLAMA_31_8B) == (8_030_261_248, 525_336_576)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(LLAMA_31_8B))
    w = from_config(p)
    assert w.params == 8_030_261_248 and w.weight_bytes == 15_009_849_344 and w.embd_row_bytes == 8192
    assert w.flops_per_token(0) == 15_009_849_344 and w.flops_per_token(4096) == 15_009_849_344 + 524_288 * 4096
    assert w.kv_bytes_per_token == 131_072  # 128 KiB (seed 002)
    pre = from_preset(presets.model("llama-3.1-8b"))
    assert (pre.weight_bytes, pre.flops_per_token(0), pre.kv_bytes_per_token) == (15_009_849_344, 15_009_849_344,
                                                                                 131_072)


def gpu(bw=1000.0, flops=None):
    return Machine("test GPU", bw, "test", flops=flops)


def test_bandwidth_bound_instances_pin_the_product():
    """A 10 GB model on 1000 GB/s: one stream 10 ms per token. K instances share β: TPOT(K) = K × 10 ms and
    K × per-stream tok/s × W = 1000 GB/s at every K (seed 000's invariant)."""
    w = from_preset(presets.model("llama-3.1-8b"))
    for k in (1, 2, 4):
        p = predict(w, gpu(), "instances", k=k, context=0)
        assert p.binding == "bandwidth"
        assert p.tpot_s == pytest.approx(k * w.weight_bytes / 1e12)
        assert k * p.per_stream_tps * w.weight_bytes / 1e9 == pytest.approx(1000.0)


def test_compute_bound_batch():
    """B = 64 in one engine on 1000 GB/s and 100 TFLOP/s: weights 15.0 GB → 15 ms; FLOPs 64 × 15.0 GFLOP =
    960.6 GFLOP → 9.6 ms at context 0: bandwidth binds. At B = 256 compute (38.4 ms) binds."""
    w = from_preset(presets.model("llama-3.1-8b"))
    m = gpu(flops=100e12)
    assert predict(w, m, "batch", b=64, context=0).binding == "bandwidth"
    p = predict(w, m, "batch", b=256, context=0)
    assert p.binding == "compute" and p.tpot_s == pytest.approx(256 * 15_009_849_344 / 100e12)


def cpu(cores=2):
    """A CPU whose step costs 20 core-ms at B = 1 and 2 core-ms per further sequence, 2 threads ×1.6."""
    return Machine("test CPU", 1000.0, "test", cores=cores, step_core_s=0.020, seq_core_s=0.002,
                   prefill_core_s=0.001, thread_speedup={1: 1.0, 2: 1.6})


def test_core_bound_cpu():
    """K=1 on 2 threads: 20 / 1.6 = 12.5 ms. K=2 (1 thread each): 20 ms, aggregate ×1.25 of K=1 at the same
    prefill share. K=3 on 2 cores (1 thread each, 3 threads on 2 cores): 20 × 3/2 = 30 ms. B=8 on 2 threads:
    (20 + 7 × 2) / 1.6 = 21.25 ms per step."""
    w = from_preset(presets.model("gemma-3-270m-q4_k_m"))
    m = cpu()
    assert predict(w, m, "instances", 1, context=0).tpot_s == pytest.approx(0.0125)
    p2 = predict(w, m, "instances", 2, context=0)
    assert p2.tpot_s == pytest.approx(0.020) and p2.binding == "cores"
    assert predict(w, m, "instances", 3, context=0).tpot_s == pytest.approx(0.030)
    assert predict(w, m, "batch", 1, 8, context=0).tpot_s == pytest.approx(0.02125)


def test_calibration_from_two_points():
    """Measured K=1 B=1: 15 ms (the model said 12.5) → a step costs 24 core-ms; measured B=8: 30 ms →
    each further sequence (30 × 1.6 − 24) / 7 = 3.43 core-ms."""
    w = from_preset(presets.model("gemma-3-270m-q4_k_m"))
    m = calibrate(w, cpu(), [Point("instances", 1, 1, 2, 0.015, output_tokens=2, prompt_tokens=0),
                             Point("batch", 1, 8, 2, 0.030, output_tokens=2, prompt_tokens=0)])
    ctx_scale = w.flops_per_token(1) / w.flops_per_token(0)
    assert m.step_core_s * ctx_scale == pytest.approx(0.024 * ctx_scale, rel=1e-3)
    assert predict(w, m, "batch", 1, 8, 2, 0, 2).tpot_s == pytest.approx(0.030, rel=1e-6)
    with pytest.raises(ValueError):
        calibrate(w, cpu(), [Point("instances", 1, 1, 2, 0.01)] * 3)


def test_probe_format_round_trips():
    c = Ceilings("host", "AMD EPYC", 2, 25_000_000_000, 0, {"1": 25.7, "2": 27.7},
                 {"model": "m", "weight_bytes": 246_587_904, "decode_tps": {"1": 56.0, "2": 80.0},
                  "prefill_tps": 400.0, "batch_steps_per_s": {"2": 40.0, "8": 20.0}}, "now", 12.0)
    assert c.attainable_gbps == 27.7 and c.decode_tps(2) == 80.0
    text = c.describe()
    assert "27.7 GB/s" in text and "1 thread 56.0, 2 threads 80.0 tok/s" in text
    again = Ceilings(**json.loads(json.dumps(c.__dict__)))
    assert again == c
    w = from_preset(presets.model("gemma-3-270m-q4_k_m"))
    c.engine["weight_bytes"] = w.weight_bytes  # the probe ran this very model: no rescaling by W
    m = Machine.from_ceilings(c, w)
    assert m.thread_speedup == {1: 1.0, 2: pytest.approx(80 / 56)} and m.bandwidth_gbps == 27.7
    # batches ran on 2 threads (×80/56): B=2 25 ms → 35.7 core-ms, B=8 50 ms → 71.4 core-ms: 5.95 core-ms a
    # sequence on a 23.8 core-ms base
    sp = 80 / 56
    assert m.seq_core_s == pytest.approx((0.050 - 0.025) * sp / 6)
    assert m.step_core(8) == pytest.approx(0.050 * sp) and m.step_core(1) == pytest.approx(1 / 56)


def test_wall_names_the_binding_ceiling_with_its_share():
    from measure.control.wall import ceiling

    assert ceiling(23.0, None, 100.0, 2, attainable_gbps=25.0) == "memory bandwidth (92% of attainable)"
    assert ceiling(5.0, None, 190.0, 2, attainable_gbps=25.0) == "CPU cores (1.9 of 2 busy)"
    assert ceiling(10.0, None, 120.0, 2, 25.0, "compute").startswith("compute")
    assert ceiling(10.0, None, 60.0, 2, attainable_gbps=25.0) == "none: 60% headroom"
    # llama_cpp.server decodes one request at a time: 4 streams asked, 1.0 decoding
    assert ceiling(None, None, 5.0, 2, remote=True, streams_asked=4, streams_decoding=1.0).startswith(
        "server queue (one request at a time")
    assert ceiling(None, None, 5.0, 2, remote=True, streams_asked=4, streams_decoding=3.8).startswith("not measured")


@pytest.mark.asyncio
async def test_dashboard_draws_the_attainable_line_and_predictions_without_a_chip_preset():
    """No spec β (no preset for this chip), but the probe measured 25 GB/s: the bandwidth chart has its line,
    the numbers panel a prediction with its error."""
    from measure.core.roofline import Roofline
    from sim import run_for, sim_controller
    from tui.app import InferenceTop

    w = from_preset(presets.model("gemma-3-270m-q4_k_m"))
    roof = Roofline(w, Machine("test CPU", 25.0, "attainable (probe)", cores=2, step_core_s=0.01,
                                thread_speedup={1: 1.0, 2: 1.5}), 25.0)
    c, fleet, clock = sim_controller(k=1, roofline=roof)
    c.s.bandwidth_gbps = None
    c.info = c.info.__class__(**{**c.info.__dict__, "bandwidth_gbps": None})
    run_for(c, fleet, clock, 8)
    n = c.snapshot().numbers
    assert n.predicted_tpot is not None and n.predicted_tps and n.predicted_by.startswith("roofline")
    assert n.mbu is not None
    app = InferenceTop(c, live=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        app.refresh_charts()
        await pilot.pause()
        assert "attainable 25.0 GB/s" in str(app.query_one("#chart-bw").render())
        assert "predicted" in str(app.query_one("#numbers").render()) and "MBU" in str(app.query_one("#numbers").render())
