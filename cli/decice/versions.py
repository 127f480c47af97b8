"""Pinned component versions, read from the collection's single versions file."""

from __future__ import annotations

from functools import cache
from typing import Any

import yaml

from decice import paths


def components() -> tuple[str, ...]:
    """Components shown by `decice plan`, in install order (add-ons from the registry)."""
    from decice import addons

    return ("kubespray", "kubernetes", *(c for a in addons.registry() for c in a.components))


@cache
def pinned() -> dict[str, dict[str, Any]]:
    """The ``decice_versions`` mapping of the collection's
    ``roles/common/vars/main/versions.yml``."""
    path = paths.versions_file()
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    table = data.get("decice_versions")
    if not isinstance(table, dict):
        raise ValueError(f"{path}: top-level key 'decice_versions' (a mapping) is missing")
    return table


def version_of(component: str) -> str:
    """The pinned version string of ``component``."""
    entry = pinned().get(component)
    if not isinstance(entry, dict) or "version" not in entry:
        raise KeyError(f"no pinned version for {component!r} in {paths.versions_file()}")
    return str(entry["version"])


def summary() -> dict[str, str]:
    """Component -> pinned version for every component that has one."""
    table = pinned()
    return {
        name: str(entry["version"])
        for name, entry in table.items()
        if isinstance(entry, dict) and "version" in entry
    }
