"""Oracles for the load (measure/core/workload.py): the prefix-cache policy's words and its parsing, how RequestMaker
numbers its requests and fills them in, the closed loop and a process's share of one, and the Poisson arrivals.
Every id, index, time and text worked by hand on a tiny case; the Poisson gaps pinned to the stdlib's draws for the
seed, with their law checked over many draws. Pure: fake clocks in ns, no server, no sleeping
(benchmarks/mutation.py mutates the module against these)."""
from __future__ import annotations

import random
import re

import pytest

from measure.core.arrivals import DueTurn, IndexedArrivals, TurnArrivals
from measure.core.records import Request
from measure.core.workload import (ClosedLoop, ClosedShare, Load, Poisson, PrefixCache, RequestMaker,
                                   closed_loop_users, is_open_loop)
from engines.base import Prompt
from presets import Workload

WL = Workload("w", "d", prompts=("a", "b", "c"))  # prompt i is "w-(i mod 3 + 1)", its text a, b or c


class Ticks:
    """A fake clock: 1000, 2000, 3000 … ns, one tick a call."""

    def __init__(self):
        self.now = 0

    def __call__(self) -> int:
        self.now += 1000
        return self.now


class FakeTurns(TurnArrivals):
    """Multi-turn arrivals that hand out the turns given, once, and note what the dispatcher tells them."""

    def __init__(self, turns):
        self.users = 7
        self.turns = list(turns)
        self.asked, self.sent_log, self.finished_log, self.resumed = [], [], [], []

    def due_turns(self, now_ns, workload, max_tokens):
        self.asked.append((now_ns, workload, max_tokens))
        out, self.turns = self.turns, []
        return out

    def sent(self, request_id, turn):
        self.sent_log.append((request_id, turn.key))

    def finished(self, request_id, answer, t_done_ns):
        self.finished_log.append((request_id, answer, t_done_ns))

    def next_wakeup_ns(self):
        return 77

    def resume(self, now_ns):
        self.resumed.append(now_ns)


class FakeIndexed(IndexedArrivals):
    """A segment of a whole of `full_total` requests: hands out the (index, time) pairs given, noting its asks."""

    def __init__(self, pairs, full_total):
        self.pairs, self.full_total, self.asked = list(pairs), full_total, []

    def due_indexed(self, now_ns, outstanding):
        self.asked.append((now_ns, outstanding))
        out, self.pairs = self.pairs, []
        return out

    def next_wakeup_ns(self):
        return None

    def resume(self, now_ns):
        pass


def _turn(key, session=2, turn=3, t=500):
    return DueTurn(t, Prompt(f"p-{key}", text="hi"), 42, session, turn, key, [{"role": "user", "content": "hi"}], 0)


def _ids(reqs):
    return [r.request_id for r in reqs]


# --- PrefixCache: the parsing ---------------------------------------------------------------------------------

def test_prefix_cache_parses_off_on_and_shared():
    assert PrefixCache.parse(None) == PrefixCache("off", 0)  # nothing written: the default
    assert PrefixCache.parse("") == PrefixCache("off", 0)
    assert PrefixCache.parse("off") == PrefixCache("off", 0)
    assert PrefixCache.parse("on") == PrefixCache("on", 0)
    assert PrefixCache.parse("  ON ") == PrefixCache("on", 0)  # spaces and case left out
    assert PrefixCache.parse(" Off\n") == PrefixCache("off", 0)
    assert PrefixCache.parse("shared:256") == PrefixCache("shared", 256)
    assert PrefixCache.parse(" SHARED:3 ") == PrefixCache("shared", 3)
    assert PrefixCache.parse("shared:1") == PrefixCache("shared", 1)  # the fewest words
    assert PrefixCache() == PrefixCache("off", 0)


@pytest.mark.parametrize("text", ["shared:0", "shared:-2", "shared:x", "shared:", "shared:4:5", "shared", "maybe",
                                  "xshared:4", "onn"])
def test_prefix_cache_refuses_what_is_not_a_policy(text):
    # shared:4:5 — everything after the first colon, "4:5", is not a number (not 4, not 5)
    with pytest.raises(ValueError, match="^" + re.escape(
            f"--prefix-cache {text!r}: write off (the default), on, or shared:N with N words of shared prefix, "
            "e.g. shared:256") + "$"):
        PrefixCache.parse(text)


