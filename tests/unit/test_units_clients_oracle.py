"""Oracles for the units (measure/core/units.py: the one size parser, the formats) and for the split of one load over
client machines (measure/core/clients.py: --segment, --start-at, the weighted deal, the clock check against a
server's Date header). Worked by hand; no clock read but the one each case passes (benchmarks/mutation.py mutates
both modules against these)."""
from __future__ import annotations

import math

import pytest

from measure.core import clients as C
from measure.core.lines import ClockCheck
from measure.core.records import RequestRecord
from measure.core.units import GiB, KiB, MiB, UnitError, fmt_bytes, fmt_gib, fmt_ms, parse_size


# --- units ------------------------------------------------------------------------------------------------------

def test_parse_size_binary_as_ram_is_sold():
    for text in ("48G", "48GB", "48GiB", "48g", " 48 gib ", "48gb"):
        assert parse_size(text) == 48 * GiB, text
    assert parse_size("512M") == 512 * MiB and parse_size("1.5g") == int(1.5 * GiB) and parse_size("4k") == 4 * KiB
    assert parse_size("2T") == 2 * 1024 ** 4 and parse_size("7b") == 7 and parse_size("16000000000") == 16_000_000_000
    assert parse_size("16e9") == 16_000_000_000 and parse_size(".5k") == 512 and parse_size("1") == 1
    for bad in ("", "G", "48X", "16e9G", "-1G", "4 8G", "1e", "48GiBs", "1.2.3"):
        with pytest.raises(UnitError) as e:
            parse_size(bad)
        assert str(e.value) == (f"bad size {bad!r}: write e.g. 48G (= 48 GiB = 48 × 2³⁰ B), 512M, or a number of "
                                "bytes (16e9)")
    for zero in ("0", "0G", "0.0"):
        with pytest.raises(UnitError) as e:
            parse_size(zero)
        assert str(e.value) == f"size {zero!r} must be greater than 0"
    assert parse_size("0.9") == 0  # more than 0, below a byte: whole bytes, down


def test_formats():
    assert fmt_bytes(None) == "—"
    assert fmt_bytes(GiB) == "1.00 GiB" and fmt_bytes(GiB - 1) == "1024.0 MiB" and fmt_bytes(1.5 * GiB) == "1.50 GiB"
    assert fmt_bytes(MiB) == "1.0 MiB" and fmt_bytes(MiB - 1) == "1024.0 KiB" and fmt_bytes(KiB) == "1.0 KiB"
    assert fmt_bytes(KiB - 1) == "1023 B" and fmt_bytes(0) == "0 B"
    assert fmt_bytes(-2 * GiB) == "-2.00 GiB" and fmt_bytes(-3 * MiB) == "-3.0 MiB" and fmt_bytes(-2 * KiB) == "-2.0 KiB"
    assert fmt_gib(48 * GiB) == "48.0 GiB" and fmt_gib(0.05 * GiB) == "0.1 GiB"
    assert fmt_ms(None) == "—" and fmt_ms(0.0234) == "23.4 ms" and fmt_ms(0) == "0.0 ms"


# --- one load over client machines -----------------------------------------------------------------------------

def test_parse_segment():
    assert C.parse_segment("1/2") == (1, 2) and C.parse_segment(" 3/3 ") == (3, 3) and C.parse_segment("1/1") == (1, 1)
    for bad in ("0/2", "3/2", "1", "2/", "-1/2"):
        with pytest.raises(ValueError) as e:
            C.parse_segment(bad)
        assert str(e.value) in (f"--segment {bad!r}: i runs 1 … N (client i of N clients), e.g. 1/2 and 2/2",
                                f"--segment {bad!r}: write i/N, e.g. 1/2 (this is client 1 of 2)"), str(e.value)
    with pytest.raises(ValueError, match="write i/N"):
        C.parse_segment("a/b")
    with pytest.raises(ValueError, match="i runs 1 … N"):
        C.parse_segment("0/2")
    with pytest.raises(ValueError, match="write i/N"):
        C.parse_segment(None)  # type: ignore[arg-type]


