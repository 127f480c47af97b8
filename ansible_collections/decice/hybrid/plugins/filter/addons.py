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


class FilterModule:
    """decice.hybrid add-on filters."""

    def filters(self) -> dict[str, Any]:
        return {"addon_webhooks": addon_webhooks}
