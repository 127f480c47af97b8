"""decice.hybrid.manifest_apply's logic (module_utils/manifests.py) against an in-memory cluster:
passes while they make progress, refusals kept with their reason, nothing written twice,
aggregated ClusterRoles left to their controller, removal order and what stays."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from ansible_collections.decice.hybrid.plugins.module_utils import manifests

from decice import spec
from decice.targets import registry
from tests.support import sim_spec

pytestmark = pytest.mark.unit

Obj = dict[str, Any]


def obj(api_version: str, kind: str, name: str, namespace: str | None = None, **rest: Any) -> Obj:
    metadata: Obj = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, **rest}


class FakeCluster:
    """Kinds are served once their CRD exists; `admits` decides per object; deletes can hang."""

    BUILTIN: ClassVar[dict[tuple[str, str], bool]] = {
        ("v1", "Namespace"): False,
        ("v1", "ConfigMap"): True,
        ("v1", "Service"): True,
        ("apps/v1", "Deployment"): True,
        ("rbac.authorization.k8s.io/v1", "ClusterRole"): False,
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): False,
        ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): False,
    }

    def __init__(self) -> None:
        self.objects: dict[manifests.Ident, Obj] = {}
        self.applies: list[manifests.Ident] = []
        self.deletes: list[manifests.Ident] = []
        self.lists = 0
        self.refuse: dict[str, str] = {}  # name -> reason, while set
        self.stuck: set[str] = set()  # names whose delete never completes
        self.served = dict(self.BUILTIN)
        self.discovered = dict(self.BUILTIN)

    def _kind(self, api_version: str, kind: str) -> bool:
        if (api_version, kind) not in self.discovered:
            raise manifests.Refused(f"the server has no kind {kind} in {api_version}")
        return self.discovered[(api_version, kind)]

    def namespaced(self, api_version: str, kind: str) -> bool:
        return self._kind(api_version, kind)

    def get(self, ident: manifests.Ident) -> Obj:
        if ident not in self.objects:
            raise manifests.Missing(manifests.describe(ident))
        return copy.deepcopy(self.objects[ident])

    def list(self, api_version: str, kind: str) -> dict[tuple[str, str], Obj]:
        self._kind(api_version, kind)
        self.lists += 1
        return {
            (i[2], i[3]): copy.deepcopy(o)
            for i, o in self.objects.items()
            if (i[0], i[1]) == (api_version, kind)
        }

    def apply(self, ident: manifests.Ident, body: Obj) -> Obj:
        self._kind(ident[0], ident[1])
        if ident[3] in self.refuse:
            raise manifests.Refused(self.refuse[ident[3]])
        live = copy.deepcopy(body)
        if body["kind"] == "ClusterRole" and body.get("aggregationRule"):
            live["rules"] = [{"verbs": ["get"]}]  # the aggregation controller's
        self.objects[ident] = live
        self.applies.append(ident)
        if body["kind"] == "CustomResourceDefinition":
            spec = body["spec"]
            self.served[(f"{spec['group']}/v1", spec["names"]["kind"])] = True
        return live

    def delete(self, ident: manifests.Ident) -> None:
        if ident not in self.objects:
            raise manifests.Missing(manifests.describe(ident))
        self.deletes.append(ident)
        if ident[3] in self.stuck:
            self.objects[ident]["metadata"]["finalizers"] = ["example.org/hold"]
        else:
            del self.objects[ident]

    def refresh(self) -> None:
        self.discovered = dict(self.served)


CRD = obj(
    "apiextensions.k8s.io/v1",
    "CustomResourceDefinition",
    "widgets.example.org",
    spec={"group": "example.org", "names": {"kind": "Widget", "plural": "widgets"}},
)
WIDGET = obj("example.org/v1", "Widget", "w1", "apps")
NAMESPACE = obj("v1", "Namespace", "apps")
CONFIG = obj("v1", "ConfigMap", "c1", "apps", data={"a": "1"})
WEBHOOK = obj("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "hook")


def apply(cluster: FakeCluster, docs: list[Obj], patience: int = 1) -> manifests.Applied:
    return manifests.apply_all(cluster, docs, patience=patience, delay=0, sleep=lambda _s: None)


def test_a_custom_resource_waits_one_pass_for_its_crd_and_a_rerun_writes_nothing():
    cluster = FakeCluster()
    docs = [NAMESPACE, WIDGET, CRD, CONFIG]
    outcome = apply(cluster, docs)
    assert outcome.passes == 2
    assert outcome.refused == {}
    assert set(outcome.created) == set(cluster.objects)
    assert outcome.objects == [
        ("v1", "Namespace", "", "apps"),
        ("example.org/v1", "Widget", "apps", "w1"),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "widgets.example.org"),
        ("v1", "ConfigMap", "apps", "c1"),
    ]
    stamped = cluster.objects[("v1", "ConfigMap", "apps", "c1")]
    assert stamped["metadata"]["annotations"][manifests.APPLIED] == manifests.fingerprint(CONFIG)

    cluster.applies.clear()
    again = apply(cluster, docs)
    assert (again.created, again.updated, cluster.applies) == ([], [], [])
    assert again.as_dict()["changed"] is False
    # one LIST per served kind and pass, not a GET per object: 3 + 1 (Widget, once served), then 4
    assert cluster.lists == 3 + 1 + 4


def test_a_changed_document_is_written_again_and_counted_as_updated():
    cluster = FakeCluster()
    apply(cluster, [NAMESPACE, CONFIG])
    changed = copy.deepcopy(CONFIG)
    changed["data"]["a"] = "2"
    outcome = apply(cluster, [NAMESPACE, changed])
    assert outcome.updated == [("v1", "ConfigMap", "apps", "c1")]
    assert cluster.objects[("v1", "ConfigMap", "apps", "c1")]["data"] == {"a": "2"}


def test_refused_objects_are_kept_with_the_reason_once_passes_stop_making_progress():
    cluster = FakeCluster()
    cluster.refuse["c1"] = 'failed calling webhook "v.example.org": no endpoints'
    outcome = apply(cluster, [NAMESPACE, CONFIG, WIDGET], patience=2)
    assert outcome.refused == {
        ("v1", "ConfigMap", "apps", "c1"): 'failed calling webhook "v.example.org": no endpoints',
        (
            "example.org/v1",
            "Widget",
            "apps",
            "w1",
        ): "the server has no kind Widget in example.org/v1",
    }
    assert outcome.passes == 3  # the first pass, then two in a row without progress
    rows = outcome.as_dict()["refused"]
    assert rows[0] == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "namespace": "apps",
        "name": "c1",
        "reason": 'failed calling webhook "v.example.org": no endpoints',
    }


class ModuleFailed(Exception):
    pass


class FakeModule:
    check_mode = False

    def __init__(self, **params: Any) -> None:
        self.params = {"state": "present", "objects": None, "field_manager": "decice",
                       "patience": 1, "delay": 0.0, "wait_timeout": 5.0,
                       "fail_on_refused": False, **params}  # fmt: skip

    def fail_json(self, **result: Any) -> None:
        raise ModuleFailed(result)


def test_the_module_fails_on_refused_objects_only_when_asked(tmp_path: Path, monkeypatch) -> None:
    """fail_on_refused (the add-on engine's CRD applies): the task fails naming each refused
    object with the server's reason; without it the refusals are returned to the caller."""
    from ansible_collections.decice.hybrid.plugins.modules import manifest_apply

    cluster = FakeCluster()
    cluster.refuse["c1"] = "spec.x: Invalid value"
    monkeypatch.setattr(
        manifest_apply, "get_api_client", lambda module: type("C", (), {"client": None})
    )
    monkeypatch.setattr(manifest_apply.kube, "Applier", lambda dynamic, field_manager: cluster)
    src = tmp_path / "objs.json"
    src.write_text(json.dumps([NAMESPACE, CONFIG]))
    result = manifest_apply.run(FakeModule(src=str(src)))
    assert result["refused"] == [
        {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "apps", "name": "c1",
         "reason": "spec.x: Invalid value"}
    ]  # fmt: skip
    with pytest.raises(ModuleFailed) as failed:
        manifest_apply.run(FakeModule(src=str(src), fail_on_refused=True))
    (result,) = failed.value.args
    assert result["msg"] == (
        f"{src}: the server refused ConfigMap apps/c1 (v1): spec.x: Invalid value"
    )
    cluster.refuse.clear()
    assert manifest_apply.run(FakeModule(src=str(src), fail_on_refused=True))["refused"] == []


def test_an_aggregated_cluster_role_leaves_its_rules_to_the_controller():
    cluster = FakeCluster()
    role = obj(
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        "kubeflow-admin",
        aggregationRule={"clusterRoleSelectors": [{"matchLabels": {"a": "true"}}]},
        rules=[],
    )
    apply(cluster, [role])
    ident = ("rbac.authorization.k8s.io/v1", "ClusterRole", "", "kubeflow-admin")
    assert cluster.objects[ident]["rules"] == [{"verbs": ["get"]}]
    cluster.applies.clear()
    apply(cluster, [role])
    assert cluster.applies == []


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ({"kind": "ConfigMap", "metadata": {"name": "x"}}, "apiVersion and kind"),
        ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}, "metadata.name"),
        ({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"name": "x"}}, "List"),
        (["a"], "not a mapping"),
    ],
)
def test_bad_documents_are_named(doc, problem):
    with pytest.raises(manifests.ManifestError, match=f"f.yaml: document 2: .*{problem}"):
        manifests.load([None, doc], "f.yaml")


