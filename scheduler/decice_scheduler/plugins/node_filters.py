"""Filters on node identity and labels: unschedulable, nodeName, nodeSelector, affinity."""

from __future__ import annotations

from decice_scheduler.cache.nodeinfo import NodeInfo
from decice_scheduler.cache.podinfo import PodInfo
from decice_scheduler.framework import SUCCESS, FilterFn, FilterPlugin, Status

__all__ = ["NodeAffinity", "NodeName", "NodeSelector", "NodeUnschedulable"]

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


class _NodeCheck(FilterPlugin):
    """A filter written once, as its per-pod node check: ``filter`` runs ``prepare``'s."""

    def filter(self, pod: PodInfo, node: NodeInfo) -> Status:
        check = self.prepare(pod)
        return SUCCESS if check is None else check(node)

    def prepare(self, pod: PodInfo) -> FilterFn | None:
        raise NotImplementedError


class NodeUnschedulable(_NodeCheck):
    """Cordoned nodes (spec.unschedulable) only take pods that tolerate the cordon taint."""

    name = "NodeUnschedulable"
    _REJECT = Status.unschedulable("node(s) were unschedulable", unresolvable=True)

    def prepare(self, pod: PodInfo) -> FilterFn | None:
        if pod.tolerates(UNSCHEDULABLE_TAINT, "", "NoSchedule"):
            return None
        reject = self._REJECT
        return lambda node: reject if node.unschedulable else SUCCESS


class NodeName(_NodeCheck):
    """A pod that names a node (spec.nodeName) fits only that node."""

    name = "NodeName"
    _REJECT = Status.unschedulable(
        "node(s) didn't match the requested node name", unresolvable=True
    )

    def prepare(self, pod: PodInfo) -> FilterFn | None:
        wanted = pod.node_name
        if wanted is None:
            return None
        reject = self._REJECT
        return lambda node: SUCCESS if node.name == wanted else reject


class NodeSelector(_NodeCheck):
    """spec.nodeSelector: every key must be a node label with exactly that value."""

    name = "NodeSelector"
    _REJECT = Status.unschedulable("node(s) didn't match Pod's node selector", unresolvable=True)

    def prepare(self, pod: PodInfo) -> FilterFn | None:
        if not pod.node_selector:
            return None
        wanted = tuple(pod.node_selector.items())
        reject = self._REJECT

        def run(node: NodeInfo) -> Status:
            labels = node.labels
            for key, value in wanted:
                if labels.get(key) != value:
                    return reject
            return SUCCESS

        return run


class NodeAffinity(_NodeCheck):
    """requiredDuringSchedulingIgnoredDuringExecution node affinity."""

    name = "NodeAffinity"
    _REJECT = Status.unschedulable("node(s) didn't match Pod's node affinity", unresolvable=True)

    def prepare(self, pod: PodInfo) -> FilterFn | None:
        selector = pod.required_affinity
        if selector is None:
            return None
        matches = selector.matches
        reject = self._REJECT
        return lambda node: SUCCESS if matches(node.labels, node.name) else reject
