"""The interlink role's real-cluster mode on a login host: the plugin behind its tunnel.

The role's own tasks, as `up` runs them after the chart (``bastions.yml``, the bundle,
``endpoint.yml`` handing each endpoint to ``decice.hybrid.interlink_endpoint``; then the
same with its ``uninstall.yml``), with ``interlink_cluster``
on, against the session's SLURM lab: login host node1 as the lab user, and lab node2's
sshd standing in for the release's ssh bastion (the chart's image cannot run here), with
the tunnel key authorized the way the chart's values authorize it. What the chart side
gives the role - the tunnel key and the bastion's known_hosts line on the controller -
is made by this test as ``cluster_install.yml``/``cluster_bastion.yml`` make it (those
run against a real apiserver in test_interlink_cluster.py). Asserted: the plugin serves
its unix socket only, with the tunnel flags and no token, in pilot mode with the
endpoint's pilot settings as flags; node2's loopback port reaches it; key and
known_hosts are 0600 on the login host; a second run changes nothing; uninstall leaves
no plugin, no tunnel ssh and no file.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from decice import lab
from tests.integration.labsupport import ssh
from tests.support import REPO, run_tasks, tunnel_key_options, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.addons]

NODE = "hpc-t"
DATA = "/shared/iltr/data"
OPTIONS = tunnel_key_options()
KEY_ARG = "IdentityFile=[/]home/decice/.local/share/decice-interlink/hpc-t/tunnel_key"


def _include(step: str, endpoint_step: str = "") -> dict[str, Any]:
    """The interlink role's ``step``; with ``endpoint_step``, its ``endpoint.yml`` per endpoint
    running that entry point of the endpoint role."""
    task: dict[str, Any] = {
        "name": endpoint_step or step,
        "ansible.builtin.include_role": {"name": "decice.hybrid.interlink", "tasks_from": step},
    }
    if endpoint_step:
        task["vars"] = {"interlink__endpoint_step": endpoint_step}
        task["loop"] = "{{ decice_spec.addons.interlink.endpoints }}"
        task["loop_control"] = {"loop_var": "interlink__ep"}
    return task


INSTALL = [
    _include("bastions.yml"),
    {
        "name": "scratch",
        "ansible.builtin.tempfile": {"state": "directory"},
        "register": "scratch",
        "changed_when": False,
    },
    {
        "name": "bundle",
        "ansible.builtin.include_role": {"name": "decice.hybrid.bundle"},
        "vars": {
            "bundle_project": "decice-interlink-slurm",  # as the role's main.yml builds it
            "bundle_dir": "{{ scratch.path }}",
            "bundle_source_dir": str(REPO),
            "bundle_controller_python": "{{ ansible_playbook_python }}",
        },
    },
    _include("endpoint.yml", "main.yml"),
    {
        "name": "drop scratch",
        "ansible.builtin.file": {"path": "{{ scratch.path }}", "state": "absent"},
        "changed_when": False,
    },
]
UNINSTALL = [_include("endpoint.yml", "uninstall.yml"), _include("verify.yml")]


@pytest.fixture(scope="module")
def setup(
    slurm_cluster: lab.LabInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    info = slurm_cluster
    tmp = tmp_path_factory.mktemp("il-role-tunnel")
    keys = tmp / "state" / "interlink"
    keys.mkdir(parents=True, mode=0o700)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / f"{NODE}.tunnel")],
        check=True,
    )
    node2 = [
        ln for ln in Path(info.known_hosts).read_text().splitlines() if ln.startswith("node2,")
    ]
    (keys / f"{NODE}.known_hosts").write_text("node2 " + " ".join(node2[0].split()[1:3]) + "\n")
    (keys / f"{NODE}.known_hosts").chmod(0o600)
    public = (keys / f"{NODE}.tunnel.pub").read_text().strip()
    ssh(info, "decice@node2", "cp ~/.ssh/authorized_keys ~/.ssh/authorized_keys.il-saved")
    ssh(info, "decice@node2", f"echo '{OPTIONS} {public}' >> ~/.ssh/authorized_keys")
    ssh(info, "decice@node1", f"mkdir -p {DATA}")
    varfile = tmp / "vars.json"
    varfile.write_text(
        json.dumps(
            {
                "decice_state_dir": str(tmp / "state"),
                "decice_spec": {
                    "target": "lab",
                    "addons": {
                        "interlink": {
                            "endpoints": [
                                {
                                    "node": NODE,
                                    "login_host": "node1",
                                    "user": info.user,
                                    "port": 4000,
                                    "partition": "lab",
                                    "account": None,
                                    "data_dir": DATA,
                                    "runtime": "bare",
                                    "bastion_host": "node2",
                                    "bastion_port": 22,
                                    # pilot mode's flags reach the plugin (no pod: no pilot)
                                    "mode": "pilot",
                                    "pilot": {
                                        "nodes": 2,
                                        "time": "10:00",
                                        "partition": "lab",
                                        "account": None,
                                        "max_pilots": 3,
                                        "idle_release": 30,
                                        "withdraw": 5,
                                    },
                                }
                            ]
                        }
                    },
                },
                # the stand-in bastion's user (the chart's is "interlink")
                "interlink__bastion_user": info.user,
            }
        )
    )
    try:
        yield {"info": info, "tmp": tmp, "varfile": varfile}
    finally:
        ssh(info, "decice@node1", f"pkill -u decice -f '{KEY_ARG}' || true", check=False)
        ssh(info, "decice@node2", "mv ~/.ssh/authorized_keys.il-saved ~/.ssh/authorized_keys")
        ssh(info, "decice@node1", "rm -rf /shared/iltr", check=False)


def _play(setup: dict[str, Any], name: str, tasks: list[dict]) -> tuple[int, str, dict[str, int]]:
    path = setup["tmp"] / f"{name}.yml"
    return run_tasks(setup["info"].inventory, path, tasks, "-e", f"@{setup['varfile']}")


def _ping(info: lab.LabInfo) -> dict | None:
    out = ssh(
        info,
        "decice@node2",
        "python3 -c 'import urllib.request; print(urllib.request.urlopen("
        '"http://127.0.0.1:3000/ping", timeout=5).read().decode())'
        "' 2>/dev/null || true",
    )
    return json.loads(out) if out else None


def test_up_runs_the_plugin_behind_its_tunnel(setup: dict[str, Any]) -> None:
    info = setup["info"]
    rc, out, _ = _play(setup, "install", INSTALL)
    assert rc == 0, out[-5000:]
    answer = wait_for("the plugin through the tunnel", lambda: _ping(info), timeout=30)
    assert answer["status"] == "ok"
    home = "/home/decice/.local/share/decice-interlink/hpc-t"
    argv = json.loads(ssh(info, "decice@node1", f"cat {home}/serve.json"))
    assert argv[argv.index("--listen") + 1] == f"unix:{home}/plugin.sock"
    assert argv[argv.index("--tunnel") + 1] == "decice@node2:22"
    assert "--token-file" not in argv
    pilot = argv[argv.index("--mode") :]
    assert pilot == [
        "--mode", "pilot", "--pilot-nodes", "2", "--pilot-time", "10:00", "--max-pilots", "3",
        "--idle-release", "30", "--withdraw", "5", "--pilot-partition", "lab",
    ]  # fmt: skip
    # no pilot yet, three allowed: the node offers one pilot of the lab's largest nodes
    assert answer["resources"]["cpu"] == "4", answer
    modes = ssh(info, "decice@node1", f"stat -c '%a %n' {home}/tunnel_key {home}/known_hosts")
    assert modes.splitlines() == [f"600 {home}/tunnel_key", f"600 {home}/known_hosts"]
    assert ssh(info, "decice@node1", f"test -e {home}/token && echo yes || echo no") == "no"
    rc, out, stats = _play(setup, "install", INSTALL)
    assert rc == 0 and stats.get("changed") == 0, out[-5000:]


def test_uninstall_leaves_no_plugin_tunnel_or_file(setup: dict[str, Any]) -> None:
    info = setup["info"]
    rc, out, _ = _play(setup, "uninstall", UNINSTALL)
    assert rc == 0, out[-5000:]
    assert ssh(info, "decice@node1", f"pgrep -u decice -f '{KEY_ARG}' || true") == ""
    assert _ping(info) is None
    assert ssh(info, "decice@node1", "ls ~/.local/share/decice-interlink 2>/dev/null || true") == ""
