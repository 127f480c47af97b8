"""decice.hybrid.interlink on a SLURM lab node as the lab's non-root user: the plugin
answers with its token, a second run changes nothing, a dead plugin is started again by
the next run, and uninstall cancels a job still running and leaves nothing (no process,
no file, no decice-* job in squeue, no endpoint file, no token on the controller).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from decice import lab, paths
from tests.support import BIN, REPO, require, run_captured, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.addons]

NODE = "hpc-r"
PORT = 4711


def _ssh(info: lab.LabInfo, command: str) -> subprocess.CompletedProcess[str]:
    """``command`` on node1 as the lab's user, through the lab's ssh config."""
    host = info.nodes[0].name
    return run_captured(["ssh", "-F", info.ssh_config, f"{info.user}@{host}", command], timeout=60)


def _recap_changed(stdout: str) -> int:
    found = re.search(r"^localhost\s+:.*\bchanged=(\d+)", stdout, re.MULTILINE)
    assert found, stdout[-3000:]
    return int(found.group(1))


def _wheels(directory: Path) -> Path:
    """The decice wheel, built once (other work may change the source tree between the
    role's runs), beside a pip wheel (the role's wheelhouse: no index asked per run)."""
    pip = [sys.executable, "-m", "pip"]
    for argv in (
        [*pip, "wheel", "--quiet", "--no-deps", "--wheel-dir", str(directory), str(REPO)],
        [*pip, "download", "--quiet", "--no-deps", "--dest", str(directory), "pip"],
    ):
        done = run_captured(argv, timeout=300)
        assert done.returncode == 0, done.stderr
    (wheel,) = directory.glob("decice-*.whl")
    return wheel


class Role:
    """Runs the role's entry points from a one-task playbook against the lab."""

    def __init__(self, info: lab.LabInfo, tmp: Path, endpoint: dict[str, Any]) -> None:
        self.state = tmp / "state"
        (self.state / "sim").mkdir(parents=True)
        self.extra_inventory = tmp / "controller.yml"
        self.extra_inventory.write_text(
            yaml.safe_dump(
                {
                    "all": {
                        "hosts": {
                            "localhost": {
                                "ansible_connection": "local",
                                "ansible_python_interpreter": sys.executable,
                            }
                        },
                        "children": {"decice_hpc": {"hosts": {info.nodes[0].name: None}}},
                    }
                }
            )
        )
        self.playbook = tmp / "interlink.yml"
        versions = paths.collection_dir() / "vars" / "versions.yml"
        self.playbook.write_text(
            yaml.safe_dump(
                [
                    {
                        "name": "Run decice.hybrid.interlink",
                        "hosts": "localhost",
                        "gather_facts": False,
                        "vars_files": [str(versions)],
                        "tasks": [
                            {
                                "name": "Run the entry point",
                                "ansible.builtin.include_role": {
                                    "name": "decice.hybrid.interlink",
                                    "tasks_from": "{{ entry }}.yml",
                                },
                            }
                        ],
                    }
                ]
            )
        )
        self.info = info
        self.runs = 0
        self.wheel = _wheels(tmp / "wheels")
        self.spec = {"target": "sim", "addons": {"interlink": {"endpoints": [endpoint]}}}

    def run(self, entry: str) -> subprocess.CompletedProcess[str]:
        extra = {
            "entry": entry,
            "decice_state_dir": str(self.state),
            "decice_spec": self.spec,
            "interlink_wheel": str(self.wheel),
            "interlink_wheelhouse": str(self.wheel.parent),
        }
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
        env.update(
            ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
            ANSIBLE_NOCOLOR="1",
            PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        )
        argv = [str(BIN / "ansible-playbook"), "-i", self.info.inventory]
        argv += ["-i", str(self.extra_inventory), str(self.playbook), "-e", json.dumps(extra)]
        done = run_captured(argv, cwd=REPO, env=env, timeout=300)
        self.runs += 1
        log = self.state.parent / f"run{self.runs}-{entry}.log"
        log.write_text(done.stdout + done.stderr)
        return done

    @property
    def token(self) -> str:
        return (self.state / "interlink" / f"{NODE}.token").read_text().strip()


def _get(url: str, token: str | None) -> int:
    """The HTTP status of GET ``url``; 0 when nothing answers."""
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0  # nothing answers


