"""When an add-on counts as ready, and when what a removal deletes counts as gone.

The add-on engine waits for both in one process per step (``decice.hybrid.addon_install``,
``addon_wait``): these functions say, from objects the module lists, what is still pending
and why. They name each object and the reason, so a wait that runs out says exactly what
it waited for.

Ready (what ``helm install`` does not wait for, and what a working add-on needs):

- each CRD of the add-on's API groups is Established;
- each Deployment of its namespace is Available;
- each DaemonSet it names is there, its controller has seen its latest spec, and it has a
  ready, up-to-date pod on every node it is scheduled to;
- each Service of its namespace that a webhook configuration calls has a ready endpoint
  address (a webhook with failurePolicy Fail and no backend refuses every matching
  request, cluster-wide).

Gone: a CRD that was deleted is no longer listed (or, for a whole removal, no CRD carries a
deletionTimestamp), and no namespace of the removal is still Terminating.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

Obj = Mapping[str, Any]


def _conditions(obj: Obj) -> list[Mapping[str, Any]]:
    return list((obj.get("status") or {}).get("conditions") or [])


def _condition(obj: Obj, kind: str) -> Mapping[str, Any] | None:
    return next((c for c in _conditions(obj) if c.get("type") == kind), None)


def _true(obj: Obj, kind: str) -> bool:
    found = _condition(obj, kind)
    return found is not None and found.get("status") == "True"


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", "?"))


def _why(obj: Obj, kind: str) -> str:
    """The condition's reason and message, when the object says why it is not ``kind``."""
    found = _condition(obj, kind)
    if found is None:
        return "no such condition yet"
    words = [str(found.get(key)) for key in ("reason", "message") if found.get(key)]
    return ": ".join(words) if words else f"status {found.get('status')}"


def crd_summary(crds: Iterable[Obj], groups: Iterable[str]) -> list[dict[str, Any]]:
    """The CRDs of the API ``groups``, each reduced to what the engine uses: what names it,
    the apiVersion (storage version) and kind of its custom resources, and whether it is
    Established. A CRD can be megabytes (Sedna's); these are what task results and the
    run's events carry instead."""
    wanted = set(groups)
    summary: list[dict[str, Any]] = []
    for crd in crds:
        spec = crd.get("spec") or {}
        if spec.get("group") not in wanted:
            continue
        versions = spec.get("versions") or []
        storage = next((v for v in versions if v.get("storage")), versions[0] if versions else {})
        summary.append(
            {
                "apiVersion": crd.get("apiVersion", "apiextensions.k8s.io/v1"),
                "kind": crd.get("kind", "CustomResourceDefinition"),
                "metadata": {"name": _name(crd)},
                "cr_api_version": f"{spec['group']}/{storage.get('name', '')}",
                "cr_kind": str((spec.get("names") or {}).get("kind", "")),
                "established": _true(crd, "Established"),
            }
        )
    return summary


def webhook_services(configs: Iterable[Obj], namespace: str) -> list[str]:
    """Names of the Services in ``namespace`` that a webhook of ``configs`` (validating or
    mutating webhook configurations) calls, sorted, each once."""
    names: set[str] = set()
    for config in configs:
        for hook in config.get("webhooks") or []:
            service = (hook.get("clientConfig") or {}).get("service") or {}
            if service.get("namespace") == namespace and service.get("name"):
                names.add(str(service["name"]))
    return sorted(names)


def has_ready_address(endpoints: Obj | None) -> bool:
    return endpoints is not None and any(
        subset.get("addresses") for subset in endpoints.get("subsets") or []
    )


def crd_pending(crd: Obj) -> str | None:
    if _true(crd, "Established"):
        return None
    return f"CRD {_name(crd)} not Established ({_why(crd, 'Established')})"


def deployment_pending(namespace: str, deployment: Obj) -> str | None:
    if _true(deployment, "Available"):
        return None
    why = _why(deployment, "Available")
    return f"Deployment {namespace}/{_name(deployment)} not Available ({why})"


