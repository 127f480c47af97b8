"""A small asyncio client for the Kubernetes API that speaks raw JSON over HTTP/2.

Built for the simulator's hot paths (thousands of node/pod writes, large LISTs, a pod
watch): no model objects, one multiplexed HTTP/2 connection for writes (bounded number
of requests in flight) and another one for watches, retries with backoff on 429, 5xx
and transport errors. Conflicts (409) are returned to the caller, which knows whether a
retry makes sense (they mostly mean "someone else changed or replaced the object").
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
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

log = logging.getLogger(__name__)

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
BIG_BODY = 256 * 1024  # decode bodies above this with the cyclic GC paused


class KubeApiError(Exception):
    """A request failed for good (after retries, or with a status not worth retrying)."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        self.status = status
        self.body = body
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]}")


class WatchExpired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


@dataclass(frozen=True)
class Response:
    """Status and decoded JSON body (None when the body is empty or not JSON)."""

    status: int
    body: Any

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass(frozen=True)
class KubeConfig:
    """What a client needs from a kubeconfig's current context."""

    server: str
    ssl_context: ssl.SSLContext | bool
    token: str | None = None


def load_kubeconfig(path: Path, context: str | None = None) -> KubeConfig:
    """Read server, TLS material and token of ``context`` (default: current-context).

    Supports embedded (``*-data``) and file certificates, ``token`` and ``tokenFile``,
    and ``insecure-skip-tls-verify``; exec/auth-provider plugins are not supported.
    """
    raw = yaml.safe_load(path.read_text()) or {}
    name = context or raw.get("current-context")
    ctx = _named(raw.get("contexts"), name, "context", path)
    cluster = _named(raw.get("clusters"), ctx.get("cluster"), "cluster", path)
    user = _named(raw.get("users"), ctx.get("user"), "user", path) if ctx.get("user") else {}
    base = path.parent

    server = str(cluster["server"]).rstrip("/")
    sslctx: ssl.SSLContext | bool
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
    if cert and key and isinstance(sslctx, ssl.SSLContext):
        _load_cert_chain(sslctx, cert, key)
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = (base / user["tokenFile"]).read_text().strip()
    return KubeConfig(server, sslctx, str(token) if token else None)


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


def _load_cert_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """ssl wants files: write both to a private temporary directory, load, remove."""
    with tempfile.TemporaryDirectory(prefix="decice-kc-") as tmp:
        cert_path, key_path = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        for target, data in ((cert_path, cert), (key_path, key)):
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        ctx.load_cert_chain(str(cert_path), str(key_path))


