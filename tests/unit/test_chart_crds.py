"""decice.hybrid.chart_crds (one process per add-on's crds/): the real Sedna chart unpacked
without its crds/ (private, built beside its place and renamed into it, reused by a later
run), its CRDs gathered in path order and applied once (a second run sends nothing); the
EdgeMesh mode creates only the CRDs that are absent, labelled, and never touches one that
is there; check mode writes nothing; an unsafe chart member is refused before anything is
written."""

from __future__ import annotations

import io
import json
import stat
import tarfile
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.decice.hybrid.plugins.module_utils import manifests
from ansible_collections.decice.hybrid.plugins.modules import chart_crds

from tests.support import MIRROR, FakeModule

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
SEDNA = MIRROR / "charts" / "sedna-0.1.0.tgz"
EDGEMESH = MIRROR / "charts" / "edgemesh-0.1.0.tgz"
CRD = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")


class FakeCluster:
    """CRDs in memory: what kube.Client reads and creates."""

    def __init__(self, crds: dict[str, Obj] | None = None) -> None:
        self.crds: dict[str, Obj] = dict(crds or {})
        self.writes: list[str] = []

    # kube.Client
    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        return self.crds.get(name)

    def create(self, api_version: str, kind: str, body: Obj, namespace: str | None = None) -> Obj:
        self.writes.append(f"create {body['metadata']['name']}")
        self.crds[body["metadata"]["name"]] = body
        return body

    def applier(self, field_manager: str) -> FakeApplier:
        return FakeApplier(self)


class FakeApplier:
    """manifests.Cluster over the same CRDs."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster

    def namespaced(self, api_version: str, kind: str) -> bool:
        return False

    def get(self, ident: manifests.Ident) -> Obj:
        if ident[3] not in self.cluster.crds:
            raise manifests.Missing(manifests.describe(ident))
        return self.cluster.crds[ident[3]]

    def list(self, api_version: str, kind: str) -> dict[tuple[str, str], Obj]:
        return {("", name): crd for name, crd in self.cluster.crds.items()}

    def apply(self, ident: manifests.Ident, body: Obj) -> Obj:
        self.cluster.writes.append(f"apply {ident[3]}")
        self.cluster.crds[ident[3]] = body
        return body

    def refresh(self) -> None:
        pass


def fake_module(check_mode: bool = False, **params: Any) -> FakeModule:
    return FakeModule(chart_crds._argument_spec(), check_mode, **params)


def modes(root: Path) -> set[tuple[str, int]]:
    return {("d" if p.is_dir() else "f", stat.S_IMODE(p.stat().st_mode)) for p in root.rglob("*")}


def test_sedna_is_unpacked_without_its_crds_privately_applied_once_and_reused(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "addons" / "charts" / "sedna-0123"
    cluster = FakeCluster()
    out = chart_crds.run(fake_module(name="sedna", chart=str(SEDNA), dest=str(dest)), cluster)  # type: ignore[arg-type]
    assert out["changed"] and out["chart"] == str(dest / "chart")
    assert (dest / "chart" / "Chart.yaml").is_file() and (dest / "chart" / "charts" / "lc").is_dir()
    assert not (dest / "chart" / "crds").exists(), "helm must neither install nor store them"
    assert modes(dest) == {("d", 0o700), ("f", 0o600)}
    assert len(out["crds"]) == 11 and all(name.endswith(".sedna.io") for name in out["crds"])
    assert out["crds"] == [
        d["metadata"]["name"] for d in json.loads((dest / "crds.json").read_text())
    ]
    assert out["crds"][:2] == [
        "datasets.sedna.io",
        "featureextractionservices.sedna.io",
    ]  # path order
    assert sorted(cluster.writes) == sorted(f"apply {name}" for name in out["crds"])
    assert [p.name for p in dest.parent.iterdir()] == ["sedna-0123"], "no scratch left"

    cluster.writes.clear()
    again = chart_crds.run(fake_module(name="sedna", chart=str(SEDNA), dest=str(dest)), cluster)  # type: ignore[arg-type]
    assert (again["changed"], cluster.writes) == (False, []), "a second run sends nothing"


def test_an_unpack_a_killed_run_left_incomplete_is_made_anew(tmp_path: Path) -> None:
    dest = tmp_path / "em-0123"
    (dest / "chart").mkdir(parents=True)
    (dest / "chart" / "Chart.yaml").write_text("name: half\n")  # no crds.json: not complete
    out = chart_crds.run(
        fake_module(name="edgemesh", chart=str(EDGEMESH), dest=str(dest)), FakeCluster()
    )  # type: ignore[arg-type]
    assert "name: edgemesh" in (dest / "chart" / "Chart.yaml").read_text()
    assert out["changed"] and (dest / "crds.json").is_file()


def test_create_absent_creates_only_what_is_missing_labelled_and_leaves_the_rest(
    tmp_path: Path,
) -> None:
    kept = {"metadata": {"name": "gateways.networking.istio.io", "labels": {"owner": "istio"}}}
    cluster = FakeCluster({"gateways.networking.istio.io": kept})
    labels = {"app.kubernetes.io/managed-by": "decice", "decice.io/addon": "edgemesh"}
    module = fake_module(name="edgemesh", chart=str(EDGEMESH), dest=str(tmp_path / "em"),
                        mode="create_absent", labels=labels)  # fmt: skip
    out = chart_crds.run(module, cluster)  # type: ignore[arg-type]
    want = ["destinationrules.networking.istio.io", "virtualservices.networking.istio.io"]
    assert out["created"] == want and cluster.writes == [f"create {name}" for name in want]
    assert cluster.crds["gateways.networking.istio.io"] is kept, "one that is there is not touched"
    assert all(labels.items() <= cluster.crds[name]["metadata"]["labels"].items() for name in want)
    assert not any("spiderpool" in name for name in out["crds"]), "a subchart's crds/ stay helm's"
    assert chart_crds.run(module, cluster)["created"] == []  # type: ignore[arg-type]


def test_check_mode_writes_nothing_and_says_what_would_change(tmp_path: Path) -> None:
    dest = tmp_path / "em-0123"
    cluster = FakeCluster()
    module = fake_module(check_mode=True, name="edgemesh", chart=str(EDGEMESH), dest=str(dest))
    out = chart_crds.run(module, cluster)  # type: ignore[arg-type]
    assert out["changed"] and out["chart"] == str(EDGEMESH) and len(out["crds"]) == 3
    assert not tmp_path.joinpath("em-0123").exists() and cluster.writes == []


def test_an_unsafe_member_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tgz"
    with tarfile.open(bad, "w:gz") as tar:
        info = tarfile.TarInfo("x/Chart.yaml")
        data = b"name: x\nversion: 1.0.0\n"
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("x/crds/a.yaml")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
        tar.addfile(link)
    module = fake_module(name="x", chart=str(bad), dest=str(tmp_path / "out"))
    with pytest.raises(SystemExit):
        chart_crds.run(module, FakeCluster())  # type: ignore[arg-type]
    assert module.failed and "is not a regular file" in module.failed["msg"]
    assert not (tmp_path / "out").exists()
