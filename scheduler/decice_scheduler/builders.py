"""Raw Node and Pod objects shaped like API JSON, for tests and benchmarks."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["container", "make_node", "make_pod"]

_uids = itertools.count(1)


def make_node(
    name: str,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: int = 110,
    extended: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": str(pods), **(extended or {})}
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"capacity": dict(allocatable), "allocatable": allocatable},
    }


def container(
    name: str = "c",
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    restart_policy: str | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = dict(requests)
    if limits:
        resources["limits"] = dict(limits)
    out: dict[str, Any] = {"name": name, "image": "busybox", "resources": resources}
    if restart_policy:
        out["restartPolicy"] = restart_policy
    return out


def make_pod(
    name: str,
    uid: str | None = None,
    node: str | None = None,
    requests: Mapping[str, str] | None = None,
    containers: Sequence[Mapping[str, Any]] | None = None,
    init_containers: Sequence[Mapping[str, Any]] = (),
    phase: str = "Pending",
    scheduler: str = "default-scheduler",
    deleting: bool = False,
    namespace: str = "default",
    **spec_extra: Any,
) -> dict[str, Any]:
    """A pod; ``requests`` is shorthand for one container with those requests."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"uid-{name}-{next(_uids)}",
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [dict(c) for c in containers]
        if containers is not None
        else [container(requests=requests)],
        **spec_extra,
    }
    if init_containers:
        spec["initContainers"] = [dict(c) for c in init_containers]
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": phase},
    }
