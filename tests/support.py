"""Test support: prerequisite handling that fails loudly in CI and skips elsewhere, the
one way tests wait for a condition, the decice CLI and ansible-playbook as subprocesses,
process liveness, run records, a filled scheduler cluster state, sim specs and pods, a
directory served over HTTP."""

from __future__ import annotations

import contextlib
import functools
import gzip
import http.server
import importlib.util
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from decice import records
from decice_scheduler.state import ClusterState

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DECICE = [sys.executable, "-m", "decice"]


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


def run_decice(
    cwd: Path, *args: str, timeout: float = 1800, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``decice ARGS`` in ``cwd`` (this interpreter), output captured, never raising."""
    return run_captured([*DECICE, *args], cwd=cwd, timeout=timeout, env=env)


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


def run_playbook(inventory: str, name: str | Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``ansible-playbook -i INVENTORY playbooks/NAME.yml ARGS`` from the checkout (NAME a
    Path: that playbook), with its ansible.cfg, no colour, one JSON line per result; never
    raising."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    playbook = str(name) if isinstance(name, Path) else f"playbooks/{name}.yml"
    argv = [str(BIN / "ansible-playbook"), "-i", inventory, playbook, *args]
    return subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False
    )


def localhost_recap(stdout: str) -> dict[str, int]:
    """The PLAY RECAP counts of ``localhost`` (ok, changed, failed, ...); {} when absent."""
    recap = re.search(r"localhost\s+:\s+(.*)", stdout)
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", recap.group(1))} if recap else {}


def run_tasks(
    inventory: str, path: Path, tasks: Sequence[Mapping[str, Any]], *args: str
) -> tuple[int, str, dict[str, int]]:
    """``tasks`` as one play on localhost (local connection, the collection's versions.yml
    loaded), written to ``path`` and run with ``run_playbook``: exit code, output, recap."""
    play = {
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars_files": [str(REPO / "ansible_collections/decice/hybrid/vars/versions.yml")],
        "tasks": list(tasks),
    }
    path.write_text(yaml.safe_dump([play]))
    result = run_playbook(inventory, path, *args)
    return result.returncode, result.stdout + result.stderr, localhost_recap(result.stdout)


@contextlib.contextmanager
def served(handler: Any) -> Iterator[str]:
    """An HTTP server with ``handler`` on 127.0.0.1 (a free port, a thread per request);
    yields the base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextlib.contextmanager
def served_directory(root: Path) -> Iterator[str]:
    """``root`` served read-only over HTTP on 127.0.0.1 (a free port); yields the base URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    with served(handler) as url:
        yield url


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


def repack_chart(
    src: Path, dest: Path, edit: Callable[[dict[str, bytes]], object] | None = None
) -> Path:
    """The chart archive ``src`` packed again the way another tool would (members in
    reverse order, other mtimes, owners and modes, GNU format, gzip level 1), so its bytes
    differ and its content does not; ``edit`` may first change the files (path below the
    top directory -> bytes) in place. Writes and returns ``dest``."""
    with tarfile.open(src, "r:gz") as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        top = members[0].name.split("/", 1)[0]
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in members}  # type: ignore[union-attr]
    if edit is not None:
        edit(files)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as out:
        for rel in sorted(files, reverse=True):
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size, info.mtime, info.mode = len(files[rel]), 1_000_000_000, 0o755
            info.uid, info.gid, info.uname, info.gname = 1000, 1000, "someone", "users"
            out.addfile(info, io.BytesIO(files[rel]))
    dest.write_bytes(gzip.compress(raw.getvalue(), compresslevel=1, mtime=0))
    return dest


UPSTREAM_HOSTS = ("https://github.com/", "https://raw.githubusercontent.com/")
UPSTREAM_REGISTRY = "oci://ghcr.io/"


@contextlib.contextmanager
def upstream_standins(
    mirror: Path, work: Path, artifacts: Mapping[str, Mapping[str, Any]], helm: str
) -> Iterator[dict[str, Any]]:
    """Loopback stand-ins for the upstream sources of ``artifacts`` (versions.yml
    ``<component>.artifact``), all built from the mirror's real charts: an HTTP server
    with each ``url`` (repacked, so only its content pin matches) and each ``source``
    (a GitHub-style tag archive: one top directory, the chart at its path, plus an
    unrelated file), and an OCI registry (Debian's docker-registry) holding each ``oci``
    chart pushed with helm. Yields the spec's ``upstream`` section that points at them."""
    registry = shutil.which("docker-registry")
    require(registry is not None, "docker-registry (Debian package docker-registry)")
    served = work / "served"
    for artifact in artifacts.values():
        chart = mirror / str(artifact["file"])
        if artifact.get("url"):
            dest = served / _below_host(str(artifact["url"]))
            dest.parent.mkdir(parents=True, exist_ok=True)
            repack_chart(chart, dest)
        if artifact.get("source"):
            source = artifact["source"]
            dest = served / _below_host(str(source["archive"]))
            dest.parent.mkdir(parents=True, exist_ok=True)
            _tag_archive(chart, dest, str(source["path"]))
    port = _free_port()
    config = work / "registry.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 0.1,
                "log": {"level": "error"},
                "storage": {"filesystem": {"rootdirectory": str(work / "registry")}},
                "http": {"addr": f"127.0.0.1:{port}"},
            }
        )
    )
    with (work / "registry.log").open("wb") as log:
        proc = subprocess.Popen(
            [str(registry), "serve", str(config)], stdout=subprocess.DEVNULL, stderr=log
        )
    try:
        wait_for("the OCI registry", lambda: _listening(port), timeout=30)
        for artifact in artifacts.values():
            if artifact.get("oci"):
                ref = str(artifact["oci"]["ref"])
                repo = ref[len(UPSTREAM_REGISTRY) :].rsplit("/", 1)[0]
                target = f"oci://127.0.0.1:{port}/{repo}"
                subprocess.run(
                    [helm, "push", "--plain-http", str(mirror / str(artifact["file"])), target],
                    check=True,
                    capture_output=True,
                    timeout=60,
                )
        with served_directory(served) as url:
            rewrite = {host: f"{url}/{host.split('://', 1)[1]}" for host in UPSTREAM_HOSTS}
            rewrite[UPSTREAM_REGISTRY] = f"oci://127.0.0.1:{port}/"
            yield {"rewrite": rewrite, "plain_http": True}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _below_host(url: str) -> str:
    """``https://host/a/b`` -> ``host/a/b`` (where the stand-in serves it)."""
    return url.split("://", 1)[1]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _tag_archive(chart: Path, dest: Path, path: str) -> None:
    """A tag archive (``<repo>-<tag>/...``) with ``chart``'s files at ``path``."""
    top = dest.name.removesuffix(".tar.gz").lstrip("v")
    with tarfile.open(chart, "r:gz") as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in members}  # type: ignore[union-attr]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as out:
        entries = {"README.md": b"the project\n", **{f"{path}/{k}": v for k, v in files.items()}}
        for rel, data in sorted(entries.items()):
            info = tarfile.TarInfo(f"upstream-{top}/{rel}")
            info.size, info.mode = len(data), 0o644
            out.addfile(info, io.BytesIO(data))
    dest.write_bytes(gzip.compress(raw.getvalue()))


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
    versions_file = REPO / "ansible_collections/decice/hybrid/vars/versions.yml"
    play = {"hosts": "localhost", "connection": "local", "gather_facts": False,
            "vars_files": [str(versions_file)], "tasks": list(tasks)}  # fmt: skip
    path.write_text(json.dumps([play]))  # JSON is YAML
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_SHOW_CUSTOM_STATS="1")  # fmt: skip
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
