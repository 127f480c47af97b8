"""`decice mirror sync` with the REAL upstream charts (../shared/mirror) and the real helm.

Sources: the mirror as a file:// URL and a copy served over HTTP on 127.0.0.1. Checked: the
synced files and SHA256SUMS equal the pins in roles/common/vars/main/versions.yml, a second
run copies nothing, a tampered source is refused by name with the destination unchanged, a
disabled add-on is not synced, the image lists are those of the charts as decice installs
them, and the add-on engine's resolve step accepts the synced directory as `mirror.path`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from decice import mirror, paths, versions
from decice.targets.base import helm_binary
from tests.support import (
    BIN,
    MIRROR,
    REPO,
    last_debug_json,
    repack_chart,
    require,
    resolve_task,
    run_captured,
    run_decice,
    run_local_json,
    served_directory,
    sim_spec,
)

pytestmark = pytest.mark.addons

VOLCANO_SCHEDULER = "docker.io/volcanosh/vc-scheduler:v1.15.1"
TRAINER = "ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0"


@pytest.fixture(scope="module")
def pins() -> dict[str, dict[str, Any]]:
    """component -> artifact pin, for every pinned chart (all enabled by default; the full
    Kubeflow profile's source archive is not a chart and mirror sync does not fetch it)."""
    require((MIRROR / "charts" / "SHA256SUMS").is_file(), f"the upstream mirror {MIRROR}")
    helm = helm_binary()
    require(Path(helm).is_file() or shutil.which(helm) is not None, "helm (sim binaries or PATH)")
    table = versions.pinned()
    return {
        name: e["artifact"]
        for name, e in table.items()
        if "artifact" in e and e["artifact"]["file"].startswith("charts/")
    }


def sync(cwd: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    result = run_decice(cwd, "mirror", "sync", "--json", *args, timeout=300)
    data = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.returncode, data, result.stderr


def statuses(data: dict[str, Any]) -> dict[str, str]:
    return {i["component"]: i["status"] for i in data["artifacts"]}


def _one_byte_changed(files: dict[str, bytes]) -> None:
    files["values.yaml"] = files["values.yaml"].replace(b"v1.15.1", b"v1.15.2", 1)


def assert_matches_pins(dest: Path, pins: dict[str, dict[str, Any]]) -> None:
    for component, pin in pins.items():
        path = dest / pin["file"]
        assert mirror.sha256_file(path) == pin["sha256"], component
        listed = mirror.parse_sha256sums((path.parent / mirror.SUMS_FILE).read_text())
        assert listed[path.name] == pin["sha256"], component
    leftovers = [p.name for p in dest.rglob(".*")]
    assert leftovers == []  # no temporary files


def test_sync_from_file_url_then_nothing_to_copy(
    tmp_path: Path, pins: dict[str, dict[str, Any]]
) -> None:
    dest = tmp_path / "mirror"
    code, data, err = sync(tmp_path, "--dest", str(dest), "--from", MIRROR.as_uri())
    assert code == 0, err
    assert {c: statuses(data)[c] for c in pins} == dict.fromkeys(pins, "copied")
    assert_matches_pins(dest, pins)
    assert "charts/SHA256SUMS" in data["sums_written"]
    volcano = (dest / "images" / "volcano.txt").read_text().splitlines()
    kubeflow = (dest / "images" / "kubeflow.txt").read_text().splitlines()
    assert VOLCANO_SCHEDULER in volcano and volcano == sorted(set(volcano))
    assert TRAINER in kubeflow and kubeflow == sorted(set(kubeflow))
    no_pin = [i["component"] for i in data["artifacts"] if i["status"] == "no pin"]
    assert sorted(no_pin) == sorted(set(statuses(data)) - set(pins))
    before = {p: p.stat().st_mtime_ns for p in dest.rglob("*") if p.is_file()}

    again = run_decice(tmp_path, "mirror", "sync", "--dest", str(dest), "--from", str(MIRROR))
    assert again.returncode == 0, again.stderr
    assert "nothing copied: every artifact was already in place" in again.stdout
    assert "images/volcano.txt: unchanged" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in dest.rglob("*") if p.is_file()} == before


def test_sync_over_http(tmp_path: Path, pins: dict[str, dict[str, Any]]) -> None:
    served = tmp_path / "served"
    shutil.copytree(MIRROR / "charts", served / "charts")
    dest = tmp_path / "mirror"
    with served_directory(served) as url:
        code, data, err = sync(tmp_path, "--dest", str(dest), "--from", url)
    assert code == 0, err
    for component, pin in pins.items():
        item = next(i for i in data["artifacts"] if i["component"] == component)
        assert (item["status"], item["source"]) == ("copied", f"{url}/{pin['file']}")
    assert_matches_pins(dest, pins)


def test_tampered_source_is_refused_and_destination_unchanged(
    tmp_path: Path, pins: dict[str, dict[str, Any]]
) -> None:
    source = tmp_path / "source"
    shutil.copytree(MIRROR / "charts", source / "charts")
    volcano = pins["volcano"]
    tampered = source / volcano["file"]
    tampered.chmod(0o644)
    repack_chart(MIRROR / volcano["file"], tampered, edit=_one_byte_changed)
    dest = tmp_path / "mirror"
    (dest / "charts").mkdir(parents=True)
    (dest / volcano["file"]).write_bytes(b"an older copy")
    code, data, _ = sync(tmp_path, "--dest", str(dest), "--from", str(source))
    assert code == 1
    item = next(i for i in data["artifacts"] if i["component"] == "volcano")
    assert item["status"] == "failed"
    assert str(tampered) in item["detail"]
    assert volcano["sha256"] in item["detail"] and volcano["content_sha256"] in item["detail"]
    assert mirror.sha256_file(tampered) in item["detail"]
    assert (dest / volcano["file"]).read_bytes() == b"an older copy"
    assert statuses(data)["kubeflow_trainer"] == "copied"  # everything else was still done
    assert "volcano-1.15.1.tgz" not in (dest / "charts" / mirror.SUMS_FILE).read_text()
    assert not (dest / "images" / "volcano.txt").exists()
    text = run_decice(tmp_path, "mirror", "sync", "--dest", str(dest), "--from", str(source))
    assert text.returncode == 1
    assert "failed" in text.stdout and str(tampered) in " ".join(text.stdout.split())


def test_spec_mirror_path_disabled_addon_and_values(
    tmp_path: Path, pins: dict[str, dict[str, Any]]
) -> None:
    spec = tmp_path / "decice.yaml"
    spec.write_text(
        sim_spec("m", ("n", 1, 'cpu: "4", memory: 8Gi'))
        + "mirror:\n  path: site-mirror\n"
        + "addons:\n  kubeflow: {enabled: false}\n"
        + "  volcano:\n    values:\n      basic: {scheduler_image_tag_version: v9.9.9}\n"
    )
    code, data, err = sync(tmp_path, "--from", str(MIRROR))
    assert code == 0, err
    dest = tmp_path / "site-mirror"
    assert data["dest"] == str(dest)
    assert statuses(data)["kubeflow_trainer"] == "disabled"
    assert not (dest / pins["kubeflow_trainer"]["file"]).exists()
    assert not (dest / "images" / "kubeflow.txt").exists()
    volcano = (dest / "images" / "volcano.txt").read_text().splitlines()
    assert "docker.io/volcanosh/vc-scheduler:v9.9.9" in volcano
    assert VOLCANO_SCHEDULER not in volcano


def test_missing_dest_is_bad_input(tmp_path: Path) -> None:
    result = run_decice(tmp_path, "mirror", "sync", "--from", str(MIRROR))
    assert result.returncode == 2
    assert "fix: pass --dest DIR, or set mirror.path" in result.stderr
    assert list(tmp_path.iterdir()) == []


def resolve_play(versions_file: Path, pins: dict[str, dict[str, Any]], dest: Path) -> str:
    """A play that runs the engine's resolve step for every pin and asserts the mirror copy."""
    tasks = []
    for component, pin in sorted(pins.items()):
        tasks += [
            resolve_task(component, f"{{{{ decice_versions.{component}.artifact }}}}"),
            {
                "name": f"Check {component}",
                "ansible.builtin.assert": {
                    "that": [
                        "addon_engine_available | bool",
                        f"addon_engine_artifact_path == '{dest / pin['file']}'",
                    ]
                },
            },
        ]
    play = {
        "name": "Resolve every pinned artifact from the synced mirror",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars_files": [str(versions_file)],
        "tasks": tasks,
    }
    return json.dumps([play])  # JSON is YAML


def test_synced_directory_is_a_mirror_the_engine_accepts(
    tmp_path: Path, pins: dict[str, dict[str, Any]]
) -> None:
    dest = tmp_path / "mirror"
    code, _, err = sync(tmp_path, "--dest", str(dest), "--from", str(MIRROR))
    assert code == 0, err
    play = tmp_path / "resolve.yml"
    play.write_text(resolve_play(paths.versions_file(), pins, dest))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    result = run_captured(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", str(play), "-e",
         json.dumps({
            "decice_mirror": str(dest),
            "decice_state_dir": str(tmp_path / "state"),
            "ansible_python_interpreter": sys.executable,
        })],
        cwd=REPO, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"localhost\s+:.*failed=0", result.stdout), result.stdout


