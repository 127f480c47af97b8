"""Filters of the add-on engine (decice.hybrid.addon_engine)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.decice.hybrid.plugins.module_utils import upstream


def upstream_url(url: str, rewrite: Mapping[str, str] | None) -> str:
    """``url`` with the site's rewrite applied (module_utils/upstream.py)."""
    return upstream.rewritten(url, rewrite)


def not_ready(resources: Iterable[Mapping[str, Any]], condition: str) -> list[str]:
    """Names of the objects whose ``status.conditions`` lack ``condition`` with status True."""
    names: list[str] = []
    for obj in resources:
        conditions = (obj.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == condition and c.get("status") == "True" for c in conditions):
            names.append(str(obj["metadata"]["name"]))
    return names


def object_refs(objects: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each object reduced to what names it (api_version, kind, name and namespace): the
    ``extra_objects`` of one ``decice.hybrid.addon_remove`` that deletes them all."""
    refs: list[dict[str, Any]] = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        ref = {"api_version": obj["apiVersion"], "kind": obj["kind"], "name": str(meta["name"])}
        if meta.get("namespace"):
            ref["namespace"] = str(meta["namespace"])
        refs.append(ref)
    return refs


class FilterModule:
    """decice.hybrid add-on filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "not_ready": not_ready,
            "object_refs": object_refs,
            "upstream_url": upstream_url,
        }
