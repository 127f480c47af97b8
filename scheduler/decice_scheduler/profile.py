"""A scheduling profile: which filters run, which scores with which weights.

Config (a dict, or YAML text/file with the same shape)::

    percentageOfNodesToScore: 0      # 0 = adaptive (see scheduling.py), 1..100 = fixed
    filters:                         # default: every built-in filter
      - NodeUnschedulable
      - name: NodeResourcesFit
        args: {ignoredResources: [example.com/dongle]}
    scores:                          # default: DEFAULT_SCORES
      - {name: LeastAllocated, weight: 1, args: {resources: [{name: cpu, weight: 2}]}}
      - {name: mypkg.plugins:MyScore, weight: 3}

A plugin is named by its registered name, ``package.module:Class``, or an entry
point in the ``decice_scheduler.plugins`` group.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from decice_scheduler.framework import FilterPlugin, Registry, ScorePlugin
from decice_scheduler.plugins import BUILTIN_FILTERS, builtin_registry

__all__ = ["DEFAULT_SCORES", "Profile", "load_profile"]

# Placement is a strong preference, GPU keeping second, spreading as the tie breaker.
DEFAULT_SCORES: tuple[tuple[str, int], ...] = (
    ("LeastAllocated", 1),
    ("TaintTolerationScore", 1),
    ("GpuAware", 2),
    ("HybridPlacement", 5),
)
_KEYS = frozenset({"percentageOfNodesToScore", "filters", "scores"})


@dataclass(frozen=True, slots=True)
class Profile:
    filters: tuple[FilterPlugin, ...]
    scores: tuple[tuple[ScorePlugin, int], ...]
    percentage_of_nodes_to_score: int = 0

    @classmethod
    def default(cls) -> Profile:
        return cls.from_config({})

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any] | None, registry: Registry | None = None
    ) -> Profile:
        config = dict(config or {})
        unknown = set(config) - _KEYS
        if unknown:
            raise ValueError(
                f"unknown profile keys {sorted(unknown)}; expected some of {sorted(_KEYS)}"
            )
        registry = registry or builtin_registry()
        percentage = config.get("percentageOfNodesToScore", 0)
        if not isinstance(percentage, int) or not 0 <= percentage <= 100:
            raise ValueError(f"percentageOfNodesToScore must be 0..100, got {percentage!r}")

        filter_specs = config.get("filters")
        if filter_specs is None:
            filter_specs = [cls_.name for cls_ in BUILTIN_FILTERS]
        filters: list[FilterPlugin] = [
            plugin for plugin, _ in _plugins(registry, filter_specs, "filters", FilterPlugin)
        ]

        score_specs = config.get("scores")
        if score_specs is None:
            score_specs = [{"name": n, "weight": w} for n, w in DEFAULT_SCORES]
        scores: list[tuple[ScorePlugin, int]] = [
            (plugin, weight)
            for plugin, weight in _plugins(registry, score_specs, "scores", ScorePlugin)
            if weight
        ]
        return cls(tuple(filters), tuple(scores), percentage)


def _plugins(
    registry: Registry, specs: Iterable[object], section: str, kind: type
) -> list[tuple[Any, int]]:
    """(plugin, weight) for each entry of a profile section, each checked to be a ``kind``."""
    out: list[tuple[Any, int]] = []
    for spec in specs:
        name, args, weight = _entry(spec, section)
        plugin = registry.create(name, args)
        if not isinstance(plugin, kind):
            raise ValueError(f"{section}: {name!r} is not a {kind.__name__}")
        out.append((plugin, weight))
    return out


def _entry(spec: object, section: str) -> tuple[str, Mapping[str, Any] | None, int]:
    if isinstance(spec, str):
        return spec, None, 1
    if isinstance(spec, Mapping) and isinstance(spec.get("name"), str):
        extra = set(spec) - {"name", "args", "weight"}
        if extra:
            raise ValueError(f"{section}: {spec['name']!r} has unknown keys {sorted(extra)}")
        weight = spec.get("weight", 1)
        if not isinstance(weight, int) or weight < 0:
            raise ValueError(f"{section}: {spec['name']!r} weight must be an int >= 0")
        args = spec.get("args")
        if args is not None and not isinstance(args, Mapping):
            raise ValueError(f"{section}: {spec['name']!r} args must be a mapping")
        return spec["name"], args, weight
    raise ValueError(f"{section}: each entry is a plugin name or {{name, args, weight}}: {spec!r}")


def load_profile(source: str | Path, registry: Registry | None = None) -> Profile:
    """A profile from a YAML file (a Path, or a str naming an existing file) or YAML text."""
    text = source.read_text() if isinstance(source, Path) else source
    if isinstance(source, str) and "\n" not in source and Path(source).is_file():
        text = Path(source).read_text()
    data = yaml.safe_load(text) or {}
    if not isinstance(data, Mapping):
        raise ValueError("a profile must be a YAML mapping")
    return Profile.from_config(data, registry)
