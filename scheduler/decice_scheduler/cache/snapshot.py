"""An immutable view of the cluster for one scheduling cycle."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType

from decice_scheduler.cache.nodeinfo import NodeInfo

__all__ = ["LOG_LIMIT", "Snapshot"]

LOG_LIMIT = 4096  # derivations remembered along one line of snapshots (changed_since)


class Snapshot:
    """Nodes as of one state generation.

    Consecutive snapshots share every ``NodeInfo`` that did not change in between; a
    ``NodeInfo`` is never mutated, so an older snapshot stays valid while a newer one
    is taken. When no node was added or removed, a new snapshot also shares the
    name -> position index of the previous one and only replaces the changed entries
    of a copied tuple (``_derive``), instead of copying a dict of every node.
    """

    __slots__ = ("_by_name", "_index", "_log", "_seq", "_with", "generation", "nodes")

    def __init__(self, by_name: dict[str, NodeInfo], generation: int) -> None:
        self._by_name: dict[str, NodeInfo] | None = by_name
        self.generation = generation
        self.nodes: tuple[NodeInfo, ...] = tuple(by_name.values())
        self._index: dict[str, int] = {name: i for i, name in enumerate(by_name)}
        # extended resource -> positions of the nodes that mention it (lazy)
        self._with: dict[str, list[int]] = {}
        # the positions each derivation replaced, shared along a line of derived
        # snapshots; this snapshot is the state after its first ``_seq`` entries
        self._log: list[tuple[int, ...]] = []
        self._seq = 0

    @classmethod
    def _derive(
        cls, previous: Snapshot, changed: Mapping[str, NodeInfo], generation: int
    ) -> Snapshot:
        """``previous`` with some known nodes replaced (same names, same order)."""
        nodes = list(previous.nodes)
        index = previous._index
        log = previous._log
        if previous._seq != len(log) or len(log) >= LOG_LIMIT:
            log = []  # not the newest of its line (a branch), or a long line: a new one
        with_ = previous._with
        if with_:
            with_ = dict(with_)
        for name, info in changed.items():
            pos = index[name]
            if with_:
                old = nodes[pos]
                for resource in list(with_):
                    if _mentions(old, resource) != _mentions(info, resource):
                        del with_[resource]
            nodes[pos] = info
        new = cls.__new__(cls)
        new._by_name = None
        new.generation = generation
        new.nodes = tuple(nodes)
        new._index = index  # never mutated: shared
        new._with = with_  # lists never mutated: shared
        log.append(tuple(map(index.__getitem__, changed)))
        new._log = log
        new._seq = len(log)
        return new

    def changed_since(self, older: Snapshot) -> set[int] | None:
        """The positions whose ``NodeInfo`` may differ between ``older`` and this snapshot
        (a superset), when this one was derived from it (same layout); None: unknown."""
        if older._log is not self._log or older._seq > self._seq:
            return None
        return set().union(*self._log[older._seq : self._seq])

    @property
    def layout(self) -> object:
        """Which node sits where: two snapshots with the same ``layout`` object hold the
        same names at the same positions (a derived snapshot shares it)."""
        return self._index

    def positions_with(self, resource: str) -> list[int]:
        """Ascending positions of the nodes whose allocatable or requested amount of an
        extended ``resource`` is not zero (every other node has none of it)."""
        found = self._with.get(resource)
        if found is None:
            found = [i for i, info in enumerate(self.nodes) if _mentions(info, resource)]
            self._with[resource] = found
        return found

    @property
    def by_name(self) -> Mapping[str, NodeInfo]:
        return MappingProxyType(self._table())

    def get(self, name: str) -> NodeInfo | None:
        i = self._index.get(name)
        return None if i is None else self.nodes[i]

    def position(self, name: str) -> int | None:
        """Where a node sits in ``nodes``, or None."""
        return self._index.get(name)

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[NodeInfo]:
        return iter(self.nodes)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def _table(self) -> dict[str, NodeInfo]:
        """Name -> NodeInfo in node order (built on demand; never mutate it)."""
        table = self._by_name
        if table is None:
            table = self._by_name = {info.name: info for info in self.nodes}
        return table


def _mentions(info: NodeInfo, resource: str) -> bool:
    return resource in info.allocatable.extended or resource in info.requested.extended
