"""The SLURM commands the plugin runs (sbatch, squeue, scancel, scontrol, sacct), parsed.

All run as the plugin's user from its PATH, with SLURM's own environment (SLURM_CONF).
"""

from __future__ import annotations

import logging
import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from decice import command
from decice.interlink.errors import SlurmError

log = logging.getLogger("decice.interlink")

TIMEOUT = 30.0
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}
UNUSABLE_NODE = {
    "DOWN",
    "DRAIN",
    "DRAINED",
    "DRAINING",
    "FAIL",
    "FAILING",
    "FUTURE",
    "NOT_RESPONDING",
}


def _run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        return command.run(
            argv,
            check=check,
            timeout=TIMEOUT,
            name=argv[0],
            missing_hint="the plugin needs SLURM's commands on PATH",
            tail=500,
        )
    except command.CommandError as exc:
        raise SlurmError(str(exc)) from exc


# sbatch reads #PBS and #BSUB lines as directives too unless told not to: only the
# plugin's own #SBATCH lines count
SBATCH = ("sbatch", "--parsable", "--ignore-pbs")


def sbatch(script: Path) -> str:
    """Submit ``script``; its job id."""
    out = _run([*SBATCH, str(script)]).stdout.strip()
    jid = out.split(";")[0].strip()
    if not jid.isdigit():
        raise SlurmError(f"sbatch answered {out!r}, not a job id")
    return jid


def scancel(jids: Iterable[str], signal: str = "") -> None:
    """Cancel jobs or steps (``J.S``); ones that already ended are no error. With
    ``signal``, only send it (a step's graceful stop: a step's cancel is a SIGKILL)."""
    ids = [j for j in jids if j]
    if ids:
        sig = [f"--signal={signal}"] if signal else []
        _run(["scancel", "--quiet", *sig, *ids], check=False)


@dataclass(frozen=True)
class Job:
    jid: str
    state: str  # squeue's %T: PENDING, RUNNING, COMPLETED, CANCELLED, TIMEOUT, ...
    reason: str
    name: str
    workdir: str
    nodelist: str = ""  # squeue's %N: the allocated nodes, in SLURM's compact form
    time_left: str = ""  # squeue's %L: [D-]H:M:S, UNLIMITED, INVALID, NOT_SET

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


def queue() -> dict[str, Job]:
    """The user's jobs squeue still knows (active ones and recently ended ones)."""
    out = _run(["squeue", "--me", "-h", "-t", "all", "-o", "%i|%T|%r|%j|%N|%L|%Z"]).stdout
    return parse_queue(out)


def parse_queue(text: str) -> dict[str, Job]:
    """squeue lines ``id|state|reason|name|nodes|left|workdir`` (the workdir last: it may
    hold a ``|``); the shorter ``id|state|reason|name|workdir`` is read too."""
    jobs = {}
    for line in text.splitlines():
        parts = line.split("|", 6)
        if len(parts) not in (5, 7) or not parts[0].strip():
            continue
        jid = parts[0].strip()
        head = (jid, parts[1].strip(), parts[2].strip(), parts[3])
        if len(parts) == 5:
            jobs[jid] = Job(*head, parts[4])
        else:
            jobs[jid] = Job(*head, parts[6], parts[4].strip(), parts[5].strip())
    return jobs


def seconds(text: str) -> int | None:
    """SLURM's duration ``[D-]HH:MM:SS``, ``MM:SS`` or ``MM`` in seconds; None for
    UNLIMITED, INVALID, NOT_SET and anything else."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text.strip())
    if not match:
        return None
    days, first, second, third = match.groups()
    if third is not None:  # H:M:S
        hms = (int(first), int(second), int(third))
    elif second is not None:  # D-H:M or M:S
        hms = (int(first), int(second), 0) if days else (0, int(first), int(second))
    else:  # D-H or M
        hms = (int(first), 0, 0) if days else (0, int(first), 0)
    return int(days or 0) * 86400 + hms[0] * 3600 + hms[1] * 60 + hms[2]


@dataclass(frozen=True)
class Step:
    step_id: str  # "<job id>.<step id>"
    name: str
    nodelist: str


def steps() -> dict[str, Step]:
    """The user's running job steps, by step name (``squeue --steps``)."""
    return parse_steps(_run(["squeue", "--me", "--steps", "-h", "-o", "%i|%j|%N"]).stdout)


