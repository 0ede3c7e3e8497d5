"""engines/http_lean.py: the streamed POST on a connection of our own (docs/design/client-processes.md). The failure modes and
the servers it must read are tested over both sessions where the aiohttp ones are (test_http.py, test_faults.py,
test_null_engine.py: `make` / `lean`); here what is its own: the bytes it writes, the body it decodes, and when it
keeps a connection."""
import asyncio
import collections.abc
import socket
import threading
import time

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.http_lean import LeanSession, _Body, _Conn, request_bytes
from engines.http_openai import endpoint_body, stream_one


def test_the_request_it_writes():
    got = request_bytes("http://u%40x:p%3Aw@host.lan:8080/v1/completions?x=1", b'{"a":1}', {"X-Trace": "7"})
    assert got == (b"POST /v1/completions?x=1 HTTP/1.1\r\nHost: host.lan:8080\r\nUser-Agent: inference-top\r\n"
                   b"Accept: text/event-stream\r\nX-Trace: 7\r\nAuthorization: Basic dUB4OnA6dw==\r\n"
                   b"Content-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}")
    keyed = request_bytes("http://u:p@h/v1", b"{}", {"Authorization": "Bearer k"})  # the header wins over the URL's
    assert b"Authorization: Bearer k\r\n" in keyed and b"Basic" not in keyed and b"Host: h\r\n" in keyed
    with pytest.raises(ValueError, match="line break"):
        request_bytes("http://h/v1", b"{}", {"Authorization": "Bearer k\r\nX-Evil: 1"})
    with pytest.raises(ValueError, match="not an http:// URL"):
        request_bytes("https://h/v1", b"{}", {})


class _Reads:
    """A connection's reads handed over one by one (what _Conn.piece gives), each at time i."""

    def __init__(self, pieces):
        self.pieces = list(pieces)
        self.i = 0

    async def piece(self, stall_s):
        if self.i == len(self.pieces):
            return None
        self.i += 1
        return self.pieces[self.i - 1], self.i


def chunked(parts: list[bytes]) -> bytes:
    return b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in parts if p) + b"0\r\nTrailer: x\r\n\r\n"


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(st.binary(min_size=1, max_size=40), max_size=6), cuts=st.lists(st.integers(0, 400), max_size=8),
       framing=st.sampled_from(["chunked", "sized", "to-close"]))
def test_a_body_cut_anywhere_by_the_socket_reads_decodes_whole(parts, cuts, framing):
    """The body's bytes, however the socket reads cut its framing (inside a size line, between CR and LF, in the
    trailer), come out whole and in order, read (readany) or handed over as they come (hand_over, from inside
    data_received); handed over, each piece carries the time of the read that brought it."""
    body = b"".join(parts)
    wire = chunked(parts) if framing == "chunked" else body
    at = sorted({c % (len(wire) + 1) for c in cuts} | {0, len(wire)})
    reads = [wire[a:b] for a, b in zip(at, at[1:]) if b > a]

    async def go():
        src = _Reads(reads)
        b = _Body(src, framing, len(body), b"", 0, None)  # type: ignore[arg-type]
        got = await b.read()
        return got, b, src

    got, b, src = asyncio.run(go())
    assert got == body and b.is_eof()
    if framing == "chunked":  # the framing read to its end, trailer and all: the connection is ready for the next
        assert src.i == len(reads) and not b.raw

    async def handed():
        conn, pieces = _Conn(), []
        b = _Body(conn, framing, len(body), b"", 0, None)
        task = asyncio.ensure_future(b.hand_over(lambda data, t: pieces.append((data, t)) and False))
        await asyncio.sleep(0)
        for r in reads:
            conn.data_received(r)
            pieces.append(("read", conn.since_ns))
        if framing == "to-close":
            conn.connection_lost(None)
        return await task, pieces, b

    ended, pieces, b = asyncio.run(handed())
    assert ended is False and b.is_eof() and b"".join(d for d, _ in pieces if d != "read") == body
    read_t = [t for d, t in pieces if d == "read"]
    for i, (d, t) in enumerate(pieces):  # a piece given before read k's mark came with read k
        if d != "read":
            assert t == next(t2 for d2, t2 in pieces[i:] if d2 == "read")
    assert len(read_t) == len(reads)


def test_a_broken_chunk_size_is_a_payload_error():
    async def go():
        b = _Body(_Reads([b"zz\r\nab\r\n"]), "chunked", 0, b"", 0, None)  # type: ignore[arg-type]
        return await b.readany()

    with pytest.raises(aiohttp.ClientPayloadError, match="not a chunk size"):
        asyncio.run(go())


