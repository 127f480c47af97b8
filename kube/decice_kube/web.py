"""Plain HTTP(S) on the one HTTP stack of decice (httpx, as :mod:`decice_kube.client`).

For what is not the Kubernetes API: the sim's health and ready probes, a mirror's files,
pinned release downloads, and a JSON service on a TCP port or a unix socket (interLink's
plugin API). Callers catch :class:`WebError`, never an httpx error
(``tests/unit/test_layout.py``).

- :func:`probe`: a loopback GET for a health check; never through a proxy.
- :func:`status_of`: a HEAD, for "is this file on the mirror".
- :func:`stream`: a GET whose body is read in pieces as they arrive, raw as served
  (``Accept-Encoding: identity``, no decoding: a checksum is of the file's bytes);
  redirects are followed, as release hosts redirect.
- :class:`Service`: requests with a JSON body to one local service.

``timeout`` is, as in urllib, the longest wait for one network step (connect, a piece
of the body); a whole-transfer bound is the caller's (``decice.mirror.download``). HTTPS is
checked against the machine's CA store (``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured), as
urllib did, not httpx's bundled one; that context is made once per process (httpx would
load its CA bundle again for every client, about 19 ms each).
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import httpx

__all__ = ["Reply", "Service", "WebError", "WebTimeout", "probe", "status_of", "stream"]

_IDENTITY = {"Accept-Encoding": "identity"}


class WebError(Exception):
    """A request failed: ``status`` is the HTTP status, or None when nothing answered."""

    def __init__(self, url: str, reason: str, status: int | None = None) -> None:
        super().__init__(f"{url}: {reason}")
        self.url, self.reason, self.status = url, reason, status


class WebTimeout(WebError):
    """Nothing arrived for ``timeout`` seconds."""


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


@functools.cache
def _system_tls() -> ssl.SSLContext:
    return ssl.create_default_context()


def _client(timeout: float) -> httpx.Client:
    """For mirror files and downloads: the environment's proxies, redirects followed, the
    bytes as served."""
    return httpx.Client(
        verify=_system_tls(), timeout=timeout, follow_redirects=True, headers=_IDENTITY
    )


def probe(
    url: str, *, timeout: float = 2.0, tls: ssl.SSLContext | None = None
) -> tuple[int, bytes]:
    """GET ``url``: its status and body, or ``(0, b"")`` when nothing answered.

    For health and ready checks on loopback: no proxy from the environment, no redirect.
    ``tls`` verifies (and may present a client certificate); without it an https URL is
    checked against the system's CAs.
    """
    try:
        with httpx.Client(verify=tls or _system_tls(), trust_env=False, timeout=timeout) as http:
            answer = http.get(url)
            return answer.status_code, answer.content
    except (httpx.HTTPError, httpx.InvalidURL, ssl.SSLError, OSError):
        return 0, b""


def status_of(url: str, *, timeout: float) -> int:
    """The HTTP status of a HEAD of ``url`` (redirects followed); WebError when unreachable."""
    try:
        with _client(timeout) as http:
            return http.head(url).status_code
    except httpx.TimeoutException as exc:
        raise WebTimeout(url, f"no answer for {timeout:.0f} s") from exc
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise WebError(url, _reason(exc)) from exc


@contextmanager
def stream(url: str, *, timeout: float) -> Iterator[Iterator[bytes]]:
    """The body of a GET of ``url`` as pieces of bytes, as they arrive.

    WebError with the status for an answer other than 2xx (after redirects); WebTimeout
    when connecting or any piece waits longer than ``timeout``. An error while the caller
    reads the pieces comes back in at the ``yield`` and is mapped here too.
    """
    try:
        with _client(timeout) as http, http.stream("GET", url) as answer:
            if not answer.is_success:
                raise WebError(
                    url,
                    f"HTTP {answer.status_code} {answer.reason_phrase}".rstrip(),
                    answer.status_code,
                )
            yield answer.iter_raw()
    except httpx.TimeoutException as exc:
        raise WebTimeout(url, f"no data for {timeout:.0f} s") from exc
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise WebError(url, f"cannot download: {_reason(exc)}") from exc


@dataclass(frozen=True)
class Reply:
    status: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class Service:
    """Requests to one local service: ``http(s)://host:port`` or ``unix:<socket path>``.

    Bodies are bytes the caller encoded (a GET may carry one, as interLink's plugin API
    wants); every answer, 4xx and 5xx included, is a :class:`Reply`; WebError only when
    nothing answered. Never through a proxy from the environment: the service is local.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        if url.startswith("unix:"):
            transport = httpx.AsyncHTTPTransport(uds=url[len("unix:") :])
            self._http = httpx.AsyncClient(transport=transport, base_url="http://service")
        else:
            self._http = httpx.AsyncClient(base_url=url, trust_env=False)

    async def request(
        self, method: str, path: str, content: bytes, headers: Mapping[str, str], timeout: float
    ) -> Reply:
        try:
            answer = await self._http.request(
                method, path, content=content, headers=dict(headers), timeout=timeout
            )
        except httpx.HTTPError as exc:
            raise WebError(f"{method} {self.url}{path}", repr(exc)) from exc
        return Reply(answer.status_code, answer.content)

    async def aclose(self) -> None:
        await self._http.aclose()
