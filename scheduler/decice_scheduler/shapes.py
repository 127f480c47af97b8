"""Per pod shape: each node's filter and score results, kept in step with the snapshots.

Pods of one workload usually look alike: the same requests, tolerations and node
selector. For such a *shape* a node's filter outcome and its raw score in every plugin
depend only on the node, so they are kept per node position and recomputed only for the
nodes that changed since the shape was last used (a changed node is a new ``NodeInfo``
object in the snapshot; usually one per cycle, the node the previous pod was assumed
on). A cycle then finds its feasible nodes and their totals with a few passes over
those per-position lists instead of calling every filter and score plugin per node:
the positions that fit are kept in order (a cycle's window is one or two slices of
them), and each total is kept as a key that also orders ties by name (one ``max`` over
the window gives the best total and, among the nodes sharing it, the smallest name).
A plugin that normalises over the feasible nodes (GpuAware, TaintTolerationScore) gives
each node a score from its own raw value and the largest raw value among the feasible
nodes only; so the total of every position is kept per tuple of those maxima (usually
one tuple per shape), and a cycle reads its feasible nodes' totals from that column.

The decision is exactly ``schedule_one``'s (tests/unit/test_scheduler_perf_equivalence.py
checks it against the plain per-node loop): the same nodes are looked at in the same
rotated order, the first ``feasible_target`` that pass are scored, window-dependent
normalisations (GpuAware's maximum, TaintTolerationScore's worst count) are applied to
the feasible nodes of this cycle, and among the best the smallest name wins.

It applies when every filter is a built-in and every score plugin is exactly a built-in
class (a subclass may override what is cached here), and the pod names no node and has
no required node affinity; anything else, a shape seen for the first time (a one-off
pod need not pay for a table of every node), and a pod no node fits (its reasons come
from the full scan) go to ``schedule_one``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import add, is_not, itemgetter, mul

from decice_scheduler.cache.nodeinfo import NodeInfo
from decice_scheduler.cache.podinfo import PodInfo
from decice_scheduler.cache.snapshot import Snapshot
from decice_scheduler.framework import FilterFn, ScorePlugin
from decice_scheduler.plugins.allocation import LeastAllocated, MostAllocated
from decice_scheduler.plugins.gpu import GpuAware
from decice_scheduler.plugins.placement import HybridPlacement
from decice_scheduler.plugins.taints import TaintTolerationScore
from decice_scheduler.profile import Profile
from decice_scheduler.scheduling import (
    Decision,
    _all_builtin,
    _proven,
    _Quick,
    _quick_fit,
    feasible_target,
    schedule_one,
)

__all__ = ["MAX_SHAPES", "ShapeCache"]

MAX_SHAPES = 32  # shapes kept (the least recently used goes first)
MAX_SEEN = 4096  # shapes seen once, remembered until a second sighting builds a table
MAX_COLUMNS = 8  # per shape: columns of totals kept (one per tuple of window maxima)

# a score plugin's raw value per node (independent of the other nodes), and the
# normalised scores of nodes from their raw values and the largest raw value among a
# cycle's feasible nodes (None: the raw value is the score)
_Raw = Callable[[PodInfo, Sequence[NodeInfo]], list[int]]
_Normalise = Callable[[PodInfo, Sequence[int], int], list[int]]
_NODE_LOCAL = (LeastAllocated, MostAllocated, HybridPlacement)
_WINDOWED = (GpuAware, TaintTolerationScore)


def _split(plugin: ScorePlugin) -> tuple[_Raw, _Normalise | None]:
    if isinstance(plugin, GpuAware):
        return (lambda _pod, nodes: plugin.free(nodes)), plugin.scores_from_free
    if isinstance(plugin, TaintTolerationScore):
        return plugin.counts, plugin.scores_from_counts
    return plugin.score_nodes, None


@dataclass(eq=False, slots=True)
class _Shape:
    """One shape's per-position results for the snapshot ``nodes`` came from."""

    nodes: tuple[NodeInfo, ...] = ()
    snapshot: Snapshot | None = None
    names: list[str] = field(default_factory=list)
    fit: list[bool] = field(default_factory=list)  # every filter passes
    feasible: list[int] = field(default_factory=list)  # the positions that fit, ascending
    fixed: list[int] = field(default_factory=list)  # weighted sum of node-local scores
    raw: list[list[int]] = field(default_factory=list)  # per windowed plugin
    # the names from largest to smallest (``by_tiebreak``), and each position's index in
    # that list (``tiebreak``): the smaller the name, the larger its tie-break
    tiebreak: list[int] = field(default_factory=list)
    by_tiebreak: list[str] = field(default_factory=list)
    # per tuple of the windowed plugins' maxima, each position's key: its weighted total
    # score times ``len(names)`` plus its tie-break, so that one ``max`` over a window
    # finds the best total and, among the positions that share it, the smallest name
    # (positions outside a window may hold anything: never read)
    totals: dict[tuple[int, ...], list[int]] = field(default_factory=dict)