def test_parse_start_at():
    now = 1_748_788_200.0  # 2025-06-01T14:30:00Z
    assert C.parse_start_at("1748788260", now) == 1_748_788_260.0
    assert C.parse_start_at("2025-06-01T14:31:00Z", now) == now + 60
    assert C.parse_start_at("2025-06-01T14:31:00z", now) == now + 60
    assert C.parse_start_at("2025-06-01T16:31:00+02:00", now) == now + 60
    assert C.parse_start_at(str(now - 1.0), now) == now - 1.0  # a second in the past is still now
    with pytest.raises(ValueError) as e:
        C.parse_start_at(str(now - 1.5), now)
    assert str(e.value) == (f"--start-at {now - 1.5}: that was 2 s ago (more than 1 s in the past); give a time ahead "
                            "of now, the same on every client")
    with pytest.raises(ValueError) as e:
        C.parse_start_at("soon", now)
    assert str(e.value).startswith("--start-at 'soon': give an ISO time (2025-06-01T14:30:00, local unless it names")
    for bad in ("inf", "nan"):
        with pytest.raises(ValueError) as e:
            C.parse_start_at(bad, now)
        assert str(e.value) == f"--start-at {bad!r}: not a time"
    assert C.parse_start_at("  1748788260 ", now) == 1_748_788_260.0


def test_deal_by_hand_the_earliest_due_of_the_clients_not_ahead():
    # 2,1,1 (Σw 4). Turn t (0-based, t dealt so far): the clients with taken × 4 ≤ t × w, the earliest (taken + 1) ÷ w,
    # a tie to the smaller weight, then the first. t = 0: all, due 1/2, 1, 1 → 1. t = 1: 1 is ahead (4 > 2); 2 and 3 due
    # at 1, weights equal → 2. t = 2: 1 (4 ≤ 4) and 3 due at 1 → the smaller weight, 3. t = 3: 1 (4 ≤ 6), due 1 → 1.
    # t = 4: 1 (8 ≤ 8) due 3/2; 2, 3 (4 ≤ 4) due 2 → 1. Then 2, 3, 1 as at t = 1 … 3
    assert C.deal([2, 1, 1], 8) == [1, 2, 3, 1, 1, 2, 3, 1]
    assert C.deal([1, 1], 5) == [1, 2, 1, 2, 1] and C.deal([3], 3) == [1, 1, 1] and C.deal([1, 2], 0) == []
    # 1,2: t = 0: due 1 and 1/2 → 2; t = 1: 2 ahead (3 > 2) → 1; t = 2: 1 ahead (3 > 2) → 2; t = 3: both (3 ≤ 3,
    # 3 ≤ 6), due 2 and 3/2 → 2
    assert C.deal([1, 2], 6) == [2, 1, 2, 2, 1, 2]
    # 1,3: t = 1: client 2 is ahead (1 × 4 > 1 × 3) though its next falls due first (2/3 against 1) → 1
    assert C.deal([1, 3], 4) == [2, 1, 2, 2]
    # Hypothesis's find against nginx's smooth round robin (a weight-1 client 1.06 over its share): every client
    # within one of 295 × w ÷ 34 (8.68 and 52.06)
    assert [C.deal([1, 1, 1, 1, 6, 6, 6, 6, 6], 295).count(c) for c in range(1, 10)] == [9, 9, 9, 8, 52, 52, 52, 52, 52]
    for bad in ([], [1, 0], [2, -1]):
        with pytest.raises(ValueError) as e:
            C.deal(bad, 4)
        assert str(e.value) == f"weights {bad}: one whole number ≥ 1 a client"


def test_split_and_shares():
    assert C.split(7, [1, 1, 1]) == [[0, 3, 6], [1, 4], [2, 5]]
    assert C.split(5, [2, 1, 1]) == [[0, 3, 4], [1], [2]]
    assert C.split(6, [1, 2]) == [[1, 4], [0, 2, 3, 5]]
    assert C.split(0, [2, 1]) == [[], []] and C.split(3, [5]) == [[0, 1, 2]]
    assert C.shares(5, [2, 1, 1]) == [3, 1, 1] and C.shares(10, [1, 1, 1]) == [4, 3, 3]
    for bad in ([], [0, 1]):
        with pytest.raises(ValueError) as e:
            C.split(4, bad)
        assert str(e.value) == f"weights {bad}: one whole number ≥ 1 a client"


