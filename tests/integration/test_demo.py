"""`make demo` as README tells it, with a SLURM lab: the pod on the virtual HPC node runs
as a SLURM job.

README: create a SLURM lab in the demo directory (`decice lab create --slurm --nodes 3
--name demo-hpc`), then `make demo` (setup, then scripts/demo.sh). Here the setup is this
checkout's (bootstrap already ran) and scripts/demo.sh runs with DECICE_DEMO_DIR set to
that directory: plan, up (built-in default spec, hpc-0 backed by interLink on the lab's
node1), status, the sample workload, examples/hpc-pod.yaml as a SLURM job and its log,
down, reset, runs.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.labsupport import require_lab_prerequisites
from tests.support import BIN, REPO

pytestmark = [pytest.mark.slurm, pytest.mark.sim, pytest.mark.addons]

LAB = "demo-hpc"


@pytest.fixture
def demo_dir(tmp_path_factory: pytest.TempPathFactory, sim_binaries: object) -> Iterator[Path]:
    require_lab_prerequisites()
    work = tmp_path_factory.mktemp("demo")
    decice = str(BIN / "decice")
    created = subprocess.run(
        [decice, "lab", "create", "--slurm", "--nodes", "3", "--name", LAB],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    try:
        assert created.returncode == 0, created.stdout + created.stderr
        yield work
    finally:
        subprocess.run(
            [decice, "lab", "destroy", "--name", LAB],
            cwd=work,
            capture_output=True,
            timeout=300,
            check=False,
        )


def test_make_demo_runs_a_pod_as_a_slurm_job(demo_dir: Path) -> None:
    env = {**os.environ, "DECICE_DEMO_DIR": str(demo_dir)}
    proc = subprocess.run(
        [str(REPO / "scripts" / "demo.sh")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert f"== SLURM lab {LAB} found: hpc-0 is backed by interLink on it" in out
    assert re.search(r"^hpc-hello\s+0/1\s+Completed\s.*\shpc-0\s", out, re.M), out[-4000:]
    assert re.search(r"^pod ran as SLURM job \d+ on node[123]$", out, re.M), out[-4000:]
    assert "decice down ok" in out and "decice reset ok" in out
