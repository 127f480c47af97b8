"""A job's state and its job dir's files -> v1.ContainerStatus of each container.

Per container: ``<name>.exit`` (written by the job) -> terminated with its exit code;
``<name>.started`` while the job runs -> running; a job SLURM still queues -> waiting
(reason ``Pending``); a job that ended without a container's exit file (cancelled,
walltime, node failure, never started) -> terminated with SLURM's verdict.

SLURM's verdict also overrides a container's own failing exit when the job ended for a
reason outside it (walltime, out of memory, node failure, preemption, a cancel by
someone other than the plugin): the exit file then says only "Killed" or the signal's
code, SLURM says why. While such a job is still completing, a container the job's trap
recorded as "Killed" stays running: its verdict is not in yet. So does one that died of
a signal before the job's trap ran (SLURM signals every process of the job at once, in
no set order) while the job is COMPLETING.
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
# ends whose cause is outside the container: their verdict replaces a failing exit's
VERDICTS = {
    "TIMEOUT": "reached its time limit (slurm-job.vk.io/time or the partition's MaxTime)",
    "DEADLINE": "reached its deadline (--deadline)",
    "OUT_OF_MEMORY": "ran out of memory (its --mem)",
    "NODE_FAIL": "lost its node (NODE_FAIL)",
    "BOOT_FAIL": "could not boot its node (BOOT_FAIL)",
    "PREEMPTED": "was preempted by a job of higher priority",
    "CANCELLED": "was cancelled outside the plugin (scancel by its user or an admin)",
}

LEASE_END = "reached the end of its walltime (the pilot's time) and cut the pod off"


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
    recorded: str = ""  # the end state the plugin saw first (squeue forgets ended jobs)
    what: str = ""  # how messages name it (default "SLURM job <jid>")
    pending: str = ""  # why a pending pod waits, when SLURM's queue is not the reason
    lease: bool = False  # a pilot job: its time limit is the lease's, not the pod's

    @property
    def name(self) -> str:
        return self.what or f"SLURM job {self.jid}"

    @property
    def end_state(self) -> str:
        """SLURM's end state of the job, "" while it is active or not known."""
        if self.job is not None:
            return "" if self.job.active else self.job.state
        if self.recorded:
            return self.recorded
        return self.accounting[0] if self.accounting else ""


def _verdict(view: JobView) -> tuple[str, str] | None:
    """(reason, message) when the job ended for a cause outside its containers."""
    state = view.end_state
    if state not in VERDICTS or (state == "CANCELLED" and view.deleted):
        return None
    text = LEASE_END if view.lease and state == "TIMEOUT" else VERDICTS[state]
    return END_STATES[state][0], f"{view.name} {text}"


def _signalled(done: Exit, job: Job) -> bool:
    """The container was stopped by a signal the job is still answering: the job's trap
    recorded "Killed", or the container died of a signal (code > 128) first, before the
    trap ran, while SLURM is ending the job (squeue's COMPLETING: walltime, a cancel)."""
    return done.reason == "Killed" or (done.code > 128 and job.state == "COMPLETING")


def container_status(
    name: str, image: str, job_dir: Path, view: JobView, now: str
) -> dict[str, Any]:
    started = read_started(job_dir / f"{name}.started")
    done = read_exit(job_dir / f"{name}.exit")
    job = view.job
    if done is not None:
        verdict = _verdict(view) if done.code else None
        if verdict is not None:
            reason, message = verdict
            return terminated(name, image, done.code, reason, started, done.finished_at, message)
        if job is not None and job.active and not view.deleted and _signalled(done, job):
            return running(name, image, started)  # SLURM's verdict comes next
        return terminated(name, image, done.code, done.reason, started, done.finished_at)
    if job is not None and job.state in PENDING:
        message = view.pending or f"{view.name} is {job.state}"
        if not view.pending and job.reason and job.reason != "None":
            message += f" ({job.reason})"
        return waiting(name, image, "Pending", message)
    if job is not None and job.active:
        if started:
            return running(name, image, started)
        return waiting(name, image, "ContainerCreating", f"{view.name} is {job.state}")
    # the job has ended (or squeue forgot it) and this container left no exit code
    state = view.end_state
    if view.deleted and not state:
        state = "CANCELLED"
    reason, code = END_STATES.get(state, ("JobGone", 1))
    verdict = _verdict(view)
    if verdict is not None:
        message = verdict[1]
    else:
        message = f"{view.name} ended ({state or 'no longer known to squeue'})"
    if not started:
        message += "; the container never started"
    return terminated(name, image, code, reason, started, now, message)
