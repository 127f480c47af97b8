"""The sim control plane: real etcd + kube-apiserver + kube-controller-manager on loopback.

The first run builds kube-apiserver & co. from Debian's kubernetes source (about 4 min,
cached in the decice user cache); later runs resolve the cache in well under a second.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import stat
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from decice.errors import DeciceError, InputError
from decice.sim.binaries.resolve import BINARIES, BinarySet, ResolvedBinary, Source
from decice.sim.controlplane import loopback
from decice.sim.controlplane.loopback import (
    ControlPlane,
    ControlPlaneError,
    ControlPlaneInfo,
    remove_data_dir,
)
from decice.sim.controlplane.pki import Pair, Pki
from decice.sim.procs import ProcessRecord, is_alive, spawn, terminate
from tests.integration.simsupport import create_namespace
from tests.support import pid_alive, run_decice, sim_spec, wait_for

pytestmark = pytest.mark.own_control_plane(
    reason="tests the control plane itself: start, stop, crash, option changes, versions"
)

# controllers of a fresh control plane take their time (seconds to wait for them)
SLOW = 90.0

# ---------------------------------------------------------------- helpers


def fake_node(name: str) -> client.V1Node:
    capacity = {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "4"}
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels={"decice.io/sim": "true"}),
        status=client.V1NodeStatus(
            capacity=capacity,
            allocatable=capacity,
            conditions=[
                client.V1NodeCondition(
                    type="Ready", status="True", reason="KubeletReady", message="simulated"
                )
            ],
        ),
    )


def deployment(name: str, replicas: int) -> client.V1Deployment:
    labels = {"app": name}
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    containers=[
                        client.V1Container(
                            name="main",
                            image="registry.invalid/none:1",
                            resources=client.V1ResourceRequirements(requests={"cpu": "100m"}),
                        )
                    ]
                ),
            ),
        ),
    )


# ---------------------------------------------------------------- tests


@pytest.mark.sim
def test_lifecycle_namespace_node_deployment_stop_remove(
    sim_binaries: BinarySet, tmp_path: Path
) -> None:
    data = tmp_path / "cp"
    cp = ControlPlane(data, sim_binaries, node_lifecycle=True)
    info = cp.start()
    try:
        assert stat.S_IMODE(info.kubeconfig.stat().st_mode) == 0o600
        assert info.server.startswith("https://127.0.0.1:")
        assert set(info.processes) == {"etcd", "kube-apiserver", "kube-controller-manager"}
        assert cp.status().running
        again = cp.start()  # idempotent: same processes
        assert {n: r.pid for n, r in again.processes.items()} == {
            n: r.pid for n, r in info.processes.items()
        }
        with pytest.raises(ControlPlaneError, match="still running"):
            remove_data_dir(data)

        api = config.new_client_from_config(config_file=str(info.kubeconfig))
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        # service-account + token controllers (controller-manager with the SA key) at work
        create_namespace(core, "exp1", timeout=SLOW)

        core.create_node(fake_node("sim-node-1"))
        node = core.read_node("sim-node-1")
        assert node.status.capacity["nvidia.com/gpu"] == "4"

        # node-lifecycle on: the not-ready taint added at admission is lifted for a Ready node
        def untainted() -> bool:
            taints = core.read_node("sim-node-1").spec.taints or []
            return not any(t.key == "node.kubernetes.io/not-ready" for t in taints)

        wait_for("node-lifecycle controller to lift the not-ready taint", untainted, SLOW)

        apps.create_namespaced_deployment("exp1", deployment("web", 3))
        rs = wait_for(
            "a ReplicaSet of deployment web",
            lambda: apps.list_namespaced_replica_set("exp1", label_selector="app=web").items,
            SLOW,
        )[0]
        assert rs.metadata.owner_references[0].kind == "Deployment"
        pods = wait_for(
            "3 pods of web",
            lambda: (lambda items: items if len(items) == 3 else None)(
                core.list_namespaced_pod("exp1", label_selector="app=web").items
            ),
            SLOW,
        )
        assert all(p.metadata.owner_references[0].name == rs.metadata.name for p in pods)
        assert all(p.status.phase == "Pending" and not p.spec.node_name for p in pods)

        # garbage collector: deleting the Deployment removes its ReplicaSet and Pods
        apps.delete_namespaced_deployment("web", "exp1", propagation_policy="Background")
        wait_for(
            "GC of the ReplicaSet",
            lambda: not apps.list_namespaced_replica_set("exp1", label_selector="app=web").items,
            SLOW,
        )
    finally:
        pids = [r.pid for r in cp.info().processes.values()] if cp.info() else []
        cp.stop()
    assert pids and not [p for p in pids if pid_alive(p)]
    status = cp.status()
    assert not status.running and not status.components
    cp.stop()  # idempotent
    remove_data_dir(data)
    assert not data.exists()


@pytest.mark.sim
def test_stock_scheduler_binds_without_controller_manager(
    sim_binaries: BinarySet, tmp_path: Path
) -> None:
    cp = ControlPlane(tmp_path / "sched", sim_binaries, controller_manager=False, scheduler=True)
    info = cp.start()
    try:
        assert set(info.processes) == {"etcd", "kube-apiserver", "kube-scheduler"}
        core = client.CoreV1Api(config.new_client_from_config(config_file=str(info.kubeconfig)))
        core.create_node(fake_node("gpu-1"))
        # no controller-manager: TaintNodesByCondition is off, so the node is schedulable
        assert not core.read_node("gpu-1").spec.taints
        pod = client.V1Pod(
            metadata=client.V1ObjectMeta(name="p1"),
            spec=client.V1PodSpec(
                containers=[
                    client.V1Container(
                        name="main",
                        image="registry.invalid/none:1",
                        resources=client.V1ResourceRequirements(
                            requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"}
                        ),
                    )
                ]
            ),
        )
        core.create_namespaced_pod("default", pod)  # ServiceAccount admission is off
        wait_for(
            "kube-scheduler to bind p1",
            lambda: core.read_namespaced_pod("p1", "default").spec.node_name == "gpu-1",
            timeout=60,
        )
    finally:
        cp.stop()
    assert not [r.pid for r in info.processes.values() if pid_alive(r.pid)]
    remove_data_dir(tmp_path / "sched")


@pytest.mark.sim
def test_start_after_a_crash_or_option_change_restarts_and_keeps_the_data(
    sim_binaries: BinarySet, tmp_path: Path
) -> None:
    cp = ControlPlane(tmp_path / "crash", sim_binaries, controller_manager=False)
    first = cp.start()
    try:
        core = client.CoreV1Api(config.new_client_from_config(config_file=str(first.kubeconfig)))
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="kept")))
        os.kill(first.processes["kube-apiserver"].pid, signal.SIGKILL)
        wait_for("the killed apiserver to be seen as down", lambda: not cp.status().running, SLOW)
        second = cp.start()
        assert second.processes["kube-apiserver"].pid != first.processes["kube-apiserver"].pid
        assert second.server == first.server  # ports reused while free
        assert not pid_alive(first.processes["etcd"].pid)  # leftovers were stopped
        core = client.CoreV1Api(config.new_client_from_config(config_file=str(second.kubeconfig)))
        assert core.read_namespace("kept").metadata.name == "kept"
        # other options for the same data dir: restarted with them, not silently kept
        cp = ControlPlane(
            tmp_path / "crash", sim_binaries, controller_manager=True, node_lifecycle=False
        )
        third = cp.start()
        assert "kube-controller-manager" in third.processes
        assert third.processes["kube-apiserver"].pid != second.processes["kube-apiserver"].pid
        assert cp.start().processes == third.processes
    finally:
        cp.stop()
    remove_data_dir(tmp_path / "crash")


@pytest.mark.sim
def test_start_failure_reports_log_tail_and_cleans_up(
    sim_binaries: BinarySet, tmp_path: Path
) -> None:
    cp = ControlPlane(
        tmp_path / "bad",
        sim_binaries,
        controller_manager=False,
        extra_args={"kube-apiserver": ["--no-such-flag=1"]},
        startup_timeout=30,
    )
    with pytest.raises(ControlPlaneError, match=r"(?s)kube-apiserver exited.*no-such-flag"):
        cp.start()
    assert not cp.status().components  # etcd, started first, was stopped again
    remove_data_dir(tmp_path / "bad")


@pytest.mark.sim
def test_a_port_taken_after_it_was_picked_starts_again_on_fresh_ports(
    sim_binaries: BinarySet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port picked free and taken by another process before etcd bound it (a race with
    any process on the machine): the start goes on with fresh ports, not a failed run."""
    picked: list[dict[str, int]] = []
    real_pick = loopback._pick_ports

    def pick(previous: Any) -> dict[str, int]:
        ports = real_pick(previous)
        if not picked:
            ports["etcd"] = taker.getsockname()[1]  # held below: etcd cannot bind it
        picked.append(ports)
        return ports

    monkeypatch.setattr(loopback, "_pick_ports", pick)
    cp = ControlPlane(tmp_path / "race", sim_binaries, controller_manager=False, scheduler=False)
    with socket.socket() as taker:
        taker.bind(("127.0.0.1", 0))
        taker.listen()
        try:
            info = cp.start()
            assert len(picked) == 2
            assert info.server == f"https://127.0.0.1:{picked[1]['apiserver']}"
            assert (
                client.CoreV1Api(config.new_client_from_config(config_file=str(info.kubeconfig)))
                .list_namespace()
                .items
            )
        finally:
            cp.stop()
    assert "address already in use" in (tmp_path / "race" / "logs" / "etcd.log").read_text()
    remove_data_dir(tmp_path / "race")


