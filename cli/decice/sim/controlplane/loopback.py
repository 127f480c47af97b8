"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager
and (optionally) the stock kube-scheduler, started detached and recorded in ``data_dir``.

Layout of ``data_dir``::

    state.json          ports, pids (+ start time, executable) and options of the processes
    admin.kubeconfig    cluster-admin (system:masters) client certificate
    pki/                private CAs, serving/client certificates, service-account keys
    etcd/               etcd data
    logs/<name>.log     output of each process (appended across restarts)

Every directory is 0700 and every file 0600 (enforced at each start, also on files an
older version left; the processes run with umask 077).

Behaviour choices (measured on a 2-core Debian 12 machine with this recipe):

- Everything listens on 127.0.0.1 only, on ports picked free at the first start (reused
  on restart when still free).
- etcd's client and peer URLs are TLS with client-certificate auth against etcd's own CA
  (see decice.sim.controlplane.pki): only the apiserver's etcd client certificate opens it.
- The apiserver has no anonymous user (``--anonymous-auth=false``): every request,
  health checks included, needs a client certificate (decice's probes use the admin one).
- With the controller-manager, the ``ServiceAccount`` admission plugin stays on: the
  controller-manager gets the service-account private key and the CA, so its token and
  service-account controllers create each namespace's ``default`` account and token.
  Without it, ``ServiceAccount`` is disabled (pods would never be admitted).
- ``node_lifecycle`` (default True) runs the node-lifecycle controller and keeps the
  ``TaintNodesByCondition`` admission plugin: like a real cluster, a new Node is tainted
  ``not-ready:NoSchedule`` until its Ready condition is True, and a Node whose heartbeats
  (Lease + Ready) stop for 40 s is marked Unknown and tainted unreachable; pods on it are
  evicted after 5 min. The simulator's node agent must send heartbeats. With
  ``node_lifecycle=False`` (or no controller-manager) both are off: Nodes created with
  Ready=True stay Ready without heartbeats.
- Leader election is off (one instance of each), so a restart does not wait on a lease.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import ssl
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decice import filelock
from decice.errors import InputError, RunFailedError
from decice.sim.binaries.resolve import BinarySet
from decice.sim.controlplane.pki import ETCD_LEAVES, Pki, ensure_pki, write_kubeconfig
from decice.sim.procs import (
    ProcessRecord,
    is_alive,
    private_dir,
    spawn,
    tail,
    terminate,
    write_private,
)
from decice_kube import web

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
MARKER = ".decice-sim"
SERVICE_CIDR = "10.0.0.0/24"
ETCD_QUOTA_BYTES = 8 * 1024**3
PORT_NAMES = ("etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler")
ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
# raised when the security-relevant flags change: a running control plane started with
# older flags is then restarted (its data kept) rather than kept as it is
SECURITY_LEVEL = 1


class ControlPlaneError(RunFailedError):
    """The control plane could not be started, checked or stopped."""


class PortTakenError(ControlPlaneError):
    """A component could not bind its port: another process took it after it was picked."""


# what etcd and the Kubernetes components log when their port is taken (Go's net package)
PORT_TAKEN = "bind: address already in use"
# starts on fresh ports after a taken one before giving up
PORT_ATTEMPTS = 3


@dataclass(frozen=True)
class ControlPlaneInfo:
    """How to reach a running control plane."""

    data_dir: Path
    server: str
    kubeconfig: Path
    ca_cert: Path
    etcd_endpoint: str
    ports: Mapping[str, int]
    processes: Mapping[str, ProcessRecord]


@dataclass(frozen=True)
class ComponentStatus:
    """One process: is it (still) ours and running, does it answer its health check."""

    name: str
    pid: int
    alive: bool
    healthy: bool
    log: str


@dataclass(frozen=True)
class ControlPlaneStatus:
    """Every recorded process; ``running`` when all are alive and healthy."""

    data_dir: Path
    server: str | None
    components: list[ComponentStatus] = field(default_factory=list)

    @property
    def running(self) -> bool:
        """True when there are processes and each is alive and healthy."""
        return bool(self.components) and all(c.alive and c.healthy for c in self.components)


class ControlPlane:
    """Start, check and stop one local control plane living in ``data_dir``."""

    def __init__(
        self,
        data_dir: Path,
        binaries: BinarySet,
        *,
        controller_manager: bool = True,
        scheduler: bool = False,
        node_lifecycle: bool = True,
        startup_timeout: float = 120.0,
        extra_args: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.data_dir = data_dir.resolve()
        self.binaries = binaries
        self.controller_manager = controller_manager
        self.scheduler = scheduler
        self.node_lifecycle = node_lifecycle and controller_manager
        self.startup_timeout = startup_timeout
        self.extra_args = {k: list(v) for k, v in (extra_args or {}).items()}
        unknown = set(self.extra_args) - set(ORDER)
        if unknown:
            raise InputError(
                f"extra_args for unknown components {sorted(unknown)}; use {', '.join(ORDER)}"
            )
        needed = ["etcd", "kube-apiserver"]
        needed += ["kube-controller-manager"] if controller_manager else []
        needed += ["kube-scheduler"] if scheduler else []
        missing = [n for n in needed if n not in binaries]
        if missing:
            raise InputError(
                f"binaries missing for the control plane: {', '.join(missing)}; "
                "resolve them with decice.sim.binaries.resolve.resolve_binaries"
            )
        self.components = tuple(n for n in ORDER if n in needed)

    # ----------------------------------------------------------------- public API

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (exists after the first start)."""
        return self.data_dir / "admin.kubeconfig"

    def start(self) -> ControlPlaneInfo:
        """Start every component and wait until each is healthy; idempotent.

        When the recorded processes are all running and healthy, returns their info
        without touching them. Otherwise stops any leftovers and starts afresh (the
        etcd data is kept). On failure every process started here is stopped again and
        ControlPlaneError carries the tail of the failing component's log.
        """
        private_dir(self.data_dir)
        _touch_private(self.data_dir / MARKER)
        with self._lock():
            state = _read_state(self.data_dir)
            if state is not None:
                current = self._status_from(state)
                names = {c.name for c in current.components}
                same = state.get("options") == self._options()
                if current.running and names == set(self.components) and same:
                    return self._info(state)
                if current.components:
                    log.warning(
                        "restarting the control plane in %s (%s)",
                        self.data_dir,
                        "options changed"
                        if same is False and current.running
                        else "not every component is running and healthy",
                    )
                self._stop_recorded(state, timeout=15.0)
            return self._start_fresh(state)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop every recorded process (TERM, then KILL after ``timeout``); idempotent."""
        if not self.data_dir.exists():
            return
        with self._lock():
            state = _read_state(self.data_dir)
            if state is not None:
                self._stop_recorded(state, timeout=timeout)

    def status(self) -> ControlPlaneStatus:
        """Liveness and health of every recorded process (no changes)."""
        state = _read_state(self.data_dir) if self.data_dir.exists() else None
        if state is None:
            return ControlPlaneStatus(self.data_dir, None, [])
        return self._status_from(state)

    def info(self) -> ControlPlaneInfo | None:
        """Connection info from the state file (None before the first start)."""
        state = _read_state(self.data_dir) if self.data_dir.exists() else None
        return self._info(state) if state is not None and state.get("processes") else None

    # ----------------------------------------------------------------- start

    def _options(self) -> dict[str, Any]:
        """What start() compares to decide whether running processes can be kept."""
        return {
            "controller_manager": self.controller_manager,
            "scheduler": self.scheduler,
            "node_lifecycle": self.node_lifecycle,
            "security": SECURITY_LEVEL,
            "extra_args": self.extra_args,
            "binaries": {n: str(self.binaries.path(n)) for n in self.components},
        }

    def _start_fresh(self, previous: dict[str, Any] | None) -> ControlPlaneInfo:
        """Start every component; when one finds its port taken (picked free, then taken by
        another process before the component bound it), start again on fresh ports."""
        wanted = dict((previous or {}).get("ports", {}))
        attempt = 1
        while True:
            try:
                return self._start_on(_pick_ports(wanted))
            except PortTakenError as exc:
                if attempt == PORT_ATTEMPTS:
                    raise
                log.warning("%s; starting again on fresh ports", str(exc).splitlines()[0])
                wanted, attempt = {}, attempt + 1

    def _start_on(self, ports: dict[str, int]) -> ControlPlaneInfo:
        pki = ensure_pki(self.data_dir / "pki")
        server = f"https://127.0.0.1:{ports['apiserver']}"
        write_kubeconfig(self.kubeconfig, server, pki, "admin", "decice-admin")
        kcm_kc = write_kubeconfig(
            self.data_dir / "controller-manager.kubeconfig",
            server,
            pki,
            "controller-manager",
            "system:kube-controller-manager",
        )
        sched_kc = write_kubeconfig(
            self.data_dir / "scheduler.kubeconfig",
            server,
            pki,
            "scheduler",
            "system:kube-scheduler",
        )
        _tighten(self.data_dir)
        state: dict[str, Any] = {
            "version": 1,
            "server": server,
            "ports": ports,
            "options": self._options(),
            "processes": {},
        }
        argvs = {
            "etcd": self._etcd_args(pki, ports),
            "kube-apiserver": self._apiserver_args(pki, ports),
            "kube-controller-manager": self._kcm_args(pki, ports, kcm_kc),
            "kube-scheduler": self._scheduler_args(ports, sched_kc),
        }
        checks: dict[str, Callable[[], bool]] = {
            "etcd": lambda: _etcd_healthy(pki, ports["etcd"]),
            "kube-apiserver": lambda: _apiserver_ready(pki, ports["apiserver"]),
            "kube-controller-manager": lambda: _loopback_healthz(ports["controller-manager"]),
            "kube-scheduler": lambda: _loopback_healthz(ports["scheduler"]),
        }
        try:
            for name in self.components:
                rec = spawn(
                    name,
                    argvs[name] + self.extra_args.get(name, []),
                    self.data_dir / "logs" / f"{name}.log",
                    cwd=self.data_dir,
                )
                state["processes"][name] = rec.to_json()
                _write_state(self.data_dir, state)
                self._wait_healthy(rec, checks[name])
        except BaseException:
            self._stop_recorded(state, timeout=10.0)
            raise
        log.info("control plane up at %s (data %s)", server, self.data_dir)
        return self._info(state)

    def _wait_healthy(self, rec: ProcessRecord, check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if not is_alive(rec):
                last = tail(rec.log)
                error = PortTakenError if PORT_TAKEN in last else ControlPlaneError
                raise error(f"{rec.name} exited during start-up; last lines of {rec.log}:\n{last}")
            if check():
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{rec.name} (pid {rec.pid}) not healthy after {self.startup_timeout:.0f} s; "
                    f"last lines of {rec.log}:\n{tail(rec.log)}"
                )
            time.sleep(0.25)

    def _etcd_args(self, pki: Pki, ports: Mapping[str, int]) -> list[str]:
        client = f"https://127.0.0.1:{ports['etcd']}"
        peer = f"https://127.0.0.1:{ports['etcd-peer']}"
        server = pki.pair("etcd-server")
        peer_pair = pki.pair("etcd-peer")
        return [
            str(self.binaries.path("etcd")),
            "--name=decice-sim",
            f"--data-dir={self.data_dir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=decice-sim={peer}",
            f"--cert-file={server.cert}",
            f"--key-file={server.key}",
            f"--trusted-ca-file={pki.etcd_ca.cert}",
            "--client-cert-auth=true",
            f"--peer-cert-file={peer_pair.cert}",
            f"--peer-key-file={peer_pair.key}",
            f"--peer-trusted-ca-file={pki.etcd_ca.cert}",
            "--peer-client-cert-auth=true",
            f"--quota-backend-bytes={ETCD_QUOTA_BYTES}",
            "--auto-compaction-mode=periodic",
            "--auto-compaction-retention=5m",
        ]

    def admission_plugins(self) -> tuple[list[str], list[str]]:
        """(enabled, disabled) admission plugins for this configuration."""
        disabled = []
        if not self.node_lifecycle:
            disabled.append("TaintNodesByCondition")
        if not self.controller_manager:
            disabled.append("ServiceAccount")
        return ["NamespaceLifecycle", "NodeRestriction"], disabled

    def _apiserver_args(self, pki: Pki, ports: Mapping[str, int]) -> list[str]:
        enabled, disabled = self.admission_plugins()
        client = pki.pair("etcd-client")
        serving = pki.pair("apiserver")
        args = [
            str(self.binaries.path("kube-apiserver")),
            f"--etcd-servers=https://127.0.0.1:{ports['etcd']}",
            f"--etcd-cafile={pki.etcd_ca.cert}",
            f"--etcd-certfile={client.cert}",
            f"--etcd-keyfile={client.key}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports['apiserver']}",
            f"--tls-cert-file={serving.cert}",
            f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={pki.ca.cert}",
            "--anonymous-auth=false",
            f"--cert-dir={self.data_dir / 'apiserver-certs'}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            f"--enable-admission-plugins={','.join(enabled)}",
            "--profiling=false",
        ]
        if disabled:
            args.append(f"--disable-admission-plugins={','.join(disabled)}")
        if _minor(self.binaries.version("kube-apiserver")) < 24:
            args.append("--insecure-port=0")  # 1.20 would otherwise serve plain HTTP on 8080
        return args

    def _kcm_args(self, pki: Pki, ports: Mapping[str, int], kubeconfig: Path) -> list[str]:
        controllers = "*,bootstrapsigner,tokencleaner"
        if not self.node_lifecycle:
            controllers += ",-nodelifecycle"
        args = [
            *self._client_args("kube-controller-manager", kubeconfig, ports["controller-manager"]),
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca.cert}",
            f"--cluster-signing-cert-file={pki.ca.cert}",
            f"--cluster-signing-key-file={pki.ca.key}",
            f"--controllers={controllers}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--kube-api-qps=100",
            "--kube-api-burst=200",
        ]
        if _minor(self.binaries.version("kube-controller-manager")) < 24:
            args.append("--port=0")  # no insecure port (1.20 default 10252 would collide)
        return args

    def _client_args(self, binary: str, kubeconfig: Path, port: int) -> list[str]:
        """What controller-manager and scheduler share: API access, a loopback port, no election."""
        cert_dir = self.data_dir / f"{binary.removeprefix('kube-')}-certs"
        return [
            str(self.binaries.path(binary)),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={cert_dir}",
            "--leader-elect=false",
        ]

    def _scheduler_args(self, ports: Mapping[str, int], kubeconfig: Path) -> list[str]:
        args = self._client_args("kube-scheduler", kubeconfig, ports["scheduler"])
        if _minor(self.binaries.version("kube-scheduler")) < 23:
            args.append("--port=0")  # no insecure port (1.20 default 10251 would collide)
        return args

    # ----------------------------------------------------------------- stop / status

    def _stop_recorded(self, state: dict[str, Any], *, timeout: float) -> None:
        records = [ProcessRecord.from_json(v) for v in state.get("processes", {}).values()]
        errors = []
        for rec in sorted(records, key=lambda r: -_order(r.name)):  # reverse start order
            try:
                if not terminate(rec, timeout):
                    log.info("%s (pid %d) was no longer running", rec.name, rec.pid)
            except RuntimeError as exc:
                errors.append(str(exc))
                continue
            state["processes"].pop(rec.name, None)
            _write_state(self.data_dir, state)
        if errors:
            raise ControlPlaneError("; ".join(errors))

    def _status_from(self, state: Mapping[str, Any]) -> ControlPlaneStatus:
        pki = Pki(self.data_dir / "pki")
        ports = state.get("ports", {})
        out = []
        for name, raw in sorted(state.get("processes", {}).items(), key=lambda i: _order(i[0])):
            rec = ProcessRecord.from_json(raw)
            alive = is_alive(rec)
            healthy = alive and _check(name, pki, ports)
            out.append(ComponentStatus(name, rec.pid, alive, healthy, rec.log))
        return ControlPlaneStatus(self.data_dir, state.get("server"), out)

    def _info(self, state: Mapping[str, Any]) -> ControlPlaneInfo:
        ports = {str(k): int(v) for k, v in state["ports"].items()}
        return ControlPlaneInfo(
            data_dir=self.data_dir,
            server=str(state["server"]),
            kubeconfig=self.kubeconfig,
            ca_cert=Pki(self.data_dir / "pki").ca.cert,
            etcd_endpoint=f"https://127.0.0.1:{ports['etcd']}",
            ports=ports,
            processes={n: ProcessRecord.from_json(r) for n, r in state["processes"].items()},
        )

    def _lock(self) -> AbstractContextManager[None]:
        return filelock.exclusive(self.data_dir / ".lock")


def remove_data_dir(data_dir: Path) -> None:
    """Delete a stopped control plane's ``data_dir``.

    Refuses while any recorded process still runs, and refuses a non-empty directory that
    is not a sim data dir (no marker), so a wrong path cannot wipe unrelated files.
    """
    if not data_dir.exists():
        return
    if not (data_dir / MARKER).exists() and any(data_dir.iterdir()):
        raise InputError(f"{data_dir} is not a decice sim data directory; not removing it")
    state = _read_state(data_dir)
    if state is not None:
        running = [
            f"{r.name} (pid {r.pid})"
            for r in (ProcessRecord.from_json(v) for v in state.get("processes", {}).values())
            if is_alive(r)
        ]
        if running:
            raise ControlPlaneError(
                f"{data_dir}: still running: {', '.join(running)}; stop the control plane first"
            )
    shutil.rmtree(data_dir)


# --------------------------------------------------------------------- helpers


def _order(name: str) -> int:
    return ORDER.index(name) if name in ORDER else len(ORDER)


def _minor(version: str) -> int:
    """Minor version of 'v1.20.2' (99 when unknown: assume a current release)."""
    parts = version.lstrip("v").split(".")
    try:
        return int(parts[1])
    except (IndexError, ValueError):
        return 99


def _read_state(data_dir: Path) -> dict[str, Any] | None:
    path = data_dir / STATE_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise ControlPlaneError(
            f"{path} is corrupt ({exc}); stop the processes by hand and remove {data_dir}"
        ) from exc
    return data if isinstance(data, dict) else None


def _write_state(data_dir: Path, state: Mapping[str, Any]) -> None:
    write_private(data_dir / STATE_FILE, json.dumps(state, indent=2) + "\n")


def _touch_private(path: Path) -> None:
    """Create an empty 0600 file unless it exists (a symlink there is left alone)."""
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))


