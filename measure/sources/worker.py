"""One engine worker: its own process (sources/child.py), its own load and warmup, then a loop serving
what the parent hands it from the shared queue: one request at a time (instances mode), or up to B
sequences decoded together in one context (batch mode, continuous batching).

Messages both ways are the NamedTuples of sources/messages.py, over this worker's own pipe (so a killed
worker can corrupt nothing shared). The parent never hands a worker more requests than its mode allows.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from collections import deque
from multiprocessing.connection import Connection
from typing import Any

from engines.base import Batch, Engine, EngineError, EngineSpec, Prompt
from engines.registry import make_engine
from measure.sources.messages import (DoneMsg, FatalMsg, ModeMsg, ReqMsg, RetireMsg, StartMsg, StateMsg, StopMsg,
                                      ThreadsMsg, TokensMsg)

WARMUP_REQUESTS = 2
WARMUP_TEXT = "Warm up: count from one to ten."
BATCH_WARMUP_PROMPT = 8  # prompt tokens of each batch-warmup sequence
BATCH_WARMUP_TOKENS = 2  # tokens each generates: one prefill step and one decode step at exactly B
TOKEN_BATCH_NS = 100_000_000  # send token timestamps to the parent at ≈10 Hz


def _die_with_parent() -> None:
    """Linux: get SIGTERM when the parent dies, even by SIGKILL, so no worker is ever orphaned."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def _rss() -> int | None:
    try:
        import psutil

        return psutil.Process().memory_info().rss
    except Exception:
        return None


def _redirect_output(log_path: str | None) -> None:
    """The engine's C code prints to fds 1 and 2; in a dashboard that would tear the screen."""
    if not log_path:
        return
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _error_text(exc: Exception) -> str:
    return str(exc) if isinstance(exc, EngineError) else f"{type(exc).__name__}: {exc}"