@pytest.mark.sim
def test_session_fixture_serves_the_api(sim_api: client.ApiClient) -> None:
    names = {ns.metadata.name for ns in client.CoreV1Api(sim_api).list_namespace().items}
    assert {"default", "kube-system"} <= names


@pytest.mark.unit
def test_pid_reuse_guard_never_signals_a_stranger(tmp_path: Path) -> None:
    rec = spawn("sleeper", ["/bin/sleep", "30"], tmp_path / "sleep.log", cwd=tmp_path)
    assert is_alive(rec)
    # same pid, different start time: a recycled pid must not be signalled
    stranger = ProcessRecord(rec.name, rec.pid, rec.exe, rec.start_ticks + 1, rec.log)
    assert not is_alive(stranger)
    assert terminate(stranger) is False
    assert is_alive(rec)
    other_exe = ProcessRecord(rec.name, rec.pid, "/bin/true", rec.start_ticks, rec.log)
    assert terminate(other_exe) is False and is_alive(rec)
    assert terminate(rec, timeout=5) is True
    assert not pid_alive(rec.pid)


@pytest.mark.unit
def test_remove_refuses_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep")
    with pytest.raises(DeciceError, match="not a decice sim data directory"):
        remove_data_dir(tmp_path)
    assert (tmp_path / "precious.txt").exists()


