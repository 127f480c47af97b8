"""decice_kube.client: kubeconfig loading, retries, errors, paging, watches."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from decice.sim.controlplane.pki import self_signed
from decice_kube import client as kclient
from decice_kube.client import (
    MERGE_PATCH,
    ApiError,
    Client,
    Gone,
    KubeConfig,
    Response,
    load_kubeconfig,
)

pytestmark = pytest.mark.unit

SERVER = "https://kube.test:6443"
Handler = Callable[[httpx.Request], httpx.Response | Awaitable[httpx.Response]]


# ------------------------------------------------------------ helpers


def pem_pair(cn: str) -> tuple[bytes, bytes]:
    """A self-signed certificate (also usable as a CA) and its key, PEM."""
    key, cert = self_signed(cn, timedelta(days=1))
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def write_kubeconfig(
    path: Path, cluster: dict[str, Any], user: dict[str, Any], *, extra_context: bool = False
) -> Path:
    contexts = [{"name": "main", "context": {"cluster": "c", "user": "u"}}]
    if extra_context:
        contexts.append({"name": "anon", "context": {"cluster": "c"}})
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "main",
        "clusters": [{"name": "c", "cluster": {"server": SERVER + "/", **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": contexts,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def mock_client(handler: Handler, **options: Any) -> Client:
    config = KubeConfig(SERVER, ssl.create_default_context(), token="t0k")
    return Client(config, transport=httpx.MockTransport(handler), **options)


def run(coro: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await coro

    return asyncio.run(main())


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Backoff sleeps of the client, recorded and not slept."""
    recorded: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(delay: float) -> None:
        recorded.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(kclient.asyncio, "sleep", fake_sleep)
    return recorded


def answers(*replies: httpx.Response | Exception) -> tuple[Handler, list[httpx.Request]]:
    """A handler giving ``replies`` in order (an exception is raised), and its requests."""
    seen: list[httpx.Request] = []
    queue = list(replies)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        reply = queue.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    return handler, seen


# ------------------------------------------------------------ kubeconfig


def test_kubeconfig_embedded_data_and_token(tmp_path: Path) -> None:
    ca, _ = pem_pair("ca")
    cert, key = pem_pair("admin")
    path = write_kubeconfig(
        tmp_path / "kc",
        {"certificate-authority-data": b64(ca)},
        {"client-certificate-data": b64(cert), "client-key-data": b64(key), "token": "abc"},
    )
    config = load_kubeconfig(path)
    assert config.server == SERVER  # trailing slash dropped
    assert config.token == "abc"
    assert config.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert [c["subject"] for c in config.ssl_context.get_ca_certs()] == [((("commonName", "ca"),),)]
    assert config.new_ssl_context is not None
    fresh = config.new_ssl_context()
    assert fresh is not config.ssl_context and len(fresh.get_ca_certs()) == 1


def test_kubeconfig_files_relative_to_it_and_token_file(tmp_path: Path) -> None:
    ca, _ = pem_pair("file-ca")
    cert, key = pem_pair("admin")
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_bytes(ca)
    (tmp_path / "pki" / "admin.crt").write_bytes(cert)
    (tmp_path / "pki" / "admin.key").write_bytes(key)
    (tmp_path / "token").write_text("from-file\n")
    path = write_kubeconfig(
        tmp_path / "kc",
        {"certificate-authority": "pki/ca.crt"},
        {
            "client-certificate": "pki/admin.crt",
            "client-key": "pki/admin.key",
            "tokenFile": "token",
        },
    )
    config = load_kubeconfig(path)
    assert config.token == "from-file"
    assert [c["subject"] for c in config.ssl_context.get_ca_certs()] == [
        ((("commonName", "file-ca"),),)
    ]


def test_kubeconfig_client_key_must_match_certificate(tmp_path: Path) -> None:
    cert, _ = pem_pair("admin")
    _, other_key = pem_pair("other")
    path = write_kubeconfig(
        tmp_path / "kc",
        {"insecure-skip-tls-verify": True},
        {"client-certificate-data": b64(cert), "client-key-data": b64(other_key)},
    )
    with pytest.raises(ssl.SSLError):
        load_kubeconfig(path)


