"""Deploying the bundled scheduler: the sim target through the CLI, the role on lab nodes.

sim: `decice up` runs decice-scheduler as a managed local process against a real
kube-apiserver, proves placement with a smoke pod; `down` and `reset` stop it.

lab: the role's systemd-unit path on real systemd containers (venv, wheel built by the
controller, unit enabled and active) and its uninstall. The lab nodes cannot reach the
sim's loopback API, so readiness and the smoke pod are turned off there (see
docs/scheduler.md, "What was not exercised").
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import re
import socket
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from decice import lab
from decice.baselines import baseline_path
from decice.sim import scheduler_service
from decice.sim.agent.simnodes import expand, node_object
from decice.sim.binaries.resolve import BinarySet
from decice.sim.controlplane.loopback import ControlPlane, ControlPlaneInfo
from decice.spec_model import SimNodeGroup
from decice_scheduler.scores import GROUP_VERSION
from tests.integration.labsupport import ssh
from tests.integration.simsupport import require_sim
from tests.support import (
    pid_alive,
    pod_manifest,
    run_decice,
    run_playbook,
    sim_spec,
    wait_for,
)

pytestmark = [
    pytest.mark.scheduler,
    pytest.mark.own_control_plane(
        reason="the role's Deployment-mode test, in the lab group (its other tests use the "
        "lab nodes): the session's sim_control_plane would save a start only when the "
        "same worker also runs a module that uses it"
    ),
]


SPEC = sim_spec(
    "schedup",
    ("w", 3, 'cpu: "4", memory: 8Gi, pods: "110"'),
    ("g", 1, 'cpu: "8", memory: 16Gi, pods: "110", nvidia.com/gpu: "2"'),
)


def _json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout)


def _phase(record: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in record["phases"] if p["name"] == name)


# ------------------------------------------------------------------ placement scores
# scheduler.placement_scores on: the role's variables, the flags they make (the sim
# target's scheduler_service.placement_flags), and the objects they touch.
PLACEMENT_VARS = {
    "scheduler_placement_scores_enabled": True,
    "scheduler_placement_scores_name": "decice-test-score",
    "scheduler_placement_scores_interval": 5,
}
PLACEMENT_FLAGS = (
    "--placement-scores --placement-scores-namespace default "
    "--placement-scores-name decice-test-score --placement-scores-interval 5"
)
PLACEMENT_ROLE = "decice-scheduler-placement-scores"
MANAGED_BY = "app.kubernetes.io/managed-by"
SCORE_GROUP, SCORE_VERSION = GROUP_VERSION.split("/")


def _placement_crd(api: client.CoreV1Api) -> Any:
    """The AddOnPlacementScore CRD, or None."""
    ext = client.ApiextensionsV1Api(api.api_client)
    try:
        return ext.read_custom_resource_definition(scheduler_service.CRD_NAME)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _score(api: client.CoreV1Api, name: str = "decice-test-score") -> Any:
    """The AddOnPlacementScore default/<name> as a dict, or None."""
    custom = client.CustomObjectsApi(api.api_client)
    try:
        return custom.get_namespaced_custom_object(
            SCORE_GROUP, SCORE_VERSION, "default", "addonplacementscores", name
        )
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _http_code(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10):
            return 200
    except urllib.error.HTTPError as exc:
        return exc.code


def test_sim_up_schedules_then_down_and_reset_stop_it(tmp_path: Path) -> None:
    require_sim()
    (tmp_path / "decice.yaml").write_text(SPEC)
    try:
        record = _json(run_decice(tmp_path, "up", "--skip", "addons", "--json"))
        phase = _phase(record, "scheduler")
        assert phase["status"] == "ok", record
        status = _json(run_decice(tmp_path, "status", "--json"))
        sched = status["sim"]["scheduler"]
        assert sched["running"] and sched["ready"], sched
        pid = sched["pid"]
        assert pid_alive(pid)
        assert sched["scheduled"] >= 1  # the smoke pod
        assert sched["drift"] == 0
        assert sched["metrics_url"].startswith("http://127.0.0.1:")
        # /debug/* need the token of a 0600 file in the state dir (another local user reaches
        # 127.0.0.1 too); /metrics and the probes stay open
        token_file = scheduler_service.debug_token_file(tmp_path / ".decice")
        assert token_file.stat().st_mode & 0o777 == 0o600
        token = token_file.read_text().strip()
        assert _http_code(sched["metrics_url"] + "/debug/state") == 401
        wrong = {"Authorization": "Bearer " + "x" * 64}
        assert _http_code(sched["metrics_url"] + "/debug/state", wrong) == 403
        mine = {"Authorization": f"Bearer {token}"}
        assert _http_code(sched["metrics_url"] + "/debug/state", mine) == 200
        assert _http_code(sched["metrics_url"] + "/metrics") == 200
        node_names = {f"w-{i}" for i in range(3)} | {"g-0"}
        smoke_node = phase["note"].split(" bound to ")[1].split(",")[0]
        assert smoke_node in node_names, phase["note"]
        assert f"pid {pid}" in phase["note"]

        api = client.CoreV1Api(config.new_client_from_config(status["kubeconfig"]))
        assert not [
            p for p in api.list_namespaced_pod("default").items if p.metadata.name.endswith("smoke")
        ], "the smoke pod must be deleted"
        pod = pod_manifest(
            "gpu-job",
            scheduler="decice-scheduler",
            resources={"limits": {"nvidia.com/gpu": "1"}},
        )
        api.create_namespaced_pod("default", pod)

        def placed() -> Any:
            got = api.read_namespaced_pod("gpu-job", "default")
            return got if got.spec.node_name and got.status.phase == "Running" else None

        got = wait_for("decice-scheduler to place the pod", placed, timeout=60)
        assert got.spec.node_name == "g-0"  # the only node with a GPU

        # a second up keeps the same process (same settings) and smoke-tests it again
        again = _json(run_decice(tmp_path, "up", "--skip", "addons", "--json"))
        assert "kept running" in _phase(again, "scheduler")["note"]
        assert _json(run_decice(tmp_path, "status", "--json"))["sim"]["scheduler"]["pid"] == pid

        down = _json(run_decice(tmp_path, "down", "--json"))
        assert _phase(down, "scheduler")["status"] == "ok", down
        wait_for("the scheduler to exit", lambda: not pid_alive(pid), 20)
        after = _json(run_decice(tmp_path, "status", "--json"))["sim"]
        assert after["scheduler"]["running"] is False
        assert after["control_plane"]["running"]  # down leaves the cluster

        # up again, then reset: nothing of the sim may be left running
        _json(run_decice(tmp_path, "up", "--skip", "addons", "--json"))
        status = _json(run_decice(tmp_path, "status", "--json"))["sim"]
        pids = [status["scheduler"]["pid"], status["agent"]["status"]["pid"]]
        pids += [c["pid"] for c in status["control_plane"]["components"]]
        assert all(pid_alive(p) for p in pids)
    finally:
        reset = run_decice(tmp_path, "reset", "--yes", "--json")
    assert reset.returncode == 0, reset.stderr[-4000:]
    assert "scheduler" in _phase(json.loads(reset.stdout), "kubernetes")["note"]
    wait_for("every sim process to exit", lambda: not any(pid_alive(p) for p in pids), 30)
    assert not (tmp_path / ".decice" / "sim").exists()


def test_sim_scheduler_disabled_starts_nothing(tmp_path: Path) -> None:
    require_sim()
    (tmp_path / "decice.yaml").write_text(SPEC + "scheduler:\n  enabled: false\n")
    try:
        record = _json(run_decice(tmp_path, "up", "--skip", "addons", "--json"))
        assert _phase(record, "scheduler")["note"] == "disabled in the spec"
        status = _json(run_decice(tmp_path, "status", "--json"))["sim"]
        assert status["scheduler"] == {"running": False, "pid": None, "metrics_url": None}
        assert not (tmp_path / ".decice" / "sim" / "scheduler").exists()
    finally:
        reset = run_decice(tmp_path, "reset", "--yes", "--json")
    assert reset.returncode == 0, reset.stderr[-4000:]


# ------------------------------------------------------------------ the role on lab nodes
#
# The lab nodes are systemd containers; the API server of a sim control plane listens on
# this machine's loopback only. A relay makes it reachable from the nodes at the SAME
# address (https://127.0.0.1:<port>, which its certificate names): a forwarder on each
# node's loopback -> a forwarder on this machine's lab-network gateway address -> the API.

RELAY = """
import socket, sys, threading
def pump(a, b):
    try:
        while (data := a.recv(65536)):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
