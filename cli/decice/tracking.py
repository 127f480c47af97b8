"""Bookkeeping of a run's phases from runner events (what the record and the view show)."""

from __future__ import annotations

import time

from decice import records
from decice.records import PhaseRecord, RunRecord
from decice.runner import Event, HostResult, NoHostsMatched, PlayStarted, RunFinished, TaskStarted

COUNTED = ("ok", "changed", "failed", "unreachable", "skipped")
# Roles that could not do their work (not implemented, artifacts unreachable)
# say so with set_stats(per_host: false) under this key: {component: reason}.
NOT_DONE_KEY = "decice_not_done"
# What the add-on roles installed ({add-on: {version, artifact, sha256, ...}}) and the
# outcome of each add-on's check ({add-on: text}), also via set_stats(per_host: false).
INSTALLED_KEY = "decice_installed"
VERIFIED_KEY = "decice_verified"


# a skipped phase's note when its play matched no host of the inventory
NO_HOSTS = "no hosts in this phase's groups"


class PhaseTracker:
    """Applies runner events to a run record's phases."""

    def __init__(self, record: RunRecord, selected: list[str]) -> None:
        """Track ``selected`` phases of ``record`` (created if the record lacks them)."""
        self.record = record
        self.selected = selected
        self.current: PhaseRecord | None = None
        self.current_task = ""
        self.failed = False
        self._t0: dict[str, float] = {}
        self._no_hosts: set[str] = set()
        known = {phase.name for phase in record.phases}
        record.phases.extend(PhaseRecord(name=name) for name in selected if name not in known)

    def _start(self, name: str) -> None:
        if self.current and self.current.name == name:
            return
        self._close_current()
        if name not in self.selected:  # a play whose tasks the tags filter out
            self.current = None
            return
        phase = self.record.phase(name)
        if phase.status == "pending":
            phase.status, phase.started = "running", records.now()
            self._t0[name] = time.monotonic()
        self.current = phase

    def _close_current(self, *, failed_run: bool = False) -> None:
        phase = self.current
        if phase is None or phase.status != "running":
            return
        phase.ended = records.now()
        phase.seconds = round(time.monotonic() - self._t0[phase.name], 3)
        failed = any(c["failed"] or c["unreachable"] for c in phase.hosts.values())
        if failed or failed_run:
            phase.status = "failed"
        elif not phase.hosts:
            phase.status = "skipped"
            phase.note = NO_HOSTS if phase.name in self._no_hosts else ("nothing to do")
        else:
            phase.status = "ok"
        self.current = None

    def apply(self, event: Event) -> None:
        if isinstance(event, PlayStarted):
            self._start(event.phase)
        elif isinstance(event, NoHostsMatched):
            self._no_hosts.add(event.phase)
        elif isinstance(event, TaskStarted):
            self.current_task = event.task
        elif isinstance(event, HostResult):
            self._host_result(event)
        elif isinstance(event, RunFinished):
            self._finish(event)

    def _host_result(self, event: HostResult) -> None:
        phase = self.current
        if phase is None:
            return
        counts = phase.hosts.setdefault(event.host, dict.fromkeys(COUNTED, 0))
        status = "ok" if event.status == "failed" and event.ignored else event.status
        counts[status] += 1
        if status in {"failed", "unreachable"}:
            self.record.failures.append(
                {
                    "phase": phase.name,
                    "host": event.host,
                    "task": event.task,
                    "status": status,
                    "message": event.message,
                }
            )

    def _finish(self, event: RunFinished) -> None:
        failed_run = event.status != "successful"
        host_failures = any(f["phase"] in self.selected for f in self.record.failures)
        self._close_current(failed_run=failed_run and not host_failures)
        for host, counts in event.stats.items():
            self.record.stats[host] = {
                key: self.record.stats.get(host, {}).get(key, 0) + value
                for key, value in counts.items()
            }
        for phase in self.record.phases:
            if phase.name in self.selected and phase.status == "pending":
                phase.status = "not run" if failed_run else "skipped"
                if not failed_run and not phase.note:
                    phase.note = "no play ran"
        if failed_run and not host_failures:
            self.record.failures.append(
                {
                    "phase": "-",
                    "host": "-",
                    "task": "-",
                    "status": event.status,
                    "message": f"ansible-playbook ended {event.status} (rc {event.rc}); "
                    f"see {self.record.artifacts}",
                }
            )
        self.failed = failed_run
        installed = event.data.get(INSTALLED_KEY) or {}
        if isinstance(installed, dict):
            self.record.installed.update({str(k): dict(v) for k, v in installed.items()})
        verified = event.data.get(VERIFIED_KEY) or {}
        if isinstance(verified, dict):
            self.record.verified.update({str(k): str(v) for k, v in verified.items()})
        not_done = event.data.get(NOT_DONE_KEY) or {}
        if isinstance(not_done, dict):
            self.record.not_done.update({str(k): str(v) for k, v in not_done.items()})
        for component in not_done:
            # add-on roles live in the addons phase; the others are named like their phase
            owner = component if component in self.selected else "addons"
            if owner in self.selected and self.record.phase(owner).status == "ok":
                self.record.phase(owner).status = "incomplete"


def conclude(record: RunRecord) -> None:
    """The run's overall status from its phases and the components not done."""
    if any(phase.status == "failed" for phase in record.phases) or record.failures:
        record.status = "failed"
    elif record.not_done:
        record.status = "incomplete"
    else:
        record.status = "ok"
