"""The lab's user ``decice`` and its shared directory (the parts that need no container)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from decice.lab import users
from tests.support import lab_info

pytestmark = pytest.mark.unit


def test_user_script_is_valid_shell_with_fixed_ids():
    script = users.user_script("ssh-ed25519 AAAA lab key; $(touch /x)\n")
    assert subprocess.run(["sh", "-n", "-c", script], check=False).returncode == 0
    assert "groupadd -g 1500 decice" in script
    assert "useradd -u 1500 -g 1500 -m -d /home/decice -s /bin/bash decice" in script
    # the key is one quoted word: nothing in it is run by the node's shell
    assert "'ssh-ed25519 AAAA lab key; $(touch /x)'" in script
    assert "chmod 600 /home/decice/.ssh/authorized_keys" in script


def test_user_script_is_idempotent_by_guard():
    script = users.user_script("k")
    assert "getent group decice >/dev/null ||" in script
    assert "id -u decice >/dev/null 2>&1 ||" in script


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to uid 1500 needs root, as labs do")
def test_shared_dir_is_owned_by_the_lab_user(tmp_path: Path):
    path = users.make_shared_dir(tmp_path)
    assert path == tmp_path / "shared"
    assert (path.stat().st_uid, path.stat().st_gid) == (1500, 1500)
    assert path.stat().st_mode & 0o777 == 0o755
    assert users.shared_mount(tmp_path) == f"{path}:/shared"


def test_a_lab_recorded_without_user_and_shared_dir_is_not_healthy(tmp_path: Path):
    from decice.lab.lab import _healthy
    from decice.lab.model import LabInfo

    known = tmp_path / "known_hosts"
    known.write_text("")
    info = lab_info(tmp_path, node_state="running", known_hosts=str(known))
    assert not _healthy(info)  # made before labs had user decice and /shared: recreated
    shared = tmp_path / "shared"
    shared.mkdir()
    with_shared = LabInfo(**{**info.to_dict(), "nodes": info.nodes, "shared_dir": str(shared)})
    assert _healthy(with_shared)
    shared.rmdir()
    assert not _healthy(with_shared)
