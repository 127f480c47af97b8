"""The objects simulated nodes consist of: Node JSON, pod status patches, the kubelet's
admission verdict, and the pod annotations that drive a simulated workload.

Naming: the nodes of a group are ``<name_prefix>-<i>`` with ``i`` from **0** to
``count - 1`` (like KWOK's ``kwok-node-0``). Each Node carries the labels
``decice.io/sim=true`` and ``decice.io/sim-group=<name_prefix>``; only nodes with both
are ever deleted by the agent.

Workload annotations on a pod (see :func:`workload_of`):

- ``decice.io/sim-duration``: a Go duration (``500ms``, ``30s``, ``2m``, ``1h30m``); the
  pod's containers terminate that long after the pod started running;
- ``decice.io/sim-exit-code``: the containers' exit code when they terminate (default 0).
  0 makes the pod ``Succeeded``, anything else ``Failed``. Given without a duration the
  pod terminates right after it started. ``restartPolicy`` is not simulated: a pod that
  terminates ends in a terminal phase even with ``restartPolicy: Always``.

A pod owned by a Kubernetes Job (an ``ownerReferences`` entry of kind ``Job`` in the
``batch`` group) without those annotations (or with ones that do not parse) terminates
with exit code 0 after the agent's Job pod duration (``JOB_POD_DURATION``, 2 s, unless
the agent is told otherwise), so that the Job controller completes the Job, as Helm's
hook Jobs expect. The annotations keep precedence.

Pure functions only (no I/O), so that they are cheap to unit-test.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from decice.spec_model import SimNodeGroup
from decice_scheduler.cache.resources import Resources

SIM_LABEL = "decice.io/sim"
GROUP_LABEL = "decice.io/sim-group"
DURATION_ANNOTATION = "decice.io/sim-duration"
EXIT_CODE_ANNOTATION = "decice.io/sim-exit-code"
JOB_POD_DURATION = 2.0  # seconds a Job's pod runs when its annotations do not say
DEFAULT_PODS = "110"
KUBELET_VERSION = "v1.20.2"
NODE_NET = ipaddress.IPv4Network("10.64.0.0/10")  # host IPs: 10.(64+group).hi.lo
POD_NET = ipaddress.IPv4Network("10.128.0.0/9")  # pod IPs, handed out round-robin


@dataclass(frozen=True)
class SimNode:
    """One simulated node: its name, group and address."""

    name: str
    group: SimNodeGroup
    group_index: int
    index: int

    @property
    def host_ip(self) -> str:
        base = int(NODE_NET.network_address)
        return str(ipaddress.IPv4Address(base + (self.group_index << 16) + self.index))


def node_name(prefix: str, index: int) -> str:
    """``<prefix>-<index>``; indices start at 0."""
    return f"{prefix}-{index}"


def index_of(prefix: str, name: str) -> int | None:
    """The index of ``name`` when it is ``<prefix>-<non-negative int>``, else None."""
    head = f"{prefix}-"
    if not name.startswith(head):
        return None
    tail = name[len(head) :]
    if not tail.isdigit() or (len(tail) > 1 and tail[0] == "0"):
        return None
    return int(tail)


def expand(groups: Sequence[SimNodeGroup]) -> Iterator[SimNode]:
    """Every node of every group, in order.

    Raises ValueError on duplicate prefixes and on more groups or nodes than the
    simulated address plan holds (63 groups of up to 65536 nodes).
    """
    seen: set[str] = set()
    for gi, group in enumerate(groups):
        if group.name_prefix in seen:
            raise ValueError(f"node group prefix {group.name_prefix!r} is used twice")
        seen.add(group.name_prefix)
        if gi >= 63 or group.count > 65536:
            raise ValueError("at most 63 node groups of at most 65536 nodes each")
        for i in range(group.count):
            yield SimNode(node_name(group.name_prefix, i), group, gi, i)


def capacity_of(group: SimNodeGroup) -> dict[str, str]:
    """The group's capacity as a ResourceList of strings (``pods`` defaults to 110)."""
    out = {str(k): str(v) for k, v in group.capacity.items()}
    out.setdefault("pods", DEFAULT_PODS)
    return out


