"""The asyncio Kubernetes client of decice: raw JSON over HTTP/2 (httpx), no model objects.

Used by the scheduler, the simulator's node agent and the CLI. Two connection pools: one
for short requests (LIST, writes, events, leases; keep-alive, HTTP/2 multiplexed) and
one for long-lived watch streams. Watches set a server-side ``timeoutSeconds`` AND a
client read timeout, so a silent partition ends the stream instead of hanging it. Large
bodies are decoded with the cyclic GC paused.

Per client, and off by default (the scheduler's hot path wants neither):

- ``max_retries``: 429, 5xx and transport errors are retried with jittered exponential
  backoff (honouring ``Retry-After``);
- ``max_in_flight``: a bound on concurrent requests of the short-request pool.

With both off and a kubeconfig-built config (the scheduler's own client), small POSTs
(``post``: bindings) take a lean HTTP/1.1 pool and watches a lean HTTP/1.1 stream on a
connection of their own (see :mod:`decice_kube.http1`): httpx's HTTP/2 costs about
twice the CPU per watch event (``bench/scheduler/watch_cost.py``). Such a client made
with ``http1_only`` sends every request through that pool (uncompressed: no gzip work on
either side of a loopback LIST) and never imports httpx, whose import and HTTP/2 setup
cost a process that starts often (the scheduler, its event writer) tens of milliseconds
of CPU; otherwise httpx is imported and its clients made at the first request that
needs them.

A kubeconfig's ``tokenFile`` (a pod's projected service-account token, which the
kubelet rotates in place) is read again once the token read is :data:`TOKEN_REREAD_S`
old, as client libraries do; a static ``token`` is sent as given.

Errors: :class:`ApiError` (``status`` 0 for a transport failure) and its subclass
:class:`Gone` (410: the resourceVersion is too old, list again).
"""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import logging
import os
import random
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Collection, Generator, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlencode

import yaml

from decice_kube.http1 import Http1Pool
from decice_kube.jsonload import loads

if TYPE_CHECKING:
    import httpx

__all__ = [
    "JSON",
    "JSON_PATCH",
    "MERGE_PATCH",
    "RETRY_STATUS",
    "TOKEN_REREAD_S",
    "ApiError",
    "BearerToken",
    "Client",
    "Gone",
    "KubeConfig",
    "Response",
    "decode",
    "gc_paused",
    "load_kubeconfig",
]

log = logging.getLogger(__name__)
# libyaml's safe loader when PyYAML has it (a kubeconfig in ~0.2 ms, not ~3)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
BIG_BODY = 256 * 1024  # decode bodies above this with the cyclic GC paused
# a token file is read again after this long (client-go's cached file token source
# re-reads each minute; the kubelet refreshes a projected token well before it expires)
TOKEN_REREAD_S = 60.0

Params = Mapping[str, str | int]


# ================================================================== errors


class ApiError(Exception):
    """A request answered with an unexpected status (0: transport failure)."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.body = body
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]}")


class Gone(ApiError):
    """410 Gone: the resourceVersion (or continue token) is too old; list again."""

    def __init__(self, method: str, path: str, body: str = "") -> None:
        super().__init__(method, path, 410, body)


def _error(method: str, path: str, status: int, body: str) -> ApiError:
    return Gone(method, path, body) if status == 410 else ApiError(method, path, status, body)


class Response(NamedTuple):
    """Status and decoded JSON body (None when empty or not JSON); unpacks as a pair."""

    status: int
    body: Any

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


# ================================================================== kubeconfig


@dataclass(frozen=True)
class KubeConfig:
    """What a client needs from a kubeconfig context."""

    server: str
    ssl_context: ssl.SSLContext
    token: str | None = None  # as given, or as read from token_file when loaded
    # a fresh context with the same trust and client certificate (httpx sets the ALPN
    # protocols of the context it is given, so the HTTP/1.1 pool needs its own)
    new_ssl_context: Callable[[], ssl.SSLContext] | None = None
    token_file: Path | None = None  # read again as the token ages (BearerToken)


class BearerToken:
    """The token a client sends: a kubeconfig's ``token``, or its ``tokenFile`` read
    again once the last read is :data:`TOKEN_REREAD_S` old. A failed or empty re-read
    keeps the last token (logged, without the token) and is tried again next time."""

    def __init__(
        self,
        value: str | None,
        path: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._value = value
        self.path = path
        self._clock = clock
        self._read_at = clock()

    def get(self) -> str | None:
        if self.path is not None and self._clock() - self._read_at >= TOKEN_REREAD_S:
            self._read_at = self._clock()
            try:
                fresh = self.path.read_text().strip()
            except OSError as exc:
                log.warning("token file %s: %s; the last token stays", self.path, exc.strerror)
            else:
                if fresh:
                    self._value = fresh
                else:
                    log.warning("token file %s is empty; the last token stays", self.path)
        return self._value


def _bearer_auth(token: BearerToken) -> httpx.Auth:
    """httpx's per-request hook for a token that rotates (httpx is imported when used)."""
    import httpx

    class _BearerAuth(httpx.Auth):
        def auth_flow(
            self, request: httpx.Request
        ) -> Generator[httpx.Request, httpx.Response, None]:
            value = token.get()
            if value:
                request.headers["Authorization"] = f"Bearer {value}"
            yield request

    return _BearerAuth()