def test_kubeconfig_insecure_named_context_and_errors(tmp_path: Path) -> None:
    path = write_kubeconfig(
        tmp_path / "kc", {"insecure-skip-tls-verify": True}, {"token": "x"}, extra_context=True
    )
    config = load_kubeconfig(path, context="anon")
    assert config.ssl_context.verify_mode == ssl.CERT_NONE
    assert not config.ssl_context.check_hostname
    assert config.token is None  # the anon context has no user
    with pytest.raises(ValueError, match="no context named 'missing'"):
        load_kubeconfig(path, context="missing")


# ------------------------------------------------------------ requests and retries


def test_retries_429_and_503_then_success(waits: list[float]) -> None:
    handler, seen = answers(
        httpx.Response(429, headers={"Retry-After": "2"}, text="slow down"),
        httpx.Response(503, text="unavailable"),
        httpx.Response(201, json={"kind": "Node"}),
    )
    kube = mock_client(handler, max_retries=3)
    resp = run(kube.request("POST", "/api/v1/nodes", body={"a": 1}, ok_status=()))
    assert resp == Response(201, {"kind": "Node"}) and resp.ok
    assert (kube.requests, kube.retries) == (3, 2)
    assert len(waits) == 2 and waits[0] >= 2.0  # Retry-After honoured
    assert all(json.loads(r.content) == {"a": 1} for r in seen)
    assert seen[0].headers["Authorization"] == "Bearer t0k"
    assert seen[0].headers["Content-Type"] == "application/json"


def test_retries_transport_errors_then_gives_up_with_status_zero(waits: list[float]) -> None:
    handler, seen = answers(
        httpx.ConnectError("refused"),
        httpx.Response(200, json={"ok": True}),
        httpx.ConnectError("refused"),
        httpx.ConnectError("refused"),
    )
    kube = mock_client(handler, max_retries=1)
    assert run(kube.get("/api/v1/nodes")) == {"ok": True}
    with pytest.raises(ApiError) as err:
        run(kube.get("/api/v1/nodes"))
    assert err.value.status == 0 and len(seen) == 4 and kube.retries == 2


def test_retries_exhausted_return_or_raise_the_last_status(waits: list[float]) -> None:
    handler, _ = answers(*[httpx.Response(503, text="busy")] * 4)
    kube = mock_client(handler, max_retries=1)
    assert run(kube.request("GET", "/x")).status == 503  # unchecked: the caller decides
    with pytest.raises(ApiError) as err:
        run(kube.request("GET", "/x", ok_status=()))
    assert err.value.status == 503 and err.value.body == "busy"
    assert kube.requests == 4


def test_no_retries_by_default(waits: list[float]) -> None:
    handler, seen = answers(
        httpx.Response(503, text="busy"),
        httpx.Response(429, text="slow"),
        httpx.ConnectError("refused"),
    )
    kube = mock_client(handler)
    status, body = run(kube.request("GET", "/x"))  # unpacks as (status, body)
    assert (status, body) == (503, None)
    with pytest.raises(ApiError) as err:
        run(kube.request("GET", "/x", ok_status=()))
    assert err.value.status == 429
    with pytest.raises(ApiError) as err:
        run(kube.request("GET", "/x"))
    assert err.value.status == 0
    assert len(seen) == 3 and kube.retries == 0 and waits == []


def test_ok_status_returns_listed_statuses_and_raises_others() -> None:
    handler, _ = answers(
        httpx.Response(409, json={"reason": "AlreadyExists"}),
        httpx.Response(404, text="not found"),
        httpx.Response(410, text="too old"),
    )
    kube = mock_client(handler)
    conflict = run(kube.request("POST", "/x", body={}, ok_status=frozenset({409})))
    assert conflict == (409, {"reason": "AlreadyExists"}) and not conflict.ok
    with pytest.raises(ApiError) as err:
        run(kube.request("DELETE", "/x", ok_status=frozenset({409})))
    assert err.value.status == 404 and not isinstance(err.value, Gone)
    with pytest.raises(Gone):
        run(kube.request("GET", "/x", ok_status=()))


