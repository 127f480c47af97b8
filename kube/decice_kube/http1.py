"""A lean HTTP/1.1 keep-alive pool for the hot path: small JSON POSTs (pod bindings),
and every request of a client made ``http1_only`` (a LIST's large chunked reply is
parsed piece by piece as it arrives, each piece once).

httpx over HTTP/2 costs about a millisecond of CPU per request in this process (h2
framing, hpack, anyio cancel scopes, the connection pool's locks); a binding is a
~300-byte POST answered by a ~300-byte Status, so that overhead is most of what a
bind costs. This pool writes the request bytes itself and parses the reply on an
``asyncio.Protocol``: one request at a time per connection, up to ``max_connections``
connections, idle ones reused.

A request that fails on a reused connection before any reply byte arrived is retried
once on a fresh connection (the server may have closed the idle connection). That is
what HTTP clients do for idempotent requests; a binding repeated after all gives 409,
which the binder already treats as "forget and re-check". Every other failure raises
``OSError``/``TimeoutError``/``ValueError`` for the caller to map.

:meth:`Http1Pool.open_stream` is the same idea for watches: a GET on a connection of its
own whose body (chunked, as the API server sends a watch) is handed over piece by piece
as it arrives, with a read timeout that ends a silent stream. A watch event costs a
fraction of what httpx's HTTP/2 stream costs per event (h2 framing and flow control,
httpcore and anyio layers), and the scheduler reads one event per pod it binds.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections import deque
from typing import Any
from urllib.parse import urlsplit

from decice_kube.jsonload import loads

__all__ = ["Http1Pool", "Http1Stream"]

_CRLF2 = b"\r\n\r\n"
# a streamed body buffered beyond this (the reader is behind) pauses reading the socket
# until the reader has taken it below _STREAM_LOW
_STREAM_HIGH = 8 * 1024 * 1024
_STREAM_LOW = 1024 * 1024


def _head(buf: bytearray, end: int) -> tuple[int, int, bool, bool]:
    """A reply head (``buf[:end]``): status, Content-Length (-1 if none), chunked, and
    whether the server closes the connection after it. ValueError on a bad status line."""
    lines = bytes(buf[:end]).split(b"\r\n")
    status_line = lines[0].split(b" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1."):
        raise ValueError(f"bad status line {lines[0][:80]!r}")
    length, chunked, close = -1, False, False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        key = name.strip().lower()
        if key == b"content-length":
            length = int(value.strip())
        elif key == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
        elif key == b"connection" and b"close" in value.lower():
            close = True
    return int(status_line[1]), length, chunked, close


class _Conn(asyncio.Protocol):
    __slots__ = (
        "_body",
        "_buf",
        "_chunk_pos",
        "_chunked",
        "_close_after",
        "_head_end",
        "_length",
        "_status",
        "_waiter",
        "closed",
        "transport",
        "used",
    )

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._body = bytearray()  # chunked: the chunks parsed so far
        self._chunk_pos = 0  # chunked: where in _buf the next chunk's size line starts
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self._head_end = -1
        self._length = -1
        self._chunked = False
        self._status = 0
        self._close_after = False
        self.closed = False
        self.used = False

    # ---------------------------------------------------------------- protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionError(f"connection lost: {exc!r}"))

    def eof_received(self) -> bool | None:
        self.closed = True
        return None  # close the transport

    def data_received(self, data: bytes) -> None:
        self._buf += data
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        try:
            result = self._parse()
        except ValueError as exc:
            waiter.set_exception(exc)
            return
        if result is not None:
            waiter.set_result(result)

    # ---------------------------------------------------------------- requests

    def send(self, data: bytes, waiter: asyncio.Future[tuple[int, bytes]]) -> None:
        assert self.transport is not None
        self._buf.clear()
        self._body = bytearray()
        self._chunk_pos = 0
        self._head_end = -1
        self._length = -1
        self._chunked = False
        self._close_after = False
        self._waiter = waiter
        self.used = True
        self.transport.write(data)

    @property
    def got_bytes(self) -> bool:
        return bool(self._buf)

    @property
    def reusable(self) -> bool:
        return not self.closed and not self._close_after

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _parse(self) -> tuple[int, bytes] | None:
        buf = self._buf
        if self._head_end < 0:
            end = buf.find(_CRLF2)
            if end < 0:
                return None
            self._head_end = end + 4
            self._status, self._length, self._chunked, self._close_after = _head(buf, end)
            if self._status in (204, 304) or 100 <= self._status < 200:
                self._length = 0
            if self._length < 0 and not self._chunked:
                raise ValueError("reply without Content-Length or chunked encoding")
        start = self._head_end
        if self._chunked:
            return self._parse_chunked(max(start, self._chunk_pos))
        if len(buf) - start < self._length:
            return None
        return self._status, bytes(buf[start : start + self._length])

    def _parse_chunked(self, pos: int) -> tuple[int, bytes] | None:
        """Parse on from ``pos`` (the chunks before it are in ``_body`` already: a large
        reply arrives in many pieces, and each is parsed once)."""
        buf = self._buf
        body = self._body
        while True:
            self._chunk_pos = pos
            line_end = buf.find(b"\r\n", pos)
            if line_end < 0:
                return None
            size = int(bytes(buf[pos:line_end]).split(b";", 1)[0].strip(), 16)
            if size == 0:
                # trailers end with an empty line
                after = line_end + 2
                if buf.find(_CRLF2, line_end) < 0 and buf[after : after + 2] != b"\r\n":
                    return None
                return self._status, bytes(body)
            start = line_end + 2
            if len(buf) < start + size + 2:
                return None
            body += buf[start : start + size]
            pos = start + size + 2


class Http1Stream(asyncio.Protocol):
    """One streamed GET on a connection of its own (:meth:`Http1Pool.open_stream`).

    After ``open_stream`` returns, ``status`` holds the reply's status; :meth:`read`
    gives the body as it arrives (b"" at its end), :meth:`close` ends the connection.
    Failures raise ``OSError``/``TimeoutError``/``ValueError`` like the pool's requests.
    """

    def __init__(self, read_timeout: float) -> None:
        self.transport: asyncio.Transport | None = None
        self.status = 0
        self.read_timeout = read_timeout
        self._buf = bytearray()
        self._head = False
        self._chunked = False
        self._left = -1  # body bytes still to come (Content-Length), -1: until the end
        self._size = -1  # chunked: bytes of the current chunk still to come, -1: a size line
        self._pieces: deque[bytes] = deque()
        self._queued = 0
        self._paused = False
        self._done = False
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None

    # ---------------------------------------------------------------- protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done and self._error is None:
            self._error = ConnectionError(f"connection lost inside the stream: {exc!r}")
        self._wake()

    def eof_received(self) -> bool | None:
        if self._head and not self._chunked and self._left < 0:
            self._done = True  # a body that runs until the connection ends
        self._wake()
        return None

    def data_received(self, data: bytes) -> None:
        self._buf += data
        try:
            self._parse()
        except ValueError as exc:
            self._error = exc
            self.close()
        if self._queued > _STREAM_HIGH and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    # ---------------------------------------------------------------- reading

    async def wait_head(self, timeout: float) -> None:
        """Wait until the reply's head is in (``status`` set)."""
        await self._wait(lambda: self._head, timeout, "no reply head")

    async def read(self) -> bytes:
        """The body bytes that arrived since the last call; b"" once the body ended.
        Waits at most ``read_timeout`` for data (TimeoutError after that)."""
        await self._wait(lambda: bool(self._pieces), self.read_timeout, "no data")
        if not self._pieces:
            return b""
        data = self._pieces[0] if len(self._pieces) == 1 else b"".join(self._pieces)
        self._pieces.clear()
        self._queued = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def read_all(self, limit: int = 1024 * 1024) -> bytes:
        """The rest of the body (at most ``limit`` bytes are kept): error replies."""
        out = bytearray()
        while data := await self.read():
            out += data[: max(0, limit - len(out))]
        return bytes(out)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    async def _wait(self, ready: Any, timeout: float, what: str) -> None:
        while not ready():
            if self._error is not None:
                raise self._error
            if self._done:
                return
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(timeout, _expire_stream, waiter, what, timeout)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ---------------------------------------------------------------- parsing

    def _put(self, piece: bytes) -> None:
        if piece:
            self._pieces.append(piece)
            self._queued += len(piece)

    def _parse(self) -> None:
        buf = self._buf
        pos = 0
        if not self._head:
            end = buf.find(_CRLF2)
            if end < 0:
                return
            self.status, self._left, self._chunked, _ = _head(buf, end)
            if self._chunked:
                self._left = -1
            self._head = True
            pos = end + 4
            if self._left == 0:
                self._done = True
        if self._done:
            del buf[:]
            return
        if not self._chunked:
            piece = bytes(buf[pos:])
            if self._left >= 0:
                piece = piece[: self._left]
                self._left -= len(piece)
                self._done = self._left == 0
            self._put(piece)
            del buf[:]
            return
        while True:
            if self._size < 0:
                line_end = buf.find(b"\r\n", pos)
                if line_end < 0:
                    break
                self._size = int(bytes(buf[pos:line_end]).split(b";", 1)[0].strip(), 16)
                pos = line_end + 2
                if self._size == 0:
                    self._done = True  # trailers, if any, are not read
                    break
            if len(buf) - pos < self._size + 2:
                break
            self._put(bytes(buf[pos : pos + self._size]))
            pos += self._size + 2
            self._size = -1
        del buf[:pos]


