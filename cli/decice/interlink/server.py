"""HTTP around the plugin: a unix socket (0600), TCP on loopback, or TCP with a token.

interLink 0.6.2 sends no Authorization header to its plugin, so the ways it can reach
this server are a unix socket (the default), TCP on a loopback address (interLink on the
same host; no token needed) or a token for decice's own clients. A routable TCP address
without a token is refused at start: it would be an open, unauthenticated port.

Routes (as interLink 0.6.2's API server calls a plugin):
    POST /create   RetrievedPodData -> CreateStruct
    POST /delete   v1.Pod -> text
    GET  /status   [v1.Pod] -> [PodStatus]; an empty list (interLink's ping) -> PingResponse
    GET  /getLogs  LogStruct -> text (chunked and open until the container ends: Follow)
    GET  /ping     -> PingResponse (the same as /status with an empty list)
Errors answer a status (400 bad request, 401 no/wrong token, 404 unknown pod/route,
422 a pod that cannot run here, 502 a SLURM command failed) with a one-line text reason.
Requests are logged by route and status only: bodies may carry secrets.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import socket
import socketserver
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from decice.interlink.errors import BadRequest, PluginError, UsageError
from decice.interlink.plugin import Plugin
from decice_kube.loopback import is_loopback

log = logging.getLogger("decice.interlink")

MAX_BODY = 64 * 2**20
IDLE_TIMEOUT = 30.0  # seconds a connection may send nothing before it is closed
MAX_CONNECTIONS = 64  # served at once; one more is closed at once (interLink keeps a few)
_DIGITS = frozenset(b"0123456789")
_HEX = frozenset(b"0123456789abcdefABCDEF")
UNIX_PATH_MAX = 107  # sun_path holds 108 bytes with the final NUL


@dataclass(frozen=True)
class Listen:
    kind: str  # "tcp" | "unix"
    host: str = ""
    port: int = 0
    path: str = ""

    def __str__(self) -> str:
        return f"unix:{self.path}" if self.kind == "unix" else f"tcp:{self.host}:{self.port}"


def parse_listen(text: str) -> Listen:
    kind, _, rest = text.partition(":")
    if kind == "unix" and rest.startswith("/"):
        if len(os.fsencode(rest)) > UNIX_PATH_MAX:
            raise UsageError(
                f"--listen {text!r}: a unix socket path has at most {UNIX_PATH_MAX} bytes; "
                "use a shorter directory"
            )
        return Listen("unix", path=rest)
    if kind == "tcp":
        host, _, port = rest.rpartition(":")
        if host and port.isdigit() and 0 < int(port) < 65536:
            return Listen("tcp", host=host.strip("[]"), port=int(port))
    raise UsageError(
        f"--listen {text!r}: use tcp:HOST:PORT (e.g. tcp:0.0.0.0:4000) or unix:/absolute/path"
    )


def check_private(path: Path, flag: str) -> None:
    """A secret's file: a regular file of this user with no group/other bits."""
    try:
        info = path.lstat()
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot read it ({exc.strerror})") from exc
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{flag} {path}: not a regular file")
    if info.st_uid != os.geteuid():
        raise UsageError(f"{flag} {path}: owned by uid {info.st_uid}, not this user")
    if info.st_mode & 0o077:
        raise UsageError(
            f"{flag} {path}: mode {stat.S_IMODE(info.st_mode):04o} lets others read it; "
            f"chmod 600 {path}"
        )


def read_token(path: Path) -> str:
    """The bearer token: a regular file of this user, no group/other bits, not empty."""
    check_private(path, "--token-file")
    token = path.read_text().strip()
    if not token:
        raise UsageError(f"--token-file {path}: empty")
    return token


def _routes(plugin: Plugin) -> dict[tuple[str, str], Callable[[Any], Any]]:
    return {
        ("POST", "/create"): plugin.create,
        ("POST", "/delete"): plugin.delete,
        ("DELETE", "/delete"): plugin.delete,
        ("GET", "/status"): plugin.status,
        ("POST", "/status"): plugin.status,
        ("GET", "/getLogs"): plugin.logs,
        ("POST", "/getLogs"): plugin.logs,
        ("GET", "/ping"): lambda _body: plugin.ping(),
    }


