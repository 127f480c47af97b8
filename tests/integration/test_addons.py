"""The add-on engine with the REAL upstream charts (../shared/mirror) on a real 1.20 apiserver.

Volcano 1.15.1 and Kubeflow Trainer 2.3.0 (+JobSet): one lifecycle drives the whole CLI
on its own sim; the fault cases that need no install go through the collection's
playbooks (the plain `ansible-playbook` way in, the same engine the CLI drives) on the
session's sim control plane. Fault cases: a release left pending-install by a killed
helm, an upgrade killed mid-way, a custom resource whose finalizer's controller is gone,
a webhook left behind with failurePolicy Fail, a chart whose sha256 does not match the
pin. Zero leftovers are checked three times: by decice's own scan (down fails otherwise),
by `verify --only cluster` and by this file's independent before/after diff over
discovery.
"""

from __future__ import annotations

import json
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from decice.sim.binaries import BinarySet
from decice.sim.controlplane import ControlPlaneInfo
from tests.support import (
    REPO,
    localhost_recap,
    repack_chart,
    require,
    run_decice,
    run_playbook,
    wait_for,
)

pytestmark = pytest.mark.addons

MIRROR = REPO.parent / "shared" / "mirror"
POST_RENDERER = str(Path(sys.executable).parent / "decice-sim-postrender")
ADDONS = ("volcano", "kubeedge", "sedna", "interlink", "kubeflow")
NAMESPACES = ("volcano-system", "kubeflow-system")


@pytest.fixture(scope="module")
def mirror() -> Path:
    require((MIRROR / "charts" / "SHA256SUMS").is_file(), f"the upstream mirror {MIRROR}")
    return MIRROR


def _vars(tmp: Path, kubeconfig: Path, helm: Path, mirror: Path, enabled: tuple[str, ...]) -> Path:
    data = {
        "decice_kubeconfig": str(kubeconfig),
        "decice_state_dir": str(tmp / "state"),
        "decice_helm": str(helm),
        "decice_post_renderer": POST_RENDERER,
        "decice_mirror": str(mirror),
        "decice_spec": {
            "target": "sim",
            "addons": {name: {"enabled": name in enabled} for name in ADDONS},
        },
    }
    path = tmp / f"vars-{'-'.join(enabled) or 'none'}.json"
    path.write_text(json.dumps(data))
    return path


def _play(command: str, varfile: Path) -> tuple[int, str, dict[str, int]]:
    result = run_playbook("inventories/local", command, "--tags", "addons", "-e", f"@{varfile}")
    return result.returncode, result.stdout + result.stderr, localhost_recap(result.stdout)


def _api_objects(api: client.ApiClient) -> set[tuple[str, str, str, str]]:
    """Independent of decice: every cluster-scoped object and every object in the add-on
    namespaces, over discovery (tests.integration.simsupport.api_objects)."""
    from tests.integration.simsupport import api_objects

    return api_objects(api, NAMESPACES)


def _helm(helm: Path, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def _release_status(helm: Path, kubeconfig: Path, name: str, namespace: str) -> str:
    out = _helm(helm, kubeconfig, "status", name, "-n", namespace, "-o", "json")
    return json.loads(out.stdout)["info"]["status"] if out.returncode == 0 else ""


def _kill_helm_in(helm: Path, kubeconfig: Path, state: str, *args: str) -> None:
    """``helm ARGS`` on the volcano release (post-renderer, --wait), SIGKILLed once the
    release is in ``state``: what a run killed mid-helm leaves behind."""
    argv = [str(helm), "--kubeconfig", str(kubeconfig), *args, "-n", "volcano-system",
            "--post-renderer", POST_RENDERER, "--wait", "--timeout", "10m"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(
            f"a {state} release",
            lambda: _release_status(helm, kubeconfig, "volcano", "volcano-system") == state,
            timeout=120,
        )
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="module")
def env(
    sim_control_plane: ControlPlaneInfo,
    sim_binaries: BinarySet,
    mirror: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Any]]:
    require(Path(POST_RENDERER).is_file(), f"{POST_RENDERER} (pip install -e .)")
    from tests.integration.simsupport import addon_cluster

    group = {
        "name_prefix": "addon",
        "count": 3,
        "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
    }
    tmp = tmp_path_factory.mktemp("addons")
    with addon_cluster(sim_control_plane, sim_binaries.path("helm"), tmp, [group]) as env:
        yield env


