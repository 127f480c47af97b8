"""GPU-aware score: keep GPU nodes for GPU pods.

The raw score of a node is its node-scope GPU availability, allocatable minus
requested (of non-terminal pods), for ``resource`` (default ``nvidia.com/gpu``). It is
normalised against the maximum over the feasible nodes:

- a pod that requests GPUs: ``mode: spread`` (default) scores 100 * free / max, i.e.
  the node with the most free GPUs wins; ``mode: pack`` inverts that, filling nodes
  that have fewest free GPUs first so that whole GPU nodes stay free for large jobs;
- a pod that requests no GPU scores 100 * (max - free) / max: nodes without free GPUs
  (no GPUs at all, or all in use) win, so CPU-only work does not take the CPU and
  memory that GPU pods on a GPU node would need.

When no feasible node has a free GPU every node scores 100 (the score is neutral).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from decice_scheduler.cache.nodeinfo import NodeInfo
from decice_scheduler.cache.podinfo import PodInfo
from decice_scheduler.framework import MAX_SCORE, ScorePlugin

__all__ = ["GpuAware"]


class GpuAware(ScorePlugin):
    name = "GpuAware"

    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        super().__init__(args)
        self._resource = str(self.args.get("resource", "nvidia.com/gpu"))
        mode = str(self.args.get("mode", "spread"))
        if mode not in ("spread", "pack"):
            raise ValueError(f"GpuAware mode must be 'spread' or 'pack', got {mode!r}")
        self._pack = mode == "pack"

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        free = node.allocatable.get(self._resource) - node.requested.get(self._resource)
        return max(free, 0)

    def normalize(self, pod: PodInfo, scores: dict[str, int]) -> None:
        top = max(scores.values(), default=0)
        if top <= 0:
            for name in scores:
                scores[name] = MAX_SCORE
            return
        wants_gpu = pod.request.get(self._resource) > 0
        prefer_free = wants_gpu and not self._pack
        for name, free in scores.items():
            scores[name] = (free if prefer_free else top - free) * MAX_SCORE // top

    def score_nodes(self, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        return self.scores_from_free(pod, self.free(nodes))

    def free(self, nodes: Sequence[NodeInfo]) -> list[int]:
        """The raw score of each node (its free amount, at least 0): one node's does not
        depend on the others'."""
        res = self._resource
        if res in ("cpu", "memory", "pods"):
            return [max(n.allocatable.get(res) - n.requested.get(res), 0) for n in nodes]
        # nodes without any extended resource (most of them) have nothing free
        return [
            (f if (f := have.get(res, 0) - n.requested.extended.get(res, 0)) > 0 else 0)
            if (have := n.allocatable.extended)
            else 0
            for n in nodes
        ]

    def scores_from_free(
        self, pod: PodInfo, free: Sequence[int], top: int | None = None
    ) -> list[int]:
        """The normalised scores of nodes with these raw scores (``free``, in order),
        against ``top``, the largest of them (given: a node's score depends on its own raw
        score and ``top`` only)."""
        if top is None:
            top = max(free, default=0)
        if top <= 0:
            return [MAX_SCORE] * len(free)
        prefer_free = pod.request.get(self._resource) > 0 and not self._pack
        # few distinct amounts (0 on most nodes): each one's score once, then a lookup
        score = {f: (f if prefer_free else top - f) * MAX_SCORE // top for f in set(free)}
        return list(map(score.__getitem__, free))
