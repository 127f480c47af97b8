"""The add-on engine with the REAL upstream charts (../shared/mirror) on a real 1.20 apiserver.

One lifecycle drives the whole CLI on its own sim with four add-ons from the mirror:
Volcano 1.15.1, Kubeflow Trainer 2.3.0 (+JobSet), KubeEdge's cloudcore with EdgeMesh,
and Sedna (the fifth, interLink, has lifecycles of its own on the SLURM lab). The fault
cases that need no install go through the collection's playbooks (the plain
`ansible-playbook` way in, the same engine the CLI drives) on the session's sim control
plane. Fault cases: a release left pending-install by a killed helm, an upgrade killed
mid-way, a custom resource whose finalizer's controller is gone, a webhook left behind
with failurePolicy Fail, a chart whose sha256 does not match the pin, an Istio CRD that
was there before the add-ons (as a real Istio would have it), what a live cloudcore
creates at run time. Zero leftovers are checked three times: by decice's own scan (down
fails otherwise), by `verify --only cluster` and by this file's independent before/after
diff over discovery. The EdgeMesh PSK is generated, kept 0600 in the state dir and
appears nowhere in the output, the run records and runner artifacts (every task event)
or the state dir.

The charts from their upstream sources (tag archives, EdgeMesh's upstream tgz, OCI) are
test_upstream_sources.py's and test_demo.py's (`make demo` with the upstream stand-ins).
"""

from __future__ import annotations

import base64
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
import yaml
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from decice import versions
from decice.sim.binaries.resolve import BinarySet
from tests.integration.simsupport import AddonNodes
from tests.support import (
    MIRROR,
    localhost_recap,
    repack_chart,
    require,
    run_decice,
    run_playbook,
    wait_for,
)

pytestmark = pytest.mark.addons

POST_RENDERER = str(Path(sys.executable).parent / "decice-sim-postrender")
ADDONS = ("volcano", "kubeedge", "sedna", "interlink", "kubeflow")
NAMESPACES = ("volcano-system", "kubeflow-system", "kubeedge", "sedna")
ISTIO_KEPT = "gateways.networking.istio.io"  # "a real Istio's": there before up
ISTIO_OURS = ("destinationrules.networking.istio.io", "virtualservices.networking.istio.io")
EDGE_TAINT = {"key": "node-role.kubernetes.io/edge", "effect": "NoSchedule"}
# the lifecycle's sim nodes: a control plane (EdgeMesh's relay), workers, edge nodes
GROUPS = [
    {
        "name_prefix": "edgecp",
        "count": 1,
        "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
        "labels": {"node-role.kubernetes.io/control-plane": ""},
        "taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
    },
    {"name_prefix": "edgewk", "count": 2, "capacity": {"cpu": "32", "memory": "128Gi"}},
    {
        "name_prefix": "edgeed",
        "count": 2,
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "50"},
        "labels": {"node-role.kubernetes.io/edge": ""},
        "taints": [EDGE_TAINT],
    },
]


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
def env(addon_nodes: AddonNodes, mirror: Path) -> Iterator[dict[str, Any]]:
    require(Path(POST_RENDERER).is_file(), f"{POST_RENDERER} (pip install -e .)")
    group = {
        "name_prefix": "addon",
        "count": 3,
        "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
    }
    with addon_nodes("addons", [group]) as env:
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


def _decice(cwd: Path, *args: str, outputs: list[str], timeout: float = 1200) -> dict[str, Any]:
    done = run_decice(cwd, *args, "--json", timeout=timeout)
    outputs += [done.stdout, done.stderr]
    assert done.returncode == 0, f"decice {' '.join(args)}: " + done.stderr[-4000:]
    record: dict[str, Any] = json.loads(done.stdout)
    assert record["status"] == "ok", record.get("failures") or record.get("not_done")
    return record


def _crds(api: client.ApiClient) -> dict[str, Any]:
    ext = client.ApiextensionsV1Api(api)
    found = ext.list_custom_resource_definition(_preload_content=False)
    return {c["metadata"]["name"]: c["metadata"] for c in json.loads(found.data)["items"]}


def _istio_crd(name: str) -> dict[str, Any]:
    text = (MIRROR / "manifests" / "edgemesh-istio-crds-1.17.0.yaml").read_text()
    return next(d for d in yaml.safe_load_all(text) if d and d["metadata"]["name"] == name)


def _history(helm: Path, kubeconfig: Path, release: str, namespace: str) -> list[dict[str, Any]]:
    out = _helm(helm, kubeconfig, "history", release, "-n", namespace, "-o", "json")
    return list(json.loads(out.stdout)) if out.returncode == 0 else []


def _new_run_files(runs: Path, before: set[Path]) -> list[Path]:
    return [p for d in runs.iterdir() if d not in before for p in d.rglob("*") if p.is_file()]


