"""decice.hybrid.api_snapshot against the sim control plane (a real kube-apiserver), run by
ansible-playbook on localhost: a snapshot, objects a run leaves behind, the leftovers with
why they are still there, and none once they are gone; noise never counts."""

from __future__ import annotations

import json
import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from decice.sim.controlplane.loopback import ControlPlaneInfo
from tests.support import BIN, REPO, crd_manifest, run_captured, wait_for

pytestmark = pytest.mark.sim

PLAYBOOK = """\
- name: API snapshot
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Scan the cluster
      decice.hybrid.api_snapshot:
        kubeconfig: "{{ kubeconfig }}"
        namespaces: "{{ namespaces }}"
        dest: "{{ dest | default(omit) }}"
        compare_to: "{{ compare_to | default(omit) }}"
        ignore: "{{ ignore | default([]) }}"
      register: scan
    - name: Hand the result to the test
      ansible.builtin.copy:
        content: "{{ scan | to_json }}"
        dest: "{{ result }}"
        mode: "0600"
      check_mode: false
"""
CREATED = "not owned by any release (created at run time)"


def scan(tmp_path: Path, kubeconfig: Path, *args: str, **options: Any) -> dict[str, Any]:
    """Run the module once through ansible-playbook; its registered result."""
    playbook = tmp_path / "scan.yml"
    playbook.write_text(PLAYBOOK)
    result = tmp_path / f"result-{uuid.uuid4().hex[:8]}.json"
    extra = {"kubeconfig": str(kubeconfig), "result": str(result), **options}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "K8S_AUTH_"))}
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    run = run_captured(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            "inventories/local",
            str(playbook),
            *args,
            "-e",
            json.dumps(extra),
        ],
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    answer: dict[str, Any] = json.loads(result.read_text())
    assert answer["changed"] is False
    return answer


def found(answer: dict[str, Any], key: str = "leftovers") -> dict[tuple[str, str, str], str]:
    return {(o["kind"], o["namespace"], o["name"]): o["why"] for o in answer[key]}


def left_why(answer: dict[str, Any], kind: str) -> str:
    return next(o["why"] for o in answer["leftovers"] if o["kind"] == kind)


def gone(read: Any, *args: str) -> bool:
    try:
        read(*args)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


@pytest.fixture
def kubeconfig(sim_control_plane: ControlPlaneInfo) -> Path:
    return sim_control_plane.kubeconfig


@pytest.fixture
def suffix() -> str:
    return uuid.uuid4().hex[:6]