class Http1Pool:
    """Keep-alive HTTP/1.1 connections to one API server: JSON requests, one at a time
    per connection."""

    def __init__(
        self,
        server: str,
        ssl_context: ssl.SSLContext | None,
        headers: dict[str, str],
        *,
        max_connections: int = 16,
        timeout: float = 30.0,
    ) -> None:
        url = urlsplit(server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"unsupported server URL {server!r}")
        self._host = url.hostname
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._ssl = ssl_context if url.scheme == "https" else None
        if self._ssl is not None:
            self._ssl.set_alpn_protocols(["http/1.1"])
        self._prefix = (url.path or "").rstrip("/")
        self._headers: dict[str, str] = {}
        self._fixed_headers = ""
        self._use_headers({"Host": url.netloc, **headers})
        self._max = max(1, max_connections)
        self._timeout = timeout
        self._idle: deque[_Conn] = deque()
        self._open = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closing = False

    def _use_headers(self, headers: dict[str, str]) -> None:
        """Send ``headers`` from now on; ValueError (nothing changed) if one would split
        the request (a line break or NUL: a token file is input)."""
        for name, value in headers.items():
            if any(c in f"{name}{value}" for c in "\r\n\0"):
                raise ValueError(f"header {name!r}: a line break or NUL in its value")
        self._headers = headers
        self._fixed_headers = "".join(f"{k}: {v}\r\n" for k, v in headers.items())

    def set_header(self, name: str, value: str) -> None:
        """Send ``name: value`` with every later request and stream (a rotated token)."""
        self._use_headers({**self._headers, name: value})

    async def request_json(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        """(status, decoded JSON body or None). Raises OSError/TimeoutError/ValueError."""
        payload = json.dumps(body, separators=(",", ":")).encode()
        status, raw = await self.request(method, path, payload)
        try:
            decoded = loads(raw) if raw else None
        except ValueError:
            decoded = None
        return status, decoded

    async def request(
        self,
        method: str,
        path: str,
        payload: bytes | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, bytes]:
        """(status, body bytes) of ``method path`` (with its query) sending ``payload``
        (None: no body). Raises OSError/TimeoutError/ValueError."""
        head = f"{method} {self._prefix}{path} HTTP/1.1\r\n{self._fixed_headers}"
        if payload is None:
            data = f"{head}\r\n".encode()
        else:
            data = (
                f"{head}Content-Type: {content_type}\r\nContent-Length: {len(payload)}\r\n\r\n"
            ).encode() + payload
        for attempt in (0, 1):
            conn = await self._acquire(fresh=attempt > 0)
            reused = conn.used
            try:
                status, raw = await self._exchange(conn, data)
            except (OSError, ValueError, TimeoutError):
                retry = attempt == 0 and reused and not conn.got_bytes
                self._discard(conn)
                if retry:
                    continue
                raise
            except BaseException:
                self._discard(conn)
                raise
            self._release(conn)
            return status, raw
        raise AssertionError("unreachable")  # pragma: no cover

    async def open_stream(self, path: str, read_timeout: float) -> Http1Stream:
        """GET ``path`` (with its query) on a new connection, not one of the pool's: the
        stream is open once the reply's head is in. The caller closes it."""
        loop = asyncio.get_running_loop()
        _, stream = await asyncio.wait_for(
            loop.create_connection(
                lambda: Http1Stream(read_timeout),
                self._host,
                self._port,
                ssl=self._ssl,
                server_hostname=self._host if self._ssl is not None else None,
            ),
            self._timeout,
        )
        try:
            assert stream.transport is not None
            stream.transport.write(
                f"GET {self._prefix}{path} HTTP/1.1\r\n{self._fixed_headers}\r\n".encode()
            )
            await stream.wait_head(self._timeout)
        except BaseException:
            stream.close()
            raise
        return stream

    async def close(self) -> None:
        self._closing = True
        while self._idle:
            self._idle.popleft().close()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(ConnectionError("pool closed"))

    # ---------------------------------------------------------------- internals

    async def _exchange(self, conn: _Conn, data: bytes) -> tuple[int, bytes]:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        timer = loop.call_later(self._timeout, _expire, waiter)
        try:
            conn.send(data, waiter)
            return await waiter
        finally:
            timer.cancel()

    async def _acquire(self, *, fresh: bool = False) -> _Conn:
        while True:
            if self._closing:
                raise ConnectionError("pool closed")
            while self._idle and not fresh:
                conn = self._idle.pop()
                if conn.reusable:
                    return conn
                self._discard(conn)
            if self._open < self._max:
                self._open += 1
                try:
                    loop = asyncio.get_running_loop()
                    _, conn = await asyncio.wait_for(
                        loop.create_connection(
                            _Conn,
                            self._host,
                            self._port,
                            ssl=self._ssl,
                            server_hostname=self._host if self._ssl is not None else None,
                        ),
                        self._timeout,
                    )
                except BaseException:
                    self._open -= 1
                    self._wake()
                    raise
                return conn
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def _release(self, conn: _Conn) -> None:
        conn._waiter = None
        if conn.reusable and not self._closing:
            self._idle.append(conn)
            self._wake()
        else:
            self._discard(conn)

    def _discard(self, conn: _Conn) -> None:
        conn._waiter = None
        conn.close()
        self._open -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


def _expire(waiter: asyncio.Future[tuple[int, bytes]]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError("request timed out"))


def _expire_stream(waiter: asyncio.Future[None], what: str, timeout: float) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError(f"{what} within {timeout:g} s"))
