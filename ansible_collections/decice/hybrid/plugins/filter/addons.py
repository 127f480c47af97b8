"""Filters of the add-on engine (decice.hybrid.addon_engine)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.decice.hybrid.plugins.module_utils import readiness, upstream


def addon_webhooks(results: Iterable[Mapping[str, Any]], namespace: str) -> list[dict[str, str]]:
    """Webhook configurations with a webhook that calls a service in ``namespace``.

    ``results``: one ``{item, resources}`` per webhook configuration kind (``item`` is the
    kind): what the engine's find_webhooks.yml sets, the same shape as the ``results`` of a
    looped ``kubernetes.core.k8s_info``. Returns ``[{kind, name}]``.
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


def crd_summary(crds: Iterable[Mapping[str, Any]], groups: Iterable[str]) -> list[dict[str, Any]]:
    """The CRDs of the API ``groups``, each reduced to what the engine uses
    (module_utils/readiness.py, which decice.hybrid.addon_wait returns too)."""
    return readiness.crd_summary(crds, groups)


class FilterModule:
    """decice.hybrid add-on filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "addon_webhooks": addon_webhooks,
            "crd_summary": crd_summary,
            "not_ready": not_ready,
            "object_refs": object_refs,
            "upstream_url": upstream_url,
        }
