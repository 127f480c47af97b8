"""Accessors for raw Kubernetes objects (dicts as the API returns them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "TERMINAL_PHASES",
    "is_terminal",
    "is_terminating",
    "node_name_of",
    "pod_key",
    "pod_node_name",
    "pod_uid",
]

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def pod_uid(pod: Mapping[str, Any]) -> str:
    """metadata.uid; a pod without one cannot be tracked (names are reused)."""
    uid = (pod.get("metadata") or {}).get("uid")
    if not uid:
        raise ValueError(f"pod {pod_key(pod)} has no metadata.uid")
    return str(uid)


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def pod_node_name(pod: Mapping[str, Any]) -> str | None:
    """spec.nodeName, or None while the pod is unbound."""
    return (pod.get("spec") or {}).get("nodeName") or None


def is_terminal(pod: Mapping[str, Any]) -> bool:
    """Succeeded or Failed: the pod's resources are free again."""
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def is_terminating(pod: Mapping[str, Any]) -> bool:
    """deletionTimestamp set: the pod still runs and still counts."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def node_name_of(node: Mapping[str, Any]) -> str:
    name = (node.get("metadata") or {}).get("name")
    if not name:
        raise ValueError("node has no metadata.name")
    return str(name)