srv = socket.create_server((sys.argv[1], int(sys.argv[2])))
while True:
    c, _ = srv.accept()
    try:
        u = socket.create_connection((sys.argv[3], int(sys.argv[4])), timeout=10)
    except OSError:
        c.close()
        continue
    u.settimeout(None)
    for x, y in ((c, u), (u, c)):
        threading.Thread(target=pump, args=(x, y), daemon=True).start()
"""
RELAY_UNIT = "decice-test-apirelay"


class HostRelay:
    """A TCP relay on this machine (threads; closed by stop())."""

    def __init__(self, host: str, target: tuple[str, int]) -> None:
        self.server = socket.create_server((host, 0))
        self.port = int(self.server.getsockname()[1])
        self.target = target
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                conn.close()
                continue
            upstream.settimeout(None)
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (a, b):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        self._stop.set()
        self.server.close()


def _playbook(
    inventory: str, name: str, extravars: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    return run_playbook(inventory, name, "--tags", "scheduler", "-e", json.dumps(extravars))


def _ok(result: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """The localhost recap of a successful run."""
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-3000:]
    line = re.search(r"^localhost\s*:\s*(.*)$", result.stdout.split("PLAY RECAP")[-1], re.M)
    assert line, result.stdout[-3000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line.group(1))}


@pytest.fixture(scope="module")
def role_api(
    sim_binaries: BinarySet, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ControlPlaneInfo, client.CoreV1Api]]:
    """A control plane of this module's own with two Ready nodes (no kubelets, no scheduler)."""
    cp = ControlPlane(tmp_path_factory.mktemp("sched-role-cp"), sim_binaries, node_lifecycle=False)
    info = cp.start()
    try:
        api = client.CoreV1Api(config.new_client_from_config(str(info.kubeconfig)))
        group = SimNodeGroup(name_prefix="r", count=2, capacity={"cpu": "4", "memory": "8Gi"})
        for node in expand([group]):
            api.create_node(node_object(node, datetime.now(UTC)))
        yield info, api
    finally:
        cp.stop()


