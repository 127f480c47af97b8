"""Who may call the debug endpoints, and how often.

- The metrics/debug server binds to loopback unless told otherwise; a non-loopback
  address is refused without a bearer token (``require_token_off_loopback``).
- The token comes from a file (mode 0600 or stricter, owned by this user or root) or
  from the environment variable ``DECICE_SCHEDULER_DEBUG_TOKEN``; never from the
  command line, where any local user could read it in ``/proc/<pid>/cmdline``.
- With a token, ``/debug/*`` needs ``Authorization: Bearer <token>`` (``BearerAuth``):
  401 without it, 403 with a wrong one. ``/healthz``, ``/readyz`` and ``/metrics``
  stay open: probes and Prometheus read them, and they reveal no object names.
- ``POST /debug/audit`` runs at most once per window (``AuditWindow``); a request
  inside the window is answered 429 with the seconds to wait.
"""

from __future__ import annotations

import hmac
import math
import os
import stat
import threading
import time
from collections.abc import Callable, Mapping

from decice_kube.loopback import is_loopback

__all__ = [
    "MIN_TOKEN_LENGTH",
    "TOKEN_ENV",
    "AuditWindow",
    "BearerAuth",
    "is_loopback",
    "load_token",
    "read_token_file",
    "require_token_off_loopback",
    "validate_token",
]

TOKEN_ENV = "DECICE_SCHEDULER_DEBUG_TOKEN"
MIN_TOKEN_LENGTH = 16


def validate_token(token: str, source: str) -> str:
    """The token without surrounding whitespace; ValueError naming ``source`` when it is
    too short or holds characters an HTTP header cannot carry."""
    token = token.strip()
    if len(token) < MIN_TOKEN_LENGTH:
        raise ValueError(
            f"{source}: the debug token has {len(token)} characters, at least "
            f"{MIN_TOKEN_LENGTH} are needed (e.g. the output of `openssl rand -hex 32`)"
        )
    if not all(33 <= ord(c) <= 126 for c in token):
        raise ValueError(
            f"{source}: the debug token must be printable ASCII without spaces "
            "(it travels in an Authorization header)"
        )
    return token


def read_token_file(path: str) -> str:
    """Read the token from ``path``: a regular file that only its owner (this user or
    root) may read or write; ValueError with the fix otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)  # a FIFO: no wait
    except OSError as exc:
        raise ValueError(f"--debug-token-file {path}: {exc.strerror}") from exc
    try:
        info = os.fstat(fd)  # of the file actually opened
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"--debug-token-file {path}: not a regular file")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise ValueError(
                f"--debug-token-file {path}: mode {mode:04o} lets other users read or "
                f"change the token; run `chmod 600 {path}`"
            )
        if info.st_uid not in (os.geteuid(), 0):
            raise ValueError(
                f"--debug-token-file {path}: owned by uid {info.st_uid}, not by this user "
                f"({os.geteuid()}) or root; `chown` it to the user that runs the scheduler"
            )
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = handle.read(4097)
    finally:
        os.close(fd)
    if len(raw) > 4096:
        raise ValueError(f"--debug-token-file {path}: longer than 4096 bytes")
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as exc:
        raise ValueError(f"--debug-token-file {path}: not ASCII text") from exc
    return validate_token(text, f"--debug-token-file {path}")


def load_token(path: str | None, environ: Mapping[str, str]) -> str | None:
    """The debug token: from ``path`` when given, else from ``TOKEN_ENV`` when set and
    not empty, else None."""
    if path:
        return read_token_file(path)
    value = environ.get(TOKEN_ENV, "")
    if value:
        return validate_token(value, TOKEN_ENV)
    return None


def require_token_off_loopback(host: str, token: str | None) -> None:
    """ValueError when ``host`` is not a loopback address and there is no token."""
    if token is None and not is_loopback(host):
        shown = host or "every interface"
        raise ValueError(
            f"--metrics-host {shown}: a non-loopback address needs a debug token "
            f"(--debug-token-file with a 0600 file, or the environment variable "
            f"{TOKEN_ENV}); or keep the default 127.0.0.1"
        )


class BearerAuth:
    """``check`` answers 200 (allowed), 401 (no bearer token) or 403 (a wrong one).
    Without a configured token every request is allowed (the server is on loopback)."""

    def __init__(self, token: str | None) -> None:
        self._token = None if token is None else token.encode()

    @property
    def enabled(self) -> bool:
        return self._token is not None

    def __repr__(self) -> str:  # never the token
        return f"BearerAuth(enabled={self.enabled})"

    def check(self, header: str | None) -> int:
        if self._token is None:
            return 200
        scheme, _, given = (header or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return 401
        return 200 if hmac.compare_digest(given.strip().encode(), self._token) else 403


class AuditWindow:
    """At most one grant per ``seconds`` (counted from the grant); thread-safe.

    ``acquire`` returns 0.0 when granted, else the seconds until the next grant.
    ``seconds`` 0 grants every request.
    """

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        if seconds < 0:
            raise ValueError("the audit window must be >= 0 seconds")
        self.seconds = seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._next = -math.inf

    def acquire(self) -> float:
        with self._lock:
            now = self._clock()
            if now < self._next:
                return self._next - now
            self._next = now + self.seconds
            return 0.0
