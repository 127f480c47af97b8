"""The sim target: a real control plane on loopback with simulated nodes, all local.

up.kubernetes    resolve binaries, start etcd + kube-apiserver + controller-manager
                 + kube-scheduler on loopback, write the kubeconfig (0600), register
                 the spec's simulated nodes and start the node agent.
up.scheduler     run the bundled decice-scheduler as a managed local process, wait
                 for /readyz, place a smoke pod (see decice.sim.scheduler_service).
down.scheduler   stop that process (by recorded pid) and remove any smoke pod.
reset.kubernetes stop every process it started (by recorded pid), remove the data dir
                 and the kubeconfig.
verify.verify    a clean slate: no sim data dir, no kubeconfig, and no process on this
                 machine whose command line points into this state dir.

The other phases (preflight, baseline, prepare, addons, restore) are the collection's
plays, which have no hosts to act on here.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from decice.errors import RunFailedError
from decice.phases import Phase, PhaseContext, forget_cluster_addons, kubeconfig_path
from decice.targets.base import Target

if TYPE_CHECKING:
    from rich.console import Console

    from decice.allocation import Allocation
    from decice.sim.controlplane.loopback import ControlPlane
    from decice.spec import LoadedSpec

SIM_DIR = "sim"
POST_RENDERER = "decice-sim-postrender"  # console script of decice.sim.postrender


def data_dir(state_dir: Path) -> Path:
    return state_dir / SIM_DIR


def control_plane_dir(state_dir: Path) -> Path:
    return data_dir(state_dir) / "control-plane"


def _control_plane(
    state_dir: Path,
    bin_dir: str | None,
    *,
    act: bool,
    progress: Callable[[str], None] | None = None,
    audit_log: bool = False,
) -> ControlPlane:
    """The sim's control plane (``act``: binaries built if needed, the audit policy
    written; else described only). ``audit_log``: kube-apiserver writes the log of
    decice.sim.controlplane.audit; a change of it restarts a running control plane (its
    options differ)."""
    from decice.sim.binaries.resolve import describe_binaries, resolve_binaries
    from decice.sim.controlplane import audit
    from decice.sim.controlplane.loopback import ControlPlane
    from decice.sim.procs import private_dir

    explicit = Path(bin_dir).expanduser() if bin_dir else None
    if act:
        binaries = resolve_binaries(explicit, progress=progress or (lambda _text: None))
    else:
        binaries = describe_binaries(explicit)
    directory = control_plane_dir(state_dir)
    extra: dict[str, list[str]] = {}
    if audit_log:
        if act:
            private_dir(directory)
        extra["kube-apiserver"] = audit.apiserver_args(directory.resolve(), write=act)
    # No kubelets: the node agent keeps simulated nodes Ready, so the node-lifecycle
    # controller (which would taint them unreachable without Lease heartbeats) is off.
    return ControlPlane(directory, binaries, scheduler=True, node_lifecycle=False, extra_args=extra)


def _node_total(ctx: PhaseContext) -> int:
    return sum(group.count for group in ctx.loaded.spec.sim.nodes)


# ------------------------------------------------------------------ up.kubernetes


def up_kubernetes(ctx: PhaseContext) -> str:
    from decice.sim.agent import nodes_service as agent_service
    from decice.sim.controlplane.pki import copy_private

    ctx.progress("resolving control-plane binaries (a first build takes minutes)")
    plane = _control_plane(
        ctx.state_dir,
        ctx.loaded.spec.sim.bin_dir,
        act=True,
        progress=ctx.progress,
        audit_log=ctx.loaded.spec.sim.audit_log,
    )
    api = plane.binaries["kube-apiserver"]
    ctx.record.versions["sim-control-plane"] = f"{api.version} ({api.source})"
    ctx.progress("starting etcd, kube-apiserver, controller-manager, kube-scheduler")
    info = plane.start()
    copy_private(info.kubeconfig, ctx.kubeconfig)  # 0600; a symlink there is replaced
    nodes = _node_total(ctx)
    ctx.progress(f"registering {nodes} simulated nodes and starting the node agent")
    agent_service.ensure(ctx.state_dir, ctx.kubeconfig, ctx.loaded.spec.sim)
    return f"{api.version} on {info.server}; {nodes} simulated nodes"


def preview_up_kubernetes(ctx: PhaseContext) -> str:
    plane = _control_plane(ctx.state_dir, ctx.loaded.spec.sim.bin_dir, act=False)
    api = plane.binaries["kube-apiserver"]
    running = plane.status().running
    start = (
        "keep the running control plane"
        if running
        else f"start etcd, kube-apiserver {api.version} ({api.source}), "
        "controller-manager and kube-scheduler on loopback"
    )
    return (
        f"check mode, nothing done: would {start}, write {ctx.kubeconfig} (0600), "
        f"register {_node_total(ctx)} simulated nodes and run the node agent"
    )


# ------------------------------------------------------------------ scheduler


def up_scheduler(ctx: PhaseContext) -> str:
    from decice.sim import scheduler_service

    spec = ctx.loaded.spec.scheduler
    if not spec.enabled:
        result = scheduler_service.ensure(ctx.state_dir, ctx.kubeconfig, spec)
        return "disabled in the spec" + (" (stopped the running one)" if result["stopped"] else "")
    if not ctx.kubeconfig.is_file():
        raise RunFailedError(f"{ctx.kubeconfig}: missing; run the kubernetes phase first")
    ctx.progress(f"starting {spec.name}, waiting for /readyz, placing a smoke pod")
    info = scheduler_service.ensure(ctx.state_dir, ctx.kubeconfig, spec)
    kept = "kept running" if info["reused"] else "started"
    return (
        f"{spec.name} {kept} (pid {info['pid']}, metrics {info['metrics_url']}/metrics); "
        f"smoke pod {scheduler_service.SMOKE_POD} bound to {info['smoke_node']}, Succeeded, deleted"
    )


def preview_up_scheduler(ctx: PhaseContext) -> str:
    from decice.sim import scheduler_service

    spec = ctx.loaded.spec.scheduler
    running = scheduler_service.running(ctx.state_dir)
    if not spec.enabled:
        return "check mode, nothing done: " + (
            f"would stop the running {spec.name}" if running else "disabled in the spec"
        )
    what = f"keep or restart the running {spec.name}" if running else f"start {spec.name}"
    return (
        f"check mode, nothing done: would {what}, wait for /readyz and place the smoke pod "
        f"{scheduler_service.SMOKE_POD}"
    )


def down_scheduler(ctx: PhaseContext) -> str:
    from decice.sim import scheduler_service

    stopped = scheduler_service.stop(ctx.state_dir)
    scheduler_service.remove_api_objects(ctx.kubeconfig)  # smoke pod, our CRD
    return f"{ctx.loaded.spec.scheduler.name} stopped" if stopped else "was not running"


def preview_down_scheduler(ctx: PhaseContext) -> str:
    from decice.sim import scheduler_service

    name = ctx.loaded.spec.scheduler.name
    if scheduler_service.running(ctx.state_dir):
        return f"check mode, nothing done: would stop {name} and remove its smoke pod"
    return f"check mode, nothing done: {name} is not running"


# ------------------------------------------------------------------ reset, verify


def reset_kubernetes(ctx: PhaseContext) -> str:
    from decice.sim import scheduler_service
    from decice.sim.agent import nodes_service as agent_service
    from decice.sim.controlplane.loopback import remove_data_dir

    root = data_dir(ctx.state_dir)
    if not root.exists():
        ctx.kubeconfig.unlink(missing_ok=True)
        forget_cluster_addons(ctx.state_dir)
        return "nothing was running"
    ctx.progress("stopping the scheduler and the node agent")
    scheduler_service.stop(ctx.state_dir)
    agent_service.stop(ctx.state_dir)
    ctx.progress("stopping the control plane")
    plane_dir = control_plane_dir(ctx.state_dir)
    if plane_dir.exists():
        try:
            plane = _control_plane(ctx.state_dir, ctx.loaded.spec.sim.bin_dir, act=False)
            plane.stop()
        except (KeyError, OSError) as exc:
            raise RunFailedError(f"cannot stop the sim control plane: {exc}") from exc
        remove_data_dir(plane_dir)
    shutil.rmtree(root)
    ctx.kubeconfig.unlink(missing_ok=True)
    forget_cluster_addons(ctx.state_dir)  # its cluster is gone
    return "scheduler, control plane and node agent stopped; data removed"


def preview_reset_kubernetes(ctx: PhaseContext) -> str:
    root = data_dir(ctx.state_dir)
    if not root.exists():
        return "check mode, nothing done: nothing is running"
    return (
        "check mode, nothing done: would stop the scheduler, the node agent and the "
        f"control plane, and remove {root} and {ctx.kubeconfig}"
    )


def leftover_processes(state_dir: Path) -> list[str]:
    """``pid: command`` of live processes whose command line mentions ``state_dir``."""
    from decice import proctree

    marker = str(state_dir.resolve()).encode()
    found = []
    for pid in proctree.pids():
        words = proctree.argv(pid)
        if any(marker in word for word in words):
            found.append(f"{pid}: {b' '.join(words[:3]).decode(errors='replace')} ...")
    return found


def verify_clean(ctx: PhaseContext) -> str:
    """Read-only, so check mode runs it as is."""
    left = []
    if data_dir(ctx.state_dir).exists():
        left.append(f"{data_dir(ctx.state_dir)} exists")
    if ctx.kubeconfig.exists():
        left.append(f"{ctx.kubeconfig} exists")
    left.extend(f"process {p}" for p in leftover_processes(ctx.state_dir))
    if left:
        raise RunFailedError(
            "not a clean slate:\n    "
            + "\n    ".join(left)
            + "\n    fix: `decice reset --yes` stops and removes what decice started"
        )
    return "clean: no sim data, no kubeconfig, no process of this state dir"


PHASES: dict[str, dict[str, Phase]] = {
    "up": {
        "kubernetes": Phase(up_kubernetes, preview_up_kubernetes),
        "scheduler": Phase(up_scheduler, preview_up_scheduler),
    },
    "down": {"scheduler": Phase(down_scheduler, preview_down_scheduler)},
    "reset": {"kubernetes": Phase(reset_kubernetes, preview_reset_kubernetes)},
    "verify": {"verify": Phase(verify_clean, verify_clean)},
}


# ------------------------------------------------------------------ status


def node_kind(node: dict[str, Any]) -> str:
    """cpu | gpu | edge | hpc | control-plane, from a Node's labels and capacity."""
    labels = node.get("metadata", {}).get("labels") or {}
    capacity = node.get("status", {}).get("capacity") or {}
    if "node-role.kubernetes.io/control-plane" in labels:
        return "control-plane"
    if "node-role.kubernetes.io/edge" in labels:
        return "edge"
    if labels.get("type") == "virtual-kubelet" or "virtual-node.interlink/type" in labels:
        return "hpc"
    if str(capacity.get("nvidia.com/gpu", "0")) not in {"", "0"}:
        return "gpu"
    return "cpu"


