"""decice.hybrid.addon_wait (one process per wait) and module_utils/readiness.py: what an
add-on waits for, what a removal waits for, each named with its reason when time runs
out; an API error is retried until the deadline; reads only what is still pending."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ansible_collections.decice.hybrid.plugins.module_utils import cluster as kube
from ansible_collections.decice.hybrid.plugins.module_utils import readiness, receipts
from ansible_collections.decice.hybrid.plugins.modules import addon_wait
from kubernetes.dynamic.exceptions import DynamicApiError

from tests.support import FakeClock, FakeModule

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
NS = "volcano-system"
CRD_API = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")


def fake_module(check_mode: bool = False, **params: Any) -> FakeModule:
    return FakeModule(addon_wait._argument_spec(), check_mode, **params)


def crd(name: str, group: str, established: bool | None, deleting: bool = False) -> Obj:
    meta: Obj = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    conditions = []
    if established is not None:
        conditions.append(
            {"type": "Established", "status": "True" if established else "False",
             "reason": "Installing", "message": "the initial names have not been accepted"}
        )  # fmt: skip
    return {
        "kind": "CustomResourceDefinition",
        "metadata": meta,
        "spec": {"group": group, "names": {"kind": name.split(".")[0].title()},
                 "versions": [{"name": "v1beta1", "storage": True}]},
        "status": {"conditions": conditions},
    }  # fmt: skip


def deployment(name: str, available: bool) -> Obj:
    condition = {"type": "Available", "status": "True" if available else "False"}
    if not available:
        condition |= {"reason": "MinimumReplicasUnavailable",
                      "message": "Deployment does not have minimum availability."}  # fmt: skip
    return {"kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "status": {"conditions": [condition]}}  # fmt: skip


def daemonset(name: str, ready: int, desired: int, generation: int = 2, seen: int = 2) -> Obj:
    status = {"observedGeneration": seen, "desiredNumberScheduled": desired,
              "numberReady": ready, "updatedNumberScheduled": ready}  # fmt: skip
    return {"kind": "DaemonSet", "metadata": {"name": name, "namespace": NS,
            "generation": generation}, "status": status}  # fmt: skip


def endpoints(name: str, ready: bool) -> Obj:
    key = "addresses" if ready else "notReadyAddresses"
    return {"kind": "Endpoints", "metadata": {"name": name, "namespace": NS},
            "subsets": [{key: [{"ip": "10.0.0.7"}]}]}  # fmt: skip


def webhook(name: str, service: str, namespace: str = NS) -> Obj:
    ref = {"service": {"name": service, "namespace": namespace}}
    return {"kind": "ValidatingWebhookConfiguration", "metadata": {"name": name},
            "webhooks": [{"name": f"{name}.x", "clientConfig": ref}]}  # fmt: skip


class FakeReader:
    """kube.Client over dicts; counts each read, and can fail the next reads."""

    def __init__(self, objects: list[Obj]) -> None:
        self.objects = objects
        self.reads: list[tuple[str, str, str | None]] = []
        self.fail_next = 0

    def _maybe_fail(self) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise DynamicApiError(_ApiException(503, "Service Unavailable"))

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str = ""
    ) -> list[Obj]:
        self._maybe_fail()
        self.reads.append((kind, "list", namespace))
        key, _, value = label_selector.partition("=")
        return [
            copy.deepcopy(o)
            for o in self.objects
            if o["kind"] == kind
            and (namespace is None or o["metadata"].get("namespace") == namespace)
            and (not key or (o["metadata"].get("labels") or {}).get(key) == value)
        ]

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        self._maybe_fail()
        self.reads.append((kind, name, namespace))
        found = [o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name]
        return copy.deepcopy(found[0]) if found else None


class _ApiException(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason, self.body, self.headers = status, reason, None, {}


def _ready(reader: FakeReader, clock: FakeClock, **params: Any) -> tuple[Obj, FakeModule]:
    module = fake_module(name="volcano", namespace=NS, **params)
    out: Obj = {"crds": []}
    params = module.params
    check = readiness.ready_check(
        reader, namespace=params["namespace"], crd_groups=params["crd_groups"],
        deployments=params["deployments"], daemonsets=params["daemonsets"],
        webhooks=params["webhooks"], out=out,
    )  # fmt: skip
    first, left, error = kube.poll(check, module.params["timeout"], 1.0, clock.time, clock.sleep)
    return {**out, "first": first, "left": left, "error": error}, module


def test_a_ready_add_on_costs_one_read_per_kind_and_no_wait() -> None:
    reader = FakeReader([
        crd("queues.scheduling.volcano.sh", "scheduling.volcano.sh", True),
        crd("other.example.com", "example.com", False),  # not the add-on's: not waited for
        deployment("volcano-admission", True),
        webhook("volcano-admission-service-pods-mutate", "volcano-admission-service"),
        webhook("someone-elses", "svc", namespace="elsewhere"),
        endpoints("volcano-admission-service", True),
    ])  # fmt: skip
    clock = FakeClock()
    result, _ = _ready(reader, clock, crd_groups=["scheduling.volcano.sh"])
    assert (result["first"], result["left"], clock.sleeps) == ([], [], 0)
    kinds = sorted(kind for kind, _, _ in reader.reads)
    assert kinds == sorted(["CustomResourceDefinition", "ValidatingWebhookConfiguration",
                            "MutatingWebhookConfiguration", "Deployment", "Endpoints"])  # fmt: skip
    assert result["crds"] == [{
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "queues.scheduling.volcano.sh"},
        "cr_api_version": "scheduling.volcano.sh/v1beta1", "cr_kind": "Queues",
        "established": True,
    }]  # fmt: skip


def test_it_waits_for_each_kind_and_ends_when_the_last_is_ready() -> None:
    objects = [
        crd("jobs.batch.volcano.sh", "batch.volcano.sh", False),
        deployment("volcano-controllers", False),
        daemonset("lc", ready=1, desired=3),
        webhook("volcano-admission", "volcano-admission-service"),
        endpoints("volcano-admission-service", False),
    ]
    reader = FakeReader(objects)
    fixes = {  # after the n-th sleep, one more thing becomes ready
        1: (0, crd("jobs.batch.volcano.sh", "batch.volcano.sh", True)),
        2: (1, deployment("volcano-controllers", True)),
        3: (2, daemonset("lc", ready=3, desired=3)),
        4: (4, endpoints("volcano-admission-service", True)),
    }

    def change(n: int) -> None:
        if n in fixes:
            index, obj = fixes[n]
            objects[index] = obj

    clock = FakeClock(on_sleep=change)
    result, _ = _ready(reader, clock, crd_groups=["batch.volcano.sh"], daemonsets=["lc"])
    assert result["left"] == [] and clock.sleeps == 4
    assert result["first"] == [
        "CRD jobs.batch.volcano.sh not Established (Installing: the initial names have not "
        "been accepted)",
        "Deployment volcano-system/volcano-controllers not Available (MinimumReplicasUnavailable: "
        "Deployment does not have minimum availability.)",
        "DaemonSet volcano-system/lc: 1 ready and 1 up to date of 3 scheduled",
        "webhook service volcano-system/volcano-admission-service has no ready endpoint address",
    ]
    # the CRD list (megabytes with Sedna's) is read once; the pending CRD by name after it
    assert [r for r in reader.reads if r[1] == "list" and r[0] == "CustomResourceDefinition"] == [
        ("CustomResourceDefinition", "list", None)
    ]
    crd_gets = [r for r in reader.reads if r[0] == "CustomResourceDefinition" and r[1] != "list"]
    assert len(crd_gets) == 2, "an Established CRD is not read again"
    assert result["crds"][0]["established"] is True


def test_running_out_of_time_names_what_is_still_pending() -> None:
    reader = FakeReader([deployment("volcano-scheduler", False), deployment("ok", True)])
    clock = FakeClock()
    result, _ = _ready(reader, clock, timeout=10, webhooks=False)
    assert result["left"] == [
        "Deployment volcano-system/volcano-scheduler not Available (MinimumReplicasUnavailable: "
        "Deployment does not have minimum availability.)"
    ]
    assert 9 <= clock.now <= 10, "it gives up at the deadline, not before nor long after"


def test_the_module_fails_naming_it_and_counts_as_no_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reader = FakeReader([daemonset("edgemesh-agent", 0, 2), deployment("fine", True)])
    clock = FakeClock()
    monkeypatch.setattr(addon_wait.time, "sleep", clock.sleep)
    monkeypatch.setattr(addon_wait.time, "monotonic", clock.time)
    module = fake_module(name="edgemesh", namespace=NS, daemonsets=["edgemesh-agent"], timeout=5)
    with pytest.raises(SystemExit):
        addon_wait.run(module, reader)  # type: ignore[arg-type]
    assert module.failed is not None
    assert module.failed["msg"] == (
        "edgemesh: not ready after 5 s: DaemonSet volcano-system/edgemesh-agent: "
        "0 ready and 0 up to date of 2 scheduled"
    )
    assert module.failed["changed"] is False

    done = fake_module(name="edgemesh", namespace=NS, daemonsets=["fine-ds"], deployments=False)
    reader.objects.append(daemonset("fine-ds", 2, 2))
    assert addon_wait.run(done, reader)["waited_for"] == []  # type: ignore[arg-type]


def test_a_missing_daemonset_and_a_stale_generation_are_not_ready() -> None:
    assert readiness.daemonset_pending(NS, "lc", None) == f"DaemonSet {NS}/lc not there"
    stale = daemonset("lc", ready=3, desired=3, generation=3, seen=2)
    assert readiness.daemonset_pending(NS, "lc", stale) == (
        f"DaemonSet {NS}/lc: its controller has not seen generation 3 yet"
    )
    assert readiness.daemonset_pending(NS, "lc", daemonset("lc", 0, 0)) is None  # no nodes
    # the receipts judge readiness by the same rules
    assert receipts.ready(daemonset("lc", 3, 3)) and not receipts.ready(stale)
    assert not receipts.ready(deployment("x", False)) and receipts.ready(deployment("x", True))


def test_api_errors_are_retried_until_the_deadline_and_named_if_last() -> None:
    reader = FakeReader([deployment("d", True)])
    reader.fail_next = 2
    clock = FakeClock()
    check = addon_wait._gone_checks(reader, {"crds": None, "namespace_selector": ""})  # type: ignore[arg-type]
    first, left, error = kube.poll(check, 30, 1.0, clock.time, clock.sleep)
    assert (left, error, clock.sleeps) == ([], "", 2)
    assert first == ["(the last read failed)"]

    reader.fail_next = 100
    first, left, error = kube.poll(check, 5, 1.0, clock.time, clock.sleep)
    assert left == ["(the last read failed)"] and error == "503 Service Unavailable"


def test_gone_waits_for_named_crds_or_every_deletion_and_terminating_namespaces() -> None:
    objects = [
        crd("models.sedna.io", "sedna.io", True, deleting=True),
        crd("kept.example.com", "example.com", True),
        {"kind": "Namespace", "status": {"phase": "Terminating"},
         "metadata": {"name": "sedna", "labels": {"app.kubernetes.io/managed-by": "decice"}}},
        {"kind": "Namespace", "status": {"phase": "Terminating"},
         "metadata": {"name": "other-terminating"}},
    ]  # fmt: skip
    reader = FakeReader(objects)
    every = addon_wait._gone_checks(
        reader, {"crds": None, "namespace_selector": "app.kubernetes.io/managed-by=decice"}
    )  # type: ignore[arg-type]
    assert every() == [
        "CRD models.sedna.io still being deleted",
        "namespace sedna still Terminating",
    ]
    named = addon_wait._gone_checks(reader, {"crds": ["models.sedna.io", "gone.sedna.io"],
                                             "namespace_selector": ""})  # fmt: skip
    assert named() == ["CRD models.sedna.io still there"]

    crd_deleted, namespace = objects[0], objects[2]

    def vanish(n: int) -> None:  # the CRD goes first, then the namespace
        objects.remove(crd_deleted if n == 1 else namespace)

    clock = FakeClock(on_sleep=vanish)
    first, left, _ = kube.poll(every, 60, 1.0, clock.time, clock.sleep)
    assert (len(first), left, clock.sleeps) == (2, [], 2)


def test_webhook_services_of_the_namespace_each_once() -> None:
    configs = [
        webhook("a", "svc-b"),
        webhook("b", "svc-a"),
        webhook("c", "svc-b"),
        webhook("d", "elsewhere", namespace="kube-system"),
        {"kind": "MutatingWebhookConfiguration", "metadata": {"name": "url-only"},
         "webhooks": [{"name": "u", "clientConfig": {"url": "https://x"}}]},
        {"kind": "MutatingWebhookConfiguration", "metadata": {"name": "none"}, "webhooks": None},
    ]  # fmt: skip
    assert readiness.webhook_services(configs, NS) == ["svc-a", "svc-b"]
    assert readiness.endpoint_pending(NS, "svc-a", None) is not None
    assert readiness.endpoint_pending(NS, "svc-a", endpoints("svc-a", True)) is None


def test_a_wait_that_runs_out_names_the_first_20_and_the_last_read_s_error() -> None:
    """cluster.wait, shared by addon_wait and addon_install: the first 20 pending, how many
    more, and the error of a last read that failed; what was pending first goes to out."""
    pending = [f"Pod {NS}/p{i} not ready" for i in range(25)]
    module, out = fake_module(name="volcano", timeout=0), {}
    with pytest.raises(SystemExit):
        kube.wait(module, lambda: pending, "not ready", 0.0, out)
    assert module.failed is not None
    assert module.failed["msg"] == (
        "volcano: not ready after 0 s: " + "; ".join(pending[:20]) + "; and 5 more"
    )
    assert out["waited_for"] == pending

    def broken() -> list[str]:
        raise OSError("connection refused")

    module = fake_module(name="volcano", timeout=0)
    with pytest.raises(SystemExit):
        kube.wait(module, broken, "not gone", 0.0, {})
    assert module.failed is not None
    assert module.failed["msg"] == (
        "volcano: not gone after 0 s: (the last read failed); "
        "reading the cluster: OSError: connection refused"
    )
