"""decice.hybrid.addon_receipt's logic (module_utils/receipts.py) against an in-memory
cluster: a receipt holds only for the same inputs and a cluster its install left as it
was; every kind of drift is named; an unfinished install is never written down; the
inputs' sha256 covers the add-on variables and the code (action plugin)."""

from __future__ import annotations

import copy
import stat
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.decice.hybrid.plugins.action import addon_receipt as action
from ansible_collections.decice.hybrid.plugins.module_utils import receipts

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
RELEASES = [{"name": "volcano", "namespace": "volcano-system"}]


def helm_secret(release: str, namespace: str, version: int, status: str) -> Obj:
    labels = {"owner": "helm", "name": release, "version": str(version), "status": status}
    meta = {"name": f"sh.helm.release.v1.{release}.v{version}", "namespace": namespace}
    return {"kind": "Secret", "metadata": {**meta, "labels": labels}}


def deployment(name: str, available: bool) -> Obj:
    condition = {"type": "Available", "status": "True" if available else "False"}
    return {
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "volcano-system"},
        "status": {"conditions": [condition]},
    }


class FakeCluster:
    """LISTs over a dict of objects per (kind, namespace); a label selector of a=b,c=d."""

    def __init__(self) -> None:
        ns = "volcano-system"
        self.objects: dict[tuple[str, str | None], list[Obj]] = {
            ("Secret", ns): [helm_secret("volcano", ns, 1, "deployed")],
            ("Deployment", ns): [
                deployment("volcano-scheduler", True),
                deployment("volcano-admission", False),
            ],
            ("DaemonSet", ns): [
                {
                    "metadata": {"name": "agent", "namespace": ns, "generation": 2},
                    "status": {
                        "observedGeneration": 2,
                        "desiredNumberScheduled": 3,
                        "numberReady": 3,
                        "updatedNumberScheduled": 3,
                    },
                }
            ],
            ("StatefulSet", ns): [],
            ("Endpoints", ns): [
                {
                    "metadata": {"name": "volcano-admission-service", "namespace": ns},
                    "subsets": [{"addresses": [{"ip": "10.0.0.9"}]}],
                },
                {"metadata": {"name": "empty", "namespace": ns}, "subsets": []},
            ],
            ("CustomResourceDefinition", None): [
                {
                    "metadata": {"name": "queues.scheduling.volcano.sh"},
                    "spec": {"group": "scheduling.volcano.sh"},
                    "status": {"conditions": [{"type": "Established", "status": "True"}]},
                },
                {"metadata": {"name": "other.example.com"}, "spec": {"group": "example.com"}},
            ],
        }
        self.lists = 0

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str = ""
    ) -> list[Obj]:
        self.lists += 1
        wanted = dict(pair.split("=", 1) for pair in label_selector.split(",") if pair)
        found = self.objects.get((kind, namespace), [])
        return [
            copy.deepcopy(obj)
            for obj in found
            if all((obj["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())
        ]


def receipt_of(cluster: FakeCluster, inputs: str = "a" * 64) -> Obj:
    seen = receipts.observe(cluster, RELEASES, ["scheduling.volcano.sh"])
    stats = {"decice_verified": {"volcano": "not possible on sim"}}
    return receipts.make("volcano", inputs, seen, stats)


def test_observe_records_what_the_install_left() -> None:
    seen = receipts.observe(FakeCluster(), RELEASES, ["scheduling.volcano.sh"])
    assert seen["releases"] == [{**RELEASES[0], "revision": 1, "status": "deployed"}]
    assert seen["crds"] == [{"name": "queues.scheduling.volcano.sh", "ready": True}]
    ready = {(w["kind"], w["name"]): w["ready"] for w in seen["workloads"]}
    assert ready == {
        ("Deployment", "volcano-scheduler"): True,
        ("Deployment", "volcano-admission"): False,
        ("DaemonSet", "agent"): True,
    }
    assert seen["endpoints"] == [
        {"namespace": "volcano-system", "name": "volcano-admission-service"}
    ]
    assert receipts.incomplete(seen) is None


def test_a_receipt_holds_for_the_same_inputs_and_an_unchanged_cluster() -> None:
    cluster = FakeCluster()
    receipt = receipt_of(cluster)
    assert receipts.check(cluster, receipt, "a" * 64) is None
    # a workload that was not ready at install may stay so; it must only exist
    assert receipts.check(cluster, receipt, "b" * 64) == (
        "this run's inputs differ from the installed ones"
    )


def _drift(cluster: FakeCluster, what: str) -> None:
    ns = "volcano-system"
    objs = cluster.objects
    if what == "upgrade killed":
        objs[("Secret", ns)].append(helm_secret("volcano", ns, 2, "pending-upgrade"))
    elif what == "newer revision":
        objs[("Secret", ns)].append(helm_secret("volcano", ns, 2, "deployed"))
    elif what == "release gone":
        objs[("Secret", ns)] = []
    elif what == "deployment deleted":
        objs[("Deployment", ns)] = objs[("Deployment", ns)][1:]
    elif what == "deployment unready":
        objs[("Deployment", ns)][0] = deployment("volcano-scheduler", False)
    elif what == "daemonset behind":
        objs[("DaemonSet", ns)][0]["status"]["numberReady"] = 2
    elif what == "crd deleted":
        objs[("CustomResourceDefinition", None)] = objs[("CustomResourceDefinition", None)][1:]
    elif what == "endpoint lost its address":
        objs[("Endpoints", ns)][0]["subsets"] = []


@pytest.mark.parametrize(
    ("drift", "named"),
    [
        ("upgrade killed", "revision 2 (pending-upgrade), installed at 1 (deployed)"),
        ("newer revision", "revision 2 (deployed)"),
        ("release gone", "revision 0 (none)"),
        ("deployment deleted", "Deployment volcano-system/volcano-scheduler is gone"),
        ("deployment unready", "Deployment volcano-system/volcano-scheduler is no longer ready"),
        ("daemonset behind", "DaemonSet volcano-system/agent is no longer ready"),
        ("crd deleted", "CRD queues.scheduling.volcano.sh is gone"),
        ("endpoint lost its address", "volcano-admission-service has no ready address"),
    ],
)
def test_every_drift_is_named_and_the_receipt_does_not_hold(drift: str, named: str) -> None:
    cluster = FakeCluster()
    receipt = receipt_of(cluster)
    _drift(cluster, drift)
    why = receipts.check(cluster, receipt, "a" * 64)
    assert why is not None and named in why, why


def test_an_unfinished_install_is_not_written_down() -> None:
    cluster = FakeCluster()
    _drift(cluster, "upgrade killed")
    seen = receipts.observe(cluster, RELEASES, [])
    assert receipts.incomplete(seen) == "release volcano-system/volcano is pending-upgrade"
    assert receipts.incomplete(receipts.observe(cluster, [], [])) == "no helm release was installed"


def test_a_receipt_of_another_format_or_without_releases_never_holds() -> None:
    cluster = FakeCluster()
    receipt = receipt_of(cluster)
    assert "format" in (receipts.check(cluster, {**receipt, "format": "x"}, "a" * 64) or "")
    assert receipts.check(cluster, {**receipt, "releases": []}, "a" * 64) == (
        "the receipt names no release"
    )


def test_receipts_are_private_files_and_a_planted_symlink_is_not_read(tmp_path: Path) -> None:
    path = receipts.path_of(tmp_path, "volcano")
    receipts.write(path, {"format": receipts.FORMAT})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert receipts.read(path) == {"format": receipts.FORMAT}
    assert receipts.forget(path) and not receipts.forget(path)
    assert not path.parent.exists(), "the empty receipts directory stays behind"
    path.parent.mkdir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"format": "decice.addon-receipt/v1"}')
    path.symlink_to(elsewhere)
    assert receipts.read(path) is None
    path.unlink()
    path.write_text("{not json")
    assert receipts.read(path) is None
    for bad in ("../kubeconfig", "volcano\n", ""):
        with pytest.raises(ValueError, match="lower-case"):
            receipts.path_of(tmp_path, bad)


def test_the_inputs_cover_the_add_on_variables_and_not_the_play_internal_ones() -> None:
    task_vars = {
        "decice_spec": {},
        "decice_helm": "helm",
        "decice__receipts": {},
        "volcano_values": {},
        "sedna_values": {},
        "addon_engine_timeout": 300,
        "ansible_host": "x",
        "decicex": 1,
    }
    names = action.input_names(task_vars, ["volcano", "kubeflow"])
    assert names == ["addon_engine_timeout", "decice_helm", "decice_spec", "volcano_values"]


def test_the_code_sha256_follows_the_collection_and_leaves_out_caches(tmp_path: Path) -> None:
    (tmp_path / "roles" / "r").mkdir(parents=True)
    (tmp_path / "roles" / "r" / "main.yml").write_text("a: 1\n")
    before = receipts.tree_digest([tmp_path / "roles"])
    (tmp_path / "roles" / "r" / "__pycache__").mkdir()
    (tmp_path / "roles" / "r" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert receipts.tree_digest([tmp_path / "roles"]) == before
    (tmp_path / "roles" / "r" / "main.yml").write_text("a: 2\n")
    assert receipts.tree_digest([tmp_path / "roles"]) != before
    assert len(action.code_sha256()) == 64


def test_one_module_run_lists_each_kind_once_for_all_its_receipts() -> None:
    cluster = FakeCluster()
    first, second = receipt_of(cluster), receipt_of(cluster)
    cluster.lists = 0
    memo = receipts.Memo(cluster)
    assert receipts.check(memo, first, "a" * 64) is None
    once = cluster.lists
    assert receipts.check(memo, second, "a" * 64) is None
    assert cluster.lists == once, "the second receipt listed the cluster again"
