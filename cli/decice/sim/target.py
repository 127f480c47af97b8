"""The sim target's own phases: a local control plane and simulated nodes.

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
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from decice.errors import RunFailedError

if TYPE_CHECKING:
    from decice.lifecycle import PhaseContext

SIM_DIR = "sim"


def data_dir(state_dir: Path) -> Path:
    return state_dir / SIM_DIR


def control_plane_dir(state_dir: Path) -> Path:
    return data_dir(state_dir) / "control-plane"


def _control_plane(state_dir: Path, bin_dir: str | None, *, act: bool) -> Any:
    from decice.sim.binaries import describe_binaries, resolve_binaries
    from decice.sim.controlplane import ControlPlane

    explicit = Path(bin_dir).expanduser() if bin_dir else None
    binaries = resolve_binaries(explicit) if act else describe_binaries(explicit)
    # No kubelets: the node agent keeps simulated nodes Ready, so the node-lifecycle
    # controller (which would taint them unreachable without Lease heartbeats) is off.
    return ControlPlane(
        control_plane_dir(state_dir), binaries, scheduler=True, node_lifecycle=False
    )


def up_kubernetes(ctx: PhaseContext) -> str:
    state_dir = ctx.loaded.state_dir.resolve()
    ctx.progress("resolving control-plane binaries (a first build takes minutes)")
    plane = _control_plane(state_dir, ctx.loaded.spec.sim.bin_dir, act=True)
    api = plane.binaries["kube-apiserver"]
    ctx.record.versions["sim-control-plane"] = f"{api.version} ({api.source})"
    ctx.progress("starting etcd, kube-apiserver, controller-manager, kube-scheduler")
    info = plane.start()
    kubeconfig = state_dir / "kubeconfig"
    shutil.copyfile(info.kubeconfig, kubeconfig)
    kubeconfig.chmod(0o600)
    nodes = sum(group.count for group in ctx.loaded.spec.sim.nodes)
    from decice.sim import nodes_service as agent_service

    ctx.progress(f"registering {nodes} simulated nodes and starting the node agent")
    agent_service.ensure(state_dir, kubeconfig, ctx.loaded.spec.sim)
    return f"{api.version} on {info.server}; {nodes} simulated nodes"


def up_scheduler(ctx: PhaseContext) -> str:
    from decice.sim import scheduler_service

    state_dir = ctx.loaded.state_dir.resolve()
    spec = ctx.loaded.spec.scheduler
    if not spec.enabled:
        result = scheduler_service.ensure(state_dir, state_dir / "kubeconfig", spec)
        return "disabled in the spec" + (" (stopped the running one)" if result["stopped"] else "")
    kubeconfig = state_dir / "kubeconfig"
    if not kubeconfig.is_file():
        raise RunFailedError(f"{kubeconfig}: missing; run the kubernetes phase first")
    ctx.progress(f"starting {spec.name}, waiting for /readyz, placing a smoke pod")
    info = scheduler_service.ensure(state_dir, kubeconfig, spec)
    kept = "kept running" if info["reused"] else "started"
    return (
        f"{spec.name} {kept} (pid {info['pid']}, metrics {info['metrics_url']}/metrics); "
        f"smoke pod {scheduler_service.SMOKE_POD} bound to {info['smoke_node']}, Succeeded, deleted"
    )


def down_scheduler(ctx: PhaseContext) -> str:
    from decice.sim import scheduler_service

    state_dir = ctx.loaded.state_dir.resolve()
    stopped = scheduler_service.stop(state_dir)
    scheduler_service.remove_smoke_pod(state_dir / "kubeconfig")
    return f"{ctx.loaded.spec.scheduler.name} stopped" if stopped else "was not running"


def reset_kubernetes(ctx: PhaseContext) -> str:
    from decice.sim import nodes_service as agent_service
    from decice.sim import scheduler_service
    from decice.sim.controlplane import remove_data_dir

    state_dir = ctx.loaded.state_dir.resolve()
    root = data_dir(state_dir)
    if not root.exists():
        (state_dir / "kubeconfig").unlink(missing_ok=True)
        return "nothing was running"
    ctx.progress("stopping the scheduler and the node agent")
    scheduler_service.stop(state_dir)
    agent_service.stop(state_dir)
    ctx.progress("stopping the control plane")
    plane_dir = control_plane_dir(state_dir)
    if plane_dir.exists():
        try:
            plane = _control_plane(state_dir, ctx.loaded.spec.sim.bin_dir, act=False)
            plane.stop()
        except (KeyError, OSError) as exc:
            raise RunFailedError(f"cannot stop the sim control plane: {exc}") from exc
        remove_data_dir(plane_dir)
    shutil.rmtree(root)
    (state_dir / "kubeconfig").unlink(missing_ok=True)
    return "scheduler, control plane and node agent stopped; data removed"


def leftover_processes(state_dir: Path) -> list[str]:
    """``pid: command`` of live processes whose command line mentions ``state_dir``."""
    marker = str(state_dir.resolve()).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline:
            words = cmdline.split(b"\0")
            found.append(f"{entry.name}: {b' '.join(words[:3]).decode(errors='replace')} ...")
    return found


def verify_clean(ctx: PhaseContext) -> str:
    state_dir = ctx.loaded.state_dir.resolve()
    left = []
    if data_dir(state_dir).exists():
        left.append(f"{data_dir(state_dir)} exists")
    if (state_dir / "kubeconfig").exists():
        left.append(f"{state_dir / 'kubeconfig'} exists")
    left.extend(f"process {p}" for p in leftover_processes(state_dir))
    if left:
        raise RunFailedError(
            "not a clean slate:\n    "
            + "\n    ".join(left)
            + "\n    fix: `decice reset --yes` stops and removes what decice started"
        )
    return "clean: no sim data, no kubeconfig, no process of this state dir"


PHASES: dict[str, dict[str, Callable[[PhaseContext], str]]] = {
    "up": {"kubernetes": up_kubernetes, "scheduler": up_scheduler},
    "down": {"scheduler": down_scheduler},
    "reset": {"kubernetes": reset_kubernetes},
    "verify": {"verify": verify_clean},
}


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


def _node_counts(kubeconfig: Path) -> dict[str, dict[str, int]]:
    import json

    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    raw = api.list_node(_preload_content=False, _request_timeout=10)
    counts: dict[str, dict[str, int]] = {}
    for node in json.loads(raw.data)["items"]:  # type: ignore[attr-defined]
        kind = counts.setdefault(node_kind(node), {"total": 0, "ready": 0})
        kind["total"] += 1
        conditions = node.get("status", {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            kind["ready"] += 1
    return counts


def status(state_dir: Path, bin_dir: str | None) -> dict[str, Any]:
    """Control plane, node counts by kind (from the API), the node agent."""
    from decice.sim import nodes_service as agent_service
    from decice.sim import scheduler_service

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
    kubeconfig = state_dir / "kubeconfig"
    if plane.running and kubeconfig.exists():
        try:
            out["nodes"] = _node_counts(kubeconfig)
        except Exception as exc:
            out["nodes"] = {"error": str(exc)}
    agent = agent_service.read_status(state_dir)
    out["agent"] = {"running": agent_service.running(state_dir), "status": agent}
    return out
