"""ssh masters: one directory per inventory content, short whatever HOME is, private to the
user."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from decice import runner
from decice.errors import RunFailedError

pytestmark = pytest.mark.unit

# a socket path has at most 107 bytes; ssh adds 17 while it creates one and Ansible's name
# of a master is 10 characters
SOCKET_ROOM = 107 - 17 - 1 - 10


@pytest.fixture(autouse=True)
def _no_runtime_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)


def test_one_directory_per_inventory_short_and_private(tmp_path: Path) -> None:
    one, two = tmp_path / "lab-a" / "inventory.yml", tmp_path / "lab-b" / "inventory.yml"
    first = runner.control_path_dir(one, base=tmp_path)
    assert runner.control_path_dir(one, base=tmp_path) == first  # same inventory, same masters
    assert runner.control_path_dir(two, base=tmp_path) != first
    assert first.parent == tmp_path / f"decice-ssh-{os.getuid()}"
    for path in (first, first.parent):
        assert path.is_dir() and path.stat().st_mode & 0o777 == 0o700
    # the default base: short enough for any inventory, whatever HOME is
    worst = Path(str(runner.SSH_CONTROL_BASE)) / "decice-ssh-4294967294" / ("0" * 8)
    assert len(str(worst)) <= SOCKET_ROOM, worst


def test_inventories_of_the_same_content_share_their_masters(tmp_path: Path) -> None:
    """Each command writes its inventory into its own run directory: the same hosts with the
    same settings share masters (reset, then verify), any other content does not."""
    inventories = [tmp_path / run / "inventory.yml" for run in ("run-1", "run-2", "run-3")]
    for inventory, text in zip(
        inventories, ["hosts: {a: 1}\n", "hosts: {a: 1}\n", "hosts: {a: 2}\n"], strict=True
    ):
        inventory.parent.mkdir()
        inventory.write_text(text)
    dirs = [runner.control_path_dir(inventory, base=tmp_path) for inventory in inventories]
    assert dirs[0] == dirs[1] != dirs[2]


def test_the_runtime_dir_is_preferred(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    cpdir = runner.control_path_dir(tmp_path / "inventory.yml", base=tmp_path / "unused")
    assert cpdir.parent == runtime / f"decice-ssh-{os.getuid()}"
    assert not (tmp_path / "unused").exists()


@pytest.mark.parametrize("bad", ["open", "symlink"])
def test_a_directory_others_could_use_is_refused(tmp_path: Path, bad: str) -> None:
    user_dir = tmp_path / f"decice-ssh-{os.getuid()}"
    if bad == "open":
        user_dir.mkdir(mode=0o700)
        user_dir.chmod(0o777)
    else:
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        user_dir.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RunFailedError, match=f"{user_dir}.*not a private directory.*remove it"):
        runner.control_path_dir(tmp_path / "inventory.yml", base=tmp_path)
    assert not (tmp_path / "elsewhere").exists() or not any((tmp_path / "elsewhere").iterdir())


def test_a_base_it_cannot_write_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    with pytest.raises(RunFailedError, match=f"in {missing}: .*ANSIBLE_SSH_CONTROL_PATH_DIR"):
        runner.control_path_dir(tmp_path / "inventory.yml", base=missing)


def test_a_directory_the_user_set_stands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "SSH_CONTROL_BASE", tmp_path)
    monkeypatch.delenv(runner.CONTROL_PATH_ENV, raising=False)
    inventory = tmp_path / "inventory.yml"
    assert runner.control_path_env(inventory, {}) == {
        runner.CONTROL_PATH_ENV: str(runner.control_path_dir(inventory))
    }
    assert runner.control_path_env(inventory, {runner.CONTROL_PATH_ENV: "/mine"}) == {}
    monkeypatch.setenv(runner.CONTROL_PATH_ENV, "/mine")
    assert runner.control_path_env(inventory, {}) == {}


def test_directories_empty_for_an_hour_are_swept(tmp_path: Path) -> None:
    """Each inventory ever used leaves a directory once its masters expire; the next run
    removes those that have been empty for SSH_CONTROL_STALE_S and nothing else."""
    user_dir = tmp_path / f"decice-ssh-{os.getuid()}"
    user_dir.mkdir(mode=0o700)
    stale = runner.time.time() - runner.SSH_CONTROL_STALE_S - 60
    old_empty, old_busy, fresh, not_dir = (user_dir / n for n in ("aaaa", "bbbb", "cccc", "f"))
    for path in (old_empty, old_busy, fresh):
        path.mkdir(mode=0o700)
    (old_busy / "socket").write_text("")  # stands for a live master's socket
    not_dir.write_text("")
    for path in (old_empty, old_busy, not_dir):
        os.utime(path, (stale, stale))
    mine = runner.control_path_dir(tmp_path / "inventory.yml", base=tmp_path)
    assert sorted(p.name for p in user_dir.iterdir()) == sorted(["bbbb", "cccc", "f", mine.name])
    # this run's own directory, however old, is kept and marked as in use
    os.utime(mine, (stale, stale))
    assert runner.control_path_dir(tmp_path / "inventory.yml", base=tmp_path) == mine
    assert mine.is_dir() and mine.stat().st_mtime > stale + 60