def _list_nodes(kubeconfig: Path) -> list[dict[str, Any]]:
    import asyncio

    from decice_kube.client import Client

    async def work() -> list[dict[str, Any]]:
        async with Client.from_kubeconfig(
            kubeconfig, timeout=10.0, user_agent="decice-status"
        ) as kube:
            items, _ = await kube.list_all("/api/v1/nodes")
            return items

    return asyncio.run(work())


def node_counts(kubeconfig: Path) -> dict[str, dict[str, int]]:
    """{kind: {total, ready}} of the cluster's nodes."""
    counts: dict[str, dict[str, int]] = {}
    for node in _list_nodes(kubeconfig):
        kind = counts.setdefault(node_kind(node), {"total": 0, "ready": 0})
        kind["total"] += 1
        conditions = node.get("status", {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            kind["ready"] += 1
    return counts


def status(state_dir: Path, bin_dir: str | None) -> dict[str, Any]:
    """Control plane, node counts by kind (from the API), the node agent, the scheduler."""
    from decice.sim import scheduler_service
    from decice.sim.agent import nodes_service as agent_service

    state_dir = state_dir.resolve()
    out: dict[str, Any] = {
        "data_dir": str(data_dir(state_dir)),
        "control_plane": None,
        "nodes": None,
        "agent": None,
        "scheduler": scheduler_service.status(state_dir),
    }
    if not control_plane_dir(state_dir).exists():
        return out
    control = _control_plane(state_dir, bin_dir, act=False)
    if "kubectl" in control.binaries:
        out["kubectl"] = str(control.binaries.path("kubectl"))
    plane = control.status()
    out["control_plane"] = {
        "running": plane.running,
        "server": plane.server,
        "components": [
            {"name": c.name, "pid": c.pid, "alive": c.alive, "healthy": c.healthy}
            for c in plane.components
        ],
    }
    kubeconfig = kubeconfig_path(state_dir)
    if plane.running and kubeconfig.exists():
        try:
            out["nodes"] = node_counts(kubeconfig)
        except Exception as exc:
            out["nodes"] = {"error": str(exc)}
    agent = agent_service.read_status(state_dir)
    out["agent"] = {"running": agent_service.running(state_dir), "status": agent}
    return out


def render_status(sim: dict[str, Any], console: Console) -> None:
    plane = sim["control_plane"]
    if plane is None:
        console.print("sim        not running (decice up starts it)")
        return
    parts = ", ".join(
        f"{c['name']} {'ok' if c['alive'] and c['healthy'] else 'DOWN'}"
        for c in plane["components"]
    )
    console.print(f"sim        {plane['server']}: {parts}")
    nodes = sim["nodes"] or {}
    if "error" in nodes:
        console.print(f"nodes      cannot list: {nodes['error']}")
    else:
        console.print(
            "nodes      "
            + ", ".join(f"{k} {v['ready']}/{v['total']} ready" for k, v in sorted(nodes.items()))
        )
    sched = sim.get("scheduler") or {}
    if sched.get("running"):
        console.print(
            f"scheduler  pid {sched.get('pid')}, {sched.get('metrics_url')}, "
            f"scheduled {sched.get('scheduled', '?')}, drift {sched.get('drift', '?')}, "
            f"relists {sched.get('relists', '?')}"
        )
    else:
        console.print("scheduler  not running")
    agent = sim["agent"] or {}
    state = agent.get("status") or {}
    pods = state.get("pods") or {}
    console.print(
        f"node agent {'running' if agent.get('running') else 'STOPPED'}"
        + (
            f": pods running {pods.get('running', 0)}, succeeded {pods.get('succeeded', 0)}, "
            f"failed {pods.get('failed', 0)}; relists {state.get('relists', 0)}"
            if state
            else ""
        )
    )


class Sim(Target):
    """The embedded default: everything on this machine, no hosts."""

    name = "sim"
    uses_kubespray = False

    def allocate(self, loaded: LoadedSpec, *, create: bool = False) -> Allocation | None:
        return None

    def phases(self, command: str) -> Mapping[str, Phase]:
        return PHASES.get(command, {})

    def plan(self, loaded: LoadedSpec, inventory: dict[str, Any]) -> dict[str, Any]:
        from decice.sim.binaries.resolve import describe_binaries

        bin_dir = loaded.spec.sim.bin_dir
        explicit = Path(bin_dir).expanduser() if bin_dir else None
        return {"sim_binaries": describe_binaries(explicit).to_dict()}

    def helm(self, loaded: LoadedSpec) -> str:
        """The sim's own helm (from its control-plane binaries)."""
        plane = _control_plane(loaded.state_dir.resolve(), loaded.spec.sim.bin_dir, act=False)
        if "helm" in plane.binaries:
            return str(plane.binaries.path("helm"))
        return super().helm(loaded)

    def kubectl(self, loaded: LoadedSpec) -> str:
        """The sim's own kubectl (from its control-plane binaries)."""
        plane = _control_plane(loaded.state_dir.resolve(), loaded.spec.sim.bin_dir, act=False)
        if "kubectl" in plane.binaries:
            return str(plane.binaries.path("kubectl"))
        return super().kubectl(loaded)

    def ansible_vars(self, loaded: LoadedSpec) -> dict[str, Any]:
        """Adds the post-renderer that adapts charts to the sim's 1.20 API."""
        import sys

        out = super().ansible_vars(loaded)
        out["decice_post_renderer"] = str(Path(sys.executable).parent / POST_RENDERER)
        return out

    def status(self, loaded: LoadedSpec) -> dict[str, Any] | None:
        return status(loaded.state_dir, loaded.spec.sim.bin_dir)

    def render_status(self, data: dict[str, Any] | None, console: Console) -> None:
        if data is not None:
            render_status(data, console)
