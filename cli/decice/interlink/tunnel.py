"""The plugin's ssh tunnel to the virtual node's bastion (``serve --tunnel``).

On a real cluster the interLink API runs in the virtual node's pod and calls its plugin
at ``http://localhost:PORT``; the chart's ssh bastion runs in the same pod. The plugin
keeps one ``ssh -N -R 127.0.0.1:PORT:<its unix socket>`` to that bastion, so the login
host needs no open port and the API no token: whoever holds the key reaches the plugin,
and only through the pod's loopback. ssh never prompts (``BatchMode``) and trusts only
the host key in ``--tunnel-known-hosts``. A tunnel that drops is made again, after 1 s
and up to 30 s between tries; ssh's own messages go to the plugin's log.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from decice.interlink.errors import UsageError

log = logging.getLogger("decice.interlink.tunnel")

_TARGET = re.compile(
    r"^(?P<user>[a-z_][a-z0-9_.-]{0,31})@(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*)"
    r"(?::(?P<port>[0-9]{1,5}))?\Z"
)
_PR_SET_PDEATHSIG = 1
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 30.0
STEADY_S = 60.0  # a tunnel that stayed up this long starts the backoff over


@dataclass(frozen=True)
class TunnelSpec:
    user: str
    host: str
    port: int
    key: Path
    known_hosts: Path
    remote_port: int
    socket: str  # the plugin's unix socket the remote port leads to

    def __str__(self) -> str:
        return f"{self.user}@{self.host}:{self.port} (127.0.0.1:{self.remote_port} there)"


def parse_target(text: str) -> tuple[str, str, int]:
    """``USER@HOST[:PORT]`` (an IPv6 address in brackets) -> user, host, port (default 22)."""
    match = _TARGET.match(text)
    port = int(match["port"]) if match and match["port"] else 22
    if not match or not 0 < port < 65536:
        raise UsageError(f"--tunnel {text!r}: use USER@HOST[:PORT], e.g. interlink@10.0.0.5:31022")
    return match["user"], match["host"].strip("[]"), port


def ssh_argv(spec: TunnelSpec, ssh: str = "ssh") -> list[str]:
    """The ssh command: no config file, no agent, no prompt, only this key and host key."""
    return [
        ssh,
        "-N",
        "-T",
        "-F",
        "/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={spec.known_hosts}",
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        f"IdentityFile={spec.key}",
        "-o",
        "IdentityAgent=none",
        "-o",
        "CheckHostIP=no",
        "-o",
        "UpdateHostKeys=no",
        "-o",
        "ExitOnForwardFailure=yes",
        "-o",
        "ServerAliveInterval=15",
        "-o",
        "ServerAliveCountMax=3",
        "-o",
        "ConnectTimeout=10",
        "-p",
        str(spec.port),
        "-R",
        f"127.0.0.1:{spec.remote_port}:{spec.socket}",
        "-l",
        spec.user,
        "--",
        spec.host,
    ]


# resolved here, not in the forked child (no dynamic loading between fork and exec)
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent(parent: int) -> None:
    """In the child: SIGTERM when the thread that started it ends (the plugin killed);
    gone at once when the plugin died before that was set."""
    _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != parent:
        os._exit(1)


class Tunnel:
    """Keeps one ssh remote forward up until :meth:`stop`."""

    def __init__(self, spec: TunnelSpec, ssh: str = "ssh") -> None:
        self.spec = spec
        self.argv = ssh_argv(spec, ssh)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._run, name="tunnel", daemon=True)
        self.starts = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if not self._thread.is_alive():
            return
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
        self._thread.join(timeout)

    def _run(self) -> None:
        delay = BACKOFF_FIRST
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                code: int | str = self._once()
            except OSError as exc:  # fork or exec failed (EAGAIN, EMFILE, ENOMEM...)
                code = f"not started: {exc}"
            if self._stop.is_set():
                break
            if time.monotonic() - started >= STEADY_S:
                delay = BACKOFF_FIRST
            log.warning("tunnel to %s ended (ssh exit %s); again in %.0f s", self.spec, code, delay)
            self._stop.wait(delay)
            delay = min(delay * 2, BACKOFF_MAX)

    def _once(self) -> int:
        with self._lock:
            if self._stop.is_set():
                return 0
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                preexec_fn=functools.partial(_die_with_parent, os.getpid()),  # prctl only
            )
            proc = self._proc
            self.starts += 1
        log.info("tunnel to %s: ssh pid %d", self.spec, proc.pid)
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode(errors="replace").strip()
            if line:
                log.warning("tunnel ssh: %s", line)
        return proc.wait()
