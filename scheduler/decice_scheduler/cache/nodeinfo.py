"""The read-only per-node view that a scheduling cycle works on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from decice_scheduler.cache.resources import Resources

__all__ = ["NodeInfo", "Taint", "parse_labels", "parse_taints"]


class Taint(NamedTuple):
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One node as of one generation. Never mutated; a change creates a new NodeInfo.

    ``requested`` sums the effective requests of the non-terminal pods counted on the
    node (bound pods of every scheduler and our own assumed pods); ``nonzero_*`` sum
    the same with scoring defaults (see ``resources.nonzero_cpu_memory``).
    """

    name: str
    generation: int
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    allocatable: Resources
    requested: Resources
    node: Mapping[str, Any]
    # cpu/memory requested with scoring defaults for pods that request none
    nonzero_cpu: int = 0
    nonzero_memory: int = 0
    # derived once per generation for the scheduling hot path (see __post_init__)
    free_cpu: int = field(init=False, repr=False, compare=False)
    free_memory: int = field(init=False, repr=False, compare=False)
    free_pods: int = field(init=False, repr=False, compare=False)
    plain: bool = field(init=False, repr=False, compare=False)  # no taints, not cordoned

    def __post_init__(self) -> None:
        alloc, used = self.allocatable, self.requested
        setter = object.__setattr__
        setter(self, "free_cpu", alloc.cpu - used.cpu)
        setter(self, "free_memory", alloc.memory - used.memory)
        setter(self, "free_pods", alloc.pods - used.pods)
        setter(self, "plain", not self.taints and not self.unschedulable)

    @property
    def free(self) -> Resources:
        return self.allocatable.sub(self.requested)


def parse_labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return MappingProxyType(dict(labels))


def parse_taints(node: Mapping[str, Any]) -> tuple[Taint, ...]:
    raw = (node.get("spec") or {}).get("taints") or ()
    return tuple(
        Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
        for t in raw
    )
