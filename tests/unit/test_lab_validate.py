"""Bad input to the lab API fails at once, naming what is wrong and how to fix it."""

from __future__ import annotations

import pytest

from decice import lab
from decice.lab import host

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", ["", "Lab", "1lab", "lab_1", "a" * 31, "lab/x"])
def test_bad_names(tmp_path, name):
    with pytest.raises(lab.LabError, match="invalid lab name"):
        lab.create(name, 2, False, tmp_path)
    assert not (tmp_path / "lab").exists()


@pytest.mark.parametrize("count", [0, -1, 201])
def test_bad_node_counts(tmp_path, count):
    with pytest.raises(lab.LabError, match="invalid node count"):
        lab.create("lab1", count, False, tmp_path)


def test_status_of_unknown_lab_is_none(tmp_path):
    assert lab.status("nolab", tmp_path) is None


def test_missing_packages_without_root_name_the_fix(monkeypatch):
    monkeypatch.setattr(host.shutil, "which", lambda _cmd: None)
    monkeypatch.setattr(host.os, "geteuid", lambda: 1000)
    with pytest.raises(lab.LabError, match="apt-get install -y debootstrap podman"):
        host.ensure_commands({"podman": "podman", "debootstrap": "debootstrap"}, "lab nodes")


def test_present_commands_need_nothing(monkeypatch):
    monkeypatch.setattr(host.shutil, "which", lambda cmd: f"/usr/bin/{cmd}")
    monkeypatch.setattr(host, "run", lambda *a, **k: pytest.fail("must not install"))
    host.ensure_commands({"podman": "podman"}, "lab nodes")


def test_create_needs_root(tmp_path, monkeypatch):
    from decice.lab import lab as lab_module

    monkeypatch.setattr(lab_module.os, "geteuid", lambda: 1000)
    with pytest.raises(lab.LabError, match="need root"):
        lab.create("lab1", 1, False, tmp_path)
