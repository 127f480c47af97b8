"""The sim harness of the integration tests: the node agent and decice-scheduler as their
real processes (command lines from :mod:`decice.sim.agent.nodes_service` and
:mod:`decice.sim.scheduler_service`) against a real control plane.

- :func:`start_agent` / :func:`stop_process`: the node agent for some node groups;
- :class:`SchedulerProc`: one decice-scheduler process (restartable), its /metrics,
  /debug/state and POST /debug/audit;
- :func:`running_env`: control plane (with the stock kube-scheduler; fresh, or the
  session's shared one), node agent and decice-scheduler, torn down again;
  :func:`shared_env_fixture`: a scheduler module's ``env`` fixture on the shared one;
- :func:`api_objects`: the cluster's objects over discovery, for zero-leftover diffs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from prometheus_client.parser import text_string_to_metric_families

from decice.sim.agent.nodes_service import agent_argv, read_status_file
from decice.sim.binaries.resolve import BinarySet
from decice.sim.controlplane.loopback import ControlPlane, ControlPlaneInfo
from decice.sim.scheduler_service import free_port, scheduler_argv
from tests.support import require, wait_for

SCHED = "decice-scheduler"
GROUP_LABEL = "decice.io/sim-group"
ROOT = Path(__file__).resolve().parents[2]


def require_sim() -> None:
    """The sim's control-plane binaries come from DECICE_K8S_BIN_DIR, the cache or an
    offline build with Debian's apt."""
    require(
        shutil.which("apt-get") is not None or bool(os.environ.get("DECICE_K8S_BIN_DIR")),
        "the sim target needs Debian's apt (offline build) or DECICE_K8S_BIN_DIR",
    )


# ---------------------------------------------------------------- processes