def test_prefix_cache_describes_each_policy():
    assert PrefixCache("off").describe() == "off: a unique prefix per request, cache_prompt false"
    assert PrefixCache("on").describe() == "on: prompts as they are, the server's cache on"
    assert PrefixCache("shared", 4).describe() == "shared:4: 4 shared words, then a unique prefix"
    assert not PrefixCache("off").cache_prompt
    assert PrefixCache("on").cache_prompt and PrefixCache("shared", 2).cache_prompt


# --- PrefixCache: the words put before a prompt -----------------------------------------------------------------

def test_prefix_cache_off_names_the_request_even_in_a_session():
    off = PrefixCache("off")
    assert off.apply("Tell me.", "r7", 12) == ("[request r7-12] Tell me.", "[request r7-12] ")
    # a session's turn under off: still the request (no two prompts share a prefix, nothing cached)
    assert off.apply("Tell me.", "r7", 12, session="1.4") == ("[request r7-12] Tell me.", "[request r7-12] ")


def test_prefix_cache_on_leaves_a_prompt_as_it_is_but_names_a_session():
    on = PrefixCache("on")
    assert on.apply("Tell me.", "r7", 12) == ("Tell me.", "")
    assert on.apply("Tell me.", "r7", 12, session="1.4") == ("[session r7-1.4] Tell me.", "[session r7-1.4] ")


def test_prefix_cache_shared_puts_its_block_before_the_unique_prefix():
    two = PrefixCache("shared", 2)
    assert two.apply("Q", "r", 3) == ("shared shared [request r-3] Q", "shared shared [request r-3] ")
    assert two.apply("Q", "r", 3, session="2.1") == ("shared shared [session r-2.1] Q",
                                                     "shared shared [session r-2.1] ")


# --- closed_loop_users, is_open_loop -----------------------------------------------------------------------------

def test_closed_loop_users_is_users_else_every_stream_of_the_level():
    assert closed_loop_users("instances", 3, 4) == 3  # K instances of B = 1: K
    assert closed_loop_users("http", 3, 4) == 12  # K × B
    assert closed_loop_users("batch", 2, 5, None) == 10
    assert closed_loop_users("http", 3, 4, users=5) == 5  # --users wins
    assert closed_loop_users("instances", 3, 4, users=5) == 5
    assert closed_loop_users("http", 3, 4, users=0) == 12  # 0: not given


def test_is_open_loop_only_for_arrivals_on_their_own_schedule():
    assert is_open_loop(Poisson(1.0))
    assert is_open_loop(FakeIndexed([], 3))  # a segment of a schedule
    assert not is_open_loop(ClosedLoop(2))
    assert not is_open_loop(ClosedShare([0], 2, 4))
    assert not is_open_loop(FakeTurns([]))


# --- ClosedLoop ------------------------------------------------------------------------------------------------

def test_closed_loop_keeps_its_users_in_flight_up_to_its_total():
    loop = ClosedLoop(3, 5)
    assert (loop.users, loop.total, loop.issued, loop.start_ns) == (3, 5, 0, None)
    assert loop.describe() == "closed loop, 3 users"
    assert loop.next_wakeup_ns() is None  # no start asked: nothing to wait for
    assert loop.due(100, 0) == [100, 100, 100]  # 3 − 0 users free, each scheduled now
    assert loop.issued == 3 and not loop.exhausted()
    assert loop.due(200, 2) == [200]  # one came back: 3 − 2
    assert loop.issued == 4 and not loop.exhausted()  # 4 < 5
    assert loop.due(300, 5) == []  # more out than users: none, not a negative count
    assert loop.issued == 4
    assert loop.due(400, 0) == [400]  # 3 free, but 5 − 4 = 1 left
    assert loop.issued == 5 and loop.exhausted()  # 5 ≥ 5
    assert loop.due(500, 0) == [] and loop.issued == 5


def test_an_endless_closed_loop_never_runs_out():
    loop = ClosedLoop(2)
    assert loop.total is None
    assert loop.due(0, 0) == [0, 0] and loop.due(7, 1) == [7] and loop.due(9, 0) == [9, 9]
    assert loop.issued == 5 and not loop.exhausted()


