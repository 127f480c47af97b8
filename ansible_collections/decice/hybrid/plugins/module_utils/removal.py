"""Removing one add-on without a trace, in the order that leaves nothing stuck.

``decice.hybrid.addon_remove`` runs these steps in one process (one Kubernetes client, the
release removed with helm):

1. the custom resources of the add-on's CRDs, deleted while its controllers still run;
   they get ``cr_grace`` seconds to finish them (their finalizers);
2. the helm release (without ``--wait``: a CRD templated in the chart cannot go while a
   resource of it keeps a finalizer, and that finalizer is stripped only once the
   release's controllers are gone);
3. the finalizers of the custom resources still there, whose controller is gone now;
4. the webhook configurations and APIServices that call a service of its namespace (they
   would refuse requests, or break discovery, once their backend is gone);
5. its CRDs, deleted at once (the API server removes their objects in parallel), and
   waited for unless the caller waits for several add-ons at once;
6. the objects its hooks and jobs made outside the release;
7. its namespace, unless another release of the add-on still lives there; waited for
   unless the caller waits.

Every step looks first and deletes only what is there, so a half-installed or already
removed add-on is fine, and a removal killed at any point completes when run again.

Standard library only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ansible_collections.decice.hybrid.plugins.module_utils import readiness

Obj = dict[str, Any]
CRD_API = readiness.CRD_API
WEBHOOK_API = "admissionregistration.k8s.io/v1"
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
APISERVICE = ("apiregistration.k8s.io/v1", "APIService")


class Cluster(Protocol):
    """What a removal needs of a cluster."""

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str = ""
    ) -> list[Obj]: ...

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        """Send a delete; False when the object is not there."""

    def strip_finalizers(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> bool:
        """Merge-patch ``metadata.finalizers: []``; False when the object is not there."""


@dataclass(frozen=True)
class Plan:
    """What to remove (the add-on engine's variables)."""

    name: str
    namespace: str
    crd_groups: Sequence[str] = ()
    extra_objects: Sequence[Mapping[str, Any]] = ()
    cr_grace: float = 10.0
    keep_namespace: bool = False
    crds_wait: bool = True
    namespace_wait: bool = True
    timeout: float = 300.0


@dataclass
class Outcome:
    deleted: list[str] = field(default_factory=list)
    stripped: list[str] = field(default_factory=list)
    release: str = ""  # "removed", "absent"
    remaining: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.deleted or self.stripped or self.release == "removed")

    def as_dict(self) -> Obj:
        return {"changed": self.changed, "deleted": self.deleted, "stripped": self.stripped,
                "release": self.release, "remaining": self.remaining,
                "seconds": self.seconds}  # fmt: skip


