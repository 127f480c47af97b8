"""An immutable view of the cluster for one scheduling cycle."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType

from decice_scheduler.nodeinfo import NodeInfo

__all__ = ["Snapshot"]


class Snapshot:
    """Nodes as of one state generation.

    Consecutive snapshots share every ``NodeInfo`` that did not change in between; a
    ``NodeInfo`` is never mutated, so an older snapshot stays valid while a newer one
    is taken.
    """

    __slots__ = ("_by_name", "generation", "nodes")

    def __init__(self, by_name: dict[str, NodeInfo], generation: int) -> None:
        self._by_name = by_name
        self.generation = generation
        self.nodes: tuple[NodeInfo, ...] = tuple(by_name.values())

    @property
    def by_name(self) -> Mapping[str, NodeInfo]:
        return MappingProxyType(self._by_name)

    def get(self, name: str) -> NodeInfo | None:
        return self._by_name.get(name)

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[NodeInfo]:
        return iter(self.nodes)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def _table(self) -> dict[str, NodeInfo]:
        """The backing table, for ClusterState to derive the next snapshot from."""
        return self._by_name
