"""The streamed POST of an http:// endpoint on a connection of our own (docs/design/client-processes.md): the client's request
start without aiohttp's.

At 64 streams due together the client puts 64 requests on their sockets one after another, and each one's start
is the next one's wait. Through stream_one, a request's start cost ≈ 158 µs of CPU with aiohttp's session (its URL,
headers, timer, connector and writer objects) and ≈ 46 µs with this one, the body's JSON and the kernel's send()
included (`python benchmarks/client_burst.py`: ×3.4 at 64 streams). So the one request the load sources send many
times, a streamed POST on a kept-alive connection, is written and read here; everything else (https, /models, /metrics, /tokenize, the scrape) stays
with aiohttp and engines/http_sync.py.

What it speaks: HTTP/1.1, one request at a time per connection, the connection kept while the server keeps it
(not after `Connection: close`, an HTTP/1.0 answer, a body read to the connection's end, or a response left
unread). A response's body is chunked (every server the project drives: llama-server, uvicorn's, aiohttp's),
sized by Content-Length, or read to the connection's end (http.server's HTTP/1.0). Credentials in the URL are
sent as Basic authorization where no Authorization header is given, as aiohttp sends them.

It quacks as the part of aiohttp's response engines/http_openai.py reads (status, headers, content's readany /
read / is_eof), and its failures are aiohttp's exception types (ServerDisconnectedError, ClientPayloadError,
ClientOSError; `LeanConnectError` for a refused connect), so one failure map serves both. Its body can also be
handed over as it comes (`_Body.hand_over`): each socket read is decoded and given to the reader inside the
protocol's data_received, stamped with when that read was handed over, and the request's task wakes once, at the
end, not once per read (per token) as a wait on readany does.
"""
from __future__ import annotations

import asyncio
import base64
import functools
import time
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

import aiohttp

MAX_HEAD = 64 << 10  # a status line and headers longer than this are not an answer we can read
MAX_CHUNK_LINE = 4096


class LeanConnectError(aiohttp.ClientConnectionError):
    """The server could not be reached (refused, no route, no name, the connect timed out)."""


class LeanAnswerError(aiohttp.ClientError):
    """An answer that is not HTTP/1.x as this module reads it (its first line, a head over 64 KiB)."""


@functools.lru_cache(maxsize=64)
def _target(url: str) -> tuple[str, int, bytes, bytes]:
    """(host, port, the request's lines up to the caller's headers, the URL's credentials as a Basic
    Authorization line or b"") of an http:// URL."""
    p = urlsplit(url)
    if p.scheme != "http" or not p.hostname:
        raise ValueError(f"not an http:// URL: {url}")
    host = p.hostname
    shown_host = f"[{host}]" if ":" in host else host
    path = (p.path or "/") + (f"?{p.query}" if p.query else "")
    lines = (f"POST {path} HTTP/1.1\r\nHost: {shown_host}{f':{p.port}' if p.port else ''}\r\n"
             "User-Agent: inference-top\r\nAccept: text/event-stream\r\n")
    auth = b""
    if p.username is not None:
        cred = f"{unquote(p.username)}:{unquote(p.password or '')}".encode()
        auth = b"Authorization: Basic " + base64.b64encode(cred) + b"\r\n"
    return host, p.port or 80, lines.encode("latin-1"), auth


def request_bytes(url: str, data: bytes, headers: dict[str, str]) -> bytes:
    """The whole request: its lines, the caller's headers (an Authorization header over the URL's credentials),
    Content-Type (JSON unless given), Content-Length, the body."""
    _, _, first, auth = _target(url)
    out = [first]
    given = set()
    for k, v in headers.items():
        if any(c in k or c in v for c in "\r\n"):
            raise ValueError(f"header {k!r} holds a line break: it cannot be sent")
        given.add(k.lower())
        out.append(f"{k}: {v}\r\n".encode("latin-1"))
    if auth and "authorization" not in given:
        out.append(auth)
    if "content-type" not in given:
        out.append(b"Content-Type: application/json\r\n")
    out += [b"Content-Length: %d\r\n\r\n" % len(data), data]
    return b"".join(out)


