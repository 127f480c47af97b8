"""The add-on registry (``roles/common/vars/main/addons.yml`` of the collection), read once
for the CLI.

The same file is loaded by the up/down playbooks; this module gives the spec model,
`plan` and the spec's cross-field rules one view of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import yaml

from decice import paths


@dataclass(frozen=True)
class Addon:
    """One registry entry."""

    name: str
    versions_key: str
    components: tuple[str, ...]
    namespace: str
    depends_on: tuple[str, ...]
    targets: tuple[str, ...]


@cache
def registry() -> tuple[Addon, ...]:
    """Every add-on in install order."""
    path = paths.addons_file()
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    entries = data.get("decice_addons")
    if not isinstance(entries, list):
        raise ValueError(f"{path}: top-level key 'decice_addons' (a list) is missing")
    return tuple(
        Addon(
            name=str(e["name"]),
            versions_key=str(e["versions_key"]),
            components=tuple(e.get("components") or [e["versions_key"]]),
            namespace=str(e["namespace"]),
            depends_on=tuple(e.get("depends_on") or ()),
            targets=tuple(e.get("targets") or ()),
        )
        for e in entries
    )


def names() -> tuple[str, ...]:
    return tuple(a.name for a in registry())


def get(name: str) -> Addon:
    for addon in registry():
        if addon.name == name:
            return addon
    raise KeyError(f"no add-on {name!r} in {paths.addons_file()}")


def switch_of(component: str) -> str | None:
    """The add-on whose ``enabled`` switch turns ``component`` on (None: always part)."""
    for addon in registry():
        if component in addon.components:
            return addon.name
    return None
