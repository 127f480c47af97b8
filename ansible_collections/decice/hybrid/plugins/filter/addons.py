"""Filters of the add-on engine (decice.hybrid.addon_engine)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def addon_webhooks(results: Iterable[Mapping[str, Any]], namespace: str) -> list[dict[str, str]]:
    """Webhook configurations with a webhook that calls a service in ``namespace``.

    ``results``: the ``results`` of a looped ``kubernetes.core.k8s_info`` over the two
    webhook configuration kinds (``item`` is the kind). Returns ``[{kind, name}]``.
    """
    found: list[dict[str, str]] = []
    for result in results:
        kind = str(result.get("item", ""))
        for config in result.get("resources") or []:
            hooks = config.get("webhooks") or []
            if any(
                ((hook.get("clientConfig") or {}).get("service") or {}).get("namespace")
                == namespace
                for hook in hooks
            ):
                found.append({"kind": kind, "name": str(config["metadata"]["name"])})
    return found


def not_ready(resources: Iterable[Mapping[str, Any]], condition: str) -> list[str]:
    """Names of the objects whose ``status.conditions`` lack ``condition`` with status True."""
    names: list[str] = []
    for obj in resources:
        conditions = (obj.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == condition and c.get("status") == "True" for c in conditions):
            names.append(str(obj["metadata"]["name"]))
    return names


def without_ready_address(
    endpoints: Iterable[Mapping[str, Any]], services: Iterable[str]
) -> list[str]:
    """The ``services`` whose Endpoints object (from ``endpoints``) has no ready address."""
    ready = {
        str(ep["metadata"]["name"])
        for ep in endpoints
        if any(subset.get("addresses") for subset in ep.get("subsets") or [])
    }
    return [name for name in services if name not in ready]


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
            "addon_webhooks": addon_webhooks,
            "not_ready": not_ready,
            "object_refs": object_refs,
            "without_ready_address": without_ready_address,
        }
