"""Resource fit: the pod's effective request must fit into the node's free allocatable."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from decice_scheduler.cache.nodeinfo import NodeInfo
from decice_scheduler.cache.podinfo import PodInfo
from decice_scheduler.cache.resources import fits
from decice_scheduler.framework import SUCCESS, FilterFn, FilterPlugin, Status

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

    @property
    def ignored(self) -> frozenset[str]:
        """Resources this filter does not check."""
        return self._ignored

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

    def prepare(self, pod: PodInfo) -> FilterFn | None:
        """A quick "fits" check; any node it doubts gets the exact ``filter``."""
        request = pod.request
        cpu, memory, pods = request.cpu, request.memory, request.pods
        extended = tuple((n, a) for n, a in request.extended.items() if a > 0)
        exact = self.filter

        def run(node: NodeInfo) -> Status:
            alloc = node.allocatable
            used = node.requested
            if (
                (pods and used.pods + pods > alloc.pods)
                or (cpu and used.cpu + cpu > alloc.cpu)
                or (memory and used.memory + memory > alloc.memory)
            ):
                return exact(pod, node)
            if extended:
                have = alloc.extended
                taken = used.extended
                for name, amount in extended:
                    if taken.get(name, 0) + amount > have.get(name, 0):
                        return exact(pod, node)
            return SUCCESS

        return run
