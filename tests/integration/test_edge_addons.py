"""KubeEdge (cloudcore), EdgeMesh and Sedna from the REAL charts (../shared/mirror) on the
session's 1.20 sim control plane, through the collection's up/down playbooks.

One lifecycle: up -> ready -> up again changes nothing -> down -> zero leftovers, checked
by decice's own scan (down fails otherwise) and by an independent discovery diff. An
Istio CRD present before `up` (as a real Istio would have it) is neither touched nor
removed; the ones decice created are removed. The EdgeMesh PSK is generated, kept 0600
in the state dir and appears nowhere in the output (run verbose) or the state dir.
"""

from __future__ import annotations

import base64
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from decice import addons, versions
from decice.sim.binaries import BinarySet
from decice.sim.controlplane import ControlPlaneInfo
from tests.integration.simsupport import addon_cluster, api_objects
from tests.support import REPO, require, run_captured, run_decice, run_playbook

pytestmark = pytest.mark.addons

MIRROR = REPO.parent / "shared" / "mirror"
POST_RENDERER = str(Path(sys.executable).parent / "decice-sim-postrender")
NAMESPACES = ("kubeedge", "sedna")
ISTIO_KEPT = "gateways.networking.istio.io"  # "a real Istio's": there before up
ISTIO_OURS = ("destinationrules.networking.istio.io", "virtualservices.networking.istio.io")
EDGE_TAINT = {"key": "node-role.kubernetes.io/edge", "effect": "NoSchedule"}
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
def env(
    sim_control_plane: ControlPlaneInfo,
    sim_binaries: BinarySet,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Any]]:
    require((MIRROR / "charts" / "SHA256SUMS").is_file(), f"the upstream mirror {MIRROR}")
    require(Path(POST_RENDERER).is_file(), f"{POST_RENDERER} (pip install -e .)")
    tmp = tmp_path_factory.mktemp("edge-addons")
    with addon_cluster(sim_control_plane, sim_binaries.path("helm"), tmp, GROUPS) as env:
        yield env


def _vars(env: dict[str, Any], enabled: tuple[str, ...]) -> Path:
    data = {
        "decice_kubeconfig": str(env["kubeconfig"]),
        "decice_state_dir": str(env["tmp"] / "state"),
        "decice_helm": str(env["helm"]),
        "decice_post_renderer": POST_RENDERER,
        "decice_mirror": str(MIRROR),
        "decice_spec": {
            "target": "sim",
            "addons": {name: {"enabled": name in enabled} for name in addons.names()},
        },
    }
    path = env["tmp"] / f"vars-{'-'.join(enabled)}.json"
    path.write_text(json.dumps(data))
    return path


def _play(command: str, varfile: Path) -> tuple[int, str, dict[str, int]]:
    # -v: every task's result is printed, so a secret that escaped no_log would show
    result = run_playbook(
        "inventories/local", command, "-v", "--tags", "addons", "-e", f"@{varfile}"
    )
    recap = re.search(r"localhost\s+:\s+(.*)", result.stdout)
    stats = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", recap.group(1))} if recap else {}
    return result.returncode, result.stdout + result.stderr, stats


def _helm_history(env: dict[str, Any], release: str, namespace: str) -> list[dict[str, Any]]:
    out = run_captured(
        [str(env["helm"]), "--kubeconfig", str(env["kubeconfig"]), "history", release,
         "-n", namespace, "-o", "json"],
        timeout=120,
    )  # fmt: skip
    return list(json.loads(out.stdout)) if out.returncode == 0 else []


def _crds(api: client.ApiClient) -> dict[str, Any]:
    ext = client.ApiextensionsV1Api(api)
    found = ext.list_custom_resource_definition(_preload_content=False)
    return {c["metadata"]["name"]: c["metadata"] for c in json.loads(found.data)["items"]}


def _istio_crd(name: str) -> dict[str, Any]:
    text = (MIRROR / "manifests" / "edgemesh-istio-crds-1.17.0.yaml").read_text()
    return next(d for d in yaml.safe_load_all(text) if d and d["metadata"]["name"] == name)


