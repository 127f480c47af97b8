"""decice-interlink-slurm against the lab's real SLURM, run as the lab's user ``decice``.

The lab gives every node user ``decice`` (the lab key authorized) and ``/shared``, one
host directory bind-mounted on every node: the plugin's data dir lives there.
"""

from __future__ import annotations

import pytest

from decice import lab
from tests.integration.labsupport import ssh
from tests.support import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.addons]


def test_lab_user_and_shared_dir(slurm_cluster: lab.LabInfo) -> None:
    info = slurm_cluster
    assert info.user == "decice" and info.shared_mount == "/shared"
    for host in ["slurmctl", *(n.name for n in info.nodes)]:
        assert ssh(info, f"decice@{host}", "id -u; id -g; echo $HOME") == "1500\n1500\n/home/decice"
    ssh(info, "decice@node1", "echo hello > /shared/probe")
    assert ssh(info, "decice@node3", "cat /shared/probe") == "hello"
    job = ssh(
        info, "decice@node1", "sbatch --parsable -o /shared/probe.out --wrap 'id -un; hostname'"
    )
    assert job.isdigit()

    def done() -> str | None:
        out = ssh(info, "decice@node2", "cat /shared/probe.out 2>/dev/null || true")
        return out if len(out.splitlines()) == 2 else None

    user, host = wait_for("the probe job's output", done, timeout=60).splitlines()
    assert user == "decice" and host in {n.name for n in info.nodes}
