"""The `kubernetes` phase of `up` / `reset` done by Kubespray (targets with real hosts).

up.kubernetes     prepare (source, env, inventory) -> cluster.yml -> admin kubeconfig
                  (0600, server = the first control plane as decice reaches it) ->
                  keep kube-proxy/CNI/nodelocaldns off edge nodes when KubeEdge is on.
reset.kubernetes  prepare -> reset.yml (confirmed, HPC-safe vars) -> remove the kubeconfig.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from decice.errors import RunFailedError
from decice.kubespray import edge, run

if TYPE_CHECKING:
    from decice.lifecycle import PhaseContext

INVENTORY_NAME = "inventory.yml"  # written by lifecycle.execute into the run dir


def _inventory(run_dir: Path) -> dict[str, Any]:
    path = run_dir / INVENTORY_NAME
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "all" not in data:
        raise RunFailedError(f"{path}: not a decice inventory")
    return data


def _prepare(ctx: PhaseContext) -> run.Prepared:
    run_dir = Path(ctx.record.artifacts)
    prepared = run.prepare(ctx.loaded, _inventory(run_dir), run_dir, progress=ctx.progress)
    ctx.record.notes.append(prepared.source.describe())
    ctx.record.notes.append(
        f"kubespray env {prepared.env.path}: ansible-core {prepared.env.ansible_core} "
        f"(window {prepared.env.window[0]} <= v < {prepared.env.window[1]})"
    )
    return prepared


def up_kubernetes(ctx: PhaseContext) -> str:
    prepared = _prepare(ctx)
    kubeconfig = ctx.loaded.state_dir.resolve() / "kubeconfig"
    done = run.deploy(prepared, kubeconfig, progress=ctx.progress)
    ctx.record.versions.update(done.record_versions())
    note = f"kubespray {done.tag}, kubernetes {done.kube_version}, API {done.server}"
    if ctx.loaded.spec.addons.kubeedge.enabled:
        log: Callable[[str], None] = ctx.progress
        patched = edge.apply(kubeconfig, log=log)
        note += f"; edge exclusion on {', '.join(patched) or 'no DaemonSet (already set)'}"
    return note


def _ever_deployed(state_dir: Path) -> bool:
    """Did any earlier `up` of this state dir start Kubespray (even if it failed)?"""
    from decice.records import RunStore

    for record in RunStore(state_dir).list():
        if record.command != "up":
            continue
        for phase in record.phases:
            if phase.name == "kubernetes" and phase.status not in {"pending", "not run", "skipped"}:
                return True
    return (state_dir / "kubeconfig").exists()


def reset_kubernetes(ctx: PhaseContext) -> str:
    if not _ever_deployed(ctx.loaded.state_dir):
        return "no earlier `up` ran Kubespray from this state dir: nothing to reset"
    prepared = _prepare(ctx)
    kubeconfig = ctx.loaded.state_dir.resolve() / "kubeconfig"
    run.reset(prepared, kubeconfig, progress=ctx.progress)
    return f"kubespray {prepared.source.tag} reset.yml (flush_iptables/reset_restart_network off)"


PHASES: dict[str, dict[str, Callable[[PhaseContext], str]]] = {
    "up": {"kubernetes": up_kubernetes},
    "reset": {"kubernetes": reset_kubernetes},
}
