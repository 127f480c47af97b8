"""Pods, nodes and network faults for the decice-scheduler integration tests that bring
their own node groups (test_scheduler_cases.py, test_scheduler_churn.py).

The processes and the environment come from :mod:`tests.integration.simsupport`; what is
here: node groups, raw-JSON pods (so fields the typed client does not know, such as an
init container's ``restartPolicy``, reach the API), node save/delete/recreate, and a TCP
proxy that can cut its connections silently.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.integration.simsupport import GROUP_LABEL, SCHED, SchedEnv
from tests.support import wait_for

__all__ = [
    "BlackholeProxy",
    "bound_node",
    "cleanup_pods",
    "create_pod",
    "failed_scheduling_event",
    "group",
    "pod",
    "raw_json",
    "read_pod",
    "recreate_node",
    "saved_node",
    "wait_bound",
    "wait_gone",
    "wait_running",
]


def group(
    prefix: str,
    count: int,
    cpu: str = "2",
    memory: str = "8Gi",
    **extra: str,
) -> dict[str, Any]:
    """A node group for the agent's nodes file (``extra``: more capacity, e.g. gpus)."""
    capacity = {"cpu": cpu, "memory": memory, "pods": "110", **extra}
    return {"name_prefix": prefix, "count": count, "capacity": capacity}


# ---------------------------------------------------------------- environment


def cleanup_pods(env: SchedEnv) -> None:
    """Remove every pod of the test namespaces (finalizers dropped, grace 0)."""
    for ns in env.namespaces:
        for p in raw_json(env.core.list_namespaced_pod(ns, _preload_content=False))["items"]:
            name = p["metadata"]["name"]
            if p["metadata"].get("finalizers"):
                with contextlib.suppress(ApiException):
                    env.core.patch_namespaced_pod(name, ns, {"metadata": {"finalizers": None}})
            with contextlib.suppress(ApiException):
                env.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    wait_for(
        "pods gone",
        lambda: not any(env.core.list_namespaced_pod(ns).items for ns in env.namespaces),
        timeout=60,
    )


# ---------------------------------------------------------------- pods (raw JSON)


