"""engines/http_lean.py: the streamed POST on a connection of our own (docs/design.md §19). The failure modes and
the servers it must read are tested over both sessions where the aiohttp ones are (test_http.py, test_faults.py,
test_null_engine.py: `make` / `lean`); here what is its own: the bytes it writes, the body it decodes, and when it
keeps a connection."""
import asyncio
import socket
import threading
import time

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.http_lean import LeanSession, _Body, request_bytes
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
    trailer), come out whole and in order, and each byte's time is that of the read that brought it."""
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
    if framing == "sized" and body:  # the byte at each read's end came with that read
        ends = [sum(map(len, reads[:i + 1])) for i in range(len(reads))]
        b2 = _Body(_Reads([]), "sized", len(body), b"", 0, None)  # type: ignore[arg-type]
        for i, r in enumerate(reads):
            b2._feed(r, i + 1)
        assert [b2.at(e) for e in ends] == list(range(1, len(reads) + 1))


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