def _create(url: str, token: str) -> str:
    uid = str(uuid.uuid4())
    pod = {
        "metadata": {"name": "sleeper", "namespace": "default", "uid": uid},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["sleep", "600"],
                    "resources": {"limits": {"cpu": "1", "memory": "64Mi"}},
                }
            ]
        },
    }
    body = json.dumps({"pod": pod, "container": [{"name": "main"}]}).encode()
    request = urllib.request.Request(f"{url}/create", data=body, method="POST")
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as answer:
        created = json.loads(answer.read())
    return str(created["PodJID"])


def _jobs(info: lab.LabInfo) -> list[str]:
    out = _ssh(info, f"squeue --noheader --user {info.user} --format '%i %j %T'")
    assert out.returncode == 0, out.stderr
    return [line for line in out.stdout.splitlines() if " decice-" in line]


def test_install_is_idempotent_restarts_a_dead_plugin_and_uninstall_leaves_nothing(
    slurm_cluster: lab.LabInfo, tmp_path: Path
) -> None:
    info = slurm_cluster
    require(bool(info.user and info.shared_mount), "the lab has no non-root user or /shared")
    node = info.nodes[0]
    data_dir = f"{info.shared_mount}/interlink-role-{os.getpid()}"
    endpoint = {
        "node": NODE,
        "login_host": node.name,
        "user": info.user,
        "port": PORT,
        "partition": "lab",
        "account": None,
        "data_dir": data_dir,
        "runtime": "bare",
    }
    role = Role(info, tmp_path, endpoint)
    url = f"http://{node.ip}:{PORT}"
    installed = False
    try:
        first = role.run("main")
        installed = True
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
        token = role.token
        assert token not in first.stdout + first.stderr
        token_file = role.state / "interlink" / f"{NODE}.token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        sim_file = role.state / "sim" / "interlink.json"
        assert sim_file.stat().st_mode & 0o777 == 0o600
        assert json.loads(sim_file.read_text()) == {
            "nodes": {NODE: {"url": url, "token_file": str(token_file)}}
        }
        assert _get(f"{url}/ping", token) == 200
        assert _get(f"{url}/ping", None) == 401

        # rootless: the plugin runs as the lab user; its files are private to it
        ps = _ssh(info, "ps -o user=,args= -u $(id -u) | grep '[d]ecice-interlink-slurm serve'")
        assert ps.returncode == 0 and ps.stdout.split()[0] == info.user, ps.stdout + ps.stderr
        home = f"/home/{info.user}/.local/share/decice-interlink/{NODE}"
        modes = _ssh(info, f"stat -c '%a %U %n' {home} {home}/token {data_dir}")
        assert modes.returncode == 0, modes.stderr
        assert [line.split()[:2] for line in modes.stdout.splitlines()] == [
            ["700", info.user],
            ["600", info.user],
            ["700", info.user],
        ]
        assert _ssh(info, f"test ! -e {home}/venv/bin/pip").returncode == 0  # --without-pip

        second = role.run("main")
        assert second.returncode == 0, second.stdout[-4000:]
        assert _recap_changed(second.stdout) == 0, second.stdout[-4000:]

        # a dead plugin is started again by the next run
        assert _ssh(info, f"kill $(cat {home}/plugin.pid)").returncode == 0
        wait_for("the plugin to stop", lambda: _get(f"{url}/ping", token) != 200, timeout=20)
        third = role.run("main")
        assert third.returncode == 0, third.stdout[-4000:]
        assert _recap_changed(third.stdout) > 0
        assert _get(f"{url}/ping", token) == 200

        jid = _create(url, token)
        wait_for("the job in squeue", lambda: any(j.startswith(f"{jid} ") for j in _jobs(info)))

        started = time.monotonic()
        gone = role.run("uninstall")
        installed = False
        assert gone.returncode == 0, gone.stdout[-4000:] + gone.stderr[-2000:]
        cancel = gone.stdout.split("Cancel every SLURM job", 1)[1]
        outcome = re.search(r"^(changed|ok|skipping|fatal)", cancel, re.MULTILINE)
        assert outcome is not None and outcome.group(1) == "changed", cancel[:2000]
        assert token not in gone.stdout + gone.stderr
        assert time.monotonic() - started < 180
        assert _jobs(info) == []
        left = _ssh(
            info,
            f"ls -d /home/{info.user}/.local/share/decice-interlink {data_dir} 2>/dev/null; "
            "pgrep -u $(id -u) -f '[d]ecice-interlink-slurm'; true",
        )
        assert left.stdout.strip() == "", left.stdout
        assert not sim_file.exists()
        assert not (role.state / "interlink").exists()
        assert _get(f"{url}/ping", token) == 0
    finally:
        if installed:
            role.run("uninstall")
