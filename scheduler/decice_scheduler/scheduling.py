"""One scheduling cycle: filter, score, pick. Pure: reads a Snapshot, changes nothing.

How many nodes are filtered follows kube-scheduler's percentageOfNodesToScore: with
fewer than 100 nodes every node is checked; otherwise the search stops once
``feasible_target`` feasible nodes are found (the profile's percentage, or adaptively
50% - nodes/125, at least 5%, and never fewer than 100 nodes). The search starts where
the previous cycle stopped (``start_index`` in, ``next_start_index`` out) so that every
node gets its turn. An unschedulable pod has always been checked against every node,
so its reasons are complete.

Among the best-scored nodes the one with the smallest name wins (deterministic).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from decice_scheduler.framework import MAX_SCORE, Code
from decice_scheduler.nodeinfo import NodeInfo
from decice_scheduler.podinfo import PodInfo
from decice_scheduler.profile import Profile
from decice_scheduler.snapshot import Snapshot

__all__ = ["Decision", "feasible_target", "schedule_one"]

MIN_FEASIBLE_NODES = 100
MIN_ADAPTIVE_PERCENTAGE = 5


@dataclass(frozen=True, slots=True)
class Decision:
    node: str | None
    score: int = 0
    feasible: int = 0
    evaluated: int = 0
    # reason -> number of nodes that gave it (only when node is None)
    reasons: Mapping[str, int] = field(default_factory=dict)
    next_start_index: int = 0

    @property
    def scheduled(self) -> bool:
        return self.node is not None

    def message(self) -> str:
        if self.node is not None:
            return f"assigned to {self.node}"
        parts = ", ".join(f"{count} {reason}" for reason, count in sorted(self.reasons.items()))
        return f"0/{self.evaluated} nodes are available: {parts}."


def feasible_target(num_nodes: int, percentage: int = 0) -> int:
    """How many feasible nodes to find before scoring (see module docstring)."""
    if num_nodes < MIN_FEASIBLE_NODES or percentage >= 100:
        return num_nodes
    if percentage <= 0:
        percentage = max(50 - num_nodes // 125, MIN_ADAPTIVE_PERCENTAGE)
    return max(num_nodes * percentage // 100, MIN_FEASIBLE_NODES)


def schedule_one(
    pod: PodInfo, snapshot: Snapshot, profile: Profile, start_index: int = 0
) -> Decision:
    nodes = snapshot.nodes
    total = len(nodes)
    if total == 0:
        return Decision(None)
    target = feasible_target(total, profile.percentage_of_nodes_to_score)
    start = start_index % total
    feasible: list[NodeInfo] = []
    reasons: dict[str, int] = {}
    evaluated = 0
    filters = [plugin.filter for plugin in profile.filters]
    success = Code.SUCCESS
    for offset in range(total):
        node = nodes[(start + offset) % total]
        evaluated += 1
        for run in filters:
            status = run(pod, node)
            if status.code is not success:
                for reason in status.reasons:
                    reasons[reason] = reasons.get(reason, 0) + 1
                break
        else:
            feasible.append(node)
            if len(feasible) >= target:
                break
    next_start = (start + evaluated) % total
    if not feasible:
        return Decision(None, 0, 0, evaluated, reasons, next_start)
    if len(feasible) == 1 or not profile.scores:
        only = min(feasible, key=lambda n: n.name) if len(feasible) > 1 else feasible[0]
        return Decision(only.name, 0, len(feasible), evaluated, {}, next_start)

    totals = dict.fromkeys((n.name for n in feasible), 0)
    for plugin, weight in profile.scores:
        scores = {n.name: plugin.score(pod, n) for n in feasible}
        plugin.normalize(pod, scores)
        for name, value in scores.items():
            if not 0 <= value <= MAX_SCORE:
                raise ValueError(
                    f"score plugin {plugin.name or type(plugin).__name__} gave {value} "
                    f"for node {name}; scores must be within 0..{MAX_SCORE}"
                )
            totals[name] += weight * value
    best = min(totals.items(), key=lambda item: (-item[1], item[0]))
    return Decision(best[0], best[1], len(feasible), evaluated, {}, next_start)