class Worker:
    def __init__(self, conn: Connection, engine: Engine, keep_ids: bool = False):
        self.conn = conn
        self.keep_ids = keep_ids  # each answer's token ids go back with its DoneMsg (compare's answers, issue 58)
        self.send = conn.send
        self.engine = engine
        self.mode = "single"
        self.b = 1
        self.b_cap = 1
        self.seq_ctx: int | None = None
        self.leaving = False  # retire or stop received
        self.serving: Batch | None = None  # the batch serve_batch is decoding in, while it runs
        self.batch_warmups: list[tuple[int, int]] = []  # (B, steps) of each batch warmup run, in order
        self._warmed_in: Batch | None = None
        self._warmed_bs: set[int] = set()  # the batch context warm_batch last ran in, its Bs

    def control(self, msg: object) -> bool:
        """Apply a control message; False if it was not one (a request)."""
        if isinstance(msg, ThreadsMsg):
            self.engine.set_threads(msg.n)
            self.send(StateMsg("ready", threads=msg.n))
        elif isinstance(msg, ModeMsg):
            self.mode, self.b, self.b_cap, self.seq_ctx = msg.mode, msg.b, max(msg.b, msg.b_cap), msg.seq_ctx
            error = None
            # a context with live sequences is never remade or warmed under them: serve_batch remakes it
            # once it is empty
            if self.mode == "batch" and not (self.serving is not None and self.serving.active()):
                try:  # make and warm the batch context now, not inside the first measured request
                    self.warm_batch(self.engine.batch(self.b_cap, self.seq_ctx), self.b)
                except Exception as exc:  # noqa: BLE001 - reported now, and again when a request needs it
                    error = _error_text(exc)
            self.send(StateMsg("ready", mode_applied=True, error=error))
        elif isinstance(msg, (RetireMsg, StopMsg)):
            self.leaving = True
        else:
            return False
        return True

    def warm_batch(self, batch: Batch, b: int) -> None:
        """B short sequences through an idle batch context, then removed, once per context and B: the
        first steps of a new batch shape (graph, output buffers, first-touch pages) are paid here, before
        the mode is reported applied, and not in the first TTFT of the level."""
        if self._warmed_in is not batch:
            self._warmed_in, self._warmed_bs = batch, set()
        n = min(b, batch.b_cap)
        if n in self._warmed_bs or batch.active():
            return
        room = max(1, batch.ctx_per_seq - BATCH_WARMUP_TOKENS)
        prompt = self.engine.tokenize(Prompt("warmup", text=WARMUP_TEXT))[: min(BATCH_WARMUP_PROMPT, room)]
        keys = [("warmup", i) for i in range(n)]
        steps = 0
        try:
            for key in keys:
                batch.add(key, prompt, BATCH_WARMUP_TOKENS, True)
            while batch.active() and steps < 8 * BATCH_WARMUP_TOKENS:  # the bound guards a stuck engine
                batch.step()
                steps += 1
        finally:
            for key in keys:
                batch.remove(key)
        self._warmed_bs.add(n)
        self.batch_warmups.append((n, steps))

    def run(self) -> None:
        while not self.leaving:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                return  # the parent is gone
            if self.control(msg):
                continue
            if self.mode == "batch":
                self.serve_batch(msg)
            else:
                self.serve_one(msg)
        self.send(StateMsg("retired"))
        self.engine.close()

    def serve_one(self, req: ReqMsg) -> None:
        rid = req.request_id
        t_started = time.perf_counter_ns()
        self.send(StartMsg(rid, t_started))
        error = None
        finish = "error"
        n_prompt = 0
        pending: list[int] = []
        ids: list[int] | None = [] if self.keep_ids else None
        try:
            tokens = self.engine.tokenize(req.prompt)
            n_prompt = len(tokens)
            last_flush = t_started
            gen = self.engine.generate(tokens, req.max_tokens, req.ignore_eos)
            while True:
                try:
                    tid, t_ns = next(gen)
                except StopIteration as stop:
                    finish = stop.value or "length"
                    break
                pending.append(t_ns)
                if ids is not None:
                    ids.append(tid)
                if t_ns - last_flush >= TOKEN_BATCH_NS:
                    self.send(TokensMsg(rid, pending))
                    pending = []
                    last_flush = t_ns
        except Exception as exc:  # noqa: BLE001 - a request's failure is recorded, the worker goes on
            error = _error_text(exc)
        self.send(DoneMsg(rid, pending, n_prompt, finish if error is None else "error", error,
                          time.perf_counter_ns(), _rss(), ids))

    def serve_batch(self, first: ReqMsg) -> None:
        """Continuous batching: admit what arrives while fewer than B run, one decode per step, until
        nothing is left. Messages are read between steps without blocking."""
        try:
            self._serve_batch(deque([first]))
        finally:
            self.serving = None

    def _serve_batch(self, waiting: deque[ReqMsg]) -> None:
        pending: dict[int, list[int]] = {}
        n_prompt: dict[int, int] = {}
        ids: dict[int, list[int]] | None = {} if self.keep_ids else None  # each sequence's answer so far
        last_flush = time.perf_counter_ns()
        batch: Batch | None = None
        poll, send = self.conn.poll, self.send
        while True:
            while poll(0):
                msg = self.conn.recv()
                if not self.control(msg):
                    waiting.append(msg)
            if batch is None or not batch.active():
                try:  # the context holds b_cap sequences; it is remade (on a new shape) only when empty
                    batch = self.serving = self.engine.batch(self.b_cap, self.seq_ctx)
                except Exception as exc:  # noqa: BLE001 - every waiting request fails with the reason
                    for req in waiting:
                        self._fail(req, _error_text(exc))
                    return
            while waiting and batch.active() < min(self.b, batch.b_cap):
                req = waiting.popleft()
                rid = req.request_id
                try:
                    tokens = self.engine.tokenize(req.prompt)
                    batch.add(rid, tokens, req.max_tokens, req.ignore_eos)
                except Exception as exc:  # noqa: BLE001 - refused with the numbers; the others go on
                    self._fail(req, _error_text(exc))
                    continue
                send(StartMsg(rid, time.perf_counter_ns()))
                pending[rid] = []
                n_prompt[rid] = len(tokens)
                if ids is not None:
                    ids[rid] = []
            if not batch.active():
                if waiting:
                    continue
                return
            try:
                t, toks, finished = batch.step()
            except Exception as exc:  # noqa: BLE001 - the step broke: fail its sequences, keep the worker
                for rid in list(batch.seqs):
                    batch.remove(rid)
                    send(DoneMsg(rid, pending.pop(rid, []), n_prompt.pop(rid, 0), "error", _error_text(exc),
                                 time.perf_counter_ns(), _rss(), None if ids is None else ids.pop(rid, [])))
                continue
            for rid, tok in toks:
                pending[rid].append(t)
                if ids is not None:
                    ids[rid].append(tok)
            if finished:
                rss = _rss()  # one reading for every sequence the step ended
                for rid, reason in finished:
                    send(DoneMsg(rid, pending.pop(rid), n_prompt.pop(rid), reason, None, time.perf_counter_ns(),
                                 rss, None if ids is None else ids.pop(rid)))
            if t - last_flush >= TOKEN_BATCH_NS:
                for rid, ts in pending.items():
                    if ts:
                        send(TokensMsg(rid, ts))
                        pending[rid] = []
                last_flush = t

    def _fail(self, req: ReqMsg, error: str) -> None:
        rid = req.request_id
        now = time.perf_counter_ns()
        self.send(StartMsg(rid, now))
        self.send(DoneMsg(rid, [], 0, "error", error, now, _rss()))


def worker_main(conn: Connection, wid: int, spec_dict: dict[str, Any], log_path: str | None = None) -> None:
    """Worker `wid` (a child.Child: Ctrl-C, which reaches the whole process group, is ignored there; the parent
    decides how workers stop)."""
    _die_with_parent()
    _redirect_output(log_path)
    import faulthandler

    faulthandler.enable()  # a crash in the engine's C code leaves the Python stack in the engine log (fd 2)
    spec = EngineSpec(**spec_dict)
    send = conn.send
    limit = spec.options.get("memory_limit")
    if limit:  # a hard cap on this worker's address space: a model too big fails to load, cleanly
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))
    send(StateMsg("loading", pid=os.getpid(), threads=spec.threads))
    try:
        engine = make_engine(spec)
        engine.load()
        send(StateMsg("warming", rss=_rss()))
        for _ in range(WARMUP_REQUESTS):
            engine.warmup()
    except EngineError as exc:
        send(FatalMsg(str(exc)))
        return
    except Exception as exc:  # an engine's own failure: report it in one line, never a traceback
        send(FatalMsg(f"{spec.engine} engine failed to load {spec.model_path}: {type(exc).__name__}: {exc}"))
        return
    send(StateMsg("ready", rss=_rss()))
    Worker(conn, engine, keep_ids=bool(spec.options.get("answer_ids"))).run()