def test_the_clock_offset_from_a_servers_date_header():
    # one answer: sent 100.2, received 100.4, Date 100: θ ∈ [100 − 100.4, 101 − 100.2] = [−0.4, 0.8]: 0.2 ± 0.6
    off, bound = C.offset_from_ticks([C.Tick(100.2, 100.4, 100)])
    assert (off, bound) == (pytest.approx(0.2), pytest.approx(0.6))
    # a second answer whose Date ticked over: the tick lies between the first's send and the second's receive:
    # θ ∈ (101 − 101.3, 101 − 100.2) = (−0.3, 0.8); with each answer's own: [−0.4, 0.8] ∩ [101 − 101.3, 102 − 101.1]
    # = [−0.3, 0.8] ∩ … = [−0.3, 0.8]: 0.25 ± 0.55
    off, bound = C.offset_from_ticks([C.Tick(100.2, 100.4, 100), C.Tick(101.1, 101.3, 101)])
    assert (off, bound) == (pytest.approx(0.25), pytest.approx(0.55))
    # the same Date twice: the second answer's [100 − 100.6, 101 − 100.5] = [−0.6, 0.5] with the first's [−0.4, 0.8]
    off, bound = C.offset_from_ticks([C.Tick(100.2, 100.4, 100), C.Tick(100.5, 100.6, 100)])
    assert (off, bound) == (pytest.approx(0.05), pytest.approx(0.45))
    # a Date that goes back (cached) contradicts the rest
    assert C.offset_from_ticks([C.Tick(100.0, 100.1, 105), C.Tick(100.2, 100.3, 100)]) is None
    assert C.offset_from_ticks([]) is None
    # bounds that just touch: [−0.6, 0.5] and [10 − 9.5, 11 − 9] = [0.5, 2]: the one point 0.5
    assert C.offset_from_ticks([C.Tick(0.5, 0.6, 0), C.Tick(9.0, 9.5, 10)]) == (0.5, 0.0)


def test_the_clock_in_words():
    assert C.describe_clock(None) == "clock: not checked"
    assert C.describe_clock(ClockCheck(why="no Date header")) == "clock: not checked against the server (no Date header)"
    assert C.describe_clock(ClockCheck(offset_s=0.002, bound_s=0.004, samples=5)) == (
        "clock: the server's clock is within 4.0 ms of this client's (5 reads of its Date header)")
    assert C.describe_clock(ClockCheck(offset_s=-0.004, bound_s=0.004, samples=5)).startswith("clock: the server's clock is within 4.0 ms of")
    assert C.describe_clock(ClockCheck(offset_s=0.03, bound_s=0.01, samples=3)) == (
        "clock: the server's clock is 30.0 ± 10.0 ms ahead of this client's (3 reads of its Date header)")
    # 80 ms behind, ± 20: at least 60 ms apart, over 50: said
    assert C.describe_clock(ClockCheck(offset_s=-0.08, bound_s=0.02, samples=4)) == (
        "clock: the server's clock is 80.0 ± 20.0 ms behind this client's (4 reads of its Date header); more than 50 "
        "ms: clients whose clocks differ this much do not start together at --start-at; set the clocks (NTP) or expect "
        "the offset in the combined run")
    assert C.describe_clock(ClockCheck(offset_s=0.07, bound_s=0.02, samples=4)).endswith("(4 reads of its Date header)")  # exactly 50: not
    assert C.describe_clock(ClockCheck(offset_s=0.2, bound_s=None, samples=1)).startswith(
        "clock: the server's clock is 200.0 ± 0.0 ms ahead of this client's (1 reads of its Date header); more than")


def _sent(rid, scheduled_ms, submitted_ms):
    return RequestRecord("r", rid, "http", "http", "m", 0, 1, 1, t_scheduled_ns=round(scheduled_ms * 1e6),
                         t_submitted_ns=round(submitted_ms * 1e6))


def test_start_lateness():
    recs = [_sent(1, 1000, 1003), _sent(2, 500, 502.5), _sent(3, 0, 0)]  # the third never went (0)
    assert C.start_lateness_ms(400_000_000, "poisson", recs) == pytest.approx(2.5)  # the first sent: its schedule
    assert C.start_lateness_ms(400_000_000, None, recs) == pytest.approx(102.5)  # a closed loop: from the start
    assert C.start_lateness_ms(None, None, recs) is None and C.start_lateness_ms(1, None, [_sent(1, 0, 0)]) is None
    assert C.start_lateness_ms(0, None, recs) == pytest.approx(502.5)  # a start at perf 0 is a start
    assert math.isclose(C.start_lateness_ms(503_000_000, None, recs[1:2]), -0.5)  # early: negative


def test_edges_of_the_words():
    assert fmt_ms(1.0) == "1000.0 ms"
    assert C.describe_clock(ClockCheck(offset_s=0.5, bound_s=1.0, samples=2)).startswith(
        "clock: the server's clock is within 1000.0 ms of")
    assert C.describe_clock(ClockCheck(offset_s=3.0, bound_s=1.0, samples=2)).startswith(
        "clock: the server's clock is 3000.0 ± 1000.0 ms ahead of this client's")
    with pytest.raises(ValueError) as e:
        C.parse_start_at("later")
    assert str(e.value) == ("--start-at 'later': give an ISO time (2025-06-01T14:30:00, local unless it names its zone: "
                            "…Z or …+02:00) or unix seconds (1748788200), the same on every client")
    import time

    ahead = time.time() + 60  # now read by parse_start_at itself
    assert C.parse_start_at(repr(ahead)) == ahead