@contextmanager
def gc_paused() -> Any:
    """Pause the cyclic garbage collector (it triples the cost of decoding large JSON)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def decode(content: bytes) -> Any:
    """json.loads, with the cyclic GC paused for big bodies."""
    if not content:
        return None
    if len(content) < BIG_BODY:
        return json.loads(content)
    with gc_paused():
        return json.loads(content)


class KubeClient:
    """Raw-JSON requests against one API server; ``max_in_flight`` bounds concurrency."""

    def __init__(
        self,
        config: KubeConfig,
        *,
        max_in_flight: int = 64,
        timeout: float = 30.0,
        max_retries: int = 8,
    ) -> None:
        self.config = config
        self.max_retries = max_retries
        self._slots = asyncio.Semaphore(max_in_flight)
        headers = {"Accept": JSON, "User-Agent": "decice-sim-agent"}
        if config.token:
            headers["Authorization"] = f"Bearer {config.token}"
        limits = httpx.Limits(max_connections=4, max_keepalive_connections=4)
        self._http = httpx.AsyncClient(
            base_url=config.server,
            http2=True,
            verify=config.ssl_context,
            headers=headers,
            timeout=httpx.Timeout(timeout),
            limits=limits,
        )
        self._watch_http = httpx.AsyncClient(
            base_url=config.server,
            http2=True,
            verify=config.ssl_context,
            headers=headers,
            timeout=httpx.Timeout(timeout),
            limits=limits,
        )
        self.requests = 0
        self.retries = 0

    async def close(self) -> None:
        """Close both connections."""
        await self._http.aclose()
        await self._watch_http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str | int] | None = None,
        content_type: str = JSON,
        ok_status: frozenset[int] = frozenset(),
    ) -> Response:
        """Send one request; retry 429/5xx/transport errors with jittered backoff.

        Returns the response for 2xx and for statuses in ``ok_status`` (e.g. 404, 409 for
        idempotent writes); raises KubeApiError for anything else.
        """
        content = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Content-Type": content_type} if content is not None else None
        delay = 0.1
        for attempt in range(self.max_retries + 1):
            async with self._slots:
                try:
                    resp = await self._http.request(
                        method, path, content=content, params=params, headers=headers
                    )
                except (httpx.TransportError, httpx.TimeoutException) as exc:
                    if attempt >= self.max_retries:
                        raise KubeApiError(method, path, 0, repr(exc)) from exc
                    status, retry_after, text = 0, None, repr(exc)
                else:
                    self.requests += 1
                    status = resp.status_code
                    if 200 <= status < 300 or status in ok_status:
                        return Response(status, decode(resp.content))
                    text = resp.text
                    retry_after = resp.headers.get("Retry-After")
                    if status not in RETRY_STATUS or attempt >= self.max_retries:
                        raise KubeApiError(method, path, status, text)
            self.retries += 1
            wait = delay * (0.5 + random.random())
            if retry_after:
                with suppress(ValueError):
                    wait = max(wait, float(retry_after))
            log.debug("%s %s: %s, retry in %.2f s", method, path, status or text, wait)
            await asyncio.sleep(wait)
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")  # pragma: no cover

    async def get(self, path: str, params: Mapping[str, str | int] | None = None) -> Any:
        """GET and return the decoded body."""
        return (await self.request("GET", path, params=params)).body

    async def list_pages(
        self, path: str, params: Mapping[str, str | int] | None = None, page: int = 5000
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
        self, path: str, params: Mapping[str, str | int] | None = None, page: int = 5000
    ) -> tuple[list[dict[str, Any]], str]:
        """Every item of a (paginated) LIST and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        rv = ""
        async for page_items, page_rv in self.list_pages(path, params, page):
            items.extend(page_items)
            rv = page_rv
        return items, rv

    @asynccontextmanager
    async def _stream(
        self, path: str, params: Mapping[str, str | int], read_timeout: float
    ) -> AsyncIterator[httpx.Response]:
        timeout = httpx.Timeout(30.0, read=read_timeout)
        async with self._watch_http.stream("GET", path, params=params, timeout=timeout) as resp:
            yield resp

    async def watch(
        self,
        path: str,
        resource_version: str,
        params: Mapping[str, str | int] | None = None,
        *,
        server_timeout: int = 300,
    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events (``{"type", "object"}``) from ``resource_version`` with bookmarks.

        Ends normally when the server closes the watch (the caller re-watches from the
        last resourceVersion it saw); raises WatchExpired on 410 Gone.
        """
        query: dict[str, str | int] = {
            **(params or {}),
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": server_timeout,
        }
        # bookmarks arrive about once a minute; a silent stream longer than this is dead
        read_timeout = float(server_timeout + 60)
        async with self._stream(path, query, read_timeout) as resp:
            if resp.status_code == 410:
                raise WatchExpired(path)
            if resp.status_code != 200:
                text = (await resp.aread()).decode(errors="replace")
                raise KubeApiError("WATCH", path, resp.status_code, text)
            async for line in resp.aiter_lines():
                if not line:
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    if status.get("code") == 410:
                        raise WatchExpired(path)
                    raise KubeApiError(
                        "WATCH", path, int(status.get("code") or 0), str(status.get("message"))
                    )
                yield event