def fake_set(version: str = "v1.20.2") -> BinarySet:
    return BinarySet(
        {n: ResolvedBinary(n, Path(f"/opt/k8s/{n}"), version, Source.EXPLICIT) for n in BINARIES}
    )


@pytest.mark.unit
@pytest.mark.parametrize(
    ("kcm", "lifecycle", "disabled"),
    [
        (True, True, []),
        (True, False, ["TaintNodesByCondition"]),
        (False, True, ["TaintNodesByCondition", "ServiceAccount"]),
    ],
)
def test_admission_follows_controller_manager_and_node_lifecycle(
    tmp_path: Path, kcm: bool, lifecycle: bool, disabled: list[str]
) -> None:
    cp = ControlPlane(tmp_path, fake_set(), controller_manager=kcm, node_lifecycle=lifecycle)
    assert cp.admission_plugins()[1] == disabled
    assert cp.components[-1] == ("kube-controller-manager" if kcm else "kube-apiserver")


@pytest.mark.unit
def test_version_dependent_flags(tmp_path: Path) -> None:
    ports = dict.fromkeys(("etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler"), 1)
    pki = Pki(tmp_path / "pki")
    old = ControlPlane(tmp_path, fake_set("v1.20.2"), node_lifecycle=False)
    assert "--insecure-port=0" in old._apiserver_args(pki, ports)
    kcm = old._kcm_args(pki, ports, tmp_path / "kc")
    assert "--port=0" in kcm
    assert "--controllers=*,bootstrapsigner,tokencleaner,-nodelifecycle" in kcm
    new = ControlPlane(tmp_path, fake_set("v1.32.9"), scheduler=True)
    assert "--insecure-port=0" not in new._apiserver_args(pki, ports)
    assert "--port=0" not in new._scheduler_args(ports, tmp_path / "kc")


