"""decice runs Ansible with the forks of the checkout's ansible.cfg, not Ansible's default 5."""

from __future__ import annotations

import configparser

import pytest

from decice import runner
from tests.support import REPO

pytestmark = pytest.mark.unit


def test_forks_as_ansible_cfg_and_overridable(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "ansible.cfg")
    monkeypatch.delenv("ANSIBLE_FORKS", raising=False)
    assert runner.ansible_env()["ANSIBLE_FORKS"] == cfg["defaults"]["forks"] == str(runner.FORKS)
    monkeypatch.setenv("ANSIBLE_FORKS", "3")
    assert runner.ansible_env()["ANSIBLE_FORKS"] == "3"
