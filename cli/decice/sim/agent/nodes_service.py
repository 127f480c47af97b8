"""The node agent as a managed local process: started detached, tracked by pid.

Files under ``<state>/sim/agent/``: ``process.json`` (the process record and the
sha256 of the node groups), ``nodes.json`` (the groups; 0600, replaced atomically),
``status.json`` (written by the agent), ``agent.log``, ``kubelet/`` (the self-signed
certificate of the kubelet endpoint it serves for nodes an interLink plugin backs).

The agent polls ``<state>/sim/interlink.json`` (:func:`decice.sim.agent.vkmodel.endpoint_file`),
which the interlink role writes, for the nodes it plays the virtual kubelet of.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from decice.sim import procs
from decice.sim.agent.vkmodel import endpoint_file
from decice.spec_model import SimSpec

AGENT_DIR = "agent"
READY_TIMEOUT_S = 600.0


def agent_dir(state_dir: Path) -> Path:
    return state_dir / "sim" / AGENT_DIR


def status_path(state_dir: Path) -> Path:
    return agent_dir(state_dir) / "status.json"


def agent_argv(
    kubeconfig: Path,
    nodes_file: Path,
    status_file: Path,
    extra: Sequence[str] = (),
    *,
    job_duration: str | None = None,
    interlink_file: Path | None = None,
    kubelet_dir: Path | None = None,
) -> list[str]:
    """The node agent's command line (this interpreter; ``extra``: more flags).

    ``job_duration``: how long a Job's pod runs before it succeeds (a Go duration such as
    ``2s``, or ``off``); None leaves the agent's default (2 s). ``interlink_file``: the
    endpoint file of plugin-backed nodes (None: every node is simulated);
    ``kubelet_dir``: where its kubelet endpoint's certificate goes.
    """
    jobs = ["--job-duration", job_duration] if job_duration is not None else []
    if interlink_file is not None:
        jobs += ["--interlink-file", str(interlink_file)]
    if kubelet_dir is not None:
        jobs += ["--kubelet-dir", str(kubelet_dir)]
    return [
        sys.executable,
        "-m",
        "decice.sim.agent",
        "--kubeconfig",
        str(kubeconfig),
        "--nodes-file",
        str(nodes_file),
        "--status-file",
        str(status_file),
        *jobs,
        *extra,
    ]


def read_status_file(path: Path) -> dict[str, Any] | None:
    """A status file the agent wrote (None before it wrote one)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_status(state_dir: Path) -> dict[str, Any] | None:
    """The agent's last status file (None before it wrote one)."""
    return read_status_file(status_path(state_dir))


def _process(state_dir: Path) -> procs.ManagedProcess[dict[str, Any]]:
    def ready(data: Mapping[str, Any]) -> dict[str, Any] | None:
        status = read_status(state_dir)
        if status and status.get("ready") and status.get("pid") == data["process"]["pid"]:
            return status
        return None

    return procs.ManagedProcess(
        agent_dir(state_dir),
        name="sim-node-agent",
        what="the sim node agent",
        log_name="agent.log",
        probe=ready,
        ready_timeout=READY_TIMEOUT_S,
    )


def running(state_dir: Path) -> bool:
    return _process(state_dir).running()


def ensure(state_dir: Path, kubeconfig: Path, sim: SimSpec) -> dict[str, Any]:
    """Start the agent for ``sim``'s node groups (kept when running with the same groups);
    returns its status once ready."""
    nodes = {"nodes": [group.model_dump(mode="json") for group in sim.nodes]}
    interlink = endpoint_file(state_dir)
    # an agent started without the endpoint file is restarted once to get it
    settings = {**nodes, "interlink_file": str(interlink)}

    def launch() -> procs.Launch:
        nodes_file = agent_dir(state_dir) / "nodes.json"
        procs.write_private(nodes_file, json.dumps(nodes, sort_keys=True))
        status_path(state_dir).unlink(missing_ok=True)
        argv = agent_argv(
            kubeconfig,
            nodes_file,
            status_path(state_dir),
            interlink_file=interlink,
            kubelet_dir=agent_dir(state_dir) / "kubelet",
        )
        return procs.Launch(argv)

    return _process(state_dir).ensure(settings, launch).ready


def stop(state_dir: Path) -> bool:
    """Stop the agent by its recorded pid; True when it was running."""
    return _process(state_dir).stop()
