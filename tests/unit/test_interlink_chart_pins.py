"""interLink's cluster side: the chart pin (versions.yml vs the mirror's SHA256SUMS) and
the role's static chart values vs the pinned images (no `:latest`)."""

from __future__ import annotations

import pytest
import yaml

from decice import mirror, paths, versions
from tests.support import MIRROR, require

pytestmark = pytest.mark.unit


def _defaults() -> dict[str, object]:
    path = paths.collection_dir() / "roles" / "interlink" / "defaults" / "main.yml"
    return dict(yaml.safe_load(path.read_text(encoding="utf-8")))


def test_the_chart_is_pinned_with_the_mirror_sha256() -> None:
    artifact = versions.pinned()["interlink"]["artifact"]
    assert artifact["file"] == "charts/interlink-0.6.1.tgz" and artifact["url"] is None
    require((MIRROR / "charts" / "SHA256SUMS").is_file(), f"the upstream mirror {MIRROR}")
    sums = mirror.parse_sha256sums((MIRROR / "charts" / "SHA256SUMS").read_text(), "SHA256SUMS")
    assert sums["interlink-0.6.1.tgz"] == artifact["sha256"]


def test_the_chart_values_use_the_pinned_images() -> None:
    images = versions.pinned()["interlink"]["images"]
    values = _defaults()["interlink_default_values"]
    assert isinstance(values, dict)
    assert values["interlink"]["image"] == images["interlink"]
    assert values["virtualNode"]["image"] == images["virtual_kubelet"]
    assert values["sshBastion"]["image"] == images["ssh_bastion"]
    assert images["interlink"].endswith(":" + versions.version_of("interlink"))
    assert not any(str(i).endswith(":latest") for i in images.values())
    # the plugin is reached on the pod's loopback, through the bastion, never with a token
    assert values["plugin"] == {"address": "http://localhost", "port": 3000}
    assert values["sshBastion"]["enabled"] is True and values["interlink"]["enabled"] is True
