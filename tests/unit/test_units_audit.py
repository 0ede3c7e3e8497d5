"""Audit 22 item 14: one convention for sizes. A memory size (RAM, a budget, a footprint, weights in memory)
is binary, as RAM vendors mean it: 48G = 48GB = 48GiB = 48 × 2³⁰ B, shown in GiB; bandwidth is decimal
(GB/s = 10⁹ B/s), as every chip's spec figure is (docs/design/units.md)."""
import re

import presets
from measure.core.guard import shape_from_preset
from measure.core.sizing import format_plan, plan
from measure.core.units import GiB, MiB, parse_size


def test_a_typed_size_is_binary_whatever_its_suffix():
    assert parse_size("48G") == parse_size("48GB") == parse_size("48GiB") == 48 * GiB
    assert parse_size("512M") == parse_size("512MiB") == 512 * MiB and parse_size("1.5g") == int(1.5 * GiB)
    # exact decimal bytes are written as a number
    assert parse_size("16000000000") == parse_size("16e9") == 16_000_000_000


def test_plan_memory_48g_is_shown_in_the_unit_it_was_read_in():
    """plan --memory 48G printed 'memory 44.70 GiB' (48 × 10⁹ B in GiB) beside 'weights: 16.06 GB'."""
    shape = shape_from_preset("llama-3.1-8b")
    text = format_plan(plan(shape, [1256, 16384], parse_size("48G")), shape)
    assert "memory 48.00 GiB, budget 85% = 40.80 GiB" in text
    assert "weights: 14.96 GiB" in text  # 16,060,522,496 B, held in memory whole
    assert not re.search(r"\bGB\b", text), text


def test_a_chips_memory_is_gib():
    """A chip's '96 GB' is 96 GiB (Apple's unified memory, NVIDIA's HBM): it was read as 96 × 10⁹ B.
    The A100 80GB reports 81,920 MiB of memory in nvidia-smi: 80 GiB exactly."""
    from measure.core.sizing import chip_memory

    assert chip_memory("apple-m2-max") == 96 * GiB
    assert chip_memory("nvidia-a100-80gb") == 81_920 * MiB
    for c in presets.chips().values():
        assert c.memory_bytes == tuple(int(n * GiB) for n in c.memory_gib), c.key


def test_the_memory_budget_is_echoed_in_gib():
    from measure.control.builder import resolve_budget

    assert resolve_budget("48G", 64 * GiB, "physical memory") == (48 * GiB, "--memory-budget 48G = 48.0 GiB")
    n, src = resolve_budget(None, 64 * GiB, "physical memory")
    assert n == int(0.85 * 64 * GiB) and src == "85% of 64.0 GiB (physical memory)"


def test_the_guard_speaks_gib():
    from measure.core.guard import admit, footprint

    fp = footprint(k=2, b=1, ctx=1000, weight_bytes=4 * GiB, kv_per_token=0, overhead_bytes=GiB // 2)
    assert "K=2 B=1 needs ≈ 9.0 GiB of 8.0 GiB budget (weights 8.0 GiB + runtime 1.0 GiB + KV 0.0 GiB)" in \
        admit(fp, budget=8 * GiB)
