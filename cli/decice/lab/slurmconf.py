"""Pure renderer of slurm.conf for a lab (containers and the host share it)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from decice.lab.model import LabNode


def cluster_name(lab: str) -> str:
    """SLURM cluster names are lower case alphanumerics (no dashes in older releases)."""
    cleaned = re.sub(r"[^a-z0-9]", "", lab.lower())
    return cleaned or "lab"


def render_slurm_conf(
    lab: str,
    controller: LabNode,
    nodes: Sequence[LabNode],
    cpus: int,
    auth_socket: str | None = None,
    memory_mb: int | None = None,
) -> str:
    """slurm.conf with what works in podman nodes: munge auth, linuxproc, no task plugin.

    ``NodeAddr`` carries each node's IP because the submit host cannot resolve node
    names. ``auth_socket`` is set only in the host's copy (its own munged socket).
    ``memory_mb`` is each node's ``RealMemory`` (jobs asking ``--mem`` need it; memory
    stays unconsumed: ``CR_Core``).
    """
    if not nodes:
        raise ValueError("a SLURM lab needs at least one compute node")
    if cpus < 1:
        raise ValueError(f"cpus must be positive, got {cpus}")
    lines = [
        "# written by decice lab",
        f"ClusterName={cluster_name(lab)}",
        f"SlurmctldHost={controller.name}({controller.ip})",
        "AuthType=auth/munge",
        "CredType=cred/munge",
    ]
    if auth_socket:
        lines.append(f"AuthInfo=socket={auth_socket}")
    lines += [
        "SlurmUser=slurm",
        "SlurmdUser=root",
        "StateSaveLocation=/var/lib/slurm/slurmctld",
        "SlurmdSpoolDir=/var/lib/slurm/slurmd",
        "SlurmctldPidFile=/run/slurmctld.pid",
        "SlurmdPidFile=/run/slurmd.pid",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ReturnToService=2",
        "SchedulerType=sched/backfill",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=60",
        "InactiveLimit=0",
        "MinJobAge=30",
        "KillWait=5",
        "Waittime=0",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
    ]
    memory = f" RealMemory={memory_mb}" if memory_mb else ""
    for node in nodes:
        lines.append(f"NodeName={node.name} NodeAddr={node.ip} CPUs={cpus}{memory} State=UNKNOWN")
    names = ",".join(n.name for n in nodes)
    lines.append(f"PartitionName=lab Nodes={names} Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"
