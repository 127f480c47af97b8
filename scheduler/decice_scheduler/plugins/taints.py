"""Taints and tolerations: NoSchedule/NoExecute filter, PreferNoSchedule score."""

from __future__ import annotations

from collections.abc import Sequence

from decice_scheduler.cache.nodeinfo import NodeInfo
from decice_scheduler.cache.podinfo import PodInfo
from decice_scheduler.framework import (
    MAX_SCORE,
    SUCCESS,
    FilterFn,
    FilterPlugin,
    ScorePlugin,
    Status,
)

__all__ = ["TaintToleration", "TaintTolerationScore"]

_HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


class TaintToleration(FilterPlugin):
    """Rejects a node with a NoSchedule or NoExecute taint the pod does not tolerate."""

    name = "TaintToleration"

    def filter(self, pod: PodInfo, node: NodeInfo) -> Status:
        for taint in node.taints:
            if taint.effect in _HARD_EFFECTS and not pod.tolerates(*taint):
                shown = f"{taint.key}: {taint.value}" if taint.value else taint.key
                return Status.unschedulable(
                    f"node(s) had untolerated taint {{{shown}}}", unresolvable=True
                )
        return SUCCESS

    def prepare(self, pod: PodInfo) -> FilterFn | None:
        check = self.filter
        return lambda node: check(pod, node) if node.taints else SUCCESS


class TaintTolerationScore(ScorePlugin):
    """Fewer untolerated PreferNoSchedule taints score higher (none: 100)."""

    name = "TaintTolerationScore"

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        return sum(
            1
            for taint in node.taints
            if taint.effect == "PreferNoSchedule" and not pod.tolerates(*taint)
        )

    def normalize(self, pod: PodInfo, scores: dict[str, int]) -> None:
        worst = max(scores.values(), default=0)
        for name, count in scores.items():
            scores[name] = MAX_SCORE if worst == 0 else MAX_SCORE * (worst - count) // worst

    def score_nodes(self, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        return self.scores_from_counts(pod, self.counts(pod, nodes))

    def counts(self, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        """The raw score of each node (its untolerated PreferNoSchedule taints): one
        node's does not depend on the others'."""
        score = self.score
        return [score(pod, n) if n.taints else 0 for n in nodes]

    def scores_from_counts(
        self, pod: PodInfo, counts: Sequence[int], worst: int | None = None
    ) -> list[int]:
        """The normalised scores of nodes with these raw scores (``counts``, in order),
        against ``worst``, the largest of them (given: a node's score depends on its own
        raw score and ``worst`` only)."""
        del pod
        if worst is None:
            worst = max(counts, default=0)
        if worst == 0:
            return [MAX_SCORE] * len(counts)
        score = {count: MAX_SCORE * (worst - count) // worst for count in set(counts)}
        return list(map(score.__getitem__, counts))
