"""SLURM on a lab: config files, munge, the host as submit host, waiting for idle nodes."""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from decice.lab.errors import LabError
from decice.lab.host import ensure_commands, run
from decice.lab.model import LabNode
from decice.lab.munge import MungePaths, runtime_dir, write_keys
from decice.lab.slurmconf import render_slurm_conf
from decice.paths import Subpath

IDLE_TIMEOUT = 90.0
NODE_CONF = "/etc/slurm/slurm.conf"
NODE_KEY = "/etc/munge/munge.key"


@dataclass(frozen=True)
class SlurmFiles:
    directory: Path

    node_conf = Subpath("directory", "nodes", "slurm.conf")  # mounted into every container
    host_conf = Subpath("directory", "slurm.conf")  # the submit host's copy (AuthInfo=socket=...)
    env_file = Subpath("directory", "env.sh")

    @property
    def munge(self) -> MungePaths:
        return MungePaths(self.directory / "munge", runtime_dir(self.directory))

    def mounts(self) -> list[str]:
        return [f"{self.node_conf}:{NODE_CONF}:ro", f"{self.munge.node_key}:{NODE_KEY}:ro"]

    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.host_conf)}


def node_memory_mb(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """90 % of this machine's memory in MiB: what every node (sharing it) offers SLURM.

    Below what slurmd detects, so no node is drained for "low RealMemory"."""
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(int(line.split()[1]) / 1024 * 0.9)
    return None


def write_files(
    files: SlurmFiles,
    lab: str,
    controller: LabNode,
    nodes: Sequence[LabNode],
    munge_uid: int,
    munge_gid: int,
) -> None:
    """Key, both slurm.conf copies and env.sh."""
    ensure_commands({"salloc": "slurm-client", "munged": "munge"}, "the SLURM submit host")
    files.node_conf.parent.mkdir(parents=True, exist_ok=True)
    files.directory.chmod(0o755)
    files.node_conf.parent.chmod(0o755)
    write_keys(files.munge, munge_uid, munge_gid)
    cpus = os.cpu_count() or 1
    memory = node_memory_mb()
    files.node_conf.write_text(render_slurm_conf(lab, controller, nodes, cpus, memory_mb=memory))
    files.host_conf.write_text(
        render_slurm_conf(
            lab,
            controller,
            nodes,
            cpus,
            auth_socket=str(files.munge.socket),
            memory_mb=memory,
        )
    )
    for path in (files.node_conf, files.host_conf):
        path.chmod(0o644)
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in files.env().items())
    files.env_file.write_text(
        f"# source this file to submit jobs to lab '{lab}' from this host\n{exports}"
    )


def wait_idle(files: SlurmFiles, count: int, timeout: float = IDLE_TIMEOUT) -> None:
    """Wait until sinfo (from the host) shows ``count`` idle nodes."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        proc = run(["sinfo", "-h", "-N", "-o", "%N %t"], env=files.env(), check=False, timeout=30)
        states = [line.split()[1] for line in proc.stdout.splitlines() if len(line.split()) == 2]
        if len(states) == count and all(s == "idle" for s in states):
            return
        last = (proc.stdout + proc.stderr).strip()
        time.sleep(0.5)
    raise LabError(f"SLURM nodes not idle within {timeout:.0f} s; sinfo says: {last}")
