"""Kubespray source: mirrors, checksums, atomic extraction, facts read from a checkout."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from decice import mirror as mirrors
from decice.errors import InputError
from decice.kubespray import run, source, venv
from decice.spec_model import MirrorSpec
from tests.kubespray_standin import COMMIT, STANDIN, TAG, make_archive

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DECICE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(source.ENV_DIR, raising=False)


def pin(sha: str | None = None, commit: str | None = COMMIT) -> source.Pin:
    return source.Pin(TAG, "http://127.0.0.1:9/unreachable.tar.gz", sha, commit)


def test_sha256sums_parsing():
    sums = mirrors.parse_sha256sums(
        f"# comment\n{'a' * 64}  kubespray-v2.29.1.tar.gz\n{'B' * 64} *./other.tgz\n"
    )
    assert sums == {"kubespray-v2.29.1.tar.gz": "a" * 64, "other.tgz": "b" * 64}
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


def test_local_mirror_without_sums_is_accepted_and_said_so(tmp_path):
    root = tmp_path / "mirror"
    make_archive(root / "kubespray" / "kubespray-v2.29.1.tar.gz")
    got = source.ensure(pin(), mirrors.Mirror("path", str(root)))
    assert got.origin == "mirror"
    assert got.verified == f"sha256 not verified (a local mirror path you gave); commit {COMMIT}"
    assert (got.path / "cluster.yml").is_file()
    assert got.path == tmp_path / "cache" / "kubespray" / TAG / "src"
    # cached: the mirror is not read again
    (root / "kubespray" / "kubespray-v2.29.1.tar.gz").unlink()
    assert source.ensure(pin(), mirrors.Mirror("path", str(root))) == got
    assert not [
        p for p in got.path.parent.iterdir() if p.name.startswith(".") and p.name != ".lock"
    ]


def test_mirror_sums_are_checked(tmp_path):
    root = tmp_path / "mirror"
    sha = make_archive(root / "kubespray" / "kubespray-v2.29.1.tar.gz")
    sums = root / "kubespray" / "SHA256SUMS"
    sums.write_text(f"{'0' * 64}  kubespray-v2.29.1.tar.gz\n")
    with pytest.raises(source.SourceError, match="does not match"):
        source.ensure(pin(), mirrors.Mirror("path", str(root)))
    assert not (tmp_path / "cache" / "kubespray" / TAG / "src").exists()
    sums.write_text(f"{sha}  kubespray-v2.29.1.tar.gz\n")
    got = source.ensure(pin(), mirrors.Mirror("path", str(root)))
    assert got.verified.startswith("sha256 verified (SHA256SUMS of the mirror)")
    assert got.sha256 == sha


def test_pinned_sha_disagreeing_with_mirror_sums(tmp_path):
    root = tmp_path / "mirror"
    sha = make_archive(root / "kubespray" / "kubespray-v2.29.1.tar.gz")
    (root / "kubespray" / "SHA256SUMS").write_text(f"{sha}  kubespray-v2.29.1.tar.gz\n")
    with pytest.raises(source.SourceError, match="but decice pins"):
        source.ensure(pin(sha="1" * 64), mirrors.Mirror("path", str(root)))


def test_commit_in_archive_must_match_the_pin(tmp_path):
    root = tmp_path / "mirror"
    make_archive(root / "kubespray" / "kubespray-v2.29.1.tar.gz", commit="f" * 40)
    with pytest.raises(source.SourceError, match=r"archive of commit f+, but decice pins"):
        source.ensure(pin(), mirrors.Mirror("path", str(root)))


def test_archive_escaping_its_directory_is_refused(tmp_path):
    root = tmp_path / "mirror"
    make_archive(root / "kubespray" / "kubespray-v2.29.1.tar.gz", extra=b"x")
    with pytest.raises(source.SourceError, match="not a readable tar archive"):
        source.ensure(pin(), mirrors.Mirror("path", str(root)))
    assert not (tmp_path / "escape.txt").exists()


def test_unknown_checksum_refused_before_download():
    with pytest.raises(source.SourceError, match="no known sha256"):
        source.ensure(pin(), None)


@pytest.fixture
def http_mirror(tmp_path) -> Iterator[tuple[Path, str]]:
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_url_mirror_needs_and_checks_sums(http_mirror):
    root, url = http_mirror
    sha = make_archive(root / "kubespray" / "kubespray-v2.29.1.tar.gz")
    mirror = mirrors.Mirror("url", url)
    with pytest.raises(source.SourceError, match="no known sha256"):
        source.ensure(pin(), mirror)
    (root / "kubespray" / "SHA256SUMS").write_text(f"{sha}  kubespray-v2.29.1.tar.gz\n")
    got = source.ensure(pin(), mirror)
    assert got.location == f"{url}/kubespray/kubespray-v2.29.1.tar.gz"
    assert got.verified == f"sha256 verified (SHA256SUMS of the mirror); commit {COMMIT}"


def test_url_mirror_missing_archive(http_mirror):
    root, url = http_mirror
    (root / "kubespray").mkdir()
    (root / "kubespray" / "SHA256SUMS").write_text(f"{'a' * 64}  kubespray-v2.29.1.tar.gz\n")
    with pytest.raises(mirrors.MirrorError, match="HTTP 404"):
        source.ensure(pin(), mirrors.Mirror("url", url))


def test_explicit_checkout(tmp_path, monkeypatch):
    monkeypatch.setenv(source.ENV_DIR, str(STANDIN))
    assert source.explicit_dir() == STANDIN
    got = source.ensure(pin(), None, source.explicit_dir())
    assert (got.origin, got.path) == ("checkout", STANDIN)
    monkeypatch.setenv(source.ENV_DIR, str(tmp_path))
    with pytest.raises(InputError, match="not a Kubespray checkout"):
        source.explicit_dir()


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
