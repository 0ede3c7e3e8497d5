"""One engine worker: its own process (spawn context), its own load and warmup, then a loop that asks
the parent for the next request from the shared queue.

Messages to the parent (over this worker's own pipe, so a killed worker can corrupt nothing shared):
  ("state", state, info)                 loading | warming | ready | retired, with pid/threads/rss
  ("want",)                              idle: send me the next request
  ("start", req_id, t_started_ns)
  ("tok", req_id, [t_ns, ...])           token timestamps, batched at ≈10 Hz
  ("done", req_id, [t_ns, ...], prompt_tokens, finish_reason, error, t_done_ns, rss_bytes)
  ("fatal", message)                     the engine could not load; the worker exits
Messages from the parent: ("req", dict) | ("threads", n) | ("retire",) | ("stop",)
"""
from __future__ import annotations

import os
import signal
import sys
import time

from engines.base import EngineError, EngineSpec, Prompt, make_engine

WARMUP_REQUESTS = 2
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


def worker_main(wid: int, conn, spec_dict: dict, log_path: str | None = None) -> None:
    # Ctrl-C reaches the whole process group; the parent decides how workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    _redirect_output(log_path)

    spec = EngineSpec(**spec_dict)
    send = conn.send
    send(("state", "loading", {"pid": os.getpid(), "threads": spec.threads}))
    try:
        engine = make_engine(spec)
        engine.load()
        send(("state", "warming", {"rss": _rss()}))
        for _ in range(WARMUP_REQUESTS):
            engine.warmup()
    except EngineError as exc:
        send(("fatal", str(exc)))
        return
    except Exception as exc:  # an engine's own failure: report it in one line, never a traceback
        send(("fatal", f"{spec.engine} engine failed to load {spec.model_path}: {type(exc).__name__}: {exc}"))
        return
    send(("state", "ready", {"rss": _rss()}))

    while True:
        send(("want",))
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                return  # the parent is gone
            if msg[0] == "threads":
                engine.set_threads(msg[1])
                send(("state", "ready", {"threads": msg[1]}))
                continue
            break
        if msg[0] in ("retire", "stop"):
            send(("state", "retired", {}))
            engine.close()
            return
        _serve(engine, msg[1], send)


def _serve(engine, req: dict, send) -> None:
    rid = req["request_id"]
    t_started = time.perf_counter_ns()
    send(("start", rid, t_started))
    error = None
    finish = "error"
    n_prompt = 0
    pending: list[int] = []
    try:
        tokens = engine.tokenize(Prompt(req["prompt_id"], req.get("text"), req.get("synthetic_tokens")))
        n_prompt = len(tokens)
        last_flush = t_started
        gen = engine.generate(tokens, req["max_tokens"], req["ignore_eos"])
        while True:
            try:
                _tid, t_ns = next(gen)
            except StopIteration as stop:
                finish = stop.value or "length"
                break
            pending.append(t_ns)
            if t_ns - last_flush >= TOKEN_BATCH_NS:
                send(("tok", rid, pending))
                pending = []
                last_flush = t_ns
    except Exception as exc:  # noqa: BLE001 - a request's failure is recorded, the worker goes on
        error = f"{type(exc).__name__}: {exc}" if not isinstance(exc, EngineError) else str(exc)
    send(("done", rid, pending, n_prompt, finish if error is None else "error", error,
          time.perf_counter_ns(), _rss()))
