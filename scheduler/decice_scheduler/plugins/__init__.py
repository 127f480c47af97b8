"""The built-in filter and score plugins, and a registry holding them."""

from __future__ import annotations

from decice_scheduler.framework import Plugin, Registry
from decice_scheduler.plugins.allocation import LeastAllocated, MostAllocated
from decice_scheduler.plugins.fit import NodeResourcesFit
from decice_scheduler.plugins.gpu import GpuAware
from decice_scheduler.plugins.node_filters import (
    NodeAffinity,
    NodeName,
    NodeSelector,
    NodeUnschedulable,
)
from decice_scheduler.plugins.placement import HybridPlacement
from decice_scheduler.plugins.taints import TaintToleration, TaintTolerationScore

__all__ = ["BUILTIN_FILTERS", "BUILTIN_PLUGINS", "BUILTIN_SCORES", "builtin_registry"]

# Cheap, unresolvable checks first; resource fit last.
BUILTIN_FILTERS: tuple[type[Plugin], ...] = (
    NodeUnschedulable,
    NodeName,
    NodeSelector,
    NodeAffinity,
    TaintToleration,
    NodeResourcesFit,
)
BUILTIN_SCORES: tuple[type[Plugin], ...] = (
    LeastAllocated,
    MostAllocated,
    GpuAware,
    HybridPlacement,
    TaintTolerationScore,
)
BUILTIN_PLUGINS = BUILTIN_FILTERS + BUILTIN_SCORES


def builtin_registry() -> Registry:
    """A fresh registry with every built-in plugin under its ``name``."""
    return Registry({cls.name: cls for cls in BUILTIN_PLUGINS})