@pytest.fixture
def relayed_api(
    lab_nodes: lab.LabInfo, role_api: tuple[ControlPlaneInfo, client.CoreV1Api]
) -> Iterator[tuple[ControlPlaneInfo, client.CoreV1Api]]:
    """The API reachable from every lab node at its own address (see RELAY)."""
    info, _api = role_api
    api_port = int(info.server.rsplit(":", 1)[1])
    gateway = str(next(ipaddress.ip_network(lab_nodes.subnet).hosts()))
    relay = HostRelay(gateway, ("127.0.0.1", api_port))
    nodes = [n.name for n in lab_nodes.nodes]
    try:
        for node in nodes:
            ssh(lab_nodes, node, f"cat > /root/apirelay.py <<'EOF'\n{RELAY}\nEOF")
            ssh(
                lab_nodes,
                node,
                f"systemd-run --unit={RELAY_UNIT} python3 /root/apirelay.py "
                f"127.0.0.1 {api_port} {gateway} {relay.port}",
            )
        yield role_api
    finally:
        for node in nodes:
            ssh(
                lab_nodes,
                node,
                f"systemctl stop {RELAY_UNIT}; systemctl reset-failed {RELAY_UNIT}; "
                "rm -f /root/apirelay.py",
                check=False,
            )
        relay.stop()


