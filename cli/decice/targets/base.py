"""The Target interface: what differs between sim, lab, slurm, pbs and static.

A target says where the hosts come from (:meth:`Target.allocate`), which phases it
does in Python rather than through the collection's playbooks (:meth:`Target.phases`),
and what `plan` and `status` show for it. The lifecycle, `plan`, `status` and the
inventory ask the target; none of them tests a target's name.

A Python-driven phase gets a :class:`PhaseContext`: the spec, the run record, the
inventory of this run, the kubeconfig path and a progress callback. With ``--check``
the lifecycle calls the phase's ``preview`` instead of its ``run``: it reports what
the phase would do and changes nothing.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from rich.console import Console

    from decice.allocation import Allocation
    from decice.records import RunRecord
    from decice.spec import LoadedSpec

KUBECONFIG_NAME = "kubeconfig"


def kubeconfig_path(state_dir: Path) -> Path:
    """Where the cluster's admin kubeconfig is kept (0600), for every target."""
    return state_dir.resolve() / KUBECONFIG_NAME


def helm_binary() -> str:
    """helm for the add-on plays: decice's cached one (the sim recipe's), else PATH's."""
    return _tool("helm")


def kubectl_binary() -> str:
    """kubectl for the add-on plays (its kustomize renders manifests): decice's cached one
    (the sim recipe's), else PATH's."""
    return _tool("kubectl")


def _tool(name: str) -> str:
    import shutil

    from decice.sim.binaries import describe_binaries

    cached = describe_binaries(names=(name,))[name].path
    if cached.is_file():
        return str(cached)
    return shutil.which(name) or name


def addons_state_dir(state_dir: Path) -> Path:
    """What the add-on roles keep of one cluster: its API baseline (the cluster's objects
    before the first add-on, api-baseline.json), the unpacked charts,
    the sim adaptation reports, the EdgeMesh PSK."""
    return state_dir.resolve() / "addons"


def forget_cluster_addons(state_dir: Path) -> None:
    """Remove :func:`addons_state_dir` once its cluster is gone (reset): none of it means
    anything for the next cluster, and the PSK is a secret (a planted symlink there is
    removed, never followed)."""
    path = addons_state_dir(state_dir)
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


@dataclass(frozen=True)
class RunOptions:
    """How a lifecycle command was asked to run."""

    only: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    check: bool = False
    verbose: int = 0


@dataclass
class PhaseContext:
    """What a Python-driven phase gets."""

    loaded: LoadedSpec
    record: RunRecord
    options: RunOptions
    progress: Callable[[str], None]
    inventory: dict[str, Any] = field(default_factory=dict)

    @property
    def state_dir(self) -> Path:
        return self.loaded.state_dir.resolve()

    @property
    def kubeconfig(self) -> Path:
        return kubeconfig_path(self.loaded.state_dir)

    @property
    def run_dir(self) -> Path:
        """This run's directory (record, inventory, artifacts)."""
        return Path(self.record.artifacts)


@dataclass(frozen=True)
class Phase:
    """A phase done in Python: ``run`` does it; ``preview`` says what it would do."""

    run: Callable[[PhaseContext], str]
    preview: Callable[[PhaseContext], str]


# (path in the spec, what is wrong, how to fix it)


class Target:
    """Base class of the five targets; subclasses override what differs."""

    name: ClassVar[str]
    #: the `kubernetes` phase runs Kubespray on the allocated hosts
    uses_kubespray: ClassVar[bool] = False
    #: `up` creates the hosts first (under the lock), e.g. the lab's containers
    creates_hosts: ClassVar[bool] = False

    def allocate(self, loaded: LoadedSpec, *, create: bool = False) -> Allocation | None:
        """The machines of this target; None when it has no real hosts."""
        raise NotImplementedError

    def phases(self, command: str) -> Mapping[str, Phase]:
        """Phases of ``command`` done in Python (phase name -> Phase); others are Ansible."""
        return {}

    def plan(self, loaded: LoadedSpec, inventory: dict[str, Any]) -> dict[str, Any]:
        """Target-specific sections of `decice plan` (``sim_binaries``, ``kubespray``)."""
        return {}

    def helm(self, loaded: LoadedSpec) -> str:
        """The helm binary the add-on plays use on this target."""
        return helm_binary()

    def kubectl(self, loaded: LoadedSpec) -> str:
        """The kubectl the add-on plays use on this target."""
        return kubectl_binary()

    def ansible_vars(self, loaded: LoadedSpec) -> dict[str, Any]:
        """Extra variables the collection's plays get on this target (helm, mirror, ...)."""
        from pathlib import Path

        from decice import mirror

        base = loaded.source.parent if loaded.source else Path.cwd()
        resolved = mirror.from_spec(loaded.spec.mirror, base)
        out: dict[str, Any] = {
            "decice_helm": self.helm(loaded),
            "decice_kubectl": self.kubectl(loaded),
        }
        upstream = loaded.spec.upstream
        if upstream.rewrite or upstream.plain_http:
            out["decice_upstream_rewrite"] = dict(upstream.rewrite)
            out["decice_upstream_plain_http"] = upstream.plain_http
        if resolved is not None:
            key = "decice_mirror" if resolved.is_local else "decice_mirror_url"
            out[key] = resolved.root
        return out

    def status(self, loaded: LoadedSpec) -> dict[str, Any] | None:
        """This target's section of `decice status` (None: nothing to show)."""
        return None

    def render_status(self, data: dict[str, Any] | None, console: Console) -> None:
        """Print :meth:`status`'s section."""
