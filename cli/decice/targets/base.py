"""The Target interface: what differs between sim, lab, slurm, pbs and static.

A target says where the hosts come from (:meth:`Target.allocate`), which phases it
does in Python rather than through the collection's playbooks (:meth:`Target.phases`),
and what `plan` and `status` show for it. The lifecycle, `plan`, `status` and the
inventory ask the target; none of them tests a target's name.

A Python-driven phase (:class:`decice.phases.Phase`) gets a
:class:`decice.phases.PhaseContext`: the spec, the run record, the inventory of this run,
the kubeconfig path and a progress callback. With ``--check`` the lifecycle calls the
phase's ``preview`` instead of its ``run``: it reports what the phase would do and changes
nothing. The phase contract lives in :mod:`decice.phases`, which targets and Kubespray both
use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from rich.console import Console

    from decice.allocation import Allocation
    from decice.phases import Phase
    from decice.spec import LoadedSpec


def helm_binary() -> str:
    """helm for the add-on plays: decice's cached one (the sim recipe's), else PATH's."""
    return _tool("helm")


def kubectl_binary() -> str:
    """kubectl for the add-on plays (its kustomize renders manifests): decice's cached one
    (the sim recipe's), else PATH's."""
    return _tool("kubectl")


def _tool(name: str) -> str:
    import shutil

    from decice.sim.binaries.resolve import describe_binaries

    cached = describe_binaries(names=(name,))[name].path
    if cached.is_file():
        return str(cached)
    return shutil.which(name) or name


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