class _Conn(asyncio.Protocol):
    """One connection's bytes as its socket reads handed them over, each with its time: kept for piece(), or, while
    a `sink` is set, given to it at once, inside data_received (_Body.hand_over)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.pieces: deque[tuple[bytes, int]] = deque()
        self.sink: Callable[[bytes, int], None] | None = None
        self.closed = False
        self.lost: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.stall_s = 0.0
        self.since_ns = 0  # the stall counts from here: the wait's start or the last read, the later

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.since_ns = t = time.perf_counter_ns()
        if self.sink is not None:
            self.sink(data, t)
            return
        self.pieces.append((data, t))
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed, self.lost = True, exc
        self._wake()

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def piece(self, stall_s: float | None) -> tuple[bytes, int] | None:
        """The next read's bytes and time; None when the server closed the connection; asyncio.TimeoutError
        after stall_s seconds without one."""
        while not self.pieces:
            if self.closed:
                return None
            await self.wait(stall_s)
        return self.pieces.popleft()

    async def wait(self, stall_s: float | None) -> None:
        """Until the next wake (a read kept, the sink's end, the connection's end); asyncio.TimeoutError after
        stall_s seconds without a read.

        The stall is watched by one timer per connection that re-arms itself for what is left of the wait, not by
        a timer per wait: a timer made and cancelled for every token was ≈ 8 % of the client's CPU at 64 streams."""
        loop = asyncio.get_running_loop()
        self.waiter = fut = loop.create_future()
        if stall_s:
            self.stall_s, self.since_ns = stall_s, time.perf_counter_ns()
            if self.timer is None:
                self.timer = loop.call_later(stall_s, self._stalled)
        try:
            await fut
        finally:
            self.waiter = None

    def _stalled(self) -> None:
        self.timer = None
        w = self.waiter
        if w is None or w.done():
            return  # not waiting now: the next wait arms it again
        left = self.stall_s - (time.perf_counter_ns() - self.since_ns) / 1e9
        if left > 0:
            self.timer = w.get_loop().call_later(left, self._stalled)
        else:
            w.set_exception(asyncio.TimeoutError())

    def close(self) -> None:
        self.closed = True
        self.sink = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.transport is not None:
            self.transport.close()


