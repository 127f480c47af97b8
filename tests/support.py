"""Test support: prerequisite handling that fails loudly in CI and skips elsewhere, the
one way tests wait for a condition, a fake clock, the decice CLI and ansible-playbook as
subprocesses, process liveness, run records, a lab record, a filled scheduler cluster
state, sim specs and pods, an interLink request, a directory served over HTTP, an
action plugin whose module runs a test answers."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import yaml

from decice import records
from decice.errors import EXIT_BAD_INPUT
from decice.interlink.api import CreateRequest, parse_create
from decice.interlink.podspec import PodSpec, parse_pod
from decice.lab.model import LabInfo, LabNode
from decice_scheduler.cache.state import ClusterState

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DECICE = [sys.executable, "-m", "decice"]
# the upstream mirror (add-on charts, images, Kubespray) beside the checkout
MIRROR = REPO.parent / "shared" / "mirror"
# decice's and the Kubernetes library's stdlib-only modules the interLink plugin's wheel
# carries beside decice.interlink
INTERLINK_DECICE_MODULES = frozenset({"decice", "decice.__version__", "decice.command"})
INTERLINK_KUBE_MODULES = frozenset(
    {"decice_kube.quantity", "decice_kube.pods", "decice_kube.loopback"}
)


def load_file(path: Path, name: str, *, register: bool = False) -> ModuleType:
    """The Python file ``path`` (a collection plugin or module, a bench helper) loaded as a
    module named ``name``, without a package around it; ``register`` puts it in
    ``sys.modules`` first (what dataclasses in it need)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_STANDINS = load_file(REPO / "scripts" / "upstream_standins.py", "upstream_standins")
served = _STANDINS.served  # an HTTP server with a handler: yields its base URL
served_directory = _STANDINS.served_directory  # a directory over HTTP: yields its base URL
repack_chart = _STANDINS.repack_chart  # another packaging of a chart (same content pin)
tag_archive = _STANDINS.tag_archive  # a GitHub-style tag archive holding a chart at a path
UPSTREAM_HOSTS = _STANDINS.UPSTREAM_HOSTS
UPSTREAM_REGISTRY = _STANDINS.UPSTREAM_REGISTRY


def require(condition: bool, reason: str) -> None:
    """Fail (in CI) or skip (elsewhere) when a test's prerequisite is missing."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"prerequisite missing in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def wait_for(what: str, fn: Callable[[], Any], timeout: float = 30.0, every: float = 0.2) -> Any:
    """Call ``fn`` every ``every`` seconds until it returns something true (returned);
    fail the test when ``timeout`` seconds passed first."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def http_call(
    url: str, method: str = "GET", token: str | None = None, timeout: float = 10.0
) -> tuple[int, dict[str, str], bytes]:
    """``method`` on ``url`` (with a bearer ``token``): the status, headers and body, an
    error status's too; not reaching the server raises (URLError, OSError)."""
    req = urllib.request.Request(url, method=method)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


class FakeModule:
    """What a decice.hybrid module's ``run()`` uses of its AnsibleModule: ``params`` with the
    argument spec's defaults under the given ones, ``check_mode``, and ``fail_json``, which
    keeps the failure in ``failed`` and raises SystemExit as Ansible's does."""

    def __init__(
        self, argument_spec: Mapping[str, Mapping[str, Any]], check_mode: bool = False,
        **params: Any,
    ) -> None:  # fmt: skip
        self.params = {name: spec.get("default") for name, spec in argument_spec.items()} | params
        self.check_mode = check_mode
        self.failed: dict[str, Any] | None = None

    def fail_json(self, **kwargs: Any) -> None:
        self.failed = kwargs
        raise SystemExit(1)


def action_plugin(
    module: ModuleType,
    args: Mapping[str, Any],
    results: Callable[[str, dict[str, Any]], dict[str, Any]],
    name: str,
    *,
    become: bool = False,
) -> tuple[Any, list[tuple[str, dict[str, Any], bool]]]:
    """A decice.hybrid action plugin (``module.ActionModule``) with ``args`` (a task with
    ``become`` or without), whose module runs on the host are answered by
    ``results(module name, module args)`` and kept, in order, with whether each ran with
    become, in the list returned with it."""
    task = SimpleNamespace(args=dict(args), async_val=0, check_mode=False, diff=False, action=name)
    connection = SimpleNamespace(
        _shell=SimpleNamespace(tmpdir=None), become="sudo" if become else None
    )
    connection.set_become_plugin = lambda plugin: setattr(connection, "become", plugin)
    plugin = module.ActionModule(
        task, connection, SimpleNamespace(check_mode=False), None, None, SimpleNamespace()
    )
    calls: list[tuple[str, dict[str, Any], bool]] = []

    def execute_module(**kw: Any) -> dict[str, Any]:
        calls.append((kw["module_name"], kw["module_args"], connection.become is not None))
        return results(kw["module_name"], kw["module_args"])

    plugin._execute_module = execute_module
    return plugin, calls


