"""The sim node agent as virtual kubelet of an interLink-backed node, against the session
control plane (real kube-apiserver): pods bound to the node go through a plugin's HTTP
API (/create once, /status, /delete, /getLogs) and ``kubectl logs`` reaches the plugin
through the apiserver and the agent's kubelet endpoint.

``test_fake_plugin_*``: a small stand-in plugin in this process (the interLink 0.6.2 API
with a bearer token; jobs are timers). ``test_real_plugin_on_the_slurm_lab``: the real
``decice-interlink-slurm`` on a lab node, as the lab's user, against the lab's SLURM, in
job mode and in pilot mode (the same agent, unchanged).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from decice import lab
from decice.sim.controlplane.loopback import ControlPlaneInfo
from tests.integration.labsupport import copy_plugin
from tests.integration.simsupport import create_namespace, start_agent, stop_process
from tests.support import wait_for

NODE = "vkhpc-0"
GROUPS = [
    {
        "name_prefix": "vkhpc",
        "count": 1,
        "capacity": {"cpu": "1024", "memory": "4Ti", "pods": "1000"},
        "labels": {"type": "virtual-kubelet"},
        "taints": [{"key": "virtual-node.interlink/no-schedule", "effect": "NoSchedule"}],
    }
]
TOKEN = "s3cret-token-for-the-test"
LOG_LINES = [f"line {i}" for i in range(1, 6)]


# ---------------------------------------------------------------- the stand-in plugin


@dataclass
class FakeJob:
    uid: str
    name: str
    namespace: str
    jid: str
    seconds: float
    exit_code: int
    submitted: float = field(default_factory=time.monotonic)
    cancelled: bool = False


class FakePlugin:
    """interLink's plugin API over HTTP on loopback; a job runs ``fake/seconds`` (1 s
    queued first) and exits ``fake/exit``. A pod without limits is refused (422)."""

    def __init__(self) -> None:
        self.jobs: dict[str, FakeJob] = {}
        self.creates: list[str] = []
        self.deletes: list[str] = []
        self.auth_failures = 0
        self.lock = threading.Lock()
        plugin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def _answer(self, code: int, payload: Any) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    plugin.auth_failures += 1
                    self._answer(401, b"missing or wrong bearer token")
                    return
                code, payload = plugin.handle(self.command, self.path, body)
                self._answer(code, payload)

            do_GET = do_POST = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        with self.lock:
            if (method, path) == ("POST", "/create"):
                return self.create(body)
            if (method, path) == ("POST", "/delete"):
                uid = body["metadata"]["uid"]
                self.deletes.append(uid)
                if uid in self.jobs:
                    self.jobs[uid].cancelled = True
                    return 200, b"deleted"
                return 404, b"unknown pod"
            if (method, path) == ("GET", "/status"):
                if not body:
                    return 200, {"status": "ok", "resources": {"cpu": "48", "memory": "96Gi"}}
                uids = [p["metadata"]["uid"] for p in body]
                return 200, [self.status(self.jobs[u]) for u in uids if u in self.jobs]
            if (method, path) == ("GET", "/getLogs"):
                job = self.jobs.get(body["PodUID"])
                if job is None:
                    return 404, b"unknown pod"
                return 200, ("\n".join([*LOG_LINES, f"pod {job.name}"]) + "\n").encode()
        return 404, b"no route"

    def create(self, body: Any) -> tuple[int, Any]:
        assert set(body) == {"pod", "container"}
        pod = body["pod"]
        meta = pod["metadata"]
        container = pod["spec"]["containers"][0]
        if not (container.get("resources") or {}).get("limits"):
            return 422, f"pod {meta['namespace']}/{meta['name']}: no cpu/memory limits".encode()
        self.creates.append(meta["uid"])
        annotations = meta.get("annotations") or {}
        job = FakeJob(
            meta["uid"],
            meta["name"],
            meta["namespace"],
            str(1000 + len(self.creates)),
            float(annotations.get("fake/seconds", "2")),
            int(annotations.get("fake/exit", "0")),
        )
        self.jobs[job.uid] = job
        return 201, {"PodUID": job.uid, "PodJID": job.jid}

    def status(self, job: FakeJob) -> dict[str, Any]:
        age = time.monotonic() - job.submitted
        if job.cancelled:
            state: dict[str, Any] = {"terminated": {"exitCode": 143, "reason": "Cancelled"}}
        elif age < 1.0:
            state = {"waiting": {"reason": "Queued"}}
        elif age < 1.0 + job.seconds:
            state = {"running": {"startedAt": "2025-01-01T00:00:00Z"}}
        else:
            reason = "Completed" if job.exit_code == 0 else "Error"
            state = {"terminated": {"exitCode": job.exit_code, "reason": reason}}
        return {
            "name": job.name,
            "UID": job.uid,
            "namespace": job.namespace,
            "JID": job.jid,
            "containers": [{"name": "main", "state": state, "ready": "running" in state}],
            "initContainers": [],
        }


# ---------------------------------------------------------------- fixtures


@dataclass
class Env:
    core: client.CoreV1Api
    plugin: FakePlugin
    info: ControlPlaneInfo
    workdir: Path
    endpoint_file: Path
    ns: str
    agent: subprocess.Popen[bytes] | None = None
    status: Path | None = None

    def start_agent(self) -> None:
        extra: tuple[str, ...] = ("--interlink-file", str(self.endpoint_file))
        extra += ("--kubelet-dir", str(self.workdir / "kubelet"))
        self.agent, self.status = start_agent(self.info, self.workdir, GROUPS, *extra)

    def stop_agent(self) -> None:
        assert self.agent is not None
        assert stop_process(self.agent) == 0

    def agent_status(self) -> dict[str, Any]:
        assert self.status is not None
        return dict(json.loads(self.status.read_text()))


@pytest.fixture(scope="module")
def env(
    sim_control_plane: ControlPlaneInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    workdir = tmp_path_factory.mktemp("vkubelet")
    core = client.CoreV1Api(
        config.new_client_from_config(config_file=str(sim_control_plane.kubeconfig))
    )
    ns = f"vk-{os.getpid()}"
    create_namespace(core, ns)
    plugin = FakePlugin()
    token = workdir / "hpc.token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    endpoints = workdir / "interlink.json"
    url = f"http://127.0.0.1:{plugin.port}"
    endpoints.write_text(json.dumps({"nodes": {NODE: {"url": url, "token_file": str(token)}}}))
    e = Env(core, plugin, sim_control_plane, workdir, endpoints, ns)
    e.start_agent()
    try:
        yield e
    finally:
        if e.agent is not None and e.agent.poll() is None:
            e.stop_agent()
        log = (workdir / "agent.log").read_text()
        assert TOKEN not in log
        core.delete_namespace(ns)
        core.delete_node(NODE)
        plugin.close()


def make_pod(
    name: str, *, limits: bool = True, seconds: str = "2", exit_code: str = "0"
) -> client.V1Pod:
    resources = client.V1ResourceRequirements(
        requests={"cpu": "1", "memory": "1Gi"},
        limits={"cpu": "1", "memory": "1Gi"} if limits else None,
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name, annotations={"fake/seconds": seconds, "fake/exit": exit_code}
        ),
        spec=client.V1PodSpec(
            node_name=NODE,
            restart_policy="Never",
            containers=[
                client.V1Container(
                    name="main",
                    image="busybox",
                    command=["sh", "-c", "echo hi"],
                    resources=resources,
                )
            ],
        ),
    )


def wait_phase(
    core: client.CoreV1Api, ns: str, name: str, wanted: str, timeout: float = 30.0
) -> Any:
    """The pod once in phase ``wanted`` and the phases seen on the way."""
    seen: list[str] = []

    def check() -> Any:
        pod = core.read_namespaced_pod(name, ns)
        if not seen or seen[-1] != pod.status.phase:
            seen.append(pod.status.phase)
        return pod if pod.status.phase == wanted else None

    pod = wait_for(f"pod {name} {wanted} (seen {seen})", check, timeout, every=0.25)
    return pod, seen


# ---------------------------------------------------------------- tests


@pytest.mark.sim
@pytest.mark.addons
def test_fake_plugin_node_endpoint_and_capacity(env: Env) -> None:
    def patched() -> Any:
        node = env.core.read_node(NODE)
        port = node.status.daemon_endpoints.kubelet_endpoint.port
        return node if port != 10250 and node.status.capacity.get("cpu") == "48" else None

    node = wait_for("the backed node's kubelet endpoint and capacity", patched, timeout=20)
    assert {a.type: a.address for a in node.status.addresses} == {
        "InternalIP": "127.0.0.1",
        "Hostname": "127.0.0.1",
    }
    assert node.status.allocatable["memory"] == "96Gi"
    status = env.agent_status()["interlink"]
    assert status["nodes"] == {NODE: f"http://127.0.0.1:{env.plugin.port}"}
    assert status["kubelet_port"] == node.status.daemon_endpoints.kubelet_endpoint.port


@pytest.mark.sim
@pytest.mark.addons
def test_fake_plugin_pod_runs_succeeds_and_logs(env: Env) -> None:
    env.core.create_namespaced_pod(env.ns, make_pod("ok", seconds="3"))
    pod, seen = wait_phase(env.core, env.ns, "ok", "Succeeded")
    assert "Running" in seen
    cs = pod.status.container_statuses[0]
    assert cs.state.terminated.exit_code == 0 and cs.state.terminated.reason == "Completed"
    assert cs.container_id.startswith("interlink://")
    assert env.plugin.creates.count(pod.metadata.uid) == 1
    text = env.core.read_namespaced_pod_log("ok", env.ns, container="main")
    assert text == "\n".join([*LOG_LINES, "pod ok"]) + "\n"
    tail = env.core.read_namespaced_pod_log("ok", env.ns, container="main", tail_lines=2)
    assert tail == "line 5\npod ok\n"


@pytest.mark.sim
@pytest.mark.addons
def test_fake_plugin_nonzero_exit_fails_the_pod(env: Env) -> None:
    env.core.create_namespaced_pod(env.ns, make_pod("bad", seconds="0", exit_code="3"))
    pod, _ = wait_phase(env.core, env.ns, "bad", "Failed")
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")


@pytest.mark.sim
@pytest.mark.addons
def test_fake_plugin_refused_pod_fails_with_its_reason(env: Env) -> None:
    env.core.create_namespaced_pod(env.ns, make_pod("nolimits", limits=False))
    pod, _ = wait_phase(env.core, env.ns, "nolimits", "Failed")
    assert pod.status.reason == "Unrunnable"
    assert pod.status.message == f"pod {env.ns}/nolimits: no cpu/memory limits"
    assert pod.metadata.uid not in env.plugin.creates


@pytest.mark.sim
@pytest.mark.addons
def test_fake_plugin_delete_goes_through_the_plugin(env: Env) -> None:
    env.core.create_namespaced_pod(env.ns, make_pod("long", seconds="600"))
    pod, _ = wait_phase(env.core, env.ns, "long", "Running")
    env.core.delete_namespaced_pod("long", env.ns)

    def gone() -> bool:
        try:
            env.core.read_namespaced_pod("long", env.ns)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for("pod long gone", gone, timeout=20)
    assert pod.metadata.uid in env.plugin.deletes
    assert env.plugin.jobs[pod.metadata.uid].cancelled


@pytest.mark.sim
@pytest.mark.addons
def test_fake_plugin_agent_restart_does_not_submit_again(env: Env) -> None:
    env.core.create_namespaced_pod(env.ns, make_pod("survivor", seconds="6"))
    pod, _ = wait_phase(env.core, env.ns, "survivor", "Running")
    env.stop_agent()
    env.start_agent()
    pod, _ = wait_phase(env.core, env.ns, "survivor", "Succeeded")
    assert env.plugin.creates.count(pod.metadata.uid) == 1
    assert env.plugin.auth_failures == 0


@pytest.mark.sim
@pytest.mark.addons
def test_fake_plugin_endpoint_file_removed_restores_the_node(env: Env) -> None:
    saved = env.endpoint_file.read_text()
    env.endpoint_file.unlink()
    try:
        wait_for(
            "node simulated again",
            lambda: env.core.read_node(NODE).status.daemon_endpoints.kubelet_endpoint.port == 10250,
            timeout=20,
        )
        env.core.create_namespaced_pod(env.ns, make_pod("simulated"))
        pod, _ = wait_phase(env.core, env.ns, "simulated", "Running")
        assert pod.metadata.uid not in env.plugin.creates
    finally:
        env.endpoint_file.write_text(saved)


# ---------------------------------------------------------------- the real plugin on the lab

LOGIN = "node1"
SLURM_NODE = "vkslurm-0"  # not NODE: the module's stand-in agent may still run
SLURM_GROUPS = [{**GROUPS[0], "name_prefix": "vkslurm"}]


@dataclass
class RealPlugin:
    info: lab.LabInfo
    host_dir: Path  # on this machine
    node_dir: str  # the same directory on the lab nodes
    url: str
    token_file: Path

    def ssh(self, command: str, *, stdin: str | None = None, check: bool = True) -> str:
        proc = subprocess.run(
            ["ssh", "-F", self.info.ssh_config, "-o", "BatchMode=yes", f"decice@{LOGIN}", command],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert not check or proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout.strip()

    def log(self) -> str:
        return (self.host_dir / "plugin.log").read_text(errors="replace")

    def squeue(self) -> str:
        """The lab user's jobs and job steps (pilot mode's pods are steps)."""
        jobs = self.ssh("squeue --noheader --format='%i %j %T'")
        return jobs + "\n" + self.ssh("squeue --noheader --steps --format='%i %j'")


@contextlib.contextmanager
def real_plugin(info: lab.LabInfo, workdir: Path, flags: str = "") -> Iterator[RealPlugin]:
    """decice-interlink-slurm (this checkout's package, on PYTHONPATH) served as the lab's
    user on LOGIN over TCP with a bearer token, with serve's further ``flags``; its data
    dir on /shared. Stopped, its jobs cancelled (cancel-all) and its files removed
    afterwards."""
    name = f"vkt-{os.getpid()}"
    host_dir = Path(info.shared_dir) / name
    node_dir = f"{info.shared_mount}/{name}"
    copy_plugin(host_dir / "pkg")
    for path in [host_dir, *host_dir.rglob("*")]:
        os.chown(path, 1500, 1500)
    token = secrets.token_hex(16)
    token_file = workdir / "real.token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    port = 20000 + os.getpid() % 20000
    address = next(n.ip for n in info.nodes if n.name == LOGIN)
    plugin = RealPlugin(info, host_dir, node_dir, f"http://{address}:{port}", token_file)
    env = f"PYTHONPATH={node_dir}/pkg"

    def answers() -> bool:
        try:
            resp = httpx.request(
                "GET",
                plugin.url + "/status",
                content=b"[]",
                headers={"Authorization": f"Bearer {token}"},
                timeout=5,
            )
        except httpx.HTTPError:
            return False
        return resp.status_code == 200

    try:
        plugin.ssh("umask 077 && cat > ~/vkt.token", stdin=token + "\n")
        # one simple command in the background (a backgrounded list would keep a shell
        # holding ssh's output open)
        plugin.ssh(
            f"cd {node_dir} || exit 1; {env} setsid nohup python3 -m decice.interlink serve "
            f"--data-dir {node_dir}/data --listen tcp:0.0.0.0:{port} --token-file ~/vkt.token "
            f"--runtime bare --pidfile {node_dir}/plugin.pid {flags} > {node_dir}/plugin.log 2>&1 "
            "< /dev/null &"
        )
        wait_for(f"the plugin on {LOGIN} (log: {plugin.log()[-2000:]!r})", answers, timeout=60)
        yield plugin
    finally:
        plugin.ssh(f"kill $(cat {node_dir}/plugin.pid) 2>/dev/null; rm -f ~/vkt.token", check=False)
        plugin.ssh(
            f"{env} python3 -m decice.interlink cancel-all --data-dir {node_dir}/data",
            check=False,
        )
        shutil.rmtree(host_dir, ignore_errors=True)


def slurm_pod(
    name: str, script: str, *, limits: bool = True, run_as: int | None = None
) -> client.V1Pod:
    size = {"cpu": "1", "memory": "64Mi"}
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            node_name=SLURM_NODE,
            restart_policy="Never",
            security_context=client.V1PodSecurityContext(run_as_user=run_as),
            containers=[
                client.V1Container(
                    name="main",
                    image="busybox",
                    command=["sh", "-c", script],
                    resources=client.V1ResourceRequirements(
                        requests=size if limits else None, limits=size if limits else None
                    ),
                )
            ],
        ),
    )


@pytest.mark.slurm
@pytest.mark.sim
@pytest.mark.addons
@pytest.mark.parametrize(
    "flags",
    [
        pytest.param("", id="job-mode"),
        # pilot mode (#31): the same agent, unchanged, the pods steps of one leased node
        pytest.param("--mode pilot --pilot-nodes 1 --pilot-time 10:00", id="pilot-mode"),
    ],
)
def test_real_plugin_on_the_slurm_lab(
    slurm_cluster: lab.LabInfo,
    sim_control_plane: ControlPlaneInfo,
    tmp_path: Path,
    flags: str,
) -> None:
    core = client.CoreV1Api(
        config.new_client_from_config(config_file=str(sim_control_plane.kubeconfig))
    )
    ns = f"vkslurm-{'pilot' if flags else 'job'}-{os.getpid()}"
    create_namespace(core, ns)
    with real_plugin(slurm_cluster, tmp_path, flags) as plugin:
        endpoints = tmp_path / "interlink.json"
        endpoints.write_text(
            json.dumps(
                {"nodes": {SLURM_NODE: {"url": plugin.url, "token_file": str(plugin.token_file)}}}
            )
        )
        extra = ("--interlink-file", str(endpoints), "--kubelet-dir", str(tmp_path / "kubelet"))
        agent, _status = start_agent(sim_control_plane, tmp_path, SLURM_GROUPS, *extra)
        try:
            core.create_namespaced_pod(ns, slurm_pod("ok", "echo hello from slurm; hostname"))
            core.create_namespaced_pod(ns, slurm_pod("bad", "echo failing; exit 3"))
            core.create_namespaced_pod(ns, slurm_pod("long", "sleep 300"))
            core.create_namespaced_pod(ns, slurm_pod("nolimits", "true", limits=False))
            core.create_namespaced_pod(ns, slurm_pod("asroot", "true", run_as=0))

            pod, _ = wait_phase(core, ns, "ok", "Succeeded", timeout=90)
            terminated = pod.status.container_statuses[0].state.terminated
            assert terminated.exit_code == 0
            text = core.read_namespaced_pod_log("ok", ns, container="main")
            lines = text.splitlines()
            assert lines[0] == "hello from slurm", plugin.log()
            assert lines[1] in {n.name for n in slurm_cluster.nodes}
            assert core.read_namespaced_pod_log("ok", ns, container="main", tail_lines=1) == (
                lines[1] + "\n"
            )

            pod, _ = wait_phase(core, ns, "bad", "Failed", timeout=60)
            assert pod.status.container_statuses[0].state.terminated.exit_code == 3

            # no resources: the plugin's default size, as the reference plugin
            wait_phase(core, ns, "nolimits", "Succeeded", timeout=60)
            pod, _ = wait_phase(core, ns, "asroot", "Failed", timeout=30)
            assert pod.status.reason == "Unrunnable" and "runAsUser 0" in pod.status.message
            assert f"decice-{pod.metadata.uid}" not in plugin.squeue()

            long_pod, _ = wait_phase(core, ns, "long", "Running", timeout=60)
            job = f"decice-{long_pod.metadata.uid}"
            assert job in plugin.squeue()
            core.delete_namespaced_pod("long", ns)

            def cancelled() -> bool:
                try:
                    core.read_namespaced_pod("long", ns)
                except ApiException as exc:
                    return exc.status == 404 and job not in plugin.squeue()
                return False

            wait_for("pod long gone and its job out of squeue", cancelled, timeout=30)
        finally:
            assert stop_process(agent) == 0
            agent_log = (tmp_path / "agent.log").read_text()
            core.delete_namespace(ns)
            with contextlib.suppress(ApiException):
                core.delete_node(SLURM_NODE)
        assert plugin.token_file.read_text().strip() not in agent_log
