"""The bastion's known_hosts line the interlink role keeps (tasks/known_hosts.yml), run as
the role runs it after reading the host key from the bastion's container: bracketed
host:port for a NodePort, the plain host for port 22, the comment dropped, 0600, and a
second run changes nothing."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from tests.support import run_tasks

pytestmark = pytest.mark.unit

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTheTestOnly0123456789abcdefghij"


def _run(tmp_path: Path, port: int) -> tuple[int, str]:
    tasks = [
        {
            "name": "bastions",
            "ansible.builtin.include_role": {
                "name": "decice.hybrid.interlink",
                "tasks_from": "bastions.yml",
            },
        },
        {
            "name": "known_hosts",
            "ansible.builtin.include_role": {
                "name": "decice.hybrid.interlink",
                "tasks_from": "known_hosts.yml",
            },
            "vars": {
                "interlink__ep": {"node": "hpc-0"},
                "interlink__host_key_text": f"{KEY} root@bastion\n",
            },
        },
    ]
    (tmp_path / "state" / "interlink").mkdir(parents=True, exist_ok=True)
    spec = {
        "target": "lab",
        "addons": {
            "interlink": {
                "endpoints": [
                    {
                        "node": "hpc-0",
                        "login_host": "l",
                        "bastion_host": "10.0.0.5",
                        "bastion_port": port,
                    }
                ]
            }
        },
    }
    (tmp_path / "vars.json").write_text(
        json.dumps({"decice_state_dir": str(tmp_path / "state"), "decice_spec": spec})
    )
    rc, out, _ = run_tasks(
        "inventories/local", tmp_path / "play.yml", tasks, "-e", f"@{tmp_path / 'vars.json'}"
    )
    return rc, out


@pytest.mark.parametrize(("port", "host"), [(31022, "[10.0.0.5]:31022"), (22, "10.0.0.5")])
def test_the_known_hosts_line(tmp_path: Path, port: int, host: str) -> None:
    rc, out = _run(tmp_path, port)
    assert rc == 0, out[-3000:]
    path = tmp_path / "state" / "interlink" / "hpc-0.known_hosts"
    assert path.read_text() == f"{host} {KEY}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    rc, out = _run(tmp_path, port)
    assert rc == 0 and "changed=0" in out, out[-3000:]
