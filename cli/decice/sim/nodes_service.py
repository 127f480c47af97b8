"""The node agent as a managed local process: started detached, tracked by pid."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from decice.errors import RunFailedError
from decice.sim import procs
from decice.spec_model import SimSpec

AGENT_DIR = "agent"
READY_TIMEOUT_S = 600.0


def agent_dir(state_dir: Path) -> Path:
    return state_dir / "sim" / AGENT_DIR


def _record_path(state_dir: Path) -> Path:
    return agent_dir(state_dir) / "process.json"


def status_path(state_dir: Path) -> Path:
    return agent_dir(state_dir) / "status.json"


def _load_record(state_dir: Path) -> tuple[procs.ProcessRecord, str] | None:
    path = _record_path(state_dir)
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return procs.ProcessRecord.from_json(data["process"]), str(data["nodes_sha256"])


def read_status(state_dir: Path) -> dict[str, Any] | None:
    """The agent's last status file (None before it wrote one)."""
    try:
        data = json.loads(status_path(state_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def running(state_dir: Path) -> bool:
    loaded = _load_record(state_dir)
    return loaded is not None and procs.is_alive(loaded[0])


def ensure(state_dir: Path, kubeconfig: Path, sim: SimSpec) -> dict[str, Any]:
    """Start the agent for ``sim``'s node groups (kept when running with the same groups)."""
    directory = agent_dir(state_dir)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    groups = [group.model_dump(mode="json") for group in sim.nodes]
    text = json.dumps({"nodes": groups}, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()
    current = _load_record(state_dir)
    if current is not None:
        record, previous = current
        if procs.is_alive(record) and previous == digest:
            return _wait_ready(state_dir, record)
        procs.terminate(record)
    nodes_file = directory / "nodes.json"
    nodes_file.write_text(text, encoding="utf-8")
    status_path(state_dir).unlink(missing_ok=True)
    record = procs.spawn(
        "sim-node-agent",
        [
            sys.executable,
            "-m",
            "decice.sim.agent",
            "--kubeconfig",
            str(kubeconfig),
            "--nodes-file",
            str(nodes_file),
            "--status-file",
            str(status_path(state_dir)),
        ],
        directory / "agent.log",
        cwd=directory,
    )
    _record_path(state_dir).write_text(
        json.dumps({"process": record.to_json(), "nodes_sha256": digest}), encoding="utf-8"
    )
    return _wait_ready(state_dir, record)


def _wait_ready(state_dir: Path, record: procs.ProcessRecord) -> dict[str, Any]:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        status = read_status(state_dir)
        if status and status.get("ready") and status.get("pid") == record.pid:
            return status
        if not procs.is_alive(record):
            raise RunFailedError(
                "the sim node agent exited while starting; its log ends with:\n"
                + procs.tail(record.log, 20)
            )
        time.sleep(0.2)
    raise RunFailedError(
        f"the sim node agent was not ready after {READY_TIMEOUT_S:.0f} s; log: {record.log}"
    )


def stop(state_dir: Path) -> bool:
    """Stop the agent by its recorded pid; True when it was running."""
    current = _load_record(state_dir)
    if current is None:
        return False
    stopped = procs.terminate(current[0])
    _record_path(state_dir).unlink(missing_ok=True)
    return stopped