class Handler(BaseHTTPRequestHandler):
    server_version = "decice-interlink-slurm"
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT  # an idle connection is closed, its thread freed
    plugin: Plugin
    token: str | None

    def address_string(self) -> str:  # unix sockets have no peer address
        return self.client_address[0] if isinstance(self.client_address, tuple) else "unix"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _body(self) -> Any:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = self._chunked()
        else:
            text = (self.headers.get("Content-Length") or "0").strip()
            if not text or not _DIGITS.issuperset(text.encode()) or len(text) > 12:
                raise BadRequest(f"Content-Length {text[:20]!r} is not a byte count")
            length = int(text)
            if length > MAX_BODY:
                raise BadRequest(f"request body over {MAX_BODY} bytes")
            raw = self.rfile.read(length) if length else b""
            if len(raw) < length:
                raise BadRequest("request body shorter than its Content-Length")
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except RecursionError:
            raise BadRequest("request body is JSON nested too deep") from None
        except ValueError as exc:
            raise BadRequest(f"request body is not JSON: {exc}") from exc

    def _chunked(self) -> bytes:
        out = bytearray()
        while True:
            line = self.rfile.readline(64).split(b";")[0].strip()
            if not line or not _HEX.issuperset(line) or len(line) > 8:
                raise BadRequest(f"chunk size {line[:20]!r} is not a hex byte count")
            size = int(line, 16)
            if size == 0:
                for _ in range(100):  # trailer lines, then the blank one
                    if self.rfile.readline(8192) in (b"\r\n", b"\n", b""):
                        break
                return bytes(out)
            if len(out) + size > MAX_BODY:
                raise BadRequest(f"request body over {MAX_BODY} bytes")
            chunk = self.rfile.read(size)
            if len(chunk) < size:
                raise BadRequest("request body ends inside a chunk")
            out += chunk
            self.rfile.readline(64)

    def _discard_body(self) -> None:
        """Read and drop the request's body so the next request on this keep-alive
        connection starts where it should; one that cannot be framed closes it."""
        try:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                self._chunked()
                return
            text = (self.headers.get("Content-Length") or "0").strip()
            if not text or not _DIGITS.issuperset(text.encode()) or len(text) > 12:
                raise BadRequest("no byte count")
            left = int(text)
            if left > MAX_BODY:
                raise BadRequest("too long to read")
            while left:
                got = self.rfile.read(min(left, 65536))
                if not got:
                    raise BadRequest("body ends early")
                left -= len(got)
        except (BadRequest, OSError):
            self.close_connection = True

    def _send(self, code: int, payload: Any) -> None:
        if isinstance(payload, Iterator):
            self._stream(code, payload)
            return
        if isinstance(payload, str):
            data, ctype = payload.encode(), "text/plain; charset=utf-8"
        else:
            data, ctype = json.dumps(payload).encode(), "application/json"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, code: int, chunks: Iterator[bytes]) -> None:
        """A text body sent chunk by chunk as it comes (a followed log); a client that
        goes away ends it (the generator is closed, its file with it)."""
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in chunks:
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    def _authorized(self) -> bool:
        if self.token is None:
            return True
        given = self.headers.get("Authorization", "")
        expected = f"Bearer {self.token}"
        return hmac.compare_digest(given.encode(), expected.encode())

    def _handle(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        code = 200
        try:
            if not self._authorized():
                code = 401
                self._discard_body()
                self._send(code, "missing or wrong bearer token")
                return
            route = _routes(self.plugin).get((method, path))
            if route is None:
                code = 404
                self._discard_body()
                self._send(code, f"no route {method} {path}")
                return
            result = route(self._body())
            self._send(code, result)
        except PluginError as exc:
            code = exc.status
            if isinstance(exc, BadRequest):
                self.close_connection = True  # the framing may be off: start afresh
            self._send(code, str(exc))
        except Exception:
            code = 500
            log.exception("%s %s failed", method, path)
            self._send(code, "internal error; see the plugin's log")
        finally:
            level = logging.INFO if code < 400 or code == 401 else logging.WARNING
            if path not in ("/status", "/ping") or code >= 400:
                log.log(level, "%s %s -> %d", method, path, code)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


class _Bounded:
    """At most MAX_CONNECTIONS connections served at once; one more is closed at once
    (with an idle timeout per connection, a client can no longer hold a thread each)."""

    daemon_threads = True
    _slots: threading.BoundedSemaphore | None = None

    def process_request(self, request: Any, client_address: Any) -> None:
        if self._slots is None:
            self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        if not self._slots.acquire(blocking=False):
            log.warning("more than %d connections at once: one closed", MAX_CONNECTIONS)
            self.shutdown_request(request)  # type: ignore[attr-defined]
            return
        super().process_request(request, client_address)  # type: ignore[misc]

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)  # type: ignore[misc]
        finally:
            assert self._slots is not None
            self._slots.release()


class UnixHTTPServer(_Bounded, socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    def server_bind(self) -> None:
        path = str(self.server_address)
        old = os.umask(0o177)
        try:
            super().server_bind()
        finally:
            os.umask(old)
        Path(path).chmod(0o600)


class TCPServer(_Bounded, ThreadingHTTPServer):
    pass


class TCP6Server(TCPServer):
    address_family = socket.AF_INET6


def _clear_stale_socket(path: Path) -> None:
    if not path.exists() and not path.is_symlink():
        return
    if not stat.S_ISSOCK(path.lstat().st_mode):
        raise UsageError(f"--listen unix:{path}: a file that is not a socket is in the way")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink()  # nobody listens: left by a plugin that was killed
        return
    finally:
        probe.close()
    raise UsageError(f"--listen unix:{path}: another process serves this socket")


def check_tcp_access(listen: Listen, token: str | None) -> None:
    """A TCP listen is loopback or has a token: never an open unauthenticated port."""
    if listen.kind != "tcp" or token is not None or is_loopback(listen.host):
        return
    raise UsageError(
        f"--listen {listen}: without --token-file this would be an open port anyone on "
        "the network can submit jobs through (interLink 0.6.2 sends no token to its "
        "plugin). Run interLink on this host and listen on tcp:127.0.0.1:PORT, use a unix "
        "socket (the default; decice's --tunnel reaches it from the cluster), or give "
        "--token-file for clients that send 'Authorization: Bearer <token>'"
    )


def make_server(plugin: Plugin, listen: Listen, token: str | None) -> socketserver.BaseServer:
    handler = type("BoundHandler", (Handler,), {"plugin": plugin, "token": token})
    check_tcp_access(listen, token)
    try:
        if listen.kind == "unix":
            path = Path(listen.path)
            _clear_stale_socket(path)
            return UnixHTTPServer(str(path), handler)
        kind = TCP6Server if ":" in listen.host else TCPServer
        server = kind((listen.host, listen.port), handler)
    except OSError as exc:
        raise UsageError(f"--listen {listen}: cannot listen there ({exc.strerror or exc})") from exc
    server.daemon_threads = True
    return server
