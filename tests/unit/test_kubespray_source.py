"""Kubespray source: tree digest pin, safe extraction, mirrors and transports, checksums,
atomic extraction, checkouts, the cache, facts read from a checkout."""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pydantic
import pytest

from decice import mirror as mirrors
from decice import versions
from decice.errors import EXIT_BAD_INPUT, InputError
from decice.kubespray import run, source, tree, venv
from decice.spec_model import MirrorSpec
from tests.kubespray_standin import (
    COMMIT,
    STANDIN,
    TAG,
    make_archive,
    pinned_to_standin,
    tree_digest,
)
from tests.support import DECICE, REPO, require, served_directory

pytestmark = pytest.mark.unit

REAL_ARCHIVE = REPO.parent / "shared" / "mirror" / "kubespray" / "kubespray-v2.29.1.tar.gz"
SCRIPT = REPO / "scripts" / "kubespray_tree_digest.py"
NAME = "kubespray-v2.29.1.tar.gz"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DECICE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(source.ENV_DIR, raising=False)


def pin(sha: str | None = None, commit: str | None = COMMIT, tree_sha: str | None = None):
    return source.Pin(TAG, "http://127.0.0.1:9/unreachable.tar.gz", sha, commit, tree_sha)


def standin_pin() -> source.Pin:
    return pin(tree_sha=tree_digest())


