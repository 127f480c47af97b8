"""scripts/demo_hpc_spec.py: `make demo`'s spec when a SLURM lab is present is the built-in
default spec with hpc-0 backed by an interLink endpoint on the lab, and decice accepts it."""

from __future__ import annotations

import json
import sys

import pytest

from decice import spec
from tests.support import REPO, run_captured

pytestmark = pytest.mark.unit


def test_demo_spec_backs_hpc_0_by_the_lab_and_validates() -> None:
    lab = {
        "name": "demo-hpc",
        "nodes": [{"name": "node1"}, {"name": "node2"}],
        "ssh_config": "/tmp/demo/.decice/lab/demo-hpc/ssh_config",
        "user": "decice",
        "shared_mount": "/shared",
        "slurm_env": {"SLURM_CONF": "/x/slurm.conf"},
    }
    done = run_captured(
        [
            sys.executable,
            str(REPO / "scripts" / "demo_hpc_spec.py"),
            str(REPO / "cli" / "decice" / "data" / "default-spec.yaml"),
        ],
        input=json.dumps(lab),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    parsed, _ = spec.parse(done.stdout, "demo.yaml")
    default, _ = spec.parse(spec.builtin_text(), "default")
    assert parsed.sim == default.sim  # the same simulated cluster
    assert parsed.allocation.ssh_config == lab["ssh_config"]
    (endpoint,) = parsed.addons.interlink.endpoints
    assert (endpoint.node, endpoint.login_host, endpoint.user) == ("hpc-0", "node1", "decice")
    assert endpoint.data_dir == "/shared/decice-demo" and endpoint.runtime == "bare"
    assert any(g.name_prefix == "hpc" and g.count == 1 for g in parsed.sim.nodes)
