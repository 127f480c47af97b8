"""Watches over the lean HTTP/1.1 path (``Http1Pool.open_stream``, ``Client.watch`` of a
kubeconfig-built client without retries): events as the httpx path gives them, the same
errors (Gone, ApiError with the status), and transport failures, a silent stream and a
cut body as ApiError with status 0; the socket is paused while the reader is behind."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from decice_kube import http1
from decice_kube.client import ApiError, Client, Gone, KubeConfig
from decice_kube.http1 import Http1Stream

pytestmark = pytest.mark.unit

# per connection: the request head, and a writer for the scripted answer
Script = Callable[[bytes, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def event(kind: str, rv: str) -> bytes:
    obj = {"metadata": {"name": "p", "resourceVersion": rv}}
    return json.dumps({"type": kind, "object": obj}).encode()


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


HEAD_200 = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
)


async def with_server(script: Script, body: Callable[[Client, list[bytes]], Awaitable[Any]]) -> Any:
    """Run ``body(client, heads)`` against a server that answers each connection with
    ``script``; ``heads`` collects the request heads."""
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            heads.append(head)
            await script(head, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    config = KubeConfig(f"http://127.0.0.1:{port}", ssl.create_default_context(), token="t0k")
    kube = Client(config, user_agent="unit-test")
    assert kube._fast is not None, "a kubeconfig-built client without retries takes HTTP/1.1"
    try:
        return await body(kube, heads)
    finally:
        await kube.close()
        server.close()
        await server.wait_closed()


def run(script: Script, body: Callable[[Client, list[bytes]], Awaitable[Any]]) -> Any:
    return asyncio.run(with_server(script, body))


async def collect(kube: Client, *args: Any, **kw: Any) -> list[dict[str, Any]]:
    return [e async for e in kube.watch(*args, **kw)]


def test_events_split_across_chunks_and_the_request_sent() -> None:
    a, b, c = event("ADDED", "5"), event("BOOKMARK", "6"), event("DELETED", "7")
    body = a + b"\n" + b + b"\n\n" + c + b"\n"
    pieces = [body[:7], body[7 : len(a) + 3], body[len(a) + 3 : -1], body[-1:]]

    async def script(head: bytes, _r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD_200)
        for piece in pieces:
            writer.write(chunk(piece))
            await writer.drain()
            await asyncio.sleep(0.01)  # separate reads on the client
        writer.write(b"0\r\n\r\n")

    async def body_(kube: Client, heads: list[bytes]) -> Any:
        events = await collect(kube, "/api/v1/pods", "4", {"fieldSelector": "spec.nodeName!="})
        return events, heads

    events, heads = run(script, body_)
    assert [(e["type"], e["object"]["metadata"]["resourceVersion"]) for e in events] == [
        ("ADDED", "5"),
        ("BOOKMARK", "6"),
        ("DELETED", "7"),
    ]
    request = heads[0].decode()
    assert request.startswith(
        "GET /api/v1/pods?fieldSelector=spec.nodeName%21%3D&watch=true&resourceVersion=4"
        "&allowWatchBookmarks=true&timeoutSeconds=300 HTTP/1.1\r\n"
    )
    assert "Authorization: Bearer t0k\r\n" in request
    assert "User-Agent: unit-test\r\n" in request
    assert "Accept: application/json\r\n" in request


def test_several_events_in_one_chunk_and_one_event_over_many() -> None:
    events = [event("MODIFIED", str(i)) for i in range(50)]
    whole = b"".join(e + b"\n" for e in events)

    async def script(head: bytes, _r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD_200 + chunk(whole[:1000]))
        for i in range(1000, len(whole), 3):  # then three bytes per HTTP chunk
            writer.write(chunk(whole[i : i + 3]))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    got = run(script, lambda kube, _: collect(kube, "/api/v1/pods", "1"))
    assert [e["object"]["metadata"]["resourceVersion"] for e in got] == [str(i) for i in range(50)]


@pytest.mark.parametrize(("status", "error"), [(410, Gone), (500, ApiError), (403, ApiError)])
def test_a_status_other_than_200_raises_with_its_text(status: int, error: type) -> None:
    text = b'{"kind":"Status","message":"nope"}'

    async def script(head: bytes, _r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: {len(text)}\r\n\r\n".encode() + text)
        await writer.drain()

    with pytest.raises(error) as err:
        run(script, lambda kube, _: collect(kube, "/api/v1/pods", "1"))
    assert err.value.status == status
    assert "nope" in str(err.value)
    assert isinstance(err.value, Gone) == (status == 410)


def test_error_event_raises_gone_after_the_events_before_it() -> None:
    expired = json.dumps({"type": "ERROR", "object": {"code": 410, "message": "too old"}})

    async def script(head: bytes, _r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD_200 + chunk(event("ADDED", "5") + b"\n"))
        writer.write(chunk(expired.encode() + b"\n") + b"0\r\n\r\n")
        await writer.drain()

    async def body(kube: Client, _: list[bytes]) -> list[str]:
        kinds: list[str] = []
        with pytest.raises(Gone):
            async for e in kube.watch("/api/v1/pods", "1"):
                kinds.append(e["type"])
        return kinds

    assert run(script, body) == ["ADDED"]


def test_a_body_cut_inside_a_chunk_is_a_transport_error() -> None:
    data = event("ADDED", "5") + b"\n"

    async def script(head: bytes, _r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD_200 + chunk(data) + chunk(data)[:-10])
        await writer.drain()  # then the connection closes

    async def body(kube: Client, _: list[bytes]) -> list[str]:
        kinds: list[str] = []
        with pytest.raises(ApiError) as err:
            async for e in kube.watch("/api/v1/pods", "1"):
                kinds.append(e["type"])
        assert err.value.status == 0
        assert "connection lost inside the stream" in str(err.value)
        return kinds

    assert run(script, body) == ["ADDED"]


def test_a_stream_ending_inside_an_event_is_an_error() -> None:
    async def script(head: bytes, _r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD_200 + chunk(event("ADDED", "5")[:-3]) + b"0\r\n\r\n")
        await writer.drain()

    with pytest.raises(ApiError, match="inside an event"):
        run(script, lambda kube, _: collect(kube, "/api/v1/pods", "1"))


def test_a_silent_stream_ends_after_the_read_timeout() -> None:
    async def script(head: bytes, _r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD_200 + chunk(event("ADDED", "5") + b"\n"))
        await writer.drain()
        await asyncio.sleep(5)  # silent

    async def body(kube: Client, _: list[bytes]) -> tuple[list[str], float]:
        kinds: list[str] = []
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(ApiError) as err:
            async for e in kube.watch("/api/v1/pods", "1", read_timeout=0.3):
                kinds.append(e["type"])
        assert err.value.status == 0
        assert "no data within 0.3 s" in str(err.value)
        return kinds, loop.time() - started

    kinds, took = run(script, body)
    assert kinds == ["ADDED"]
    assert 0.25 < took < 3.0


def test_a_refused_connection_is_a_transport_error() -> None:
    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        config = KubeConfig(f"http://127.0.0.1:{port}", ssl.create_default_context())
        async with Client(config) as kube:
            with pytest.raises(ApiError) as err:
                await collect(kube, "/api/v1/pods", "1")
            assert err.value.status == 0

    asyncio.run(main())


def test_leaving_the_watch_early_closes_its_connection() -> None:
    async def main() -> None:
        ended = asyncio.Event()

        async def script(
            head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            writer.write(HEAD_200 + chunk(event("ADDED", "5") + b"\n"))
            await writer.drain()
            assert await reader.read() == b""  # the client closed its end
            ended.set()

        async def body(kube: Client, _: list[bytes]) -> None:
            async for _e in kube.watch("/api/v1/pods", "1"):
                break
            await asyncio.wait_for(ended.wait(), 5)

        await with_server(script, body)

    asyncio.run(main())


class _Transport:
    """Enough of an asyncio.Transport for the protocol's pause/resume."""

    def __init__(self) -> None:
        self.paused = False
        self.pauses = 0
        self.closed = False

    def pause_reading(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        self.paused = False

    def close(self) -> None:
        self.closed = True


def test_reading_pauses_while_the_reader_is_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http1, "_STREAM_HIGH", 100)

    async def main() -> None:
        stream = Http1Stream(read_timeout=1.0)
        transport = _Transport()
        stream.transport = transport  # type: ignore[assignment]
        stream.data_received(HEAD_200)
        await stream.wait_head(1.0)
        assert stream.status == 200
        stream.data_received(chunk(b"x" * 60))
        assert not transport.paused
        stream.data_received(chunk(b"y" * 60))
        assert transport.paused, "120 bytes queued > 100: the socket is paused"
        assert await stream.read() == b"x" * 60 + b"y" * 60
        assert not transport.paused, "the reader took it: reading again"
        stream.data_received(b"0\r\n\r\n")
        assert await stream.read() == b""
        assert transport.pauses == 1

    asyncio.run(main())


def test_a_bad_status_line_or_chunk_size_fails_the_stream() -> None:
    async def main() -> None:
        bad = Http1Stream(read_timeout=1.0)
        bad.transport = _Transport()  # type: ignore[assignment]
        bad.data_received(b"SPDY/3 200 OK\r\n\r\n")
        with pytest.raises(ValueError, match="bad status line"):
            await bad.wait_head(1.0)
        size = Http1Stream(read_timeout=1.0)
        size.transport = _Transport()  # type: ignore[assignment]
        size.data_received(HEAD_200 + b"zz\r\nabc\r\n")
        with pytest.raises(ValueError):
            await size.read()

    asyncio.run(main())
