"""core/sizing.py by hand: plan's rows and the N-users verdict on a toy model (10 layers, 2 KV heads of 64: 5,120 B of
f16 KV a token; 1 GB of weights) and the toy GPU of test_roofline_oracle, each figure worked out in the comments
(benchmarks/mutation.py runs these against the module's mutants)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from measure.core import roofline as RL
from measure.core import sizing as S
from measure.core import work as W
from measure.core.guard import KVShape, mac_budget
from measure.core.units import fmt_bytes
from presets import chip as preset_chip

from test_roofline_oracle import AT, GPU, TOY

SHAPE = KVShape("toy", layers=10, kv_heads=2, head_dim=64, weight_bytes=1_000_000_000, source="hand")
MACHINE = S.PlanMachine(overhead=100_000_000)


def test_plan_rows_by_hand() -> None:
    p = S.plan(SHAPE, [1000, 2000], memory=10_000_000_000, machine=MACHINE)
    assert p["kv_bytes_per_token"] == 5120 and p["weights"] == 1_000_000_000 and p["overhead"] == 100_000_000
    # 85 % of 10 GB
    assert (p["budget"], p["budget_fraction"]) == (8_500_000_000, 0.85)
    assert p["budget_source"] == f"85% of {fmt_bytes(10_000_000_000)}"
    r = p["rows"][0]
    assert r["context"] == 1000 and r["kv_per_request"] == 5.12e6 and r["engine_per_request"] == 0.0
    assert r["kv_by_engine"] == {"llama (in-process)": 5.12e6, "llama-server": 5.12e6, "llama_cpp.server": 5.12e6,
                                 "mlx": 5.12e6}
    # B in one engine: (8.5 G − 1.1 G) // 5.12 M = 1445; K engines of one sequence: 8.5 G // 1.10512 G = 7
    assert (r["max_b_one_engine"], r["max_k_one_seq_each"]) == (1445, 7)
    assert r["concurrency_in_kv_cache"] is None and r["users_fit"] is None
    assert p["rows"][1]["max_b_one_engine"] == 722  # 7.4 G // 10.24 M
    assert p["users"] is None and "max_context_for_users" not in p and "read_bytes_per_token" not in p
    assert (p["unified"], p["kv_dtype"], p["model"], p["source"]) == (False, "f16", "toy", "hand")


def test_plan_with_users_a_fraction_a_dtype_and_a_kv_cache() -> None:
    p = S.plan(SHAPE, [1000, 2000], memory=10_000_000_000, users=100, kv_cache_tokens=4096, machine=MACHINE)
    assert [r["users_fit"] for r in p["rows"]] == [True, True]  # 1.1 G + 100 × 10.24 M = 2.124 G ≤ 8.5 G
    assert [r["concurrency_in_kv_cache"] for r in p["rows"]] == [4.096, 2.048]
    # (8.5 G − 1.1 G) // (100 × 5120) = 14453 tokens
    assert p["max_context_for_users"] == 14453
    tight = S.plan(SHAPE, [1000], memory=2_000_000_000, users=200, budget_fraction=0.6, machine=MACHINE)
    # 60 % of 2 G = 1.2 G: 1.1 G + 200 × 5.12 M = 2.124 G does not fit; (0.1 G) // (200 × 5120) = 97
    assert tight["budget"] == 1_200_000_000 and tight["budget_source"] == f"60% of {fmt_bytes(2_000_000_000)}"
    assert tight["rows"][0]["users_fit"] is False and tight["max_context_for_users"] == 97
    none = S.plan(SHAPE, [1000], memory=1_000_000_000, users=1, machine=MACHINE)
    assert none["max_context_for_users"] == 0 and none["rows"][0]["max_b_one_engine"] == 0
    f32 = S.plan(SHAPE, [1000], memory=10_000_000_000, kv_dtype="f32", machine=MACHINE)
    assert f32["kv_bytes_per_token"] == 10240 and f32["rows"][0]["kv_per_request"] == 10.24e6


def test_plan_on_unified_memory_and_with_the_models_work() -> None:
    shape = replace(SHAPE, hidden=100, intermediate=200, work=replace(TOY, window=128, window_layers=8))
    p = S.plan(shape, [1000], memory=32 * 2**30, machine=S.PlanMachine(overhead=0, unified=True))
    budget, source = mac_budget(32 * 2**30)
    assert (p["budget"], p["budget_source"], p["budget_fraction"], p["unified"]) == (budget, source, None, True)
    r = p["rows"][0]
    # mlx's prefill activations a sequence: min(1000, 2048) × (4 × 100 + 3 × 200) × 2 B
    assert r["engine_per_request"] == 2e6
    # the window cache: 2 full layers × 1000 + 8 windowed × 768 cells, 512 B each
    assert r["kv_per_request"] == (2 * 1000 + 8 * 768) * 512
    assert r["kv_by_engine"]["llama_cpp.server"] == 10 * 1000 * 512
    assert r["kv_by_engine"]["mlx"] == (2 * 1000 + 8 * 128) * 512
    assert r["max_b_one_engine"] == int((budget - 1e9) // (r["kv_per_request"] + 2e6))
    assert p["read_bytes_per_token"] == 1e9 and p["assumed"] == []
    assert p["work"].endswith("()")  # WorkModel.describe, then its note (empty here) in parentheses
    # a fraction given on a Mac: that fraction, not the working set
    q = S.plan(shape, [1000], memory=32 * 2**30, budget_fraction=0.5, machine=S.PlanMachine(0, True))
    assert q["budget"] == 16 * 2**30


def _plan(memory: int = 10_000_000_000) -> S.Plan:
    return S.plan(SHAPE, [1000], memory=memory, machine=MACHINE)


def test_size_for_users_by_hand() -> None:
    out = S.size_for_users(4, None, [1000], _plan(), TOY, GPU, 100, 11)
    b4 = RL.predict(TOY, GPU, "batch", 1, 4, at=AT)
    lines = out.splitlines()
    assert lines[0] == (f"4 users, 1,000 tokens each: KV {fmt_bytes(4 * 5.12e6)} ({fmt_bytes(5.12e6)} a request) + "
                        f"weights and runtime {fmt_bytes(1.1e9)} = {fmt_bytes(1.1e9 + 4 * 5.12e6)} needed; budget "
                        f"{fmt_bytes(8.5e9)}: fits")
    assert lines[1] == (f"all 4 in one engine (B = 4) on toy-gpu: {b4.per_stream_tps:.1f} tok/s per user, TPOT "
                        f"{b4.tpot_s * 1e3:.1f} ms, TTFT ≈ {b4.ttft_s:.2f} s when all 4 arrive at once (the p99 of a "
                        "burst; binding: bandwidth)")
    assert lines[2] == (f"machines of this kind (or server instances): 1, 4 users each ({fmt_bytes(1.1e9 + 4 * 5.12e6)}"
                        f", {b4.per_stream_tps:.1f} tok/s per user, TPOT {b4.tpot_s * 1e3:.1f} ms, TTFT ≈ "
                        f"{b4.ttft_s:.2f} s)")
    assert len(lines) == 3


def test_size_for_users_splits_to_meet_an_slo() -> None:
    # TTFT at B = 4: 4 prompts' prefill 40.04 ms + a step 11.82 ms = 51.9 ms; at B = 2: 20.02 + 11.31 = 31.3 ms.
    # A 40 ms TTFT bound: one machine of 4 is outside it, two of 2 are within
    b2 = RL.predict(TOY, GPU, "batch", 1, 2, at=AT)
    assert b2.ttft_s == pytest.approx(0.0313, abs=1e-4)
    out = S.size_for_users(4, "ttft=40ms", [1000], _plan(), TOY, GPU, 100, 11).splitlines()
    assert out[1].endswith("(the p99 of a burst; binding: bandwidth) → OUTSIDE ttft=40ms")
    assert out[2].startswith("machines of this kind (or server instances): 2, 2 users each (")
    ok = S.size_for_users(4, "ttft=60ms,tpot=12ms", [1000], _plan(), TOY, GPU, 100, 11).splitlines()
    assert ok[1].endswith("→ within ttft=60ms,tpot=12ms") and ok[2].startswith("machines of this kind (or server "
                                                                               "instances): 1, 4 users each")
    # TPOT at B = 1 is 11.05 ms: a 10 ms bound serves nobody
    never = S.size_for_users(3, "tpot=10ms", [1000], _plan(), TOY, GPU, 100, 11).splitlines()
    assert never[-1] == "machines of this kind: none serves even one user within the bounds at this context"
    # 5 users on machines of 2 (ceil(5 / 3) = 2 at m = 3): the first m whose share fits
    five = S.size_for_users(5, "ttft=40ms", [1000], _plan(), TOY, GPU, 100, 11).splitlines()
    assert five[2].startswith("machines of this kind (or server instances): 3, 2 users each (")
    with pytest.raises(S.PlanError, match="^--slo: "):
        S.size_for_users(4, "nonsense", [1000], _plan(), TOY, GPU, 100, 11)


def test_size_for_users_by_memory() -> None:
    # 1.15 G of memory × 0.85 = 977.5 M < 1.1 G of weights and runtime: nothing fits
    small = S.size_for_users(2, None, [1000], _plan(1_150_000_000), TOY, GPU, 100, 11).splitlines()
    assert small[0].endswith(": does NOT fit")
    assert small[-1] == "machines of this kind: none serves even one user within the bounds at this context"
    # 1.32 G × 0.85 = 1.122 G: 1.1 G + 4 × 5.12 M = 1.12048 G fits 4, 1.1 G + 5 × 5.12 M = 1.1256 G does not:
    # 5 users need 2 machines of 3 (ceil(5 / 2))
    five = S.size_for_users(5, None, [1000], _plan(1_320_000_000), TOY, GPU, 100, 11).splitlines()
    assert five[0].endswith(": does NOT fit")
    assert five[2].startswith("machines of this kind (or server instances): 2, 3 users each (")
    # the longest of the contexts is the one sized; a context plan has no row for: its KV by the bytes a token
    longest = S.size_for_users(1, None, [500, 1000], _plan(), TOY, GPU, 100, 11)
    assert longest.startswith(f"1 users, 1,000 tokens each: KV {fmt_bytes(5.12e6)} ")
    other = S.size_for_users(1, None, [3000], _plan(), TOY, GPU, 100, 11)
    assert other.startswith(f"1 users, 3,000 tokens each: KV {fmt_bytes(3000 * 5120)} ")


def test_chip_memory_and_unified() -> None:
    assert S.chip_memory(None) is None and S.chip_memory("this") is None and S.chip_memory("no-such-chip") is None
    from presets import chip

    assert S.chip_memory("apple-m4-pro") == max(chip("apple-m4-pro").memory_bytes)
    assert S.unified_memory("apple-m4-pro") is True
    assert S.unified_memory("nvidia-rtx-4090") is False and S.unified_memory("no-such-chip") is False


def test_exactly_at_the_budget_fits() -> None:
    # 100 % of 1,120,480,000 B: 1.1 G + 4 × 5.12 M is exactly the budget: it fits (≤), one more user does not
    p = S.plan(SHAPE, [1000], memory=1_120_480_000, users=4, budget_fraction=1.0, machine=MACHINE)
    assert p["rows"][0]["users_fit"] is True and p["rows"][0]["max_b_one_engine"] == 4
    assert p["rows"][0]["max_k_one_seq_each"] == 1
    lines = S.size_for_users(4, None, [1000], p, TOY, GPU, 100, 11).splitlines()
    assert lines[0].endswith(": fits") and lines[2].startswith("machines of this kind (or server instances): 1, 4 ")
    five = S.size_for_users(5, None, [1000], p, TOY, GPU, 100, 11).splitlines()
    assert five[2].startswith("machines of this kind (or server instances): 2, 3 users each (")


def test_chip_predictions_from_a_preset_chip_or_this_machines_probe() -> None:
    from measure.core.readings import Ceilings

    work, m, rows = S.chip_predictions(lambda: TOY, "nvidia-rtx-4090", 100, 11, context=1000)
    assert work is TOY and m == RL.Machine.from_chip(preset_chip("nvidia-rtx-4090"))
    assert rows == RL.prediction_table(TOY, m, prompt_tokens=100, output_tokens=11, context=1000)
    probe = Ceilings("box", "toy-cpu", 2, 8 * 2**30, 0, {"1": 60.0}, {"decode_tps": {"1": 50.0},
                                                                     "prefill_tps": 100.0})
    work, m, rows = S.chip_predictions(lambda: TOY, lambda: probe, 100, 11)
    assert m == RL.Machine.from_ceilings(probe, TOY) and rows[0].context == 105
    with pytest.raises(S.PlanError, match="^unknown chip 'no-such-chip'"):
        S.chip_predictions(lambda: TOY, "no-such-chip", 100, 11)

    def broken() -> W.WorkModel:
        raise ValueError("the config has no hidden_size")

    with pytest.raises(S.PlanError, match="^the config has no hidden_size$"):
        S.chip_predictions(broken, "nvidia-rtx-4090", 100, 11)


def test_chip_predictions_on_unified_memory_read_the_excess_from_swap() -> None:
    shape = replace(SHAPE, hidden=100, intermediate=200)
    result = S.plan(shape, [1000, 4000], memory=2 * 2**30, machine=S.PlanMachine(overhead=50_000_000, unified=True),
                    budget_fraction=0.5)
    _, m, rows = S.chip_predictions(lambda: TOY, "apple-m4-pro", 100, 11, context=4000, result=result)
    row = result["rows"][1]
    assert (m.memory_budget, m.overhead_bytes, m.seq_extra_bytes) == (2**30, 50_000_000, row["engine_per_request"])
    assert m.notes[-1] == (f"memory budget {fmt_bytes(2**30)} (unified memory): a level over it reads the excess "
                           f"back from swap at {m.swap_gbps:g} GB/s (assumed) each step")
    assert any(r.spill_bytes > 0 for r in rows)
    # a context plan has no row for: nothing beside the KV
    _, m2, _ = S.chip_predictions(lambda: TOY, "apple-m4-pro", 100, 11, context=2000, result=result)
    assert m2.seq_extra_bytes == 0.0
    # the prompt and half the output where no context is given: 100 + 11 // 2 = 105, no row
    _, m3, _ = S.chip_predictions(lambda: TOY, "apple-m4-pro", 100, 11, result=result)
    assert m3.seq_extra_bytes == 0.0 and m3.memory_budget == 2**30
    _, flat, _ = S.chip_predictions(lambda: TOY, "apple-m4-pro", 100, 11, context=4000,
                                    result=S.plan(shape, [4000], memory=2 * 2**30, machine=MACHINE))
    assert flat.memory_budget is None


def test_plan_counts_the_runtime_and_an_engines_extra_in_every_verdict() -> None:
    # 60 % of 2 G = 1.2 G: 30 users of 5.12 M beside 1.1 G is 1.2536 G, over; without the 0.1 G runtime it would fit
    p = S.plan(SHAPE, [1000], memory=2_000_000_000, users=30, budget_fraction=0.6, machine=MACHINE)
    assert p["rows"][0]["users_fit"] is False
    # unified: each sequence holds 2 MB of mlx's prefill activations beside its KV (both in every count)
    shape = replace(SHAPE, hidden=100, intermediate=200)
    u = S.plan(shape, [1000], memory=2_000_000_000, users=30, budget_fraction=0.6,
               machine=S.PlanMachine(overhead=0, unified=True))
    r = u["rows"][0]
    assert r["engine_per_request"] == 2e6
    assert r["max_b_one_engine"] == int((1.2e9 - 1e9) // (5.12e6 + 2e6)) == 28
    assert r["max_k_one_seq_each"] == int(1.2e9 // (1e9 + 5.12e6 + 2e6)) == 1
    assert r["users_fit"] is False  # 1 G + 30 × 7.12 M = 1.2136 G > 1.2 G; the KV alone (1.1536 G) would fit
    lines = S.size_for_users(30, None, [1000], u, TOY, GPU, 100, 11).splitlines()
    assert lines[0].startswith(f"30 users, 1,000 tokens each: KV {fmt_bytes(30 * 7.12e6)} ({fmt_bytes(7.12e6)} a "
                               "request)")
    # a model with windows: the window cache's KV, not the context's × the bytes a token
    swa = replace(SHAPE, work=replace(TOY, window=128, window_layers=8))
    w = S.plan(swa, [1000], memory=10_000_000_000, machine=MACHINE)
    per = (2 * 1000 + 8 * 768) * 512
    assert w["rows"][0]["kv_per_request"] == per
    assert S.size_for_users(2, None, [1000], w, TOY, GPU, 100, 11).startswith(
        f"2 users, 1,000 tokens each: KV {fmt_bytes(2 * per)} ({fmt_bytes(per)} a request)")


def test_chip_predictions_read_the_prompt_and_half_the_output_row_and_refuse_a_chip_without_bandwidth(
        monkeypatch: pytest.MonkeyPatch) -> None:
    shape = replace(SHAPE, hidden=100, intermediate=200)
    # plan has a row at 100 + 11 // 2 = 105 tokens: with no context asked, its engine bytes a sequence are read
    result = S.plan(shape, [105, 4000], memory=2 * 2**30, machine=S.PlanMachine(overhead=50_000_000, unified=True),
                    budget_fraction=0.5)
    assert result["rows"][0]["engine_per_request"] > 0
    _, m, _ = S.chip_predictions(lambda: TOY, "apple-m4-pro", 100, 11, result=result)
    assert m.seq_extra_bytes == result["rows"][0]["engine_per_request"]
    # a chip whose bandwidth nobody verified (its row has none): one line, what to do
    with pytest.raises(S.PlanError) as e:
        S.chip_predictions(lambda: TOY, "apple-m5-ultra", 100, 11)
    assert str(e.value) == "chip 'apple-m5-ultra' has no verified bandwidth in presets; predict with a chip that has one"
    # this machine, when it is a Mac: unified memory
    monkeypatch.setattr(S, "is_mac", lambda: True)
    assert S.unified_memory("this") is True and S.unified_memory(None) is True and S.unified_memory("") is True


def test_one_user_needs_one_machine() -> None:
    # one user of 4.9 MiB beside 1.02 GiB fits the 1.04 GiB budget: one machine, one user on it
    p = S.plan(SHAPE, [1000], memory=1_120_480_000, users=1, budget_fraction=1.0, machine=MACHINE)
    lines = S.size_for_users(1, None, [1000], p, TOY, GPU, 100, 11).splitlines()
    assert lines[2].startswith("machines of this kind (or server instances): 1, 1 users each (")


def test_an_engines_extra_counts_in_k_engines_of_one_sequence() -> None:
    # unified, 50 % of 4.02 G = 2.01 G; an engine of one 1000-token sequence holds 1 G of weights + 5.12 M of KV +
    # 2 M of mlx's prefill activations = 1.00712 G: two need 2.01424 G > 2.01 G, so K = 1 (with the 2 M taken off
    # instead, 1.00312 G, or the KV taken off, 0.99688 G, two would seem to fit)
    shape = replace(SHAPE, hidden=100, intermediate=200)
    p = S.plan(shape, [1000], memory=4_020_000_000, budget_fraction=0.5,
               machine=S.PlanMachine(overhead=0, unified=True))
    r = p["rows"][0]
    assert p["budget"] == 2_010_000_000 and r["engine_per_request"] == 2e6
    assert r["max_k_one_seq_each"] == 1
    # B in one engine: (2.01 G − 1 G) // 7.12 M = 141 (141 × 7.12 M = 1.00392 G; 142 × = 1.01104 G)
    assert r["max_b_one_engine"] == 141


def test_the_longest_context_for_users_is_the_floor_of_the_room() -> None:
    # a 1-layer model of one KV head of 1 (q4_0: 18 B a 32 elements) holds 2 × 18/32 = 1.125 B a token; 1 B of
    # weights, no runtime, 100 % of 2,251,799,813,685,251 B: room 2,251,799,813,685,250 B for one user's tokens.
    # room ÷ 1.125 = room × 8 ÷ 9 = 18,014,398,509,482,000 ÷ 9 = 2,001,599,834,386,888 remainder 8 (…888.89): the
    # floor is …888. The float quotient rounds to …889 (a double's step there is 0.25), which does not fit
    tiny = KVShape("tiny", layers=1, kv_heads=1, head_dim=1, weight_bytes=1, source="hand")
    p = S.plan(tiny, [1000], memory=2_251_799_813_685_251, kv_dtype="q4_0", users=1, budget_fraction=1.0,
               machine=S.PlanMachine(overhead=0))
    assert p["kv_bytes_per_token"] == 1.125 and p["budget"] == 2_251_799_813_685_251
    assert p["max_context_for_users"] == 2_001_599_834_386_888


def test_a_chip_presets_give_no_memory_sizes_has_no_memory() -> None:
    # apple-m5-ultra: presets/chips.toml lists no memory options (memory_gib = [])
    assert preset_chip("apple-m5-ultra").memory_bytes == ()
    assert S.chip_memory("apple-m5-ultra") is None


def test_a_context_plan_has_no_row_for_adds_nothing_beside_its_kv() -> None:
    # plan made for 500 tokens; sized at 1000: 1000 × 5120 B = 5.12 M a request, nothing beside it. 4 users need
    # 1.1 G + 4 × 5.12 M = 1,120,480,000 B, exactly the budget (100 %): they fit on one machine
    p = S.plan(SHAPE, [500], memory=1_120_480_000, budget_fraction=1.0, machine=MACHINE)
    lines = S.size_for_users(4, None, [1000], p, TOY, GPU, 100, 11).splitlines()
    assert lines[0] == (f"4 users, 1,000 tokens each: KV {fmt_bytes(4 * 5.12e6)} ({fmt_bytes(5.12e6)} a request) + "
                        f"weights and runtime {fmt_bytes(1.1e9)} = {fmt_bytes(1_120_480_000)} needed; budget "
                        f"{fmt_bytes(1_120_480_000)}: fits")
    assert lines[2].startswith("machines of this kind (or server instances): 1, 4 users each (")


def test_a_prediction_exactly_at_the_slos_bound_is_within_it() -> None:
    # the bounds written as the B = 4 prediction itself (TPOT 11.82 ms, TTFT 51.86 ms: test_size_for_users_splits_
    # to_meet_an_slo), in seconds as Python prints them (read back to the same float): each is met (≤)
    b4 = RL.predict(TOY, GPU, "batch", 1, 4, at=AT)
    for spec in (f"tpot={b4.tpot_s!r}s", f"ttft={b4.ttft_s!r}s", f"ttft={b4.ttft_s!r}s,tpot={b4.tpot_s!r}s"):
        out = S.size_for_users(4, spec, [1000], _plan(), TOY, GPU, 100, 11).splitlines()
        assert out[1].endswith(f"(the p99 of a burst; binding: bandwidth) → within {spec}")
        assert out[2].startswith("machines of this kind (or server instances): 1, 4 users each (")


def test_size_for_users_shows_tpot_in_ms_to_a_tenth() -> None:
    # a 10 GB/s GPU, one user: a step reads 1 G + 5.12 M in 100.512 ms, + 4.096 µs of attention + 1 ms =
    # 101.516096 ms (1 ÷ 0.101516096 s = 9.85 tok/s); TTFT: the prompt's max(10.01 ms of FLOP, 1 G ÷ 10 GB/s =
    # 100 ms) + a step = 201.5 ms
    slow = replace(GPU, bandwidth_gbps=10.0)
    lines = S.size_for_users(1, None, [1000], _plan(), TOY, slow, 100, 11).splitlines()
    assert lines[1] == ("all 1 in one engine (B = 1) on toy-gpu: 9.9 tok/s per user, TPOT 101.5 ms, TTFT ≈ 0.20 s "
                        "when all 1 arrive at once (the p99 of a burst; binding: bandwidth)")
    assert lines[2] == (f"machines of this kind (or server instances): 1, 1 users each ({fmt_bytes(1.10512e9)}, 9.9 "
                        "tok/s per user, TPOT 101.5 ms, TTFT ≈ 0.20 s)")
