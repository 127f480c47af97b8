"""The phase contract: the phases of each command (stable: they are the collection
playbooks' tags), what a phase done in Python gets (:class:`PhaseContext`) and is
(:class:`Phase`), how a command was asked to run (:class:`RunOptions`), and where every
target keeps the cluster's kubeconfig and add-on state.

The lifecycle drives phases; targets (``decice.targets``) and Kubespray
(``decice.kubespray``) provide them. Both depend on this module and not on each other's
internals: Kubespray's phases never import a target.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from decice.errors import InputError

if TYPE_CHECKING:
    from decice.records import RunRecord
    from decice.spec import LoadedSpec

PHASES: dict[str, tuple[str, ...]] = {
    "up": ("preflight", "baseline", "prepare", "kubernetes", "addons", "scheduler"),
    "down": ("scheduler", "addons"),
    "reset": ("kubernetes", "restore", "verify"),
    "verify": ("cluster", "verify"),
}


def _split(values: list[str] | None) -> list[str]:
    out: list[str] = []
    for value in values or []:
        out.extend(part.strip() for part in value.split(",") if part.strip())
    return out


def select(command: str, only: list[str] | None = None, skip: list[str] | None = None) -> list[str]:
    """The phases of ``command`` to run, in order; unknown names are bad input."""
    known = PHASES[command]
    wanted, unwanted = _split(only), _split(skip)
    for option, names in (("--only", wanted), ("--skip", unwanted)):
        unknown = [name for name in names if name not in known]
        if unknown:
            raise InputError(
                f"{option}: unknown phase {', '.join(unknown)} for `decice {command}`\n"
                f"    fix: use {', '.join(known)} (comma-separated)"
            )
    chosen = [p for p in known if (not wanted or p in wanted) and p not in unwanted]
    if not chosen:
        raise InputError(f"--only/--skip leave no phase of `decice {command}` to run")
    return chosen


KUBECONFIG_NAME = "kubeconfig"


def kubeconfig_path(state_dir: Path) -> Path:
    """Where the cluster's admin kubeconfig is kept (0600), for every target."""
    return state_dir.resolve() / KUBECONFIG_NAME


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
