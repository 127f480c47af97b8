"""Content pins of Helm charts (plugins/module_utils/chartpin.py) on the REAL mirror charts:
one pin whatever the packaging, another pin for any other content, refusal of what helm
could not load safely, and the script that writes the pins into versions.yml."""

from __future__ import annotations

import io
import os
import re
import tarfile
from collections.abc import Iterable
from pathlib import Path

import pytest
from ansible_collections.decice.hybrid.plugins.module_utils import chartpin

from decice import mirror, paths, versions
from tests.support import MIRROR, REPO, load_file, repack_chart, require

pytestmark = pytest.mark.unit

SCRIPT = REPO / "scripts" / "chart_content_digest.py"


@pytest.fixture(scope="module")
def charts() -> Path:
    require((MIRROR / "charts" / "SHA256SUMS").is_file(), f"the upstream mirror {MIRROR}")
    return MIRROR / "charts"


def _pin(path: Path) -> str:
    return str(chartpin.file_content(str(path)).digest)


def _tar(members: Iterable[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as out:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            out.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return raw.getvalue()


def _file(name: str) -> tarfile.TarInfo:
    return tarfile.TarInfo(name)


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


CHART = b"apiVersion: v2\nname: c\nversion: 1.0.0\n"


def test_every_pinned_chart_has_the_content_pin_of_the_mirror_copy(charts: Path) -> None:
    pinned = {
        c: e["artifact"]
        for c, e in versions.pinned().items()
        if "artifact" in e and e["artifact"]["file"].startswith("charts/")
    }
    assert len(pinned) == 6
    for component, artifact in pinned.items():
        assert _pin(MIRROR / artifact["file"]) == artifact["content_sha256"], component
    script = load_file(SCRIPT, "chart_content_digest")
    assert script.main(["--check", str(MIRROR)]) == 0
    text = paths.versions_file().read_text()  # the pins are what --write writes, and only that
    bare = "".join(line for line in text.splitlines(True) if "content_sha256:" not in line)
    again, changed = script.rewritten(bare, MIRROR)
    assert again == text and len(changed) == 6


def test_repacking_changes_the_bytes_and_never_the_pin(charts: Path, tmp_path: Path) -> None:
    for name in ("volcano-1.15.1.tgz", "kubeflow-trainer-2.3.0.tgz"):
        other = repack_chart(charts / name, tmp_path / name)
        assert mirror.sha256_file(other) != mirror.sha256_file(charts / name)
        assert _pin(other) == _pin(charts / name), name


def test_chart_yaml_as_its_authors_write_it_has_the_pin_helm_package_gives(
    charts: Path, tmp_path: Path
) -> None:
    def authored(files: dict[str, bytes]) -> None:  # comments, order, what helm leaves out
        files["Chart.yaml"] = (
            b"# EdgeMesh\nname: edgemesh\ndescription: A Helm chart for EdgeMesh\n"
            b"type: application\nversion: 0.1.0\n\n# quoted as authors do\n"
            b'appVersion: "latest"\napiVersion: v2\ndeprecated: false\nicon: ""\n'
            b"x-unknown-to-helm: yes\ndependencies:\n  - name: agent\n    version: latest\n"
            b"  - name: spiderpool\n    version: 0.9.1\n"
            b"    condition: agent.modules.edgeCNI.enable\n"
        )

    source = repack_chart(charts / "edgemesh-0.1.0.tgz", tmp_path / "e.tgz", edit=authored)
    assert _pin(source) == _pin(charts / "edgemesh-0.1.0.tgz")


def test_a_subchart_as_a_nested_archive_is_the_same_chart(charts: Path, tmp_path: Path) -> None:
    def nest(files: dict[str, bytes]) -> None:
        sub = {k: v for k, v in files.items() if k.startswith("charts/jobflow/")}
        for key in sub:
            del files[key]
        files["charts/jobflow-1.0.0.tgz"] = _tar(
            (_file(f"jobflow/{k[len('charts/jobflow/') :]}"), v) for k, v in sorted(sub.items())
        )

    nested = repack_chart(charts / "volcano-1.15.1.tgz", tmp_path / "v.tgz", edit=nest)
    assert _pin(nested) == _pin(charts / "volcano-1.15.1.tgz")


@pytest.mark.parametrize(
    "change",
    [
        lambda f: f.update({"templates/NOTES.txt": f["templates/NOTES.txt"] + b" "}),
        lambda f: f.update({"templates/extra.yaml": b"kind: ConfigMap\n"}),
        lambda f: f.pop("templates/NOTES.txt"),
        lambda f: f.update({"Chart.yaml": f["Chart.yaml"].replace(b"1.15.1", b"1.15.2")}),
        lambda f: f.update({"charts/jobflow/values.yaml": b"x: 1\n"}),
    ],
    ids=["one-byte", "extra-file", "missing-file", "chart-version", "subchart-file"],
)
def test_any_other_content_is_another_pin(charts: Path, tmp_path: Path, change: object) -> None:
    other = repack_chart(charts / "volcano-1.15.1.tgz", tmp_path / "v.tgz", edit=change)  # type: ignore[arg-type]
    assert _pin(other) != _pin(charts / "volcano-1.15.1.tgz")


@pytest.mark.parametrize(
    ("members", "says"),
    [
        ([(_file("c/Chart.yaml"), CHART), (_link("c/x", "/etc/passwd"), b"")], "'c/x' is not a"),
        ([(_file("c/Chart.yaml"), CHART), (_link("c/x", "c/Chart.yaml", tarfile.LNKTYPE), b"")],
         "'c/x' is not a regular file"),
        ([(_file("c/Chart.yaml"), CHART), (_file("c/../../x"), b"")], "unsafe name"),
        ([(_file("/c/Chart.yaml"), CHART)], "unsafe name"),
        ([(_file("c/Chart.yaml"), CHART), (_file("d/x"), b"")], "2 top directories"),
        ([(_file("c/values.yaml"), b"")], "no Chart.yaml"),
        ([(_file("c/Chart.yaml"), CHART), (_file("c/charts/README"), b"")],
         "not a chart archive"),
        ([(_file("c/Chart.yaml"), CHART), (_file("c/Chart.yaml"), CHART)], "twice"),
        ([(_file("c/Chart.yaml"), b"- a list\n")], "not a mapping"),
        ([(_file("c/Chart.yaml"), CHART), (_file("c/charts/s.tgz"), b"not gzip")],
         "charts/s.tgz: not a readable chart archive"),
    ],
    ids=["symlink", "hardlink", "dotdot", "absolute", "two-tops", "no-chart", "charts-file",
         "twice", "bad-chart-yaml", "bad-nested"],
)  # fmt: skip
def test_what_helm_cannot_load_safely_is_refused_by_name(
    members: list[tuple[tarfile.TarInfo, bytes]], says: str
) -> None:
    with pytest.raises(chartpin.ChartError, match=r"^bad\.tgz: ") as refused:
        chartpin.archive_content(_tar(members), "bad.tgz")
    assert says in str(refused.value)


def test_size_and_nesting_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    many = [(_file("c/Chart.yaml"), CHART)] + [(_file(f"c/f{i}"), b"x") for i in range(6)]
    monkeypatch.setattr(chartpin, "MAX_FILES", 5)
    with pytest.raises(chartpin.ChartError, match="more than 5 files"):
        chartpin.archive_content(_tar(many), "many.tgz")
    monkeypatch.setattr(chartpin, "MAX_FILES", 100)
    inner = _tar([(_file("c/Chart.yaml"), CHART)])
    for _ in range(chartpin.MAX_DEPTH + 1):
        inner = _tar([(_file("c/Chart.yaml"), CHART), (_file("c/charts/c.tgz"), inner)])
    with pytest.raises(chartpin.ChartError, match="nested more than"):
        chartpin.archive_content(inner, "deep.tgz")
    with pytest.raises(chartpin.ChartError, match="not a readable chart archive"):
        chartpin.archive_content(b"\x1f\x8b garbage", "garbage.tgz")


def test_a_directory_may_link_inside_and_never_out(tmp_path: Path) -> None:
    chart = tmp_path / "c"
    (chart / "crd" / "bases").mkdir(parents=True)
    (chart / "Chart.yaml").write_bytes(CHART)
    (chart / "crd" / "v1").symlink_to("bases")  # as volcano's source tree has it
    chartpin.check_directory(str(chart))
    (chart / "templates").mkdir()
    (chart / "templates" / "s.yaml").symlink_to("../../outside.yaml")
    with pytest.raises(chartpin.ChartError, match=r"templates/s.yaml is a symlink to \.\./\.\."):
        chartpin.check_directory(str(chart))
    (chart / "templates" / "s.yaml").unlink()
    os.mkfifo(chart / "fifo")
    with pytest.raises(chartpin.ChartError, match="fifo is not a regular file"):
        chartpin.check_directory(str(chart))


def _tag(members: list[tuple[tarfile.TarInfo, bytes]], tmp: Path) -> str:
    path = tmp / "v1.0.0.tar.gz"
    path.write_bytes(_tar(members))
    return str(path)


def test_a_source_archive_gives_its_chart_directory_and_nothing_else(tmp_path: Path) -> None:
    crd = b"kind: CustomResourceDefinition\n"
    archive = _tag(
        [
            (_file("p-1.0.0/README.md"), b"not the chart"),
            (_file("p-1.0.0/build/helm/c/Chart.yaml"), CHART),
            (_file("p-1.0.0/build/helm/c/crd/bases/x.yaml"), crd),
            (_link("p-1.0.0/build/helm/c/crd/v1", "bases"), b""),  # as volcano's tree has
            (_file("p-1.0.0/build/helm/other/Chart.yaml"), CHART),
        ],
        tmp_path,
    )
    root = Path(chartpin.extract_chart(archive, "build/helm/c", str(tmp_path / "out")))
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == [
        "Chart.yaml", "crd", "crd/bases", "crd/bases/x.yaml", "crd/v1",
    ]  # fmt: skip
    assert (root / "crd" / "v1" / "x.yaml").read_bytes() == crd
    assert (root / "Chart.yaml").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize(
    ("member", "says"),
    [
        (_link("p/c/t/s.yaml", "../../../../etc/passwd"), "is a symlink to ../../../../etc/passwd"),
        (_link("p/c/t/s.yaml", "/etc/passwd"), "is a symlink to /etc/passwd"),
        (_link("p/c/t/s.yaml", "p/c/Chart.yaml", tarfile.LNKTYPE), "not a file, directory"),
        (_file("p/c/Chart.yaml"), "twice"),
        (_file("p/c/../../x"), "unsafe name"),
    ],
    ids=["link-out", "link-absolute", "hardlink", "twice", "dotdot"],
)
def test_a_source_archive_that_could_escape_is_refused(
    tmp_path: Path, member: tarfile.TarInfo, says: str
) -> None:
    archive = _tag([(_file("p/c/Chart.yaml"), CHART), (member, CHART)], tmp_path)
    with pytest.raises(chartpin.ChartError, match=re.escape(archive)) as refused:
        chartpin.extract_chart(archive, "c", str(tmp_path / "out"))
    assert says in str(refused.value)
    assert not (tmp_path / "etc").exists()


def test_a_source_archive_without_the_chart_path_says_so(tmp_path: Path) -> None:
    archive = _tag([(_file("p/c/Chart.yaml"), CHART)], tmp_path)
    with pytest.raises(chartpin.ChartError, match="no directory build/helm/x in it"):
        chartpin.extract_chart(archive, "build/helm/x", str(tmp_path / "out"))
    with pytest.raises(chartpin.ChartError, match="must be a relative path"):
        chartpin.extract_chart(archive, "../c", str(tmp_path / "out"))
