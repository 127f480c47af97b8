"""Every add-on chart straight from its upstream source, no mirror: an HTTPS file (Volcano,
EdgeMesh), an OCI artifact (Kubeflow Trainer, interLink's chart) and a chart directory in
a tag archive (cloudcore, Sedna), through the add-on engine's resolve step.

The upstreams are loopback stand-ins built from the REAL mirror charts
(tests/support.upstream_standins: an HTTP server and Debian's docker-registry), reached
through the spec's documented `upstream.rewrite`; `decice plan` names each source before
anything is fetched, and `decice mirror sync` fills a mirror from the same sources.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.decice.hybrid.plugins.module_utils import chartpin

from decice import versions
from decice.targets.base import helm_binary
from tests.support import (
    MIRROR,
    last_debug_json,
    repack_chart,
    require,
    resolve_task,
    run_decice,
    run_local_json,
    served_directory,
    sim_spec,
    tag_archive,
    upstream_standins,
)

pytestmark = pytest.mark.addons

ORIGIN = {
    "volcano": "url",
    "edgemesh": "url",
    "kubeedge": "source",
    "sedna": "source",
    "kubeflow_trainer": "oci",
    "interlink": "oci",
}


def _resolve_all(tmp: Path, upstream: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The engine's resolve step for every pinned chart, no mirror: what each checked, and
    the play's stats and custom stats."""
    tasks: list[dict[str, Any]] = []
    for component in sorted(ORIGIN):
        artifact = f"{{{{ decice_versions.{component}.artifact }}}}"
        collect = (
            f"{{{{ seen | default({{}}) | combine({{'{component}': "
            "addon_engine_artifact_checked}) }}"
        )
        tasks += [
            resolve_task(component, artifact),
            {"ansible.builtin.set_fact": {"seen": collect}},
        ]
    tasks.append({"ansible.builtin.debug": {"msg": "{{ seen | to_json }}"}})
    out = run_local_json(tmp / "resolve.yml", tasks, {
        "decice_state_dir": str(tmp / "state"),
        "decice_helm": helm_binary(),
        "decice_upstream_rewrite": upstream["rewrite"],
        "decice_upstream_plain_http": upstream["plain_http"],
    })  # fmt: skip
    return last_debug_json(out), out


def test_every_chart_from_its_upstream_source_verified_then_cached(tmp_path: Path) -> None:
    require((MIRROR / "charts" / "SHA256SUMS").is_file(), f"the upstream mirror {MIRROR}")
    pinned = {c: versions.pinned()[c]["artifact"] for c in ORIGIN}
    helm = helm_binary()
    with upstream_standins(MIRROR, tmp_path, pinned, helm) as upstream:
        spec = tmp_path / "decice.yaml"
        spec.write_text(
            sim_spec("up", ("n", 1, 'cpu: "4", memory: 8Gi'))
            + yaml.safe_dump({"upstream": upstream})
        )
        plan = run_decice(tmp_path, "plan", "--json")
        assert plan.returncode == 0, plan.stderr
        sources = json.loads(plan.stdout)["artifacts"]
        synced = run_decice(tmp_path, "mirror", "sync", "--dest", "m", "--json", timeout=600)
        seen, _ = _resolve_all(tmp_path, upstream)
        again, out = _resolve_all(tmp_path, upstream)  # from the artifact cache
    (tmp_path / "offline").mkdir()
    offline, gone = _resolve_all(tmp_path / "offline", upstream)  # the stand-ins are down
    for component, origin in ORIGIN.items():
        checked = seen[component]
        assert checked["origin"] == origin, (component, checked)
        assert checked["content_sha256"] == pinned[component]["content_sha256"], component
        # repacked files and charts packaged from a source tree are not the mirror's bytes
        want = "sha256" if origin == "oci" else "content"  # helm pull keeps pushed bytes
        assert checked["verified_by"] == want, (component, checked)
        assert again[component]["verified_by"] == want
        assert sources[component]["from"] == origin, sources[component]
    for component in ("kubeflow_trainer", "interlink"):
        assert seen[component]["oci_digest"].startswith("sha256:"), seen[component]
    assert "127.0.0.1" in sources["sedna"]["location"]  # the rewrite is applied in the plan
    assert sources["sedna"]["path"] == "build/helm/sedna"
    assert sum(s["changed"] for s in out["stats"].values()) == 0  # nothing fetched again
    # `decice mirror sync` takes the same sources: a mirror built on a connected machine
    items = {i["component"]: i for i in json.loads(synced.stdout)["artifacts"]}
    for component in ORIGIN:
        assert items[component]["status"] == "copied", items[component]
        placed = tmp_path / "m" / pinned[component]["file"]
        assert chartpin.file_content(str(placed)).digest == pinned[component]["content_sha256"]
    # an upstream that cannot be reached: not done, said per add-on, nothing failed
    assert all(offline[c]["verified_by"] == "" for c in ORIGIN), offline
    not_done = gone["global_custom_stats"]["decice_not_done"]
    assert sorted(not_done) == sorted(ORIGIN)
    for component, why in not_done.items():
        assert why.startswith("cannot fetch ") and "127.0.0.1" in why, (component, why)
        assert "set mirror.path (or mirror.url)" in why
    cache = tmp_path / "state" / "artifacts"
    assert not list((cache / "sources").iterdir())  # a source archive is used once
    assert sorted(p.name for p in (cache / "charts").iterdir()) == sorted(
        Path(a["file"]).name for a in pinned.values()
    )


