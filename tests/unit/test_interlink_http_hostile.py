"""decice-interlink-slurm's HTTP server against a hostile client (finding 10 of the second
security round): bad framing is a 400 and a closed connection, never a 500 or a read past
the cap; an idle connection is closed; connections beyond the bound are closed at once;
a leftover body after a refusal is never read as the next request; a data dir open to
others is made private."""

from __future__ import annotations

import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from decice.interlink import server as plugin_server
from decice.interlink.errors import UsageError
from decice.interlink.jobscript import Defaults, Runtime
from decice.interlink.plugin import Config, Plugin
from decice.interlink.server import Listen, make_server
from tests.support import wait_for

pytestmark = pytest.mark.unit

TOKEN = "t0k3n-for-tests"


@pytest.fixture
def port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setattr(plugin_server.Handler, "timeout", 1.0)
    monkeypatch.setattr(plugin_server, "MAX_CONNECTIONS", 4)
    plugin = Plugin(Config(tmp_path / "data", Runtime("bare"), Defaults()))
    plugin.ensure_dirs()
    server = make_server(plugin, Listen("tcp", "127.0.0.1", 0), TOKEN)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server.server_address[1]  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _exchange(port: int, raw: bytes) -> bytes:
    """Send ``raw``, read until the server closes (it must, after a framing error)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def _post(headers: str, body: bytes = b"") -> bytes:
    return (
        f"POST /create HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n{headers}\r\n"
    ).encode() + body


@pytest.mark.parametrize(
    ("headers", "body", "says"),
    [
        ("Content-Length: -1\r\n", b"{}", b"is not a byte count"),
        ("Content-Length: ten\r\n", b"{}", b"is not a byte count"),
        ("Content-Length: 99999999999999999999\r\n", b"", b"is not a byte count"),
        ("Transfer-Encoding: chunked\r\n", b"zz\r\n{}\r\n0\r\n\r\n", b"is not a hex byte count"),
        (
            "Transfer-Encoding: chunked\r\n",
            b"1000000000000\r\n{}\r\n",  # 2^48
            b"is not a hex byte count",
        ),
        ("Transfer-Encoding: chunked\r\n", b"fffffff\r\n{}", b"request body over"),
        (
            f"Content-Length: {200_000}\r\n",
            b"[" * 100_000 + b"]" * 100_000,
            b"nested too deep",
        ),
    ],
)
def test_bad_framing_is_a_400_and_a_closed_connection(
    port: int, headers: str, body: bytes, says: bytes
) -> None:
    answer = _exchange(port, _post(headers, body))
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert says in answer, answer[:400]


@pytest.mark.parametrize(
    ("first", "framing"),
    [
        ("POST /create HTTP/1.1\r\nAuthorization: Bearer wrong", "length"),
        ("POST /nowhere HTTP/1.1\r\nAuthorization: Bearer " + TOKEN, "length"),
        ("POST /create HTTP/1.1\r\nAuthorization: Bearer wrong", "chunked"),
    ],
)
def test_a_body_left_after_a_refusal_is_never_the_next_request(
    port: int, first: str, framing: str
) -> None:
    """After a 401 or a 404 the body is read and dropped: the body, an HTTP request
    itself, is never served (it was: a 501 page echoing it), and the next request on
    the same keep-alive connection is answered as itself."""
    smuggled = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
    if framing == "length":
        head = f"Content-Length: {len(smuggled)}\r\n\r\n".encode()
        body = smuggled
    else:
        head = b"Transfer-Encoding: chunked\r\n\r\n"
        body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(smuggled), smuggled)
    follow = f"GET /second HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
    raw = f"{first}\r\nHost: x\r\n".encode() + head + body
    raw += (follow + "Connection: close\r\n\r\n").encode()
    answer = _exchange(port, raw)
    assert answer.startswith((b"HTTP/1.1 401", b"HTTP/1.1 404")), answer[:200]
    assert answer.count(b"HTTP/1.1 ") == 2, answer
    second = answer[answer.index(b"HTTP/1.1 ", 10) :]
    assert second.startswith(b"HTTP/1.1 404") and b"no route GET /second" in second, second
    assert b"smuggled" not in answer, answer


def test_an_idle_connection_is_closed(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /ping HTTP/1.1\r\n")  # and then nothing
        started = time.monotonic()
        assert sock.recv(100) == b""  # closed by the server
        assert time.monotonic() - started < 8


def test_connections_beyond_the_bound_are_closed_and_the_server_goes_on(port: int) -> None:
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(4)]
    try:
        extra = socket.create_connection(("127.0.0.1", port), timeout=10)
        with extra:
            assert extra.recv(100) == b""  # closed at once, no thread for it
    finally:
        for sock in held:
            sock.close()

    def pong() -> bool:
        raw = f"GET /ping HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        raw += "Connection: close\r\n\r\n"
        try:
            return _exchange(port, raw.encode()).startswith(b"HTTP/1.1 ")
        except OSError:
            return False

    wait_for("the server serving again", pong, timeout=10)


def test_a_data_dir_open_to_others_is_made_private(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o777)
    Plugin(Config(data, Runtime("bare"), Defaults())).ensure_dirs()
    assert stat.S_IMODE(data.stat().st_mode) == 0o700


def test_a_data_dir_that_is_a_link_or_another_users_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "data"
    link.symlink_to(target)
    with pytest.raises(UsageError, match="not a directory"):
        Plugin(Config(link, Runtime("bare"), Defaults())).ensure_dirs()
    if os.geteuid() == 0:
        other = tmp_path / "other"
        other.mkdir()
        os.chown(other, 65534, 65534)
        with pytest.raises(UsageError, match="owned by uid 65534"):
            Plugin(Config(other, Runtime("bare"), Defaults())).ensure_dirs()