SSE = (b'data: {"choices": [{"text": "a", "finish_reason": null}]}\n\n'
       b'data: {"choices": [{"text": "", "finish_reason": "length"}]}\n\ndata: [DONE]\n\n')


class Scripted:
    """A loopback server answering each request with a chunked SSE stream; `close_after` answers carry
    Connection: close (then it reads nothing more on that connection, though it holds it open), `idle_close` closes the connection after each answer without saying so
    (a server's keep-alive timeout). Counts connections."""

    def __init__(self, close_after: bool = False, idle_close: bool = False):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1/completions"
        self.close_after, self.idle_close, self.connections = close_after, idle_close, 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                extra = b"Connection: close\r\n" if self.close_after else b""
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                             + extra + b"\r\n" + chunked([SSE[:30], SSE[30:]]))
                if self.close_after:  # says close but holds the socket: a request sent on it would wait
                    time.sleep(3)
                    return
                if self.idle_close:
                    return


@pytest.mark.parametrize("close_after, idle_close, connections", [(False, False, 1), (True, False, 3),
                                                                  (False, True, 3)])
def test_a_connection_is_kept_while_the_server_keeps_it(close_after, idle_close, connections):
    """Three requests in turn: one connection where the server keeps it; a new one after each answer that says
    Connection: close, and after each that the server closed quietly (none of them resent: the close was seen
    before the next request went out)."""
    srv = Scripted(close_after, idle_close)

    async def go():
        async with LeanSession() as s:
            out = []
            for _ in range(3):
                out.append(await stream_one(s, srv.url, endpoint_body("completions", None, "a", 1, True), {}, 1.0))
                await asyncio.sleep(0.05)  # the quiet close reaches the client before the next request
            return out

    results = asyncio.run(go())
    assert [(r.error, len(r.token_ns), r.finish_reason, r.resent) for r in results] == [(None, 1, "length", False)] * 3
    assert srv.connections == connections


class Paced:
    """A loopback server whose one answer is a chunked SSE stream of `n` events, each written `gap_s` after the
    last (each comes in its own socket read)."""

    def __init__(self, n: int, gap_s: float):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1/completions"
        self.n, self.gap_s = n, gap_s
        self.sent_ns: list[int] = []  # just before each event was written (perf_counter_ns, the records' clock)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            for i in range(self.n):
                time.sleep(self.gap_s)
                last = i == self.n - 1
                event = (b'data: {"choices": [{"text": "a", "finish_reason": %s}]}\n\n' % (b'"length"' if last else b"null")
                         + (b"data: [DONE]\n\n" if last else b""))
                self.sent_ns.append(time.perf_counter_ns())
                conn.sendall(b"%x\r\n%s\r\n" % (len(event), event) + (b"0\r\n\r\n" if last else b""))
            time.sleep(0.5)


class Steps(collections.abc.Coroutine):
    """A coroutine run as a task, counting the task's steps (each resume of it by the event loop)."""

    def __init__(self, coro):
        self.coro, self.steps = coro, 0

    def send(self, value):
        self.steps += 1
        return self.coro.send(value)

    def throw(self, *exc):
        self.steps += 1
        return self.coro.throw(*exc)

    def close(self):
        return self.coro.close()

    def __await__(self):
        return self

    def __iter__(self):
        return self

    def __next__(self):
        return self.send(None)


def test_a_lean_stream_wakes_its_task_once_for_its_body_not_once_per_token():
    """30 events, each in its own read: every token is counted and stamped as its read comes (inside the
    connection's data_received: most of them before the next event was even written, 3 ms later; stamped all at
    the body's end, none would be), and the request's task is stepped a few times (its start, its connection, its
    head, its body's end), not once per token as a wait on each read did. (A gap of ≥ 1 ms between stamps was asked
    before: on a loaded machine the server's sleep overran once and two events came 0.29 ms apart.)"""
    srv = Paced(30, 0.003)

    async def go():
        async with LeanSession() as s:
            run = Steps(stream_one(s, srv.url, endpoint_body("completions", None, "a", 30, True), {}, 5.0))
            return await asyncio.ensure_future(run), run.steps

    res, steps = asyncio.run(go())
    assert res.error is None and len(res.token_ns) == 30 and res.finish_reason == "length"
    sent = srv.sent_ns
    assert all(t > s for t, s in zip(res.token_ns, sent))  # none stamped before it was written
    own = sum(t < nxt for t, nxt in zip(res.token_ns, sent[1:]))
    assert own >= 15, (own, [t - s for t, s in zip(res.token_ns, sent)])  # each token at its own read
    assert steps <= 8, steps
