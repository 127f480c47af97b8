"""One ssh master per real address: two ssh configs that both call a host "node1" (two
labs) never share a ControlMaster socket, in decice's runs, Kubespray's and the checkout's
ansible.cfg (plain ansible-playbook)."""

from __future__ import annotations

import configparser
import shutil
from pathlib import Path

import pytest

from decice import runner
from decice.kubespray import run as kubespray_run
from tests.support import REPO, run_captured

pytestmark = pytest.mark.unit


def _control_path(ssh_config: Path, template: str) -> str:
    done = run_captured(
        ["ssh", "-G", "-F", str(ssh_config), "-o", f"ControlPath={template}", "node1"],
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("controlpath ")]
    return line.split(" ", 1)[1]


def test_every_ansible_run_keys_ssh_masters_by_the_real_address(tmp_path: Path) -> None:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(REPO / "ansible.cfg")
    assert cfg["ssh_connection"]["control_path"] == runner.SSH_CONTROL_PATH
    assert runner.ansible_env()["ANSIBLE_SSH_CONTROL_PATH"] == runner.SSH_CONTROL_PATH
    invocation = kubespray_run.invocation(
        "cluster.yml", tmp_path, tmp_path / "env", tmp_path / "hosts.yml"
    )
    assert invocation.env["ANSIBLE_SSH_CONTROL_PATH"] == runner.SSH_CONTROL_PATH

    if shutil.which("ssh") is None:
        pytest.skip("no ssh client here to expand %C")
    # what Ansible hands to ssh ("%(directory)s" filled, "%%" unescaped)
    template = runner.SSH_CONTROL_PATH % {"directory": "/cp"}
    paths = []
    for address in ("10.0.0.1", "10.0.0.2"):
        config = tmp_path / f"{address}.cfg"
        config.write_text(f"Host node1\n  HostName {address}\n  User root\n")
        paths.append(_control_path(config, template))
    assert paths[0] != paths[1] and all(p.startswith("/cp/") for p in paths)
