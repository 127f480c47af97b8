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
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from decice import baselines
from decice.kubespray import edge, render, run
from decice.records import RUNS_DIR
from decice.targets.base import Phase, PhaseContext, api_baseline_path, kubeconfig_path

ADMIN_CONF = "admin.conf"  # what Kubespray's client role writes to its artifacts_dir


def admin_conf_copies(state_dir: Path) -> list[Path]:
    """Every copy of Kubespray's admin kubeconfig in ``state_dir``'s run directories."""
    return sorted((state_dir / RUNS_DIR).glob(f"*/{run.SUBDIR}/artifacts/{ADMIN_CONF}"))


def _private_artifacts(artifacts_dir: Path) -> None:
    artifacts_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    artifacts_dir.chmod(0o700)


def _protect_admin_conf(artifacts_dir: Path) -> None:
    admin = artifacts_dir / ADMIN_CONF
    if admin.is_file() and not admin.is_symlink():
        admin.chmod(0o600)


def _prepare(ctx: PhaseContext) -> run.Prepared:
    prepared = run.prepare(ctx.loaded, ctx.inventory, ctx.run_dir, progress=ctx.progress)
    ctx.record.notes.append(prepared.source.describe())
    ctx.record.notes.append(
        f"kubespray env {prepared.env.path}: ansible-core {prepared.env.ansible_core} "
        f"(window {prepared.env.window[0]} <= v < {prepared.env.window[1]})"
    )
    return prepared


def up_kubernetes(ctx: PhaseContext) -> str:
    prepared = _prepare(ctx)
    _private_artifacts(prepared.artifacts_dir)
    try:
        done = run.deploy(
            prepared, ctx.kubeconfig, progress=ctx.progress, note=ctx.record.notes.append
        )
    finally:
        _protect_admin_conf(prepared.artifacts_dir)
    ctx.record.versions.update(done.record_versions())
    note = f"kubespray {done.tag}, kubernetes {done.kube_version}, API {done.server}"
    if ctx.loaded.spec.addons.kubeedge.enabled:
        log: Callable[[str], None] = ctx.progress
        patched = edge.apply(ctx.kubeconfig, log=log)
        note += f"; edge exclusion on {', '.join(patched) or 'no DaemonSet (already set)'}"
    return note


def _would_run(ctx: PhaseContext, playbook: str) -> str:
    plan = run.describe(ctx.loaded, ctx.inventory)
    argv = " ".join(str(a) for a in plan["commands"][playbook]["argv"])
    return (
        f"check mode, nothing done: would run kubespray {plan['tag']} {playbook}: {argv} "
        "(not run, not even with --check: Kubespray's roles are not check-mode safe)"
    )


def preview_up_kubernetes(ctx: PhaseContext) -> str:
    return _would_run(ctx, "cluster.yml")


def _ever_deployed(state_dir: Path) -> bool:
    """Did any earlier `up` of this state dir start Kubespray (even if it failed)?"""
    from decice.records import RunStore

    for record in RunStore(state_dir).list():
        if record.command != "up":
            continue
        for phase in record.phases:
            if phase.name == "kubernetes" and phase.status not in {"pending", "not run", "skipped"}:
                return True
    return kubeconfig_path(state_dir).exists()


NOTHING_TO_RESET = "no earlier `up` ran Kubespray from this state dir: nothing to reset"


def remove_admin_confs(state_dir: Path) -> int:
    """Remove every copy of the admin kubeconfig from the run directories; how many."""
    copies = admin_conf_copies(state_dir)
    for path in copies:
        path.unlink(missing_ok=True)
    return len(copies)


def reset_kubernetes(ctx: PhaseContext) -> str:
    if not _ever_deployed(ctx.loaded.state_dir):
        return NOTHING_TO_RESET
    prepared = _prepare(ctx)
    _private_artifacts(prepared.artifacts_dir)
    run.reset(prepared, ctx.kubeconfig, progress=ctx.progress, note=ctx.record.notes.append)
    api_baseline_path(ctx.state_dir).unlink(missing_ok=True)  # its cluster is gone
    removed = remove_admin_confs(ctx.state_dir)  # its credentials are void, but never kept
    note = f"kubespray {prepared.source.tag} reset.yml (flush_iptables/reset_restart_network off)"
    return note + (
        f"; removed {removed} copies of admin.conf from run directories" if removed else ""
    )


def preview_reset_kubernetes(ctx: PhaseContext) -> str:
    if not _ever_deployed(ctx.loaded.state_dir):
        return f"check mode, nothing done: {NOTHING_TO_RESET}"
    return _would_run(ctx, "reset.yml")


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