def _tighten(root: Path) -> None:
    """Directories 0700, regular files without group/other bits, below ``root`` (what an
    older version left); symlinks are neither followed nor changed."""
    for dirpath, _dirs, files in os.walk(root):
        Path(dirpath).chmod(0o700)
        for name in files:
            path = Path(dirpath, name)
            mode = path.lstat().st_mode
            if stat.S_ISREG(mode) and mode & 0o077:
                path.chmod(stat.S_IMODE(mode) & 0o700)


def _pick_ports(previous: Mapping[str, int]) -> dict[str, int]:
    """Previous ports when all are still free, else fresh free loopback ports."""
    if set(previous) >= set(PORT_NAMES) and all(_port_free(previous[n]) for n in PORT_NAMES):
        return {n: int(previous[n]) for n in PORT_NAMES}
    socks = []
    try:
        for _ in PORT_NAMES:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return {n: s.getsockname()[1] for n, s in zip(PORT_NAMES, socks, strict=True)}
    finally:
        for s in socks:
            s.close()


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # like Go's listeners: connections of a stopped process in TIME_WAIT do not block
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", int(port)))
        except OSError:
            return False
    return True


def _check(name: str, pki: Pki, ports: Mapping[str, int]) -> bool:
    if name == "etcd":
        return _etcd_healthy(pki, ports["etcd"])
    if name == "kube-apiserver":
        return _apiserver_ready(pki, ports["apiserver"])
    key = "controller-manager" if name == "kube-controller-manager" else "scheduler"
    return _loopback_healthz(ports[key])


