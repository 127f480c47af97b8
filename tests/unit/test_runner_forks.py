"""decice runs Ansible with the settings of the checkout's ansible.cfg that matter for its
speed: the forks (not Ansible's default 5) and the controller's poll of its workers (10 ms,
not 1 ms; only from a config file, which decice writes unless the user has one)."""

from __future__ import annotations

import configparser
import stat
from pathlib import Path

import pytest

from decice import runner
from decice.runner import HostResult, PlaybookRun, run_playbook
from tests.support import REPO

pytestmark = pytest.mark.unit


def _checkout_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "ansible.cfg")
    return cfg


def test_forks_as_ansible_cfg_and_overridable(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _checkout_cfg()
    monkeypatch.delenv("ANSIBLE_FORKS", raising=False)
    assert runner.ansible_env()["ANSIBLE_FORKS"] == cfg["defaults"]["forks"] == str(runner.FORKS)
    monkeypatch.setenv("ANSIBLE_FORKS", "3")
    assert runner.ansible_env()["ANSIBLE_FORKS"] == "3"


@pytest.fixture
def no_user_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ANSIBLE_CONFIG and no user config file; returns where one would be."""
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    home = tmp_path / "home" / ".ansible.cfg"
    monkeypatch.setattr(runner, "USER_CONFIGS", (home, tmp_path / "etc" / "ansible.cfg"))
    return home


def test_the_poll_setting_is_the_checkouts_in_a_private_file(
    no_user_config: Path, tmp_path: Path
) -> None:
    pdd = tmp_path / "pdd"
    pdd.mkdir()
    env = runner.poll_config_env(pdd, {})
    config = Path(env["ANSIBLE_CONFIG"])
    assert config == pdd / "ansible.cfg"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    written = configparser.ConfigParser()
    written.read(config)
    assert dict(written["defaults"]) == {
        "internal_poll_interval": _checkout_cfg()["defaults"]["internal_poll_interval"]
    }


@pytest.mark.parametrize("where", ["env", "environ", "file"])
def test_a_users_own_config_is_left_alone(
    where: str, no_user_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env: dict[str, str] = {}
    if where == "env":  # a run's own (Kubespray's ansible.cfg)
        env["ANSIBLE_CONFIG"] = "/somewhere/ansible.cfg"
    elif where == "environ":
        monkeypatch.setenv("ANSIBLE_CONFIG", "/somewhere/ansible.cfg")
    else:
        no_user_config.parent.mkdir(parents=True)
        no_user_config.write_text("[defaults]\nforks = 7\n")
    assert runner.poll_config_env(tmp_path, env) == {}
    assert not (tmp_path / "ansible.cfg").exists()


def test_a_run_polls_every_10_ms(no_user_config: Path, tmp_path: Path) -> None:
    """Through ansible-runner, the value Ansible itself reads."""
    (tmp_path / "play.yml").write_text(
        '- name: "alpha: poll"\n  hosts: localhost\n  gather_facts: false\n  tasks:\n'
        "    - name: Show the poll\n      ansible.builtin.debug:\n"
        "        msg: \"poll={{ lookup('ansible.builtin.config', "
        "'DEFAULT_INTERNAL_POLL_INTERVAL') }}\"\n"
    )
    (tmp_path / "inv.yml").write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        '      ansible_python_interpreter: "{{ ansible_playbook_python }}"\n'
    )
    run = PlaybookRun(
        playbook=tmp_path / "play.yml", inventory=tmp_path / "inv.yml", private_data_dir=tmp_path
    )
    results = [e for e in run_playbook(run) if isinstance(e, HostResult)]
    assert [r.status for r in results] == ["ok"]
    stdout = next(tmp_path.glob("artifacts/*/stdout")).read_text()
    assert "poll=0.01" in stdout, stdout[-2000:]
