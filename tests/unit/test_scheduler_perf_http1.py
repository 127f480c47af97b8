"""The lean HTTP/1.1 pool used for bindings answers like the httpx client did:
status and decoded JSON, keep-alive reuse, chunked replies (a large one arriving in many
pieces, each parsed once), requests without a body, closed idle connections retried
once, failures raised (the binder maps them to "transport")."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from decice_kube.http1 import Http1Pool, _Conn

pytestmark = pytest.mark.unit

Reply = Callable[[bytes, int], bytes | None]


async def serve(reply: Reply) -> tuple[asyncio.AbstractServer, int, list[int]]:
    """A tiny HTTP/1.1 server; ``reply(request_bytes, n)`` gives the raw answer or None
    (close the connection without answering). Returns the server, port and the number
    of requests per connection."""
    per_conn: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        per_conn.append(0)
        me = len(per_conn) - 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length)
                per_conn[me] += 1
                answer = reply(head + body, sum(per_conn))
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                if b"Connection: close" in answer:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, port, per_conn


def ok(body: object, extra: str = "") -> bytes:
    data = json.dumps(body).encode()
    return (
        f"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n{extra}"
        f"Content-Length: {len(data)}\r\n\r\n"
    ).encode() + data


async def counting(seen: list[bytes]) -> tuple[asyncio.AbstractServer, Http1Pool, list[int]]:
    """A server answering a connection's nth request ``{"n": n}`` (each request kept in
    ``seen``), a pool to it, and its requests per connection."""

    def reply(request: bytes, n: int) -> bytes:
        seen.append(request)
        return ok({"n": n})

    server, port, per_conn = await serve(reply)
    pool = Http1Pool(f"http://127.0.0.1:{port}", None, {"Accept": "application/json"})
    return server, pool, per_conn


def test_status_body_and_keep_alive() -> None:
    async def main() -> None:
        seen: list[bytes] = []
        server, pool, per_conn = await counting(seen)
        for i in range(3):
            status, body = await pool.request_json("POST", "/x/binding", {"i": i})
            assert (status, body) == (201, {"n": i + 1})
        assert per_conn == [3]  # one connection, reused
        head, _, payload = seen[0].partition(b"\r\n\r\n")
        assert head.startswith(b"POST /x/binding HTTP/1.1\r\n")
        assert b"Accept: application/json" in head and json.loads(payload) == {"i": 0}
        await pool.close()
        server.close()

    asyncio.run(main())


def test_chunked_reply_and_connection_close() -> None:
    async def main() -> None:
        def reply(request: bytes, n: int) -> bytes:
            if n == 1:
                return (
                    b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b'5\r\n{"a":\r\n3\r\n 1}\r\n0\r\n\r\n'
                )
            return ok({"second": True}, "Connection: close\r\n")

        server, port, per_conn = await serve(reply)
        pool = Http1Pool(f"http://127.0.0.1:{port}", None, {})
        assert await pool.request_json("POST", "/a", {}) == (409, {"a": 1})
        assert await pool.request_json("POST", "/a", {}) == (201, {"second": True})
        assert await pool.request_json("POST", "/a", {}) == (201, {"second": True})
        assert per_conn == [2, 1]  # the server said close: a new connection
        await pool.close()
        server.close()

    asyncio.run(main())


class _Sink(asyncio.Transport):
    def write(self, data: bytes | bytearray | memoryview) -> None:
        del data


@pytest.mark.parametrize("piece", [1, 7, 4096, 1 << 20])
def test_a_large_chunked_reply_in_pieces(piece: int) -> None:
    """A LIST-sized chunked reply split anywhere (inside size lines, inside the final
    CRLFs) gives the same body, whatever the size of the pieces it arrives in."""
    body = json.dumps({"items": [{"n": i, "pad": "x" * (i % 50)} for i in range(3000)]})
    data = body.encode()
    sizes = [1, 10, 4096, 100_000]
    out = bytearray(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    pos = 0
    for k in range(len(data)):
        if pos >= len(data):
            break
        size = min(sizes[k % len(sizes)], len(data) - pos)
        out += f"{size:x};ext=1\r\n".encode() if k % 3 else f"{size:x}\r\n".encode()
        out += data[pos : pos + size] + b"\r\n"
        pos += size
    wire = bytes(out) + b"0\r\n\r\n"

    async def main() -> tuple[int, bytes]:
        conn = _Conn()
        conn.connection_made(_Sink())
        waiter: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        conn.send(b"GET / HTTP/1.1\r\n\r\n", waiter)
        for i in range(0, len(wire), piece):
            assert not waiter.done()
            conn.data_received(wire[i : i + piece])
        return await waiter

    assert asyncio.run(main()) == (200, data)


def test_a_request_without_a_body_and_a_raw_reply() -> None:
    async def main() -> None:
        seen: list[bytes] = []
        server, pool, _ = await counting(seen)
        assert await pool.request("GET", "/api/v1/nodes?limit=5") == (201, b'{"n": 1}')
        patch = await pool.request("PATCH", "/e", b'{"c":2}', "application/merge-patch+json")
        assert patch == (201, b'{"n": 2}')
        assert seen[0].startswith(b"GET /api/v1/nodes?limit=5 HTTP/1.1\r\n")
        assert b"Content-Length" not in seen[0] and b"Content-Type" not in seen[0]
        assert b"Content-Type: application/merge-patch+json\r\n" in seen[1]
        assert seen[1].endswith(b'Content-Length: 7\r\n\r\n{"c":2}')
        await pool.close()
        server.close()

    asyncio.run(main())


def test_idle_connection_closed_by_server_is_retried_once() -> None:
    async def main() -> None:
        def reply(request: bytes, n: int) -> bytes | None:
            return None if n == 2 else ok({"n": n})  # the 2nd request finds it closed

        server, port, per_conn = await serve(reply)
        pool = Http1Pool(f"http://127.0.0.1:{port}", None, {})
        assert await pool.request_json("POST", "/a", {}) == (201, {"n": 1})
        assert await pool.request_json("POST", "/a", {}) == (201, {"n": 3})
        assert per_conn == [2, 1]
        await pool.close()
        server.close()

    asyncio.run(main())


def test_failures_raise() -> None:
    async def main() -> None:
        server, port, _ = await serve(lambda request, n: None)  # never answers
        pool = Http1Pool(f"http://127.0.0.1:{port}", None, {}, timeout=2.0)
        with pytest.raises(ConnectionError):
            await pool.request_json("POST", "/a", {})  # fresh connection: no retry
        await pool.close()
        server.close()

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await asyncio.sleep(5)
            writer.close()

        quiet = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = quiet.sockets[0].getsockname()[1]
        pool = Http1Pool(f"http://127.0.0.1:{port}", None, {}, timeout=0.3)
        with pytest.raises(TimeoutError):
            await pool.request_json("POST", "/a", {})
        await pool.close()
        quiet.close()

    asyncio.run(main())