def test_role_systemd_units_with_leader_election_on_lab_nodes(
    lab_nodes: lab.LabInfo,
    relayed_api: tuple[ControlPlaneInfo, client.CoreV1Api],
    tmp_path: Path,
) -> None:
    # no scheduler_wheelhouse: the controller builds one, the nodes install --no-index
    info, api = relayed_api
    hosts = [n.name for n in lab_nodes.nodes]
    state = tmp_path / "state"
    extravars = {
        "decice_state_dir": str(state),
        "decice_kubeconfig": str(info.kubeconfig),
        "scheduler_hosts": hosts,
        "scheduler_uninstall_hosts": hosts,
        "scheduler_replicas": 2,
        "scheduler_copy_kubeconfig": True,
        **PLACEMENT_VARS,
    }
    coord = client.CoordinationV1Api(api.api_client)
    # no baseline yet: the role refuses before it changes any host
    refused = _playbook(lab_nodes.inventory, "up", extravars)
    assert refused.returncode != 0
    assert f"scheduler: refused - no baseline for {', '.join(hosts)}" in refused.stdout
    assert ssh(lab_nodes, hosts[0], "ls /etc/systemd/system | grep decice || true") == ""
    for host in hosts:
        baseline_path(state, host).parent.mkdir(parents=True, exist_ok=True)
        baseline_path(state, host).write_text("{}")
    try:
        first = _playbook(lab_nodes.inventory, "up", extravars)
        recap = _ok(first)
        assert recap["changed"] > 0
        assert re.search(r"decice-scheduler placed the smoke pod on r-[01]", first.stdout)
        for host in hosts:
            assert ssh(lab_nodes, host, "systemctl is-active decice-scheduler") == "active"
            unit = ssh(lab_nodes, host, "cat /etc/systemd/system/decice-scheduler.service")
            assert "--leader-elect" in unit
            assert "--kubeconfig /opt/decice-scheduler/kubeconfig" in unit
            assert PLACEMENT_FLAGS in unit
            mode = ssh(lab_nodes, host, "stat -c %a /opt/decice-scheduler/kubeconfig")
            assert mode == "600"
            # the debug endpoints' token: a 0600 file passed by path, the server on loopback
            assert "--metrics-host 127.0.0.1" in unit
            assert "--debug-token-file /opt/decice-scheduler/debug-token" in unit
            token = ssh(lab_nodes, host, "cat /opt/decice-scheduler/debug-token")
            assert len(token) == 43 and token not in unit
            mode = ssh(lab_nodes, host, "stat -c %a:%U /opt/decice-scheduler/debug-token")
            assert mode == "600:root"
            # the wheel went in without the CLI's dependencies
            pkgs = ssh(lab_nodes, host, "/opt/decice-scheduler/venv/bin/pip list --format=json")
            names = {p["name"].lower().replace("_", "-") for p in json.loads(pkgs)}
            assert {"decice", "httpx", "prometheus-client", "pyyaml", "orjson"} <= names
            assert not names & {"ansible", "ansible-core", "kubernetes", "typer"}
        lease = coord.read_namespaced_lease("decice-scheduler", "kube-system")
        assert lease.spec.holder_identity
        # the role installed the CRD (labelled as decice's); the leader publishes its score
        crd = _placement_crd(api)
        assert crd is not None and crd.metadata.labels == {MANAGED_BY: "decice"}
        score = wait_for(
            "the leader to publish its AddOnPlacementScore",
            lambda: (_score(api) or {}).get("status", {}).get("scores"),
            timeout=60,
        )
        assert {s["name"] for s in score} >= {"cpuNodeAvailable", "memClusterAvailable"}
        assert not [
            p for p in api.list_namespaced_pod("default").items if p.metadata.name.endswith("smoke")
        ]

        rerun = _playbook(lab_nodes.inventory, "up", extravars)
        changed = [
            task.split("]", 1)[0]
            for task in rerun.stdout.split("\nTASK [")[1:]
            if "\nchanged: " in task
        ]
        # (the decice wheel is built from the working tree: edited between the runs, it
        # is installed again)
        assert _ok(rerun)["changed"] == 0, f"a second run must change nothing: {changed}"

        pod = pod_manifest("via-lab", scheduler="decice-scheduler")
        api.create_namespaced_pod("default", pod)
        wait_for(
            "the leader on a lab node to bind the pod",
            lambda: api.read_namespaced_pod("via-lab", "default").spec.node_name,
            timeout=60,
        )
        api.delete_namespaced_pod("via-lab", "default", grace_period_seconds=0)
    finally:
        down = _playbook(lab_nodes.inventory, "down", extravars)
    _ok(down)
    for host in hosts:
        assert ssh(lab_nodes, host, "test -e /opt/decice-scheduler && echo left || true") == ""
        assert ssh(lab_nodes, host, "ls /etc/systemd/system | grep decice || true") == ""
        units = ssh(lab_nodes, host, "systemctl list-units --all --plain --no-legend")
        assert "decice-scheduler" not in units
        assert ssh(lab_nodes, host, "pgrep -f '[d]ecice-scheduler' || true") == ""
    leases = coord.list_namespaced_lease("kube-system").items
    assert "decice-scheduler" not in {lease.metadata.name for lease in leases}
    assert _placement_crd(api) is None  # decice installed it: removed


