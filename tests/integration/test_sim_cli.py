"""The sim target through the CLI: up/status/down/reset on a real control plane."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from tests.integration.simsupport import require_sim
from tests.support import pid_alive, pod_manifest, run_decice, sim_spec, wait_for

pytestmark = pytest.mark.sim


SPEC_500 = sim_spec(
    "sim500",
    ("w", 480, 'cpu: "8", memory: 32Gi, pods: "110"'),
    ("g", 20, 'cpu: "16", memory: 64Gi, pods: "110", nvidia.com/gpu: "4"'),
)


@pytest.fixture(scope="module")
def sim500(tmp_path_factory: pytest.TempPathFactory) -> Any:
    require_sim()
    work = tmp_path_factory.mktemp("sim500")
    (work / "decice.yaml").write_text(SPEC_500)
    up = run_decice(work, "up", "--skip", "addons,scheduler", "--json")
    assert up.returncode == 0, up.stderr
    status = json.loads(run_decice(work, "status", "--json").stdout)
    try:
        yield work, json.loads(up.stdout), status
    finally:
        run_decice(work, "reset", "--yes")


def test_500_nodes_ready_and_pods_placed(sim500: Any) -> None:
    _work, record, status = sim500
    phases = {p["name"]: p for p in record["phases"]}
    assert phases["kubernetes"]["status"] == "ok"
    assert record["versions"]["sim-control-plane"].startswith("v1.")
    assert status["sim"]["nodes"] == {
        "cpu": {"total": 480, "ready": 480},
        "gpu": {"total": 20, "ready": 20},
    }
    kubeconfig = Path(status["kubeconfig"])
    assert kubeconfig.stat().st_mode & 0o777 == 0o600
    api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))

    small = pod_manifest("small", resources={"requests": {"cpu": "1"}})
    api.create_namespaced_pod("default", small)

    def running() -> bool:
        pod = api.read_namespaced_pod("small", "default")
        return bool(pod.spec.node_name) and pod.status.phase == "Running"

    wait_for("the default-scheduler pod to run", running, timeout=60)

    big = pod_manifest("big", scheduler="nobody", resources={"requests": {"cpu": "8"}})
    api.create_namespaced_pod("default", big)
    node = api.read_namespaced_pod("small", "default").spec.node_name
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "big"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    api.create_namespaced_binding("default", binding, _preload_content=False)

    def rejected() -> Any:
        pod = api.read_namespaced_pod("big", "default")
        return pod if pod.status.phase == "Failed" else None

    pod = wait_for("the over-committed pod to be rejected", rejected, timeout=60)
    assert pod.status.reason == "OutOfcpu"


def test_up_again_changes_nothing(sim500: Any) -> None:
    work, _first, _ = sim500
    again = run_decice(work, "up", "--skip", "addons,scheduler", "--json")
    assert again.returncode == 0, again.stderr
    record = json.loads(again.stdout)
    assert record["phases"][3]["name"] == "kubernetes"
    assert record["phases"][3]["status"] == "ok"
    status = json.loads(run_decice(work, "status", "--json").stdout)
    pids = [c["pid"] for c in status["sim"]["control_plane"]["components"]]
    assert all(pid_alive(pid) for pid in pids)


def test_up_down_reset_leaves_no_process_and_no_data(tmp_path: Path) -> None:
    require_sim()
    up = run_decice(tmp_path, "up", "--json")  # the built-in default spec
    assert up.returncode == 0, up.stderr
    record = json.loads(up.stdout)
    assert record["status"] in {"ok", "incomplete"}
    if record["status"] == "incomplete":
        assert record["not_done"], "incomplete runs must say what was not done"
    # the host phases match no host of a sim: skipped as such, with no ansible-playbook run
    host_phases = ("preflight", "baseline", "prepare")
    skipped = {p["name"]: (p["status"], p["note"]) for p in record["phases"]}
    for name in host_phases:
        assert skipped[name] == ("skipped", "no hosts in this phase's groups"), skipped
    ran = {p.name for p in (Path(record["artifacts"]) / "ansible" / "artifacts").iterdir()}
    assert ran == {"addons"}, ran
    status = json.loads(run_decice(tmp_path, "status", "--json").stdout)
    sim = status["sim"]
    assert sim["control_plane"]["running"]
    assert sum(v["total"] for v in sim["nodes"].values()) == 8
    pids = [c["pid"] for c in sim["control_plane"]["components"]]
    pids.append(sim["agent"]["status"]["pid"])
    assert all(pid_alive(pid) for pid in pids)

    dirty = run_decice(tmp_path, "verify")
    assert dirty.returncode == 1
    assert "not a clean slate" in dirty.stderr

    down = run_decice(tmp_path, "down", "--json")
    assert down.returncode == 0, down.stderr
    reset = run_decice(tmp_path, "reset", "--yes", "--json")
    assert reset.returncode == 0, reset.stderr
    reset_record = json.loads(reset.stdout)
    assert {p["name"]: p["status"] for p in reset_record["phases"]} == {
        "kubernetes": "ok",
        "restore": "skipped",
        "verify": "skipped",
    }
    assert not (Path(reset_record["artifacts"]) / "ansible" / "artifacts").exists()
    wait_for("every sim process to exit", lambda: not any(pid_alive(pid) for pid in pids), 30)
    assert not (tmp_path / ".decice" / "sim").exists()
    assert not (tmp_path / ".decice" / "kubeconfig").exists()
    clean = run_decice(tmp_path, "verify", "--json")
    assert clean.returncode == 0, clean.stderr
    notes = {p["name"]: p["note"] for p in json.loads(clean.stdout)["phases"]}
    assert notes["verify"].startswith("clean:")