def test_down_with_nothing_installed(env: dict[str, Any]) -> None:
    varfile = _vars(env["tmp"], env["kubeconfig"], env["helm"], MIRROR, ("volcano", "kubeflow"))
    rc, out, stats = _play("down", varfile)
    assert rc == 0, out[-4000:]
    assert stats["changed"] == 0


def test_leftover_webhook_blocks_pods_until_down_removes_it(env: dict[str, Any]) -> None:
    api = env["api"]
    core = client.CoreV1Api(api)
    webhook = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "volcano-admission-service-pods-validate"},
        "webhooks": [
            {
                "name": "validatepod.volcano.sh",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "clientConfig": {
                    "service": {
                        "name": "volcano-admission-service",
                        "namespace": "volcano-system",
                        "path": "/pods/validate",
                    }
                },
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
            }
        ],
    }
    client.AdmissionregistrationV1Api(api).create_validating_webhook_configuration(webhook)
    pod = {
        "metadata": {"name": "blocked", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "decice.invalid/x:1"}]},
    }
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("default", pod)
    assert "failed calling webhook" in str(refused.value.body)

    rc, out, _ = _play(
        "down", _vars(env["tmp"], env["kubeconfig"], env["helm"], MIRROR, ("volcano",))
    )
    assert rc == 0, out[-4000:]
    core.create_namespaced_pod("default", pod)
    core.delete_namespaced_pod("blocked", "default", grace_period_seconds=0)


def _values_changed(files: dict[str, bytes]) -> None:
    files["values.yaml"] += b"# one more line\n"


def test_checksum_mismatch_stops_before_anything_is_installed(env: dict[str, Any]) -> None:
    bad = env["tmp"] / "bad-mirror"
    shutil.copytree(MIRROR / "charts", bad / "charts")
    chart = bad / "charts" / "volcano-1.15.1.tgz"
    chart.chmod(0o644)
    repack_chart(MIRROR / "charts" / chart.name, chart, edit=_values_changed)  # bytes and content
    rc, out, _ = _play("up", _vars(env["tmp"], env["kubeconfig"], env["helm"], bad, ("volcano",)))
    assert rc != 0
    assert (
        f"{chart}: content sha256 " in out
        and "is not the pinned" in out
        and "Nothing was installed" in out
    )
    names = {n.metadata.name for n in client.CoreV1Api(env["api"]).list_namespace().items}
    assert "volcano-system" not in names


def _decice(cwd: Path, *args: str, timeout: float = 1200) -> dict[str, Any]:
    done = run_decice(cwd, *args, "--json", timeout=timeout)
    assert done.returncode == 0, f"decice {' '.join(args)}: " + done.stderr[-4000:]
    record: dict[str, Any] = json.loads(done.stdout)
    assert record["status"] == "ok", record.get("failures") or record.get("not_done")
    return record


