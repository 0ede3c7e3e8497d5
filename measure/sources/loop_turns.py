"""The HTTP source's loop, one turn of it per event on every Python (docs/design/client-processes.md): eager tasks, and a wake
that is not asyncio.wait_for.

Python ≥ 3.12 has `asyncio.eager_task_factory`: a new task runs at once, inside the call that made it, up to its
first real wait. The HTTP source relies on it twice per request: the request's own task (taken up by the
dispatch) and aiohttp's body-writing task (aiohttp starts it eagerly on 3.12+, as a plain task before). With
plain tasks each is one turn of the loop later, and at 64 streams a turn holds every stream's reads that came
meanwhile: two turns were the 3.3 + 5.4 ms of TTFT bias harness_overhead.py measured at B = 64 on 3.11.

`eager_task_factory()` is asyncio's own on 3.12+. On 3.11 it is the same rule over asyncio's C Task: the task is
made as usual, the first step its constructor scheduled (the last handle on the loop's ready queue, a
TaskStepMethWrapper) is cancelled, and that step is run now, with the running task (if any) stepped out of and back
into asyncio's current-task slot for it, as 3.12's Task.__eager_start does. A task that finishes in that step is
done when create_task returns. Outside a running loop, or if the constructor's step is not where it is expected,
the task starts as a plain one. Its later steps are the C Task's own: an earlier version of this factory made
asyncio's pure-Python Task (`_PyTask`) to reach its step, and paid Python's step for every token after
(benchmarks/harness_overhead.py at B = 64, 4 alternating pairs: client CPU 61–73 → 56–65 µs a token).
"""
from __future__ import annotations

import asyncio
import asyncio.tasks as _tasks
import sys
from collections.abc import Callable, Coroutine
from contextvars import Context
from typing import Any

TaskFactory = Callable[..., "asyncio.Future[Any]"]


def _factory_311(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], *,
                 context: Context | None = None) -> asyncio.Future[Any]:
    task = asyncio.Task(coro, loop=loop, context=context)  # type: ignore[call-arg]  # (3.11's stub lacks context)
    if not loop.is_running():
        return task
    ready = getattr(loop, "_ready", None)  # BaseEventLoop's queue of handles due now
    handle = ready[-1] if ready else None
    if handle is None or handle.cancelled() or type(handle._callback).__name__ != "TaskStepMethWrapper":
        return task  # not the step the constructor scheduled: leave it to the loop
    step, ctx = handle._callback, handle._context
    handle.cancel()
    current = _tasks.current_task(loop)
    if current is not None:
        _tasks._leave_task(loop, current)
    try:
        ctx.run(step)
    finally:
        if current is not None:
            _tasks._enter_task(loop, current)
    return task


def eager_task_factory() -> TaskFactory:
    """The loop's task factory that starts each task eagerly: asyncio's own on ≥ 3.12, this module's on 3.11."""
    if sys.version_info >= (3, 12):
        return asyncio.eager_task_factory  # type: ignore[attr-defined,no-any-return]
    return _factory_311


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class Wake:
    """An asyncio.Event the loop's main task waits on with a timeout, woken in the next turn of the loop.

    `await asyncio.wait_for(event.wait(), t)` on 3.11 wraps the wait in a task of its own and ends it through a
    done callback: set() → the wait's task → the callback → the waiting task, three turns, where 3.12's
    wait_for (a timeout around the wait) takes one. At 64 streams those two turns were the 1.3–1.8 ms of
    dispatch in harness_overhead.py's bias split. Here set() completes the waiter's own future: one turn."""

    def __init__(self) -> None:
        self._flag = False
        self._fut: asyncio.Future[None] | None = None

    def set(self) -> None:
        self._flag = True
        if self._fut is not None:
            _resolve(self._fut)

    def clear(self) -> None:
        self._flag = False

    async def wait(self, timeout_s: float) -> bool:
        """Until set() or timeout_s seconds: True if set."""
        if self._flag:
            return True
        loop = asyncio.get_running_loop()
        self._fut = fut = loop.create_future()
        timer = loop.call_later(timeout_s, _resolve, fut)
        try:
            await fut
        finally:
            timer.cancel()
            self._fut = None
        return self._flag
