"""decice-scheduler's metrics/debug server against the sim control plane: on loopback
by default (not reachable on this machine's other addresses), a non-loopback bind only
with a token, which /debug/* then require (401 / 403 / 200), the audit rate-limited
(429 + Retry-After), and the scheduling loop binding pods while an audit runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import threading
import urllib.error
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from decice.sim.agent.simnodes import expand, node_object
from decice.sim.controlplane.loopback import ControlPlaneInfo
from decice.sim.scheduler_service import free_port, scheduler_argv
from decice.spec_model import SimNodeGroup
from decice_scheduler.app import Options, Scheduler
from decice_scheduler.cache.state import ClusterState
from decice_scheduler.debugaccess import TOKEN_ENV
from decice_scheduler.profile import Profile
from tests.integration.simsupport import ROOT, SchedulerProc, create_namespace
from tests.support import http_call, pod_manifest, wait_for

pytestmark = pytest.mark.scheduler

TOKEN = "integration-debug-token-0123456789"


def non_loopback_ipv4() -> str | None:
    """An IPv4 address of this machine that is not loopback, or None."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a source address
        address = str(s.getsockname()[0])
        if not address.startswith("127.") and address != "0.0.0.0":
            return address
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, timeout=10
        ).stdout
        for line in out.splitlines():
            fields = line.split()
            if "inet" in fields:
                address = fields[fields.index("inet") + 1].split("/")[0]
                if not address.startswith("127."):
                    return address
    return None


