"""decice.hybrid.addon_remove's logic (module_utils/removal.py) against an in-memory
cluster: the safe order (custom resources while the controllers run, then the release,
finalizers, webhooks and APIServices, CRDs, extra objects, namespace), nothing that is not
the add-on's touched, a half-removed add-on completes, check mode deletes nothing, and a
wait that runs out names what is left."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from ansible_collections.decice.hybrid.plugins.module_utils import cluster as kube
from ansible_collections.decice.hybrid.plugins.module_utils import removal
from ansible_collections.decice.hybrid.plugins.modules import addon_remove

from tests.support import FakeClock, FakeModule

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
NS = "volcano-system"
GROUP = "batch.volcano.sh"


def fake_module(check_mode: bool = False, **params: Any) -> FakeModule:
    return FakeModule(addon_remove._argument_spec(), check_mode, **params)


def crd(name: str, group: str, kind: str) -> Obj:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {"group": group, "names": {"kind": kind},
                 "versions": [{"name": "v1alpha1", "storage": True}]},
    }  # fmt: skip


def obj(api: str, kind: str, name: str, namespace: str | None = None, **meta: Any) -> Obj:
    metadata: Obj = {"name": name, **meta}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": api, "kind": kind, "metadata": metadata}


def webhook(kind: str, name: str, namespace: str) -> Obj:
    config = obj("admissionregistration.k8s.io/v1", kind, name)
    config["webhooks"] = [{"name": "h", "clientConfig": {"service": {"namespace": namespace,
                                                                      "name": "svc"}}}]  # fmt: skip
    return config


class FakeCluster:
    """Objects in a list; a deleted object with finalizers stays (deletionTimestamp) until
    they are stripped, unless a controller (``controller_finishes``) finishes it."""

    def __init__(self, objects: list[Obj]) -> None:
        self.objects = objects
        self.log: list[str] = []
        self.controller_finishes = True

    def _find(self, api: str, kind: str, name: str, namespace: str | None) -> Obj | None:
        for o in self.objects:
            meta = o["metadata"]
            if (o["apiVersion"], o["kind"], meta["name"], meta.get("namespace")) == (
                api, kind, name, namespace):  # fmt: skip
                return o
        return None

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str = ""
    ) -> list[Obj]:
        return [copy.deepcopy(o) for o in self.objects
                if (o["apiVersion"], o["kind"]) == (api_version, kind)
                and (namespace is None or o["metadata"].get("namespace") == namespace)]  # fmt: skip

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        found = self._find(api_version, kind, name, namespace)
        if found is None:
            return False
        self.log.append(f"delete {kind} {name}")
        if found["metadata"].get("finalizers") and not self.controller_finishes:
            found["metadata"]["deletionTimestamp"] = "now"
        else:
            self.objects.remove(found)
        return True

    def strip_finalizers(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> bool:
        found = self._find(api_version, kind, name, namespace)
        if found is None:
            return False
        self.log.append(f"strip {kind} {name}")
        found["metadata"]["finalizers"] = []
        if found["metadata"].get("deletionTimestamp"):
            self.objects.remove(found)
        return True


def installed() -> list[Obj]:
    return [
        crd(f"jobs.{GROUP}", GROUP, "Job"),
        crd("queues.scheduling.volcano.sh", "scheduling.volcano.sh", "Queue"),
        crd("gateways.networking.istio.io", "networking.istio.io", "Gateway"),  # not Volcano's
        obj(f"{GROUP}/v1alpha1", "Job", "train", "default", finalizers=["volcano.sh/job"]),
        obj(f"{GROUP}/v1alpha1", "Job", "plain", "default"),
        obj("networking.istio.io/v1alpha1", "Gateway", "gw", "default"),
        webhook("ValidatingWebhookConfiguration", "volcano-admission-validate", NS),
        webhook("MutatingWebhookConfiguration", "volcano-admission-mutate", NS),
        webhook("ValidatingWebhookConfiguration", "someone-elses", "istio-system"),
        {**obj("apiregistration.k8s.io/v1", "APIService", "v1beta1.custom.metrics.k8s.io"),
         "spec": {"service": {"namespace": NS, "name": "metrics"}}},
        {**obj("apiregistration.k8s.io/v1", "APIService", "v1.apps"), "spec": {"service": None}},
        obj("v1", "Secret", "volcano-admission-secret", NS),
        obj("v1", "Namespace", NS),
        obj("v1", "Namespace", "default"),
    ]  # fmt: skip


def names(cluster: FakeCluster) -> set[str]:
    return {f"{o['kind']} {o['metadata']['name']}" for o in cluster.objects}


def poll_with(clock: FakeClock) -> removal.Poll:
    def poll(check: Callable[[], list[str]], timeout: float) -> tuple[list[str], list[str], str]:
        return kube.poll(check, timeout, 1.0, clock.time, clock.sleep)

    return poll


PLAN = removal.Plan(
    name="volcano",
    namespace=NS,
    crd_groups=[GROUP, "scheduling.volcano.sh"],
    extra_objects=[
        {"api_version": "v1", "kind": "Secret", "name": "volcano-admission-secret", "namespace": NS}
    ],
)


def _remove(cluster: FakeCluster, plan: removal.Plan = PLAN, dry: bool = False,
            release: bool = True) -> tuple[removal.Outcome, FakeClock]:  # fmt: skip
    clock = FakeClock()

    def uninstall() -> bool:
        cluster.log.append("helm uninstall")
        return release

    return removal.remove(cluster, plan, uninstall, poll_with(clock), dry, clock.time), clock


def test_everything_of_the_add_on_goes_in_the_safe_order_and_nothing_else() -> None:
    cluster = FakeCluster(installed())
    outcome, clock = _remove(cluster)
    assert names(cluster) == {
        "CustomResourceDefinition gateways.networking.istio.io",
        "Gateway gw",
        "ValidatingWebhookConfiguration someone-elses",
        "APIService v1.apps",
        "Namespace default",
    }
    assert cluster.log == [
        "delete Job train", "delete Job plain",  # while the controllers still run
        "helm uninstall",
        "delete ValidatingWebhookConfiguration volcano-admission-validate",
        "delete MutatingWebhookConfiguration volcano-admission-mutate",
        "delete APIService v1beta1.custom.metrics.k8s.io",
        f"delete CustomResourceDefinition jobs.{GROUP}",
        "delete CustomResourceDefinition queues.scheduling.volcano.sh",
        "delete Secret volcano-admission-secret",
        f"delete Namespace {NS}",
    ]  # fmt: skip
    assert outcome.release == "removed" and outcome.changed and outcome.remaining == []
    assert outcome.stripped == [] and clock.now == 0, "nothing to wait for: no wait"
    assert list(outcome.seconds) == ["custom resources", "release", "finalizers",
        "webhooks and APIServices", "CRDs", "extra objects", "namespace"]  # fmt: skip


def test_a_finalizer_whose_controller_is_gone_is_stripped_after_the_grace() -> None:
    cluster = FakeCluster(installed())
    cluster.controller_finishes = False  # the controller never finishes "train"
    outcome, clock = _remove(cluster, removal.Plan(**{**PLAN.__dict__, "cr_grace": 6}))
    assert outcome.stripped == ["Job default/train"]
    assert cluster.log.index("helm uninstall") < cluster.log.index("strip Job train")
    assert 5 <= clock.now <= 6, "the controllers got their grace, no more"
    assert "Job train" not in names(cluster) and outcome.remaining == []


def test_a_second_removal_finds_nothing_and_changes_nothing() -> None:
    cluster = FakeCluster(installed())
    _remove(cluster)
    cluster.log.clear()
    outcome, _ = _remove(cluster, release=False)
    assert cluster.log == ["helm uninstall"]
    assert (outcome.deleted, outcome.release, outcome.changed) == ([], "absent", False)


def test_a_removal_killed_half_way_completes() -> None:
    cluster = FakeCluster(installed())
    # killed after the release and the webhooks went: the CRDs and the namespace are left
    cluster.objects = [o for o in cluster.objects
                       if o["kind"] not in {"Job", "ValidatingWebhookConfiguration",
                                            "MutatingWebhookConfiguration"}]  # fmt: skip
    outcome, _ = _remove(cluster, release=False)
    assert f"CustomResourceDefinition jobs.{GROUP}" in outcome.deleted
    assert f"Namespace {NS}" in outcome.deleted
    assert not any(n.startswith("Namespace volcano") or "volcano.sh" in n for n in names(cluster))


def test_check_mode_deletes_nothing_and_says_what_it_would() -> None:
    cluster = FakeCluster(installed())
    before = copy.deepcopy(cluster.objects)
    outcome, _ = _remove(cluster, dry=True)
    assert cluster.objects == before
    assert "Job default/train" in outcome.deleted and f"Namespace {NS}" in outcome.deleted
    assert outcome.stripped == ["Job default/train"] and outcome.changed


def test_kept_namespace_and_no_waits_when_the_caller_waits() -> None:
    cluster = FakeCluster(installed())
    never = {f"jobs.{GROUP}"}

    def delete(api: str, kind: str, name: str, namespace: str | None = None) -> bool:
        if name in never:  # the API server takes its time
            cluster.log.append(f"delete {kind} {name}")
            return True
        return FakeCluster.delete(cluster, api, kind, name, namespace)

    cluster.delete = delete  # type: ignore[method-assign]
    plan = removal.Plan(**{**PLAN.__dict__, "keep_namespace": True, "crds_wait": False})
    outcome, clock = _remove(cluster, plan)
    assert f"Namespace {NS}" in names(cluster) and outcome.remaining == [] and clock.now == 0

    outcome, clock = _remove(cluster, removal.Plan(**{**PLAN.__dict__, "timeout": 20}))
    assert outcome.remaining == [f"CRD jobs.{GROUP} still there"]
    assert 19 <= clock.now <= 20


def test_the_module_refuses_an_extra_object_without_a_name_before_deleting_anything() -> None:
    cluster = FakeCluster(installed())
    module = fake_module(name="volcano", release="volcano", namespace=NS,
                        extra_objects=[{"api_version": "v1", "kind": "Secret"}])  # fmt: skip
    with pytest.raises(SystemExit):
        addon_remove.run(module, cluster)
    assert module.failed == {"msg": "extra_objects[0]: no name"}
    assert cluster.log == []


def test_helm_not_found_is_no_release_and_another_error_fails_with_helm_s_words(
    tmp_path: Any,
) -> None:
    helm = tmp_path / "helm"
    helm.write_text(
        "#!/bin/sh\n"
        'echo "$@" >> "$0.args"\n'
        'case "$*" in\n'
        '  *" gone "*) echo "Error: uninstall: Release not loaded: gone: release: not found" >&2;'
        " exit 1;;\n"
        '  *" stuck "*) echo "Error: pre-delete hook failed: job x failed" >&2; exit 1;;\n'
        "esac\n"
    )
    helm.chmod(0o700)
    common = {"namespace": NS, "helm": str(helm), "kubeconfig": "/k", "timeout": 30}
    assert addon_remove._uninstall(fake_module(name="a", release="gone", **common)) is False
    ok = fake_module(name="a", release="fine", disable_hooks=True, **common)
    assert addon_remove._uninstall(ok) is True
    args = (tmp_path / "helm.args").read_text().splitlines()
    assert args[-1] == f"uninstall fine --timeout 30s --no-hooks --namespace {NS} --kubeconfig /k"
    stuck = fake_module(name="a", release="stuck", **common)
    with pytest.raises(SystemExit):
        addon_remove._uninstall(stuck)
    assert stuck.failed == {
        "msg": "a: helm uninstall stuck: Error: pre-delete hook failed: job x failed"
    }
