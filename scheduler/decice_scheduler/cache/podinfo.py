"""A pod parsed once per scheduling cycle, so plugins do not re-read raw JSON per node."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from decice_scheduler.cache.affinity import NodeSelector
from decice_scheduler.cache.objects import pod_key, pod_node_name
from decice_scheduler.cache.resources import Resources, pod_request

__all__ = ["PodInfo", "Toleration"]


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # "Equal" or "Exists"
    value: str
    effect: str  # "" tolerates every effect

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Toleration:
        return cls(
            str(raw.get("key") or ""),
            str(raw.get("operator") or "Equal"),
            str(raw.get("value") or ""),
            str(raw.get("effect") or ""),
        )

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        """Kubernetes matching: empty effect = all effects; empty key + Exists = all keys."""
        if self.effect and self.effect != effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == key
        if self.operator == "Equal":
            return self.key == key and self.value == value
        return False


@dataclass(frozen=True, slots=True)
class PodInfo:
    """The parts of a raw pod that filter and score plugins read."""

    raw: Mapping[str, Any]
    uid: str
    key: str
    request: Resources
    node_name: str | None
    node_selector: Mapping[str, str]
    required_affinity: NodeSelector | None  # None: no required node affinity
    tolerations: tuple[Toleration, ...]
    annotations: Mapping[str, str]

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> PodInfo:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
        required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        selector = (
            None
            if required is None
            else NodeSelector.parse(required.get("nodeSelectorTerms") or ())
        )
        return cls(
            raw=pod,
            uid=str(meta.get("uid") or ""),
            key=pod_key(pod),
            request=pod_request(pod),
            node_name=pod_node_name(pod),
            node_selector=dict(spec.get("nodeSelector") or {}),
            required_affinity=selector,
            tolerations=tuple(Toleration.parse(t) for t in spec.get("tolerations") or ()),
            annotations=dict(meta.get("annotations") or {}),
        )

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        return any(t.tolerates(key, value, effect) for t in self.tolerations)
