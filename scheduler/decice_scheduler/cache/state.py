"""ClusterState: the scheduler's cache of nodes, pods and per-node requested totals.

The API server is the only source of truth; this object mirrors it through a small
verb set. Sync (the watches) calls add/update/remove for nodes and pods, the
scheduling loop reads ``snapshot()`` and calls ``assume``/``forget``.

Rules:
- every pod with spec.nodeName counts on that node, whatever its schedulerName;
- terminal pods (phase Succeeded/Failed) count nothing; terminating pods
  (deletionTimestamp set) still count until they are deleted;
- pods are keyed by metadata.uid (names are reused);
- a pod may be bound to a node that is not known yet: it is counted against that
  name and shows up in the snapshot once the node arrives;
- ``assume`` counts a pod on a node at once; a watch event showing spec.nodeName
  confirms it (on the same node) or moves it to where the API says; ``forget``
  drops an unconfirmed assumption. Assumptions never expire on a timer;
- a bound pod whose nodeName changes, or disappears, is impossible in Kubernetes:
  ``StateCorrupt`` is raised, nothing is changed, and the caller relists
  (``replace_all``);
- every change to a node bumps its generation (one counter across the cluster), and
  ``snapshot()`` rebuilds only the NodeInfos of nodes changed since the last snapshot.

All verbs hold one lock, so sync and the scheduling loop may run in different threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from decice_scheduler.cache.nodeinfo import NodeInfo, Taint, parse_labels, parse_taints
from decice_scheduler.cache.objects import (
    is_terminal,
    node_name_of,
    pod_key,
    pod_node_name,
    pod_uid,
)
from decice_scheduler.cache.resources import (
    Resources,
    node_allocatable,
    nonzero_cpu_memory,
    pod_request,
)
from decice_scheduler.cache.snapshot import Snapshot
from decice_scheduler.cache.usage import NodeDrift, NodeUsage, compute_usage, diff_usage

__all__ = ["ClusterState", "RelistResult", "StateCorrupt"]

_NO_REQUEST = Resources()


class StateCorrupt(RuntimeError):
    """An event contradicts the cache in a way Kubernetes never allows; relist."""


@dataclass(frozen=True, slots=True)
class RelistResult:
    """What disappeared between the previous view and a fresh LIST."""

    deleted_pods: list[Mapping[str, Any]]
    deleted_nodes: list[str]


@dataclass(slots=True)
class _PodEntry:
    pod: Mapping[str, Any]
    bound_node: str | None  # spec.nodeName as the API reports it
    assumed_node: str | None  # our own decision, not yet seen on the watch
    terminal: bool
    request: Resources  # effective request; only computed while the pod counts

    @property
    def counted_node(self) -> str | None:
        if self.terminal:
            return None
        return self.bound_node or self.assumed_node


@dataclass(slots=True)
class _NodeState:
    name: str
    node: Mapping[str, Any] | None = None  # None: pods refer to it but it is not known
    allocatable: Resources = field(default_factory=Resources)
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    requested: Resources = field(default_factory=Resources)
    pods: set[str] = field(default_factory=set)
    generation: int = 0
    nonzero_cpu: int = 0
    nonzero_memory: int = 0


class ClusterState:
    """The incremental cache. See the module docstring for the rules."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, _NodeState] = {}
        self._pods: dict[str, _PodEntry] = {}
        self._generation = 0
        self._dirty: set[str] = set()
        self._snapshot = Snapshot({}, 0)

    # ---------------------------------------------------------------- nodes

    def add_node(self, node: Mapping[str, Any]) -> None:
        """Insert or update a node (an ADDED event for a known node is an update)."""
        with self._lock:
            self._upsert_node(node)

    def update_node(self, node: Mapping[str, Any]) -> None:
        with self._lock:
            self._upsert_node(node)

    def remove_node(self, node: Mapping[str, Any] | str) -> bool:
        """Forget a node. Pods still bound to it keep counting until they are removed."""
        name = node if isinstance(node, str) else node_name_of(node)
        with self._lock:
            state = self._nodes.get(name)
            if state is None or state.node is None:
                return False
            if state.pods:
                state.node = None
                self._touch(state)
            else:
                del self._nodes[name]
                self._dirty.add(name)
                self._generation += 1
            return True

    # ---------------------------------------------------------------- pods

    def add_pod(self, pod: Mapping[str, Any]) -> None:
        """Insert or update a pod (an ADDED event for a known uid is an update)."""
        with self._lock:
            self._upsert_pod(pod)

    def update_pod(self, pod: Mapping[str, Any]) -> None:
        with self._lock:
            self._upsert_pod(pod)

    def remove_pod(self, pod: Mapping[str, Any] | str) -> bool:
        """Drop a pod by uid, releasing whatever it counted (bound or assumed)."""
        uid = pod if isinstance(pod, str) else pod_uid(pod)
        with self._lock:
            entry = self._pods.pop(uid, None)
            if entry is None:
                return False
            self._uncount(uid, entry)
            return True

    def assume(self, pod: Mapping[str, Any], node_name: str) -> None:
        """Count ``pod`` on ``node_name`` now, before the binding is confirmed."""
        uid = pod_uid(pod)
        with self._lock:
            entry = self._pods.get(uid)
            if entry is not None and (entry.bound_node or entry.assumed_node):
                where = entry.bound_node or entry.assumed_node
                state = "bound" if entry.bound_node else "assumed"
                raise ValueError(f"pod {pod_key(pod)} ({uid}) is already {state} on {where}")
            if entry is not None and entry.terminal:
                raise ValueError(f"pod {pod_key(pod)} ({uid}) is terminal")
            new = _PodEntry(pod, None, node_name, False, pod_request(pod))
            self._pods[uid] = new
            self._count(uid, new)

    def forget(self, pod_uid_: str) -> bool:
        """Drop an unconfirmed assumption; the pod stays known as unbound.

        Returns False when there is nothing to forget (never assumed, already
        confirmed by the watch, or deleted).
        """
        with self._lock:
            entry = self._pods.get(pod_uid_)
            if entry is None or entry.assumed_node is None:
                return False
            self._uncount(pod_uid_, entry)
            entry.assumed_node = None
            entry.request = _NO_REQUEST
            return True

    # ---------------------------------------------------------------- relist

    def replace_all(
        self, nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
    ) -> RelistResult:
        """Replace everything with a fresh LIST; report what vanished in the gap.

        Assumptions on pods that are still unbound in the LIST survive (their bind may
        be in flight); assumed pods absent from the LIST count as deleted. This also
        clears a corrupt state.
        """
        with self._lock:
            old_pods = self._pods
            old_nodes = {name for name, s in self._nodes.items() if s.node is not None}
            assumed = {
                uid: entry.assumed_node
                for uid, entry in old_pods.items()
                if entry.assumed_node is not None
            }
            self._dirty.update(self._nodes)
            self._nodes = {}
            self._pods = {}
            for node in nodes:
                self._upsert_node(node)
            for pod in pods:
                self._upsert_pod(pod)
            for uid, node_name in assumed.items():
                entry = self._pods.get(uid)
                if entry is None or entry.bound_node is not None or entry.terminal:
                    continue
                entry.assumed_node = node_name
                entry.request = pod_request(entry.pod)
                self._count(uid, entry)
            deleted_pods = [e.pod for uid, e in old_pods.items() if uid not in self._pods]
            live_nodes = {name for name, s in self._nodes.items() if s.node is not None}
            return RelistResult(deleted_pods, sorted(old_nodes - live_nodes))

    # ---------------------------------------------------------------- reads

    def snapshot(self) -> Snapshot:
        """A view sharing every NodeInfo that did not change since the last snapshot."""
        with self._lock:
            if not self._dirty:
                return self._snapshot
            previous = self._snapshot
            changed: dict[str, NodeInfo] = {}
            removed: list[str] = []
            structural = False  # a node appears or disappears: rebuild the order
            for name in self._dirty:
                state = self._nodes.get(name)
                known = previous.get(name)
                if state is None or state.node is None:
                    if known is not None:
                        removed.append(name)
                        structural = True
                    continue
                if known is None:
                    structural = True
                elif known.generation == state.generation:
                    continue
                changed[name] = _node_info(state)
            self._dirty.clear()
            if not structural:
                self._snapshot = Snapshot._derive(previous, changed, self._generation)
                return self._snapshot
            table = dict(previous._table())
            for name in removed:
                del table[name]
            table.update(changed)  # known names keep their place, new ones go last
            self._snapshot = Snapshot(table, self._generation)
            return self._snapshot

    @property
    def generation(self) -> int:
        return self._generation

    def node_generation(self, name: str) -> int | None:
        state = self._nodes.get(name)
        return None if state is None else state.generation

    def requested(self, name: str) -> Resources:
        """What is counted on a node (known or not); zero for a name never seen."""
        state = self._nodes.get(name)
        return Resources() if state is None else state.requested

    def has_node(self, name: str) -> bool:
        state = self._nodes.get(name)
        return state is not None and state.node is not None

    def pod_node(self, uid: str) -> str | None:
        """The node a pod counts on (bound or assumed), or None."""
        entry = self._pods.get(uid)
        return None if entry is None else entry.counted_node

    def is_assumed(self, uid: str) -> bool:
        entry = self._pods.get(uid)
        return entry is not None and entry.assumed_node is not None

    def assumed_pods(self) -> dict[str, str]:
        """uid -> node of every unconfirmed assumption."""
        with self._lock:
            return {
                uid: e.assumed_node for uid, e in self._pods.items() if e.assumed_node is not None
            }

    def pod_count(self) -> int:
        return len(self._pods)

    def node_count(self) -> int:
        return sum(1 for s in self._nodes.values() if s.node is not None)

    # ---------------------------------------------------------------- audit

    def usage(self, include_assumed: bool = True) -> dict[str, NodeUsage]:
        """The incremental per-node totals (the numbers the scheduler decides on)."""
        with self._lock:
            out: dict[str, NodeUsage] = {}
            for name, state in self._nodes.items():
                if not state.pods:
                    continue
                requested = state.requested
                members = set(state.pods)
                if not include_assumed:
                    for uid in state.pods:
                        entry = self._pods[uid]
                        if entry.bound_node is None:
                            requested = requested.sub(entry.request)
                            members.discard(uid)
                    if not members:
                        continue
                out[name] = NodeUsage(requested, frozenset(members))
            return out

    def rebuild_totals(self, include_assumed: bool = True) -> dict[str, NodeUsage]:
        """Per-node totals recomputed from the stored pods, ignoring the running sums."""
        with self._lock:
            bound = [e.pod for e in self._pods.values() if e.bound_node is not None]
            result = compute_usage(bound)
            if include_assumed:
                extra = [
                    _as_bound(e.pod, e.assumed_node)
                    for e in self._pods.values()
                    if e.assumed_node is not None and e.bound_node is None and not e.terminal
                ]
                if extra:
                    result = _merge_usage(result, compute_usage(extra))
            return result

    def diff(self, other: ClusterState, include_assumed: bool = False) -> list[NodeDrift]:
        """Drift per node between this state and ``other`` (e.g. rebuilt from a LIST).

        Assumed pods are left out by default: a fresh LIST cannot know about them.
        """
        return diff_usage(self.usage(include_assumed), other.usage(include_assumed))

    # ---------------------------------------------------------------- internals

    def _touch(self, state: _NodeState) -> None:
        self._generation += 1
        state.generation = self._generation
        self._dirty.add(state.name)

    def _node_state(self, name: str) -> _NodeState:
        state = self._nodes.get(name)
        if state is None:
            state = _NodeState(name)
            self._nodes[name] = state
        return state

    def _upsert_node(self, node: Mapping[str, Any]) -> None:
        name = node_name_of(node)
        state = self._node_state(name)
        allocatable = node_allocatable(node)
        labels = parse_labels(node)
        taints = parse_taints(node)
        unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
        if (
            state.node is not None
            and state.allocatable == allocatable
            and state.labels == labels
            and state.taints == taints
            and state.unschedulable == unschedulable
        ):
            # Heartbeats and condition updates: nothing a scheduling decision reads.
            state.node = node
            return
        state.node = node
        state.allocatable = allocatable
        state.labels = labels
        state.taints = taints
        state.unschedulable = unschedulable
        self._touch(state)

    def _upsert_pod(self, pod: Mapping[str, Any]) -> None:
        uid = pod_uid(pod)
        node = pod_node_name(pod)
        terminal = is_terminal(pod)
        entry = self._pods.get(uid)
        if entry is None:
            new = _PodEntry(pod, node, None, terminal, _NO_REQUEST)
            if new.counted_node is not None:
                new.request = pod_request(pod)
            self._pods[uid] = new
            self._count(uid, new)
            return
        if entry.bound_node is not None and node != entry.bound_node:
            raise StateCorrupt(
                f"pod {pod_key(pod)} ({uid}) was bound to {entry.bound_node}, "
                f"an event now says {node!r}"
            )
        assumed = None if node is not None else entry.assumed_node
        new = _PodEntry(pod, node, assumed, terminal, _NO_REQUEST)
        if new.counted_node is not None:
            new.request = pod_request(pod)
        self._pods[uid] = new
        old_node = entry.counted_node
        if old_node == new.counted_node and entry.request == new.request:
            return  # a status update: nothing counted changes
        self._uncount(uid, entry)
        self._count(uid, new)

    def _count(self, uid: str, entry: _PodEntry) -> None:
        name = entry.counted_node
        if name is None:
            return
        state = self._node_state(name)
        state.requested = state.requested.add(entry.request)
        cpu, memory = nonzero_cpu_memory(entry.request)
        state.nonzero_cpu += cpu
        state.nonzero_memory += memory
        state.pods.add(uid)
        self._touch(state)

    def _uncount(self, uid: str, entry: _PodEntry) -> None:
        name = entry.counted_node
        if name is None:
            return
        state = self._nodes[name]
        state.requested = state.requested.sub(entry.request)
        cpu, memory = nonzero_cpu_memory(entry.request)
        state.nonzero_cpu -= cpu
        state.nonzero_memory -= memory
        state.pods.discard(uid)
        if state.node is None and not state.pods:
            del self._nodes[name]
            self._dirty.add(name)
            self._generation += 1
        else:
            self._touch(state)


def _node_info(state: _NodeState) -> NodeInfo:
    assert state.node is not None
    return NodeInfo(
        name=state.name,
        generation=state.generation,
        labels=state.labels,
        taints=state.taints,
        unschedulable=state.unschedulable,
        allocatable=state.allocatable,
        requested=state.requested,
        node=state.node,
        nonzero_cpu=state.nonzero_cpu,
        nonzero_memory=state.nonzero_memory,
    )


def _as_bound(pod: Mapping[str, Any], node: str | None) -> Mapping[str, Any]:
    spec = dict(pod.get("spec") or {})
    spec["nodeName"] = node
    return {**pod, "spec": spec}


def _merge_usage(a: dict[str, NodeUsage], b: dict[str, NodeUsage]) -> dict[str, NodeUsage]:
    out = dict(a)
    for node, usage in b.items():
        if node in out:
            prev = out[node]
            out[node] = NodeUsage(prev.requested.add(usage.requested), prev.pods | usage.pods)
        else:
            out[node] = usage
    return out
