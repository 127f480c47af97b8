"""Targets with real hosts: static lists, SLURM and PBS jobs, local lab containers.

They differ only in where the machines come from. Host work is the collection's
playbooks; the `kubernetes` phase of `up`/`reset` is Kubespray (decice.kubespray.phases).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from decice.phases import Phase
from decice.targets.base import Target

if TYPE_CHECKING:
    from rich.console import Console

    from decice.allocation import Allocation
    from decice.spec import LoadedSpec


@contextlib.contextmanager
def _naming_the_spec(loaded: LoadedSpec) -> Iterator[None]:
    """An error about the job's environment names the spec line that asked for the job's
    hosts (``<file>:<line>: target: ...``), as every spec error does."""
    from decice import yamlpos
    from decice.errors import InputError

    try:
        yield
    except InputError as exc:
        try:
            line = yamlpos.load(loaded.text).locate(("target",)).line
        except yamlpos.YamlSyntaxError:  # pragma: no cover - the spec was loaded from it
            line = 1
        message = str(exc).removeprefix(f"target {loaded.spec.target}: ")
        raise InputError(
            f"{loaded.label}:{line}: target: {loaded.spec.target}: {message}"
        ) from None


class KubesprayHosts(Target):
    """Real hosts: Kubespray runs the `kubernetes` phase, the playbooks the rest."""

    uses_kubespray = True

    def phases(self, command: str) -> Mapping[str, Phase]:
        from decice.kubespray import phases

        return phases.PHASES.get(command, {})

    def plan(self, loaded: LoadedSpec, inventory: dict[str, Any]) -> dict[str, Any]:
        from decice.kubespray import describe

        return {"kubespray": describe(loaded, inventory)}


class Static(KubesprayHosts):
    """``hosts:`` in the spec and/or ``allocation.hosts_file``."""

    name = "static"

    def allocate(self, loaded: LoadedSpec, *, create: bool = False) -> Allocation:
        from decice.allocation import static

        base = loaded.source.parent if loaded.source else Path.cwd()
        return static.from_spec(loaded.spec, base)


class Slurm(KubesprayHosts):
    """The nodes of the SLURM job decice runs in (``SLURM_JOB_NODELIST``)."""

    name = "slurm"

    def allocate(self, loaded: LoadedSpec, *, create: bool = False) -> Allocation:
        from decice.allocation import slurm

        with _naming_the_spec(loaded):
            return slurm.from_environment()


class Pbs(KubesprayHosts):
    """The nodes of the PBS job decice runs in (``PBS_NODEFILE``)."""

    name = "pbs"

    def allocate(self, loaded: LoadedSpec, *, create: bool = False) -> Allocation:
        from decice.allocation import pbs

        with _naming_the_spec(loaded):
            return pbs.from_environment()


class Lab(KubesprayHosts):
    """Local podman systemd containers as nodes; `up` creates them."""

    name = "lab"
    creates_hosts = True

    def allocate(self, loaded: LoadedSpec, *, create: bool = False) -> Allocation:
        from decice.allocation import lab

        if create:
            return lab.ensure(loaded.spec.lab, loaded.state_dir)
        return lab.planned(loaded.spec.lab, loaded.state_dir)

    def status(self, loaded: LoadedSpec) -> dict[str, Any] | None:
        from decice import lab

        info = lab.status(loaded.spec.lab.name, loaded.state_dir)
        return None if info is None else info.to_dict()

    def render_status(self, data: dict[str, Any] | None, console: Console) -> None:
        nodes = ", ".join(
            f"{n['name']} {n['ip']} {n['state']}" for n in (data or {}).get("nodes", [])
        )
        console.print(f"lab        {nodes or 'not created'}")