@pytest.mark.unit
def test_missing_binaries_and_bad_extra_args_are_input_errors(tmp_path: Path) -> None:
    partial = BinarySet(
        {
            n: ResolvedBinary(n, Path(n), "v1.20.2", Source.EXPLICIT)
            for n in BINARIES
            if n != "kube-scheduler"
        }
    )
    with pytest.raises(InputError, match="kube-scheduler"):
        ControlPlane(tmp_path, partial, scheduler=True)
    with pytest.raises(InputError, match="kubelet"):
        ControlPlane(tmp_path, fake_set(), extra_args={"kubelet": ["-v=2"]})


@pytest.mark.sim
def test_custom_resources_work(
    sim_api: client.ApiClient, sim_control_plane: ControlPlaneInfo
) -> None:
    """Go >= 1.18 with the vendored reflect2 v1.0.1 crashes the apiserver on the first
    custom resource; the build swaps in reflect2 1.0.2. This proves the swap."""
    ext = client.ApiextensionsV1Api(sim_api)
    ext.create_custom_resource_definition(
        client.V1CustomResourceDefinition(
            metadata=client.V1ObjectMeta(name="widgets.test.decice.io"),
            spec=client.V1CustomResourceDefinitionSpec(
                group="test.decice.io",
                scope="Namespaced",
                names=client.V1CustomResourceDefinitionNames(
                    plural="widgets", singular="widget", kind="Widget"
                ),
                versions=[
                    client.V1CustomResourceDefinitionVersion(
                        name="v1",
                        served=True,
                        storage=True,
                        schema=client.V1CustomResourceValidation(
                            open_apiv3_schema=client.V1JSONSchemaProps(
                                type="object", x_kubernetes_preserve_unknown_fields=True
                            )
                        ),
                    )
                ],
            ),
        )
    )

    def established() -> bool:
        crd = ext.read_custom_resource_definition("widgets.test.decice.io")
        return any(
            c.type == "Established" and c.status == "True" for c in (crd.status.conditions or [])
        )

    wait_for("CRD established", established, timeout=30)
    objs = client.CustomObjectsApi(sim_api)
    body = {
        "apiVersion": "test.decice.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"labels": {"a": "b"}, "n": 3},
    }
    wait_for("the Widget to be created", lambda: _try_create(objs, body), timeout=30)
    got = objs.list_namespaced_custom_object("test.decice.io", "v1", "default", "widgets")
    assert [i["spec"]["labels"] for i in got["items"]] == [{"a": "b"}]
    assert is_alive(sim_control_plane.processes["kube-apiserver"])


def _try_create(objs: client.CustomObjectsApi, body: dict[str, Any]) -> bool:
    try:
        objs.create_namespaced_custom_object("test.decice.io", "v1", "default", "widgets", body)
    except client.ApiException as exc:
        if exc.status == 404:  # the new API may take a moment to be served
            return False
        raise
    return True


# ---------------------------------------------------------------- hardening


def _status(url: str, ca: Path | None = None, cert: Pair | None = None) -> int:
    """HTTP status of a GET (0: no HTTP answer, e.g. the TLS handshake was refused)."""
    ctx = ssl.create_default_context(cafile=str(ca)) if ca else None
    if ctx is not None and cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    try:
        with urllib.request.urlopen(url, timeout=5, context=ctx) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return 0