def test_another_packaging_is_taken_by_its_content_pin_and_another_chart_never(
    tmp_path: Path, pins: dict[str, dict[str, Any]]
) -> None:
    """Upstream's own tgz of a chart differs byte-wise from the mirror's (EdgeMesh's does;
    scripts/chart_content_digest.py shows both have one content pin): sync and the engine
    take it by its content pin, from a source mirror, an upstream URL or a chart directory;
    a chart with one byte changed, or a directory with a symlink out of it, is refused
    naming source and pins, and the engine keeps no download of it."""
    volcano = pins["volcano"]
    source = tmp_path / "source"
    (source / "charts").mkdir(parents=True)
    other = repack_chart(MIRROR / volcano["file"], source / volcano["file"])
    assert mirror.sha256_file(other) != volcano["sha256"]
    dest = tmp_path / "mirror"
    code, data, err = sync(tmp_path, "--dest", str(dest), "--from", str(source))
    item = next(i for i in data["artifacts"] if i["component"] == "volcano")
    assert (item["status"], item["sha256"]) == ("copied", mirror.sha256_file(other)), err
    assert code == 1  # the other charts are not in this source
    sums = mirror.parse_sha256sums((dest / "charts" / mirror.SUMS_FILE).read_text())
    assert sums["volcano-1.15.1.tgz"] == mirror.sha256_file(other)  # what the mirror holds

    served = tmp_path / "served"
    (served / "charts").mkdir(parents=True)
    shutil.copy(other, served / "charts" / "volcano-1.15.1.tgz")
    repack_chart(MIRROR / volcano["file"], served / "charts" / "bad.tgz", edit=_one_byte_changed)
    chart_dir = tmp_path / "chart-dir"
    shutil.unpack_archive(MIRROR / volcano["file"], chart_dir)
    outside = tmp_path / "chart-out"
    shutil.copytree(chart_dir, outside)
    (outside / "volcano" / "templates" / "secret.yaml").symlink_to("/etc/hostname")

    def resolve(name: str, artifact: dict[str, Any], mirror_path: str = "") -> dict[str, Any]:
        return resolve_task(name, artifact, addon_engine_mirror=mirror_path)

    def content(name: str, path: Path) -> dict[str, Any]:
        return {
            "name": f"Verify {name}",
            "decice.hybrid.chart_content": {
                "path": str(path),
                "content_sha256": volcano["content_sha256"],
                "helm": helm_binary(),
            },
            "register": name,
            "failed_when": False,
        }

    cache = tmp_path / "state" / "artifacts"
    with served_directory(served) as url:
        tasks = [
            resolve("synced", dict(volcano), str(dest)),
            {"ansible.builtin.set_fact": {"synced": "{{ addon_engine_artifact_checked }}"}},
            resolve("upstream", {**volcano, "url": f"{url}/charts/volcano-1.15.1.tgz"}),
            {"ansible.builtin.set_fact": {"upstream": "{{ addon_engine_artifact_checked }}"}},
            content("directory", chart_dir / "volcano"),
            content("outside", outside / "volcano"),
            {
                "block": [resolve("bad", {**volcano, "file": "charts/bad.tgz",
                                          "url": f"{url}/charts/bad.tgz"})],
                "rescue": [{"ansible.builtin.set_fact": {"bad": "{{ ansible_failed_result }}"}}],
            },
            {"ansible.builtin.debug": {"msg": "{{ {'synced': synced, 'upstream': upstream, "
                                              "'directory': directory, 'outside': outside, "
                                              "'bad': bad} | to_json }}"}},
        ]  # fmt: skip
        out = run_local_json(
            tmp_path / "resolve.yml", tasks, {"decice_state_dir": str(tmp_path / "state")}
        )
    seen = last_debug_json(out)
    assert seen["synced"]["verified_by"] == "content"
    assert seen["synced"]["origin"] == "mirror.path"
    assert seen["upstream"]["verified_by"] == "content", seen
    assert seen["upstream"]["sha256"] == mirror.sha256_file(other)
    assert seen["directory"]["verified_by"] == "content"  # helm package of the directory
    assert seen["directory"]["content_sha256"] == volcano["content_sha256"]
    outside_msg = seen["outside"]["msg"]
    assert "verified_by" not in seen["outside"]
    assert "templates/secret.yaml is a symlink to /etc/hostname" in outside_msg
    refused = seen["bad"]["msg"]
    assert f"{url}/charts/bad.tgz" in refused and volcano["content_sha256"] in refused
    assert "Nothing was installed" in refused
    assert not (cache / "charts" / "bad.tgz").exists()  # the refused download is not kept
