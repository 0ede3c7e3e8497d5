"""The HTTP source's loop takes one turn per event on every Python (measure/sources/loop_turns.py, docs/design/client-processes.md):
a task made on it runs at once to its first wait (3.12's eager tasks, written over asyncio's Task on 3.11), and
its wake reaches the waiting task in the next turn (asyncio.wait_for on 3.11 took three)."""
import asyncio
import socket
import threading
import time

import pytest

from measure.sources.loop_turns import Wake, eager_task_factory


class Turns:
    """Counts the loop's turns: a callback that schedules itself again each turn."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.n, self._loop, self._on = 0, loop, True
        loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.n += 1
        if self._on:
            self._loop.call_soon(self._tick)

    def stop(self) -> None:
        self._on = False


def run(coro):
    loop = asyncio.new_event_loop()
    loop.set_task_factory(eager_task_factory())
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def test_a_task_runs_to_its_first_wait_in_the_call_that_made_it():
    seen: list[object] = []

    async def child(wait: bool) -> str:
        seen.append(asyncio.current_task())
        if wait:
            await asyncio.sleep(0.001)
            seen.append(asyncio.current_task())
        return "done"

    async def main():
        me = asyncio.current_task()
        quick = asyncio.create_task(child(False))
        assert quick.done() and quick.result() == "done"  # finished inside create_task
        assert seen == [quick] and asyncio.current_task() is me  # it was the current task, then me again
        slow = asyncio.create_task(child(True))
        assert not slow.done() and seen[-1] is slow
        assert await slow == "done" and seen[-1] is slow

        async def bad():
            raise ValueError("no")

        failed = asyncio.create_task(bad())
        assert failed.done() and isinstance(failed.exception(), ValueError)
        stuck = asyncio.create_task(asyncio.sleep(10))
        stuck.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stuck

    run(main())


class Listener:
    """A loopback socket that answers the first request (a GET) with an empty 200 and keeps what it reads."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.read = b""
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        answered = False
        while data := conn.recv(65536):
            self.read += data
            if not answered and b"\r\n\r\n" in self.read:
                answered = True
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}")


def test_a_request_taken_up_is_written_before_the_loop_turns():
    """A request's task made on the loop writes the whole request, its body too, inside create_task: the
    request's own task runs at once, and so does the task aiohttp writes a POST's body from. The loop is then
    held (time.sleep, no turn) and the server has read the body. On 3.11 with plain tasks nothing went out
    until two turns later: 3.3 + 5.4 ms of the 9.1 ms median TTFT bias at 64 streams
    (benchmarks/harness_overhead.py)."""
    from engines.http_openai import new_session

    srv = Listener()

    async def main():
        session = new_session()
        try:
            async with session.get(f"{srv.url}/models") as r:  # the connection opened and kept
                await r.read()

            async def post():
                async with session.post(f"{srv.url}/completions", data=b'{"prompt": "the body"}') as r:
                    return r.status

            task = asyncio.create_task(post())
            time.sleep(0.2)  # the loop held: the server sees only what was written inside create_task
            assert b'{"prompt": "the body"}' in srv.read
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        finally:
            await session.close()

    run(main())


@pytest.mark.parametrize("set_first", [False, True])
def test_the_wake_reaches_its_waiter_in_the_next_turn(set_first):
    async def main():
        wake = Wake()
        if set_first:
            wake.set()
            assert await wake.wait(5.0) is True
            return
        loop = asyncio.get_running_loop()
        turns = Turns(loop)
        at = [-1]

        def set_now() -> None:
            at[0] = turns.n
            wake.set()

        loop.call_later(0.002, set_now)
        assert await wake.wait(5.0) is True
        woke = turns.n - at[0]
        turns.stop()
        assert woke <= 1, f"the waiter woke {woke} turns after set()"
        wake.clear()
        assert await wake.wait(0.01) is False  # the timeout, unset

    run(main())


def _one_users_closed_loop(on_record=None):
    """Four requests of one user (a closed loop, B = 1) through the HTTP source against the null server (1 ms
    TTFT and ITL); on_record(source, record) is told each record as the source hands it over."""
    import presets
    from engines.null_server import Behaviour, NullServer
    from measure.core.records import RunMeta
    from measure.core.workload import ClosedLoop, Load
    from measure.sources.http import HttpSource

    with NullServer(Behaviour(ttft_ms=1, itl_ms=1)) as srv:
        src = HttpSource(srv.url, RunMeta("http", "null", 0, simulated=True), b=1, events=False,
                         on_record=(lambda rec: on_record(src, rec)) if on_record else None)
        src.start()
        try:
            src.wait_ready(30)
            recs = src.run_requests(Load(presets.workload("synthetic:4"), ClosedLoop(1, total=4), 2), timeout=60)
        finally:
            src.close()
    assert [r.error for r in recs] == [None] * 4
    return recs


def test_a_closed_loops_next_request_goes_out_from_the_end_of_the_last(monkeypatch):
    """A closed loop's next request is due when the last ends, and is sent from there (HttpSource._pump), not
    when the loop's main task next wakes: here the main task is never woken early (Wake.set does nothing, so it
    sleeps its 0.5 s out), and each user's next request still starts within a fraction of that after the last
    ended. Before, each waited for the main task: half a turn at 64 streams, most of the 0.5–1.5 ms of dispatch."""
    monkeypatch.setattr(Wake, "set", lambda self: None)
    recs = sorted(_one_users_closed_loop(), key=lambda r: r.t_started_ns)
    gaps_s = [(b.t_started_ns - a.t_done_ns) / 1e9 for a, b in zip(recs, recs[1:])]
    assert max(gaps_s) < 0.25, gaps_s


def test_a_closed_loops_next_request_goes_out_before_the_last_ones_record_is_made():
    """The next request is sent from the end of the last before that one's record is built and handed over: at
    64 streams ending together each record stood between a stream's end and its user's next request
    (docs/design/client-processes.md). Here each record, as it is handed over, finds the next request of its (only) user
    already sent; before, none did."""
    sent_before: list[int] = []
    _one_users_closed_loop(lambda src, rec: sent_before.append(len(src._active)))
    assert sent_before[-4:] == [1, 1, 1, 0]  # the last has no next
