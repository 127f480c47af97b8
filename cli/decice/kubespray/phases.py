"""The `kubernetes` phase of `up` / `reset` done by Kubespray (targets with real hosts).

up.kubernetes     prepare (source, env, inventory) -> cluster.yml -> admin kubeconfig
                  (0600, server = the first control plane as decice reaches it) ->
                  keep kube-proxy/CNI/nodelocaldns off edge nodes when KubeEdge is on.
reset.kubernetes  prepare -> reset.yml (confirmed, HPC-safe vars) -> remove the kubeconfig
                  and every copy of Kubespray's admin.conf in the run directories.

Kubespray writes the cluster-admin kubeconfig to ``<run>/kubespray/artifacts/admin.conf``;
that directory is 0700 before Kubespray runs and the copy is 0600 once it is written.

up.kubernetes refuses (and changes nothing) while a host Kubespray would touch has no
baseline (decice.baselines): a later `up` would take the deployed host as its clean slate.

With ``--check`` each phase only says what it would run (see ``describe``); the up
preview refuses the same way.

The work itself (:func:`deploy`, :func:`reset`, :func:`would_run`) takes a spec or a
:class:`decice.kubespray.run.Cluster` and a decice inventory, not a phase context: the
collection's ``decice.hybrid.kubespray`` action plugin (plain ansible-playbook) calls the
same functions with what its play has.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from decice import baselines
from decice.kubespray import edge, render, run
from decice.phases import Phase, PhaseContext, forget_cluster_addons, kubeconfig_path
from decice.records import RUNS_DIR

if TYPE_CHECKING:
    from decice.spec import LoadedSpec

ADMIN_CONF = "admin.conf"  # what Kubespray's client role writes to its artifacts_dir
# <state dir>/playbook-runs/<stamp>/kubespray: the work directories of the collection's
# decice.hybrid.kubespray action (plain ansible-playbook); the CLI's are in runs/<id>/
PLAYBOOK_RUNS = "playbook-runs"


def playbook_run_dir(state_dir: Path) -> Path:
    """A new work directory for one decice.hybrid.kubespray task:
    ``<state>/playbook-runs/<UTC stamp>-<pid>`` (0700)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = state_dir / PLAYBOOK_RUNS / f"{stamp}-{os.getpid()}"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    (state_dir / PLAYBOOK_RUNS).chmod(0o700)
    return path


def admin_conf_copies(state_dir: Path) -> list[Path]:
    """Every copy of Kubespray's admin kubeconfig in ``state_dir``'s run directories
    (the CLI's runs and plain ansible-playbook's, :data:`PLAYBOOK_RUNS`)."""
    pattern = f"*/{run.SUBDIR}/artifacts/{ADMIN_CONF}"
    return sorted(
        [*(state_dir / RUNS_DIR).glob(pattern), *(state_dir / PLAYBOOK_RUNS).glob(pattern)]
    )


def _private_artifacts(artifacts_dir: Path) -> None:
    artifacts_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    artifacts_dir.chmod(0o700)


def _protect_admin_conf(artifacts_dir: Path) -> None:
    admin = artifacts_dir / ADMIN_CONF
    if admin.is_file() and not admin.is_symlink():
        admin.chmod(0o600)


# ---------------------------------------------------------------- the work, context-free
# The CLI's phases below and the collection's `decice.hybrid.kubespray` action plugin
# (plain ansible-playbook, molecule) both go through these functions.

Log = Callable[[str], None]


def _ignore(_text: str) -> None:
    return None


def prepare(
    given: LoadedSpec | run.Cluster,
    inventory: dict[str, Any],
    run_dir: Path,
    *,
    progress: Log = _ignore,
    note: Log = _ignore,
) -> run.Prepared:
    """Source, env and generated inventory; ``note`` gets where they come from."""
    prepared = run.prepare(given, inventory, run_dir, progress=progress)
    note(prepared.source.describe())
    note(
        f"kubespray env {prepared.env.path}: ansible-core {prepared.env.ansible_core} "
        f"(window {prepared.env.window[0]} <= v < {prepared.env.window[1]})"
    )
    return prepared


def deploy(
    given: LoadedSpec | run.Cluster,
    inventory: dict[str, Any],
    run_dir: Path,
    kubeconfig: Path,
    *,
    progress: Log = _ignore,
    note: Log = _ignore,
) -> tuple[str, dict[str, str]]:
    """cluster.yml, the admin kubeconfig, the edge exclusion: (summary, versions)."""
    cluster = run.cluster_of(given)
    prepared = prepare(cluster, inventory, run_dir, progress=progress, note=note)
    _private_artifacts(prepared.artifacts_dir)
    try:
        done = run.deploy(prepared, kubeconfig, progress=progress, note=note)
    finally:
        _protect_admin_conf(prepared.artifacts_dir)
    summary = f"kubespray {done.tag}, kubernetes {done.kube_version}, API {done.server}"
    if cluster.edge_exclusion:
        patched = edge.apply(kubeconfig, log=progress)
        summary += f"; edge exclusion on {', '.join(patched) or 'no DaemonSet (already set)'}"
    return summary, done.record_versions()