def cache_src(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "kubespray" / TAG / "src"


def pack(
    directory: Path,
    archive: Path,
    *,
    top: str = "kubespray-2.29.1",
    reverse: bool = False,
    mtime: int = 1_700_000_000,
    level: int = 9,
    fmt: int = tarfile.PAX_FORMAT,
    dirs: bool = True,
    file_mode: int | None = None,
    commit: str | None = COMMIT,
) -> Path:
    """``directory`` as a tar.gz with every packing detail under control."""
    paths = sorted(directory.rglob("*"), reverse=reverse)
    buffer = io.BytesIO()
    headers = {"comment": commit} if commit and fmt == tarfile.PAX_FORMAT else {}
    with tarfile.open(fileobj=buffer, mode="w", format=fmt, pax_headers=headers) as tar:
        for path in paths:
            if path.is_dir() and not path.is_symlink() and not dirs:
                continue
            info = tar.gettarinfo(str(path), f"{top}/{path.relative_to(directory)}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 1000, 1000, "u", "g"
            if info.isreg() and file_mode is not None:
                info.mode = file_mode | (info.mode & 0o100)
            if info.isreg():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(gzip.compress(buffer.getvalue(), compresslevel=level, mtime=mtime))
    return archive


def raw_archive(archive: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return archive


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info


# ---------------------------------------------------------------- the pinned tree digest


def test_the_real_mirror_archive_has_the_pinned_tree_digest(tmp_path):
    require(REAL_ARCHIVE.is_file(), f"the upstream mirror archive {REAL_ARCHIVE}")
    pinned = source.pin()
    assert pinned.tree_sha256 == versions.pinned()["kubespray"]["tree_sha256"]
    assert pinned.commit == COMMIT
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check", str(REAL_ARCHIVE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == f"{pinned.tree_sha256}  {REAL_ARCHIVE}\n"
    # the real flow: a local mirror holding it (no SHA256SUMS needed) is verified and placed
    mirror = tmp_path / "mirror"
    (mirror / "kubespray").mkdir(parents=True)
    (mirror / "kubespray" / NAME).symlink_to(REAL_ARCHIVE)
    got = source.ensure(pinned, mirrors.Mirror("path", str(mirror)))
    assert got.tree_sha256 == pinned.tree_sha256
    assert got.verified == (
        "tree sha256 verified (versions.yml); archive sha256 not listed (a local mirror "
        f"path you gave); commit {COMMIT}"
    )
    assert (got.path / "cluster.yml").is_file()
    assert (got.path / "library" / "kube.py").is_symlink()  # links inside the tree are kept


def test_digest_script_exit_codes(tmp_path):
    differs = subprocess.run(
        [sys.executable, str(SCRIPT), "--check", str(STANDIN)], capture_output=True, text=True
    )
    assert differs.returncode == 1
    assert f"tree sha256 {tree_digest()} is not the pinned" in differs.stdout
    unsafe = raw_archive(tmp_path / "bad.tar.gz", [(member("../x"), b"x")])
    refused = subprocess.run([sys.executable, str(SCRIPT), str(unsafe)], capture_output=True)
    assert refused.returncode == 2
    assert b"'..' component" in refused.stderr
    assert not (tmp_path / "x").exists()


def test_digest_is_the_documented_formula(tmp_path):
    root = tmp_path / "t"
    (root / "b").mkdir(parents=True)
    (root / "a.sh").write_bytes(b"#!/bin/sh\n")
    (root / "a.sh").chmod(0o755)
    (root / "b" / "c.txt").write_bytes(b"c")
    (root / "l").symlink_to("b/c.txt")
    (root / "empty").mkdir()
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref\n")

    def h(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    script = h(b"#!/bin/sh\n")
    text = f"x {script} a.sh\0f {h(b'c')} b/c.txt\0l {h(b'b/c.txt')} l\0".encode()
    assert tree.digest(root) == h(text)
    assert [(k, p) for k, p, _ in tree.entries(root)] == [
        ("x", b"a.sh"),
        ("f", b"b/c.txt"),
        ("l", b"l"),
    ]


def test_repacked_archive_gives_the_same_digest(tmp_path):
    """Order, mtimes, owners, gzip level, tar format, top dir name and directory members do
    not matter; GitHub's tarball and a `git archive` of the commit differ in such ways."""
    first = make_archive(tmp_path / "a" / NAME)
    second = pack(
        STANDIN,
        tmp_path / "b" / "kubespray" / NAME,
        top="kubespray-v2.29.1-repacked",
        reverse=True,
        mtime=1,
        level=1,
        fmt=tarfile.GNU_FORMAT,
        dirs=False,
        file_mode=0o600,
        commit=None,
    )
    assert first != mirrors.sha256_file(second)
    digests = []
    for archive in (tmp_path / "a" / NAME, second):
        scratch = tmp_path / f"x-{archive.parent.name}"
        scratch.mkdir()
        digests.append(tree.digest(tree.unpack(archive, scratch).top))
    assert digests == [tree_digest(), tree_digest()]
    got = source.ensure(standin_pin(), mirrors.Mirror("path", str(tmp_path / "b")))
    assert got.verified.startswith("tree sha256 verified (versions.yml)")
    assert got.tree_sha256 == tree_digest()


def _changed_byte(root: Path) -> None:
    path = root / "cluster.yml"
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))


def _added_file(root: Path) -> None:
    (root / "roles" / "extra.yml").write_text("- hosts: all\n")


def _mode_bit(root: Path) -> None:
    (root / "reset.yml").chmod(0o755)


def _link_target(root: Path) -> None:
    (root / "cluster.yml").unlink()
    (root / "cluster.yml").symlink_to("reset.yml")


@pytest.mark.parametrize("change", [_changed_byte, _added_file, _mode_bit, _link_target])
def test_changed_tree_is_refused_naming_archive_digests_and_fix(tmp_path, change):
    changed = tmp_path / "changed"
    shutil.copytree(STANDIN, changed, symlinks=True)
    change(changed)
    actual = tree.digest(changed)
    assert actual != tree_digest()
    archive = pack(changed, tmp_path / "mirror" / "kubespray" / NAME)
    # its archive sha256 is even listed: the tree pin still refuses it
    (archive.parent / "SHA256SUMS").write_text(f"{mirrors.sha256_file(archive)}  {NAME}\n")
    with pytest.raises(source.SourceError) as caught:
        source.ensure(standin_pin(), mirrors.Mirror("path", str(tmp_path / "mirror")))
    message = str(caught.value)
    assert str(archive) in message
    assert f"tree sha256 {actual} is not the pinned {tree_digest()}" in message
    assert "decice_versions.kubespray.tree_sha256" in message
    assert "fix: " in message and "scripts/kubespray_tree_digest.py" in message
    assert not cache_src(tmp_path).exists()
    assert [p.name for p in cache_src(tmp_path).parent.iterdir()] == [".lock"]


# ---------------------------------------------------------------- unsafe archives

TOP = "kubespray-2.29.1"


@pytest.mark.parametrize(
    ("members", "said"),
    [
        ([(member("/tmp/abs-x"), b"x")], "an absolute name"),
        ([(member(f"{TOP}/../escape.txt"), b"x")], "a '..' component"),
        ([(member("../escape.txt"), b"x")], "a '..' component"),
        ([(member(f"{TOP}/l", tarfile.SYMTYPE, "/etc/passwd"), None)], "symlink to the absolute"),
        ([(member(f"{TOP}/l", tarfile.SYMTYPE, "../../escape"), None)], "outside the tree"),
        ([(member(f"{TOP}/a/l", tarfile.SYMTYPE, "../../x"), None)], "outside the tree"),
        (  # resolves outside only with the other link in place
            [
                (member(f"{TOP}/x", tarfile.SYMTYPE, "."), None),
                (member(f"{TOP}/t", tarfile.SYMTYPE, "x/.."), None),
            ],
            "outside the tree",
        ),
        (  # writing through a link
            [
                (member(f"{TOP}/d", tarfile.SYMTYPE, "."), None),
                (member(f"{TOP}/d/cluster.yml"), b"x"),
            ],
            "below the non-directory",
        ),
        ([(member(f"{TOP}/dev", tarfile.CHRTYPE), None)], "a device"),
        ([(member(f"{TOP}/blk", tarfile.BLKTYPE), None)], "a device"),
        ([(member(f"{TOP}/fifo", tarfile.FIFOTYPE), None)], "a fifo"),
        ([(member(f"{TOP}/h", tarfile.LNKTYPE, "/etc/passwd"), None)], "a hard link"),
        ([(member(f"{TOP}/h", tarfile.LNKTYPE, "../outside"), None)], "a hard link"),
        (
            [(member(f"{TOP}/a.yml"), b"1"), (member(f"{TOP}/a.yml"), b"2")],
            "a second member",
        ),
    ],
)
def test_unsafe_members_are_refused(tmp_path, members, said):
    root = tmp_path / "mirror"
    raw_archive(root / "kubespray" / NAME, members)
    with pytest.raises(source.SourceError) as caught:
        source.ensure(standin_pin(), mirrors.Mirror("path", str(root)))
    message = str(caught.value)
    assert said in message
    assert message.startswith(f"{root}/kubespray/{NAME}: ")
    assert "fix: " in message
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "cache" / "escape").exists()
    assert not cache_src(tmp_path).exists()
    assert [p.name for p in cache_src(tmp_path).parent.iterdir()] == [".lock"]


def test_hard_link_to_an_earlier_file_is_a_copy(tmp_path):
    scratch = tmp_path / "x"
    scratch.mkdir()
    archive = raw_archive(
        tmp_path / "h.tar.gz",
        [(member(f"{TOP}/a"), b"data"), (member(f"{TOP}/b", tarfile.LNKTYPE, f"{TOP}/a"), None)],
    )
    top = tree.unpack(archive, scratch).top
    assert (top / "b").read_bytes() == b"data"
    assert (top / "b").stat().st_nlink == 1


def test_special_file_in_a_tree_is_refused(tmp_path):
    (tmp_path / "t").mkdir()
    os.mkfifo(tmp_path / "t" / "pipe")
    with pytest.raises(tree.TreeError, match="fifo, socket or device"):
        tree.digest(tmp_path / "t")


# ---------------------------------------------------------------- transports


def test_http_mirror_is_refused_unless_allowed(tmp_path):
    mirror = mirrors.Mirror("url", "http://127.0.0.1:9/m")
    with pytest.raises(InputError) as caught:
        source.ensure(standin_pin(), mirror)
    assert caught.value.exit_code == EXIT_BAD_INPUT
    message = str(caught.value)
    assert message.startswith("mirror.url: http://127.0.0.1:9/m is plain http")
    assert "fix: serve the mirror over https://" in message
    assert "mirror.allow_insecure_http: true" in message
    assert not (tmp_path / "cache").exists()
    with pytest.raises(InputError, match="plain http"):
        source.plan_source(standin_pin(), mirror, None)


def test_allowed_http_mirror_is_verified_and_warned_about(tmp_path):
    root = tmp_path / "served"
    make_archive(root / "kubespray" / NAME)
    with served_directory(root) as url:
        mirror = mirrors.from_spec(MirrorSpec(url=url, allow_insecure_http=True), tmp_path)
        assert mirror == mirrors.Mirror("url", url, allow_insecure_http=True)
        got = source.ensure(standin_pin(), mirror)
    assert got.location == f"{url}/kubespray/{NAME}"
    assert got.verified == (
        f"tree sha256 verified (versions.yml); archive sha256 not listed; commit {COMMIT}; "
        "WARNING: fetched over plain http (mirror.allow_insecure_http: true)"
    )
    assert f"{url}/kubespray/{NAME}: tree sha256 verified" in got.describe()


def test_allow_insecure_http_is_for_mirror_url_only():
    with pytest.raises(pydantic.ValidationError, match=r"applies to mirror\.url only"):
        MirrorSpec(path="m", allow_insecure_http=True)
    assert MirrorSpec(url="https://m").allow_insecure_http is False


def test_file_url_mirror_is_fine(tmp_path):
    make_archive(tmp_path / "m" / "kubespray" / NAME)
    mirror = mirrors.from_spec(MirrorSpec(url=(tmp_path / "m").as_uri()), tmp_path)
    got = source.ensure(standin_pin(), mirror)
    assert got.verified.startswith("tree sha256 verified (versions.yml)")
    assert "WARNING" not in got.verified


PLAN_SPEC = """\
name: p
target: static
hosts:
  - {{name: cp1, address: 192.0.2.10, roles: [control_plane, etcd]}}
mirror:
  url: {url}
{extra}"""


@pytest.mark.parametrize(
    ("url", "extra", "code"),
    [
        ("http://mirror.invalid/m", "", 2),
        ("http://mirror.invalid/m", "  allow_insecure_http: true\n", 0),
        ("https://mirror.invalid/m", "", 0),
    ],
)
def test_plan_with_an_http_mirror_is_exit_2_with_a_fix(tmp_path, url, extra, code):
    (tmp_path / "decice.yaml").write_text(PLAN_SPEC.format(url=url, extra=extra))
    done = subprocess.run(
        [*DECICE, "plan", "-f", "decice.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == code, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    if code == 2:
        assert "mirror.url: http://mirror.invalid/m is plain http" in done.stderr
        assert "fix: " in done.stderr


# ---------------------------------------------------------------- checkouts and the cache


def test_checkout_is_verified(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    shutil.copytree(STANDIN, checkout)
    (checkout / ".git").mkdir()
    (checkout / ".git" / "HEAD").write_text(f"{COMMIT}\n")  # git's metadata does not count
    monkeypatch.setenv(source.ENV_DIR, str(checkout))
    assert source.explicit_dir() == checkout
    got = source.ensure(standin_pin(), None, source.explicit_dir())
    assert (got.origin, got.path) == ("checkout", checkout)
    assert got.verified == "tree sha256 verified (versions.yml)"
    assert got.tree_sha256 == tree_digest()
    (checkout / "inventory.ini").write_text("[all]\n")
    with pytest.raises(source.CheckoutMismatchError) as caught:
        source.ensure(standin_pin(), None, source.explicit_dir())
    message = str(caught.value)
    assert caught.value.exit_code == EXIT_BAD_INPUT
    assert message.startswith(f"{source.ENV_DIR}: {checkout}: tree sha256 ")
    assert f"is not the pinned {tree_digest()}" in message
    assert tree.digest(checkout) in message
    assert f"fix: check out commit {COMMIT}" in message


def test_checkout_of_an_unpinned_tag_says_it_is_not_verified():
    got = source.ensure(pin(), None, STANDIN)
    assert got.verified == f"not verified (a checkout you gave; no tree sha256 pinned for {TAG})"


def test_explicit_dir_must_be_a_checkout(tmp_path, monkeypatch):
    monkeypatch.setenv(source.ENV_DIR, str(tmp_path))
    with pytest.raises(InputError, match="not a Kubespray checkout"):
        source.explicit_dir()


def test_cache_is_reverified_on_every_use(tmp_path):
    root = tmp_path / "mirror"
    make_archive(root / "kubespray" / NAME)
    mirror = mirrors.Mirror("path", str(root))
    got = source.ensure(standin_pin(), mirror)
    (root / "kubespray" / NAME).unlink()
    assert source.ensure(standin_pin(), mirror) == got  # cached: the mirror is not read again
    (got.path / "cluster.yml").write_text("- hosts: all\n  tasks: [{command: id}]\n")
    with pytest.raises(source.SourceError) as caught:
        source.ensure(standin_pin(), mirror)
    message = str(caught.value)
    assert message.startswith(f"{got.path}: cached Kubespray {TAG} has tree sha256 ")
    assert f"not the pinned {tree_digest()}" in message
    assert "fix: it was changed after it was verified (or made without the pin)" in message
    assert f"remove {got.path.parent} and run again" in message


def test_pin_reads_the_versions_file():
    pinned = source.pin()
    entry = versions.pinned()["kubespray"]
    assert (pinned.tag, pinned.commit, pinned.tree_sha256) == (
        TAG,
        entry["commit"],
        entry["tree_sha256"],
    )
    other = source.pin("v2.30.0")
    assert (other.tree_sha256, other.commit, other.sha256) == (None, None, None)
    with pinned_to_standin() as digest:
        assert source.pin().tree_sha256 == digest
    assert source.pin().tree_sha256 == entry["tree_sha256"]


# ---------------------------------------------------------------- archive sha256 (no tree pin)


def test_sha256sums_parsing():
    sums = mirrors.parse_sha256sums(f"# comment\n{'a' * 64}  {NAME}\n{'B' * 64} *./other.tgz\n")
    assert sums == {NAME: "a" * 64, "other.tgz": "b" * 64}
    with pytest.raises(InputError, match="SHA256SUMS:1: not a sha256sum line"):
        mirrors.parse_sha256sums("deadbeef  x\n")


def test_mirror_from_spec(tmp_path):
    (tmp_path / "m").mkdir()
    found = mirrors.from_spec(MirrorSpec(path="m"), tmp_path)
    assert found == mirrors.Mirror("path", str(tmp_path / "m"))
    assert found.location("kubespray", "x.tar.gz") == f"{tmp_path}/m/kubespray/x.tar.gz"
    assert found.files_repo() == f"file://{tmp_path}/m/files"
    with pytest.raises(InputError, match="is not a directory"):
        mirrors.from_spec(MirrorSpec(path="nope"), tmp_path)
    remote = mirrors.from_spec(MirrorSpec(url="https://m.example/decice/"), tmp_path)
    assert remote == mirrors.Mirror("url", "https://m.example/decice")
    assert remote.files_repo() == "https://m.example/decice/files"
    with pytest.raises(InputError, match="not an http"):
        mirrors.from_spec(MirrorSpec(url="ftp://m.example"), tmp_path)
    assert mirrors.from_spec(None, tmp_path) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("registry: https://r:5000\n", "is not host"),
        ("registy: r:5000\n", "unknown key"),
        ("- a\n", "must be a mapping"),
    ],
)
def test_mirror_settings_validation(tmp_path, text, message):
    (tmp_path / "mirror.yml").write_text(text)
    with pytest.raises(InputError, match=message):
        mirrors.Mirror("path", str(tmp_path)).settings()


def test_local_mirror_without_any_pin_is_accepted_and_said_so(tmp_path):
    root = tmp_path / "mirror"
    make_archive(root / "kubespray" / NAME)
    got = source.ensure(pin(), mirrors.Mirror("path", str(root)))
    assert got.origin == "mirror"
    assert got.verified == (
        f"tree sha256 not pinned for {TAG}; archive sha256 not listed (a local mirror path "
        f"you gave); commit {COMMIT}"
    )
    assert (got.path / "cluster.yml").is_file()
    assert got.path == cache_src(tmp_path)
    (root / "kubespray" / NAME).unlink()
    assert source.ensure(pin(), mirrors.Mirror("path", str(root))) == got
    assert not [
        p for p in got.path.parent.iterdir() if p.name.startswith(".") and p.name != ".lock"
    ]


def test_mirror_sums_are_checked(tmp_path):
    root = tmp_path / "mirror"
    sha = make_archive(root / "kubespray" / NAME)
    sums = root / "kubespray" / "SHA256SUMS"
    sums.write_text(f"{'0' * 64}  {NAME}\n")
    with pytest.raises(source.SourceError, match="does not match"):
        source.ensure(standin_pin(), mirrors.Mirror("path", str(root)))
    assert not cache_src(tmp_path).exists()
    sums.write_text(f"{sha}  {NAME}\n")
    got = source.ensure(standin_pin(), mirrors.Mirror("path", str(root)))
    assert got.verified == (
        "tree sha256 verified (versions.yml); archive sha256 verified (SHA256SUMS of the "
        f"mirror); commit {COMMIT}"
    )
    assert got.sha256 == sha


def test_pinned_sha_disagreeing_with_mirror_sums(tmp_path):
    root = tmp_path / "mirror"
    sha = make_archive(root / "kubespray" / NAME)
    (root / "kubespray" / "SHA256SUMS").write_text(f"{sha}  {NAME}\n")
    with pytest.raises(source.SourceError, match="but decice pins"):
        source.ensure(pin(sha="1" * 64), mirrors.Mirror("path", str(root)))


def test_commit_in_archive_must_match_the_pin(tmp_path):
    root = tmp_path / "mirror"
    make_archive(root / "kubespray" / NAME, commit="f" * 40)
    with pytest.raises(source.SourceError, match=r"archive of commit f+, but decice pins"):
        source.ensure(standin_pin(), mirrors.Mirror("path", str(root)))
    assert not cache_src(tmp_path).exists()


def test_unknown_checksum_refused_before_download():
    with pytest.raises(source.SourceError, match="no pinned tree sha256 and no known sha256"):
        source.ensure(pin(), None)


def test_url_mirror_of_an_unpinned_tag_needs_and_checks_sums(tmp_path):
    root = tmp_path / "served"
    sha = make_archive(root / "kubespray" / NAME)
    with served_directory(root) as url:
        mirror = mirrors.Mirror("url", url, allow_insecure_http=True)
        with pytest.raises(source.SourceError, match="no known sha256"):
            source.ensure(pin(), mirror)
        (root / "kubespray" / "SHA256SUMS").write_text(f"{sha}  {NAME}\n")
        got = source.ensure(pin(), mirror)
    assert got.location == f"{url}/kubespray/{NAME}"
    assert got.verified.startswith(
        f"tree sha256 not pinned for {TAG}; archive sha256 verified (SHA256SUMS of the "
        f"mirror); commit {COMMIT}"
    )


def test_url_mirror_missing_archive(tmp_path):
    root = tmp_path / "served"
    (root / "kubespray").mkdir(parents=True)
    mirror = functools.partial(mirrors.Mirror, "url", allow_insecure_http=True)
    with served_directory(root) as url, pytest.raises(mirrors.MirrorError, match="HTTP 404"):
        source.ensure(standin_pin(), mirror(url))


# ---------------------------------------------------------------- facts read from a checkout


def test_facts_read_from_the_checkout():
    assert source.ansible_window(STANDIN) == ("2.17.3", "2.18.0")
    assert source.kube_versions(STANDIN)[0] == "1.33.7"
    run.check_kube_version(STANDIN, "1.32.10")
    with pytest.raises(InputError, match=r"1\.32\.x it knows: 1\.32\.10, 1\.32\.9"):
        run.check_kube_version(STANDIN, "1.32.11")


def test_ansible_window_check(tmp_path):
    assert source.version_tuple("2.17.14") == (2, 17, 14)
    assert source.version_tuple("2.18.0rc1") == (2, 18, 0)
    venv.check_window("2.17.3", ("2.17.3", "2.18.0"), tmp_path)
    venv.check_window("2.17.14", ("2.17.3", "2.18.0"), tmp_path)
    for bad in ("2.17.2", "2.18.0", "2.19.1"):
        with pytest.raises(venv.VenvError, match=r"outside 2\.17\.3 <= v < 2\.18\.0"):
            venv.check_window(bad, ("2.17.3", "2.18.0"), tmp_path)


def test_venv_key_follows_requirements(tmp_path):
    (tmp_path / "requirements.txt").write_text("ansible==10.7.0\n")
    first = venv.requirements_key(tmp_path)
    (tmp_path / "requirements.txt").write_text("ansible==10.7.1\n")
    assert venv.requirements_key(tmp_path) != first
    assert not venv.is_current(tmp_path / "venv", first)