def test_the_module_reads_a_json_list_or_yaml_documents_alike(tmp_path: Path) -> None:
    """The add-on engine hands the gathered CRDs over as one JSON list (crds.json); a JSON
    file of one object, and YAML documents, give the same objects; a bad one is named."""
    from ansible_collections.decice.hybrid.plugins.modules import manifest_apply

    docs = [obj("v1", "ConfigMap", "a", "ns"), obj("v1", "Namespace", "ns")]
    (tmp_path / "list.json").write_text(json.dumps(docs))
    (tmp_path / "one.json").write_text(json.dumps(docs[0]))
    (tmp_path / "docs.yaml").write_text(yaml.safe_dump_all([None, *docs]))
    assert manifest_apply.read_documents(str(tmp_path / "list.json")) == docs
    assert manifest_apply.read_documents(str(tmp_path / "one.json")) == docs[:1]
    assert manifest_apply.read_documents(str(tmp_path / "docs.yaml")) == docs
    (tmp_path / "bad.json").write_text(json.dumps([docs[0], {"kind": "x"}]))
    with pytest.raises(manifests.ManifestError, match=r"bad\.json: document 2: apiVersion"):
        manifest_apply.read_documents(str(tmp_path / "bad.json"))


def test_removal_goes_webhooks_custom_resources_namespaced_namespaces_cluster_crds():
    idents = [
        manifests.identity(doc, namespaced)
        for doc, namespaced in (
            (CRD, False),
            (NAMESPACE, False),
            (CONFIG, True),
            (WIDGET, True),
            (obj("rbac.authorization.k8s.io/v1", "ClusterRole", "r"), False),
            (WEBHOOK, False),
        )
    ]
    stages = manifests.removal_stages(idents)
    assert [[ident[1] for ident in stage] for stage in stages] == [
        ["ValidatingWebhookConfiguration"],
        ["Widget"],
        ["ConfigMap"],
        ["Namespace"],
        ["ClusterRole"],
        ["CustomResourceDefinition"],
    ]