class Run:
    """What a run leaves behind: a namespace, a CRD and an object of it with a finalizer,
    a ClusterRole of a Helm release and a ValidatingWebhookConfiguration (it intercepts
    nothing: its namespace selector matches no namespace, and failures are ignored)."""

    def __init__(self, api: client.ApiClient, suffix: str) -> None:
        self.core = client.CoreV1Api(api)
        self.crds = client.ApiextensionsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.rbac = client.RbacAuthorizationV1Api(api)
        self.hooks = client.AdmissionregistrationV1Api(api)
        self.ns = f"apiscan-{suffix}"
        self.group = f"s{suffix}.decice.test"
        self.crd = f"widgets.{self.group}"
        self.finalizer = f"{self.group}/cleanup"
        self.role = f"apiscan-{suffix}"
        self.hook = f"apiscan-{suffix}.decice.test"

    def expected(self) -> set[tuple[str, str, str]]:
        return {
            ("Namespace", "", self.ns),
            ("CustomResourceDefinition", "", self.crd),
            ("Widget", self.ns, "w1"),
            ("ClusterRole", "", self.role),
            ("ValidatingWebhookConfiguration", "", self.hook),
        }

    def create(self) -> None:
        self.core.create_namespace({"metadata": {"name": self.ns}})
        schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        self.crds.create_custom_resource_definition(
            crd_manifest(self.group, "Widget", "widgets", schema)
        )
        wait_for(f"CRD {self.crd} established", self._established)
        self.custom.create_namespaced_custom_object(
            self.group,
            "v1",
            self.ns,
            "widgets",
            {
                "apiVersion": f"{self.group}/v1",
                "kind": "Widget",
                "metadata": {"name": "w1", "finalizers": [self.finalizer]},
            },
        )
        helm = {
            "name": self.role,
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {
                "meta.helm.sh/release-name": "rel",
                "meta.helm.sh/release-namespace": self.ns,
            },
        }
        self.rbac.create_cluster_role({"metadata": helm, "rules": []})
        self.hooks.create_validating_webhook_configuration(
            {
                "metadata": {"name": self.hook},
                "webhooks": [
                    {
                        "name": self.hook,
                        "clientConfig": {"url": "https://127.0.0.1:9/never"},
                        "rules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE"],
                                "resources": ["configmaps"],
                            }
                        ],
                        "namespaceSelector": {"matchLabels": {"apiscan.decice.test/never": "1"}},
                        "failurePolicy": "Ignore",
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                    }
                ],
            }
        )

    def _established(self) -> bool:
        status = self.crds.read_custom_resource_definition(self.crd).status
        return any(c.type == "Established" and c.status == "True" for c in status.conditions or [])

    def delete_half(self) -> None:
        """An incomplete teardown: the object, its CRD and the namespace are deleted, but
        the finalizer's controller never runs; the role and the webhook stay."""
        self.custom.delete_namespaced_custom_object(self.group, "v1", self.ns, "widgets", "w1")
        self.core.delete_namespace(self.ns)
        self.crds.delete_custom_resource_definition(self.crd)

    def finish(self) -> None:
        """What the missing controller would have done, and the rest of the teardown."""
        for step in (
            lambda: self.custom.patch_namespaced_custom_object(
                self.group, "v1", self.ns, "widgets", "w1", {"metadata": {"finalizers": []}}
            ),
            lambda: self.core.delete_namespace(self.ns),
            lambda: self.crds.delete_custom_resource_definition(self.crd),
            lambda: self.rbac.delete_cluster_role(self.role),
            lambda: self.hooks.delete_validating_webhook_configuration(self.hook),
        ):
            try:
                step()
            except ApiException as exc:
                if exc.status != 404:
                    raise
        wait_for(
            f"CRD {self.crd} gone",
            lambda: gone(self.crds.read_custom_resource_definition, self.crd),
            timeout=60,
        )
        wait_for(
            f"namespace {self.ns} gone", lambda: gone(self.core.read_namespace, self.ns), timeout=90
        )


@pytest.fixture
def run(sim_api: client.ApiClient, suffix: str) -> Iterator[Run]:
    objects = Run(sim_api, suffix)
    try:
        yield objects
    finally:
        objects.finish()


