"""Oracles for multi-turn sessions (measure/core/sessions.py; docs/design/sessions.md): the think times and their
forms, each conversation's turns, the transcript and chat messages sent, which user sends which turn when on a
fixed fake clock (ns integers), how a level's requests are shared out (whole conversations, one request kept for
each user not yet started, the cut to what is left), users lowered and raised, a failed turn, a pause; and the
figures: TTFT by turn, the prefix cache's label, the turn note. Every expected value worked out by hand in a
comment. Pure: no server, no sleeping (benchmarks/mutation.py mutates the module against these)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from engines.base import Prompt
from measure.core import sessions as SS
from measure.core.arrivals import DueTurn
from measure.core.datasets import Dataset, Item
from measure.core.records import RequestRecord
from measure.core.sessions import (SessionError, Sessions, SessionSpec, ThinkTime, Turn, conversation, messages,
                                   parse_think, prefix_cache_label, transcript, ttft_by_turn, turn_note, words)
from presets import Workload

NS = 1_000_000_000
MS = 1_000_000
FORMS = "S (seconds, exponential with mean S), exp:S, or fixed:S; 0 (the default) sends the next turn at once"
# 40 prompts "m0" … "m39": request index i is Prompt("w-{i+1}", text="m{i}") (prompt_for cycles a preset's prompts),
# so conversation k of `turns` turns is indices k × turns … k × turns + turns − 1
W = Workload("w", "words", prompts=tuple(f"m{i}" for i in range(40)))


def user(text):
    return {"role": "user", "content": text}


def bot(text):
    return {"role": "assistant", "content": text}


def due(s, now, max_tokens=8):
    """The turns due at `now`, each marked sent as request id session × 100 + turn."""
    out = s.due_turns(now, W, max_tokens)
    for d in out:
        s.sent(d.session * 100 + d.turn, d)
    return out


def brief(turns):
    return [(d.session, d.turn, d.prompt.prompt_id, d.user, d.t_scheduled_ns) for d in turns]


def answer(s, session, turn, t_ns, text=" ok"):
    s.finished(session * 100 + turn, text, t_ns)


# ---- think times -----------------------------------------------------------------------------------------------

def test_think_time_draws_fixed_and_seeded_exponential():
    assert ThinkTime() == ThinkTime("fixed", 0.0) and ThinkTime().draw(1, 2, 3, 4) == 0.0
    assert ThinkTime("fixed", 0.5).draw(3, 1, 1, 1) == 0.5  # fixed: the mean, whatever the seed
    assert ThinkTime("exp", 0.0).draw(3, 1, 1, 1) == 0.0  # no mean: none (no 1 ÷ 0)
    # exp: random.Random("think:{seed}:{rep}:{session}:{turn}").expovariate(1 ÷ mean), the stdlib's own draw:
    # Random("think:3:1:1:1").expovariate(0.5) = 0.40507717134214544, Random("think:3:1:1:2") … 1.2525749488468099
    t = ThinkTime("exp", 2.0)
    assert t.draw(3, 1, 1, 1) == 0.40507717134214544
    assert t.draw(3, 1, 1, 2) == 1.2525749488468099
    assert t.draw(0, 0, 1, 1) == 0.9464918685624056  # Random("think:0:0:1:1").expovariate(0.5)
    # a mean under 1 s is drawn too: the same uniform draw ÷ rate 2 = 0.40507717134214544 ÷ 4
    assert ThinkTime("exp", 0.5).draw(3, 1, 1, 1) == 0.10126929283553636


def test_think_time_describes_itself():
    assert ThinkTime().describe() == "no think time"
    assert ThinkTime("exp", 0.0).describe() == "no think time"
    assert ThinkTime("fixed", 0.0).describe() == "no think time"
    assert ThinkTime("fixed", 0.5).describe() == "think 0.5 s"
    assert ThinkTime("fixed", 3.0).describe() == "think 3 s"  # :g drops the .0
    assert ThinkTime("exp", 2.0).describe() == "think exponential, mean 2 s"
    assert ThinkTime("exp", 0.5).describe() == "think exponential, mean 0.5 s"


def test_parse_think_forms():
    assert parse_think(None) == ThinkTime("fixed", 0.0)
    assert parse_think("2") == ThinkTime("exp", 2.0)  # a bare number: exponential
    assert parse_think("0.5") == ThinkTime("exp", 0.5)
    assert parse_think("exp:2s") == ThinkTime("exp", 2.0)  # a trailing s is seconds
    assert parse_think("2s") == ThinkTime("exp", 2.0)
    assert parse_think(" Fixed:2S ") == ThinkTime("fixed", 2.0)  # stripped, any case
    assert parse_think("fixed:0.5") == ThinkTime("fixed", 0.5)
    assert parse_think("0") == ThinkTime("fixed", 0.0)  # no think time is fixed 0, whatever the form
    assert parse_think("exp:0") == ThinkTime("fixed", 0.0)
    assert parse_think("fixed:0") == ThinkTime("fixed", 0.0)


@pytest.mark.parametrize("text, why", [
    ("gamma:2", "unknown form 'gamma'"),
    ("Gamma:1", "unknown form 'gamma'"),  # the form lowercased, the text as written
    (":2", "unknown form ''"),
    ("soon", "'soon' is not a number of seconds ≥ 0"),  # no colon: exp, arg "soon" ("soo" after rstrip: no float)
    ("-1", "'-1' is not a number of seconds ≥ 0"),
    ("exp:-0.5", "'-0.5' is not a number of seconds ≥ 0"),
    ("nan", "'nan' is not a number of seconds ≥ 0"),
    ("fixed:inf", "'inf' is not a number of seconds ≥ 0"),
    (" EXP:x ", "'x' is not a number of seconds ≥ 0"),
    ("exp:1:2", "'1:2' is not a number of seconds ≥ 0"),  # the form is up to the first colon
])
def test_parse_think_refusals_name_the_text_and_the_forms(text, why):
    with pytest.raises(SessionError) as e:
        parse_think(text)
    assert str(e.value) == f"--think-time {text!r}: {why}; write {FORMS}"


# ---- the conversations -----------------------------------------------------------------------------------------

def test_words_is_n_hellos_at_least_one():
    assert words(3) == "hello hello hello"
    assert words(1) == "hello"
    assert words(2) == "hello hello"
    assert words(None) == "hello" and words(0) == "hello" and words(-2) == "hello"


def test_transcript_and_messages():
    h = [("a", " x"), ("b", " y")]
    assert transcript(h, "c") == "User: a\nAssistant: x\nUser: b\nAssistant: y\nUser: c\nAssistant:"
    assert transcript([], "c") == "User: c\nAssistant:"
    assert messages(h, "c") == [user("a"), bot(" x"), user("b"), bot(" y"), user("c")]
    assert messages([], "c") == [user("c")]


def sharegpt(**kw):
    items = (Item("c1", text="hi", output_tokens=30, more=(("and?", 5), ("more?", None))),
             Item("c2", prompt_tokens=3, more=(("x", 40),)))
    return Dataset("sharegpt:t", "t", items=items, **kw)


def test_sharegpt_conversations_take_the_files_turns_and_lengths():
    d = sharegpt()
    # c1: "hi" (reply 30), "and?" (5), "more?" (no reply: max_tokens 16); ids c1:1 …
    assert conversation(d, 0, 5, 16) == [Turn("hi", "c1:1", 30), Turn("and?", "c1:2", 5), Turn("more?", "c1:3", 16)]
    assert conversation(d, 0, 2, 16) == [Turn("hi", "c1:1", 30), Turn("and?", "c1:2", 5)]  # at most `turns`
    # session 3 of 2 items: item 3 % 2 = 1, c2: no text, 3 prompt tokens → "hello hello hello"; no reply length: 16
    assert conversation(d, 3, 2, 16) == [Turn("hello hello hello", "c2:1", 16), Turn("x", "c2:2", 40)]
    # --max-tokens 20 caps the file's lengths: min(30, 20) = 20, 5; no length still takes max_tokens 16
    assert conversation(sharegpt(cap=20), 0, 3, 16) == [Turn("hi", "c1:1", 20), Turn("and?", "c1:2", 5),
                                                         Turn("more?", "c1:3", 16)]


def test_sharegpt_output_len_draws_by_session_times_turns_plus_turn():
    draw = SimpleNamespace(draw=lambda i: 100 + i)  # --output-len: index i draws 100 + i
    # session 1, turns 3: indices 1 × 3 + 0 = 3 and 4 → 103, 104 (item 1 = c2, two turns)
    assert conversation(sharegpt(output_len=draw), 1, 3, 16) == [Turn("hello hello hello", "c2:1", 103),
                                                                  Turn("x", "c2:2", 104)]
    # session 2, turns 2: item 0 (c1), indices 4, 5 → 104, 105; capped at 50 → 50, 50
    assert conversation(sharegpt(output_len=draw), 2, 2, 16) == [Turn("hi", "c1:1", 104), Turn("and?", "c1:2", 105)]
    assert conversation(sharegpt(output_len=draw, cap=50), 2, 2, 16) == [Turn("hi", "c1:1", 50),
                                                                          Turn("and?", "c1:2", 50)]


def test_other_workloads_take_the_loads_requests_in_order():
    # session 2 of 3 turns: requests 6, 7, 8 → m6 (w-7), m7, m8
    assert conversation(W, 2, 3, 8) == [Turn("m6", "w-7", 8), Turn("m7", "w-8", 8), Turn("m8", "w-9", 8)]
    assert conversation(W, 1, 2, 8) == [Turn("m2", "w-3", 8), Turn("m3", "w-4", 8)]
    syn = Workload("synthetic:3", "d", synthetic_tokens=3)  # a synthetic prompt of 3 tokens: 3 words
    assert conversation(syn, 0, 2, 8) == [Turn("hello hello hello", "synthetic-3", 8)] * 2
    # a file that is not ShareGPT: its items one request each, session 1 × 2 → items 2 % 2 = 0 and 3 % 2 = 1
    j = Dataset("jsonl:f", "f", items=(Item("j1", text="a", output_tokens=3), Item("j2", prompt_tokens=2)))
    assert conversation(j, 1, 2, 16) == [Turn("a", "j1", 3), Turn("hello hello", "j2", 16)]
    # a ShareGPT key without items: the wrapped preset's prompts, requests 2, 3 → p2 (sharegpt:e-3), p0 (-1)
    e = Dataset("sharegpt:e", "e", prompts=("p0", "p1", "p2"))
    assert conversation(e, 1, 2, 8) == [Turn("p2", "sharegpt:e-3", 8), Turn("p0", "sharegpt:e-1", 8)]


def test_a_users_owed_turns():
    t = [Turn("a", "a", 1), Turn("b", "b", 1), Turn("c", "c", 1)]
    assert SS._User(0).owed() == 0
    assert SS._User(0, turns=t).owed() == 3
    assert SS._User(0, turns=t, sent=2).owed() == 1
    assert SS._User(0, turns=t, sent=3).owed() == 0
    assert SS._User(0, turns=t[:1], sent=2).owed() == 0  # never below 0


# ---- the users, on a fixed fake clock --------------------------------------------------------------------------

def test_sessions_settings_and_describe():
    s = Sessions(2)
    assert (s.turns, s.think, s.total, s.seed, s.rep, s.users, s.tag, s.issued) == (2, ThinkTime(), None, 0, 0, 1,
                                                                                     "", 0)
    assert Sessions(1, users=0).users == 1 and Sessions(1, users=1).users == 1 and Sessions(1, users=3).users == 3
    assert Sessions(3, ThinkTime("exp", 2.0), users=4).describe() == ("closed loop, 4 users in sessions of up to 3 "
                                                                      "turns, think exponential, mean 2 s")
    with pytest.raises(ValueError) as e:
        Sessions(0)
    assert str(e.value) == "turns must be at least 1 (got 0)"
    with pytest.raises(TypeError) as e:
        s.due(0, 0)
    assert str(e.value) == "Sessions make their own requests: RequestMaker asks due_turns()"


def test_session_spec_makes_a_levels_sessions():
    spec = SessionSpec(3, ThinkTime("fixed", 0.5), seed=9)
    assert spec.describe() == "sessions of up to 3 turns, think 0.5 s, history: the server's answers"
    s = spec.make(2, 10, rep=1, tag="t-")
    assert (s.turns, s.think, s.total, s.seed, s.rep, s.users, s.tag) == (3, ThinkTime("fixed", 0.5), 10, 9, 1, 2,
                                                                          "t-")
    s = spec.make(4, None)
    assert (s.total, s.rep, s.users, s.tag) == (None, 0, 4, "")


def test_each_turn_is_the_transcript_so_far_after_the_answer_and_the_think_time():
    s = Sessions(2, ThinkTime("fixed", 3.0), users=2, tag="L1-")
    assert s.next_wakeup_ns() is None  # no user yet
    a, b = due(s, 100)
    # user 0 opens conversation 0 (request 0: m0, w-1), user 1 conversation 1 (request 2: m2, w-3), both at 100
    assert a == DueTurn(100, Prompt("w-1", text="User: m0\nAssistant:"), 8, 1, 1, "L1-1", [user("m0")], 0)
    assert b == DueTurn(100, Prompt("w-3", text="User: m2\nAssistant:"), 8, 2, 1, "L1-2", [user("m2")], 1)
    assert [u.in_flight for u in s._users] == [True, True] and s.issued == 2 and not s.exhausted()
    assert s.due_turns(10**12, W, 8) == [] and s.next_wakeup_ns() is None  # both wait for their answers
    s.finished(999, " lost", 5)  # no such request: nothing happens
    answer(s, 1, 1, 1000, " A")
    # due at the answer's end + 3 s: 1000 + 3 000 000 000
    assert s.next_wakeup_ns() == 3_000_001_000 and [u.in_flight for u in s._users] == [False, True]
    assert s.due_turns(3_000_000_999, W, 8) == []
    (c,) = due(s, 3_000_001_000)
    assert c == DueTurn(3_000_001_000, Prompt("w-2", text="User: m0\nAssistant: A\nUser: m1\nAssistant:"), 8, 1, 2,
                        "L1-1", [user("m0"), bot(" A"), user("m1")], 0)
    assert s.issued == 3 and s._users[0].in_flight


def test_the_think_time_is_drawn_for_the_session_and_the_turn_just_done():
    s = Sessions(2, ThinkTime("exp", 2.0), seed=3, rep=1)
    (a,) = due(s, 0)
    answer(s, 1, 1, 10)
    # ThinkTime("exp", 2).draw(seed 3, rep 1, session 1, turn 1) = 0.40507717134214544 s → 405 077 171 ns
    assert s.next_wakeup_ns() == 10 + 405_077_171
    (b,) = due(s, 10**9)
    assert brief([b]) == [(1, 2, "w-2", 0, 405_077_181)]
    answer(s, 1, 2, 2 * NS)
    # draw(3, 1, 1, 2) = 1.2525749488468099 s → 1 252 574 949 ns
    assert s.next_wakeup_ns() == 2 * NS + 1_252_574_949


def test_turns_go_out_earliest_due_first_and_a_pause_moves_them_to_its_end():
    s = Sessions(2, users=2)
    due(s, 0)
    answer(s, 2, 1, 10)  # user 1's answer ends first: due at 10 (no think time), user 0's at 20
    answer(s, 1, 1, 20)
    assert brief(due(s, 30)) == [(2, 2, "w-4", 1, 10), (1, 2, "w-2", 0, 20)]
    answer(s, 1, 2, 100)  # user 0 due at 100; user 1 in flight (due None)
    s.resume(50)  # a pause that ended before it was due: stays 100
    assert s.next_wakeup_ns() == 100
    s.resume(200)  # due during the pause: due at its end
    assert s.next_wakeup_ns() == 200 and s._users[1].due_ns is None
    assert brief(due(s, 200)) == [(3, 1, "w-5", 0, 200)]  # conversation 2: request 4


def test_a_failed_turn_ends_the_conversation_and_the_next_starts_fresh():
    s = Sessions(3)
    due(s, 0)
    s.finished(101, None, 10)  # session 1's turn 1 failed: no history, its 2 other turns dropped
    assert s._users[0].turns == [Turn("m0", "w-1", 8)] and s._users[0].history == []
    (d,) = due(s, 10)
    # conversation 1: requests 3, 4, 5; no history of the failed one
    assert d == DueTurn(10, Prompt("w-4", text="User: m3\nAssistant:"), 8, 2, 1, "2", [user("m3")], 0)


def test_a_level_runs_whole_conversations_and_cuts_the_last_to_what_is_left():
    """total 5, 2 users, 2 turns. At 0: user 0: one request kept for user 1 (not started), left 5 − 0 − 0 −
    min(1, 4) = 4 → both turns; user 1: left 5 − 1 − 1 (user 0 owes 1) − 0 = 3 → both turns."""
    s = Sessions(2, total=5, users=2)
    assert brief(due(s, 0)) == [(1, 1, "w-1", 0, 0), (2, 1, "w-3", 1, 0)]
    answer(s, 1, 1, 1)
    assert brief(due(s, 1)) == [(1, 2, "w-2", 0, 1)]  # issued 3
    answer(s, 1, 2, 2)
    # user 0 done: left 5 − 3 − 1 (user 1 owes its turn 2) − 0 = 1 → conversation 2 cut to 1 turn (request 4),
    # its history not the last conversation's
    (d,) = due(s, 2)
    assert d == DueTurn(2, Prompt("w-5", text="User: m4\nAssistant:"), 8, 3, 1, "3", [user("m4")], 0)
    assert [len(u.turns) for u in s._users] == [1, 2]
    answer(s, 3, 1, 3)
    # left 5 − 4 − 1 − 0 = 0: user 1's turn 2 needs the last request; user 0 leaves
    assert due(s, 3) == [] and s._users[0].done and s._users[0].turns == [] and s._users[0].due_ns is None
    assert not s.exhausted() and s.next_wakeup_ns() is None
    answer(s, 2, 1, 4)
    assert brief(due(s, 4)) == [(2, 2, "w-4", 1, 4)]
    assert s.issued == 5 and s.exhausted() and s.next_wakeup_ns() is None
    answer(s, 2, 2, 5)
    assert due(s, 6) == [] and s.next_wakeup_ns() is None


def test_each_user_not_yet_started_keeps_one_request():
    """total 5, 3 users, 3 turns, all at 0. user 0: 2 not started, left 5 − 0 − 0 − min(2, 4) = 3 → its 3 turns;
    user 1: 1 not started (user 2), left 5 − 1 − 2 (user 0 owes 2) − min(1, 3) = 1 → 1 turn; user 2: none not
    started, left 5 − 2 − 2 − 0 = 1 → 1 turn."""
    s = Sessions(3, total=5, users=3)
    assert brief(due(s, 0)) == [(1, 1, "w-1", 0, 0), (2, 1, "w-4", 1, 0), (3, 1, "w-7", 2, 0)]
    assert [len(u.turns) for u in s._users] == [3, 1, 1]
    for session in (1, 2, 3):
        answer(s, session, 1, 1)
    # users 1 and 2: left 5 − 4 − 1 (user 0 owes its turn 3) − 0 = 0: they leave
    assert brief(due(s, 1)) == [(1, 2, "w-2", 0, 1)]
    assert [u.done for u in s._users] == [False, True, True]
    answer(s, 1, 2, 2)
    assert brief(due(s, 2)) == [(1, 3, "w-3", 0, 2)] and s.exhausted()


def test_the_request_kept_is_at_most_what_is_left_after_this_one():
    """total 2, 3 users, 3 turns. user 0: left 2 − 0 − 0 − min(2, max(0, 2 − 0 − 1)) = 1 → 1 turn; user 1: left
    2 − 1 − 0 − min(1, max(0, 2 − 1 − 1)) = 1 → 1 turn; the level is out before user 2."""
    s = Sessions(3, total=2, users=3)
    assert brief(due(s, 0)) == [(1, 1, "w-1", 0, 0), (2, 1, "w-4", 1, 0)]
    assert [len(u.turns) for u in s._users] == [1, 1, 0] and s.exhausted() and s.issued == 2
    assert s.next_wakeup_ns() is None and due(s, 1) == []


def test_a_user_that_would_take_the_last_kept_request_leaves_unstarted():
    """total 3, 2-turn sessions, 1 user at 0 (left 3: both turns), then 3 users at 1. user 1: 1 not started
    (user 2), left 3 − 1 − 1 − min(1, max(0, 1)) = 0: it leaves without a conversation; user 2: none not started
    (user 1 left), left 3 − 1 − 1 − 0 = 1 → conversation 1 cut to 1 turn (request 2)."""
    s = Sessions(2, total=3, users=1)
    assert brief(due(s, 0)) == [(1, 1, "w-1", 0, 0)]
    s.users = 3
    assert brief(due(s, 1)) == [(2, 1, "w-3", 2, 1)]
    assert [(u.session, u.done, u.due_ns) for u in s._users] == [(1, False, None), (0, True, None), (2, False, None)]
    answer(s, 1, 1, 2)
    answer(s, 2, 1, 2)
    assert brief(due(s, 2)) == [(1, 2, "w-2", 0, 2)] and s.exhausted()


def test_a_user_lowered_away_leaves_and_comes_back_to_a_new_conversation():
    s = Sessions(3, users=2)
    assert brief(due(s, 0)) == [(1, 1, "w-1", 0, 0), (2, 1, "w-4", 1, 0)]
    s.users = 1
    answer(s, 2, 1, 5)  # user 1 due at 5, user 0 at 6: the wakeup is user 0's (user 1 is above the count)
    answer(s, 1, 1, 6)
    assert s.next_wakeup_ns() == 6
    assert brief(due(s, 6)) == [(1, 2, "w-2", 0, 6)]  # user 1 leaves: its turns cut to the 1 it sent
    u1 = s._users[1]
    assert (u1.retired, u1.due_ns, u1.owed(), len(u1.turns)) == (True, None, 0, 1)
    assert s.next_wakeup_ns() is None
    s.users = 2
    # back at 7, to the next conversation not given out (2: requests 6, 7, 8)
    assert brief(due(s, 7)) == [(3, 1, "w-7", 1, 7)]
    assert (u1.retired, u1.sent, len(u1.turns), u1.history) == (False, 1, 3, [])
    assert due(s, 8) == []  # in flight: not sent again


def test_a_lowered_users_dropped_turns_are_not_kept_for_it():
    """total 6, 2 users, 3 turns: user 0 left 6 − 0 − 0 − min(1, 5) = 5 → 3 turns; user 1 left 6 − 1 − 2 = 3 →
    3 turns. User 1 leaves after its turn 1 (issued 2); user 0 sends turns 2 and 3 (issued 4) and then: left
    6 − 4 − 0 (user 1 owes nothing once it left) − 0 = 2 → conversation 2 cut to 2 turns."""
    s = Sessions(3, total=6, users=2)
    due(s, 0)
    s.users = 1
    answer(s, 2, 1, 1)
    assert due(s, 1) == []
    for turn in (1, 2):
        answer(s, 1, turn, 1 + turn)
        due(s, 1 + turn)
    answer(s, 1, 3, 4)
    assert brief(due(s, 4)) == [(3, 1, "w-7", 0, 4)] and len(s._users[0].turns) == 2


# ---- the figures -----------------------------------------------------------------------------------------------

def rec(rid, turn, ttft_ms, *, prompt=10, view=None, error=None, first=True, extra=None):
    return RequestRecord("r", rid, "http", "http", "m", 0, 1, 1, prompt_tokens=prompt, t_scheduled_ns=5 * MS,
                         t_first_token_ns=round((5 + ttft_ms) * MS) if first else None, error=error,
                         server_view=view, turn=turn, extra=extra)


def timings(**kw):
    return {"timings": kw}


def test_ttft_by_turn_per_turn_figures():
    recs = [rec(1, 2, 100, prompt=30, view=timings(prompt_n=5, cache_n=25)),
            rec(2, 2, 300, prompt=34, view=timings(prompt_n=7, cache_n=27)),
            rec(3, 1, 200, prompt=10, view=timings(prompt_n=10, cache_n=0)),
            rec(4, 1, 400, prompt=None, view=timings(prompt_n=10)),
            rec(5, 1, 600, prompt=12, view={"timings": None}),
            rec(6, 1, 1, error="boom"), rec(7, None, 5), rec(8, 1, 0, first=False),  # not ok, no turn, no token
            rec(9, 3, 50, prompt=9, view=timings(prompt_n="7", cache_n=3.5)),
            rec(10, 3, 60, prompt=11, view=timings(prompt_n=8, cache_n=4.5)),
            rec(11, 4, 150, prompt=None)]
    out = ttft_by_turn(recs)
    assert list(out) == ["1", "2", "3", "4"]  # by turn number
    # turn 1: TTFT 200, 400, 600 ms: p50 400, p99 at (3 − 1) × 0.99 = 1.98 → 400 + 0.98 × 200 = 596; prompts
    # 10, 12 (one unknown) → 11; prefilled by 2 of 3 only, cached by 1: not given
    assert out["1"] == {"n": 3, "median_ttft_ms": pytest.approx(400), "p99_ttft_ms": pytest.approx(596),
                        "median_prompt_tokens": 11}
    # turn 2: 100, 300: p50 200, p99 at 0.99 → 100 + 0.99 × 200 = 298; prompts 32, prefilled 6, cached 26
    assert out["2"] == {"n": 2, "median_ttft_ms": pytest.approx(200), "p99_ttft_ms": pytest.approx(298),
                        "median_prompt_tokens": 32, "median_prefilled_tokens": 6, "median_cached_tokens": 26}
    # turn 3: 50, 60 → 55, 50 + 0.99 × 10 = 59.9; prompts 10; prefilled "7" is not a number: 1 of 2, not given;
    # cached 3.5, 4.5 → 4
    assert out["3"] == {"n": 2, "median_ttft_ms": pytest.approx(55), "p99_ttft_ms": pytest.approx(59.9),
                        "median_prompt_tokens": 10, "median_cached_tokens": 4}
    assert out["4"] == {"n": 1, "median_ttft_ms": pytest.approx(150), "p99_ttft_ms": pytest.approx(150)}
    assert ttft_by_turn([rec(1, None, 5)]) == {} and ttft_by_turn([]) == {}


def test_ttft_by_turn_keys_sort_by_number():
    out = ttft_by_turn([rec(1, 10, 1), rec(2, 2, 2), rec(3, 1, 3)])
    assert list(out) == ["1", "2", "10"]


def test_prefix_cache_label_is_the_first_said():
    off = "off: a unique prefix per request, cache_prompt false"
    recs = [rec(1, 1, 1), rec(2, 1, 1, extra={}), rec(3, 1, 1, extra={"prefix_cache": ""}),
            rec(4, 1, 1, extra={"prefix_cache": off}), rec(5, 1, 1, extra={"prefix_cache": "on: kept: yes"})]
    assert prefix_cache_label(recs) == "off"
    assert prefix_cache_label(recs[4:]) == "on"  # up to its first colon
    said = "shared:64: 64 shared words, then a unique prefix"
    assert prefix_cache_label([rec(1, 1, 1, extra={"prefix_cache": said})]) == "shared:64"
    assert prefix_cache_label([rec(1, 1, 1, extra={"prefix_cache": "shared:8"})]) == "shared:8"  # the bare form
    assert prefix_cache_label(recs[:3]) is None and prefix_cache_label([]) is None


def test_turn_note():
    by = {"1": {"median_ttft_ms": 399.6, "median_prompt_tokens": 11.0, "median_prefilled_tokens": 10.4},
          "2": {"median_ttft_ms": 200.4, "median_prompt_tokens": 32, "median_prefilled_tokens": 6}}
    # 399.6 → 400, 200.4 → 200; 10.4/11 → 10/11
    assert turn_note(SimpleNamespace(ttft_by_turn=by, prefix_cache="on")) == (
        " TTFT p50 by turn (prefix cache on) 1:400 2:200 ms; prefilled/prompt tokens 1:10/11 2:6/32")
    assert turn_note(SimpleNamespace(ttft_by_turn=by, prefix_cache=None)) == (
        " TTFT p50 by turn 1:400 2:200 ms; prefilled/prompt tokens 1:10/11 2:6/32")
    assert turn_note(SimpleNamespace(ttft_by_turn=by, prefix_cache="")).startswith(" TTFT p50 by turn 1:400")
    no_prefill = {**by, "1": {"median_ttft_ms": 10, "median_prompt_tokens": 5}}
    no_prompt = {**by, "1": {"median_ttft_ms": 10, "median_prefilled_tokens": 5}}
    for part in (no_prefill, no_prompt):  # one turn without either: no tokens part
        assert turn_note(SimpleNamespace(ttft_by_turn=part, prefix_cache="off")) == (
            " TTFT p50 by turn (prefix cache off) 1:10 2:200 ms")
    assert turn_note(SimpleNamespace(ttft_by_turn={}, prefix_cache="on")) == ""
    assert turn_note(SimpleNamespace(ttft_by_turn=None, prefix_cache="on")) == ""
