"""A lean HTTP/1.1 keep-alive pool for the hot path: small JSON POSTs (pod bindings).

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
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections import deque
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Http1Pool"]

_CRLF2 = b"\r\n\r\n"


class _Conn(asyncio.Protocol):
    __slots__ = (
        "_buf",
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
            lines = bytes(buf[:end]).split(b"\r\n")
            status_line = lines[0].split(b" ", 2)
            if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1."):
                raise ValueError(f"bad status line {lines[0][:80]!r}")
            self._status = int(status_line[1])
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                key = name.strip().lower()
                if key == b"content-length":
                    self._length = int(value.strip())
                elif key == b"transfer-encoding" and b"chunked" in value.lower():
                    self._chunked = True
                elif key == b"connection" and b"close" in value.lower():
                    self._close_after = True
            if self._status in (204, 304) or 100 <= self._status < 200:
                self._length = 0
            if self._length < 0 and not self._chunked:
                raise ValueError("reply without Content-Length or chunked encoding")
        start = self._head_end
        if self._chunked:
            return self._parse_chunked(start)
        if len(buf) - start < self._length:
            return None
        return self._status, bytes(buf[start : start + self._length])

    def _parse_chunked(self, pos: int) -> tuple[int, bytes] | None:
        buf = self._buf
        body = bytearray()
        while True:
            line_end = buf.find(b"\r\n", pos)
            if line_end < 0:
                return None
            size = int(bytes(buf[pos:line_end]).split(b";", 1)[0].strip(), 16)
            pos = line_end + 2
            if size == 0:
                # trailers end with an empty line
                if buf.find(_CRLF2, line_end) < 0 and buf[pos : pos + 2] != b"\r\n":
                    return None
                return self._status, bytes(body)
            if len(buf) < pos + size + 2:
                return None
            body += buf[pos : pos + size]
            pos += size + 2


class Http1Pool:
    """Keep-alive HTTP/1.1 connections to one API server for small JSON requests."""

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
        host_header = url.netloc
        fixed = {"Host": host_header, **headers}
        self._fixed_headers = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self._max = max(1, max_connections)
        self._timeout = timeout
        self._idle: deque[_Conn] = deque()
        self._open = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closing = False

    async def request_json(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        """(status, decoded JSON body or None). Raises OSError/TimeoutError/ValueError."""
        payload = json.dumps(body, separators=(",", ":")).encode()
        head = (
            f"{method} {self._prefix}{path} HTTP/1.1\r\n{self._fixed_headers}"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
        ).encode()
        data = head + payload
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
            try:
                decoded = json.loads(raw) if raw else None
            except ValueError:
                decoded = None
            return status, decoded
        raise AssertionError("unreachable")  # pragma: no cover

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