def test_a_closed_loop_starts_at_its_start():
    loop = ClosedLoop(2, 4)
    loop.start_ns = 1000  # --start-at
    assert loop.next_wakeup_ns() == 1000  # nothing sent yet: wake at the start
    assert loop.due(999, 0) == []
    assert loop.next_wakeup_ns() == 1000
    assert loop.due(1000, 0) == [1000, 1000]  # at the start itself: due
    assert loop.next_wakeup_ns() is None  # started: its users wait for answers, not for a time


def test_a_closed_loop_needs_a_user():
    assert ClosedLoop(1).users == 1
    for users in (0, -3):
        with pytest.raises(ValueError, match=f"^users must be at least 1 \\(got {users}\\)$"):
            ClosedLoop(users)


# --- ClosedShare -----------------------------------------------------------------------------------------------

def test_a_share_sends_its_users_requests_round_by_round():
    share = ClosedShare([2, 0], 3, 8)
    # of 3 users and 8 requests, user 0 sends 0, 3, 6 and user 2 sends 2, 5 (8 is past the total): 5 of the 8
    assert (share.users, share.all_users, share.full_total, share.total, share.issued) == (2, 3, 8, 5, 0)
    assert share.describe() == "closed loop, 2 of 3 users"
    assert share.next_wakeup_ns() is None and not share.exhausted()
    assert share.due_indexed(10, 0) == [(0, 10), (2, 10)]  # round 0: users 0 and 2 in turn (sorted)
    assert share.due_indexed(20, 1) == [(3, 20)]  # one free: round 1, user 0: 0 + 1 × 3
    assert share.due_indexed(25, 2) == [] and share.due_indexed(26, 4) == []  # none free
    assert share.due(30, 1) == [30]  # round 1, user 2: 2 + 3 = 5
    assert share.issued == 4 and not share.exhausted()
    # round 2: user 0 sends 6; user 2's would be 2 + 2 × 3 = 8, not below 8: the share is done
    assert share.due_indexed(40, 0) == [(6, 40)]
    assert share.issued == 5 and share.exhausted()
    assert share.due_indexed(50, 0) == [] and share.issued == 5


def test_an_endless_share_and_its_start():
    share = ClosedShare([1], 2, None, start_ns=100)
    assert share.total is None and share.full_total is None and share.start_ns == 100
    assert share.next_wakeup_ns() == 100
    assert share.due_indexed(99, 0) == []
    assert share.due_indexed(100, 0) == [(1, 100)]  # user 1 of 2: 1, 3, 5 …
    assert share.next_wakeup_ns() is None
    assert share.due_indexed(200, 0) == [(3, 200)] and share.due(300, 0) == [300]
    assert share.issued == 3 and not share.exhausted()
    one = ClosedShare((0,), 1, 2)  # the whole loop of one user in one share
    assert (one.users, one.total) == (1, 2)
    assert one.due_indexed(0, 0) == [(0, 0)] and one.due_indexed(1, 0) == [(1, 1)] and one.due_indexed(2, 0) == []


@pytest.mark.parametrize(("users", "all_users", "shown"), [([], 3, "0..2 (got [])"), ([3], 3, "0..2 (got [3])"),
                                                           ([-1], 3, "0..2 (got [-1])"), ((0,), 0, "0..-1 (got [0])"),
                                                           ([0, 5], 4, "0..3 (got [0, 5])")])
def test_a_share_refuses_users_outside_the_loop(users, all_users, shown):
    with pytest.raises(ValueError, match="^" + re.escape("a closed-loop share needs users among " + shown) + "$"):
        ClosedShare(users, all_users, 9)


# --- Poisson ---------------------------------------------------------------------------------------------------

# random.Random(0).expovariate(2.0) four times, in s × 1e9 cut to whole ns: the documented default seed's gaps at
# 2 req/s (their law is checked below, over many draws)
GAPS_SEED0_RATE2 = (930_303_555, 709_314_576, 272_856_572, 149_821_156)


