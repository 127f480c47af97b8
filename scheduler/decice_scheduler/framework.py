"""Plugin interfaces and the registry that finds plugins by name, dotted path or entry point.

A filter answers "can this pod run on this node" with a ``Status``; a score plugin
rates a feasible node 0..100 (``normalize`` may rescale the raw scores across all
feasible nodes, e.g. against the maximum). Plugins receive a ``PodInfo`` (the pod parsed
once per cycle; ``pod.raw`` is the raw JSON) and a read-only ``NodeInfo``.

The scheduling cycle calls two batch hooks with the same meaning, so that a plugin can
do its per-pod work once instead of once per node:

- ``FilterPlugin.prepare(pod)`` returns a function ``node -> Status`` that must answer
  exactly what ``filter(pod, node)`` answers, or None when every node passes;
- ``ScorePlugin.score_nodes(pod, nodes)`` returns the normalised scores in node order,
  exactly what ``score`` + ``normalize`` give.

The defaults call ``filter`` / ``score`` + ``normalize``, so a research plugin only
implements those. A subclass that overrides ``filter`` (or ``score``/``normalize``)
without overriding the batch hook gets the default hook back, so it never inherits a
built-in's specialised hook that would bypass its override.
"""

from __future__ import annotations

import enum
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

from decice_scheduler.cache.nodeinfo import NodeInfo
from decice_scheduler.cache.podinfo import PodInfo

__all__ = [
    "ENTRY_POINT_GROUP",
    "MAX_SCORE",
    "Code",
    "FilterFn",
    "FilterPlugin",
    "Plugin",
    "Registry",
    "ScorePlugin",
    "Status",
]

ENTRY_POINT_GROUP = "decice_scheduler.plugins"
MAX_SCORE = 100


class Code(enum.Enum):
    SUCCESS = "Success"
    UNSCHEDULABLE = "Unschedulable"
    # Evicting other pods would not help either (wrong node name, selector mismatch).
    UNRESOLVABLE = "UnschedulableAndUnresolvable"
    ERROR = "Error"


class Status(NamedTuple):
    """The outcome of one filter on one node (a tuple: cheap on the hot path)."""

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS

    @classmethod
    def unschedulable(cls, *reasons: str, unresolvable: bool = False) -> Status:
        return cls(Code.UNRESOLVABLE if unresolvable else Code.UNSCHEDULABLE, reasons)


SUCCESS = Status()


class Plugin(ABC):  # noqa: B024 - a common base, not an interface of its own
    """Common base: a name and optional arguments from the profile."""

    name: ClassVar[str] = ""

    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        self.args: Mapping[str, Any] = dict(args or {})


FilterFn = Callable[[NodeInfo], Status]


class FilterPlugin(Plugin):
    @abstractmethod
    def filter(self, pod: PodInfo, node: NodeInfo) -> Status: ...

    def prepare(self, pod: PodInfo) -> FilterFn | None:
        """Per pod: ``node -> filter(pod, node)``, or None when every node passes."""
        run = self.filter
        return lambda node: run(pod, node)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "filter" in cls.__dict__ and "prepare" not in cls.__dict__:
            cls.prepare = FilterPlugin.prepare  # type: ignore[method-assign]


class ScorePlugin(Plugin):
    @abstractmethod
    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        """A raw score; after ``normalize`` it must be within 0..MAX_SCORE."""

    def normalize(self, pod: PodInfo, scores: dict[str, int]) -> None:
        """Rescale ``scores`` (node name -> raw score) in place. Default: keep them."""
        del pod, scores

    def score_nodes(self, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        """Normalised scores of ``nodes`` (distinct names), in their order."""
        scores = {n.name: self.score(pod, n) for n in nodes}
        self.normalize(pod, scores)
        return [scores[n.name] for n in nodes]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__
        if ("score" in own or "normalize" in own) and "score_nodes" not in own:
            cls.score_nodes = ScorePlugin.score_nodes  # type: ignore[method-assign]


class Registry:
    """Plugin classes by name.

    ``resolve(ref)`` accepts a registered name, a dotted path ``package.module:Class``,
    or the name of an entry point in the ``decice_scheduler.plugins`` group.
    """

    def __init__(self, plugins: Mapping[str, type[Plugin]] | None = None) -> None:
        self._plugins: dict[str, type[Plugin]] = dict(plugins or {})

    def register(self, cls: type[Plugin], name: str | None = None) -> None:
        key = name or cls.name or cls.__name__
        if key in self._plugins and self._plugins[key] is not cls:
            raise ValueError(f"plugin name {key!r} is already registered")
        self._plugins[key] = cls

    def names(self) -> list[str]:
        return sorted(self._plugins)

    def resolve(self, ref: str) -> type[Plugin]:
        if ref in self._plugins:
            return self._plugins[ref]
        if ":" in ref:
            return _checked(ref, _import_dotted(ref))
        # importlib.metadata costs milliseconds to import: only when a plugin is looked up
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name == ref:
                cls = _checked(ref, ep.load())
                self._plugins[ref] = cls
                return cls
        known = ", ".join(self.names()) or "none"
        raise KeyError(
            f"unknown plugin {ref!r}: not registered ({known}), not 'module:Class', "
            f"no entry point in group {ENTRY_POINT_GROUP!r}"
        )

    def create(self, ref: str, args: Mapping[str, Any] | None = None) -> Plugin:
        return self.resolve(ref)(args)


def _import_dotted(ref: str) -> object:
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise KeyError(f"plugin path {ref!r} must look like 'package.module:Class'")
    try:
        obj: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise KeyError(f"plugin {ref!r}: cannot import {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise KeyError(f"plugin {ref!r}: {module_name!r} has no {attr!r}") from exc
    return obj


def _checked(ref: str, obj: object) -> type[Plugin]:
    if isinstance(obj, type) and issubclass(obj, Plugin):
        return obj
    raise KeyError(f"plugin {ref!r} is not a FilterPlugin or ScorePlugin subclass")
