"""The edge add-ons' pins in `decice mirror sync`: KubeEdge (cloudcore), EdgeMesh and Sedna.

Their install and removal through `decice up`/`down` (cloudcore's config, EdgeMesh's PSK
and relay, the Istio CRDs, Sedna's CRDs and local controllers, zero leftovers, the PSK in
no output or file) is one lifecycle with Volcano and Kubeflow Trainer in test_addons.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from decice.sim.binaries.resolve import BinarySet
from tests.support import MIRROR, require, run_captured

pytestmark = pytest.mark.addons


def test_mirror_sync_pins_and_image_lists_of_the_edge(
    sim_binaries: BinarySet, tmp_path: Path
) -> None:
    """`decice mirror sync` copies the three pinned charts and lists the images as decice
    installs them: the pinned v1.23.1 / v0.7.0 tags, not the charts' stale defaults."""
    require((MIRROR / "charts" / "SHA256SUMS").is_file(), f"the upstream mirror {MIRROR}")
    (tmp_path / "decice.yaml").write_text(
        "name: m\ntarget: sim\n"
        "addons:\n  volcano: {enabled: false}\n  interlink: {enabled: false}\n"
        "  kubeflow: {enabled: false}\n"
    )
    env = {"PATH": f"{sim_binaries.path('helm').parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    done = run_captured(
        [sys.executable, "-m", "decice", "mirror", "sync", "--dest", "m", "--from", str(MIRROR),
         "--json"],
        cwd=tmp_path, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    copied = {a["component"]: a["status"] for a in result["artifacts"]}
    assert copied == {
        "volcano": "disabled",
        "kubeedge": "copied",
        "edgemesh": "copied",
        "sedna": "copied",
        "interlink": "disabled",
        "kubeflow_trainer": "disabled",
    }
    assert (tmp_path / "m" / "images" / "kubeedge.txt").read_text().split() == [
        "eclipse-mosquitto:1.6.15",
        "kubeedge/cloudcore:v1.23.1",
        "kubeedge/edgemesh-agent:v1.17.0",
        "kubeedge/iptables-manager:v1.23.1",
    ]
    assert (tmp_path / "m" / "images" / "sedna.txt").read_text().split() == [
        "kubeedge/sedna-gm:v0.7.0",
        "kubeedge/sedna-kb:v0.7.0",
        "kubeedge/sedna-lc:v0.7.0",
    ]