# (release, namespace) of each add-on of the lifecycle
RELEASES = (
    ("volcano", "volcano-system"),
    ("kubeflow-trainer", "kubeflow-system"),
    ("cloudcore", "kubeedge"),
    ("edgemesh", "kubeedge"),
    ("sedna", "sedna"),
)


def _assert_edge_installed(
    api: client.ApiClient, state: Path, record: dict[str, Any], kept_uid: str
) -> str:
    """cloudcore, EdgeMesh (its PSK, relay, Service label, Istio CRDs) and Sedna as `up`
    left them; the PSK back."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    assert "not possible on sim" in record["verified"]["kubeedge"], record["verified"]
    assert "not possible on sim" in record["verified"]["edge_join"], record["verified"]
    # cloudcore: advertised on the API server's host (sim), dynamicController on, v1.23.1
    config_map = core.read_namespaced_config_map("cloudcore", "kubeedge")
    cloudcore_cfg = yaml.safe_load(config_map.data["cloudcore.yaml"])
    assert cloudcore_cfg["modules"]["cloudHub"]["advertiseAddress"] == ["127.0.0.1"]
    assert cloudcore_cfg["modules"]["dynamicController"]["enable"] is True
    tag = versions.pinned()["kubeedge"]["cloudcore_chart"]["image_tag"]
    cloudcore = apps.read_namespaced_deployment("cloudcore", "kubeedge")
    assert cloudcore.spec.template.spec.containers[0].image == f"kubeedge/cloudcore:{tag}"

    # the charts unpacked below the state dir (EdgeMesh's and Sedna's crds/ moved out)
    # are private like everything there: files 0600, directories 0700
    unpacked = list((state / "addons" / "charts").rglob("*"))
    assert any(p.name == "Chart.yaml" for p in unpacked), unpacked[:5]
    loose = {
        str(p): oct(p.stat().st_mode & 0o777)
        for p in [state / "addons", state / "addons" / "charts", *unpacked]
        if p.stat().st_mode & 0o777 != (0o700 if p.is_dir() else 0o600)
    }
    assert loose == {}, loose

    # EdgeMesh: a PSK of decice's (0600), relay = the control-plane node, the Service label
    psk_file = state / "addons" / "edgemesh-psk"
    assert psk_file.stat().st_mode & 0o777 == 0o600
    psk = psk_file.read_text().strip()
    assert len(base64.b64decode(psk)) == 32
    chart_default = "JugH9HP1XBouyO5pWGeZa8LtipDURrf17EJvUHcJGuQ="
    in_cluster = core.read_namespaced_config_map("edgemesh-agent-psk", "kubeedge").data["psk"]
    assert in_cluster.strip() == psk != chart_default
    agent_cfg = core.read_namespaced_config_map("edgemesh-agent-cfg", "kubeedge").data
    assert "edgecp-0" in agent_cfg["edgemesh-agent.yaml"]
    service = core.read_namespaced_service("kubernetes", "default")
    assert "service.edgemesh.kubeedge.io/service-proxy-name" in (service.metadata.labels or {})

    # Istio CRDs: the one that was there untouched, the others created and labelled
    crds = _crds(api)
    assert crds[ISTIO_KEPT]["uid"] == kept_uid
    assert "app.kubernetes.io/managed-by" not in (crds[ISTIO_KEPT].get("labels") or {})
    for name in ISTIO_OURS:
        assert crds[name]["labels"]["app.kubernetes.io/managed-by"] == "decice"

    # Sedna: 11 CRDs applied server-side, v0.7.0 images, lc on worker and edge nodes
    assert len([n for n in crds if n.endswith(".sedna.io")]) == 11
    images = versions.pinned()["sedna"]["images"]
    gm = apps.read_namespaced_deployment("gm", "sedna").spec.template.spec.containers[0]
    assert gm.image == images["gm"]
    lc = apps.read_namespaced_daemon_set("lc", "sedna")
    assert lc.spec.template.spec.containers[0].image == images["lc"]
    assert lc.status.number_ready == lc.status.desired_number_scheduled == 4  # 2 wk + 2 edge
    pods = core.list_namespaced_pod("sedna", label_selector="sedna=lc").items
    assert {p.spec.node_name for p in pods} == {"edgewk-0", "edgewk-1", "edgeed-0", "edgeed-1"}
    return psk


def test_cli_up_idempotent_recovers_down_zero_leftovers_reset_verify(
    tmp_path: Path, mirror: Path, sim_binaries: BinarySet
) -> None:
    """The acceptance path, one lifecycle: `decice up` on the sim with volcano, kubeflow,
    kubeedge (and EdgeMesh) and sedna from the mirror completes a release a killed helm
    left pending-install, records versions and sha256, says what is not possible on sim
    and leaves an Istio CRD that was there alone; a second up changes nothing; an upgrade
    killed mid-way is rolled back by the next up; down removes a custom resource whose
    finalizer's controller is gone and what a live cloudcore makes, and leaves nothing
    (decice's scan, `verify --only cluster`, an independent diff); verify names a planted
    leftover; reset takes the cluster and its API baseline. The PSK is in no output and in
    no file of the state dir (run records and ansible-runner artifacts included) but its
    own 0600 file, gone after down, and the sim's private etcd."""
    from kubernetes import config

    require(Path(POST_RENDERER).is_file(), f"{POST_RENDERER} (pip install -e .)")
    nodes = "".join(f"    - {json.dumps(group)}\n" for group in GROUPS)
    spec = tmp_path / "decice.yaml"
    spec.write_text(
        f"name: addons-cli\ntarget: sim\nsim:\n  nodes:\n{nodes}"
        "addons:\n  volcano: {enabled: true}\n  kubeedge: {enabled: true}\n"
        "  sedna: {enabled: true}\n  interlink: {enabled: false}\n  kubeflow: {enabled: true}\n"
        f"mirror:\n  path: {mirror}\n"
    )
    state = tmp_path / ".decice"
    kc, helm = state / "kubeconfig", sim_binaries.path("helm")
    outputs: list[str] = []
    try:
        _decice(tmp_path, "up", "--skip", "addons", outputs=outputs)
        api = config.new_client_from_config(str(kc))
        # a real Istio's CRD, there before the add-ons: decice must neither change nor
        # remove it
        ext = client.ApiextensionsV1Api(api)
        ext.create_custom_resource_definition(_istio_crd(ISTIO_KEPT))
        kept_uid = _crds(api)[ISTIO_KEPT]["uid"]
        before = _api_objects(api)

        # a killed install left the release pending-install: `up` must complete it anyway
        client.CoreV1Api(api).create_namespace({"metadata": {"name": "volcano-system"}})
        chart = mirror / "charts" / "volcano-1.15.1.tgz"
        _kill_helm_in(helm, kc, "pending-install", "install", "volcano", str(chart))

        record = _decice(tmp_path, "up", outputs=outputs)
        assert sum(counts["changed"] for counts in record["stats"].values()) > 0, record["stats"]
        pinned = versions.pinned()
        for name, key in (
            ("volcano", "volcano"),
            ("kubeflow", "kubeflow_trainer"),
            ("kubeedge", "kubeedge"),
            ("sedna", "sedna"),
        ):
            installed, artifact = record["installed"][name], pinned[key]["artifact"]
            assert installed["sha256"] == artifact["sha256"]
            assert installed["content_sha256"] == artifact["content_sha256"]
            assert (installed["verified_by"], installed["origin"]) == ("sha256", "mirror.path")
            assert record["installed"][name]["version"] == pinned[key]["version"]
            assert record["verified"][name].count("not possible on sim") == 1
        assert record["installed"]["edgemesh"]["origin"] == "mirror.path", record["installed"]
        assert record["installed"]["volcano"]["adapted_for_sim"], "the sim adaptation is listed"
        # ready = also a ready endpoint behind each service the add-on's webhooks call
        endpoints = client.CoreV1Api(api).read_namespaced_endpoints(
            "volcano-admission-service", "volcano-system"
        )
        assert any(subset.addresses for subset in endpoints.subsets or []), "up ended before it"
        for release, namespace in RELEASES:
            history = _history(helm, kc, release, namespace)
            assert [h["status"] for h in history] == ["deployed"], (release, history)
        ext = client.ApiextensionsV1Api(api)
        crds = {c.metadata.name for c in ext.list_custom_resource_definition().items}
        assert {"queues.scheduling.volcano.sh", "trainjobs.trainer.kubeflow.org"} <= crds
        assert "jobsets.jobset.x-k8s.io" in crds  # from the subchart's crds/, adapted by decice
        runtimes = dynamic.DynamicClient(api).resources.get(
            api_version="trainer.kubeflow.org/v1alpha1", kind="ClusterTrainingRuntime"
        )
        assert [r.metadata.name for r in runtimes.get().items] == ["torch-distributed"]
        psk = _assert_edge_installed(api, state, record, kept_uid)

        installed = _api_objects(api) - before
        # the independent diff sees what the add-ons brought (else "no leftovers" proves nothing)
        assert ("v1", "Namespace", "", "volcano-system") in installed
        kinds = {(kind, name) for _, kind, _, name in installed}
        assert ("CustomResourceDefinition", "queues.scheduling.volcano.sh") in kinds
        assert ("Namespace", "sedna") in kinds and ("Namespace", "kubeedge") in kinds
        assert ("CustomResourceDefinition", "models.sedna.io") in kinds
        assert any(kind == "Deployment" and ns == "kubeflow-system" for _, kind, ns, _ in installed)

        again = _decice(tmp_path, "up", "--only", "addons", outputs=outputs)
        assert again["stats"], again
        changed = {host: counts["changed"] for host, counts in again["stats"].items()}
        assert set(changed.values()) == {0}, f"a second up changed something: {changed}"
        for release, namespace in RELEASES:
            assert len(_history(helm, kc, release, namespace)) == 1, (
                f"a second up upgraded {release}"
            )
        # ... and only checked the receipts of the first: same records, the checks' time named
        for name in ("volcano", "kubeflow", "kubeedge", "sedna"):
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
        rolled = _decice(tmp_path, "up", "--only", "addons", outputs=outputs)
        # the receipt no longer held (revision 2 pending-upgrade): volcano took its whole
        # install path; the others, untouched, only their check
        assert "installed as wanted since" not in rolled["verified"]["volcano"]
        for name in ("kubeflow", "kubeedge", "sedna"):
            assert "installed as wanted since" in rolled["verified"][name], rolled["verified"]
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
        # what a live cloudcore creates at run time (helm owns none of it): down removes it
        core = client.CoreV1Api(api)
        for name in ("casecret", "cloudcoresecret", "tokensecret"):
            core.create_namespaced_secret("kubeedge", {"metadata": {"name": name}, "data": {}})

        runs = state / "runs"
        earlier_runs = set(runs.iterdir())
        _decice(tmp_path, "down", outputs=outputs, timeout=1200)
        # decice's own scan ran (and found none): its task is in the down run's events
        down_files = _new_run_files(runs, earlier_runs)
        assert any(b"Fail on leftovers" in p.read_bytes() for p in down_files)
        after = _api_objects(api)
        assert after - before == set(), f"left behind: {sorted(after - before)}"
        crds_after = _crds(api)
        assert crds_after[ISTIO_KEPT]["uid"] == kept_uid, (
            "an Istio CRD decice did not create was touched"
        )
        assert not set(ISTIO_OURS) & set(crds_after)
        service = core.read_namespaced_service("kubernetes", "default")
        assert "service.edgemesh.kubeedge.io/service-proxy-name" not in (
            service.metadata.labels or {}
        )
        assert not (state / "addons" / "edgemesh-psk").exists()
        reports = sorted(p.name for p in (state / "addons").glob("*adapted*"))
        assert reports == [], f"sim adaptation reports left in the state dir: {reports}"
        assert not (state / "addons" / "receipts").exists(), "receipts outlived down"
        leftovers = sorted(
            p.name for p in (state / "addons").iterdir() if p.name != "api-baseline.json"
        )
        assert leftovers in ([], ["charts"]), leftovers
        assert not list((state / "addons" / "charts").glob("*")) if "charts" in leftovers else True

        # `verify --only cluster`: the same API comparison, on demand; it fails on a planted
        # leftover (naming it) and passes once it is gone
        rbac = client.RbacAuthorizationV1Api(api)
        rbac.create_cluster_role({"metadata": {"name": "decice-planted"}, "rules": []})
        dirty = run_decice(tmp_path, "verify", "--json", timeout=600)
        outputs += [dirty.stdout, dirty.stderr]
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
        outputs += [clean.stdout, clean.stderr]
        assert clean.returncode == 0, clean.stderr[-4000:]
        assert json.loads(clean.stdout)["verified"]["cluster"].startswith("0 object(s)")

        # the PSK appeared in no output and in no file of the state dir
        for text in outputs:
            assert psk not in text
        run_files = [p for p in runs.rglob("*") if p.is_file()]
        assert any("artifacts" in p.parts for p in run_files), "the runs keep runner artifacts"
        # the sim's etcd is the cluster's own store: it holds the PSK's ConfigMap as any
        # control plane does, private to this user; everything else must not hold it
        etcd = state / "sim" / "control-plane" / "etcd"
        for private in (etcd.parent, etcd):
            assert private.stat().st_mode & 0o077 == 0, f"{private} {private.stat().st_mode:o}"
        for path in state.rglob("*"):
            if path.is_file() and etcd not in path.parents:
                assert psk.encode() not in path.read_bytes(), path
    finally:
        reset = run_decice(tmp_path, "reset", "--yes", "--json", timeout=600)
    assert reset.returncode == 0, reset.stderr[-4000:]
    # reset forgets the cluster's add-on state (API baseline, unpacked charts, PSK)
    assert not (state / "addons").exists(), sorted(p.name for p in (state / "addons").iterdir())
    verify = run_decice(tmp_path, "verify", "--json", timeout=600)
    assert verify.returncode == 0, verify.stderr[-4000:]
    # reset took the cluster and its API baseline: nothing to compare, said so
    assert json.loads(verify.stdout)["verified"]["cluster"].startswith("no API baseline")
