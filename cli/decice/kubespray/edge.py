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

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

EDGE_LABEL = "node-role.kubernetes.io/edge"
NAMESPACE = "kube-system"
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


def apply(
    kubeconfig: Path, *, apps_api: Any = None, log: Callable[[str], None] = print
) -> list[str]:
    """Patch the matching DaemonSets of kube-system; return the names patched."""
    if apps_api is None:
        from kubernetes import client, config

        api_client = config.new_client_from_config(config_file=str(kubeconfig))
        apps_api = client.AppsV1Api(api_client)
    sanitize = _sanitizer(apps_api)
    patched = []
    for ds in apps_api.list_namespaced_daemon_set(NAMESPACE).items:
        name = ds.metadata.name
        if not applies_to(name):
            continue
        current = sanitize(ds.spec.template.spec.affinity)
        body = patch_for(current)
        if body is None:
            continue
        apps_api.patch_namespaced_daemon_set(name, NAMESPACE, body)
        log(f"{NAMESPACE}/{name}: excluded nodes labelled {EDGE_LABEL}")
        patched.append(name)
    return patched


def _sanitizer(apps_api: Any) -> Callable[[Any], dict[str, Any] | None]:
    api_client = getattr(apps_api, "api_client", None)

    def sanitize(obj: Any) -> dict[str, Any] | None:
        if obj is None or isinstance(obj, dict):
            return obj
        if api_client is None:
            raise TypeError("need a kubernetes ApiClient to serialise the affinity")
        result: dict[str, Any] = api_client.sanitize_for_serialization(obj)
        return result

    return sanitize