def test_poisson_sends_at_its_exponential_gaps_from_the_first_call():
    p = Poisson(2.0, total=4)  # the default seed, 0
    assert (p.rate, p.total, p.issued) == (2.0, 4, 0)
    assert p.describe() == "open loop, Poisson 2 req/s"
    assert p.next_wakeup_ns() is None  # no first call yet: no time to wake at
    g1, g2, g3, _ = GAPS_SEED0_RATE2
    t0 = 5_000_000_000
    assert p.due(t0, 0) == [t0]  # the first at the first call
    assert p.next_wakeup_ns() == t0 + g1
    assert p.due(t0 + g1 - 1, 0) == []
    assert p.due(t0 + g1, 9) == [t0 + g1]  # due at its time exactly; what is outstanding is not read
    # far later: the two left at once, each keeping the time the process wanted it sent (the queue counts)
    assert p.due(t0 + 10**10, 0) == [t0 + g1 + g2, t0 + g1 + g2 + g3]
    assert p.issued == 4 and p.exhausted() and p.next_wakeup_ns() is None
    assert p.due(t0 + 10**11, 0) == [] and p.issued == 4


def test_poisson_gaps_follow_the_exponential_law():
    # 10 s at 1000 req/s: about 10 000 arrivals. Their count is Poisson, sd √10 000 = 100; the mean of 10 000
    # exponential gaps is 1 ms with sd 1 ms ÷ √10 000 = 1 %: 4 % is four sd either way
    p = Poisson(1000.0, seed=7)
    times = p.due(0, 0) + p.due(10**10, 0)
    assert 9_600 <= len(times) <= 10_400
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert sum(gaps) / len(gaps) == pytest.approx(1e6, rel=0.04)
    # and the exponential's shape: P(gap > mean) = e⁻¹ ≈ 0.368 (sd √(0.368 × 0.632 ÷ 10 000) ≈ 0.5 %)
    assert sum(g > 1e6 for g in gaps) / len(gaps) == pytest.approx(0.368, abs=0.02)
    # each gap is the stdlib's draw for the seed, in whole ns
    r = random.Random(7)
    assert gaps[:50] == [int(r.expovariate(1000.0) * 1e9) for _ in range(50)]
    # the default seed's first gaps at 2 req/s, pinned above: the same law (mean 0.5 s) at a small scale
    q = Poisson(2.0)
    assert q.due(0, 0) == [0]
    assert q.due(10**10, 0)[:4] == [sum(GAPS_SEED0_RATE2[:n]) for n in range(1, 5)]


def test_poisson_resumes_without_a_burst():
    p = Poisson(2.0)
    assert p.due(0, 0) == [0]
    p.resume(50_000_000_000)  # paused 50 s: ≈ 100 arrivals missed, none replayed
    assert p.next_wakeup_ns() == 50_000_000_000
    assert p.due(50_000_000_000, 0) == [50_000_000_000]
    assert p.next_wakeup_ns() == 50_000_000_000 + GAPS_SEED0_RATE2[1]  # the generator runs on: the second gap


def test_a_poisson_part_is_an_endless_stream_at_its_share_of_the_rate():
    p = Poisson(3.0, seed=5)
    q = p.part(0.25)
    assert (q.rate, q.total) == (0.75, None)
    assert q.describe() == "open loop, Poisson 0.75 req/s"
    # its seed: 32 bits drawn from the parent's generator for seed 5
    parent = random.Random(5)
    r = random.Random(parent.getrandbits(32))
    assert q.due(0, 0) == [0] and q.next_wakeup_ns() == int(r.expovariate(0.75) * 1e9)
    # and the parent's generator runs on past those 32 bits: its own next gap is the draw after them
    assert p.due(0, 0) == [0] and p.next_wakeup_ns() == int(parent.expovariate(3.0) * 1e9)
    with pytest.raises(ValueError, match="^" + re.escape(
            "a finite Poisson schedule is split by index (clients.Segment), not by rate") + "$"):
        Poisson(3.0, total=5).part(0.5)


