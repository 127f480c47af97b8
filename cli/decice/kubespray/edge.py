"""Keep kube-proxy, the CNI and nodelocaldns off KubeEdge edge nodes.

Kubespray v2.29.1 has no variable for this: kube-proxy's DaemonSet is made by kubeadm,
flannel's affinity is fixed in its template, and ``calico_ds_nodeselector`` /
``nodelocaldns_ds_nodeselector`` are plain nodeSelectors (equality only, they cannot say
"label absent"). So decice patches the DaemonSets after every cluster.yml run (Kubespray
re-applies its manifests on each run, which would drop an older patch): every
nodeSelectorTerm of each DaemonSet's required node affinity gets
``node-role.kubernetes.io/edge DoesNotExist`` (the label keadm join puts on edge nodes).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    from decice_kube.client import Client

EDGE_LABEL = "node-role.kubernetes.io/edge"
NAMESPACE = "kube-system"
DAEMONSETS = f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets"
USER_AGENT = "decice"
EXCLUDE = {"key": EDGE_LABEL, "operator": "DoesNotExist"}
# DaemonSet names in kube-system: kubeadm's kube-proxy; Kubespray's calico, flannel
# (kube-flannel on amd64, kube-flannel-ds-<arch> elsewhere), cilium (its helm chart) and
# nodelocaldns (+ nodelocaldns-second when enabled).
_EXACT = {"kube-proxy", "calico-node", "kube-flannel", "cilium", "cilium-envoy", "nodelocaldns"}
_PREFIXES = ("kube-flannel-ds-", "nodelocaldns-")


def applies_to(name: str) -> bool:
    return name in _EXACT or name.startswith(_PREFIXES)


def exclude_edge(affinity: dict[str, Any] | None) -> dict[str, Any]:
    """``affinity`` with the edge exclusion in every required nodeSelectorTerm (a copy).

    Terms are ORed, so each must carry the exclusion; expressions inside a term are
    ANDed, so adding it keeps what the term already asked (e.g. flannel's os/arch).
    """
    out = copy.deepcopy(affinity) if affinity else {}
    node = out.setdefault("nodeAffinity", {})
    required = node.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        expressions = term.setdefault("matchExpressions", [])
        if not any(
            e.get("key") == EDGE_LABEL and e.get("operator") == "DoesNotExist" for e in expressions
        ):
            expressions.append(dict(EXCLUDE))
    required["nodeSelectorTerms"] = terms
    return out


def patch_for(affinity: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """A JSON patch that sets the excluded affinity, or None when nothing changes."""
    wanted = exclude_edge(affinity)
    if wanted == (affinity or {}):
        return None
    return [{"op": "add", "path": "/spec/template/spec/affinity", "value": wanted}]


def apply(kubeconfig: Path, *, log: Callable[[str], None] = print) -> list[str]:
    """Patch the matching DaemonSets of kube-system; return the names patched."""
    from decice_kube.client import Client  # httpx, yaml: only when needed

    async def run() -> list[str]:
        async with Client.from_kubeconfig(kubeconfig, user_agent=USER_AGENT, max_retries=3) as kube:
            return await patch_daemonsets(kube, log=log)

    return asyncio.run(run())


async def patch_daemonsets(kube: Client, *, log: Callable[[str], None] = print) -> list[str]:
    """``apply`` over an open client."""
    from decice_kube.client import JSON_PATCH

    patched = []
    items, _ = await kube.list_all(DAEMONSETS)
    for ds in items:
        name = str(ds["metadata"]["name"])
        if not applies_to(name):
            continue
        pod_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        body = patch_for(pod_spec.get("affinity"))
        if body is None:
            continue
        await kube.request(
            "PATCH",
            f"{DAEMONSETS}/{quote(name)}",
            body=body,
            content_type=JSON_PATCH,
            ok_status=(),
        )
        log(f"{NAMESPACE}/{name}: excluded nodes labelled {EDGE_LABEL}")
        patched.append(name)
    return patched
