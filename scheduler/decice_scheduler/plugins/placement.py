"""Hybrid placement preference from the pod annotation ``decice.io/placement``.

Values: ``edge`` (nodes labelled ``node-role.kubernetes.io/edge``), ``hpc`` (interLink
virtual nodes: label ``type=virtual-kubelet`` or any ``virtual-node.interlink/type``
label) and ``cloud`` (neither). A matching node scores 100, others 0. A pod without
the annotation, or with another value, scores 0 everywhere (no preference). It is a
preference, not a requirement: use a node selector or affinity to require a class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from decice_scheduler.cache.nodeinfo import NodeInfo
from decice_scheduler.cache.podinfo import PodInfo
from decice_scheduler.framework import MAX_SCORE, ScorePlugin

__all__ = ["PLACEMENT_ANNOTATION", "HybridPlacement", "node_class"]

PLACEMENT_ANNOTATION = "decice.io/placement"
EDGE_LABEL = "node-role.kubernetes.io/edge"
INTERLINK_LABEL = "virtual-node.interlink/type"
CLASSES = frozenset({"edge", "cloud", "hpc"})


def node_class(labels: Mapping[str, str]) -> str:
    """'hpc', 'edge' or 'cloud' for a node's labels (a virtual node is hpc first)."""
    if labels.get("type") == "virtual-kubelet" or INTERLINK_LABEL in labels:
        return "hpc"
    if EDGE_LABEL in labels:
        return "edge"
    return "cloud"


class HybridPlacement(ScorePlugin):
    name = "HybridPlacement"

    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        super().__init__(args)
        self._annotation = str(self.args.get("annotation", PLACEMENT_ANNOTATION))

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        wanted = pod.annotations.get(self._annotation)
        if wanted not in CLASSES:
            return 0
        return MAX_SCORE if node_class(node.labels) == wanted else 0

    def score_nodes(self, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        wanted = pod.annotations.get(self._annotation)
        if wanted not in CLASSES:
            return [0] * len(nodes)
        return [MAX_SCORE if node_class(n.labels) == wanted else 0 for n in nodes]
