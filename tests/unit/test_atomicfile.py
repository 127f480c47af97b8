"""decice.atomicfile: a file is replaced whole, with the mode asked for, never through a link."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from decice import atomicfile

pytestmark = pytest.mark.unit


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_text_and_bytes_replace_the_file_0600_by_default(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_text("old\n")
    target.chmod(0o644)
    atomicfile.write(target, "néw\n")
    assert target.read_text(encoding="utf-8") == "néw\n" and mode(target) == 0o600
    atomicfile.write(target, b"\x00bytes")
    assert target.read_bytes() == b"\x00bytes" and mode(target) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_mode_is_the_one_asked_for_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        atomicfile.write(tmp_path / "public", "x", mode=0o644)
    finally:
        os.umask(old)
    assert mode(tmp_path / "public") == 0o644


def test_a_symlink_is_replaced_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    link = tmp_path / "link"
    link.symlink_to(victim)
    atomicfile.write(link, "mine\n")
    assert not link.is_symlink() and link.read_text() == "mine\n"
    assert victim.read_text() == "untouched\n"


def test_an_error_leaves_the_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f"
    target.write_text("old\n")

    def broken(fd: int) -> None:
        raise OSError(5, "disk gone")

    monkeypatch.setattr(atomicfile.os, "fsync", broken)
    with pytest.raises(OSError, match="disk gone"):
        atomicfile.write(target, "new\n")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_a_failing_directory_fsync_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def no_dir_open(path: object, flags: int, *args: int) -> int:
        if flags & os.O_DIRECTORY:
            raise PermissionError(13, "no")
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(atomicfile.os, "open", no_dir_open)
    atomicfile.write(tmp_path / "f", "x")
    assert (tmp_path / "f").read_text() == "x"


def test_open_nofollow_refuses_a_symlink_with_the_given_error(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("secret")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(ValueError, match=r"link is a symlink, not the log; remove it"):
        atomicfile.open_nofollow(link, os.O_RDONLY, ValueError, what="the log")
    fd = atomicfile.open_nofollow(tmp_path / "new", os.O_WRONLY | os.O_CREAT, ValueError, what="x")
    try:
        assert os.fstat(fd).st_mode & 0o777 == 0o600
        assert os.get_inheritable(fd) is False
    finally:
        os.close(fd)