def _symlink_out(archive: Path, member: str) -> None:
    """``archive`` (a tag archive) with ``member`` replaced by a symlink to /etc/hostname."""
    raw = io.BytesIO()
    with tarfile.open(archive, "r:gz") as src, tarfile.open(fileobj=raw, mode="w") as out:
        for info in src.getmembers():
            if info.name.endswith(member):
                link = tarfile.TarInfo(info.name)
                link.type, link.linkname = tarfile.SYMTYPE, "/etc/hostname"
                out.addfile(link)
            else:
                out.addfile(info, src.extractfile(info) if info.isfile() else None)
    archive.write_bytes(gzip.compress(raw.getvalue()))


def test_a_changed_tag_archive_is_refused_before_anything_naming_source_file_and_pins(
    tmp_path: Path,
) -> None:
    """Sedna's chart from a tag archive (the `source` shape) with one byte changed, with an
    extra file, and with a file turned into a symlink out of the chart: each refused by the
    engine's resolve step naming the archive, the chart path and the pins; nothing kept."""
    require((MIRROR / "charts" / "SHA256SUMS").is_file(), f"the upstream mirror {MIRROR}")
    sedna = versions.pinned()["sedna"]["artifact"]
    archive_url, chart_path = sedna["source"]["archive"], sedna["source"]["path"]
    below = archive_url.split("://", 1)[1]

    def changed(files: dict[str, bytes]) -> None:
        files["values.yaml"] += b"#"

    def extra(files: dict[str, bytes]) -> None:
        files["templates/extra.yaml"] = b"# not in the pinned chart\n"

    served = tmp_path / "served"
    for case, edit in (("changed", changed), ("extra", extra), ("symlink", None)):
        chart = repack_chart(MIRROR / sedna["file"], tmp_path / f"{case}.tgz", edit=edit)
        dest = served / case / below
        dest.parent.mkdir(parents=True)
        tag_archive(chart, dest, chart_path)
        if case == "symlink":
            _symlink_out(dest, f"{chart_path}/values.yaml")
    tasks: list[dict[str, Any]] = []
    with served_directory(served) as url:
        for case in ("changed", "extra", "symlink"):
            rewrite = {"https://github.com/": f"{url}/{case}/github.com/"}
            tasks.append(
                {
                    "block": [
                        resolve_task(
                            "sedna",
                            sedna,
                            addon_engine_upstream_rewrite=rewrite,
                            addon_engine_cache_dir=str(tmp_path / case / "artifacts"),
                        )
                    ],
                    "rescue": [
                        {
                            "ansible.builtin.set_fact": {
                                case: "{{ ansible_failed_result.msg | default('') }}"
                            }
                        }
                    ],
                }
            )
        tasks.append(
            {"ansible.builtin.debug": {"msg": "{{ [changed, extra, symlink] | to_json }}"}}
        )
        out = run_local_json(
            tmp_path / "resolve.yml",
            tasks,
            {"decice_state_dir": str(tmp_path / "state"), "decice_helm": helm_binary()},
        )
    messages = dict(zip(("changed", "extra", "symlink"), last_debug_json(out), strict=True))
    for case, msg in messages.items():
        assert f"{url}/{case}/github.com/" in msg and chart_path in msg, (case, msg)
        assert "Nothing was installed" in msg, (case, msg)
        if case != "symlink":
            assert sedna["content_sha256"] in msg and sedna["sha256"] in msg, (case, msg)
        charts = tmp_path / case / "artifacts" / "charts"
        assert not charts.exists() or not any(charts.iterdir()), case  # nothing kept
    assert "values.yaml" in messages["symlink"] and "link" in messages["symlink"]