class _Body:
    """A response's body as aiohttp's StreamReader gives it to http_openai (readany, read, is_eof), decoded from
    the connection's reads (chunked, sized or to the connection's end), or handed over as it comes (hand_over)."""

    def __init__(self, conn: _Conn, framing: str, length: int, rest: bytes, t: int, stall_s: float | None):
        self.conn, self.framing, self.left, self.stall_s = conn, framing, length, stall_s
        self.raw = bytearray()
        self.eof = framing == "sized" and length == 0
        self.ready: deque[tuple[bytes, int]] = deque()  # decoded pieces not read yet, each with its read's time
        self.take: Callable[[bytes, int], bool] | None = None  # hand_over's reader, while it wants more
        self.failed: BaseException | None = None  # what stopped a hand-over inside data_received
        self.in_chunk = 0  # bytes of the current chunk still to come
        self.chunk_crlf = self.trailers = False
        if rest:
            self._feed(rest, t)

    # ---- aiohttp's StreamReader, the part http_openai uses
    async def readany(self) -> bytes:
        while not self.ready and not self.eof:
            got = await self.conn.piece(self.stall_s)
            if got is None:
                self._closed()
                break
            self._feed(*got)
        return self.ready.popleft()[0] if self.ready else b""

    async def read(self, n: int = -1) -> bytes:
        out = bytearray()
        while (n < 0 or len(out) < n) and (data := await self.readany()):
            if n >= 0 and len(out) + len(data) > n:
                self.ready.appendleft((data[n - len(out):], 0))
                data = data[:n - len(out)]
            out += data
        return bytes(out)

    def is_eof(self) -> bool:
        return self.eof and not self.ready

    def _closed(self) -> None:
        """The connection closed before the body's end: its end (read to the close), or a payload error."""
        if self.framing == "to-close":
            self.eof = True
            return
        raise aiohttp.ClientPayloadError(
            f"the connection closed {'inside a chunk' if self.framing == 'chunked' else f'{self.left} bytes short'}")

    # ---- handed over as it comes
    async def hand_over(self, take: Callable[[bytes, int], bool]) -> bool:
        """Each decoded piece of the body given to take(data, t) (t: when its socket read was handed over) as it
        comes, inside the protocol's data_received: this task waits once, not once per read. Until take returns
        True (True; what came after that piece stays to be read) or the body ends (False). An exception raised
        by take or by the body's framing is raised here; the stall (stall_s without a read) as
        asyncio.TimeoutError.

        A wait per read was a future, a wake and a step of this task per token: the client's CPU per token at 64
        streams fell from 56–62 to 40–46 µs without it (docs/design/client-processes.md)."""
        conn = self.conn
        while True:  # what came with the head, then the reads kept before the hand-over, one at a time
            while self.ready:
                data, t = self.ready.popleft()
                if take(data, t):
                    return True
            if not conn.pieces:
                break
            self._feed(*conn.pieces.popleft())
        if self.eof:
            return False
        self.take, self.failed = take, None
        conn.sink = self._received
        try:
            while conn.sink is not None and not conn.closed:
                await conn.wait(self.stall_s)
            if self.failed is not None:
                raise self.failed
            if self.take is None:  # it took what it wanted
                return True
            if not self.eof:  # the connection closed first
                self._closed()
            return False
        finally:
            conn.sink = self.take = None
            self.failed = None

    def _received(self, data: bytes, t: int) -> None:
        """(The connection's sink during a hand-over: called in data_received.)"""
        try:
            self._feed(data, t)
        except BaseException as exc:  # raised in hand_over's task, not into the event loop's transport
            self.failed = exc
            self._stop()
            return
        if self.eof:
            self._stop()

    def _stop(self) -> None:
        self.conn.sink = None
        self.conn._wake()

    # ---- decoding
    def _out(self, data: bytes, t: int) -> None:
        if not data:
            return
        take = self.take
        if take is None:
            self.ready.append((data, t))
        elif take(data, t):
            self.take = None
            self._stop()

    def _feed(self, data: bytes, t: int) -> None:
        if self.framing == "to-close":
            self._out(data, t)
        elif self.framing == "sized":
            take = data[:self.left]
            self.left -= len(take)
            self.eof = self.left == 0
            self._out(take, t)
        else:
            self.raw += data
            self._chunks(t)

    def _chunks(self, t: int) -> None:
        raw, pos, n = self.raw, 0, len(self.raw)
        while pos < n and not self.eof:
            if self.in_chunk:
                take = min(self.in_chunk, n - pos)
                self._out(bytes(raw[pos:pos + take]), t)
                pos += take
                self.in_chunk -= take
                self.chunk_crlf = self.in_chunk == 0
                continue
            nl = raw.find(b"\r\n", pos)
            if nl < 0:
                if n - pos > MAX_CHUNK_LINE:
                    raise aiohttp.ClientPayloadError("a chunk's size line longer than 4096 bytes")
                break
            line = bytes(raw[pos:nl])
            pos = nl + 2
            if self.chunk_crlf:  # the CRLF after a chunk's data
                if line:
                    raise aiohttp.ClientPayloadError(f"a chunk's data ran past its size: {line[:40]!r}")
                self.chunk_crlf = False
            elif self.trailers:  # after the last chunk: trailer lines, then an empty one
                self.eof = not line
            else:
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise aiohttp.ClientPayloadError(f"not a chunk size: {line[:40]!r}") from None
                self.in_chunk, self.trailers = size, size == 0
        del raw[:pos]


class LeanResponse:
    """The status, the headers (names lower-cased) and the body of one answer."""

    def __init__(self, status: int, headers: dict[str, str], content: _Body, keep: bool):
        self.status, self.headers, self.content, self.keep = status, headers, content, keep