def test_kubeedge_edgemesh_sedna_up_idempotent_down_zero_leftovers(env: dict[str, Any]) -> None:
    api, state = env["api"], env["tmp"] / "state"
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    ext = client.ApiextensionsV1Api(api)
    # a real Istio's CRD, there before the add-ons: decice must neither change nor remove it
    ext.create_custom_resource_definition(_istio_crd(ISTIO_KEPT))
    kept_uid = _crds(api)[ISTIO_KEPT]["uid"]
    before = api_objects(api, NAMESPACES)
    varfile = _vars(env, ("kubeedge", "sedna"))

    rc, out_up, stats = _play("up", varfile)
    assert rc == 0, out_up[-6000:]
    assert stats["changed"] > 0
    for release, namespace in (
        ("cloudcore", "kubeedge"),
        ("edgemesh", "kubeedge"),
        ("sedna", "sedna"),
    ):
        history = _helm_history(env, release, namespace)
        assert [h["status"] for h in history] == ["deployed"], (release, history)

    # cloudcore: advertised on the API server's host (sim), dynamicController on, v1.23.1
    config_map = core.read_namespaced_config_map("cloudcore", "kubeedge")
    cloudcore_cfg = yaml.safe_load(config_map.data["cloudcore.yaml"])
    assert cloudcore_cfg["modules"]["cloudHub"]["advertiseAddress"] == ["127.0.0.1"]
    assert cloudcore_cfg["modules"]["dynamicController"]["enable"] is True
    tag = versions.pinned()["kubeedge"]["cloudcore_chart"]["image_tag"]
    image = (
        apps.read_namespaced_deployment("cloudcore", "kubeedge")
        .spec.template.spec.containers[0]
        .image
    )
    assert image == f"kubeedge/cloudcore:{tag}"

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
    gm = apps.read_namespaced_deployment("gm", "sedna").spec.template.spec.containers[0].image
    assert gm == images["gm"]
    lc = apps.read_namespaced_daemon_set("lc", "sedna")
    assert lc.spec.template.spec.containers[0].image == images["lc"]
    assert lc.status.number_ready == lc.status.desired_number_scheduled == 4  # 2 workers + 2 edge
    pods = core.list_namespaced_pod("sedna", label_selector="sedna=lc").items
    assert {p.spec.node_name for p in pods} == {"edgewk-0", "edgewk-1", "edgeed-0", "edgeed-1"}

    installed = api_objects(api, NAMESPACES) - before
    kinds = {(kind, name) for _, kind, _, name in installed}
    assert ("Namespace", "sedna") in kinds and ("Namespace", "kubeedge") in kinds
    assert ("CustomResourceDefinition", "models.sedna.io") in kinds

    rc, out_again, stats = _play("up", varfile)
    assert rc == 0, out_again[-6000:]
    assert stats["changed"] == 0, "a second up changed something"
    for release, namespace in (
        ("cloudcore", "kubeedge"),
        ("edgemesh", "kubeedge"),
        ("sedna", "sedna"),
    ):
        assert len(_helm_history(env, release, namespace)) == 1, f"a second up upgraded {release}"

    # what a live cloudcore creates at run time (helm owns none of it): down removes it
    for name in ("casecret", "cloudcoresecret", "tokensecret"):
        core.create_namespaced_secret("kubeedge", {"metadata": {"name": name}, "data": {}})

    rc, out_down, _ = _play("down", varfile)
    assert rc == 0, out_down[-6000:]
    assert "Fail on leftovers" in out_down  # decice's own scan ran (and found none)
    after = api_objects(api, NAMESPACES)
    assert after - before == set(), f"left behind: {sorted(after - before)}"
    crds = _crds(api)
    assert crds[ISTIO_KEPT]["uid"] == kept_uid, "an Istio CRD decice did not create was touched"
    assert not set(ISTIO_OURS) & set(crds)
    service = core.read_namespaced_service("kubernetes", "default")
    assert "service.edgemesh.kubeedge.io/service-proxy-name" not in (service.metadata.labels or {})
    assert not psk_file.exists()
    leftovers = sorted(
        p.name for p in (state / "addons").iterdir() if p.name != "api-baseline.json"
    )
    assert leftovers in ([], ["charts"]), leftovers
    assert (
        not list((state / "addons" / "charts").glob("*"))
        if (state / "addons" / "charts").exists()
        else True
    )

    # the PSK appeared in no output and in no file of the state dir
    for text in (out_up, out_again, out_down):
        assert psk not in text
    for path in state.rglob("*"):
        if path.is_file():
            assert psk.encode() not in path.read_bytes(), path

    rc, out, _ = _play("down", varfile)
    assert rc == 0, "down twice: " + out[-4000:]
    ext.delete_custom_resource_definition(ISTIO_KEPT)


def test_mirror_sync_pins_and_image_lists_of_the_edge(
    sim_binaries: BinarySet, tmp_path: Path
) -> None:
    """`decice mirror sync` copies the three pinned charts and lists the images as decice
    installs them: the pinned v1.23.1 / v0.7.0 tags, not the charts' stale defaults."""
    require((MIRROR / "charts" / "SHA256SUMS").is_file(), f"the upstream mirror {MIRROR}")
    (tmp_path / "decice.yaml").write_text(
        "name: m\ntarget: sim\n"
        "addons:\n  volcano: {enabled: false}\n  interlink: {enabled: false}\n"
        "  kubeflow: {enabled: false}\n"
    )
    env = {"PATH": f"{sim_binaries.path('helm').parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    done = run_captured(
        [sys.executable, "-m", "decice", "mirror", "sync", "--dest", "m", "--from", str(MIRROR),
         "--json"],
        cwd=tmp_path, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    copied = {a["component"]: a["status"] for a in result["artifacts"]}
    assert copied == {
        "volcano": "disabled",
        "kubeedge": "copied",
        "edgemesh": "copied",
        "sedna": "copied",
        "interlink": "disabled",
        "kubeflow_trainer": "disabled",
    }
    assert (tmp_path / "m" / "images" / "kubeedge.txt").read_text().split() == [
        "eclipse-mosquitto:1.6.15",
        "kubeedge/cloudcore:v1.23.1",
        "kubeedge/edgemesh-agent:v1.17.0",
        "kubeedge/iptables-manager:v1.23.1",
    ]
    assert (tmp_path / "m" / "images" / "sedna.txt").read_text().split() == [
        "kubeedge/sedna-gm:v0.7.0",
        "kubeedge/sedna-kb:v0.7.0",
        "kubeedge/sedna-lc:v0.7.0",
    ]


def test_cli_up_with_the_edge_ok_down_leaves_nothing_psk_nowhere(tmp_path: Path) -> None:
    """The acceptance path through the CLI: `decice up` on a sim spec with kubeedge (and
    EdgeMesh) and sedna from the mirror ends ok, says what is not possible on sim, and
    `down` leaves nothing; the PSK is in no output and in no file of the state dir (run
    records and ansible-runner artifacts included) but its own 0600 file, gone after down."""
    require((MIRROR / "charts" / "SHA256SUMS").is_file(), f"the upstream mirror {MIRROR}")
    nodes = "".join(f"    - {json.dumps(group)}\n" for group in GROUPS)
    (tmp_path / "decice.yaml").write_text(
        "name: edge-cli\ntarget: sim\n"
        f"sim:\n  nodes:\n{nodes}"
        "addons:\n  volcano: {enabled: false}\n  kubeedge: {enabled: true}\n"
        "  sedna: {enabled: true}\n  interlink: {enabled: false}\n  kubeflow: {enabled: false}\n"
        f"mirror:\n  path: {MIRROR}\n"
    )
    state = tmp_path / ".decice"
    outputs: list[str] = []
    try:
        up = run_decice(tmp_path, "up", "--json", timeout=1500)
        outputs += [up.stdout, up.stderr]
        assert up.returncode == 0, up.stderr[-4000:]
        record = json.loads(up.stdout)
        assert record["status"] == "ok", record["failures"] or record["not_done"]
        for name in ("kubeedge", "sedna"):
            assert record["installed"][name]["version"], record["installed"]
        assert "not possible on sim" in record["verified"]["kubeedge"], record["verified"]
        assert "not possible on sim" in record["verified"]["edge_join"], record["verified"]
        psk_file = state / "addons" / "edgemesh-psk"
        assert psk_file.stat().st_mode & 0o777 == 0o600
        psk = psk_file.read_text().strip()
        assert len(base64.b64decode(psk)) == 32

        down = run_decice(tmp_path, "down", "--json", timeout=1200)
        outputs += [down.stdout, down.stderr]
        assert down.returncode == 0, down.stderr[-4000:]
        assert json.loads(down.stdout)["status"] == "ok"
        assert not psk_file.exists()
        clean = run_decice(tmp_path, "verify", "--only", "cluster", "--json", timeout=600)
        assert clean.returncode == 0, clean.stdout[-4000:] + clean.stderr[-4000:]
        assert json.loads(clean.stdout)["verified"]["cluster"].startswith("0 object(s)")

        for text in outputs:
            assert psk not in text
        runs = [p for p in (state / "runs").rglob("*") if p.is_file()]
        assert any("artifacts" in p.parts for p in runs), "the runs keep ansible-runner artifacts"
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