def daemonset_pending(namespace: str, name: str, daemonset: Obj | None) -> str | None:
    where = f"DaemonSet {namespace}/{name}"
    if daemonset is None:
        return f"{where} not there"
    status = daemonset.get("status") or {}
    generation = int((daemonset.get("metadata") or {}).get("generation") or 0)
    if int(status.get("observedGeneration") or 0) != generation:
        return f"{where}: its controller has not seen generation {generation} yet"
    desired = int(status.get("desiredNumberScheduled") or 0)
    ready = int(status.get("numberReady") or 0)
    updated = int(status.get("updatedNumberScheduled") or 0)
    if ready != desired or updated != desired:
        return f"{where}: {ready} ready and {updated} up to date of {desired} scheduled"
    return None


def endpoint_pending(namespace: str, service: str, endpoints: Obj | None) -> str | None:
    if has_ready_address(endpoints):
        return None
    return f"webhook service {namespace}/{service} has no ready endpoint address"


def crds_left(crds: Iterable[Obj], names: Sequence[str] | None) -> list[str]:
    """What of a CRD deletion is not done: with ``names``, those CRDs still listed;
    without, every listed CRD that carries a deletionTimestamp."""
    listed = {_name(crd): crd for crd in crds}
    if names is not None:
        return [f"CRD {name} still there" for name in names if name in listed]
    return [
        f"CRD {name} still being deleted"
        for name, crd in sorted(listed.items())
        if (crd.get("metadata") or {}).get("deletionTimestamp")
    ]


def namespaces_left(namespaces: Iterable[Obj]) -> list[str]:
    """The namespaces still Terminating."""
    return [
        f"namespace {_name(ns)} still Terminating"
        for ns in namespaces
        if (ns.get("status") or {}).get("phase") == "Terminating"
    ]


CRD_API = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


class Reader(Protocol):
    """What a readiness check reads (``module_utils.cluster.Client``)."""

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str = ""
    ) -> list[dict[str, Any]]: ...

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None: ...


def ready_check(
    reader: Reader,
    *,
    namespace: str,
    crd_groups: Sequence[str],
    deployments: bool = True,
    daemonsets: Sequence[str] = (),
    webhooks: bool = True,
    out: dict[str, Any],
) -> Callable[[], list[str]]:
    """One read of what of an add-on is not ready yet (see above), for a poll; lists the
    CRDs and webhook configurations once, then reads again only what was not ready. Each
    read leaves the CRDs' summary in ``out["crds"]``."""
    groups = set(crd_groups)
    crds = {str(c["metadata"]["name"]): c for c in reader.list(*CRD_API)
            if (c.get("spec") or {}).get("group") in groups}  # fmt: skip
    services: list[str] = []
    if webhooks and namespace:
        configs = [c for kind in WEBHOOK_KINDS
                   for c in reader.list("admissionregistration.k8s.io/v1", kind)]  # fmt: skip
        services = webhook_services(configs, namespace)
    crd_waits = {name for name, crd in crds.items() if crd_pending(crd)}

    def check() -> list[str]:
        pending: list[str] = []
        for name in sorted(crd_waits):
            crd = reader.get(*CRD_API, name)
            if crd is not None:
                crds[name] = crd
            why = crd_pending(crd) if crd is not None else f"CRD {name} gone"
            if why is None:
                crd_waits.discard(name)
            else:
                pending.append(why)
        if deployments and namespace:
            for deployment in reader.list("apps/v1", "Deployment", namespace):
                why = deployment_pending(namespace, deployment)
                pending.extend([why] if why else [])
        for name in daemonsets:
            why = daemonset_pending(
                namespace, name, reader.get("apps/v1", "DaemonSet", name, namespace)
            )
            pending.extend([why] if why else [])
        if services:
            endpoints = {str(e["metadata"]["name"]): e
                         for e in reader.list("v1", "Endpoints", namespace)}  # fmt: skip
            for service in services:
                why = endpoint_pending(namespace, service, endpoints.get(service))
                pending.extend([why] if why else [])
        out["crds"] = crd_summary(crds.values(), crd_groups)
        return pending

    return check
