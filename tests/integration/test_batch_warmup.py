"""A worker warms each new batch shape when the mode is applied, outside any request (in-process, on the
embedded model): exactly B short sequences run through the context and leave nothing behind."""
from engines.base import Prompt
from measure.sources.messages import DoneMsg, ModeMsg, ReqMsg, StartMsg, StateMsg, TokensMsg
from measure.sources.worker import BATCH_WARMUP_TOKENS, Worker

import presets

WL = presets.workload("default")


class Conn:
    """The worker's end of the pipe: what it sends is kept; nothing arrives."""

    def __init__(self):
        self.sent = []

    def send(self, msg):
        self.sent.append(msg)

    def poll(self, timeout=0):
        return False


def applied(conn):
    last = conn.sent[-1]
    return isinstance(last, StateMsg) and last.state == "ready" and last.mode_applied and last.error is None


def test_mode_switch_warms_each_new_shape_once_and_leaves_no_trace(engine):
    conn = Conn()
    w = Worker(conn, engine)
    w.control(ModeMsg("batch", 4, 4, None))
    batch = engine.batch(4)
    # one prefill step and one decode step with all 4 sequences, before the mode was reported applied
    assert w.batch_warmups == [(4, BATCH_WARMUP_TOKENS)] and applied(conn)
    assert batch.active() == 0 and sorted(batch._free) == [0, 1, 2, 3]
    w.control(ModeMsg("batch", 4, 4, None))  # the same shape again: nothing to warm
    w.control(ModeMsg("batch", 2, 4, None))  # a new B in the same context: warmed with 2
    assert w.batch_warmups == [(4, 2), (2, 2)] and applied(conn)
    assert engine.batch(4) is batch
    # the warmup left no KV behind: a sequence in the warmed context decodes as the single-stream path
    toks = engine.tokenize(Prompt("p", text=WL.prompts[3]))
    single = [t for t, _ in engine.generate(toks, 12, True)]
    batch.add("a", toks, 12, True)
    got = []
    while batch.active():
        got += [tok for _, tok in batch.step()[1]]
    assert got == single


def test_request_after_warmup_is_served_in_full(engine):
    conn = Conn()
    w = Worker(conn, engine)
    w.control(ModeMsg("batch", 3, 4, None))
    conn.sent.clear()
    w.serve_batch(ReqMsg(7, Prompt("default-1", WL.prompts[0]), 5, True))
    start = [m for m in conn.sent if isinstance(m, StartMsg)]
    done = [m for m in conn.sent if isinstance(m, DoneMsg)]
    assert [m.request_id for m in start] == [7] and len(done) == 1
    # tokens reach the parent in TokensMsg batches (≈ 10 Hz) and the rest with DoneMsg: 5 in all
    sent = [t for m in conn.sent if isinstance(m, (TokensMsg, DoneMsg)) and m.request_id == 7 for t in m.token_ns]
    assert done[0].error is None and len(sent) == 5 and w.serving is None


def test_mode_change_under_live_sequences_neither_remakes_nor_warms(engine):
    """A ModeMsg read between steps: the context in use keeps its sequences; serve_batch remakes it once
    it is empty."""
    conn = Conn()
    w = Worker(conn, engine)
    w.control(ModeMsg("batch", 4, 4, None))
    batch = engine.batch(4)
    batch.add("live", engine.tokenize(Prompt("p", text=WL.prompts[1])), 3, True)
    w.serving = batch
    n = len(w.batch_warmups)
    w.control(ModeMsg("batch", 8, 8, None))
    assert applied(conn) and len(w.batch_warmups) == n
    assert engine._batch is batch and batch.ctx and batch.active() == 1
    while batch.active():
        batch.step()
    w.serving = None