Poll = Callable[[Callable[[], list[str]], float], tuple[list[str], list[str], str]]
"""``poll(check, timeout)`` -> (pending at first, pending at the end, last error)."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def describe(api_version: str, kind: str, name: str, namespace: str | None = None) -> str:
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _described(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    return describe(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))


def custom_resources(cluster: Cluster, crds: Iterable[Mapping[str, Any]]) -> list[Obj]:
    """Every custom resource of ``crds`` (:func:`readiness.crd_summary` entries)."""
    found: list[Obj] = []
    for crd in crds:
        found.extend(cluster.list(crd["cr_api_version"], crd["cr_kind"]))
    return found


def served_by(apiservice: Mapping[str, Any], namespace: str) -> bool:
    service = (apiservice.get("spec") or {}).get("service") or {}
    return bool(service) and service.get("namespace") == namespace


class Removal:
    """One add-on's removal; ``dry`` (check mode) deletes nothing and says what it would."""

    def __init__(self, cluster: Cluster, plan: Plan, poll: Poll, dry: bool = False) -> None:
        self.cluster, self.plan, self.poll, self.dry = cluster, plan, poll, dry
        self.outcome = Outcome()

    def _delete(self, api_version: str, kind: str, name: str, namespace: str | None) -> None:
        if self.dry or self.cluster.delete(api_version, kind, name, namespace):
            self.outcome.deleted.append(describe(api_version, kind, name, namespace))

    def _delete_objects(self, objects: Iterable[Mapping[str, Any]]) -> None:
        for obj in objects:
            meta = _meta(obj)
            self._delete(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))

    def _wait(self, check: Callable[[], list[str]], timeout: float) -> list[str]:
        if self.dry:
            return []
        _first, left, error = self.poll(check, timeout)
        if error:
            left = [*left, f"reading the cluster: {error}"]
        return left

    def crs_and_grace(self, crds: Sequence[Mapping[str, Any]]) -> list[Obj]:
        """Step 1: delete the custom resources; return those still there after the grace."""
        crs = custom_resources(self.cluster, crds)
        self._delete_objects(crs)
        if not crs or self.dry:
            return crs if self.dry else []
        kinds = {(cr["apiVersion"], cr["kind"]) for cr in crs}
        left: list[Obj] = []

        def check() -> list[str]:
            left[:] = [obj for api, kind in sorted(kinds) for obj in self.cluster.list(api, kind)]
            return [_described(o) for o in left]

        self._wait(check, self.plan.cr_grace)
        return left

    def strip(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """Step 3: strip the finalizers of what is still there."""
        for obj in objects:
            meta = _meta(obj)
            if not meta.get("finalizers"):
                continue
            where = (obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
            if self.dry or self.cluster.strip_finalizers(*where):
                self.outcome.stripped.append(describe(*where))

    def hooks_and_apiservices(self) -> None:
        """Step 4."""
        namespace = self.plan.namespace
        for kind in WEBHOOK_KINDS:
            for config in self.cluster.list(WEBHOOK_API, kind):
                if readiness.webhook_services([config], namespace):
                    self._delete(WEBHOOK_API, kind, _meta(config)["name"], None)
        for apiservice in self.cluster.list(*APISERVICE):
            if served_by(apiservice, namespace):
                self._delete(*APISERVICE, _meta(apiservice)["name"], None)

    def crds(self, crds: Sequence[Mapping[str, Any]]) -> None:
        """Step 5."""
        names = [str(_meta(crd)["name"]) for crd in crds]
        for name in names:
            self._delete(*CRD_API, name, None)
        if names and self.plan.crds_wait:
            self.outcome.remaining += self._wait(
                lambda: readiness.crds_left(self.cluster.list(*CRD_API), names), self.plan.timeout
            )

    def extra_objects(self) -> None:
        """Step 6."""
        for item in self.plan.extra_objects:
            namespace = str(item.get("namespace") or "") or None
            self._delete(str(item["api_version"]), str(item["kind"]), str(item["name"]), namespace)

    def namespace(self) -> None:
        """Step 7."""
        if self.plan.keep_namespace:
            return
        namespace = self.plan.namespace
        self._delete("v1", "Namespace", namespace, None)
        if self.plan.namespace_wait:

            def check() -> list[str]:
                there = [ns for ns in self.cluster.list("v1", "Namespace")
                         if _meta(ns).get("name") == namespace]  # fmt: skip
                return [f"namespace {namespace} still there"] if there else []

            self.outcome.remaining += self._wait(check, self.plan.timeout)


def remove(
    cluster: Cluster,
    plan: Plan,
    uninstall_release: Callable[[], bool],
    poll: Poll,
    dry: bool = False,
    clock: Callable[[], float] | None = None,
) -> Outcome:
    """Remove the add-on of ``plan``. ``uninstall_release()`` removes the helm release and
    says whether there was one (in ``dry`` mode: whether there is one)."""
    removal = Removal(cluster, plan, poll, dry)
    out = removal.outcome
    timer = _Timer(out.seconds, clock)
    with timer("custom resources"):
        crds = readiness.crd_summary(cluster.list(*CRD_API), plan.crd_groups)
        left = removal.crs_and_grace(crds)
    with timer("release"):
        out.release = "removed" if uninstall_release() else "absent"
    with timer("finalizers"):
        removal.strip(left)
    with timer("webhooks and APIServices"):
        removal.hooks_and_apiservices()
    with timer("CRDs"):
        removal.crds(crds)
    with timer("extra objects"):
        removal.extra_objects()
    with timer("namespace"):
        removal.namespace()
    return out


class _Timer:
    """Seconds per step, into ``into`` (the outcome's ``seconds``)."""

    def __init__(self, into: dict[str, float], clock: Callable[[], float] | None) -> None:
        self.into, self.clock = into, clock or time.monotonic
        self.step, self.start = "", 0.0

    def __call__(self, step: str) -> _Timer:
        self.step = step
        return self

    def __enter__(self) -> None:
        self.start = self.clock()

    def __exit__(self, *exc: object) -> None:
        self.into[self.step] = round(self.clock() - self.start, 2)