def test_cli_up_idempotent_recovers_down_zero_leftovers_reset_verify(
    tmp_path: Path, mirror: Path, sim_binaries: BinarySet
) -> None:
    """The acceptance path, one lifecycle: `decice up` on the sim with volcano and kubeflow
    from the mirror completes a release a killed helm left pending-install, records
    versions and sha256; a second up changes nothing; an upgrade killed mid-way is rolled
    back by the next up; down removes a custom resource whose finalizer's controller is
    gone and leaves nothing (decice's scan, `verify --only cluster`, an independent diff);
    verify names a planted leftover; reset takes the cluster and its API baseline."""
    from kubernetes import config

    from decice import versions

    require(Path(POST_RENDERER).is_file(), f"{POST_RENDERER} (pip install -e .)")
    spec = tmp_path / "decice.yaml"
    spec.write_text(
        "name: addons-cli\ntarget: sim\n"
        "sim:\n  nodes:\n    - {name_prefix: w, count: 3, capacity: {cpu: '32', memory: 128Gi}}\n"
        "addons:\n  volcano: {enabled: true}\n  kubeedge: {enabled: false}\n"
        "  sedna: {enabled: false}\n  interlink: {enabled: false}\n  kubeflow: {enabled: true}\n"
        f"mirror:\n  path: {mirror}\n"
    )
    state = tmp_path / ".decice"
    kc, helm = state / "kubeconfig", sim_binaries.path("helm")
    try:
        _decice(tmp_path, "up", "--skip", "addons")
        api = config.new_client_from_config(str(kc))
        before = _api_objects(api)

        # a killed install left the release pending-install: `up` must complete it anyway
        client.CoreV1Api(api).create_namespace({"metadata": {"name": "volcano-system"}})
        chart = mirror / "charts" / "volcano-1.15.1.tgz"
        _kill_helm_in(helm, kc, "pending-install", "install", "volcano", str(chart))

        record = _decice(tmp_path, "up")
        assert sum(counts["changed"] for counts in record["stats"].values()) > 0, record["stats"]
        pinned = versions.pinned()
        for name, key in (("volcano", "volcano"), ("kubeflow", "kubeflow_trainer")):
            installed, artifact = record["installed"][name], pinned[key]["artifact"]
            assert installed["sha256"] == artifact["sha256"]
            assert installed["content_sha256"] == artifact["content_sha256"]
            assert (installed["verified_by"], installed["origin"]) == ("sha256", "mirror.path")
            assert record["installed"][name]["version"] == pinned[key]["version"]
            assert record["verified"][name].count("not possible on sim") == 1
        assert record["installed"]["volcano"]["adapted_for_sim"], "the sim adaptation is listed"
        # ready = also a ready endpoint behind each service the add-on's webhooks call
        endpoints = client.CoreV1Api(api).read_namespaced_endpoints(
            "volcano-admission-service", "volcano-system"
        )
        assert any(subset.addresses for subset in endpoints.subsets or []), "up ended before it"
        assert _release_status(helm, kc, "volcano", "volcano-system") == "deployed"
        assert _release_status(helm, kc, "kubeflow-trainer", "kubeflow-system") == "deployed"
        ext = client.ApiextensionsV1Api(api)
        crds = {c.metadata.name for c in ext.list_custom_resource_definition().items}
        assert {"queues.scheduling.volcano.sh", "trainjobs.trainer.kubeflow.org"} <= crds
        assert "jobsets.jobset.x-k8s.io" in crds  # from the subchart's crds/, adapted by decice
        runtimes = dynamic.DynamicClient(api).resources.get(
            api_version="trainer.kubeflow.org/v1alpha1", kind="ClusterTrainingRuntime"
        )
        assert [r.metadata.name for r in runtimes.get().items] == ["torch-distributed"]

        installed = _api_objects(api) - before
        # the independent diff sees what the add-ons brought (else "no leftovers" proves nothing)
        assert ("v1", "Namespace", "", "volcano-system") in installed
        kinds = {(kind, name) for _, kind, _, name in installed}
        assert ("CustomResourceDefinition", "queues.scheduling.volcano.sh") in kinds
        assert any(kind == "Deployment" and ns == "kubeflow-system" for _, kind, ns, _ in installed)

        again = _decice(tmp_path, "up", "--only", "addons")
        assert again["stats"], again
        changed = {host: counts["changed"] for host, counts in again["stats"].items()}
        assert set(changed.values()) == {0}, f"a second up changed something: {changed}"
        history = _helm(helm, kc, "history", "volcano", "-n", "volcano-system", "-o", "json")
        assert len(json.loads(history.stdout)) == 1, "a second up made a new helm revision"
        # ... and only checked the receipts of the first: same records, the checks' time named
        for name in ("volcano", "kubeflow"):
            assert again["installed"][name] == record["installed"][name]
            assert "installed as wanted since" in again["verified"][name], again["verified"]
            receipt = state / "addons" / "receipts" / f"{name}.json"
            assert stat.S_IMODE(receipt.stat().st_mode) == 0o600

        # an upgrade killed while helm waits leaves the release pending-upgrade (helm then
        # refuses every operation on it): `up` must roll it back and complete
        _kill_helm_in(
            helm, kc, "pending-upgrade", "upgrade", "volcano", str(chart), "--reuse-values",
            "--set", "custom.scheduler_ns.decice=nowhere",
        )  # fmt: skip
        rolled = _decice(tmp_path, "up", "--only", "addons")
        # the receipt no longer held (revision 2 pending-upgrade): volcano took its whole
        # install path; kubeflow, untouched, only its check
        assert "installed as wanted since" not in rolled["verified"]["volcano"]
        assert "installed as wanted since" in rolled["verified"]["kubeflow"]
        history = _helm(helm, kc, "history", "volcano", "-n", "volcano-system", "-o", "json")
        assert "Rollback to 1" in [rev["description"] for rev in json.loads(history.stdout)]
        assert _release_status(helm, kc, "volcano", "volcano-system") == "deployed"
        scheduler = client.AppsV1Api(api).read_namespaced_deployment(
            "volcano-scheduler", "volcano-system"
        )
        assert not (scheduler.spec.template.spec.node_selector or {}).get("decice")

        # a custom resource held by a finalizer whose controller will be gone
        commands = dynamic.DynamicClient(api).resources.get(
            api_version="bus.volcano.sh/v1alpha1", kind="Command"
        )
        commands.create(
            body={
                "apiVersion": "bus.volcano.sh/v1alpha1",
                "kind": "Command",
                "metadata": {
                    "name": "held",
                    "namespace": "volcano-system",
                    "finalizers": ["example.org/hold"],
                },
                "action": "AbortJob",
            },
            namespace="volcano-system",
        )

        runs = state / "runs"
        earlier_runs = set(runs.iterdir())
        _decice(tmp_path, "down", timeout=900)
        # decice's own scan ran (and found none): its task is in the down run's events
        down_files = [p for d in runs.iterdir() if d not in earlier_runs for p in d.rglob("*")]
        assert any(p.is_file() and b"Fail on leftovers" in p.read_bytes() for p in down_files)
        after = _api_objects(api)
        assert after - before == set(), f"left behind: {sorted(after - before)}"
        reports = sorted(p.name for p in (state / "addons").glob("*adapted*"))
        assert reports == [], f"sim adaptation reports left in the state dir: {reports}"
        assert not (state / "addons" / "receipts").exists(), "receipts outlived down"
        _decice(tmp_path, "down", timeout=900)  # down twice

        # `verify --only cluster`: the same API comparison, on demand; it fails on a planted
        # leftover (naming it) and passes once it is gone
        rbac = client.RbacAuthorizationV1Api(api)
        rbac.create_cluster_role({"metadata": {"name": "decice-planted"}, "rules": []})
        dirty = run_decice(tmp_path, "verify", "--json", timeout=600)
        assert dirty.returncode == 1, dirty.stderr[-4000:]
        result = json.loads(dirty.stdout)
        assert "decice-planted" in json.dumps(result["failures"])
        # a failed phase does not hide the next: the sim is still up, so verify fails too
        assert {p["name"]: p["status"] for p in result["phases"]} == {
            "cluster": "failed",
            "verify": "failed",
        }
        rbac.delete_cluster_role("decice-planted")
        clean = run_decice(tmp_path, "verify", "--only", "cluster", "--json", timeout=600)
        assert clean.returncode == 0, clean.stderr[-4000:]
        assert json.loads(clean.stdout)["verified"]["cluster"].startswith("0 object(s)")
    finally:
        reset = run_decice(tmp_path, "reset", "--yes", "--json", timeout=600)
    assert reset.returncode == 0, reset.stderr[-4000:]
    verify = run_decice(tmp_path, "verify", "--json", timeout=600)
    assert verify.returncode == 0, verify.stderr[-4000:]
    # reset took the cluster and its API baseline: nothing to compare, said so
    assert json.loads(verify.stdout)["verified"]["cluster"].startswith("no API baseline")
