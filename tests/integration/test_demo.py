"""`make demo` as README tells it, with a SLURM lab: the pod on the virtual HPC node runs
as a SLURM job.

README: create a SLURM lab in the demo directory (`decice lab create --slurm --nodes 3
--name demo-hpc`, or name another with `DECICE_DEMO_LAB`), then `make demo` (setup, then
scripts/demo.sh). Here the setup is this checkout's (bootstrap already ran), the lab is
the session's SLURM lab (three nodes, as README's; created once for the whole SLURM
group, tests/integration/conftest.py) and scripts/demo.sh runs with DECICE_DEMO_DIR set
to a fresh directory and DECICE_DEMO_LAB to the session lab's name: plan, up (built-in
default spec, hpc-0 backed by interLink on the lab's node1), status, the sample workload,
examples/hpc-pod.yaml as a SLURM job and its log, down, reset, runs. With
DECICE_DEMO_UPSTREAM=standins (README) and no mirror, every add-on chart comes from
scripts/upstream_standins.py (the mirror's real charts in their upstream shapes on
loopback), so `up` ends ok, not incomplete.

The session lab was created under the session's lab state root, not in the demo
directory: the demo directory's `.decice/lab/<name>` is a symlink to it, so `decice lab
status` run there finds the very files `decice lab create` would have written in place.
The demo's `down` leaves nothing on the lab (test_interlink_e2e proves what `down` removes
from a login host); the lab stays up for the group's other tests.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from decice import lab
from tests.integration.labsupport import ssh
from tests.support import REPO, run_captured

pytestmark = [pytest.mark.slurm, pytest.mark.sim, pytest.mark.addons]


@pytest.fixture
def demo_dir(
    tmp_path_factory: pytest.TempPathFactory, slurm_cluster: lab.LabInfo, sim_binaries: object
) -> Path:
    """A fresh demo directory whose state holds the session's SLURM lab (a symlink)."""
    work = tmp_path_factory.mktemp("demo")
    labs = work / ".decice" / "lab"
    labs.mkdir(parents=True)
    (labs / slurm_cluster.name).symlink_to(slurm_cluster.state_dir, target_is_directory=True)
    return work


def test_make_demo_runs_a_pod_as_a_slurm_job(demo_dir: Path, slurm_cluster: lab.LabInfo) -> None:
    lab_name = slurm_cluster.name
    env = {
        **os.environ,
        "DECICE_DEMO_DIR": str(demo_dir),
        "DECICE_DEMO_LAB": lab_name,
        "DECICE_DEMO_UPSTREAM": "standins",
    }
    proc = run_captured([str(REPO / "scripts" / "demo.sh")], cwd=REPO, env=env, timeout=1500)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert f"== SLURM lab {lab_name} found: hpc-0 is backed by interLink on it" in out
    assert re.search(r"^hpc-hello\s+0/1\s+Completed\s.*\shpc-0\s", out, re.M), out[-4000:]
    assert re.search(r"^pod ran as SLURM job \d+ on node[123]$", out, re.M), out[-4000:]
    assert "== upstream stand-ins serve the mirror's charts" in out
    assert re.search(r"^decice up ok in ", out, re.M), out[-6000:]  # not incomplete
    assert "decice down ok" in out and "decice reset ok" in out
    # the demo's down left nothing on the session lab's login host: no plugin process, no
    # install or data directory of the lab user, and the lab is still whole for the group
    login = slurm_cluster.nodes[0].name
    left = ssh(
        slurm_cluster,
        login,
        f"pgrep -u {slurm_cluster.user} -f '[d]ecice-interlink-slurm' || true; "
        f"su - {slurm_cluster.user} -c 'ls -A ~/.local/share/decice-interlink 2>/dev/null'; "
        f"ls -A {slurm_cluster.shared_mount}/decice-demo 2>/dev/null || true",
    )
    assert left == "", left
    after = lab.status(slurm_cluster.name, Path(slurm_cluster.state_dir).parents[1])
    assert after is not None and all(n.state == "running" for n in after.nodes), after