TOKEN_SECRET = "decice-scheduler-debug-token"


def _secret_token(api: client.CoreV1Api) -> str:
    data = api.read_namespaced_secret(TOKEN_SECRET, "kube-system").data
    return base64.b64decode(data["token"]).decode()


def test_role_deployment_mode_objects_and_uninstall(
    role_api: tuple[ControlPlaneInfo, client.CoreV1Api], tmp_path: Path
) -> None:
    """scheduler_image set: the objects are accepted by a real API server and removed again.
    No kubelet runs here, so the Deployment never becomes Available: readiness and the
    smoke pod are off."""
    info, api = role_api
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all: {}\n")
    extravars = {
        "decice_kubeconfig": str(info.kubeconfig),
        "scheduler_image": "registry.example/decice:0.1.0",
        "scheduler_wait_ready": False,
        "scheduler_smoke": False,
        "scheduler_profile": {"scores": [{"name": "LeastAllocated", "weight": 1}]},
    }
    rbac = client.RbacAuthorizationV1Api(api.api_client)
    apps = client.AppsV1Api(api.api_client)
    try:
        _ok(_playbook(str(inventory), "up", extravars))
        deploy = apps.read_namespaced_deployment("decice-scheduler", "kube-system")
        assert deploy.spec.strategy.type == "Recreate"  # one replica, no leader election
        container = deploy.spec.template.spec.containers[0]
        assert container.image == "registry.example/decice:0.1.0"
        assert container.args[:2] == ["--kubeconfig", "/etc/decice-scheduler/kubeconfig"]
        assert "--config" in container.args and "--leader-elect" not in container.args
        assert container.security_context.read_only_root_filesystem
        # every address of the pod's network (the kubelet probes the pod IP), with the
        # token of a generated Secret in the environment, never in the args
        host_at = container.args.index("--metrics-host")
        assert container.args[host_at + 1] == "0.0.0.0"
        assert container.readiness_probe.http_get.path == "/readyz"
        (env,) = container.env
        assert env.name == "DECICE_SCHEDULER_DEBUG_TOKEN"
        assert env.value_from.secret_key_ref.name == TOKEN_SECRET
        assert env.value_from.secret_key_ref.key == "token"
        token = _secret_token(api)
        assert len(token) == 43 and token.isalnum()
        assert token not in json.dumps(api.api_client.sanitize_for_serialization(deploy))
        version = deploy.spec.template.metadata.annotations["decice.io/debug-token-version"]
        assert (
            version
            == api.read_namespaced_secret(TOKEN_SECRET, "kube-system").metadata.resource_version
        )
        rules = {
            (tuple(r.api_groups), tuple(r.resources), tuple(sorted(r.verbs)))
            for r in rbac.read_cluster_role("decice-scheduler").rules
        }
        assert rules == {
            (("",), ("pods", "nodes"), ("get", "list", "watch")),
            (("",), ("pods/binding",), ("create",)),
            (("",), ("events",), ("create", "patch")),
            (("events.k8s.io",), ("events",), ("create", "patch")),
            (("scheduling.x-k8s.io",), ("podgroups",), ("get", "list", "watch")),
        }
        role = rbac.read_namespaced_role("decice-scheduler-leader-election", "kube-system")
        assert {tuple(sorted(r.verbs)) for r in role.rules} == {("create",), ("get", "update")}
        cm = api.read_namespaced_config_map("decice-scheduler", "kube-system")
        assert "LeastAllocated" in cm.data["profile.yaml"]
        # placement scores off (the default): no flags, no Role for them, no CRD
        assert not [a for a in container.args if a.startswith("--placement-scores")]
        assert PLACEMENT_ROLE not in {
            r.metadata.name for r in rbac.list_namespaced_role("default").items
        }
        assert _placement_crd(api) is None
        assert "tokenFile" in cm.data["kubeconfig"]
        assert _ok(_playbook(str(inventory), "up", extravars))["changed"] == 0
        assert _secret_token(api) == token  # generated once, kept

        given = {**extravars, "scheduler_debug_token": "given-debug-token-0123456789"}
        run = _playbook(str(inventory), "up", given)
        assert _ok(run)["changed"] > 0
        assert "given-debug-token-0123456789" not in run.stdout + run.stderr
        assert _secret_token(api) == "given-debug-token-0123456789"
        deploy = apps.read_namespaced_deployment("decice-scheduler", "kube-system")
        renewed = deploy.spec.template.metadata.annotations["decice.io/debug-token-version"]
        assert renewed != version  # the pods restart with the new token
    finally:
        down = _playbook(str(inventory), "down", extravars)
    _ok(down)
    assert TOKEN_SECRET not in {
        s.metadata.name for s in api.list_namespaced_secret("kube-system").items
    }
    assert not [
        d
        for d in apps.list_namespaced_deployment("kube-system").items
        if d.metadata.name == "decice-scheduler"
    ]
    assert "decice-scheduler" not in {r.metadata.name for r in rbac.list_cluster_role().items}
    assert "decice-scheduler" not in {
        b.metadata.name for b in rbac.list_cluster_role_binding().items
    }
    assert "decice-scheduler" not in {
        s.metadata.name for s in api.list_namespaced_service_account("kube-system").items
    }
    assert "decice-scheduler" not in {
        c.metadata.name for c in api.list_namespaced_config_map("kube-system").items
    }