def test_max_in_flight_bounds_concurrent_requests() -> None:
    active = 0
    peak = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.01)
        active -= 1
        return httpx.Response(200, json={})

    kube = mock_client(handler, max_in_flight=2)

    async def burst() -> None:
        await asyncio.gather(*(kube.request("GET", f"/x/{i}") for i in range(6)))

    run(burst())
    assert peak == 2 and kube.requests == 6


def test_post_without_fast_pool_is_a_request() -> None:
    handler, seen = answers(httpx.Response(201, json={"kind": "Status"}))
    kube = mock_client(handler)
    assert run(kube.post("/bind", {"b": 1})) == (201, {"kind": "Status"})
    assert seen[0].method == "POST" and json.loads(seen[0].content) == {"b": 1}


# ------------------------------------------------------------ GET, paging, Gone


def test_get_raises_gone_on_410_and_api_error_otherwise() -> None:
    handler, _ = answers(httpx.Response(410, json={"code": 410}), httpx.Response(403, json={}))
    kube = mock_client(handler)
    with pytest.raises(Gone) as gone:
        run(kube.get("/api/v1/pods"))
    assert gone.value.status == 410
    with pytest.raises(ApiError) as err:
        run(kube.get("/api/v1/pods"))
    assert err.value.status == 403


def test_list_follows_continue_tokens() -> None:
    pages = {
        "": ({"continue": "p2", "resourceVersion": "10"}, [{"n": 1}, {"n": 2}]),
        "p2": ({"continue": "p3", "resourceVersion": "10"}, [{"n": 3}]),
        "p3": ({"resourceVersion": "11"}, [{"n": 4}]),
    }
    queries: list[dict[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        query = dict(request.url.params)
        queries.append(query)
        meta, items = pages[query.get("continue", "")]
        return httpx.Response(200, json={"metadata": meta, "items": items})

    kube = mock_client(handler)
    items, rv = run(kube.list_all("/api/v1/pods", {"labelSelector": "a=b"}, page=2))
    assert [i["n"] for i in items] == [1, 2, 3, 4] and rv == "11"
    assert all(q["limit"] == "2" and q["labelSelector"] == "a=b" for q in queries)
    assert [q.get("continue") for q in queries] == [None, "p2", "p3"]

    async def page_sizes() -> list[int]:
        return [len(page) async for page, _ in kube.list_pages("/api/v1/pods", page=2)]

    assert run(page_sizes()) == [2, 1, 1]


# ------------------------------------------------------------ watches


class Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


def event(kind: str, rv: str, **extra: Any) -> bytes:
    obj = {"metadata": {"resourceVersion": rv}, **extra}
    return json.dumps({"type": kind, "object": obj}).encode()


def watch_all(kube: Client, *args: Any, **kw: Any) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [e async for e in kube.watch(*args, **kw)]

    return run(collect())


def test_watch_splits_lines_across_chunks_and_sends_params() -> None:
    a, b, c = event("ADDED", "5"), event("BOOKMARK", "6"), event("DELETED", "7")
    stream = a + b"\n" + b + b"\n\n" + c + b"\n"
    chunks = [stream[:7], stream[7 : len(a) + 3], stream[len(a) + 3 : -1], stream[-1:]]
    handler, seen = answers(httpx.Response(200, stream=Chunks(chunks)))
    kube = mock_client(handler)
    events = watch_all(kube, "/api/v1/pods", "4", {"fieldSelector": "spec.nodeName!="})
    assert [(e["type"], e["object"]["metadata"]["resourceVersion"]) for e in events] == [
        ("ADDED", "5"),
        ("BOOKMARK", "6"),
        ("DELETED", "7"),
    ]
    query = dict(seen[0].url.params)
    assert query == {
        "fieldSelector": "spec.nodeName!=",
        "watch": "true",
        "resourceVersion": "4",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "300",
    }


def test_watch_cut_inside_an_event_is_an_error() -> None:
    handler, _ = answers(httpx.Response(200, stream=Chunks([event("ADDED", "5")[:-3]])))
    with pytest.raises(ApiError, match="inside an event"):
        watch_all(mock_client(handler), "/api/v1/pods", "4")


class _Cut(httpx.AsyncByteStream):
    """A stream whose connection drops after its first event."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield event("ADDED", "5") + b"\n"
        raise httpx.ReadError("connection reset")


def test_a_transport_failure_on_the_watch_is_the_clients_own_error() -> None:
    """#28: callers catch ApiError only; an httpx error never leaks out of a watch."""
    handler, _ = answers(httpx.ConnectError("refused"), httpx.Response(200, stream=_Cut()))
    kube = mock_client(handler)
    with pytest.raises(ApiError) as refused:
        watch_all(kube, "/api/v1/pods", "1")
    assert refused.value.status == 0 and "refused" in str(refused.value)

    async def until_cut() -> list[str]:
        kinds: list[str] = []
        with pytest.raises(ApiError) as cut:
            async for e in kube.watch("/api/v1/pods", "1"):
                kinds.append(e["type"])
        assert cut.value.status == 0 and not isinstance(cut.value.__cause__, ApiError)
        return kinds

    assert run(until_cut()) == ["ADDED"]


def test_watch_410_status_and_error_event_raise_gone() -> None:
    expired = json.dumps({"type": "ERROR", "object": {"code": 410, "message": "too old"}}).encode()
    failed = json.dumps({"type": "ERROR", "object": {"code": 500, "message": "boom"}}).encode()
    handler, _ = answers(
        httpx.Response(410, text="gone"),
        httpx.Response(200, stream=Chunks([event("ADDED", "5") + b"\n" + expired + b"\n"])),
        httpx.Response(200, stream=Chunks([failed + b"\n"])),
    )
    kube = mock_client(handler)
    with pytest.raises(Gone):
        watch_all(kube, "/api/v1/pods", "1")

    async def until_error() -> list[str]:
        kinds: list[str] = []
        with pytest.raises(Gone):
            async for e in kube.watch("/api/v1/pods", "1"):
                kinds.append(e["type"])
        return kinds

    assert run(until_error()) == ["ADDED"]  # events before the ERROR are delivered
    with pytest.raises(ApiError) as err:
        watch_all(kube, "/api/v1/pods", "1")
    assert err.value.status == 500 and not isinstance(err.value, Gone)


# ------------------------------------------------------------ from a kubeconfig, for real


class _Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, str, str]]

    def _reply(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.seen.append(
            (
                self.command,
                self.path,
                self.headers.get("Authorization", ""),
                self.headers.get("User-Agent", ""),
            )
        )
        payload = json.dumps({"path": self.path}).encode()
        self.send_response(201 if self.command == "POST" else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = _reply
    do_POST = _reply

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _served(handler: type[BaseHTTPRequestHandler], tmp_path: Path) -> Iterator[Path]:
    """``handler`` serving on a loopback port while the block runs; a kubeconfig for it
    (token ``s3cret``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        path = write_kubeconfig(tmp_path / "kc", {}, {"token": "s3cret"})
        doc = yaml.safe_load(path.read_text())
        doc["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{server.server_port}"
        path.write_text(yaml.safe_dump(doc))
        yield path
    finally:
        server.shutdown()
        server.server_close()


def test_from_kubeconfig_async_with_against_a_local_server(tmp_path: Path) -> None:
    handler = type("Api", (_Api,), {"seen": []})
    with _served(handler, tmp_path) as path:

        async def session() -> tuple[Any, Response, Client]:
            async with Client.from_kubeconfig(path, user_agent="unit-test") as kube:
                body = await kube.get("/api/v1/nodes", {"limit": 1})
                bound = await kube.post("/api/v1/namespaces/d/pods/p/binding", {"b": 1})
            return body, bound, kube

        body, bound, kube = run(session())
    assert body == {"path": "/api/v1/nodes?limit=1"}
    assert bound == (201, {"path": "/api/v1/namespaces/d/pods/p/binding"})
    assert handler.seen == [
        ("GET", "/api/v1/nodes?limit=1", "Bearer s3cret", "unit-test"),
        ("POST", "/api/v1/namespaces/d/pods/p/binding", "Bearer s3cret", "unit-test"),
    ]
    assert kube.requests == 2
    assert kube._http.is_closed and kube._watch_http.is_closed  # async with closed the pools


class _Searches:
    """A finder first on sys.meta_path that only records the names looked for (a module
    already imported is never looked for; a missing one is looked for at every import)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        self.names.append(name)


def test_a_request_on_the_httpx_path_looks_for_no_module(tmp_path: Path) -> None:
    """httpcore imports ``sniffio`` inside every request; when it is not installed (anyio 4
    no longer brings it) each request searches sys.path for it again, several times. The
    dependency is declared, so after the first request no request looks for a module."""
    handler = type("Api", (_Api,), {"seen": []})
    searches = _Searches()
    with _served(handler, tmp_path) as path:

        async def session() -> None:
            async with Client.from_kubeconfig(path, max_retries=2) as kube:
                await kube.get("/api/v1/nodes")  # first use: imports are allowed here
                sys.meta_path.insert(0, searches)
                try:
                    for _ in range(5):
                        await kube.get("/api/v1/nodes")
                finally:
                    sys.meta_path.remove(searches)

        run(session())
    assert len(handler.seen) == 6
    assert searches.names == []


class _Conflicts(_Api):
    """``_Api``, answering 409 for /conflict; PATCH too."""

    def _reply(self) -> None:
        if self.path != "/conflict":
            super()._reply()
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.seen.append((self.command, self.path, "", ""))
        payload = b'{"reason":"AlreadyExists"}'
        self.send_response(409)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = _reply
    do_POST = _reply
    do_PATCH = _reply


def test_an_http1_only_client_sends_everything_over_http1_without_httpx(
    tmp_path: Path,
) -> None:
    """``http1_only``: GET (with a query), POST and PATCH over the lean pool, statuses
    checked like the httpx path; httpx's clients are never made."""
    handler = type("Api", (_Conflicts,), {"seen": []})
    with _served(handler, tmp_path) as path:

        async def session() -> tuple[list[Any], Client]:
            kube = Client(load_kubeconfig(path), user_agent="unit-test", http1_only=True)
            async with kube:
                got: list[Any] = [
                    await kube.get("/api/v1/nodes", {"labelSelector": "a=b,c!=d"}),
                    await kube.request("POST", "/api/v1/namespaces/d/events", body={"e": 1}),
                    await kube.request(
                        "PATCH", "/api/v1/x", body={"c": 2}, content_type=MERGE_PATCH
                    ),
                    await kube.request("POST", "/conflict", body={}, ok_status=(409,)),
                ]
                with pytest.raises(ApiError) as err:
                    await kube.request("POST", "/conflict", body={}, ok_status=(404,))
                got.append((err.value.status, err.value.body))
            return got, kube

        got, kube = run(session())
    assert got == [
        {"path": "/api/v1/nodes?labelSelector=a%3Db%2Cc%21%3Dd"},
        (201, {"path": "/api/v1/namespaces/d/events"}),
        (200, {"path": "/api/v1/x"}),
        (409, {"reason": "AlreadyExists"}),
        (409, '{"reason":"AlreadyExists"}'),
    ]
    assert [seen[0] for seen in handler.seen] == ["GET", "POST", "PATCH", "POST", "POST"]
    assert all(seen[2:] == ("Bearer s3cret", "unit-test") for seen in handler.seen[:3])
    assert kube._pools is None  # httpx's clients were never made
    assert kube.requests == 5


def test_a_rotated_token_file_is_read_again_on_both_http_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod's projected service-account token (the scheduler's Deployment mode points
    its kubeconfig's tokenFile at it) is rotated in place by the kubelet: the client
    sends the file's new token once the last read is TOKEN_REREAD_S old, on httpx's path
    (GET) and on the lean HTTP/1.1 pool's (POST: bindings)."""
    handler = type("Api", (_Api,), {"seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    token = tmp_path / "token"
    token.write_text("one\n")
    try:
        path = write_kubeconfig(tmp_path / "kc", {}, {"tokenFile": "token"})
        doc = yaml.safe_load(path.read_text())
        doc["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{server.server_port}"
        path.write_text(yaml.safe_dump(doc))

        async def session() -> Client:
            async with Client.from_kubeconfig(path, user_agent="unit-test") as kube:
                assert kube._fast is not None  # the POST takes the HTTP/1.1 pool
                await kube.get("/a")
                await kube.post("/b", {})
                token.write_text("two\n")
                await kube.get("/c")  # not yet TOKEN_REREAD_S old: still "one"
                monkeypatch.setattr(kclient, "TOKEN_REREAD_S", 0.0)
                await kube.get("/d")
                await kube.post("/e", {})
                token.unlink()  # a failed re-read keeps the last token
                await kube.post("/f", {})
            return kube

        run(session())
    finally:
        server.shutdown()
        server.server_close()
    assert [(method, path, auth) for method, path, auth, _ in handler.seen] == [
        ("GET", "/a", "Bearer one"),
        ("POST", "/b", "Bearer one"),
        ("GET", "/c", "Bearer one"),
        ("GET", "/d", "Bearer two"),
        ("POST", "/e", "Bearer two"),
        ("POST", "/f", "Bearer two"),
    ]


def test_bearer_token_rereads_its_file_by_age_and_never_logs_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = [100.0]
    path = tmp_path / "token"
    path.write_text("first")
    token = kclient.BearerToken("first", path, clock=lambda: now[0])
    path.write_text("second")
    now[0] += kclient.TOKEN_REREAD_S - 1
    assert token.get() == "first"
    now[0] += 1
    assert token.get() == "second"
    path.write_text("   \n")
    now[0] += kclient.TOKEN_REREAD_S
    with caplog.at_level("WARNING", logger="decice_kube.client"):
        assert token.get() == "second"
    assert "is empty" in caplog.text and "second" not in caplog.text
    assert kclient.BearerToken("static").get() == "static"  # no file: as given


def test_the_http1_pool_refuses_a_header_that_would_split_the_request() -> None:
    from decice_kube.http1 import Http1Pool

    pool = Http1Pool("http://127.0.0.1:1", None, {"Authorization": "Bearer ok"})
    with pytest.raises(ValueError, match="line break"):
        pool.set_header("Authorization", "Bearer a\r\nX-Evil: 1")
    assert pool._fixed_headers.endswith("Authorization: Bearer ok\r\n")  # unchanged
    with pytest.raises(ValueError, match="line break"):
        Http1Pool("http://127.0.0.1:1", None, {"Authorization": "Bearer a\nb"})


def test_importing_the_client_leaves_httpx_command_line_out() -> None:
    """httpx imports its command-line client (click, rich, pygments: ~0.1 s of CPU) when
    they are installed, as they are in the CLI's venv; decice_kube keeps that off the
    start of every process that imports the client (scheduler, event writer, node
    agent)."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("click") is None:  # pragma: no cover - typer brings it
        pytest.skip("click is not installed: httpx would not import it anyway")
    probe = "import sys, {}; print('click' in sys.modules)"
    seen = {
        module: subprocess.run(
            [sys.executable, "-c", probe.format(module)], capture_output=True, text=True
        ).stdout.strip()
        for module in ("httpx", "decice_kube.client")
    }
    assert seen == {"httpx": "True", "decice_kube.client": "False"}
