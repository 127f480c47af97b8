"""Least- and most-allocated scores over configurable resources and weights.

Args: ``resources``: list of ``{name, weight}`` (default cpu and memory, weight 1).
A node scores per resource from what would be requested after placing the pod; the
result is the weighted mean. cpu and memory use scoring defaults for pods that request
none (see ``resources.nonzero_cpu_memory``), so best-effort pods still spread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from decice_scheduler.cache.nodeinfo import NodeInfo
from decice_scheduler.cache.podinfo import PodInfo
from decice_scheduler.cache.resources import nonzero_cpu_memory
from decice_scheduler.framework import MAX_SCORE, ScorePlugin

__all__ = ["LeastAllocated", "MostAllocated"]

_CPU_MEMORY = (("cpu", 1), ("memory", 1))
_DEFAULT_RESOURCES: tuple[dict[str, Any], ...] = (
    {"name": "cpu", "weight": 1},
    {"name": "memory", "weight": 1},
)


def _parse_resources(args: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    spec = args.get("resources") or _DEFAULT_RESOURCES
    out = []
    for item in spec:
        name = str(item["name"])
        weight = int(item.get("weight", 1))
        if weight < 0:
            raise ValueError(f"resource {name!r}: weight must be >= 0, got {weight}")
        out.append((name, weight))
    if not any(w for _, w in out):
        raise ValueError("at least one resource needs a positive weight")
    return tuple(out)


class _Allocation(ScorePlugin):
    # "least"/"most": score_nodes may use the inlined formula of that class;
    # None: call _per_resource per node (a subclass with its own formula)
    _formula: ClassVar[str | None] = None

    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        super().__init__(args)
        self._resources = _parse_resources(self.args)
        self._weight_sum = sum(w for _, w in self._resources)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_per_resource" in cls.__dict__ and "_formula" not in cls.__dict__:
            cls._formula = None

    def _per_resource(self, requested: int, allocatable: int) -> int:
        raise NotImplementedError

    def score_nodes(self, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        formula = self._formula
        if formula is None:
            return super().score_nodes(pod, nodes)
        least = formula == "least"
        pod_cpu, pod_memory = nonzero_cpu_memory(pod.request)
        if least and self._resources == _CPU_MEMORY:
            # the default: one pass, (cpu score + memory score) // 2
            return [
                (
                    (
                        (ac - rc) * MAX_SCORE // ac
                        if (ac := n.allocatable.cpu) > 0 and (rc := n.nonzero_cpu + pod_cpu) <= ac
                        else 0
                    )
                    + (
                        (am - rm) * MAX_SCORE // am
                        if (am := n.allocatable.memory) > 0
                        and (rm := n.nonzero_memory + pod_memory) <= am
                        else 0
                    )
                )
                // 2
                for n in nodes
            ]
        totals = [0] * len(nodes)
        for name, weight in self._resources:
            if not weight:
                continue
            if name == "cpu":
                pairs = [(n.nonzero_cpu + pod_cpu, n.allocatable.cpu) for n in nodes]
            elif name == "memory":
                pairs = [(n.nonzero_memory + pod_memory, n.allocatable.memory) for n in nodes]
            else:
                extra = pod.request.get(name)
                pairs = [(n.requested.get(name) + extra, n.allocatable.get(name)) for n in nodes]
            if least:
                part = [(a - r) * MAX_SCORE // a if a > 0 and r <= a else 0 for r, a in pairs]
            else:
                part = [r * MAX_SCORE // a if a > 0 and r <= a else 0 for r, a in pairs]
            if weight == 1:
                totals = [t + p for t, p in zip(totals, part, strict=True)]
            else:
                totals = [t + weight * p for t, p in zip(totals, part, strict=True)]
        total_weight = self._weight_sum
        return [t // total_weight for t in totals]

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        pod_cpu, pod_memory = nonzero_cpu_memory(pod.request)
        total = 0
        for name, weight in self._resources:
            if not weight:
                continue
            if name == "cpu":
                requested = node.nonzero_cpu + pod_cpu
            elif name == "memory":
                requested = node.nonzero_memory + pod_memory
            else:
                requested = node.requested.get(name) + pod.request.get(name)
            total += weight * self._per_resource(requested, node.allocatable.get(name))
        return total // self._weight_sum


class LeastAllocated(_Allocation):
    """Prefer nodes with the most room left (spreads load)."""

    name = "LeastAllocated"
    _formula = "least"

    def _per_resource(self, requested: int, allocatable: int) -> int:
        if allocatable <= 0 or requested > allocatable:
            return 0
        return (allocatable - requested) * MAX_SCORE // allocatable


class MostAllocated(_Allocation):
    """Prefer nodes that are already busy (packs load, keeps whole nodes free)."""

    name = "MostAllocated"
    _formula = "most"

    def _per_resource(self, requested: int, allocatable: int) -> int:
        if allocatable <= 0 or requested > allocatable:
            return 0
        return requested * MAX_SCORE // allocatable