def test_poisson_parts_superpose_to_the_whole_rate():
    # parts of 1/4 and 3/4 of 1000 req/s over 10 s: about 2 500 and 7 500 arrivals (Poisson counts, sd 50 and
    # ≈ 87: ± 4 sd is ± 200 and ± 350), together about 10 000 (sd 100, ± 400) with a mean gap of 1 ms (sd 1 %: ± 4 %)
    whole = Poisson(1000.0, seed=3)
    parts = [whole.part(0.25), whole.part(0.75)]
    sent = [part.due(0, 0) + part.due(10**10, 0) for part in parts]
    assert 2_300 <= len(sent[0]) <= 2_700 and 7_150 <= len(sent[1]) <= 7_850
    merged = sorted(sent[0] + sent[1])
    assert 9_600 <= len(merged) <= 10_400
    assert (merged[-1] - merged[0]) / (len(merged) - 1) == pytest.approx(1e6, rel=0.04)


def test_poisson_needs_a_positive_rate():
    assert Poisson(0.5).rate == 0.5 and Poisson(2.5).describe() == "open loop, Poisson 2.5 req/s"
    for rate in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="^" + re.escape(
                f"rate must be a positive number of requests per second (got {rate})") + "$"):
            Poisson(rate)


# --- RequestMaker ----------------------------------------------------------------------------------------------

def _fields(r):
    return (r.request_id, r.prompt.prompt_id, r.prompt.text, r.max_tokens, r.ignore_eos, r.t_scheduled_ns,
            r.t_submitted_ns, r.rep, r.k, r.b, r.mode, r.session, r.turn, r.session_key, r.messages)


def test_a_maker_numbers_requests_across_loads_and_starts_each_loads_prompts_again():
    m = RequestMaker(Ticks())
    assert m.load is None
    assert m.due(0, 0, rep=0, k=1, b=1, mode="http") == [] and m.next_wakeup_ns() is None  # no load: nothing
    load = Load(WL, ClosedLoop(2, 5), 64)
    assert load.ignore_eos is True  # answers run to max_tokens unless told
    m.set_load(load)
    assert m.load is load
    # 2 users free: ids 1, 2, prompts 1 and 2 of the set; submitted at the clock's first two ticks
    assert [_fields(r) for r in m.due(100, 0, rep=1, k=2, b=3, mode="http")] == [
        (1, "w-1", "a", 64, True, 100, 1000, 1, 2, 3, "http", None, None, None, None),
        (2, "w-2", "b", 64, True, 100, 2000, 1, 2, 3, "http", None, None, None, None)]
    # one answer back (1 outstanding of 2 users): id 3, the third prompt
    assert [_fields(r) for r in m.due(200, 1, rep=1, k=2, b=3, mode="http")] == [
        (3, "w-3", "c", 64, True, 200, 3000, 1, 2, 3, "http", None, None, None, None)]
    # a new load: ids run on (4), the prompts start again at the first
    m.set_load(Load(WL, ClosedLoop(1), 8, ignore_eos=False))
    assert [_fields(r) for r in m.due(300, 0, rep=2, k=4, b=1, mode="instances")] == [
        (4, "w-1", "a", 8, False, 300, 4000, 2, 4, 1, "instances", None, None, None, None)]
    m.set_load(None)
    assert m.load is None and m.due(400, 0, rep=0, k=1, b=1, mode="http") == []


def test_a_maker_numbers_from_where_it_is_told():
    m = RequestMaker(Ticks())
    m.number_from(3, 4)  # a pool's process: every 4th id from 3
    m.set_load(Load(WL, ClosedLoop(3), 8))
    assert _ids(m.due(0, 0, rep=0, k=1, b=1, mode="http")) == [3, 7, 11]
    m.number_from(5)  # step 1
    assert _ids(m.due(1, 1, rep=0, k=1, b=1, mode="http")) == [5, 6]


def test_a_segment_takes_its_ids_and_prompts_from_its_indices():
    m = RequestMaker(Ticks())
    m.number_from(5)
    seg = FakeIndexed([(4, 111), (0, 222)], full_total=10)
    m.set_load(Load(WL, seg, 16))
    # base = 5 − 1 = 4: index 4 → id 4 + 4 + 1 = 9, the 5th prompt (4 mod 3 = 1: "w-2"); index 0 → id 5, "w-1"
    assert [_fields(r)[:7] for r in m.due(300, 4, rep=0, k=1, b=1, mode="http")] == [
        (9, "w-2", "b", 16, True, 111, 1000), (5, "w-1", "a", 16, True, 222, 2000)]
    assert seg.asked == [(300, 4)]
    # the next load's ids run on past the whole of 10: 4 + 10 + 1 = 15; its prompts from the first
    m.set_load(Load(WL, ClosedLoop(1), 16))
    assert [_fields(r)[:3] for r in m.due(400, 0, rep=0, k=1, b=1, mode="http")] == [(15, "w-1", "a")]


