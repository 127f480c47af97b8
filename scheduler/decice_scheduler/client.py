"""A small asyncio Kubernetes client speaking raw JSON over HTTP/2 (httpx).

Two connection pools: one for short requests (LIST, binds, events, leases; keep-alive,
HTTP/2 multiplexed) and one for long-lived watch streams. Watches set a server-side
``timeoutSeconds`` AND a client read timeout, so a silent partition ends the stream
instead of hanging it. Large bodies are decoded with the cyclic GC paused.
"""

from __future__ import annotations

import base64
import gc
import json
import os
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from decice_scheduler.http1 import Http1Pool

__all__ = ["ApiError", "Client", "Gone", "KubeConfig", "load_kubeconfig"]

JSON = "application/json"
BIG_BODY = 256 * 1024


class ApiError(Exception):
    """A request answered with an unexpected status (0: transport failure)."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        self.status = status
        self.body = body
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]}")


class Gone(Exception):
    """410 Gone: the resourceVersion is too old; list again."""


@dataclass(frozen=True)
class KubeConfig:
    server: str
    ssl_context: ssl.SSLContext
    token: str | None = None
    # a fresh context with the same trust and client certificate (httpx sets the ALPN
    # protocols of the context it is given, so the HTTP/1.1 pool needs its own)
    new_ssl_context: Callable[[], ssl.SSLContext] | None = None


def load_kubeconfig(path: str | Path, context: str | None = None) -> KubeConfig:
    """Server, TLS material and token of a kubeconfig context (default: current)."""
    path = Path(path)
    raw = yaml.safe_load(path.read_text()) or {}
    name = context or raw.get("current-context")
    ctx = _named(raw.get("contexts"), name, "context", path)
    cluster = _named(raw.get("clusters"), ctx.get("cluster"), "cluster", path)
    user = _named(raw.get("users"), ctx.get("user"), "user", path) if ctx.get("user") else {}
    base = path.parent

    def make_context() -> ssl.SSLContext:
        return _ssl_context(cluster, user, base)

    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = (base / user["tokenFile"]).read_text().strip()
    return KubeConfig(
        str(cluster["server"]).rstrip("/"),
        make_context(),
        str(token) if token else None,
        make_context,
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
        with tempfile.TemporaryDirectory(prefix="decice-sched-") as tmp:
            paths = []
            for fname, data in (("cert.pem", cert), ("key.pem", key)):
                target = Path(tmp) / fname
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                paths.append(str(target))
            sslctx.load_cert_chain(paths[0], paths[1])
    return sslctx


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


def decode(content: bytes) -> Any:
    if not content:
        return None
    if len(content) < BIG_BODY:
        return json.loads(content)
    was = gc.isenabled()
    gc.disable()
    try:
        return json.loads(content)
    finally:
        if was:
            gc.enable()


class Client:
    """Raw-JSON requests against one API server."""

    def __init__(self, config: KubeConfig, *, timeout: float = 30.0, user_agent: str = "") -> None:
        self.config = config
        headers = {"Accept": JSON, "User-Agent": user_agent or "decice-scheduler"}
        if config.token:
            headers["Authorization"] = f"Bearer {config.token}"
        limits = httpx.Limits(max_connections=4, max_keepalive_connections=4)

        def make() -> httpx.AsyncClient:
            return httpx.AsyncClient(
                base_url=config.server,
                http2=True,
                verify=config.ssl_context,
                headers=headers,
                timeout=httpx.Timeout(timeout),
                limits=limits,
            )

        self._http = make()
        self._watch_http = make()
        self._fast: Http1Pool | None = None
        if config.server.startswith("http://") or config.new_ssl_context is not None:
            fast_ssl = None if config.server.startswith("http://") else config.new_ssl_context
            self._fast = Http1Pool(
                config.server,
                None if fast_ssl is None else fast_ssl(),
                {k: v for k, v in headers.items()},
                max_connections=32,
                timeout=timeout,
            )
        self.requests = 0

    async def close(self) -> None:
        await self._http.aclose()
        await self._watch_http.aclose()
        if self._fast is not None:
            await self._fast.close()

    async def post(self, path: str, body: Any) -> tuple[int, Any]:
        """A small JSON POST on the hot path (bindings): the lean HTTP/1.1 pool when the
        config allows one, else ``request``. Same contract as ``request``."""
        if self._fast is None:
            return await self.request("POST", path, body=body)
        try:
            status, data = await self._fast.request_json("POST", path, body)
        except (OSError, ValueError, TimeoutError) as exc:
            raise ApiError("POST", path, 0, repr(exc)) from exc
        self.requests += 1
        return status, data

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str | int] | None = None,
        content_type: str = JSON,
    ) -> tuple[int, Any]:
        """One request, no retries: (status, decoded body). Transport errors -> ApiError(0)."""
        content = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Content-Type": content_type} if content is not None else None
        try:
            resp = await self._http.request(
                method, path, content=content, params=params, headers=headers
            )
        except httpx.HTTPError as exc:
            raise ApiError(method, path, 0, repr(exc)) from exc
        self.requests += 1
        try:
            data = decode(resp.content)
        except ValueError:
            data = None
        return resp.status_code, data

    async def get(self, path: str, params: Mapping[str, str | int] | None = None) -> Any:
        status, body = await self.request("GET", path, params=params)
        if status == 410:
            raise Gone(path)
        if status != 200:
            raise ApiError("GET", path, status, json.dumps(body))
        return body

    async def list_all(
        self, path: str, params: Mapping[str, str | int] | None = None, page: int = 5000
    ) -> tuple[list[dict[str, Any]], str]:
        """Every item of a (paginated) LIST and the list's resourceVersion."""
        query: dict[str, str | int] = {**(params or {}), "limit": page}
        items: list[dict[str, Any]] = []
        rv = ""
        while True:
            body = await self.get(path, query)
            meta = body.get("metadata") or {}
            items.extend(body.get("items") or [])
            rv = str(meta.get("resourceVersion", ""))
            cont = meta.get("continue")
            if not cont:
                return items, rv
            query["continue"] = cont

    async def watch(
        self,
        path: str,
        resource_version: str,
        *,
        server_timeout: int = 300,
        read_timeout: float | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events from ``resource_version`` with bookmarks.

        Ends when the server closes the stream; raises Gone on 410 (as a status or as an
        ERROR event), ApiError on other failures, httpx errors on transport failures
        (including the client read timeout).
        """
        query: dict[str, str | int] = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": server_timeout,
        }
        if read_timeout is None:
            read_timeout = float(server_timeout + 30)
        timeout = httpx.Timeout(30.0, read=read_timeout)
        async with self._watch_http.stream("GET", path, params=query, timeout=timeout) as resp:
            if resp.status_code == 410:
                raise Gone(path)
            if resp.status_code != 200:
                text = (await resp.aread()).decode(errors="replace")
                raise ApiError("WATCH", path, resp.status_code, text)
            # one JSON event per line; split the bytes ourselves (no text decoding, no
            # per-line str objects: cheaper than aiter_lines on the event hot path)
            pending = b""
            async for chunk in resp.aiter_bytes():
                if pending:
                    chunk = pending + chunk
                lines = chunk.split(b"\n")
                pending = lines.pop()
                for line in lines:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        if status.get("code") == 410:
                            raise Gone(path)
                        raise ApiError(
                            "WATCH", path, int(status.get("code") or 0), str(status.get("message"))
                        )
                    yield event
            if pending.strip():
                # a stream cut inside an event: the partial line is not an event
                raise ApiError("WATCH", path, 0, "stream ended inside an event")
