"""Resource fit: the pod's effective request must fit into the node's free allocatable."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from decice_scheduler.framework import SUCCESS, FilterPlugin, Status
from decice_scheduler.nodeinfo import NodeInfo
from decice_scheduler.podinfo import PodInfo
from decice_scheduler.resources import fits

__all__ = ["NodeResourcesFit"]


class NodeResourcesFit(FilterPlugin):
    """cpu, memory, pod count and every extended resource (e.g. nvidia.com/gpu).

    Reasons name each missing resource: "Insufficient cpu", "Insufficient
    nvidia.com/gpu", "Too many pods". Args: ``ignoredResources`` (list of names).
    """

    name = "NodeResourcesFit"

    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        super().__init__(args)
        self._ignored = frozenset(self.args.get("ignoredResources") or ())
        self._statuses: dict[tuple[str, ...], Status] = {}

    def filter(self, pod: PodInfo, node: NodeInfo) -> Status:
        reasons = fits(pod.request, node.allocatable, node.requested)
        if reasons and self._ignored:
            reasons = [r for r in reasons if r.removeprefix("Insufficient ") not in self._ignored]
        if not reasons:
            return SUCCESS
        key = tuple(reasons)
        status = self._statuses.get(key)
        if status is None:
            status = self._statuses[key] = Status.unschedulable(*key)
        return status