def _parse_head(head: bytes) -> tuple[int, dict[str, str], bool]:
    """(status, headers, whether the connection may be kept) of a response's head."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise LeanAnswerError(f"not an HTTP answer: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        k, sep, v = line.partition(":")
        if sep:
            k = k.strip().lower()
            headers[k] = f"{headers[k]}, {v.strip()}" if k in headers else v.strip()
    conn = headers.get("connection", "").lower()
    keep = "close" not in conn and (parts[0] != "HTTP/1.0" or "keep-alive" in conn)
    return int(parts[1]), headers, keep


class _Post:
    """`async with session.post(...) as r`: the request written at once, the answer's head awaited."""

    def __init__(self, session: LeanSession, url: str, data: bytes, headers: dict[str, str],
                 timeout: aiohttp.ClientTimeout | None):
        self.session, self.url, self.data, self.headers = session, url, data, headers
        self.connect_s = timeout.sock_connect if timeout and timeout.sock_connect else 10.0
        self.stall_s = timeout.sock_read if timeout else None
        self.response: LeanResponse | None = None

    async def __aenter__(self) -> LeanResponse:
        request = request_bytes(self.url, self.data, self.headers)
        conn = await self.session.connection(self.url, self.connect_s)
        assert conn.transport is not None
        try:
            conn.transport.write(request)
        except OSError as exc:
            self.session.drop()
            raise aiohttp.ClientOSError(exc.errno, f"writing the request: {exc}") from exc
        try:
            self.response = await self._answer(conn)
        except BaseException:
            self.session.drop()
            raise
        return self.response

    async def _answer(self, conn: _Conn) -> LeanResponse:
        buf, t = b"", 0
        while (end := buf.find(b"\r\n\r\n")) < 0:
            if len(buf) > MAX_HEAD:
                raise LeanAnswerError("an answer's head longer than 64 KiB")
            got = await conn.piece(self.stall_s)
            if got is None:
                if conn.lost is not None and not isinstance(conn.lost, ConnectionResetError):
                    raise aiohttp.ClientOSError(getattr(conn.lost, "errno", 0), str(conn.lost))
                raise aiohttp.ServerDisconnectedError("the server closed the connection before answering")
            buf += got[0]
            t = got[1]
        status, headers, keep = _parse_head(buf[:end])
        rest = buf[end + 4:]
        if "chunked" in headers.get("transfer-encoding", "").lower():
            framing, length = "chunked", 0
        elif (cl := headers.get("content-length", "")).strip().isdigit():
            framing, length = "sized", int(cl)
        else:
            framing, length, keep = "to-close", 0, False
        return LeanResponse(status, headers, _Body(conn, framing, length, rest, t, self.stall_s), keep)

    async def __aexit__(self, *exc: object) -> None:
        r = self.response
        if r is None or not (r.keep and r.content.is_eof()) or r.content.conn.pieces:
            self.session.drop()  # a body left unread, or the server's last word: not reused


class LeanSession:
    """One stream slot's connection, kept across its requests (a new one where the server closed it)."""

    def __init__(self) -> None:
        self._conn: _Conn | None = None
        self._where: tuple[str, int] | None = None

    def post(self, url: str, *, data: bytes, headers: dict[str, str] | None = None,
             timeout: aiohttp.ClientTimeout | None = None) -> _Post:
        return _Post(self, url, data, headers or {}, timeout)

    async def connection(self, url: str, connect_s: float) -> _Conn:
        host, port, _, _ = _target(url)
        c = self._conn
        if c is not None and not c.closed and not c.pieces and self._where == (host, port):
            return c
        self.drop()
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(loop.create_connection(_Conn, host, port), connect_s)
        except asyncio.TimeoutError:
            raise LeanConnectError(f"no connection to {host}:{port} within {connect_s:g} s") from None
        except OSError as exc:
            raise LeanConnectError(f"{host}:{port}: {exc.strerror or exc}") from exc
        self._conn, self._where = conn, (host, port)
        return conn

    def drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def close(self) -> None:
        self.drop()

    async def __aenter__(self) -> LeanSession:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
