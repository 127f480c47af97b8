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
    """Each object reduced to what names it (apiVersion, kind, metadata.name and namespace):
    the ``definition`` list of one ``kubernetes.core.k8s`` call that deletes them all."""
    refs: list[dict[str, Any]] = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        ref_meta = {"name": str(meta["name"])}
        if meta.get("namespace"):
            ref_meta["namespace"] = str(meta["namespace"])
        refs.append({"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": ref_meta})
    return refs


class FilterModule:
    """decice.hybrid add-on filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "not_ready": not_ready,
            "object_refs": object_refs,
            "upstream_url": upstream_url,
        }
