"""decice.redact: what a run leaves in its directory holds no secret."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml

from decice import redact
from decice.redact import REDACTED

pytestmark = pytest.mark.unit

INVENTORY = """\
all:
  vars:
    cluster_token: !unsafe "s3cret-group"
  hosts:
    cp1:
      ansible_host: 192.0.2.10
      ansible_user: hpc
      ansible_become_password: !unsafe "s3cret-become"
      ip: 10.1.0.10
  children:
    kube_node:
      hosts:
        cp1: null
      vars:
        token: s3cret-child
"""


def test_inventory_keeps_hosts_groups_and_how_hosts_are_reached(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yml"
    path.write_text(INVENTORY)
    redact.redact_inventory_file(path)
    text = path.read_text()
    assert "s3cret" not in text
    data = yaml.safe_load(text)
    assert data["all"]["hosts"]["cp1"] == {
        "ansible_host": "192.0.2.10",
        "ansible_user": "hpc",
        "ansible_become_password": REDACTED,
        "ip": "10.1.0.10",
    }
    assert data["all"]["vars"] == {"cluster_token": REDACTED}
    assert data["all"]["children"]["kube_node"] == {
        "hosts": {"cp1": None},
        "vars": {"token": REDACTED},
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("text", ["- a list\n", "key: [unclosed\n"])
def test_an_inventory_that_cannot_be_shown_safely_is_removed(tmp_path: Path, text: str) -> None:
    path = tmp_path / "inventory.yml"
    path.write_text(text)
    redact.redact_inventory_file(path)
    assert not path.exists()


def test_scrub_run_dir(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "kubespray" / "inventory").mkdir(parents=True)
    (run / "kubespray" / "inventory" / "hosts.yml").write_text(INVENTORY)
    (run / "inventory.yml").write_text(INVENTORY)
    for where in ("ansible", "kubespray/runner"):
        (run / where / "env").mkdir(parents=True)
        (run / where / "env" / "extravars").write_text("secret: s3cret-extra\n")
    facts = run / "ansible" / "artifacts" / "x"
    facts.mkdir(parents=True, mode=0o755)
    (facts / "stdout").write_text("out")
    (facts / "stdout").chmod(0o644)
    (facts / "tool").write_text("#!/bin/sh\n")
    (facts / "tool").chmod(0o755)
    redact.scrub_run_dir(run)
    assert not list(run.rglob("extravars"))
    for path in [run, *run.rglob("*")]:
        assert b"s3cret" not in (path.read_bytes() if path.is_file() else b"")
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() or path.name == "tool" else 0o600), path
