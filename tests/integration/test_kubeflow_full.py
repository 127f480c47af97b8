"""Kubeflow profile full: the REAL kubeflow/manifests 26.03 (../shared/mirror/sources) rendered
with the sim's kubectl kustomize, applied to the sim's 1.20 apiserver through the collection's
playbooks, and removed again.

One install, asserted many ways: what 1.20 and the sim refuse is reported object by object
with the server's reason; a second up writes nothing; down leaves nothing by this file's own
before/after diff over discovery (and by decice's scan, which down runs itself). The two
refusals that change nothing run first: an exclude entry the example does not have, and a
Trainer CRD of the trainer profile's helm release (a stand-in: only its CRD object with helm's
annotation, the one thing the check reads).

Not possible here: Kubeflow Pipelines and the bundled Trainer render remote bases from GitHub
(argo-workflows, JobSet, LWS), so both are excluded; no image runs, so nothing the webhooks
serve answers.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from decice.sim.binaries.resolve import BinarySet
from tests.integration.simsupport import AddonNodes
from tests.support import MIRROR, localhost_recap, require, run_playbook

pytestmark = pytest.mark.addons

ARCHIVE = MIRROR / "sources" / "kubeflow-manifests-26.03.tar.gz"
POST_RENDERER = str(Path(sys.executable).parent / "decice-sim-postrender")
ADDONS = ("volcano", "kubeedge", "sedna", "interlink", "kubeflow")
# remote bases (https://github.com/...) that cannot be fetched here
EXCLUDE = ["applications/pipeline/overlays", "applications/trainer/overlays"]
TRAINER_CRD = "trainjobs.trainer.kubeflow.org"


def _vars(env: dict[str, Any], exclude: list[str]) -> Path:
    spec = {name: {"enabled": name == "kubeflow"} for name in ADDONS}
    spec["kubeflow"].update(profile="full", exclude=exclude)
    data = {
        "decice_kubeconfig": str(env["kubeconfig"]),
        "decice_state_dir": str(env["tmp"] / "state"),
        "decice_helm": str(env["helm"]),
        "decice_kubectl": str(env["kubectl"]),
        "decice_post_renderer": POST_RENDERER,
        "decice_mirror": str(MIRROR),
        "decice_spec": {"target": "sim", "addons": spec},
    }
    path = env["tmp"] / f"vars-{len(exclude)}.json"
    path.write_text(json.dumps(data))
    return path


def _play(command: str, varfile: Path) -> tuple[int, str, dict[str, int]]:
    result = run_playbook("inventories/local", command, "--tags", "addons", "-e", f"@{varfile}")
    return result.returncode, result.stdout + result.stderr, localhost_recap(result.stdout)


def _by_group(key: tuple[str, ...]) -> tuple[str, ...]:
    api_version, *rest = key
    return (api_version.rpartition("/")[0], *rest)


def _objects(
    env: dict[str, Any], namespaces: list[str] | None = None
) -> set[tuple[str, str, str, str]]:
    """Every cluster-scoped object and the objects of ``namespaces`` (default: default)."""
    from tests.integration.simsupport import api_objects

    return api_objects(env["api"], namespaces or ["default"])


@pytest.fixture(scope="module")
def env(addon_nodes: AddonNodes, sim_binaries: BinarySet) -> Iterator[dict[str, Any]]:
    require(ARCHIVE.is_file(), f"the kubeflow manifests in the upstream mirror ({ARCHIVE})")
    require(Path(POST_RENDERER).is_file(), f"{POST_RENDERER} (pip install -e .)")
    group = {"name_prefix": "kf", "count": 2, "capacity": {"cpu": "64", "memory": "256Gi"}}
    with addon_nodes("kubeflow-full", [group]) as env:
        env["kubectl"] = sim_binaries.path("kubectl")
        env["before"] = set()
        yield env
        # never leave the profile's webhooks on the shared control plane (a down that
        # passed already removed them: a second one would only repeat its checks)
        if not env.get("down_ok"):
            _play("down", _vars(env, EXCLUDE))


def test_an_exclude_entry_the_example_lacks_is_refused_before_anything(env: dict[str, Any]) -> None:
    env["before"] = _objects(env)
    rc, out, _ = _play("up", _vars(env, ["applications/nonesuch"]))
    assert rc != 0
    assert "addons.kubeflow.exclude: applications/nonesuch is not a resource of" in out
    assert "applications/pipeline/overlays" in out  # the entries it could have named
    assert _objects(env) == env["before"]


def test_the_trainer_profiles_release_is_not_overwritten(env: dict[str, Any]) -> None:
    ext = client.ApiextensionsV1Api(env["api"])
    crd = {
        "metadata": {
            "name": TRAINER_CRD,
            "annotations": {"meta.helm.sh/release-name": "kubeflow-trainer"},
        },
        "spec": {
            "group": "trainer.kubeflow.org",
            "scope": "Namespaced",
            "names": {"plural": "trainjobs", "singular": "trainjob", "kind": "TrainJob"},
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                }
            ],
        },
    }
    ext.create_custom_resource_definition(crd)
    try:
        rc, out, _ = _play("up", _vars(env, EXCLUDE))
        assert rc != 0
        assert f"CustomResourceDefinition {TRAINER_CRD} belongs" in out
        assert "the helm release kubeflow-trainer" in out
        assert "decice down" in out
        after = _objects(env) - {
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", TRAINER_CRD),
            ("apiregistration.k8s.io/v1", "APIService", "", "v1alpha1.trainer.kubeflow.org"),
        }
        assert after == env["before"]
    finally:
        ext.delete_custom_resource_definition(TRAINER_CRD)


@pytest.fixture(scope="module")
def installed(env: dict[str, Any]) -> dict[str, Any]:
    if not env["before"]:
        env["before"] = _objects(env)
    rc, out, stats = _play("up", _vars(env, EXCLUDE))
    assert rc == 0, out[-6000:]
    rendered = sorted((env["tmp"] / "state" / "addons" / "kubeflow-full").glob("*.yaml"))
    assert len(rendered) == 1, rendered
    with rendered[0].open() as stream:
        docs = [d for d in yaml.load_all(stream, Loader=yaml.CSafeLoader) if d]
    # every namespace the rendered objects live in (kube-system too): scanned for them
    env["namespaces"] = sorted(
        {d["metadata"]["namespace"] for d in docs if d["metadata"].get("namespace")}
    )
    (report,) = rendered[0].parent.glob("*-report.json")
    return {
        "stats": stats,
        "docs": docs,
        "rendered": rendered[0],
        "report": json.loads(report.read_text()),
        "objects": _objects(env, env["namespaces"]),
    }


def test_full_profile_applies_what_1_20_takes_and_names_each_refusal(
    env: dict[str, Any], installed: dict[str, Any]
) -> None:
    docs, report = installed["docs"], installed["report"]
    assert installed["stats"]["failed"] == 0
    assert report["objects"] == len(docs) > 400
    assert report["excluded"] == EXCLUDE
    kinds = {d["kind"] for d in docs}
    assert {"CustomResourceDefinition", "Deployment", "MutatingWebhookConfiguration"} <= kinds
    # the excluded components are not rendered; the rest of the example is
    deployments = {d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"}
    assert "ml-pipeline" not in deployments
    assert TRAINER_CRD not in {d["metadata"]["name"] for d in docs}
    assert {"istiod", "cert-manager", "katib-controller", "centraldashboard"} <= deployments
    # every refused object is named with the server's reason, and only webhooks nothing on
    # the sim serves refuse (1.20's own refusals are adapted by the post-renderer)
    for row in report["refused"]:
        assert set(row) == {"apiVersion", "kind", "namespace", "name", "reason"}
        assert "failed calling webhook" in row["reason"], row
    # every other rendered object is in the cluster now (by group, so a version the server
    # prefers over the rendered one still matches)
    present = {_by_group(key) for key in installed["objects"] - env["before"]}
    refused = {
        _by_group(tuple(r[k] for k in ("apiVersion", "kind", "namespace", "name")))
        for r in report["refused"]
    }
    for doc in docs:
        meta = doc["metadata"]
        key = _by_group((doc["apiVersion"], doc["kind"], meta.get("namespace", ""), meta["name"]))
        cluster_scoped = (*key[:2], "", key[3])  # a namespace on such an object is ignored
        assert key in present or cluster_scoped in present or key in refused, key
    # the sim adaptation of the rendered set is reported beside it
    adapted = json.loads(next(installed["rendered"].parent.glob("*-adapted.json")).read_text())
    rules = {r["rule"] for r in adapted["rewrites"]}
    assert {"empty-string-default", "port-protocol", "webhook-match-conditions"} <= rules


def test_a_second_up_changes_nothing(env: dict[str, Any], installed: dict[str, Any]) -> None:
    rc, out, stats = _play("up", _vars(env, EXCLUDE))
    assert rc == 0, out[-4000:]
    assert stats["changed"] == 0, out[-6000:]
    assert _objects(env, env["namespaces"]) == installed["objects"]


def test_down_leaves_nothing(env: dict[str, Any], installed: dict[str, Any]) -> None:
    rc, out, _ = _play("down", _vars(env, EXCLUDE))
    assert rc == 0, out[-6000:]
    # cluster-scoped (every namespace it made included) and default: as before
    assert _objects(env) == env["before"]
    # and not one rendered object left in any namespace
    left = {_by_group(key) for key in _objects(env, env["namespaces"])}
    rendered = {
        _by_group(
            (d["apiVersion"], d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
        )
        for d in installed["docs"]
    }
    assert left & rendered == set()
    assert not (env["tmp"] / "state" / "addons" / "kubeflow-full").exists()
    env["down_ok"] = True
