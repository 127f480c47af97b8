"""podman with decice's own containers.conf (never the machine's /etc/containers one)."""

from __future__ import annotations

import json
import resource
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from decice import atomicfile
from decice.lab.errors import LabError
from decice.lab.host import hard_nofile_limit, run

NPROC_CAP = 32768


def render_containers_conf(nofile: int, nproc: int) -> str:
    """containers.conf that works on hosts where root lacks CAP_SYS_RESOURCE.

    Limits must not exceed the caller's hard limits, the runtime is runc (crun
    refuses hybrid cgroup layouts) and cgroups are managed by cgroupfs.
    """
    if nofile < 1 or nproc < 1:
        raise LabError(f"invalid ulimits nofile={nofile} nproc={nproc}: both must be positive")
    return (
        "# written by decice; used through CONTAINERS_CONF for every podman call\n"
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        "\n"
        "[engine]\n"
        'runtime = "runc"\n'
        'cgroup_manager = "cgroupfs"\n'
    )


def host_limits() -> tuple[int, int]:
    """(nofile, nproc) to give containers: the hard limits, nproc capped."""
    hard_nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    if hard_nproc == resource.RLIM_INFINITY:
        hard_nproc = NPROC_CAP
    return hard_nofile_limit(), min(NPROC_CAP, hard_nproc)


def write_containers_conf(directory: Path) -> Path:
    """Write (or refresh) ``directory/containers.conf`` for this host and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "containers.conf"
    text = render_containers_conf(*host_limits())
    if not path.is_file() or path.read_text() != text:
        atomicfile.write(path, text, mode=0o644)
    return path


class Podman:
    """Runs podman with a fixed CONTAINERS_CONF."""

    def __init__(self, conf: Path) -> None:
        self.conf = conf

    @property
    def env(self) -> dict[str, str]:
        return {"CONTAINERS_CONF": str(self.conf)}

    def __call__(
        self,
        *args: str,
        check: bool = True,
        input_bytes: bytes | None = None,
        timeout: float | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return run(
            ["podman", *args],
            env=self.env,
            check=check,
            input_bytes=input_bytes,
            timeout=timeout,
        )

    def json(self, *args: str) -> Any:
        out = self(*args).stdout.strip()
        return json.loads(out) if out else []

    def image_exists(self, ref: str) -> bool:
        return self("image", "exists", ref, check=False).returncode == 0

    def container_state(self, name: str) -> str | None:
        """'running', 'exited', ... or None when no such container exists."""
        proc = self("container", "inspect", "--format", "{{.State.Status}}", name, check=False)
        return proc.stdout.strip() if proc.returncode == 0 else None

    def containers_labelled(self, key: str, value: str) -> dict[str, dict[str, str]]:
        """Containers (running or not) whose label ``key`` is ``value``: name -> labels."""
        found: dict[str, dict[str, str]] = {}
        for ctr in self.json("ps", "-a", "--filter", f"label={key}={value}", "--format", "json"):
            labels = ctr.get("Labels") or {}
            if labels.get(key) == value:
                names = ctr.get("Names") or []
                found[names[0] if names else ctr["Id"]] = labels
        return found

    def networks_labelled(self, key: str, value: str) -> dict[str, dict[str, str]]:
        """Networks whose label ``key`` is ``value``: name -> labels."""
        return {
            net["name"]: net.get("labels") or {}
            for net in self.json("network", "ls", "--format", "json")
            if (net.get("labels") or {}).get(key) == value
        }

    def network_subnets(self) -> list[str]:
        """Every subnet of every podman network on this host."""
        subnets: list[str] = []
        for net in self.json("network", "ls", "--format", "json"):
            for sub in net.get("subnets") or []:
                if sub.get("subnet"):
                    subnets.append(sub["subnet"])
        return subnets

    def exec(
        self, container: str, argv: Sequence[str], *, input_bytes: bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in ``container`` (stdin attached when input is given)."""
        flags = ["-i"] if input_bytes is not None else []
        return self("exec", *flags, container, *argv, input_bytes=input_bytes)
