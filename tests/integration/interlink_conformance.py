"""A client that calls a plugin the way interLink 0.6.2's API server does, written from
interLink's Go types (``pkg/interlink/types.go``) and handlers (``pkg/interlink/api``),
not from decice's plugin code:

- no Authorization header (``ReqWithError`` sets only ``Content-Type`` and
  ``InterLink-Http-Session``);
- ``POST /create`` with one ``RetrievedPodData`` {pod, container: [RetrievedContainer
  {name, configMaps, projectedvolumemaps, secrets, emptyDirs}]} -> ``CreateStruct``
  {PodUID, PodJID};
- ``GET /status`` with ``[]*v1.Pod`` -> ``[]PodStatus`` {name, UID, namespace, JID,
  containers, initContainers};
- ``GET /getLogs`` with ``LogStruct`` {Namespace, PodUID, PodName, ContainerName, Opts:
  ContainerLogOpts {Tail, Bytes, Timestamps, Follow, Previous, SinceSeconds, SinceTime}};
  every field sent (no omitempty), a zero SinceTime as Go marshals it; the body streamed;
- ``POST /delete`` with a v1.Pod.

Pods are whole v1.Pod objects as the API server stores them (status, defaults).
"""

from __future__ import annotations

import http.client
import json
import socket
import uuid
from dataclasses import dataclass
from typing import Any

GO_ZERO_TIME = "0001-01-01T00:00:00Z"


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


@dataclass
class InterLink:
    """The calls interLink makes, over a unix socket (``SidecarURL: unix://...``) or
    what reaches the plugin's TCP port (here: an ssh forward to its loopback)."""

    socket_path: str
    session: str = "conformance"

    def _call(self, method: str, path: str, body: Any, timeout: float = 60) -> tuple[int, bytes]:
        conn = _UnixHTTP(self.socket_path, timeout)
        headers = {"Content-Type": "application/json", "InterLink-Http-Session": self.session}
        conn.request(method, path, json.dumps(body).encode(), headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, data

    def create(self, pod: dict[str, Any], containers: list[dict[str, Any]] | None = None) -> Any:
        names = [
            c["name"] for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]
        ]
        given = {c["name"]: c for c in containers or []}
        retrieved = [
            {
                "name": n,
                "configMaps": given.get(n, {}).get("configMaps"),
                "projectedvolumemaps": given.get(n, {}).get("projectedvolumemaps"),
                "secrets": given.get(n, {}).get("secrets"),
                "emptyDirs": given.get(n, {}).get("emptyDirs"),
            }
            for n in names
        ]
        code, data = self._call("POST", "/create", {"pod": pod, "container": retrieved})
        return code, json.loads(data) if code == 200 else data.decode()

    def status(self, pods: list[dict[str, Any]]) -> Any:
        code, data = self._call("GET", "/status", pods)
        assert code == 200, data
        return json.loads(data)

    def delete(self, pod: dict[str, Any]) -> tuple[int, str]:
        code, data = self._call("POST", "/delete", pod)
        return code, data.decode()

    def logs(
        self,
        pod: dict[str, Any],
        container: str,
        *,
        tail: int = 0,
        limit_bytes: int = 0,
        timestamps: bool = False,
        follow: bool = False,
        previous: bool = False,
        since_seconds: int = 0,
        since_time: str = GO_ZERO_TIME,
        timeout: float = 120,
    ) -> tuple[int, list[bytes]]:
        """The status and the body's pieces as they arrived (interLink copies each to the
        kubelet and flushes)."""
        meta = pod["metadata"]
        body = {
            "Namespace": meta["namespace"],
            "PodUID": meta["uid"],
            "PodName": meta["name"],
            "ContainerName": container,
            "Opts": {
                "Tail": tail,
                "Bytes": limit_bytes,
                "Timestamps": timestamps,
                "Follow": follow,
                "Previous": previous,
                "SinceSeconds": since_seconds,
                "SinceTime": since_time,
            },
        }
        conn = _UnixHTTP(self.socket_path, timeout)
        conn.request("GET", "/getLogs", json.dumps(body).encode(), {"InterLink-Http-Session": "x"})
        resp = conn.getresponse()
        pieces = []
        while piece := resp.read1(4096):
            pieces.append(piece)
        conn.close()
        return resp.status, pieces


def v1_pod(
    name: str,
    containers: list[dict[str, Any]],
    *,
    namespace: str = "hpc",
    annotations: dict[str, str] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    node: str = "slurm-vk",
) -> dict[str, Any]:
    """A v1.Pod as the API server hands it to a virtual kubelet (defaults filled in)."""
    filled = []
    for c in containers:
        filled.append(
            {
                "image": "docker.io/library/busybox:1.36",
                "imagePullPolicy": "IfNotPresent",
                "resources": {},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                **c,
            }
        )
    spec: dict[str, Any] = {
        "containers": filled,
        "nodeName": node,
        "restartPolicy": "Never",
        "dnsPolicy": "ClusterFirst",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [
            {
                "key": "virtual-node.interlink/no-schedule",
                "operator": "Exists",
                "effect": "NoSchedule",
            }
        ],
        "volumes": volumes or [],
    }
    if init:
        spec["initContainers"] = init
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": str(uuid.uuid4()),
            "resourceVersion": "1",
            "creationTimestamp": "2026-11-28T10:00:00Z",
            "annotations": annotations or {},
            "labels": {"app": name},
        },
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }
