"""KubeEdge (cloudcore), EdgeMesh and Sedna from the REAL charts (../shared/mirror) on a
sim of the CLI's own, through `decice up`/`down` (the collection's playbooks).

The lifecycle test sets no mirror: the charts come from their upstream sources - cloudcore
and Sedna as chart directories in tag archives, EdgeMesh as upstream's own tgz (repacked,
so only its content pin matches) - served by loopback stand-ins built from the mirror's
charts (tests/support.upstream_standins) through the spec's `upstream.rewrite`.

One lifecycle: up -> ready -> up again changes nothing -> down -> zero leftovers, checked
by decice's own scan (down fails otherwise), by `verify --only cluster` and by an
independent discovery diff. An Istio CRD present before the add-ons (as a real Istio
would have it) is neither touched nor removed; the ones decice created are removed. The
EdgeMesh PSK is generated, kept 0600 in the state dir and appears nowhere in the output,
the run records and runner artifacts (every task event) or the state dir.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from decice import versions
from decice.sim.binaries import BinarySet
from tests.integration.simsupport import api_objects
from tests.support import REPO, require, run_captured, run_decice, upstream_standins

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


def _helm_history(
    helm: Path, kubeconfig: Path, release: str, namespace: str
) -> list[dict[str, Any]]:
    out = run_captured(
        [str(helm), "--kubeconfig", str(kubeconfig), "history", release,
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


def _decice(cwd: Path, *args: str, outputs: list[str], timeout: float = 1500) -> dict[str, Any]:
    done = run_decice(cwd, *args, "--json", timeout=timeout)
    outputs += [done.stdout, done.stderr]
    assert done.returncode == 0, f"decice {' '.join(args)}: " + done.stderr[-4000:]
    record: dict[str, Any] = json.loads(done.stdout)
    assert record["status"] == "ok", record.get("failures") or record.get("not_done")
    return record


def _new_run_files(runs: Path, before: set[Path]) -> list[Path]:
    return [p for d in runs.iterdir() if d not in before for p in d.rglob("*") if p.is_file()]


@pytest.fixture
def upstream(sim_binaries: BinarySet, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The spec's `upstream` section pointing at stand-ins for the three charts' sources."""
    require((MIRROR / "charts" / "SHA256SUMS").is_file(), f"the upstream mirror {MIRROR}")
    pins = {c: versions.pinned()[c]["artifact"] for c in ("kubeedge", "edgemesh", "sedna")}
    (tmp_path / "upstream").mkdir()
    helm = str(sim_binaries.path("helm"))
    with upstream_standins(MIRROR, tmp_path / "upstream", pins, helm) as section:
        yield section