def _client_context(pki: Pki, leaf: str) -> ssl.SSLContext | None:
    """TLS client context with ``leaf``'s certificate (None when its files are missing).
    A control plane an older version started has no etcd CA: the cluster CA signed all."""
    ca = pki.etcd_ca if leaf in ETCD_LEAVES and pki.etcd_ca.cert.exists() else pki.ca
    pair = pki.pair(leaf)
    try:
        ctx = ssl.create_default_context(cafile=str(ca.cert))
        ctx.load_cert_chain(str(pair.cert), str(pair.key))
    except (OSError, ssl.SSLError):
        return None
    return ctx


def _get(url: str, ctx: ssl.SSLContext | None) -> tuple[int, bytes]:
    return (0, b"") if ctx is None else web.probe(url, tls=ctx)


def _etcd_healthy(pki: Pki, port: int) -> bool:
    status, body = _get(f"https://127.0.0.1:{port}/health", _client_context(pki, "etcd-client"))
    if status != 200:
        return False
    with suppress(ValueError):
        return str(json.loads(body).get("health")) == "true"
    return False


def _apiserver_ready(pki: Pki, port: int) -> bool:
    status, _ = _get(f"https://127.0.0.1:{port}/readyz", _client_context(pki, "admin"))
    return status == 200


def _loopback_healthz(port: int) -> bool:
    """controller-manager/scheduler serve /healthz with a self-signed certificate."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    status, _ = _get(f"https://127.0.0.1:{port}/healthz", ctx)
    return status == 200
