"""A job's state and its job dir's files -> v1.ContainerStatus of each container.

Per container: ``<name>.exit`` (written by the job) -> terminated with its exit code;
``<name>.started`` while the job runs -> running; a job SLURM still queues -> waiting
(reason ``Pending``); a job that ended without a container's exit file (cancelled,
walltime, node failure, never started) -> terminated with SLURM's verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decice.interlink.slurm import Job

# squeue/sacct end states -> (reason, exit code) for containers that wrote no exit file
END_STATES = {
    "CANCELLED": ("Cancelled", 143),
    "TIMEOUT": ("DeadlineExceeded", 143),
    "DEADLINE": ("DeadlineExceeded", 143),
    "OUT_OF_MEMORY": ("OOMKilled", 137),
    "NODE_FAIL": ("NodeFail", 1),
    "BOOT_FAIL": ("NodeFail", 1),
    "PREEMPTED": ("Preempted", 143),
    "FAILED": ("Error", 1),
    "COMPLETED": ("Error", 1),  # ended, yet this container left no exit code
}
PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "SUSPENDED"}


@dataclass(frozen=True)
class Exit:
    code: int
    finished_at: str
    reason: str


def read_exit(path: Path) -> Exit | None:
    try:
        parts = path.read_text().split()
    except OSError:
        return None
    if len(parts) < 2:
        return None
    try:
        code = int(parts[0])
    except ValueError:
        return None
    return Exit(
        code, parts[1], parts[2] if len(parts) > 2 else ("Completed" if not code else "Error")
    )


def read_started(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def waiting(name: str, image: str, reason: str, message: str) -> dict[str, Any]:
    return _status(name, image, {"waiting": {"reason": reason, "message": message}})


def running(name: str, image: str, started_at: str) -> dict[str, Any]:
    return _status(name, image, {"running": {"startedAt": started_at}}, ready=True)


def terminated(
    name: str, image: str, code: int, reason: str, started: str, finished: str, message: str = ""
) -> dict[str, Any]:
    state: dict[str, Any] = {"exitCode": code, "reason": reason}
    if message:
        state["message"] = message
    if started:
        state["startedAt"] = started
    if finished:
        state["finishedAt"] = finished
    return _status(name, image, {"terminated": state})


def _status(name: str, image: str, state: dict[str, Any], ready: bool = False) -> dict[str, Any]:
    return {
        "name": name,
        "state": state,
        "lastState": {},
        "ready": ready,
        "restartCount": 0,
        "image": image,
        "imageID": "",
        "started": "running" in state,
    }


@dataclass(frozen=True)
class JobView:
    """What is known of a job: its squeue line (None once gone) and sacct's verdict."""

    jid: str
    job: Job | None
    accounting: tuple[str, int] | None = None
    deleted: bool = False


def container_status(
    name: str, image: str, job_dir: Path, view: JobView, now: str
) -> dict[str, Any]:
    started = read_started(job_dir / f"{name}.started")
    done = read_exit(job_dir / f"{name}.exit")
    if done is not None:
        return terminated(name, image, done.code, done.reason, started, done.finished_at)
    job = view.job
    if job is not None and job.state in PENDING:
        message = f"SLURM job {view.jid} is {job.state}"
        if job.reason and job.reason != "None":
            message += f" ({job.reason})"
        return waiting(name, image, "Pending", message)
    if job is not None and job.active:
        if started:
            return running(name, image, started)
        return waiting(name, image, "ContainerCreating", f"SLURM job {view.jid} is {job.state}")
    # the job has ended (or squeue forgot it) and this container left no exit code
    state = job.state if job is not None else (view.accounting[0] if view.accounting else "")
    if view.deleted and not state:
        state = "CANCELLED"
    reason, code = END_STATES.get(state, ("JobGone", 1))
    message = f"SLURM job {view.jid} ended ({state or 'no longer known to squeue'})"
    if not started:
        message += "; the container never started"
    return terminated(name, image, code, reason, started, now, message)