def _listeners(pids: Iterable[int]) -> set[str]:
    """``address:port`` of every TCP socket the processes listen on (IPv6 as ``[v6]``)."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = str(fd.readlink())
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] != "0A" or cols[9] not in inodes:  # 0A: LISTEN
                continue
            addr, port = cols[1].split(":")
            host = ".".join(str(b) for b in bytes.fromhex(addr)[::-1]) if table == "tcp" else "[v6]"
            found.add(f"{host}:{int(port, 16)}")
    return found


def _loose_modes(root: Path, only: str = "") -> list[str]:
    """Directories not 0700 and files readable by others than the owner, under ``root``."""
    bad = []
    for path in [root, *root.rglob("*")]:
        if path.is_symlink() or (only and only not in path.name and not path.is_dir()):
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        if (path.is_dir() and mode != 0o700) or (not path.is_dir() and mode & 0o077):
            bad.append(f"{path.relative_to(root)} {mode:o}")
    return bad


@pytest.mark.sim
def test_no_anonymous_api_etcd_mtls_loopback_and_private_files(
    sim_control_plane: ControlPlaneInfo,
) -> None:
    info = sim_control_plane
    pki = Pki(info.data_dir / "pki")
    # the apiserver: no anonymous user at all (401), not "system:anonymous is forbidden"
    for path in ("/version", "/readyz", "/api/v1/namespaces"):
        assert _status(info.server + path, info.ca_cert) == 401, path
    assert _status(info.server + "/readyz", info.ca_cert, pki.pair("admin")) == 200

    # etcd's client URL: a certificate of etcd's own CA or nothing
    etcd = info.etcd_endpoint + "/health"
    assert _status(etcd, pki.etcd_ca.cert, pki.pair("etcd-client")) == 200
    assert _status(etcd, pki.etcd_ca.cert) == 0  # no client certificate
    assert _status(etcd, pki.etcd_ca.cert, pki.pair("admin")) == 0  # the cluster CA's
    # its peer URL: TLS too, with peer client-certificate auth
    peer = f"https://127.0.0.1:{info.ports['etcd-peer']}/members"
    assert _status(peer, pki.etcd_ca.cert, pki.pair("etcd-peer")) == 200
    assert _status(peer, pki.etcd_ca.cert) == 0
    assert _status(peer.replace("https:", "http:")) != 200

    # every listening socket of every component is on 127.0.0.1
    listening = _listeners(r.pid for r in info.processes.values())
    assert {f"127.0.0.1:{info.ports[n]}" for n in ("etcd", "etcd-peer", "apiserver")} <= listening
    assert {a for a in listening if not a.startswith("127.0.0.1:")} == set()

    # keys, kubeconfigs, logs, the state file: 0600; every directory 0700
    assert _loose_modes(info.data_dir) == []


@pytest.mark.sim
def test_cli_up_writes_private_state_and_replaces_a_planted_kubeconfig_symlink(
    tmp_path: Path,
) -> None:
    work = tmp_path / "w"
    (work / ".decice").mkdir(parents=True, mode=0o700)
    spec = sim_spec("hardened", ("w", 2, 'cpu: "4", memory: 8Gi, pods: "110"'))
    (work / "decice.yaml").write_text(spec)
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    victim.chmod(0o644)
    kubeconfig = work / ".decice" / "kubeconfig"
    kubeconfig.symlink_to(victim)
    try:
        up = run_decice(work, "up", "--only", "kubernetes")
        assert up.returncode == 0, up.stdout + up.stderr
        assert victim.read_text() == "untouched\n" and stat.S_IMODE(victim.stat().st_mode) == 0o644
        assert not kubeconfig.is_symlink() and stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
        assert "client-key-data" in kubeconfig.read_text()
        sim = work / ".decice" / "sim"
        # the control plane's files and every log, key, kubeconfig or record of the sim
        assert _loose_modes(sim / "control-plane") == []
        for kind in (".log", ".key", "kubeconfig", "state.json", "process.json", "status.json"):
            assert _loose_modes(sim, only=kind) == [], kind
    finally:
        reset = run_decice(work, "reset", "--yes")
    assert reset.returncode == 0, reset.stdout + reset.stderr