def test_cli_up_idempotent_down_zero_leftovers_psk_nowhere(
    sim_binaries: BinarySet, tmp_path: Path, upstream: dict[str, Any]
) -> None:
    """The acceptance path through the CLI, one lifecycle: `decice up` on a sim spec with
    kubeedge (and EdgeMesh) and sedna from their upstream sources ends ok, records where
    each chart came from and which pin it matched, and says what is not possible
    on sim; a second up changes nothing; `down` leaves nothing (decice's own scan, `verify
    --only cluster` and an independent discovery diff); the PSK is in no output and in no
    file of the state dir (run records and ansible-runner artifacts included) but its own
    0600 file, gone after down, and the sim's private etcd."""
    require((MIRROR / "charts" / "SHA256SUMS").is_file(), f"the upstream mirror {MIRROR}")
    require(Path(POST_RENDERER).is_file(), f"{POST_RENDERER} (pip install -e .)")
    nodes = "".join(f"    - {json.dumps(group)}\n" for group in GROUPS)
    (tmp_path / "decice.yaml").write_text(
        "name: edge-cli\ntarget: sim\n"
        f"sim:\n  nodes:\n{nodes}"
        "addons:\n  volcano: {enabled: false}\n  kubeedge: {enabled: true}\n"
        "  sedna: {enabled: true}\n  interlink: {enabled: false}\n  kubeflow: {enabled: false}\n"
        + yaml.safe_dump({"upstream": upstream})
    )
    state = tmp_path / ".decice"
    kubeconfig, helm = state / "kubeconfig", sim_binaries.path("helm")
    outputs: list[str] = []
    try:
        # the cluster first, then a real Istio's CRD, there before the add-ons: decice must
        # neither change nor remove it
        _decice(tmp_path, "up", "--skip", "addons", outputs=outputs)
        api = config.new_client_from_config(str(kubeconfig))
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        ext = client.ApiextensionsV1Api(api)
        ext.create_custom_resource_definition(_istio_crd(ISTIO_KEPT))
        kept_uid = _crds(api)[ISTIO_KEPT]["uid"]
        before = api_objects(api, NAMESPACES)

        record = _decice(tmp_path, "up", outputs=outputs)
        assert sum(counts["changed"] for counts in record["stats"].values()) > 0, record["stats"]
        for name in ("kubeedge", "sedna"):
            assert record["installed"][name]["version"], record["installed"]
            assert record["installed"][name]["origin"] == "source", record["installed"][name]
            assert record["installed"][name]["verified_by"] == "content"
        assert record["installed"]["edgemesh"]["origin"] == "url", record["installed"]
        assert "not possible on sim" in record["verified"]["kubeedge"], record["verified"]
        assert "not possible on sim" in record["verified"]["edge_join"], record["verified"]
        releases = (("cloudcore", "kubeedge"), ("edgemesh", "kubeedge"), ("sedna", "sedna"))
        for release, namespace in releases:
            history = _helm_history(helm, kubeconfig, release, namespace)
            assert [h["status"] for h in history] == ["deployed"], (release, history)

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

        installed = api_objects(api, NAMESPACES) - before
        kinds = {(kind, name) for _, kind, _, name in installed}
        assert ("Namespace", "sedna") in kinds and ("Namespace", "kubeedge") in kinds
        assert ("CustomResourceDefinition", "models.sedna.io") in kinds

        again = _decice(tmp_path, "up", "--only", "addons", outputs=outputs)
        assert again["stats"], again
        changed = {host: counts["changed"] for host, counts in again["stats"].items()}
        assert set(changed.values()) == {0}, f"a second up changed something: {changed}"
        for release, namespace in releases:
            history = _helm_history(helm, kubeconfig, release, namespace)
            assert len(history) == 1, f"a second up upgraded {release}"

        # what a live cloudcore creates at run time (helm owns none of it): down removes it
        for name in ("casecret", "cloudcoresecret", "tokensecret"):
            core.create_namespaced_secret("kubeedge", {"metadata": {"name": name}, "data": {}})

        runs = state / "runs"
        earlier_runs = set(runs.iterdir())
        _decice(tmp_path, "down", outputs=outputs, timeout=1200)
        # decice's own scan ran (and found none): its task is in the down run's events
        down_events = _new_run_files(runs, earlier_runs)
        assert any(b"Fail on leftovers" in p.read_bytes() for p in down_events)
        after = api_objects(api, NAMESPACES)
        assert after - before == set(), f"left behind: {sorted(after - before)}"
        crds = _crds(api)
        assert crds[ISTIO_KEPT]["uid"] == kept_uid, "an Istio CRD decice did not create was touched"
        assert not set(ISTIO_OURS) & set(crds)
        service = core.read_namespaced_service("kubernetes", "default")
        assert "service.edgemesh.kubeedge.io/service-proxy-name" not in (
            service.metadata.labels or {}
        )
        assert not psk_file.exists()
        leftovers = sorted(
            p.name for p in (state / "addons").iterdir() if p.name != "api-baseline.json"
        )
        assert leftovers in ([], ["charts"]), leftovers
        assert not list((state / "addons" / "charts").glob("*")) if "charts" in leftovers else True
        clean = run_decice(tmp_path, "verify", "--only", "cluster", "--json", timeout=600)
        assert clean.returncode == 0, clean.stdout[-4000:] + clean.stderr[-4000:]
        assert json.loads(clean.stdout)["verified"]["cluster"].startswith("0 object(s)")
        _decice(tmp_path, "down", outputs=outputs, timeout=1200)  # down twice

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