def load_kubeconfig(path: str | Path, context: str | None = None) -> KubeConfig:
    """Server, TLS material and token of a kubeconfig context (default: current).

    Supports embedded (``*-data``) and file certificates (relative to the kubeconfig),
    ``token`` and ``tokenFile``, and ``insecure-skip-tls-verify``; exec/auth-provider
    plugins are not supported.
    """
    path = Path(path)
    raw = yaml.load(path.read_text(), Loader=_YAML_LOADER) or {}
    name = context or raw.get("current-context")
    ctx = _named(raw.get("contexts"), name, "context", path)
    cluster = _named(raw.get("clusters"), ctx.get("cluster"), "cluster", path)
    user = _named(raw.get("users"), ctx.get("user"), "user", path) if ctx.get("user") else {}
    base = path.parent

    def make_context() -> ssl.SSLContext:
        return _ssl_context(cluster, user, base)

    token = user.get("token")
    token_file = None
    if not token and user.get("tokenFile"):
        token_file = base / user["tokenFile"]
        token = token_file.read_text().strip()
    return KubeConfig(
        str(cluster["server"]).rstrip("/"),
        make_context(),
        str(token) if token else None,
        make_context,
        token_file,
    )


def _ssl_context(cluster: Mapping[str, Any], user: Mapping[str, Any], base: Path) -> ssl.SSLContext:
    if cluster.get("insecure-skip-tls-verify"):
        sslctx = ssl.create_default_context()
        sslctx.check_hostname = False
        sslctx.verify_mode = ssl.CERT_NONE
    elif cluster.get("certificate-authority-data"):
        pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
        sslctx = ssl.create_default_context(cadata=pem)
    elif cluster.get("certificate-authority"):
        sslctx = ssl.create_default_context(cafile=str(base / cluster["certificate-authority"]))
    else:
        sslctx = ssl.create_default_context()
    cert = _material(user, "client-certificate", base)
    key = _material(user, "client-key", base)
    if cert and key:
        _load_cert_chain(sslctx, cert, key)
    return sslctx