def parse_steps(text: str) -> dict[str, Step]:
    out = {}
    for line in text.splitlines():
        parts = line.split("|", 2)
        if len(parts) == 3 and "." in parts[0]:
            out[parts[1]] = Step(parts[0].strip(), parts[1], parts[2].strip())
    return out


def hostnames(nodelist: str) -> list[str]:
    """``node[1-3]`` -> node1 node2 node3 (``scontrol show hostnames``)."""
    if not nodelist or nodelist.startswith("("):
        return []
    return _run(["scontrol", "show", "hostnames", nodelist]).stdout.split()


def sacct(jid: str) -> tuple[str, int] | None:
    """(state, exit code) from accounting (("", 0): no record), None where sacct fails."""
    proc = _run(["sacct", "-n", "-P", "-X", "-j", jid, "-o", "State,ExitCode"], check=False)
    if proc.returncode != 0:
        return None
    for line in proc.stdout.splitlines():
        state, _, code = line.partition("|")
        if state and code:
            try:
                return state.split()[0], int(code.split(":")[0])
            except ValueError:
                return "", 0
    return "", 0  # sacct works but has no record of the job


@dataclass(frozen=True)
class Node:
    name: str
    cpus: int
    cpus_alloc: int
    memory_mb: int
    memory_alloc_mb: int
    gpus: int
    gpus_alloc: int
    state: str
    partitions: tuple[str, ...] = field(default_factory=tuple)

    @property
    def usable(self) -> bool:
        return not set(re.split(r"[+*~#!%$@^-]", self.state.upper())) & UNUSABLE_NODE


def _kv(line: str) -> dict[str, str]:
    out = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep:
            out[key] = value
    return out


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def gpu_count(gres: str) -> int:
    """GPUs in a Gres / GresUsed string ("gpu:2", "gpu:a100:4(S:0-1)", "gpu:0,mps:100")."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) >= 2:
            total += _int(parts[-1])
    return total


def parse_nodes(text: str) -> list[Node]:
    nodes = []
    for line in text.splitlines():
        kv = _kv(line)
        if "NodeName" not in kv:
            continue
        nodes.append(
            Node(
                name=kv["NodeName"],
                cpus=_int(kv.get("CPUTot")),
                cpus_alloc=_int(kv.get("CPUAlloc")),
                memory_mb=_int(kv.get("RealMemory")),
                memory_alloc_mb=_int(kv.get("AllocMem")),
                gpus=gpu_count(kv.get("Gres", "")),
                gpus_alloc=gpu_count(kv.get("GresUsed", "")),
                state=kv.get("State", ""),
                partitions=tuple(p for p in kv.get("Partitions", "").split(",") if p),
            )
        )
    return nodes


def nodes() -> list[Node]:
    return parse_nodes(_run(["scontrol", "-o", "show", "nodes"]).stdout)


def parse_default_partition(text: str) -> str:
    names = []
    for line in text.splitlines():
        kv = _kv(line)
        if "PartitionName" in kv:
            if kv.get("Default") == "YES":
                return kv["PartitionName"]
            names.append(kv["PartitionName"])
    return names[0] if len(names) == 1 else ""


def default_partition() -> str:
    return parse_default_partition(_run(["scontrol", "-o", "show", "partition"]).stdout)


@dataclass(frozen=True)
class Allocation:
    cpus: int
    memory_mb: int
    gpus: int


def _memory_mb(text: str) -> int:
    """SLURM's TRES memory ("512M", "2G", "1.5T", plain megabytes) in MiB."""
    match = re.fullmatch(r"([0-9.]+)([KMGTP]?)", text.strip().upper())
    if not match:
        return 0
    factor = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}
    return int(float(match.group(1)) * factor[match.group(2)])


def parse_allocations(text: str) -> dict[str, Allocation]:
    """The running jobs of ``scontrol -o show job`` and what each holds (its AllocTRES)."""
    out = {}
    for line in text.splitlines():
        kv = _kv(line)
        if kv.get("JobState") != "RUNNING" or "JobId" not in kv:
            continue
        tres = dict(
            item.partition("=")[::2] for item in kv.get("AllocTRES", "").split(",") if "=" in item
        )
        out[kv["JobId"]] = Allocation(
            cpus=_int(tres.get("cpu")),
            memory_mb=_memory_mb(tres.get("mem", "0")),
            gpus=_int(tres.get("gres/gpu")),
        )
    return out


def allocations() -> dict[str, Allocation]:
    """What each running job the user can see holds (scontrol -o show job)."""
    return parse_allocations(_run(["scontrol", "-o", "show", "job"]).stdout)
