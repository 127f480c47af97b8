"""`decice mirror sync` without helm or the network: pins, fetch/keep/refuse, SHA256SUMS
merging, image extraction, inputs (--dest, --from, helm) and the command's exit codes."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from decice import mirror, mirror_sync, spec, versions
from decice.app import app
from decice.errors import InputError
from tests.support import served_directory, sim_spec

pytestmark = pytest.mark.unit

MANIFEST = textwrap.dedent(
    """\
    apiVersion: apps/v1
    kind: Deployment
    spec:
      template:
        spec:
          initContainers: [{name: i, image: example.org/init:1}]
          containers: [{name: c, image: example.org/app:1}, {name: d, image: example.org/app:1}]
    ---
    apiVersion: batch/v1
    kind: CronJob
    spec:
      jobTemplate:
        spec:
          template:
            spec:
              containers: [{name: c, image: example.org/cron:2}]
    ---
    kind: ConfigMap
    data: {image: not-a-container}
    """
)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_spec(tmp_path: Path, extra: str = "") -> spec.LoadedSpec:
    path = tmp_path / "decice.yaml"
    path.write_text(sim_spec("m", ("n", 1, 'cpu: "4", memory: 8Gi')) + extra)
    return spec.load(path)


def entry(component: str = "volcano") -> mirror_sync.Entry:
    return mirror_sync.Entry("volcano", component, None, True)


# ------------------------------------------------------------------ pins


def test_real_pins_are_read_from_the_versions_file(tmp_path: Path) -> None:
    table = versions.pinned()
    got = {e.component: e for e in mirror_sync.entries(load_spec(tmp_path))}
    volcano = table["volcano"]["artifact"]
    assert got["volcano"].pin == mirror_sync.Pin(
        volcano["file"], volcano["sha256"], volcano["url"], volcano["content_sha256"]
    )
    assert got["kubeflow_trainer"].pin is not None
    assert got["kubeflow_trainer"].pin.url is None  # OCI only
    for component, e in got.items():
        assert (e.pin is None) == ("artifact" not in table[component]), component


@pytest.mark.parametrize(
    ("artifact", "field"),
    [
        ({"file": "../x.tgz", "sha256": "a" * 64, "url": None}, "file"),
        ({"file": "/abs.tgz", "sha256": "a" * 64, "url": None}, "file"),
        ({"file": "charts/x.tgz", "sha256": "abc", "url": None}, "sha256"),
        ({"file": "charts/x.tgz", "sha256": "g" * 64, "url": None}, "sha256"),
        ({"file": "charts//x.tgz", "sha256": "a" * 64, "url": None}, "file"),
        ({"file": "charts/x.tgz", "sha256": "a" * 64, "url": 3}, "url"),
        ({"file": "charts/x.tgz", "sha256": "a" * 64, "content_sha256": "b"}, "content_sha256"),
    ],
)
def test_bad_pin_is_input_error_naming_the_field(artifact: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError, match=rf"decice_versions\.volcano\.artifact\.{field}"):
        mirror_sync._pin("volcano", {"volcano": {"version": "1", "artifact": artifact}})


# ------------------------------------------------------------------ fetch


def test_fetch_copies_then_keeps(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "charts").mkdir(parents=True)
    (source / "charts" / "a.tgz").write_bytes(b"chart")
    pin = mirror_sync.Pin("charts/a.tgz", sha(b"chart"), None)
    dest = tmp_path / "dest"
    item = mirror_sync.fetch(entry(), pin, dest, mirror.Mirror("path", str(source)))
    assert (item.status, item.source) == ("copied", str(source / "charts" / "a.tgz"))
    assert (dest / "charts" / "a.tgz").read_bytes() == b"chart"
    (source / "charts" / "a.tgz").unlink()  # a second run must not need the source
    again = mirror_sync.fetch(entry(), pin, dest, mirror.Mirror("path", str(source)))
    assert (again.status, again.source) == ("kept", None)
    assert sorted(p.name for p in (dest / "charts").iterdir()) == ["a.tgz"]  # no temp left


def test_fetch_from_the_upstream_url(tmp_path: Path) -> None:
    upstream = tmp_path / "up.tgz"
    upstream.write_bytes(b"up")
    pin = mirror_sync.Pin("charts/up.tgz", sha(b"up"), upstream.as_uri())
    item = mirror_sync.fetch(entry(), pin, tmp_path / "dest", None)
    assert (item.status, item.source) == ("copied", upstream.as_uri())
    assert (tmp_path / "dest" / "charts" / "up.tgz").read_bytes() == b"up"


def test_fetch_refuses_a_wrong_sha256_and_leaves_the_destination(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "charts").mkdir(parents=True)
    (source / "charts" / "a.tgz").write_bytes(b"tampered")
    dest = tmp_path / "dest"
    (dest / "charts").mkdir(parents=True)
    (dest / "charts" / "a.tgz").write_bytes(b"old")
    pin = mirror_sync.Pin("charts/a.tgz", sha(b"chart"), None)
    item = mirror_sync.fetch(entry(), pin, dest, mirror.Mirror("path", str(source)))
    assert item.status == "failed"
    assert str(source / "charts" / "a.tgz") in item.detail
    assert sha(b"tampered") in item.detail and sha(b"chart") in item.detail
    assert (dest / "charts" / "a.tgz").read_bytes() == b"old"
    assert sorted(p.name for p in (dest / "charts").iterdir()) == ["a.tgz"]


def test_fetch_without_url_is_not_done_and_says_why(tmp_path: Path) -> None:
    pin = mirror_sync.Pin("charts/k.tgz", "a" * 64, None)
    item = mirror_sync.fetch(entry("kubeflow_trainer"), pin, tmp_path, None)
    assert item.status == "not done"
    assert item.detail == (
        "kubeflow_trainer: no upstream source that can be fetched here; "
        "use --from a mirror that has charts/k.tgz"
    )
    oci = mirror_sync.Pin("charts/k.tgz", "a" * 64, None, oci=("oci://r.invalid/k", "1"))
    item = mirror_sync.fetch(entry("kubeflow_trainer"), oci, tmp_path, None)  # no content pin
    assert item.status == "not done" and "no upstream source" in item.detail


def test_fetch_missing_source_file_fails(tmp_path: Path) -> None:
    pin = mirror_sync.Pin("charts/a.tgz", "a" * 64, None)
    item = mirror_sync.fetch(entry(), pin, tmp_path / "d", mirror.Mirror("path", str(tmp_path)))
    assert item.status == "failed"
    assert "no such file" in item.detail


def test_fetch_over_http(tmp_path: Path) -> None:
    (tmp_path / "served" / "charts").mkdir(parents=True)
    (tmp_path / "served" / "charts" / "a.tgz").write_bytes(b"chart")
    pin = mirror_sync.Pin("charts/a.tgz", sha(b"chart"), None)
    with served_directory(tmp_path / "served") as url:
        item = mirror_sync.fetch(entry(), pin, tmp_path / "d", mirror.Mirror("url", url))
    assert (item.status, item.source) == ("copied", f"{url}/charts/a.tgz")


# ------------------------------------------------------------------ SHA256SUMS


def test_sums_are_merged_sorted_and_rewritten_only_when_changed(tmp_path: Path) -> None:
    (tmp_path / "charts").mkdir()
    sums = tmp_path / "charts" / "SHA256SUMS"
    sums.write_text(f"{'c' * 64}  z.tgz\n{'d' * 64} *b.tgz\n")
    placed = {"charts/b.tgz": "b" * 64, "charts/a.tgz": "a" * 64, "manifests/m.yaml": "e" * 64}
    assert mirror_sync.merge_sums(tmp_path, placed) == [
        "charts/SHA256SUMS",
        "manifests/SHA256SUMS",
    ]
    assert sums.read_text() == f"{'a' * 64}  a.tgz\n{'b' * 64}  b.tgz\n{'c' * 64}  z.tgz\n"
    assert mirror.parse_sha256sums((tmp_path / "manifests" / "SHA256SUMS").read_text()) == {
        "m.yaml": "e" * 64
    }
    assert mirror_sync.merge_sums(tmp_path, placed) == []


def test_broken_sums_file_is_input_error(tmp_path: Path) -> None:
    (tmp_path / "charts").mkdir()
    (tmp_path / "charts" / "SHA256SUMS").write_text("garbage\n")
    with pytest.raises(InputError, match="SHA256SUMS:1: not a sha256sum line"):
        mirror_sync.merge_sums(tmp_path, {"charts/a.tgz": "a" * 64})
    with pytest.raises(InputError, match="SHA256SUMS:1: not a sha256sum line"):
        mirror_sync.merge_sums(tmp_path, {}, check=["charts/a.tgz"])
    assert mirror_sync.merge_sums(tmp_path, {}, check=["other/a.tgz"]) == []
    assert not (tmp_path / "other").exists()


def test_broken_destination_sums_stop_the_sync_before_copying(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_pins(monkeypatch, tmp_path)
    (tmp_path / "m" / "manifests").mkdir(parents=True)
    (tmp_path / "m" / "manifests" / "SHA256SUMS").write_text("garbage\n")
    with pytest.raises(InputError, match="not a sha256sum line"):
        mirror_sync.sync(load_spec(tmp_path), tmp_path / "m", None, None)
    assert sorted(p.name for p in (tmp_path / "m" / "manifests").iterdir()) == ["SHA256SUMS"]


# ------------------------------------------------------------------ images and values


def test_images_of_every_container_list() -> None:
    import yaml

    assert mirror_sync.images_in(yaml.safe_load_all(MANIFEST)) == {
        "example.org/init:1",
        "example.org/app:1",
        "example.org/cron:2",
    }


def test_values_merge_recursively_spec_over_role() -> None:
    base = {"a": {"b": 1, "c": 2}, "d": [1]}
    assert mirror_sync.merge_values(base, {"a": {"c": 3}, "d": [2]}) == {
        "a": {"b": 1, "c": 3},
        "d": [2],
    }
    assert base == {"a": {"b": 1, "c": 2}, "d": [1]}


def test_role_defaults_of_kubeflow_and_an_addon_without_any() -> None:
    got = mirror_sync.role_defaults("kubeflow")
    assert got["release"] == "kubeflow-trainer"
    assert got["values"]["runtimes"]["defaultEnabled"] is False
    assert mirror_sync.role_defaults("no-such-role") == {"values": {}, "release": "no-such-role"}


# ------------------------------------------------------------------ inputs


def test_dest_from_option_or_spec_mirror_path(tmp_path: Path) -> None:
    loaded = load_spec(tmp_path, "mirror:\n  path: site-mirror\n")
    assert mirror_sync.dest_dir(loaded, None) == (tmp_path / "site-mirror").resolve()
    assert mirror_sync.dest_dir(loaded, tmp_path / "x") == (tmp_path / "x").resolve()


@pytest.mark.parametrize("extra", ["", "mirror:\n  url: https://mirror.example/m\n"])
def test_dest_needed_without_mirror_path(tmp_path: Path, extra: str) -> None:
    with pytest.raises(InputError, match=r"fix: pass --dest DIR, or set mirror\.path"):
        mirror_sync.dest_dir(load_spec(tmp_path, extra), None)


def test_source_mirror_forms(tmp_path: Path) -> None:
    resolved = str(tmp_path.resolve())
    assert mirror_sync.source_mirror(str(tmp_path)) == mirror.Mirror("path", resolved)
    assert mirror_sync.source_mirror(tmp_path.as_uri()) == mirror.Mirror("path", resolved)
    assert mirror_sync.source_mirror("https://m.example/x/") == mirror.Mirror(
        "url", "https://m.example/x"
    )
    with pytest.raises(InputError, match="not a directory, file:// or http"):
        mirror_sync.source_mirror("ftp://m.example/x")
    with pytest.raises(InputError, match="is not a directory"):
        mirror_sync.source_mirror(str(tmp_path / "missing"))


def test_missing_helm_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="fix: put helm on PATH"):
        mirror_sync.require_helm(str(tmp_path / "no-helm"))


# ------------------------------------------------------------------ sync and the command


def fake_pins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """volcano pins a manifest with a file:// URL; kubeflow_trainer one with no URL."""
    upstream = tmp_path / "upstream.yaml"
    upstream.write_text(MANIFEST)
    table = {
        "volcano": {
            "version": "1",
            "artifact": {
                "file": "manifests/v.yaml",
                "sha256": sha(MANIFEST.encode()),
                "url": upstream.as_uri(),
            },
        },
        "kubeflow_trainer": {
            "version": "2",
            "artifact": {"file": "charts/k.tgz", "sha256": "a" * 64, "url": None},
        },
    }
    monkeypatch.setattr(versions, "pinned", lambda: table)
    return upstream


