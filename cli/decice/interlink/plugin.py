"""The plugin's operations: create, delete, status, logs, ping and cancel-all.

Transport-free (JSON-able values in and out); ``server`` puts HTTP around them.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decice.interlink import api, logs, slurm
from decice.interlink.errors import PluginError, Unrunnable, UsageError
from decice.interlink.jobscript import JOB_PREFIX, TIMES, Defaults, Runtime, write_job_dir
from decice.interlink.pilot import PILOT_NAME, PILOTS, SRUN_LOG, PilotConfig, Pilots
from decice.interlink.podspec import PodSpec, Size, SizeDefaults, parse_pod
from decice.interlink.status import JobView, container_status
from decice.interlink.store import (
    DELETED,
    LAUNCHING,
    QUEUED,
    SUBMITTED,
    SUBMITTING,
    Entry,
    Store,
)

log = logging.getLogger("decice.interlink")

JOBS = "jobs"
STATE = "state"
QUEUE_TTL = 1.0  # seconds one squeue answer serves /status calls (reset by create/delete)


def utcnow() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True)
class Config:
    data_dir: Path
    runtime: Runtime
    defaults: Defaults
    max_pods: int = 1000  # PingResponse pods: jobs wait in SLURM's queue, not on the node
    sizes: SizeDefaults = field(default_factory=SizeDefaults)  # a pod that sets no size
    pilot: PilotConfig | None = None  # pilot mode (decice.interlink.pilot); None: job mode


class Plugin:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.store = Store(config.data_dir / STATE)
        self.jobs = config.data_dir / JOBS
        self._lock = threading.Lock()  # one create/delete at a time (store + sbatch)
        self._sacct_works = True  # until sacct fails once (no accounting storage)
        self._queue_lock = threading.Lock()
        self._queue: tuple[float, dict[str, slurm.Job]] | None = None
        # pilot entries are served in either mode (a restart may switch modes); new pods
        # go to pilots only with config.pilot
        self.pilots = Pilots(config.pilot or PilotConfig(), config.data_dir, self.store, self._lock)

    def start(self) -> None:
        """Pilot mode: the pilots' round (place queued pods, lease and release pilots, end
        the grace of deleted pods). In job mode only when an earlier run in pilot mode left
        pods: without it their status, logs and delete still work, a deleted one's step
        just gets no SIGKILL after its SIGTERM."""
        if self.config.pilot is not None or any(e.mode == "pilot" for e in self.store.all()):
            self.pilots.start(self._pilot_round)

    def stop(self) -> None:
        self.pilots.stop()

    def _pilot_round(self) -> None:
        self.pilots.refresh()
        with self._lock:
            self.pilots.dispatch()
        self._forget_ended()
        self.pilots.forget()

    def _jobs(self) -> dict[str, slurm.Job]:
        """squeue's answer, shared by the /status calls of one second (many pods poll)."""
        with self._queue_lock:
            now = time.monotonic()
            if self._queue is None or now - self._queue[0] > QUEUE_TTL:
                self._queue = (now, slurm.queue())
            return self._queue[1]

    def _queue_changed(self) -> None:
        with self._queue_lock:
            self._queue = None

    def ensure_dirs(self) -> None:
        """The data dir and its parts, private: one that exists is taken only when it is a
        directory of this user (not a link), and made 0700 if it was open to others."""
        data = self.config.data_dir
        data.mkdir(mode=0o700, parents=True, exist_ok=True)
        found = data.lstat()
        if not stat.S_ISDIR(found.st_mode):
            raise UsageError(f"--data-dir {data}: not a directory (a link or a file is there)")
        if found.st_uid != os.geteuid():
            raise UsageError(f"--data-dir {data}: owned by uid {found.st_uid}, not this user")
        if found.st_mode & 0o077:
            log.warning("--data-dir %s was %o: made 0700", data, found.st_mode & 0o777)
            data.chmod(0o700)
        self.store.ensure()
        for part in (self.jobs, data / PILOTS):
            part.mkdir(mode=0o700, exist_ok=True)
            part.chmod(0o700)

    # ------------------------------------------------------------------ create
    def _biggest(self, partition: str, label: str) -> Size:
        """The largest usable node of ``partition`` ("": the default one), per resource."""
        partition = partition or self.config.defaults.partition or slurm.default_partition()
        nodes = [
            n for n in slurm.nodes() if n.usable and (not partition or partition in n.partitions)
        ]
        if not nodes:
            raise Unrunnable(
                f"pod {label}: partition {partition or '(default)'} has no usable node"
            )
        return Size(
            max(n.cpus for n in nodes), max(n.memory_mb for n in nodes), max(n.gpus for n in nodes)
        )

    def _check_fits(self, spec: PodSpec, label: str, partition: str = "") -> None:
        """Refuse a pod larger than the partition's largest usable node."""
        partition = (
            partition or spec.partition or self.config.defaults.partition
        ) or slurm.default_partition()  # resolved once: _biggest and the message use it
        biggest = self._biggest(partition, label)
        asked = spec.size
        for what, want, have in (
            ("cpus", asked.cpus, biggest.cpus),
            ("MiB of memory", asked.memory_mb, biggest.memory_mb),
            ("GPUs", asked.gpus, biggest.gpus),
        ):
            if want > have:
                raise Unrunnable(
                    f"pod {label}: asks for {want} {what}; the largest node of partition "
                    f"{partition or '(default)'} has {have}; lower the pod's requests/limits "
                    "or pick a partition with bigger nodes (slurm-job.vk.io/partition)"
                )

    def _entry(self, ref: api.PodRef, spec: PodSpec) -> Entry:
        """A new pod's store entry (state submitting, no job id)."""
        return Entry(
            name=ref.name,
            namespace=ref.namespace,
            uid=ref.uid,
            job_dir=str(self.jobs / ref.key),
            containers=[c.name for c in spec.containers],
            init_containers=[c.name for c in spec.init_containers],
            images={c.name: c.image for c in [*spec.init_containers, *spec.containers]},
        )

    def create(self, body: Any) -> dict[str, str]:
        req = api.parse_create(body)
        ref = req.ref
        label = f"{ref.namespace}/{ref.name}"
        spec = parse_pod(req, self.config.sizes)
        if self.config.runtime.kind == "bare":
            for c in [*spec.init_containers, *spec.containers]:
                if not c.command:
                    raise Unrunnable(
                        f"pod {label}: container {c.name} has no command; without "
                        "Apptainer/Singularity (runtime bare) the plugin runs the "
                        "container's command and args on the node: set command"
                    )
        if self.config.pilot is not None:
            return self._create_in_pilot(req.ref, spec, label)
        with self._lock:
            existing = self.store.get(ref.key)
            if existing is not None and existing.state == SUBMITTED and existing.jid:
                return api.create_struct(ref.uid, existing.jid)  # a retried create
            self._check_fits(spec, label)
            job_dir = self.jobs / ref.key
            entry = self._entry(ref, spec)
            self.store.put(entry)  # before sbatch: a crash in between is still found
            try:
                script = write_job_dir(
                    job_dir, ref, spec, self.config.runtime, self.config.defaults
                )
                entry.jid = slurm.sbatch(script)
            except BaseException:
                self.store.remove(ref.key)
                shutil.rmtree(job_dir, ignore_errors=True)
                raise
            entry.state = SUBMITTED
            entry.submitted_at = utcnow()
            self.store.put(entry)
            self._queue_changed()
        log.info("pod %s (uid %s): SLURM job %s submitted", label, ref.uid, entry.jid)
        return api.create_struct(ref.uid, entry.jid)

    def _create_in_pilot(self, ref: api.PodRef, spec: PodSpec, label: str) -> dict[str, str]:
        """Pilot mode: the pod's job dir, queued; placed at once when a pilot has room."""
        pilot = self.config.pilot
        assert pilot is not None
        if spec.size.gpus:
            raise Unrunnable(
                f"pod {label}: asks for {spec.size.gpus} GPUs; pilots lease no GPUs: run it "
                "on an endpoint in job mode"
            )
        with self._lock:
            existing = self.store.get(ref.key)
            if existing is not None and existing.state in (QUEUED, LAUNCHING, SUBMITTED):
                return api.create_struct(ref.uid, existing.jid)  # a retried create
            self._check_fits(spec, label, pilot.partition)
            job_dir = self.jobs / ref.key
            entry = self._entry(ref, spec)
            entry.state, entry.mode, entry.submitted_at = QUEUED, "pilot", utcnow()
            entry.cpus, entry.memory_mb, entry.step_time = (
                spec.size.cpus,
                spec.size.memory_mb,
                spec.time,
            )
            entry.queued_at = time.time()
            try:
                write_job_dir(job_dir, ref, spec, self.config.runtime, self.config.defaults)
                self.store.put(entry)
            except BaseException:
                self.store.remove(ref.key)
                shutil.rmtree(job_dir, ignore_errors=True)
                raise
            self.pilots.refresh()
            self.pilots.dispatch()
            placed = self.store.get(ref.key) or entry
        self.pilots.wake()
        where = f"pilot {placed.pilot} on {placed.node}" if placed.pilot else "the queue"
        log.info("pod %s (uid %s): in %s", label, ref.uid, where)
        return api.create_struct(ref.uid, placed.jid)

    # ------------------------------------------------------------------ delete
    def delete(self, body: Any) -> str:
        ref = api.pod_ref(body)
        with self._lock:
            entry = self.store.get(ref.key)
            if entry is None:
                return f"pod {ref.namespace}/{ref.name}: not known here; nothing to do"
            if entry.mode == "pilot":
                if entry.state == DELETED:
                    return f"pod {ref.namespace}/{ref.name}: already deleted"
                what = self.pilots.delete(entry)
                log.info("pod %s/%s: %s", ref.namespace, ref.name, what)
                self.pilots.wake()
                return f"pod {ref.namespace}/{ref.name}: {what}"
            if not entry.jid:  # the plugin died between sbatch and recording the id
                entry.jid = self._find_job(entry)
            job = slurm.queue().get(entry.jid) if entry.jid else None
            active = job is not None and job.active
            if entry.jid and (active or job is None):  # gone from squeue: cancel to be sure
                slurm.scancel([entry.jid])
            entry.state = DELETED
            self.store.put(entry)
            self._queue_changed()
        what = "cancelled" if active else f"had already ended ({job.state})" if job else "cancelled"
        log.info("pod %s/%s: SLURM job %s %s", ref.namespace, ref.name, entry.jid or "-", what)
        self._forget_ended()
        return f"pod {ref.namespace}/{ref.name}: SLURM job {entry.jid or '-'} {what}"

    def _find_job(self, entry: Entry) -> str:
        wanted = f"{JOB_PREFIX}{entry.uid}"
        for job in slurm.queue().values():
            if job.name == wanted and job.workdir == entry.job_dir:
                return job.jid
        return ""

    def _forget_ended(self, queue: dict[str, slurm.Job] | None = None) -> None:
        """Drop deleted pods whose job is no longer active, with their job dirs."""
        deleted = [e for e in self.store.all() if e.state == DELETED]
        if not deleted:
            return
        try:
            jobs = queue if queue is not None else slurm.queue()
        except PluginError:
            return
        for entry in deleted:
            if entry.mode == "pilot":
                if self.pilots.gone(entry):
                    with self._lock:
                        shutil.rmtree(entry.job_dir, ignore_errors=True)
                        self.store.remove(entry.ref.key)
                continue
            job = jobs.get(entry.jid)
            if job is None or not job.active:
                with self._lock:
                    shutil.rmtree(entry.job_dir, ignore_errors=True)
                    self.store.remove(entry.ref.key)

    # ------------------------------------------------------------------ status
    def status(self, body: Any) -> Any:
        """PodStatus of each known pod in ``body``; an empty list is interLink's ping."""
        refs = api.parse_pods(body)
        if not refs:
            return self.ping()
        entries = [(ref, self.store.get(ref.key)) for ref in refs]
        known = [(ref, e) for ref, e in entries if e is not None and e.state != DELETED]
        if not known:
            return []
        jobs = self._jobs()
        now = utcnow()
        out = []
        for ref, entry in known:
            assert entry is not None
            view = self._view(entry, jobs)
            job_dir = Path(entry.job_dir)

            def one(name: str, e: Entry = entry, v: JobView = view, d: Path = job_dir) -> Any:
                return container_status(name, e.images.get(name, ""), d, v, now)

            out.append(
                api.pod_status(
                    ref,
                    entry.jid,
                    [one(n) for n in entry.containers],
                    [one(n) for n in entry.init_containers],
                )
            )
        self._forget_ended(jobs)
        return out

    def _view(self, entry: Entry, jobs: dict[str, slurm.Job]) -> JobView:
        if entry.mode == "pilot":
            return self._pilot_view(entry)
        job = jobs.get(entry.jid)
        if entry.state == SUBMITTING:  # sbatch in flight (or the plugin died in it)
            fake = slurm.Job(entry.jid, "PENDING", "Submitting", "", entry.job_dir)
            return JobView(entry.jid, fake)
        accounting = None
        if job is None and self._sacct_works and not entry.ended:
            names = [*entry.containers, *entry.init_containers]
            if not all((Path(entry.job_dir) / f"{n}.exit").exists() for n in names):
                accounting = slurm.sacct(entry.jid)
                self._sacct_works = accounting is not None
        view = JobView(entry.jid, job, accounting, entry.state == DELETED, entry.ended)
        if view.end_state and not entry.ended:  # squeue forgets it after MinJobAge
            entry.ended = view.end_state
            with self._lock:
                if self.store.get(entry.ref.key) is not None:
                    self.store.put(entry)
        return view

    def _pilot_view(self, entry: Entry) -> JobView:
        """A pilot pod: queued; its step running (or its srun starting); or ended, with
        the step's or the pilot's end recorded the first time it is seen."""
        if entry.state == QUEUED:
            queued = slurm.Job("", "PENDING", "", "", entry.job_dir)
            return JobView("", queued, pending="waiting for room in a pilot (pilot mode)")
        pilot, seen = entry.pilot, self.pilots.refresh()
        what = f"pilot job {pilot}"
        if entry.ended:
            return JobView(pilot, None, recorded=entry.ended, what=what, lease=True)
        step = seen.steps.get(f"{JOB_PREFIX}{entry.uid}")
        if step is not None and step.step_id.startswith(f"{pilot}."):
            running = slurm.Job(step.step_id, "RUNNING", "None", step.name, entry.job_dir)
            return JobView(step.step_id, running, what=f"SLURM step {step.step_id}")
        lease = seen.leases.get(pilot)
        if lease is not None and lease.running and self.pilots.holds_room(entry, time.time()):
            starting = slurm.Job(pilot, "RUNNING", "None", "", entry.job_dir)
            return JobView(pilot, starting, what=f"the step of {what} (srun starting)")
        if lease is not None and lease.active and not lease.running:
            return JobView(pilot, lease.job, what=what, lease=True)  # its end comes next
        if lease is not None and lease.running:
            ended = "COMPLETED"  # the step ended, the pilot goes on: the exit files tell
            what = f"the step in {what} (srun's messages: {SRUN_LOG} in the job dir)"
        elif lease is not None:
            ended = lease.job.state
        else:  # squeue forgot the pilot
            accounting = slurm.sacct(pilot) if self._sacct_works else None
            ended = accounting[0] if accounting and accounting[0] else "COMPLETED"
        with self._lock:  # on the entry as it is now (a delete may have changed it)
            current = self.store.get(entry.ref.key)
            if current is not None and not current.ended:
                current.ended = ended
                self.store.put(current)
        return JobView(pilot, None, recorded=ended, what=what, lease=True)

    # ------------------------------------------------------------------ logs
    def logs(self, body: Any) -> str | Iterator[bytes]:
        """The container's log (:mod:`decice.interlink.logs`); with Follow, chunks until it
        ends. Previous is an empty log: containers here are never restarted, and an
        empty log is what a kubelet gives for a container with no previous run."""
        req = api.parse_logs(body)
        entry = self.store.get(f"{req.namespace}-{req.uid}")
        if entry is None:
            raise PluginError(f"pod {req.namespace}/{req.pod or req.uid}: not known here", 404)
        names = [*entry.containers, *entry.init_containers]
        name = req.container or (entry.containers[0] if entry.containers else "")
        if name not in names:
            raise PluginError(f"pod {entry.namespace}/{entry.name}: no container {name!r}", 404)
        if req.previous:
            return ""
        job_dir = Path(entry.job_dir)
        log_file, times = job_dir / f"{name}.log", job_dir / f"{name}{TIMES}"
        opts = logs.Options(req.tail, req.limit_bytes, req.timestamps, req.since, req.follow)
        if not req.follow:
            return logs.snapshot(log_file, times, opts)[0].decode(errors="replace")
        return logs.follow(log_file, times, opts, lambda: self._ended(entry, name))

    def _ended(self, entry: Entry, container: str) -> bool:
        """A followed container has ended: its exit file, its pod deleted, or its job no
        longer active (cancelled, walltime, node failure)."""
        if (Path(entry.job_dir) / f"{container}.exit").exists():
            return True
        now = self.store.get(entry.ref.key)
        if now is None or now.state == DELETED:
            return True
        if now.state in (SUBMITTING, QUEUED):
            return False
        if now.mode == "pilot":
            self.pilots.refresh()
            return self.pilots.gone(now) and not self.pilots.holds_room(now, time.time())
        try:
            job = self._jobs().get(now.jid)
        except PluginError:
            return False
        return job is None or not job.active

    # ------------------------------------------------------------------ ping
    def ping(self) -> dict[str, Any]:
        """PingResponse: what the partition can give this plugin's pods (usable nodes only).

        That is its free cpu, memory and GPUs plus what this plugin's own running jobs
        hold: the virtual node's capacity must not shrink by the pods already bound to it
        (a scheduler counts those itself), only by other users' jobs."""
        if self.config.pilot is not None:
            self.pilots.refresh()
            try:
                biggest = self._biggest(self.config.pilot.partition, "(ping)")
            except Unrunnable:  # no usable node: no pilot can be added
                biggest = Size(0, 0)
            size = self.pilots.capacity(biggest)
            return api.ping_response(
                str(size.cpus), f"{size.memory_mb}Mi", str(self.config.max_pods), {}
            )
        partition = self.config.defaults.partition or slurm.default_partition()
        nodes = [
            n for n in slurm.nodes() if n.usable and (not partition or partition in n.partitions)
        ]
        cpu = sum(max(0, n.cpus - n.cpus_alloc) for n in nodes)
        memory = sum(max(0, n.memory_mb - n.memory_alloc_mb) for n in nodes)
        gpus = sum(max(0, n.gpus - n.gpus_alloc) for n in nodes)
        mine = {e.jid for e in self.store.all() if e.jid}
        if mine:
            held = [a for jid, a in slurm.allocations().items() if jid in mine]
            cpu += sum(a.cpus for a in held)
            if any(n.memory_alloc_mb for n in nodes):  # memory is a consumable resource
                memory += sum(a.memory_mb for a in held)
            gpus += sum(a.gpus for a in held)
        accelerators = {"nvidia.com/gpu": str(gpus)} if gpus else {}
        return api.ping_response(str(cpu), f"{memory}Mi", str(self.config.max_pods), accelerators)

    # ------------------------------------------------------------------ cancel-all
    def cancel_all(self, wait: float = 30.0) -> list[str]:
        """scancel every job of this data dir still queued or running; their ids.

        Found by the store's job ids and, for a job whose id never reached the store,
        by its name (decice-<uid>) and its working dir under this data dir."""
        for entry in self.store.all():  # first: a plugin still running leases no new pilot
            if entry.mode == "pilot" and entry.state != DELETED:
                entry.state, entry.deleted_at = DELETED, time.time()
                self.store.put(entry)
        jobs = slurm.queue()
        mine = {e.jid for e in self.store.all() if e.jid}
        prefix = str(self.jobs) + "/"
        pilots = str(self.config.data_dir / PILOTS)
        for job in jobs.values():
            if job.name.startswith(JOB_PREFIX) and (job.workdir + "/").startswith(prefix):
                mine.add(job.jid)
            if job.name == PILOT_NAME and job.workdir == pilots:  # its pods' steps end too
                mine.add(job.jid)
        targets = sorted((j for j in mine if j in jobs and jobs[j].active), key=int)
        slurm.scancel(targets)
        deadline = time.monotonic() + wait
        while targets and time.monotonic() < deadline:
            current = slurm.queue()
            if not any(j in current and current[j].active for j in targets):
                break
            time.sleep(0.5)
        for entry in self.store.all():
            if entry.jid in targets or entry.state in (SUBMITTING, QUEUED, LAUNCHING):
                entry.state = DELETED
                self.store.put(entry)
        return targets