def stop_process(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM, wait up to 20 s for the exit code; else SIGKILL and raise TimeoutExpired."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


def start_agent(
    info: ControlPlaneInfo, workdir: Path, groups: Sequence[Mapping[str, Any]], *extra: str
) -> tuple[subprocess.Popen[bytes], Path]:
    """Run the node agent for ``groups``; wait until ready. Returns it and its status file."""
    nodes_file, status = workdir / "nodes.json", workdir / "agent-status.json"
    nodes_file.write_text(json.dumps({"nodes": [dict(g) for g in groups]}))
    log = (workdir / "agent.log").open("wb")
    proc = subprocess.Popen(
        agent_argv(info.kubeconfig, nodes_file, status, extra),
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def ready() -> bool:
        assert proc.poll() is None, (workdir / "agent.log").read_text()
        return bool((read_status_file(status) or {}).get("ready"))

    wait_for("agent ready", ready, timeout=60)
    return proc, status


def http(port: int, path: str, method: str = "GET", timeout: float = 60.0) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except OSError:
        return 0, b""


@dataclass
class SchedulerProc:
    """One decice-scheduler process (restartable with the same arguments)."""

    kubeconfig: Path
    workdir: Path
    name: str = SCHED
    extra: tuple[str, ...] = ()
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def start(self, wait_ready: bool = True) -> None:
        self.starts += 1
        out = self.log.open("ab")
        # this checkout's scheduler and its client library, whatever the venv points to
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'scheduler'}{os.pathsep}{ROOT / 'kube'}"}
        flags = ("--audit-interval", "0", "--watch-timeout", "20", "--max-backoff", "2")
        flags += ("--debug-audit-min-interval", "0")  # tests audit back to back
        argv = scheduler_argv(
            self.kubeconfig,
            self.port,
            name=self.name,
            qps=200,
            burst=400,
            extra=(*flags, *self.extra),
        )
        self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        if wait_ready:
            wait_for(f"{self.name} ready", self.ready, timeout=60)

    def ready(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-3000:]
        return http(self.port, "/readyz")[0] == 200

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> SchedulerProc:
        """``with`` a SchedulerProc: started (and ready), stopped at the end if running."""
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.running():
            self.stop()

    def stop(self) -> int:
        assert self.proc is not None
        return stop_process(self.proc)

    def metrics(self) -> dict[str, float]:
        status, body = http(self.port, "/metrics")
        assert status == 200
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(body.decode()):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return out

    def state(self) -> dict[str, Any]:
        status, body = http(self.port, "/debug/state")
        assert status == 200
        return dict(json.loads(body))

    def audit(self) -> dict[str, Any]:
        status, body = http(self.port, "/debug/audit", method="POST")
        assert status == 200, body
        return dict(json.loads(body))


def api_objects(api: client.ApiClient, namespaces: Sequence[str]) -> set[tuple[str, str, str, str]]:
    """Independent of decice's scan: (apiVersion, kind, namespace, name) of every
    cluster-scoped object and of every object in ``namespaces``, over discovery (types
    that are only noise, default service accounts/tokens and root CA maps left out)."""
    from kubernetes import dynamic
    from kubernetes.client.rest import ApiException
    from kubernetes.dynamic.resource import ResourceList

    dyn = dynamic.DynamicClient(api)
    dyn.resources.invalidate_cache()  # the client keeps discovery in a file: read it afresh
    noise = {"Event", "Lease", "Endpoints", "EndpointSlice", "ComponentStatus"}
    out: set[tuple[str, str, str, str]] = set()
    # one version per (group, kind): the group's preferred one, else the kind's only one (a
    # kind served in a version that is not the group's preferred one is still listed)
    chosen: dict[tuple[str, str], Any] = {}
    for resource in dyn.resources.search():
        verbs = getattr(resource, "verbs", None) or []
        if "list" not in verbs or "/" in resource.name or resource.kind in noise:
            continue
        if isinstance(resource, ResourceList):
            continue
        key = (resource.group, resource.kind)
        if key not in chosen or resource.preferred:
            chosen[key] = resource
    for resource in chosen.values():
        try:
            if resource.namespaced:
                items = [i for ns in namespaces for i in resource.get(namespace=ns).items]
            else:
                items = resource.get().items
        except ApiException:
            continue
        for item in items:
            meta = item.metadata
            if resource.kind == "Secret" and str(meta.name).startswith("default-token-"):
                continue
            if resource.kind in {"ServiceAccount", "ConfigMap"} and meta.name in {
                "default",
                "kube-root-ca.crt",
            }:
                continue
            out.add((resource.group_version, resource.kind, meta.namespace or "", meta.name))
    return out


def delete_group_nodes(kubeconfig: Path, groups: Sequence[Mapping[str, Any]]) -> None:
    """Delete the Nodes a stopped agent simulated for ``groups`` (``<name_prefix>-<i>``):
    the session control plane keeps them Ready without heartbeats, and a DaemonSet of a
    later module would wait for pods on them forever."""
    core = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    for group in groups:
        for index in range(int(group["count"])):
            with contextlib.suppress(client.ApiException):
                core.delete_node(f"{group['name_prefix']}-{index}")


# the integration conftest's ``addon_nodes``: (name, node groups) -> an addon_cluster
AddonNodes = Callable[
    [str, Sequence[Mapping[str, Any]]], contextlib.AbstractContextManager[dict[str, Any]]
]


@contextlib.contextmanager
def addon_cluster(
    info: ControlPlaneInfo, helm: Path, tmp: Path, groups: Sequence[Mapping[str, Any]]
) -> Iterator[dict[str, Any]]:
    """The session control plane with simulated ``groups`` and the bundled scheduler under
    the default scheduler's name (the session runs no kube-scheduler: it places the
    add-ons' pods). Yields tmp, kubeconfig, helm and an ApiClient; stops both and deletes
    the Nodes afterwards."""
    agent, _ = start_agent(info, tmp, groups)
    scheduler = SchedulerProc(info.kubeconfig, tmp, name="default-scheduler")
    scheduler.start()
    try:
        yield {
            "tmp": tmp,
            "kubeconfig": info.kubeconfig,
            "helm": helm,
            "api": config.new_client_from_config(str(info.kubeconfig)),
        }
    finally:
        scheduler.stop()
        stop_process(agent)
        delete_group_nodes(info.kubeconfig, groups)


def assert_no_drift(sched: SchedulerProc) -> dict[str, Any]:
    result = sched.audit()
    assert result["drift_nodes"] == 0, result["drift"]
    return result


# ---------------------------------------------------------------- environment


def _has_default_sa(core: client.CoreV1Api, ns: str) -> Callable[[], bool]:
    def check() -> bool:
        found = core.list_namespaced_service_account(ns, field_selector="metadata.name=default")
        return bool(found.items)

    return check


def create_namespace(
    core: client.CoreV1Api, ns: str, timeout: float = 30.0, every: float = 0.2
) -> None:
    """Create ``ns`` and wait for its default service account (pods need it)."""
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    wait_for(f"default service account in {ns}", _has_default_sa(core, ns), timeout, every)


@dataclass
class SchedEnv:
    cp: ControlPlane
    info: ControlPlaneInfo
    core: client.CoreV1Api
    api: client.ApiClient
    workdir: Path
    sched: SchedulerProc
    agent: subprocess.Popen[bytes]
    namespaces: tuple[str, ...]


@contextlib.contextmanager
def running_control_plane(
    data_dir: Path, binaries: BinarySet, **options: Any
) -> Iterator[ControlPlaneInfo]:
    """A started control plane (``options`` as :class:`ControlPlane` takes them), stopped
    afterwards, also when it failed to start."""
    cp = ControlPlane(data_dir, binaries, **options)
    try:
        yield cp.start()
    finally:
        cp.stop()


def _names(core: client.CoreV1Api) -> tuple[set[str], set[str]]:
    """The cluster's namespaces and nodes, by name."""
    return (
        {ns.metadata.name for ns in core.list_namespace().items},
        {node.metadata.name for node in core.list_node().items},
    )


@contextlib.contextmanager
def leaves_nothing(
    kubeconfig: Path, groups: Sequence[Mapping[str, Any]], namespaces: Sequence[str]
) -> Iterator[None]:
    """Give a shared control plane back as its user found it: at the end, the user's node
    groups (``<name_prefix>-<i>``) and ``namespaces`` are deleted, and a pod still in one
    of them (a test that did not clean up), or a namespace or node that was not there
    before, fails it, named."""
    core = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    before = _names(core)
    try:
        yield
    finally:
        left = [
            f"pod {ns}/{pod.metadata.name}"
            for ns in namespaces
            for pod in core.list_namespaced_pod(ns).items
        ]
        delete_group_nodes(kubeconfig, groups)
        for ns in namespaces:
            with contextlib.suppress(client.ApiException):
                core.delete_namespace(ns)
        wait_for(
            f"namespaces {', '.join(namespaces)} deleted",
            lambda: not set(namespaces) & _names(core)[0],
            timeout=120,
        )
        namespaces_now, nodes_now = _names(core)
        left += [f"namespace {ns}" for ns in sorted(namespaces_now - before[0])]
        left += [f"node {node}" for node in sorted(nodes_now - before[1])]
        assert not left, f"left behind on the shared control plane: {', '.join(left)}"


@contextlib.contextmanager
def running_env(
    binaries: BinarySet,
    workdir: Path,
    groups: Sequence[Mapping[str, Any]],
    namespaces: Sequence[str],
    sched_extra: Sequence[str] = (),
    shared: ControlPlane | None = None,
) -> Iterator[SchedEnv]:
    """Control plane (with the stock kube-scheduler), node agent and decice-scheduler.

    ``shared``: a running control plane of that kind (the session's
    ``sched_control_plane``) to use instead of a fresh one. Its user runs its own agent
    for ``groups`` and its own decice-scheduler, in ``namespaces`` of its own, and gives it
    back as it found it (:func:`leaves_nothing`). A module whose tests freeze, cut or
    restart the apiserver for longer than one quick restart takes a fresh one
    (test_scheduler_churn.py, marked ``own_control_plane``)."""
    require("kube-scheduler" in binaries, "kube-scheduler binary")
    with contextlib.ExitStack() as stack:
        if shared is None:
            cp = ControlPlane(workdir / "cp", binaries, scheduler=True, node_lifecycle=False)
            info: ControlPlaneInfo | None = cp.start()
            stack.callback(cp.stop)
        else:
            cp, info = shared, shared.info()
            assert info is not None, "the shared control plane is not running"
            stack.enter_context(leaves_nothing(info.kubeconfig, groups, namespaces))
        api = config.new_client_from_config(config_file=str(info.kubeconfig))
        core = client.CoreV1Api(api)
        for ns in namespaces:
            create_namespace(core, ns)
        agent, _status = start_agent(info, workdir, groups)
        stack.callback(_stop_quietly, agent)
        sched = SchedulerProc(info.kubeconfig, workdir, extra=tuple(sched_extra))
        stack.callback(lambda: sched.running() and sched.stop())
        sched.start()
        yield SchedEnv(cp, info, core, api, workdir, sched, agent, tuple(namespaces))


def shared_env_fixture(
    name: str, groups: Sequence[Mapping[str, Any]], namespaces: Sequence[str]
) -> Any:
    """A scheduler test module's fixture ``env`` (module scope): the session's scheduler
    control plane (``sched_control_plane``) with the module's node ``groups``,
    ``namespaces``, node agent and decice-scheduler (:func:`running_env`), working in a
    temporary directory ``name``; assign it to the module's ``env``."""

    @pytest.fixture(scope="module", name="env")
    def env(
        sim_binaries: BinarySet,
        sched_control_plane: ControlPlane,
        tmp_path_factory: pytest.TempPathFactory,
    ) -> Iterator[SchedEnv]:
        work = tmp_path_factory.mktemp(name)
        with running_env(sim_binaries, work, groups, namespaces, shared=sched_control_plane) as e:
            yield e

    return env


def _stop_quietly(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        stop_process(proc)