def test_sync_manifest_pin_writes_sums_and_images(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_pins(monkeypatch, tmp_path)
    dest = tmp_path / "m"
    result = mirror_sync.sync(load_spec(tmp_path), dest, None, None)
    status = {i.component: i.status for i in result.artifacts}
    assert status["volcano"] == "copied"
    assert status["kubeflow_trainer"] == "not done"
    assert status["sedna"] == "no pin"
    assert not result.ok
    assert (dest / "images" / "volcano.txt").read_text() == (
        "example.org/app:1\nexample.org/cron:2\nexample.org/init:1\n"
    )
    assert (dest / "manifests" / "SHA256SUMS").read_text() == (
        f"{sha(MANIFEST.encode())}  v.yaml\n"
    )
    assert not (dest / "images" / "kubeflow.txt").exists()


def test_disabled_addon_is_not_synced(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_pins(monkeypatch, tmp_path)
    loaded = load_spec(tmp_path, "addons:\n  kubeflow: {enabled: false}\n")
    result = mirror_sync.sync(loaded, tmp_path / "m", None, None)
    assert {i.component: i.status for i in result.artifacts}["kubeflow_trainer"] == "disabled"
    assert result.ok
    assert not (tmp_path / "m" / "charts").exists()


def invoke(tmp_path: Path, *args: str) -> Any:
    return CliRunner().invoke(
        app, ["mirror", "sync", "-f", str(tmp_path / "decice.yaml"), *args], catch_exceptions=False
    )


def test_command_json_and_exit_codes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_pins(monkeypatch, tmp_path)
    load_spec(tmp_path, "mirror:\n  path: m\n")
    # kubeflow's pin is a chart, so helm must exist; it is never run (no chart can be had)
    monkeypatch.setattr("decice.targets.base.helm_binary", lambda: sys.executable)
    result = invoke(tmp_path, "--json")
    assert result.exit_code == 1  # kubeflow_trainer has no URL
    data = json.loads(result.stdout)
    assert data["dest"] == str((tmp_path / "m").resolve()) and data["ok"] is False
    assert [i["status"] for i in data["images"]] == ["written"]
    again = invoke(tmp_path)
    assert again.exit_code == 1
    assert "kept" in again.stdout and "images/volcano.txt: unchanged" in again.stdout
    assert "kubeflow_trainer: no upstream source that can be fetched here" in again.stdout


def test_command_exit_0_when_all_enabled_synced(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_pins(monkeypatch, tmp_path)
    load_spec(tmp_path, "addons:\n  kubeflow: {enabled: false}\n")
    monkeypatch.setattr("decice.targets.base.helm_binary", lambda: "no-helm")  # not needed
    first = invoke(tmp_path, "--dest", str(tmp_path / "m"))
    assert first.exit_code == 0, first.output
    assert "copied" in first.stdout
    second = invoke(tmp_path, "--dest", str(tmp_path / "m"))
    assert second.exit_code == 0
    assert "nothing copied: every artifact was already in place" in second.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "no mirror.path to sync into"),
        (("--dest", "d", "--from", "ftp://x/y"), "not a directory, file:// or http"),
        (("--dest", "d", "--from", "missing-dir"), "is not a directory"),
    ],
)
def test_command_bad_input_exits_2_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], message: str
) -> None:
    load_spec(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = invoke(tmp_path, *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decice.yaml"]


def test_command_without_helm_exits_2_before_copying(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load_spec(tmp_path)
    monkeypatch.setattr("decice.targets.base.helm_binary", lambda: str(tmp_path / "no-helm"))
    result = invoke(tmp_path, "--dest", str(tmp_path / "m"))
    assert result.exit_code == 2
    assert "helm not found" in result.stderr
    assert not (tmp_path / "m").exists()


def test_mirror_help_imports_nothing_heavy() -> None:
    code = (
        "import sys\nfrom decice.app import app\n"
        "try:\n    app(['mirror', 'sync', '--help'])\nexcept SystemExit:\n    pass\n"
        "print('HEAVY', [m for m in ('ansible', 'yaml', 'decice.mirror_sync') "
        "if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "--dest" in out.stdout and "--from" in out.stdout
    assert "HEAVY []" in out.stdout