def call(
    host: str, port: int, path: str, method: str = "GET", token: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    try:
        return http_call(f"http://{host}:{port}{path}", method, token, timeout=60)
    except (urllib.error.URLError, OSError):
        return 0, {}, b""  # not listening (yet)


def test_default_bind_is_loopback_only(sim_control_plane: ControlPlaneInfo, tmp_path: Path) -> None:
    address = non_loopback_ipv4()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to try")
    sched = SchedulerProc(sim_control_plane.kubeconfig, tmp_path, name="dbg-default")
    assert "--metrics-host" not in scheduler_argv(sim_control_plane.kubeconfig, sched.port)
    with sched:
        with pytest.raises(OSError), socket.create_connection((address, sched.port), timeout=5):
            pass
        # on loopback, without a token configured: as before
        code, _, body = call("127.0.0.1", sched.port, "/debug/state")
        assert code == 200 and "nodes" in json.loads(body)


def test_non_loopback_bind_without_token_exits_2(
    sim_control_plane: ControlPlaneInfo, tmp_path: Path
) -> None:
    argv = scheduler_argv(sim_control_plane.kubeconfig, free_port(), host="0.0.0.0")
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    env["PYTHONPATH"] = str(ROOT / "scheduler")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2
    assert "--metrics-host 0.0.0.0: a non-loopback address needs a debug token" in done.stderr


def test_token_guards_the_debug_endpoints_and_the_audit_is_rate_limited(
    sim_control_plane: ControlPlaneInfo, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    extra = (
        "--metrics-host",
        "0.0.0.0",
        "--debug-token-file",
        str(token_file),
        "--debug-audit-min-interval",
        "60",
    )
    host = non_loopback_ipv4() or "127.0.0.1"
    sched = SchedulerProc(sim_control_plane.kubeconfig, tmp_path, name="dbg-token", extra=extra)
    with sched:
        assert sched.proc is not None
        cmdline = Path(f"/proc/{sched.proc.pid}/cmdline").read_bytes()
        assert TOKEN.encode() not in cmdline
        port = sched.port
        # open: probes and Prometheus
        assert call(host, port, "/healthz")[0] == 200
        assert call(host, port, "/readyz")[0] == 200
        assert b"decice_scheduler_" in call(host, port, "/metrics")[2]
        # /debug/state
        assert call(host, port, "/debug/state")[0] == 401
        assert call(host, port, "/debug/state", token="wrong-token-wrong-token")[0] == 403
        code, _, body = call(host, port, "/debug/state", token=TOKEN)
        assert code == 200 and "usage" in json.loads(body)
        # POST /debug/audit
        code, headers, _ = call(host, port, "/debug/audit", "POST")
        assert code == 401 and headers["WWW-Authenticate"].startswith("Bearer")
        assert call(host, port, "/debug/audit", "POST", "wrong-token-wrong-token")[0] == 403
        code, _, body = call(host, port, "/debug/audit", "POST", TOKEN)
        assert code == 200, body
        assert json.loads(body)["drift_nodes"] == 0
        code, headers, _ = call(host, port, "/debug/audit", "POST", TOKEN)
        assert code == 429
        assert 1 <= int(headers["Retry-After"]) <= 60
        assert sched.metrics()["decice_scheduler_audits_total"] == 1
    assert TOKEN not in sched.log.read_text()


# ---------------------------------------------------------------- binding during an audit


def make_nodes(core: client.CoreV1Api, prefix: str, count: int) -> list[str]:
    group = SimNodeGroup(name_prefix=prefix, count=count, capacity={"cpu": "8", "memory": "16Gi"})
    names = []
    for node in expand([group]):
        created = core.create_node(node_object(node, datetime.now(UTC)))
        names.append(created.metadata.name)
    return names


def test_binding_continues_while_an_audit_runs(
    sim_control_plane: ControlPlaneInfo,
    sim_api: client.ApiClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The audit's diff is held (a blocking wait standing for a long rebuild and diff of
    a big cluster) until pods created after it began are bound: only possible when the
    scheduling loop is not the thread doing the audit."""
    core = client.CoreV1Api(sim_api)
    name, ns = "dbg-audit-bind", "dbg-audit-bind"
    create_namespace(core, ns)
    nodes = make_nodes(core, "dbgab", 2)
    entered, release = threading.Event(), threading.Event()
    original = ClusterState.diff

    def held_diff(self: ClusterState, other: ClusterState, include_assumed: bool = False) -> Any:
        entered.set()
        release.wait(90)
        return original(self, other, include_assumed)

    monkeypatch.setattr(ClusterState, "diff", held_diff)
    port = free_port()
    options = Options(
        kubeconfig=str(sim_control_plane.kubeconfig),
        scheduler_name=name,
        metrics_port=port,
        audit_interval=0,
        debug_audit_window=0,
        max_backoff=1,
    )
    sched = Scheduler(options, Profile.default())
    audit_reply: list[int] = []
    bound_during_audit: list[bool] = []

    def post_audit() -> None:
        audit_reply.append(call("127.0.0.1", port, "/debug/audit", "POST")[0])

    def drive() -> None:
        wait_for("ready", lambda: call("127.0.0.1", port, "/readyz")[0] == 200, timeout=60)
        auditing = threading.Thread(target=post_audit)
        auditing.start()
        try:
            assert entered.wait(30), "the audit never reached its diff"
            pods = [f"p{i}" for i in range(5)]
            for pod in pods:
                core.create_namespaced_pod(ns, pod_manifest(pod, scheduler=name))

            def all_bound() -> bool:
                return all(core.read_namespaced_pod(p, ns).spec.node_name for p in pods)

            wait_for("pods bound while the audit runs", all_bound, timeout=30)
            bound_during_audit.append(auditing.is_alive() and not release.is_set())
        finally:
            release.set()
            auditing.join(60)

    async def main() -> None:
        runner = asyncio.create_task(sched.run())
        try:
            await asyncio.to_thread(drive)
        finally:
            sched.stop()
            await runner

    try:
        asyncio.run(main())
    finally:
        release.set()
        core.delete_namespace(ns)
        for node in nodes:
            core.delete_node(node)
    assert bound_during_audit == [True]
    assert audit_reply == [200]
    assert sched.exit_code == 0
