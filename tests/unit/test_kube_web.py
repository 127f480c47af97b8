"""decice_kube.web, the plain-HTTP side of the one HTTP stack: probes never take a proxy,
HEAD and streamed GETs follow redirects and hand over the bytes as served, errors are
WebError with the status; the JSON service client speaks over a unix socket."""

from __future__ import annotations

import asyncio
import datetime as dt
import gzip
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from decice.sim.controlplane.pki import self_signed
from decice_kube import web
from tests.support import served

pytestmark = pytest.mark.unit

PAYLOAD = b"release bytes " * 100


class _Site(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, body: bool) -> None:
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/file")
            self.end_headers()
            return
        if self.path == "/gzipped":  # a server that compresses what it sends
            data = gzip.compress(PAYLOAD)
            self.send_response(200)
            self.send_header("Content-Encoding", "gzip")
        elif self.path == "/file":
            data = PAYLOAD
            self.send_response(200)
        elif self.path == "/broken":
            data = b"down"
            self.send_response(503)
        else:
            data = b"no"
            self.send_response(404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer(True)

    def do_HEAD(self) -> None:
        self._answer(False)


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with served(_Site) as url:
        yield url


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _read(url: str) -> bytes:
    with web.stream(url, timeout=5) as pieces:
        return b"".join(pieces)


def test_probe_answers_status_and_body_and_zero_when_nothing_answers(site: str) -> None:
    assert web.probe(f"{site}/file") == (200, PAYLOAD)
    assert web.probe(f"{site}/broken") == (503, b"down")
    assert web.probe(f"http://127.0.0.1:{_closed_port()}/healthz") == (0, b"")
    assert web.probe("not a url") == (0, b"")


def test_probe_never_goes_through_a_proxy(site: str, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}"
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, dead)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert web.probe(f"{site}/file")[0] == 200


def test_stream_follows_redirects_and_keeps_the_bytes_as_served(site: str) -> None:
    assert _read(f"{site}/moved") == PAYLOAD
    # not decoded: a checksum is of the file the server holds, as urllib gave it
    assert _read(f"{site}/gzipped") == gzip.compress(PAYLOAD)


def test_stream_errors_carry_the_status_or_none(site: str) -> None:
    with pytest.raises(web.WebError, match=r"/missing: HTTP 404") as missing:
        _read(f"{site}/missing")
    assert missing.value.status == 404
    with pytest.raises(web.WebError, match="cannot download") as refused:
        _read(f"http://127.0.0.1:{_closed_port()}/file")
    assert refused.value.status is None
    with pytest.raises(web.WebError):
        _read("ftp://127.0.0.1/file")


def test_status_of_a_head(site: str) -> None:
    assert web.status_of(f"{site}/moved", timeout=5) == 200
    assert web.status_of(f"{site}/missing", timeout=5) == 404
    with pytest.raises(web.WebError):
        web.status_of(f"http://127.0.0.1:{_closed_port()}/file", timeout=5)


def test_https_is_checked_against_the_machines_ca_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The context urllib used (ssl.create_default_context: SSL_CERT_FILE and the system
    store), made once: a server signed by a CA named there is trusted, one that is not is
    refused."""
    key, cert = self_signed("web-test", dt.timedelta(days=1), ips=("127.0.0.1",))
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{server.server_address[1]}/file"
    try:
        web._system_tls.cache_clear()
        with pytest.raises(web.WebError, match="cannot download"):
            _read(url)  # not in the store
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "cert.pem"))
        web._system_tls.cache_clear()
        assert _read(url) == PAYLOAD
        assert web.status_of(url, timeout=5) == 200
        assert web._system_tls() is web._system_tls()  # made once
    finally:
        web._system_tls.cache_clear()
        server.shutdown()
        server.server_close()


class _Plugin(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # interLink's plugin API sends a body with GET
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        status = 200 if self.headers.get("Authorization") == "Bearer t" else 401
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _UnixServer(ThreadingHTTPServer):
    address_family = socket.AF_UNIX

    def server_bind(self) -> None:
        self.socket.bind(self.server_address)

    def get_request(self) -> tuple[socket.socket, tuple[str, int]]:
        conn, _ = self.socket.accept()
        return conn, ("local", 0)


def test_service_over_a_unix_socket(tmp_path: Path) -> None:
    path = tmp_path / "plugin.sock"
    server = _UnixServer(str(path), _Plugin)  # type: ignore[arg-type]
    threading.Thread(target=server.serve_forever, daemon=True).start()

    async def talk() -> tuple[web.Reply, web.Reply]:
        service = web.Service(f"unix:{path}")
        try:
            ok = await service.request("GET", "/status", b"[1]", {"Authorization": "Bearer t"}, 5)
            refused = await service.request("GET", "/status", b"[]", {}, 5)
        finally:
            await service.aclose()
        return ok, refused

    try:
        ok, refused = asyncio.run(talk())
    finally:
        server.shutdown()
        server.server_close()
    assert (ok.status, ok.content, ok.text) == (200, b"[1]", "[1]")
    assert refused.status == 401

    async def nobody() -> None:
        service = web.Service(f"unix:{tmp_path / 'gone.sock'}")
        try:
            await service.request("POST", "/create", b"{}", {}, 5)
        finally:
            await service.aclose()

    with pytest.raises(web.WebError, match=r"^POST unix:.*gone\.sock/create: "):
        asyncio.run(nobody())
