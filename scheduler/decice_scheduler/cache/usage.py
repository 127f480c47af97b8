"""Per-node usage computed from scratch, and the drift between two usage views.

The audit rebuilds usage from a fresh LIST with ``compute_usage`` and compares it with
the incremental state; any ``NodeDrift`` is a bug in the delta bookkeeping or a missed
event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from decice_scheduler.cache.objects import is_terminal, pod_node_name, pod_uid
from decice_scheduler.cache.resources import Resources, pod_request

__all__ = ["NodeDrift", "NodeUsage", "compute_usage", "diff_usage"]


class NodeUsage(NamedTuple):
    """What is counted on one node: summed effective requests and the pods' uids."""

    requested: Resources
    pods: frozenset[str]


@dataclass(frozen=True, slots=True)
class NodeDrift:
    node: str
    ours: Resources | None
    theirs: Resources | None
    only_ours: frozenset[str]
    only_theirs: frozenset[str]

    def describe(self) -> str:
        parts = [f"node {self.node}:"]
        if self.ours != self.theirs:
            ours = self.ours.as_dict() if self.ours else None
            theirs = self.theirs.as_dict() if self.theirs else None
            parts.append(f"requested ours={ours} theirs={theirs}")
        if self.only_ours:
            parts.append(f"pods only ours={sorted(self.only_ours)}")
        if self.only_theirs:
            parts.append(f"pods only theirs={sorted(self.only_theirs)}")
        return " ".join(parts)


def compute_usage(pods: Iterable[Mapping[str, Any]]) -> dict[str, NodeUsage]:
    """Usage per node name from raw pods: every bound, non-terminal pod counts."""
    totals: dict[str, dict[str, int]] = {}
    members: dict[str, set[str]] = {}
    for pod in pods:
        node = pod_node_name(pod)
        if node is None or is_terminal(pod):
            continue
        request = pod_request(pod)
        acc = totals.setdefault(node, {})
        for name in ("cpu", "memory", "pods"):
            acc[name] = acc.get(name, 0) + request.get(name)
        for name, amount in request.extended.items():
            acc[name] = acc.get(name, 0) + amount
        members.setdefault(node, set()).add(pod_uid(pod))
    return {
        node: NodeUsage(
            Resources(
                acc.pop("cpu", 0),
                acc.pop("memory", 0),
                acc.pop("pods", 0),
                acc,
            ),
            frozenset(members[node]),
        )
        for node, acc in totals.items()
    }


def diff_usage(ours: Mapping[str, NodeUsage], theirs: Mapping[str, NodeUsage]) -> list[NodeDrift]:
    """Nodes whose counted requests or pods differ, sorted by node name.

    A node with nothing counted is equivalent to a node that is absent.
    """
    empty = NodeUsage(Resources(), frozenset())
    drift: list[NodeDrift] = []
    for node in sorted(set(ours) | set(theirs)):
        a = ours.get(node, empty)
        b = theirs.get(node, empty)
        if a.requested == b.requested and a.pods == b.pods:
            continue
        drift.append(
            NodeDrift(
                node,
                a.requested if node in ours else None,
                b.requested if node in theirs else None,
                a.pods - b.pods,
                b.pods - a.pods,
            )
        )
    return drift