def test_remove_all_deletes_in_stages_and_reports_what_waits_for_a_finalizer():
    cluster = FakeCluster()
    docs = [NAMESPACE, CRD, WIDGET, CONFIG, WEBHOOK]
    outcome = apply(cluster, docs)
    cluster.stuck.add("w1")
    ticks = iter(range(1000))
    result = manifests.remove_all(
        cluster,
        outcome.objects,
        timeout=5,
        poll=1,
        sleep=lambda _s: None,
        clock=lambda: next(ticks),
    )
    assert [row["kind"] for row in result["deleted"]] == [
        "ValidatingWebhookConfiguration",
        "Widget",
    ]
    assert result["remaining"] == [
        {
            "apiVersion": "example.org/v1",
            "kind": "Widget",
            "namespace": "apps",
            "name": "w1",
            "reason": "waits for finalizers example.org/hold",
        }
    ]
    cluster.stuck.clear()
    cluster.objects[("example.org/v1", "Widget", "apps", "w1")]["metadata"].pop("finalizers")
    del cluster.objects[("example.org/v1", "Widget", "apps", "w1")]
    rest = manifests.remove_all(cluster, outcome.objects, sleep=lambda _s: None)
    assert rest["remaining"] == []
    assert cluster.objects == {}
    assert [row["kind"] for row in rest["deleted"]] == [
        "ConfigMap",
        "Namespace",
        "CustomResourceDefinition",
    ]
    assert manifests.remove_all(cluster, outcome.objects, sleep=lambda _s: None)["changed"] is False


def test_the_plays_get_a_kubectl_for_kustomize_beside_helm(tmp_path: Path) -> None:
    """The full profile renders with the target's kubectl (kubectl kustomize): the CLI hands
    it to the plays as decice_kubectl, on the sim the control plane's own."""
    path = tmp_path / "decice.yaml"
    path.write_text(sim_spec("u", ("n", 1, 'cpu: "4", memory: 8Gi')))
    got = registry.get("sim").ansible_vars(spec.load(path))
    assert Path(got["decice_kubectl"]).name == "kubectl"
    assert Path(got["decice_helm"]).parent == Path(got["decice_kubectl"]).parent
    assert registry.get("static").kubectl(spec.load(path)).endswith("kubectl")


def test_plan_names_the_manifests_archive_for_profile_full(tmp_path: Path) -> None:
    from decice import plan

    path = tmp_path / "decice.yaml"
    base = sim_spec("u", ("n", 1, 'cpu: "4", memory: 8Gi'))
    path.write_text(base)
    assert "kubeflow_trainer" in plan.artifact_sources(spec.load(path))
    (tmp_path / "m").mkdir()
    path.write_text(base + "mirror: {path: m}\naddons:\n  kubeflow: {profile: full}\n")
    sources = plan.artifact_sources(spec.load(path))
    assert "kubeflow_trainer" not in sources
    assert sources["kubeflow_manifests"] == {
        "addon": "kubeflow",
        "enabled": True,
        "from": "mirror.path",
        "location": f"{tmp_path / 'm'}/sources/kubeflow-manifests-26.03.tar.gz",
    }
    path.write_text(base + "addons:\n  kubeflow: {profile: full}\n")
    # GitHub packs its tag archive itself: no upstream source to check by sha256
    assert plan.artifact_sources(spec.load(path))["kubeflow_manifests"]["from"] is None