class ShapeCache:
    """``schedule`` decides like ``schedule_one`` (see the module docstring); one per
    profile, used from one thread."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._shapes: dict[Hashable, _Shape] = {}
        self._seen: set[Hashable] = set()
        scores = profile.scores
        self.enabled = _all_builtin(profile) and all(
            type(p) in _NODE_LOCAL or type(p) in _WINDOWED for p, _ in scores
        )
        self._local: list[tuple[_Raw, int]] = []
        self._windowed: list[tuple[_Raw, _Normalise, int]] = []
        for plugin, weight in scores:
            raw, normalise = _split(plugin)
            if normalise is None:
                self._local.append((raw, weight))
            else:
                self._windowed.append((raw, normalise, weight))
        self._annotations = tuple(
            p._annotation for p, _ in scores if isinstance(p, HybridPlacement)
        )
        self.hits = 0  # cycles decided from a table
        self.builds = 0  # tables built from every node

    def schedule(self, pod: PodInfo, snapshot: Snapshot, start_index: int = 0) -> Decision:
        decision = self._decide(pod, snapshot, start_index) if self.enabled else None
        if decision is None:
            return schedule_one(pod, snapshot, self.profile, start_index)
        self.hits += 1
        return decision

    # ------------------------------------------------------------ internals

    def _key(self, pod: PodInfo) -> Hashable | None:
        """What every built-in plugin reads of a pod (None: not cached)."""
        if pod.node_name is not None or pod.required_affinity is not None:
            return None
        request = pod.request
        return (
            request.cpu,
            request.memory,
            request.pods,
            tuple(sorted(request.extended.items())),
            pod.tolerations,
            tuple(sorted(pod.node_selector.items())),
            tuple(pod.annotations.get(name) for name in self._annotations),
        )

    def _decide(self, pod: PodInfo, snapshot: Snapshot, start_index: int) -> Decision | None:
        total = len(snapshot.nodes)
        if total == 0:
            return None
        key = self._key(pod)
        if key is None:
            return None
        shape = self._shapes.pop(key, None)
        if shape is None:
            if key not in self._seen:
                if len(self._seen) >= MAX_SEEN:
                    self._seen.clear()
                self._seen.add(key)
                return None
            self._seen.discard(key)
            shape = _Shape()
            if len(self._shapes) >= MAX_SHAPES:
                del self._shapes[next(iter(self._shapes))]
        self._shapes[key] = shape  # most recently used last
        self._refresh(shape, pod, snapshot)

        profile = self.profile
        target = feasible_target(total, profile.percentage_of_nodes_to_score)
        start = start_index % total
        # the first ``target`` feasible positions in the order the scan looks at them
        feasible = shape.feasible
        first = bisect_left(feasible, start)
        window = feasible[first : first + target]
        if len(window) < target:
            window += feasible[: min(first, target - len(window))]
        count = len(window)
        if not count:
            return None  # unschedulable: the full scan gives the reasons
        evaluated = (window[-1] - start) % total + 1 if count == target else total
        next_start = (start + evaluated) % total
        if count == 1:
            return Decision(shape.names[window[0]], 0, 1, evaluated, {}, next_start)
        # the window's entries of a per-position list, as a tuple (count > 1)
        pick = itemgetter(*window)
        if not profile.scores:
            return Decision(min(pick(shape.names)), 0, count, evaluated, {}, next_start)
        maxima = tuple(max(pick(raw)) for raw in shape.raw)  # () without windowed plugins
        column = shape.totals.get(maxima)
        if column is None:
            if len(shape.totals) >= MAX_COLUMNS:
                shape.totals.clear()
            column = shape.totals[maxima] = self._column(pod, shape, maxima)
        top, tie = divmod(max(pick(column)), len(shape.names))
        return Decision(shape.by_tiebreak[tie], top, count, evaluated, {}, next_start)

    def _column(self, pod: PodInfo, shape: _Shape, maxima: tuple[int, ...]) -> list[int]:
        """The key of every position (see ``_Shape.totals``) when the windowed plugins'
        maxima are ``maxima``."""
        column = shape.fixed
        for (_, normalise, weight), raw, most in zip(
            self._windowed, shape.raw, maxima, strict=True
        ):
            scores = normalise(pod, raw, most)
            if weight != 1:
                scores = list(map(mul, repeat(weight), scores))
            column = list(map(add, column, scores))
        return list(map(add, map(mul, column, repeat(len(shape.names))), shape.tiebreak))

    def _refresh(self, shape: _Shape, pod: PodInfo, snapshot: Snapshot) -> None:
        """Bring ``shape`` to ``snapshot``: only the positions whose node changed, unless
        nodes came or went (then every position)."""
        nodes = snapshot.nodes
        if shape.nodes is nodes:
            return
        known = shape.snapshot
        since = None if known is None else snapshot.changed_since(known)
        full = False
        if since is not None:
            changed = sorted(since)
        elif known is not None and known.layout is snapshot.layout:
            changed = list(compress(range(len(nodes)), map(is_not, shape.nodes, nodes)))
        else:
            self.builds += 1
            full = True
            count = len(nodes)
            changed = list(range(count))
            shape.names = names = [n.name for n in nodes]
            shape.by_tiebreak = sorted(names, reverse=True)  # node names are unique
            place = {name: i for i, name in enumerate(shape.by_tiebreak)}
            shape.tiebreak = [place[name] for name in names]
            shape.fit = [False] * count
            shape.fixed = [0] * count
            shape.raw = [[0] * count for _ in self._windowed]
            shape.totals.clear()
        shape.nodes = nodes
        shape.snapshot = snapshot
        if not changed:
            return
        fresh = list(map(nodes.__getitem__, changed))
        fits = _fits(pod, self.profile, fresh)
        fixed = [0] * len(fresh)
        for raw, weight in self._local:
            values = raw(pod, fresh)
            if weight != 1:
                values = [weight * v for v in values]
            fixed = list(map(add, fixed, values))
        columns = [raw(pod, fresh) for raw, _, _ in self._windowed]
        fit = shape.fit
        if full or list(map(fit.__getitem__, changed)) != fits:
            for pos, passes in zip(changed, fits, strict=True):
                fit[pos] = passes
            shape.feasible = list(compress(range(len(fit)), fit))
        for i, pos in enumerate(changed):
            shape.fixed[pos] = fixed[i]
            for column, values in zip(shape.raw, columns, strict=True):
                column[pos] = values[i]
        span, tiebreak = len(shape.names), shape.tiebreak
        for maxima, totals in shape.totals.items():
            for i, pos in enumerate(changed):
                total = fixed[i]
                for (_, normalise, weight), values, most in zip(
                    self._windowed, columns, maxima, strict=True
                ):
                    total += weight * normalise(pod, [values[i]], most)[0]
                totals[pos] = total * span + tiebreak[pos]


def _fits(pod: PodInfo, profile: Profile, nodes: Sequence[NodeInfo]) -> list[bool]:
    """Whether every filter of ``profile`` passes ``pod`` on each of ``nodes``."""
    checks = [fn for plugin in profile.filters if (fn := plugin.prepare(pod)) is not None]
    quick = _quick_fit(pod, True)
    return [_passes(node, quick, checks) for node in nodes]


def _passes(node: NodeInfo, quick: _Quick | None, checks: list[FilterFn]) -> bool:
    if quick is not None and _proven(node, quick):
        return True
    return all(check(node).ok for check in checks)