def test_an_endless_segment_leaves_its_ids_far_behind():
    m = RequestMaker(Ticks())
    m.set_load(Load(WL, FakeIndexed([(2, 50)], None), 16))
    assert _ids(m.due(60, 0, rep=0, k=1, b=1, mode="http")) == [3]  # base 0: index 2 → id 3
    m.set_load(Load(WL, ClosedLoop(1), 16))
    assert _ids(m.due(70, 0, rep=0, k=1, b=1, mode="http")) == [1_099_511_627_777]  # 0 + 2⁴⁰ + 1


def test_a_segment_set_as_the_load_by_hand_numbers_from_one():
    m = RequestMaker(Ticks())
    m.load = Load(WL, FakeIndexed([(0, 5), (2, 6)], 3), 8)  # not through set_load: the base is still 0
    assert _ids(m.due(9, 0, rep=0, k=1, b=1, mode="http")) == [1, 3]
    fresh = RequestMaker(Ticks())
    fresh.load = Load(WL, ClosedLoop(2), 8)  # likewise: ids from 1, prompts from the first
    assert [_fields(r)[:2] for r in fresh.due(9, 0, rep=0, k=1, b=1, mode="http")] == [(1, "w-1"), (2, "w-2")]


def test_a_maker_turns_sessions_turns_into_requests():
    turns = FakeTurns([_turn("s1", 2, 3, 500), _turn("", 1, 1, 600)])
    m = RequestMaker(Ticks())
    m.number_from(20)
    m.set_load(Load(WL, ClosedLoop(1), 8))  # load 1
    m.set_load(Load(WL, turns, 32, ignore_eos=False))  # load 2: a session's key is "2." + its own
    reqs = m.due(900, 3, rep=4, k=5, b=6, mode="batch")
    chat = [{"role": "user", "content": "hi"}]
    assert [_fields(r) for r in reqs] == [
        (20, "p-s1", "hi", 42, False, 500, 1000, 4, 5, 6, "batch", 2, 3, "2.s1", chat),
        (21, "p-", "hi", 42, False, 600, 2000, 4, 5, 6, "batch", 1, 1, None, chat)]  # no key: no session key
    assert turns.asked == [(900, WL, 32)]
    assert turns.sent_log == [(20, "s1"), (21, "")]
    assert m.next_wakeup_ns() == 77
    m.finished(reqs[0], "answer", 999)
    m.finished(reqs[1], None, 1001)  # failed
    m.finished(Request(5, Prompt("x"), 1, True, 0), "not a turn", 1002)  # not a session's: not told
    assert turns.finished_log == [(20, "answer", 999), (21, None, 1001)]
    m.resume(3000)
    assert turns.resumed == [3000]
    m.set_users(0)
    assert turns.users == 1  # at least one user
    m.set_users(4)
    assert turns.users == 4


def test_set_users_and_resume_reach_only_what_has_them():
    loop = ClosedLoop(2)
    m = RequestMaker(Ticks())
    m.set_users(3)
    m.resume(5)
    m.finished(_session_request(), "a", 1)  # no load: nothing to tell
    m.set_load(Load(WL, loop, 8))
    m.finished(_session_request(), "a", 1)  # a closed loop has no turns to finish
    m.set_users(0)
    assert loop.users == 1
    m.set_users(1)
    assert loop.users == 1
    m.set_users(6)
    assert loop.users == 6
    share = ClosedShare([0], 2, 4)
    m.set_load(Load(WL, share, 8))
    m.set_users(5)  # a share's users are those of its process: not set
    assert share.users == 1
    p = Poisson(2.0)
    m.set_load(Load(WL, p, 8))
    m.set_users(5)  # an open loop has no users
    assert not hasattr(p, "users")
    assert m.next_wakeup_ns() is None  # no first call yet
    m.resume(7_000)
    assert m.next_wakeup_ns() == 7_000 and p.next_wakeup_ns() == 7_000


def _session_request():
    return Request(9, Prompt("x"), 1, True, 0, session=1, turn=1)