def reset(
    given: LoadedSpec | run.Cluster,
    inventory: dict[str, Any],
    run_dir: Path,
    kubeconfig: Path,
    state_dir: Path,
    *,
    progress: Log = _ignore,
    note: Log = _ignore,
) -> str:
    """reset.yml, then forget what the cluster was: kubeconfig, add-on state, admin.conf."""
    prepared = prepare(given, inventory, run_dir, progress=progress, note=note)
    _private_artifacts(prepared.artifacts_dir)
    run.reset(prepared, kubeconfig, progress=progress, note=note)
    forget_cluster_addons(state_dir)  # its cluster is gone: API baseline, charts, PSK
    removed = remove_admin_confs(state_dir)  # its credentials are void, but never kept
    summary = (
        f"kubespray {prepared.source.tag} reset.yml (flush_iptables/reset_restart_network off)"
    )
    return summary + (
        f"; removed {removed} copies of admin.conf from run directories" if removed else ""
    )


def would_run(given: LoadedSpec | run.Cluster, inventory: dict[str, Any], playbook: str) -> str:
    """What check mode says instead of running ``playbook`` (fetches and builds nothing)."""
    plan = run.describe(given, inventory)
    argv = " ".join(str(a) for a in plan["commands"][playbook]["argv"])
    return (
        f"check mode, nothing done: would run kubespray {plan['tag']} {playbook}: {argv} "
        "(not run, not even with --check: Kubespray's roles are not check-mode safe)"
    )


def missing_baselines(state_dir: Path, inventory: dict[str, Any]) -> list[str]:
    """The hosts of Kubespray's inventory that have no baseline in ``state_dir``."""
    hosts = render.inventory(inventory)["all"]["hosts"]
    return baselines.without_baseline(state_dir, hosts)


def ever_deployed(state_dir: Path) -> bool:
    """Did any earlier `up` of this state dir start Kubespray (even if it failed)?

    The CLI's run records say so; a plain ansible-playbook run leaves its work
    directory under :data:`PLAYBOOK_RUNS`; a kubeconfig says so too.
    """
    from decice.records import RunStore

    for record in RunStore(state_dir).list():
        if record.command != "up":
            continue
        for phase in record.phases:
            if phase.name == "kubernetes" and phase.status not in {"pending", "not run", "skipped"}:
                return True
    if any((state_dir / PLAYBOOK_RUNS).glob(f"*/{run.SUBDIR}")):
        return True
    return kubeconfig_path(state_dir).exists()


NOTHING_TO_RESET = "no earlier `up` ran Kubespray from this state dir: nothing to reset"


def remove_admin_confs(state_dir: Path) -> int:
    """Remove every copy of the admin kubeconfig from the run directories; how many."""
    copies = admin_conf_copies(state_dir)
    for path in copies:
        path.unlink(missing_ok=True)
    return len(copies)


# ---------------------------------------------------------------- the CLI's phases


def up_kubernetes(ctx: PhaseContext) -> str:
    summary, done_versions = deploy(
        ctx.loaded,
        ctx.inventory,
        ctx.run_dir,
        ctx.kubeconfig,
        progress=ctx.progress,
        note=ctx.record.notes.append,
    )
    ctx.record.versions.update(done_versions)
    return summary


def preview_up_kubernetes(ctx: PhaseContext) -> str:
    return would_run(ctx.loaded, ctx.inventory, "cluster.yml")


def reset_kubernetes(ctx: PhaseContext) -> str:
    if not ever_deployed(ctx.loaded.state_dir):
        return NOTHING_TO_RESET
    return reset(
        ctx.loaded,
        ctx.inventory,
        ctx.run_dir,
        ctx.kubeconfig,
        ctx.state_dir,
        progress=ctx.progress,
        note=ctx.record.notes.append,
    )


def preview_reset_kubernetes(ctx: PhaseContext) -> str:
    if not ever_deployed(ctx.loaded.state_dir):
        return f"check mode, nothing done: {NOTHING_TO_RESET}"
    return would_run(ctx.loaded, ctx.inventory, "reset.yml")


def require_baselines(ctx: PhaseContext) -> None:
    """Refuse (RunFailedError, exit 1) while a host of Kubespray's inventory has no baseline."""
    hosts = render.inventory(ctx.inventory)["all"]["hosts"]
    baselines.require("kubernetes", ctx.state_dir, hosts, ctx.record, check=ctx.options.check)


def _baseline_first(work: Callable[[PhaseContext], str]) -> Callable[[PhaseContext], str]:
    """``work`` (its run or its preview), after :func:`require_baselines`."""

    @functools.wraps(work)
    def guarded(ctx: PhaseContext) -> str:
        require_baselines(ctx)
        return work(ctx)

    return guarded


PHASES: dict[str, dict[str, Phase]] = {
    "up": {
        "kubernetes": Phase(_baseline_first(up_kubernetes), _baseline_first(preview_up_kubernetes))
    },
    "reset": {"kubernetes": Phase(reset_kubernetes, preview_reset_kubernetes)},
}
