"""One scheduling cycle: filter, score, pick. Pure: reads a Snapshot, changes nothing.

How many nodes are filtered follows kube-scheduler's percentageOfNodesToScore: with
fewer than 100 nodes every node is checked; otherwise the search stops once
``feasible_target`` feasible nodes are found (the profile's percentage, or adaptively
50% - nodes/125, at least 5%, and never fewer than 100 nodes). The search starts where
the previous cycle stopped (``start_index`` in, ``next_start_index`` out) so that every
node gets its turn. An unschedulable pod has always been checked against every node,
so its reasons are complete.

Among the best-scored nodes the one with the smallest name wins (deterministic).

Speed without changing a decision (tests/unit/test_scheduler_perf_equivalence.py checks
this against the plain per-node loop): filters and scores run through their batch hooks
(``FilterPlugin.prepare``, ``ScorePlugin.score_nodes``); with built-in filters only, a
node without taints or cordon whose free cpu/memory/pods/extended cover the request is
accepted without calling the filters one by one (any other node goes through them, so
reasons stay exact); and a pod asking for an extended resource (e.g. nvidia.com/gpu)
only visits the nodes that have some of it (``Snapshot.positions_with``), in the same
rotated order, so feasible nodes, ``evaluated`` and the next start index are the same.
When that finds no node, the full scan runs to collect the exact reasons.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain, compress, islice, repeat
from operator import add, attrgetter, eq, mul

from decice_scheduler.cache.nodeinfo import NodeInfo
from decice_scheduler.cache.podinfo import PodInfo
from decice_scheduler.cache.snapshot import Snapshot
from decice_scheduler.framework import MAX_SCORE, Code, FilterFn
from decice_scheduler.plugins import BUILTIN_FILTERS
from decice_scheduler.plugins.fit import NodeResourcesFit
from decice_scheduler.profile import Profile

__all__ = ["Decision", "Pick", "Scan", "feasible_target", "run_cycle", "schedule_one"]

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


_BUILTIN_FILTER_TYPES = frozenset(BUILTIN_FILTERS)
_name = attrgetter("name")
_Quick = tuple[int, int, int, tuple[tuple[str, int], ...]]
# feasible nodes, how many nodes were evaluated, reason -> number of nodes that gave it
_Found = tuple[list[NodeInfo], int, dict[str, int]]
Scan = Callable[[PodInfo, Snapshot, Profile, int, int], _Found]
Pick = Callable[[PodInfo, Profile, list[NodeInfo]], tuple[str, int]]


def _all_builtin(profile: Profile) -> bool:
    return _BUILTIN_FILTER_TYPES.issuperset(map(type, profile.filters))


def _quick_fit(pod: PodInfo, builtin: bool) -> _Quick | None:
    """(cpu, memory, pods, extended) when a node's own numbers can prove that every filter
    passes: only built-in filters, and the pod names no node, selector or affinity. A
    plain node (no taints, not cordoned) with that much free then passes all of them;
    any other node goes through the filters one by one."""
    if not builtin:
        return None
    if pod.node_name is not None or pod.node_selector or pod.required_affinity is not None:
        return None
    request = pod.request
    extended = tuple((n, a) for n, a in request.extended.items() if a > 0)
    return request.cpu, request.memory, request.pods, extended


def _extended_fit(node: NodeInfo, extended: tuple[tuple[str, int], ...]) -> bool:
    have = node.allocatable.extended
    taken = node.requested.extended
    return all(taken.get(name, 0) + amount <= have.get(name, 0) for name, amount in extended)


def _proven(node: NodeInfo, quick: _Quick) -> bool:
    """``node`` is plain and has ``quick``'s room free: it passes every built-in filter."""
    cpu, memory, pods, extended = quick
    if not node.plain or node.free_cpu < cpu or node.free_memory < memory:
        return False
    return node.free_pods >= pods and (not extended or _extended_fit(node, extended))


def _candidates(pod: PodInfo, profile: Profile, snapshot: Snapshot) -> list[int] | None:
    """Positions of the only nodes that can fit a pod asking for an extended resource.

    With built-in filters only, a pod requesting ``R`` (not ignored by NodeResourcesFit)
    fails on every node that has no ``R`` at all (allocatable and requested both 0), so
    those need not be looked at. None: no such shortcut (scan every node).
    """
    fit = [p for p in profile.filters if type(p) is NodeResourcesFit]
    if not fit:
        return None
    ignored = fit[0].ignored
    best: list[int] | None = None
    for name, amount in pod.request.extended.items():
        if amount > 0 and name not in ignored:
            positions = snapshot.positions_with(name)
            if best is None or len(positions) < len(best):
                best = positions
    return best