def test_leftovers_of_a_run_are_found_with_why_and_none_once_removed(
    tmp_path: Path, kubeconfig: Path, run: Run
) -> None:
    before = tmp_path / "state" / "api-before.json"
    first = scan(tmp_path, kubeconfig, namespaces=[run.ns], dest=str(before))
    assert first["written"] is True
    assert stat.S_IMODE(before.stat().st_mode) == 0o600
    assert "leftovers" not in first
    assert first["errors"] == []
    assert first["summary"]["objects"] > 0
    assert {n["kind"] for n in first["noise"]} >= {"Event", "Lease", "Endpoints"}

    run.create()
    left = scan(tmp_path, kubeconfig, namespaces=[run.ns], compare_to=str(before))
    assert found(left) == {
        ("Namespace", "", run.ns): CREATED,
        ("CustomResourceDefinition", "", run.crd): CREATED,
        ("Widget", run.ns, "w1"): CREATED,
        ("ClusterRole", "", run.role): "labels app.kubernetes.io/managed-by=Helm release rel"
        f" (namespace {run.ns}): the release is gone but left it",
        ("ValidatingWebhookConfiguration", "", run.hook): f"{CREATED};"
        " its webhooks still intercept API requests",
    }
    widget = next(o for o in left["leftovers"] if o["kind"] == "Widget")
    assert widget["apiVersion"] == f"{run.group}/v1" and widget["uid"]
    # what Kubernetes made by itself for the namespace and the CRD is not a leftover
    assert {o["kind"] for o in left["ignored"]} <= {
        "ServiceAccount",
        "ConfigMap",
        "Secret",
        "APIService",
    }
    assert left["written"] is False and left["not_compared"] == []
    assert f"Widget {run.ns}/w1 ({run.group}/v1): {CREATED}" in left["report"].splitlines()

    run.delete_half()
    stuck = scan(tmp_path, kubeconfig, namespaces=[run.ns], compare_to=str(before))
    why = found(stuck)
    assert set(why) == run.expected()
    assert why[("Namespace", "", run.ns)].startswith("namespace Terminating since ")
    assert why[("Namespace", "", run.ns)].endswith("still holds Widget/w1")
    assert why[("CustomResourceDefinition", "", run.crd)].endswith(
        "it goes only after every widgets object is gone (1 seen: Widget/w1)"
    )
    assert why[("Widget", run.ns, "w1")].startswith(
        f"has finalizers [{run.finalizer}] whose controller is gone or stuck (deletion requested "
    )
    assert why[("ClusterRole", "", run.role)] == left_why(left, "ClusterRole")

    run.finish()
    clean = scan(tmp_path, kubeconfig, namespaces=[run.ns], compare_to=str(before))
    assert clean["leftovers"] == [], clean["report"]
    assert clean["report"] == ""


def test_noise_and_what_decice_keeps_are_not_leftovers(
    tmp_path: Path, kubeconfig: Path, sim_api: client.ApiClient, suffix: str
) -> None:
    core = client.CoreV1Api(sim_api)
    leases = client.CoordinationV1Api(sim_api)
    ns = f"apiscan-noise-{suffix}"
    core.create_namespace({"metadata": {"name": ns}})
    try:
        before = tmp_path / "before.json"
        scan(tmp_path, kubeconfig, namespaces=[ns], dest=str(before))
        core.create_namespaced_event(
            ns,
            {
                "metadata": {"name": "e1"},
                "involvedObject": {"kind": "ConfigMap", "name": "decice-record", "namespace": ns},
                "reason": "Test",
                "message": "noise",
            },
        )
        leases.create_namespaced_lease(ns, {"metadata": {"name": "l1"}, "spec": {}})
        core.create_namespaced_endpoints(ns, {"metadata": {"name": "ep1"}, "subsets": []})
        core.create_namespaced_config_map(ns, {"metadata": {"name": "decice-record"}})
        keep = [{"kind": "ConfigMap", "name": "decice-*", "reason": "decice's record of the run"}]

        # check mode: the same answer, and the snapshot file is not written
        checked = tmp_path / "checked.json"
        answer = scan(
            tmp_path,
            kubeconfig,
            "--check",
            namespaces=[ns],
            compare_to=str(before),
            ignore=keep,
            dest=str(checked),
        )
        assert answer["leftovers"] == [], answer["report"]
        assert found(answer, "ignored")[("ConfigMap", ns, "decice-record")] == (
            "decice's record of the run"
        )
        assert answer["written"] is False and not checked.exists()
        noise = {(n["apiVersion"], n["kind"]) for n in answer["noise"]}
        assert {("v1", "Event"), ("coordination.k8s.io/v1", "Lease"), ("v1", "Endpoints")} <= noise

        # without the rule, the ConfigMap is the one leftover
        plain = scan(tmp_path, kubeconfig, namespaces=[ns], compare_to=str(before))
        assert found(plain) == {("ConfigMap", ns, "decice-record"): CREATED}
    finally:
        core.delete_namespace(ns)