def _load_cert_chain(sslctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """ssl wants files: write both to a private temporary directory, load, remove."""
    with tempfile.TemporaryDirectory(prefix="decice-kc-") as tmp:
        paths = []
        for fname, data in (("cert.pem", cert), ("key.pem", key)):
            target = Path(tmp) / fname
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            paths.append(str(target))
        sslctx.load_cert_chain(paths[0], paths[1])


def _named(items: Any, name: Any, kind: str, path: Path) -> dict[str, Any]:
    for item in items or ():
        if item.get("name") == name:
            return dict(item.get(kind) or {})
    raise ValueError(f"{path}: no {kind} named {name!r}")


def _material(user: Mapping[str, Any], key: str, base: Path) -> bytes | None:
    if user.get(f"{key}-data"):
        return base64.b64decode(user[f"{key}-data"])
    if user.get(key):
        return (base / user[key]).read_bytes()
    return None


# ================================================================== decoding


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector (it triples the cost of decoding large JSON)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def decode(content: bytes) -> Any:
    """The JSON body (:func:`decice_kube.jsonload.loads`), with the cyclic GC paused for
    big bodies; None for an empty body."""
    if not content:
        return None
    if len(content) < BIG_BODY:
        return loads(content)
    with gc_paused():
        return loads(content)


def _response(status: int, raw: bytes) -> Response:
    """``status`` and the body decoded; None for an empty body or one that is not JSON."""
    try:
        return Response(status, decode(raw))
    except ValueError:
        return Response(status, None)


# ================================================================== client


async def _events(path: str, chunks: AsyncIterator[bytes]) -> AsyncIterator[dict[str, Any]]:
    """A watch body's events: one JSON event per line, lines split across chunks as they
    come (split as bytes: no text decoding, no per-line str objects). An ERROR event
    raises (Gone for 410); a body cut inside an event raises ApiError."""
    pending = b""
    async for chunk in chunks:
        if pending:
            chunk = pending + chunk
        lines = chunk.split(b"\n")
        pending = lines.pop()
        for line in lines:
            if not line.strip():
                continue
            event = loads(line)
            if event.get("type") == "ERROR":
                status = event.get("object") or {}
                raise _error(
                    "WATCH", path, int(status.get("code") or 0), str(status.get("message"))
                )
            yield event
    if pending.strip():
        # a stream cut inside an event: the partial line is not an event
        raise ApiError("WATCH", path, 0, "stream ended inside an event")


class Client:
    """Raw-JSON requests against one API server (see the module docstring).

    ``transport`` replaces the network for both pools (tests); it turns the HTTP/1.1
    pool off. ``http1_only``: every request over the HTTP/1.1 pool when there is one
    (see the module docstring).
    """

    def __init__(
        self,
        config: KubeConfig,
        *,
        timeout: float = 30.0,
        user_agent: str = "",
        max_retries: int = 0,
        max_in_flight: int | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        http1_only: bool = False,
    ) -> None:
        self.config = config
        self.max_retries = max_retries
        self._slots = None if max_in_flight is None else asyncio.Semaphore(max_in_flight)
        self._plain = max_retries == 0 and max_in_flight is None
        headers = {"Accept": JSON, "User-Agent": user_agent or "decice-scheduler"}
        self._token = BearerToken(config.token, config.token_file)
        if config.token_file is None and config.token:
            headers["Authorization"] = f"Bearer {config.token}"
        self._headers = headers
        self._timeout = timeout
        self._transport = transport
        self._pools: tuple[httpx.AsyncClient, httpx.AsyncClient] | None = None
        self._fast: Http1Pool | None = None
        self._fast_token = config.token
        plain_http = config.server.startswith("http://")
        if self._plain and transport is None and (plain_http or config.new_ssl_context):
            fast_ssl = None if plain_http else config.new_ssl_context
            fast_headers = dict(headers)
            if config.token:
                fast_headers["Authorization"] = f"Bearer {config.token}"
            self._fast = Http1Pool(
                config.server,
                None if fast_ssl is None else fast_ssl(),
                fast_headers,
                max_connections=32,
                timeout=timeout,
            )
        self._lean = http1_only and self._fast is not None
        self.requests = 0  # responses received
        self.retries = 0  # attempts repeated after a 429/5xx/transport error

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | Path,
        *,
        context: str | None = None,
        timeout: float = 30.0,
        user_agent: str = "",
        max_retries: int = 0,
        max_in_flight: int | None = None,
    ) -> Client:
        """A client for a kubeconfig context (default: current); ``async with`` closes it."""
        return cls(
            load_kubeconfig(path, context),
            timeout=timeout,
            user_agent=user_agent,
            max_retries=max_retries,
            max_in_flight=max_in_flight,
        )

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _httpx_pools(self) -> tuple[httpx.AsyncClient, httpx.AsyncClient]:
        """httpx's clients (short requests, watches), made at their first use."""
        if self._pools is None:
            import httpx

            config = self.config
            auth = _bearer_auth(self._token) if config.token_file is not None else None
            limits = httpx.Limits(max_connections=4, max_keepalive_connections=4)

            def make() -> httpx.AsyncClient:
                return httpx.AsyncClient(
                    base_url=config.server,
                    http2=True,
                    verify=config.ssl_context,
                    headers=self._headers,
                    auth=auth,
                    timeout=httpx.Timeout(self._timeout),
                    limits=limits,
                    transport=self._transport,
                )

            self._pools = (make(), make())
        return self._pools

    @property
    def _http(self) -> httpx.AsyncClient:
        return self._httpx_pools()[0]

    @property
    def _watch_http(self) -> httpx.AsyncClient:
        return self._httpx_pools()[1]

    async def close(self) -> None:
        """Close every connection."""
        if self._pools is not None:
            for pool in self._pools:
                await pool.aclose()
        if self._fast is not None:
            await self._fast.close()

    def _fast_pool(self) -> Http1Pool:
        """The lean HTTP/1.1 pool, sending the current token (a token file rotates)."""
        assert self._fast is not None
        if self._token.path is not None:
            token = self._token.get()
            if token != self._fast_token:
                self._fast.set_header("Authorization", f"Bearer {token}")
                self._fast_token = token
        return self._fast

    # ------------------------------------------------------------ requests

    async def post(self, path: str, body: Any, *, success_body: bool = True) -> Response:
        """A small JSON POST on the hot path (bindings, events): the lean HTTP/1.1 pool
        when there is one, else ``request``. Same contract as ``request`` without
        ``ok_status``; ``success_body`` False: a 2xx reply's body is not decoded (None),
        for callers that only read the body of a failure."""
        if self._fast is None:
            return await self.request("POST", path, body=body)
        payload = json.dumps(body, separators=(",", ":")).encode()
        try:
            status, raw = await self._fast_pool().request("POST", path, payload)
        except (OSError, ValueError, TimeoutError) as exc:
            raise ApiError("POST", path, 0, repr(exc)) from exc
        self.requests += 1
        if not success_body and 200 <= status < 300:
            return Response(status, None)
        return _response(status, raw)

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Params | None = None,
        content_type: str = JSON,
        ok_status: Collection[int] | None = None,
    ) -> Response:
        """One request: (status, decoded body). Transport errors -> ApiError(0).

        ``ok_status`` None returns every status for the caller to inspect; otherwise
        2xx and the statuses in ``ok_status`` (e.g. 404, 409 for idempotent writes) are
        returned and anything else raises ApiError (Gone for 410). Retries happen only
        when the client has ``max_retries``.
        """
        content = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        if self._lean:
            return await self._request_http1(method, path, content, params, content_type, ok_status)
        import httpx

        headers = {"Content-Type": content_type} if content is not None else None
        if self._plain:
            try:
                resp = await self._http.request(
                    method, path, content=content, params=params, headers=headers
                )
            except httpx.HTTPError as exc:
                raise ApiError(method, path, 0, repr(exc)) from exc
            self.requests += 1
        else:
            resp = await self._send_retrying(method, path, content, params, headers, ok_status)
        status = resp.status_code
        if ok_status is not None and not (200 <= status < 300 or status in ok_status):
            raise _error(method, path, status, resp.content.decode(errors="replace"))
        return _response(status, resp.content)

    async def _request_http1(
        self,
        method: str,
        path: str,
        content: bytes | None,
        params: Params | None,
        content_type: str,
        ok_status: Collection[int] | None,
    ) -> Response:
        """``request`` over the HTTP/1.1 pool (a plain client: no retries, no bound)."""
        target = f"{path}?{urlencode(params)}" if params else path
        try:
            status, raw = await self._fast_pool().request(method, target, content, content_type)
        except (OSError, ValueError, TimeoutError) as exc:
            raise ApiError(method, path, 0, repr(exc)) from exc
        self.requests += 1
        if ok_status is not None and not (200 <= status < 300 or status in ok_status):
            raise _error(method, path, status, raw.decode(errors="replace"))
        return _response(status, raw)

    async def _send_retrying(
        self,
        method: str,
        path: str,
        content: bytes | None,
        params: Params | None,
        headers: Mapping[str, str] | None,
        ok_status: Collection[int] | None,
    ) -> httpx.Response:
        """Send, bounded by ``max_in_flight``; repeat 429/5xx/transport errors with
        jittered backoff up to ``max_retries`` times. Returns the last response."""
        import httpx

        delay = 0.1
        attempt = 0
        while True:
            retry_after: str | None = None
            try:
                if self._slots is None:
                    resp = await self._http.request(
                        method, path, content=content, params=params, headers=headers
                    )
                else:
                    async with self._slots:
                        resp = await self._http.request(
                            method, path, content=content, params=params, headers=headers
                        )
            except httpx.TransportError as exc:
                if attempt >= self.max_retries:
                    raise ApiError(method, path, 0, repr(exc)) from exc
                why = repr(exc)
            except httpx.HTTPError as exc:
                raise ApiError(method, path, 0, repr(exc)) from exc
            else:
                self.requests += 1
                status = resp.status_code
                if (
                    status not in RETRY_STATUS
                    or attempt >= self.max_retries
                    or (ok_status is not None and status in ok_status)
                ):
                    return resp
                why = f"HTTP {status}"
                retry_after = resp.headers.get("Retry-After")
            attempt += 1
            self.retries += 1
            wait = delay * (0.5 + random.random())
            if retry_after:
                with suppress(ValueError):
                    wait = max(wait, float(retry_after))
            log.debug("%s %s: %s, retry in %.2f s", method, path, why, wait)
            await asyncio.sleep(wait)
            delay = min(delay * 2, 5.0)

    async def get(self, path: str, params: Params | None = None) -> Any:
        """GET and return the decoded body; 410 -> Gone, any other non-200 -> ApiError."""
        status, body = await self.request("GET", path, params=params)
        if status != 200:
            raise _error("GET", path, status, json.dumps(body))
        return body

    async def list_pages(
        self, path: str, params: Params | None = None, page: int = 5000
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        """A (paginated) LIST page by page: (items, the list's resourceVersion)."""
        query: dict[str, str | int] = {**(params or {}), "limit": page}
        while True:
            body = await self.get(path, query)
            meta = body.get("metadata") or {}
            yield body.get("items") or [], str(meta.get("resourceVersion", ""))
            cont = meta.get("continue")
            if not cont:
                return
            query["continue"] = cont

    async def list_all(
        self, path: str, params: Params | None = None, page: int = 5000
    ) -> tuple[list[dict[str, Any]], str]:
        """Every item of a (paginated) LIST and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        rv = ""
        async for page_items, page_rv in self.list_pages(path, params, page):
            items.extend(page_items)
            rv = page_rv
        return items, rv

    # ------------------------------------------------------------ watches

    async def watch(
        self,
        path: str,
        resource_version: str,
        params: Params | None = None,
        *,
        server_timeout: int = 300,
        read_timeout: float | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events (``{"type", "object"}``) from ``resource_version`` with bookmarks.

        ``params`` adds query parameters (label/field selectors). ``read_timeout``
        (default ``server_timeout + 30``) ends a silent stream. Ends when the server
        closes the stream; raises Gone on 410 (as a status or as an ERROR event),
        ApiError on other failures, and ApiError with status 0 on transport failures
        (including the read timeout), on either HTTP path. Never retried: the caller
        re-watches or relists.
        """
        query: dict[str, str | int] = {
            **(params or {}),
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": server_timeout,
        }
        if read_timeout is None:
            read_timeout = float(server_timeout + 30)
        if self._fast is not None:
            async for event in self._watch_http1(path, query, read_timeout):
                yield event
            return
        import httpx

        timeout = httpx.Timeout(30.0, read=read_timeout)
        try:
            async with self._watch_http.stream("GET", path, params=query, timeout=timeout) as resp:
                if resp.status_code != 200:
                    text = (await resp.aread()).decode(errors="replace")
                    raise _error("WATCH", path, resp.status_code, text)
                async for event in _events(path, resp.aiter_bytes()):
                    yield event
        except httpx.HTTPError as exc:  # the client's errors are its own, on both paths
            raise ApiError("WATCH", path, 0, repr(exc)) from exc

    async def _watch_http1(
        self, path: str, query: Mapping[str, str | int], read_timeout: float
    ) -> AsyncIterator[dict[str, Any]]:
        """``watch`` over a connection of the lean HTTP/1.1 pool's kind (its own)."""
        target = f"{path}?{urlencode(query)}"
        try:
            stream = await self._fast_pool().open_stream(target, read_timeout)
        except (OSError, TimeoutError, ValueError) as exc:
            raise ApiError("WATCH", path, 0, repr(exc)) from exc
        try:
            if stream.status != 200:
                try:
                    text = (await stream.read_all()).decode(errors="replace")
                except (OSError, TimeoutError, ValueError):
                    text = ""
                raise _error("WATCH", path, stream.status, text)

            async def pieces() -> AsyncIterator[bytes]:
                while True:
                    try:
                        data = await stream.read()
                    except (OSError, TimeoutError, ValueError) as exc:
                        raise ApiError("WATCH", path, 0, repr(exc)) from exc
                    if not data:
                        return
                    yield data

            async for event in _events(path, pieces()):
                yield event
        finally:
            stream.close()
