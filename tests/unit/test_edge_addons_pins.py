"""KubeEdge/EdgeMesh/Sedna: the pins (versions.yml vs the mirror's SHA256SUMS), the roles'
static chart values vs the pinned image tags, and the registry's dependency rule through
`decice plan` (sedna without kubeedge: exit 2 naming the spec line)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from decice import mirror, mirror_sync, paths, spec, versions
from tests.support import MIRROR, require, run_decice, sim_spec

pytestmark = pytest.mark.unit

EDGE = {
    "kubeedge": "cloudcore-1.23.0.tgz",
    "edgemesh": "edgemesh-0.1.0.tgz",
    "sedna": "sedna-0.1.0.tgz",
}


def _defaults(role: str) -> dict[str, object]:
    path = paths.collection_dir() / "roles" / role / "defaults" / "main.yml"
    return dict(yaml.safe_load(path.read_text(encoding="utf-8")))


@pytest.mark.parametrize(("component", "chart"), sorted(EDGE.items()))
def test_edge_charts_are_pinned_with_the_mirror_sha256(component: str, chart: str) -> None:
    artifact = versions.pinned()[component]["artifact"]
    assert artifact["file"] == f"charts/{chart}"
    require((MIRROR / "charts" / "SHA256SUMS").is_file(), f"the upstream mirror {MIRROR}")
    sums = mirror.parse_sha256sums((MIRROR / "charts" / "SHA256SUMS").read_text(), "SHA256SUMS")
    assert sums[chart] == artifact["sha256"]


def test_mirror_sync_lists_the_edge_pins(tmp_path: Path) -> None:
    path = tmp_path / "decice.yaml"
    path.write_text(sim_spec("m", ("n", 1, 'cpu: "4", memory: 8Gi')))
    got = {e.component: e for e in mirror_sync.entries(spec.load(path))}
    for component in EDGE:
        entry = got[component]
        assert entry.pin is not None and entry.pin.content_sha256, component
    # KubeEdge and Sedna publish no chart file; EdgeMesh's own tgz has the pinned content
    assert got["kubeedge"].pin.url is None and got["sedna"].pin.url is None  # type: ignore[union-attr]
    assert got["edgemesh"].pin.url == (  # type: ignore[union-attr]
        "https://raw.githubusercontent.com/kubeedge/edgemesh/v1.17.0/build/helm/edgemesh.tgz"
    )
    assert got["edgemesh"].addon == "kubeedge"  # EdgeMesh is part of the kubeedge add-on


def test_cloudcore_image_tags_are_the_pinned_release() -> None:
    tag = versions.pinned()["kubeedge"]["cloudcore_chart"]["image_tag"]
    assert tag == "v" + versions.version_of("kubeedge")
    values = _defaults("kubeedge")["kubeedge_default_values"]
    assert isinstance(values, dict)
    for key in ("cloudCore", "iptablesManager", "controllerManager", "admission"):
        assert values[key]["image"]["tag"] == tag, key
    assert values["cloudCore"]["modules"]["dynamicController"]["enable"] is True
    assert "psk" not in values.get("agent", {}), "the chart's or any fixed PSK must never be used"


def test_sedna_images_are_the_pinned_release() -> None:
    images = versions.pinned()["sedna"]["images"]
    values = _defaults("sedna")["sedna_default_values"]
    assert isinstance(values, dict)
    assert {k: v["image"] for k, v in values.items()} == images
    assert all(i.endswith(":v" + versions.version_of("sedna")) for i in images.values())


def test_plan_refuses_sedna_without_kubeedge_naming_the_line(tmp_path: Path) -> None:
    (tmp_path / "decice.yaml").write_text(
        sim_spec("edge", ("n", 1, 'cpu: "4", memory: 8Gi'))
        + "addons:\n  kubeedge:\n    enabled: false\n  sedna:\n    enabled: true\n"
    )
    lines = (tmp_path / "decice.yaml").read_text().splitlines()
    line = lines.index("    enabled: true") + 1
    result = run_decice(tmp_path, "plan", timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"decice.yaml:{line}:" in result.stderr
    assert "sedna needs kubeedge" in result.stderr
    assert "enable addons.kubeedge or set addons.sedna.enabled: false" in result.stderr
    assert not (tmp_path / ".decice").exists(), "bad input must change nothing"