def _deployment_extravars(info: ControlPlaneInfo, **more: Any) -> dict[str, Any]:
    """Deployment mode on role_api: no kubelet there, so no readiness and no smoke pod."""
    return {
        "decice_kubeconfig": str(info.kubeconfig),
        "scheduler_image": "registry.example/decice:0.1.0",
        "scheduler_wait_ready": False,
        "scheduler_smoke": False,
        **more,
    }


def _placement_rules(rbac: client.RbacAuthorizationV1Api) -> set[tuple[Any, ...]]:
    role = rbac.read_namespaced_role(PLACEMENT_ROLE, "default")
    return {
        (tuple(r.api_groups), tuple(r.resources), tuple(r.resource_names or ()), tuple(r.verbs))
        for r in role.rules
    }


def _role_names(rbac: client.RbacAuthorizationV1Api) -> set[str]:
    return {r.metadata.name for r in rbac.list_namespaced_role("default").items}


def test_role_deployment_mode_placement_scores_crd_rbac_and_uninstall(
    role_api: tuple[ControlPlaneInfo, client.CoreV1Api], tmp_path: Path
) -> None:
    """Placement scores on: the role installs the CRD (labelled as decice's), passes the
    flags and grants a Role in the score's namespace; a second run changes nothing;
    turned off, the flags and the Role go; uninstall removes the CRD decice installed."""
    info, api = role_api
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all: {}\n")
    extravars = _deployment_extravars(info, **PLACEMENT_VARS)
    off = {**extravars, "scheduler_placement_scores_enabled": False}
    rbac = client.RbacAuthorizationV1Api(api.api_client)
    apps = client.AppsV1Api(api.api_client)
    assert _placement_crd(api) is None
    try:
        _ok(_playbook(str(inventory), "up", extravars))
        crd = _placement_crd(api)
        assert crd is not None and crd.metadata.labels == {MANAGED_BY: "decice"}
        assert any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)
        deploy = apps.read_namespaced_deployment("decice-scheduler", "kube-system")
        assert PLACEMENT_FLAGS in " ".join(deploy.spec.template.spec.containers[0].args)
        group = (SCORE_GROUP,)
        assert _placement_rules(rbac) == {
            (group, ("addonplacementscores",), (), ("create",)),
            (group, ("addonplacementscores",), ("decice-test-score",), ("get",)),
            (group, ("addonplacementscores/status",), ("decice-test-score",), ("patch",)),
        }
        binding = rbac.read_namespaced_role_binding(PLACEMENT_ROLE, "default")
        assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [
            ("ServiceAccount", "decice-scheduler", "kube-system")
        ]
        assert _ok(_playbook(str(inventory), "up", extravars))["changed"] == 0

        _ok(_playbook(str(inventory), "up", off))
        deploy = apps.read_namespaced_deployment("decice-scheduler", "kube-system")
        assert "--placement-scores" not in deploy.spec.template.spec.containers[0].args
        assert PLACEMENT_ROLE not in _role_names(rbac)
        assert _placement_crd(api) is not None  # kept until uninstall
    finally:
        # uninstall with the scores off: what decice installed goes all the same
        down = _playbook(str(inventory), "down", off)
    _ok(down)
    assert _placement_crd(api) is None
    assert PLACEMENT_ROLE not in _role_names(rbac)


