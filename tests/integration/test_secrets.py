"""No secret on a command line or in the state dir: `up`, `down`, `reset` with planted tokens.

Tokens are planted in a host's vars (``ansible_become_password``), in the allocation's
vars, in the environment decice runs in, and in the user's kubeconfig (KUBECONFIG).
While the commands run, a thread samples the command line of every process on the
machine; afterwards the whole state dir (run records, inventories, ansible-runner's
artifacts) is searched. Neither may contain any token. On the sim target the
cluster-admin kubeconfig's key must not appear in any run's artifacts, and nowhere
in the state dir after `reset`.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest
import yaml

from decice.redact import REDACTED
from tests.integration.simsupport import require_sim
from tests.procwatch import ProcWatch
from tests.support import DECICE


def _token(what: str) -> str:
    return f"decicetok{what}{secrets.token_hex(6)}"


def _hits(root: Path, needles: Iterable[str]) -> list[str]:
    """``path: needle`` for every file under ``root`` holding one of ``needles``."""
    wanted = [n.encode() for n in needles]
    found = []
    for current, _dirs, files in os.walk(root):
        for name in files:
            path = Path(current) / name
            if path.is_symlink():
                continue
            data = path.read_bytes()
            found += [f"{path}: {n.decode()}" for n in wanted if n in data]
    return found


def _run_watched(
    cwd: Path, env: Mapping[str, str], *args: str, timeout: float = 900
) -> tuple[subprocess.CompletedProcess[str], ProcWatch]:
    """``decice ARGS`` with every process's command line sampled while it runs."""
    proc = subprocess.Popen(
        [*DECICE, *args],
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with ProcWatch(proc.pid) as watch:
        out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), watch


def _user_kubeconfig(path: Path, token: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://192.0.2.1:6443"}}],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    path.chmod(0o600)
    return path


def _assert_no_secret_left(state: Path, watch_cmdlines: set[str], tokens: list[str]) -> None:
    in_argv = [
        f"{token} in: {cmd[:200]}" for cmd in watch_cmdlines for token in tokens if token in cmd
    ]
    assert in_argv == []
    assert _hits(state, tokens) == []
    assert list(state.rglob("env/extravars")) == []  # removed when each run ended


@pytest.mark.local
def test_static_host_vars_env_and_kubeconfig_never_leak(tmp_path: Path) -> None:
    become, alloc, env_token, kube_token = (_token(w) for w in ("become", "alloc", "env", "kube"))
    (tmp_path / "decice.yaml").write_text(
        "name: secrets\n"
        "target: static\n"
        "allocation:\n"
        f"  vars: {{decice_test_note: {alloc}}}\n"
        "hosts:\n"
        "  - name: localhost\n"
        "    roles: [control_plane, etcd]\n"
        "    vars:\n"
        "      ansible_connection: local\n"
        f"      ansible_become_password: {become}\n"
    )
    env = {
        **os.environ,
        "DECICE_TEST_TOKEN": env_token,
        "KUBECONFIG": str(_user_kubeconfig(tmp_path / "user-kubeconfig", kube_token)),
    }
    seen: set[str] = set()
    up, watch = _run_watched(tmp_path, env, "up", "--only", "preflight", "--json")
    assert up.returncode == 0, up.stderr
    assert any("ansible-playbook" in cmd for cmd in watch.members.values())  # sampled it
    seen |= watch.cmdlines
    down, watch = _run_watched(tmp_path, env, "down", "--json")
    assert down.returncode in {0, 1}, down.stderr  # no cluster here: addons' scan fails
    seen |= watch.cmdlines
    reset, watch = _run_watched(tmp_path, env, "reset", "--yes", "--json")
    assert reset.returncode == 0, reset.stderr
    seen |= watch.cmdlines

    state = tmp_path / ".decice"
    _assert_no_secret_left(state, seen, [become, alloc, env_token, kube_token])

    record = json.loads(up.stdout)
    run_dir = Path(record["artifacts"])
    inv = yaml.safe_load((run_dir / "inventory.yml").read_text())
    host = inv["all"]["hosts"]["localhost"]
    assert host["ansible_connection"] == "local"  # how a host is reached is kept
    assert host["ansible_become_password"] == REDACTED
    assert host["decice_test_note"] == REDACTED
    command = json.loads((run_dir / "ansible/artifacts/preflight/command").read_text())
    at = command["command"].index("-e")
    assert command["command"][at + 1] == f"@{run_dir}/ansible/env/extravars"
    assert "DECICE_TEST_TOKEN" not in command["env"] and "HOME" not in command["env"]
    for path in state.rglob("*"):
        if not path.is_symlink():
            assert path.stat().st_mode & 0o077 == 0, path


@pytest.mark.sim
def test_sim_up_down_reset_leave_no_secret(tmp_path: Path) -> None:
    require_sim()
    alloc, env_token, kube_token = (_token(w) for w in ("alloc", "env", "kube"))
    (tmp_path / "decice.yaml").write_text(
        "name: simsecrets\n"
        "target: sim\n"
        "allocation:\n"
        f"  vars: {{decice_test_note: {alloc}}}\n"
        "sim:\n"
        "  nodes:\n"
        "    - {name_prefix: w, count: 2, capacity: {cpu: '4', memory: 8Gi}}\n"
    )
    env = {
        **os.environ,
        "DECICE_TEST_TOKEN": env_token,
        "KUBECONFIG": str(_user_kubeconfig(tmp_path / "user-kubeconfig", kube_token)),
    }
    state = tmp_path / ".decice"
    seen: set[str] = set()
    try:
        up, watch = _run_watched(tmp_path, env, "up", "--skip", "addons", "--json")
        seen |= watch.cmdlines
        assert up.returncode == 0, up.stderr
        admin = yaml.safe_load((state / "kubeconfig").read_text())
        admin_key = admin["users"][0]["user"]["client-key-data"]
        assert _hits(state / "runs", [admin_key]) == []
        down, watch = _run_watched(tmp_path, env, "down", "--json")
        seen |= watch.cmdlines
        assert down.returncode == 0, down.stderr
        assert _hits(state / "runs", [admin_key]) == []
    finally:
        reset, watch = _run_watched(tmp_path, env, "reset", "--yes", "--json")
        seen |= watch.cmdlines
    assert reset.returncode == 0, reset.stderr
    _assert_no_secret_left(state, seen, [alloc, env_token, kube_token, admin_key])