def _scan(
    order: Iterable[NodeInfo], need: int, quick: _Quick | None, checks: list[FilterFn]
) -> _Found:
    """Filters ``order`` until ``need`` nodes pass: (those, how many were looked at,
    reason -> number of the others that gave it). With ``quick``, a plain node that has
    that much free passes without calling the filters one by one."""
    feasible: list[NodeInfo] = []
    append = feasible.append
    reasons: dict[str, int] = {}
    success = Code.SUCCESS
    evaluated = 0
    for node in order:
        evaluated += 1
        if quick is not None and _proven(node, quick):
            # sure to pass every built-in filter: no per-filter calls
            append(node)
            need -= 1
            if not need:
                break
            continue
        for check in checks:
            status = check(node)
            if status.code is not success:
                for reason in status.reasons:
                    reasons[reason] = reasons.get(reason, 0) + 1
                break
        else:
            append(node)
            need -= 1
            if not need:
                break
    return feasible, evaluated, reasons


def _feasible_nodes(
    pod: PodInfo, snapshot: Snapshot, profile: Profile, start: int, target: int
) -> _Found:
    nodes = snapshot.nodes
    # per-pod work once: each filter's node check (None: the filter passes every node)
    checks = [fn for plugin in profile.filters if (fn := plugin.prepare(pod)) is not None]
    if not checks:
        order = nodes[start:] + nodes[:start] if start else nodes
        feasible = list(order[:target])
        return feasible, len(feasible), {}
    builtin = _all_builtin(profile)
    quick = _quick_fit(pod, builtin)
    positions = _candidates(pod, profile, snapshot) if builtin else None
    if positions is not None:
        # only nodes that have the extended resource, in the same rotated order; the
        # others would fail, so feasible, evaluated and the next start come out the same
        cut = bisect_left(positions, start)
        rotated = chain(islice(positions, cut, None), islice(positions, cut))
        feasible, looked, _ = _scan(map(nodes.__getitem__, rotated), target, quick, checks)
        if len(feasible) == target:  # stopped at the position looked at last
            last = positions[(cut + looked - 1) % len(positions)]
            return feasible, (last - start) % len(nodes) + 1, {}
        if feasible:
            return feasible, len(nodes), {}
        # unschedulable: scan everything for the exact reasons
    order = nodes[start:] + nodes[:start] if start else nodes
    return _scan(order, target, quick, checks)


def _best_node(pod: PodInfo, profile: Profile, feasible: list[NodeInfo]) -> tuple[str, int]:
    count = len(feasible)
    totals = [0] * count
    for plugin, weight in profile.scores:
        scores = plugin.score_nodes(pod, feasible)
        if len(scores) != count:
            raise ValueError(
                f"score plugin {plugin.name or type(plugin).__name__} gave {len(scores)} "
                f"scores for {count} nodes"
            )
        if min(scores) < 0 or max(scores) > MAX_SCORE:
            for node, value in zip(feasible, scores, strict=True):
                if not 0 <= value <= MAX_SCORE:
                    raise ValueError(
                        f"score plugin {plugin.name or type(plugin).__name__} gave {value} "
                        f"for node {node.name}; scores must be within 0..{MAX_SCORE}"
                    )
        if weight != 1:
            scores = list(map(mul, repeat(weight, count), scores))
        totals = list(map(add, totals, scores))
    top = max(totals)
    # the smallest name among the best (C-level iteration: ties are common)
    return min(compress(map(_name, feasible), map(eq, repeat(top, count), totals))), top


def run_cycle(
    pod: PodInfo,
    snapshot: Snapshot,
    profile: Profile,
    start_index: int,
    scan: Scan,
    pick: Pick,
) -> Decision:
    """A scheduling cycle made of its two parts: ``scan(pod, snapshot, profile, start,
    target)`` filters the nodes from position ``start`` on (wrapping around) until
    ``target`` pass, and ``pick(pod, profile, feasible)`` names the best of several
    feasible nodes with its total score (only called when there are score plugins)."""
    nodes = snapshot.nodes
    total = len(nodes)
    if total == 0:
        return Decision(None)
    target = feasible_target(total, profile.percentage_of_nodes_to_score)
    start = start_index % total
    feasible, evaluated, reasons = scan(pod, snapshot, profile, start, target)
    next_start = (start + evaluated) % total
    count = len(feasible)
    if not count:
        return Decision(None, 0, 0, evaluated, reasons, next_start)
    if count == 1 or not profile.scores:
        only = min(feasible, key=_name) if count > 1 else feasible[0]
        return Decision(only.name, 0, count, evaluated, {}, next_start)
    best, top = pick(pod, profile, feasible)
    return Decision(best, top, count, evaluated, {}, next_start)


def schedule_one(
    pod: PodInfo, snapshot: Snapshot, profile: Profile, start_index: int = 0
) -> Decision:
    return run_cycle(pod, snapshot, profile, start_index, _feasible_nodes, _best_node)