def test_role_leaves_a_placement_crd_it_did_not_install(
    role_api: tuple[ControlPlaneInfo, client.CoreV1Api], tmp_path: Path
) -> None:
    """A CRD without decice's label (an OCM hub's) is neither replaced by up nor removed by
    down; down removes only the AddOnPlacementScore labelled as the scheduler's."""
    info, api = role_api
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all: {}\n")
    extravars = _deployment_extravars(info, **PLACEMENT_VARS)
    ext = client.ApiextensionsV1Api(api.api_client)
    custom = client.CustomObjectsApi(api.api_client)
    theirs = scheduler_service.placement_crd()
    del theirs["metadata"]["labels"]
    uid = ext.create_custom_resource_definition(theirs).metadata.uid
    try:
        wait_for(
            "the CRD to be Established",
            lambda: any(
                c.type == "Established" and c.status == "True"
                for c in (_placement_crd(api).status.conditions or [])
            ),
        )
        for name, labels in (
            ("decice-test-score", {MANAGED_BY: "decice-scheduler"}),
            ("other", {}),
        ):
            body = {
                "apiVersion": GROUP_VERSION,
                "kind": "AddOnPlacementScore",
                "metadata": {"name": name, "namespace": "default", "labels": labels},
            }
            custom.create_namespaced_custom_object(
                SCORE_GROUP, SCORE_VERSION, "default", "addonplacementscores", body
            )
        try:
            _ok(_playbook(str(inventory), "up", extravars))
            crd = _placement_crd(api)
            assert crd.metadata.uid == uid and not crd.metadata.labels  # not replaced
        finally:
            down = _playbook(str(inventory), "down", extravars)
        _ok(down)
        crd = _placement_crd(api)
        assert crd is not None and crd.metadata.uid == uid  # left alone
        assert _score(api) is None  # the scheduler's own score went
        assert _score(api, "other") is not None  # not the scheduler's: kept
    finally:
        with contextlib.suppress(client.ApiException):
            ext.delete_custom_resource_definition(scheduler_service.CRD_NAME)
        wait_for("the test's CRD to be deleted", lambda: _placement_crd(api) is None)