def pod(
    name: str,
    grp: str | None,
    *,
    cpu: str | None = "100m",
    memory: str | None = None,
    gpu: int = 0,
    scheduler: str = SCHED,
    annotations: Mapping[str, str] | None = None,
    init: Sequence[Mapping[str, Any]] = (),
    runtime_class: str | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod as raw JSON; ``init`` are init containers as dicts (``request``: cpu,
    ``sidecar``: True adds ``restartPolicy: Always``)."""
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    if gpu:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpu)
    resources: dict[str, Any] = {"requests": requests}
    if limits:
        resources["limits"] = limits
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 30,
        "containers": [
            {"name": "main", "image": "registry.invalid/none:1", "resources": resources}
        ],
    }
    if selector is not None:
        spec["nodeSelector"] = dict(selector)
    elif grp is not None:
        spec["nodeSelector"] = {GROUP_LABEL: grp}
    if init:
        spec["initContainers"] = [
            {
                "name": f"init{i}",
                "image": "registry.invalid/none:1",
                "resources": {"requests": {"cpu": str(c["request"])}},
                **({"restartPolicy": "Always"} if c.get("sidecar") else {}),
            }
            for i, c in enumerate(init)
        ]
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def raw_json(resp: Any) -> Any:
    """The decoded body of a ``_preload_content=False`` call (typed as a model by the
    client, but an HTTP response)."""
    return json.loads(resp.data)


def create_pod(core: client.CoreV1Api, ns: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """POST a raw pod; returns the stored object as JSON."""
    resp = core.create_namespaced_pod(ns, body, _preload_content=False)  # type: ignore[arg-type]
    return dict(raw_json(resp))


def read_pod(core: client.CoreV1Api, ns: str, name: str) -> dict[str, Any] | None:
    try:
        resp = core.read_namespaced_pod(name, ns, _preload_content=False)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return dict(raw_json(resp))


def bound_node(core: client.CoreV1Api, ns: str, name: str) -> str | None:
    p = read_pod(core, ns, name)
    return None if p is None else (p.get("spec") or {}).get("nodeName")


def wait_bound(core: client.CoreV1Api, ns: str, name: str, timeout: float = 30.0) -> str:
    return str(wait_for(f"{ns}/{name} bound", lambda: bound_node(core, ns, name), timeout))


def wait_running(core: client.CoreV1Api, ns: str, name: str, timeout: float = 30.0) -> None:
    def running() -> bool:
        p = read_pod(core, ns, name)
        return p is not None and (p.get("status") or {}).get("phase") == "Running"

    wait_for(f"{ns}/{name} Running", running, timeout)


def wait_gone(core: client.CoreV1Api, ns: str, name: str, timeout: float = 30.0) -> None:
    wait_for(f"{ns}/{name} gone", lambda: read_pod(core, ns, name) is None, timeout)


def failed_scheduling_event(core: client.CoreV1Api, ns: str, name: str) -> Callable[[], Any]:
    """A probe for ``wait_for``: the first FailedScheduling event of pod ``ns/name``."""

    def event() -> Any:
        items = core.list_namespaced_event(
            ns, field_selector=f"involvedObject.name={name},reason=FailedScheduling"
        ).items
        return items[0] if items else None

    return event


# ---------------------------------------------------------------- nodes


def saved_node(core: client.CoreV1Api, name: str) -> dict[str, Any]:
    """A node's JSON, ready to POST again after it was deleted (server fields dropped)."""
    raw = raw_json(core.read_node(name, _preload_content=False))
    meta = raw["metadata"]
    raw["metadata"] = {k: meta[k] for k in ("name", "labels", "annotations") if meta.get(k)}
    raw["spec"] = {k: v for k, v in (raw.get("spec") or {}).items() if k == "taints"}
    return dict(raw)


def recreate_node(core: client.CoreV1Api, body: Mapping[str, Any]) -> None:
    """POST a saved node again (status included, like the agent registers nodes)."""
    core.create_node(body, _preload_content=False)  # type: ignore[arg-type]


# ---------------------------------------------------------------- silent partition


class BlackholeProxy:
    """A TCP forwarder to the API server whose connections can be cut *silently*.

    ``partition()`` stops forwarding on every open connection but keeps the sockets open
    (no FIN, no RST: what a dead NAT entry or a pulled cable looks like) and refuses
    nothing; new connections made afterwards are forwarded normally. A client that
    keeps using an old connection waits forever unless it has its own timeouts and
    then opens a new connection.
    """

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self._sel = selectors.DefaultSelector()
        self._pairs: dict[socket.socket, socket.socket] = {}
        self._dead: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.accepted = 0
        self._thread = threading.Thread(target=self._run, name="blackhole", daemon=True)

    def start(self) -> BlackholeProxy:
        self.listener.setblocking(False)
        self._sel.register(self.listener, selectors.EVENT_READ)
        self._thread.start()
        return self

    def kubeconfig(self, original: Path, target: Path) -> Path:
        """A copy of ``original`` whose server goes through the proxy."""
        raw = yaml.safe_load(original.read_text())
        for cluster in raw.get("clusters") or ():
            cluster["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        target.write_text(yaml.safe_dump(raw))
        target.chmod(0o600)
        return target

    def partition(self) -> int:
        """Go silent on every open connection; returns how many were cut."""
        with self._lock:
            for sock in list(self._pairs):
                if sock not in self._dead:
                    with contextlib.suppress(KeyError, ValueError):
                        self._sel.unregister(sock)
                    self._dead.add(sock)
            return len(self._dead) // 2

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with self._lock:
            for sock in list(self._pairs):
                sock.close()
        self.listener.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._sel.select(timeout=0.2):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                with self._lock:
                    if sock is self.listener:
                        self._accept()
                    elif sock in self._pairs and sock not in self._dead:
                        # (not in _pairs: closed with its peer earlier in this batch)
                        self._forward(sock)

    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError):
            conn, _ = self.listener.accept()
            upstream = socket.create_connection(self.target)
            self.accepted += 1
            for s in (conn, upstream):
                s.setblocking(True)
                s.settimeout(5)
            self._pairs[conn], self._pairs[upstream] = upstream, conn
            self._sel.register(conn, selectors.EVENT_READ)
            self._sel.register(upstream, selectors.EVENT_READ)

    def _forward(self, sock: socket.socket) -> None:
        peer = self._pairs[sock]
        try:
            data = sock.recv(65536)
            if data:
                peer.sendall(data)
                return
        except OSError:
            pass
        for s in (sock, peer):
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(s)
            self._pairs.pop(s, None)
            self._dead.discard(s)
            s.close()