class FakeClock:
    """A clock the test moves: calling it or ``time()`` gives ``now`` (seconds); ``sleep``
    moves ``now`` on, counts in ``sleeps`` and then runs ``on_sleep(sleeps)`` when given
    (the world changing meanwhile)."""

    def __init__(self, now: float = 0.0, on_sleep: Callable[[int], None] | None = None) -> None:
        self.now, self.sleeps, self.on_sleep = now, 0, on_sleep

    def __call__(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps += 1
        if self.on_sleep:
            self.on_sleep(self.sleeps)


def run_decice(
    cwd: Path, *args: str, timeout: float = 1800, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``decice ARGS`` in ``cwd`` (this interpreter), output captured, never raising."""
    return run_captured([*DECICE, *args], cwd=cwd, timeout=timeout, env=env)


def assert_plan_refuses(path: Path, cwd: Path, line: int, message: str) -> None:
    """``decice plan -f path`` in ``cwd`` exits 2 (bad input) naming ``path:line:`` and
    ``message``, without a traceback, and touches nothing (no ``cwd/.decice``)."""
    result = run_decice(cwd, "plan", "-f", str(path))
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert f"{path}:{line}:" in result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (cwd / ".decice").exists(), "bad input must touch nothing"


def run_captured(
    argv: Sequence[str],
    *,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``argv`` with ``input`` on stdin, output captured as text, never raising."""
    environ = None if env is None else dict(env)
    return subprocess.run(
        argv, input=input, capture_output=True, text=True, cwd=cwd, timeout=timeout, env=environ
    )


# the add-on versions a play of the collection's roles loads (roles/common)
VERSIONS_FILE = REPO / "ansible_collections/decice/hybrid/roles/common/vars/main/versions.yml"


def checkout_ansible_env(**settings: str) -> dict[str, str]:
    """This environment without its ``ANSIBLE_*`` variables, with the checkout's
    ansible.cfg, no colour, and ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", **settings)
    return env


def local_play(tasks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``tasks`` as one play on localhost (local connection, no facts, VERSIONS_FILE
    loaded)."""
    return {
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars_files": [str(VERSIONS_FILE)],
        "tasks": list(tasks),
    }


def run_playbook(inventory: str, name: str | Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``ansible-playbook -i INVENTORY playbooks/NAME.yml ARGS`` from the checkout (NAME a
    Path: that playbook), with its ansible.cfg, no colour, one JSON line per result; never
    raising."""
    env = checkout_ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    playbook = str(name) if isinstance(name, Path) else f"playbooks/{name}.yml"
    argv = [str(BIN / "ansible-playbook"), "-i", inventory, playbook, *args]
    return run_captured(argv, cwd=REPO, env=env, timeout=900)


def localhost_recap(stdout: str) -> dict[str, int]:
    """The PLAY RECAP counts of ``localhost`` (ok, changed, failed, ...); {} when absent."""
    recap = re.search(r"localhost\s+:\s+(.*)", stdout)
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", recap.group(1))} if recap else {}


def run_tasks(
    inventory: str, path: Path, tasks: Sequence[Mapping[str, Any]], *args: str
) -> tuple[int, str, dict[str, int]]:
    """``tasks`` as one play on localhost (local connection, the collection's versions.yml
    loaded), written to ``path`` and run with ``run_playbook``: exit code, output, recap."""
    path.write_text(yaml.safe_dump([local_play(tasks)]))
    result = run_playbook(inventory, path, *args)
    return result.returncode, result.stdout + result.stderr, localhost_recap(result.stdout)


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text.rsplit(")", 1)[1].split()[0] not in {"Z", "X"}


def run_record(
    run_id: str = "r",
    *,
    command: str = "up",
    target: str = "sim",
    host: str = "h",
    spec: str = "s",
    spec_sha256: str = "",
    artifacts: str = "",
) -> records.RunRecord:
    """A fresh run record owned by this process (no argv, no phases yet)."""
    return records.RunRecord(
        id=run_id,
        command=command,
        argv=[],
        pid=os.getpid(),
        host=host,
        spec=spec,
        spec_sha256=spec_sha256,
        target=target,
        artifacts=artifacts,
    )


def lab_info(state_dir: Path, *, node_state: str = "unknown", **fields: Any) -> LabInfo:
    """A lab record: lab ``x`` of one node, node1 (10.0.0.11, container ``x-node1``, in
    ``node_state``), recorded in ``state_dir``; ``fields`` add to or replace the rest."""
    values: dict[str, Any] = {
        "name": "x",
        "nodes": [LabNode("node1", "10.0.0.11", "x-node1", state=node_state)],
        "network": "x-net",
        "subnet": "10.0.0.0/24",
        "image": "img",
        "state_dir": str(state_dir),
        "inventory": "i",
        "ssh_config": "s",
        "ssh_key": "k",
    }
    return LabInfo(**{**values, **fields})


def cluster_state(nodes: Iterable[Any], pods: Iterable[Any] = ()) -> ClusterState:
    """A scheduler cluster state holding ``nodes``, then ``pods``."""
    state = ClusterState()
    for node in nodes:
        state.add_node(node)
    for pod in pods:
        state.add_pod(pod)
    return state


def sim_spec(name: str, *groups: tuple[str, int, str]) -> str:
    """A sim-target spec's text; each group is (name prefix, count, capacity as an inline
    YAML mapping's inside, e.g. ``cpu: "4", memory: 8Gi``)."""
    lines = [f"name: {name}", "target: sim", "sim:", "  nodes:"]
    for prefix, count, capacity in groups:
        lines += [
            f"    - name_prefix: {prefix}",
            f"      count: {count}",
            f"      capacity: {{{capacity}}}",
        ]
    return "\n".join(lines) + "\n"


# A per-namespace sysctl that neither decice's defaults nor podman (whose networks turn
# net.ipv4.ip_forward on when a lab starts, possibly while a local test runs) touch: the
# local tests set it to the value it has, so prepare changes nothing even when it runs.
HARMLESS_SYSCTL = "net.ipv4.tcp_fin_timeout"


def harmless_sysctl() -> tuple[str, str]:
    """(name, current value) of HARMLESS_SYSCTL on this machine."""
    path = Path("/proc/sys") / HARMLESS_SYSCTL.replace(".", "/")
    return HARMLESS_SYSCTL, path.read_text().strip()


def local_spec(name: str, *extra_vars: str) -> str:
    """A static-target spec's text: this machine its one host (control plane and etcd,
    connection local); each of ``extra_vars`` is one more ``key: value`` line of its vars."""
    lines = [
        f"name: {name}",
        "target: static",
        "hosts:",
        "  - name: localhost",
        "    roles: [control_plane, etcd]",
        "    vars:",
        "      ansible_connection: local",
    ]
    lines += [f"      {line}" for line in extra_vars]
    return "\n".join(lines) + "\n"


# local_spec vars whose prepare phase changes one sysctl (to be formatted with a harmless
# ``sysctl`` and its ``value``) and files under ``work`` only, nothing kernel-wide; the
# baseline tracks ``{work}/tracked``
CONTAINED_PREPARE = (
    "prepare_kernel_wide: false",
    "prepare_swap_off: false",
    "prepare_modules: []",
    'prepare_sysctls: {{"{sysctl}": "{value}"}}',
    "prepare_sysctl_file: {work}/90-decice.conf",
    "prepare_modules_file: {work}/decice.conf",
    "baseline_paths: [{work}/tracked]",
)


# a running pod's conditions (type: status), as a kubelet reports them
RUNNING_POD_CONDITIONS = {
    "Initialized": "True",
    "Ready": "True",
    "ContainersReady": "True",
    "PodScheduled": "True",
}


# Kubespray's group_vars/all from decice for Kubernetes 1.32.10, no mirror and no registry
# (decice.kubespray.render.group_vars): its HPC-safe reset and sysctl file
KUBESPRAY_ALL_VARS = {
    "kube_version": "1.32.10",
    "container_manager": "containerd",
    "flush_iptables": False,
    "reset_restart_network": False,
    "override_system_hostname": False,
    "sysctl_file_path": "/etc/sysctl.d/99-kubespray.conf",
}


def pod_manifest(
    name: str, *, scheduler: str | None = None, resources: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A Pod of one container ``c`` (image ``x``) as the API takes it."""
    container: dict[str, Any] = {"name": "c", "image": "x"}
    if resources is not None:
        container["resources"] = dict(resources)
    spec: dict[str, Any] = {} if scheduler is None else {"schedulerName": scheduler}
    spec["containers"] = [container]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def interlink_request(
    uid: str,
    spec: Mapping[str, Any],
    annotations: Mapping[str, str] | None = None,
    delivered: Sequence[Mapping[str, Any]] | None = None,
) -> CreateRequest:
    """interLink's /create request for pod ns/p (``uid``) with ``spec`` and
    ``annotations``; ``delivered``: what it carries per container (its ConfigMaps, Secrets,
    projected volumes), absent when None."""
    meta = {"name": "p", "namespace": "ns", "uid": uid, "annotations": dict(annotations or {})}
    body: dict[str, Any] = {"pod": {"metadata": meta, "spec": dict(spec)}}
    if delivered is not None:
        body["container"] = list(delivered)
    return parse_create(body)


def interlink_pod(
    uid: str,
    containers: list[dict[str, Any]],
    ann: Mapping[str, str] | None = None,
    *,
    init: list[dict[str, Any]] | None = None,
    delivered: Sequence[Mapping[str, Any]] | None = None,
    **spec: Any,
) -> PodSpec:
    """The pod of :func:`interlink_request` (``uid``, annotations ``ann``, ``delivered``)
    as the plugin parses it: ``containers``, ``init`` containers and ``spec``'s fields."""
    full = {"containers": containers, "initContainers": init or [], **spec}
    return parse_pod(interlink_request(uid, full, ann, delivered))


def crd_manifest(
    group: str, kind: str, plural: str, schema: dict[str, Any], **version_extra: Any
) -> dict[str, Any]:
    """A namespaced CustomResourceDefinition with one served and stored version, v1."""
    version = {"name": "v1", "served": True, "storage": True, **version_extra}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural},
            "scope": "Namespaced",
            "versions": [{**version, "schema": {"openAPIV3Schema": schema}}],
        },
    }


def tunnel_key_options(port: int = 3000) -> str:
    """The authorized_keys options the interlink role gives a virtual node's tunnel key on
    its bastion (roles/interlink/vars/main.yml), for ``port``."""
    path = REPO / "ansible_collections/decice/hybrid/roles/interlink/vars/main.yml"
    template = str(yaml.safe_load(path.read_text())["interlink__key_options"])
    return template.replace("{{ interlink__tunnel_port }}", str(port)).strip()


@contextlib.contextmanager
def upstream_standins(
    mirror: Path, work: Path, artifacts: Mapping[str, Mapping[str, Any]], helm: str
) -> Iterator[dict[str, Any]]:
    """scripts/upstream_standins.py's stand-ins for the upstream sources of ``artifacts``
    (versions.yml ``<component>.artifact``), built from the mirror's real charts: HTTP for
    each ``url`` and tag-archive ``source``, Debian's docker-registry for each ``oci``.
    Yields the spec's ``upstream`` section that points at them."""
    require(shutil.which("docker-registry") is not None, "docker-registry (Debian package)")
    with _STANDINS.standins(mirror, work, artifacts, helm) as section:
        yield section


def resolve_task(name: str, artifact: Any, **variables: Any) -> dict[str, Any]:
    """A task running the add-on engine's resolve step for ``artifact`` (a mapping, or a
    template such as ``"{{ decice_versions.volcano.artifact }}"``) as add-on ``name``."""
    return {
        "name": f"Resolve {name}",
        "ansible.builtin.include_role": {
            "name": "decice.hybrid.addon_engine",
            "tasks_from": "resolve.yml",
        },
        "vars": {"addon_engine_name": name, "addon_engine_artifact": artifact, **variables},
    }


def run_local_json(
    path: Path, tasks: Sequence[Mapping[str, Any]], extra: Mapping[str, Any]
) -> dict[str, Any]:
    """``tasks`` as one play on localhost (local connection, this interpreter, the
    collection's versions.yml loaded), written to ``path`` and run from the checkout with
    the JSON callback (custom stats shown) and ``extra`` as extra vars: the callback's
    document. Fails the test when ansible-playbook fails."""
    path.write_text(json.dumps([local_play(tasks)]))  # JSON is YAML
    env = checkout_ansible_env(ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_SHOW_CUSTOM_STATS="1")
    variables = {"ansible_python_interpreter": sys.executable, **extra}
    result = run_captured(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", str(path), "-e",
         json.dumps(variables)],
        cwd=REPO, env=env, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr
    return dict(json.JSONDecoder().raw_decode(result.stdout)[0])


def last_debug_json(document: Mapping[str, Any]) -> Any:
    """The JSON text the play's last task (a debug ``msg``) printed, parsed."""
    return json.loads(document["plays"][0]["tasks"][-1]["hosts"]["localhost"]["msg"])