def rfc3339(when: datetime) -> str:
    """Kubernetes' timestamp format (seconds precision, UTC, ``Z``)."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(when: datetime) -> str:
    """Kubernetes' MicroTime format (used by Lease renewTime)."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_object(
    node: SimNode, now: datetime, kubelet_version: str = KUBELET_VERSION
) -> dict[str, Any]:
    """The Node to POST, status included (capacity = allocatable, Ready=True)."""
    group = node.group
    ts = rfc3339(now)
    capacity = capacity_of(group)
    labels = {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "decice-sim",
        SIM_LABEL: "true",
        GROUP_LABEL: group.name_prefix,
        **group.labels,
    }
    spec: dict[str, Any] = {}
    if group.taints:
        spec["taints"] = [
            {"key": t.key, "effect": t.effect, **({"value": t.value} if t.value else {})}
            for t in group.taints
        ]

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": ts,
            "lastTransitionTime": ts,
        }

    uid = f"{node.group_index:04x}{node.index:08x}".rjust(32, "0")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [
                condition(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                condition(
                    "DiskPressure",
                    "False",
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                ),
                condition(
                    "PIDPressure",
                    "False",
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                ),
                condition("Ready", "True", "KubeletReady", "decice simulated node is ready"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": node.host_ip},
                {"type": "Hostname", "address": node.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": uid,
                "systemUUID": uid,
                "bootID": uid,
                "kernelVersion": "decice-sim",
                "osImage": "decice simulated node",
                "containerRuntimeVersion": "decice-sim://0",
                "kubeletVersion": kubelet_version,
                "kubeProxyVersion": kubelet_version,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def lease_object(name: str, now: datetime, duration: int = 40) -> dict[str, Any]:
    """The node's heartbeat Lease in kube-node-lease."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": duration,
            "renewTime": micro_time(now),
        },
    }


# ------------------------------------------------------------------ durations

_GO_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_GO_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """A Go duration (``1h30m``, ``500ms``, ``2.5s``, ``0``) in seconds.

    Negative durations and anything that is not Go syntax raise ValueError.
    """
    raw = text.strip()
    if raw in {"0", "+0"}:
        return 0.0
    body = raw[1:] if raw.startswith("+") else raw
    if not body or body.startswith("-"):
        raise ValueError(f"invalid duration {text!r}: expected e.g. 500ms, 30s, 2m, 1h30m")
    pos, total = 0, 0.0
    while pos < len(body):
        match = _GO_PART.match(body, pos)
        if match is None:
            raise ValueError(f"invalid duration {text!r}: expected e.g. 500ms, 30s, 2m, 1h30m")
        total += float(match[1]) * _GO_UNITS[match[2]]
        pos = match.end()
    return total


@dataclass(frozen=True)
class Workload:
    """What the annotations ask the simulated containers to do."""

    duration: float | None  # seconds until the containers exit; None = run forever
    exit_code: int = 0


def owned_by_job(pod: Mapping[str, Any]) -> bool:
    """Is the pod owned by a Kubernetes Job (kind ``Job``, API group ``batch``)?"""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or ():
        group = str(ref.get("apiVersion") or "").partition("/")[0]
        if ref.get("kind") == "Job" and group == "batch":
            return True
    return False


def workload_of(
    pod: Mapping[str, Any], job_duration: float | None = None
) -> tuple[Workload, str | None]:
    """The pod's simulated workload and a warning for annotations that do not parse.

    A bad annotation is ignored (the pod runs forever / exits 0), not fatal. A Job's pod
    whose annotations give no duration or exit code runs ``job_duration`` seconds and
    exits 0 (None: it runs forever like any other pod).
    """
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    warning = None
    duration: float | None = None
    exit_code = 0
    raw_duration = annotations.get(DURATION_ANNOTATION)
    if raw_duration is not None:
        try:
            duration = parse_duration(str(raw_duration))
        except ValueError as exc:
            warning = f"{DURATION_ANNOTATION}: {exc}"
    raw_code = annotations.get(EXIT_CODE_ANNOTATION)
    if raw_code is not None:
        try:
            exit_code = int(str(raw_code).strip())
            if not 0 <= exit_code <= 255:
                raise ValueError
        except ValueError:
            warning = f"{EXIT_CODE_ANNOTATION}: {raw_code!r} is not an exit code 0-255"
            exit_code = 0
        else:
            if duration is None:
                duration = 0.0
    if duration is None and job_duration is not None and owned_by_job(pod):
        duration = job_duration
    return Workload(duration, exit_code), warning


# ------------------------------------------------------------------ admission


def admission_failure(
    request: Resources, allocatable: Resources, used: Resources
) -> tuple[str, str] | None:
    """The kubelet's verdict on admitting a pod: None, or (reason, message).

    Checks in the kubelet's order: pod count, cpu, memory, then other resources by name.
    Reason ``OutOf<resource>``; message as the kubelet writes it, e.g.
    ``Pod Node didn't have enough resource: cpu, requested: 4000, used: 14000,
    capacity: 16000`` (cpu in millicores, memory in bytes).
    """
    order = ["pods", "cpu", "memory", *sorted(request.extended)]
    for name in order:
        wanted = 1 if name == "pods" else request.get(name)
        if wanted <= 0:
            continue
        in_use, capacity = used.get(name), allocatable.get(name)
        if in_use + wanted > capacity:
            return (
                f"OutOf{name}",
                f"Pod Node didn't have enough resource: {name}, requested: {wanted}, "
                f"used: {in_use}, capacity: {capacity}",
            )
    return None


# ------------------------------------------------------------------ pod status


def _containers(pod: Mapping[str, Any], key: str) -> Iterable[Mapping[str, Any]]:
    return (pod.get("spec") or {}).get(key) or ()


def _container_status(
    uid: str, container: Mapping[str, Any], state: dict[str, Any], ready: bool
) -> dict[str, Any]:
    image = str(container.get("image", ""))
    return {
        "name": container.get("name"),
        "image": image,
        "imageID": f"decice-sim://{image}",
        "containerID": f"decice-sim://{uid}/{container.get('name')}",
        "ready": ready,
        "started": ready,
        "restartCount": 0,
        "state": state,
        "lastState": {},
    }


def _conditions(ts: str, ready: bool, reason: str | None = None) -> list[dict[str, Any]]:
    def cond(kind: str, status: bool, why: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": kind,
            "status": "True" if status else "False",
            "lastProbeTime": None,
            "lastTransitionTime": ts,
        }
        if why:
            out["reason"] = why
        return out

    return [
        cond("Initialized", True),
        cond("Ready", ready, reason),
        cond("ContainersReady", ready, reason),
        cond("PodScheduled", True),
    ]


def running_status(
    pod: Mapping[str, Any], host_ip: str, pod_ip: str, started: datetime
) -> dict[str, Any]:
    """Merge patch that makes a pod Running (init containers completed, all ready)."""
    uid = pod["metadata"]["uid"]
    ts = rfc3339(started)
    init_done = {
        "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": ts, "finishedAt": ts}
    }
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": _conditions(ts, True),
        "hostIP": host_ip,
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": ts,
        "containerStatuses": [
            _container_status(uid, c, {"running": {"startedAt": ts}}, True)
            for c in _containers(pod, "containers")
        ],
    }
    init = [_container_status(uid, c, init_done, True) for c in _containers(pod, "initContainers")]
    if init:
        status["initContainerStatuses"] = init
    return {"metadata": {"uid": uid}, "status": status}


def finished_status(
    pod: Mapping[str, Any], started: datetime, finished: datetime, exit_code: int
) -> dict[str, Any]:
    """Merge patch for containers that exited: Succeeded (code 0) or Failed."""
    uid = pod["metadata"]["uid"]
    start_ts, end_ts = rfc3339(started), rfc3339(finished)
    reason = "Completed" if exit_code == 0 else "Error"
    terminated = {
        "terminated": {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": start_ts,
            "finishedAt": end_ts,
        }
    }
    return {
        "metadata": {"uid": uid},
        "status": {
            "phase": "Succeeded" if exit_code == 0 else "Failed",
            "conditions": _conditions(end_ts, False, "PodCompleted"),
            "containerStatuses": [
                {**_container_status(uid, c, terminated, False), "started": False}
                for c in _containers(pod, "containers")
            ],
        },
    }


def rejected_status(
    pod: Mapping[str, Any], reason: str, message: str, now: datetime
) -> dict[str, Any]:
    """Merge patch for a pod the kubelet refused to admit (phase Failed)."""
    return {
        "metadata": {"uid": pod["metadata"]["uid"]},
        "status": {
            "phase": "Failed",
            "reason": reason,
            "message": message,
            "startTime": rfc3339(now),
        },
    }
