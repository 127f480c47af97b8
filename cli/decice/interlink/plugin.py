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
from decice.interlink.podspec import PodSpec, Size, SizeDefaults, parse_pod
from decice.interlink.status import JobView, container_status
from decice.interlink.store import DELETED, SUBMITTED, SUBMITTING, Entry, Store

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


class Plugin:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.store = Store(config.data_dir / STATE)
        self.jobs = config.data_dir / JOBS
        self._lock = threading.Lock()  # one create/delete at a time (store + sbatch)
        self._sacct_works = True  # until sacct fails once (no accounting storage)
        self._queue_lock = threading.Lock()
        self._queue: tuple[float, dict[str, slurm.Job]] | None = None

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
        self.jobs.mkdir(mode=0o700, exist_ok=True)
        self.jobs.chmod(0o700)

    # ------------------------------------------------------------------ create
    def _check_fits(self, spec: PodSpec, label: str) -> None:
        """Refuse a pod larger than the partition's largest usable node."""
        partition = spec.partition or self.config.defaults.partition or slurm.default_partition()
        nodes = [
            n for n in slurm.nodes() if n.usable and (not partition or partition in n.partitions)
        ]
        if not nodes:
            raise Unrunnable(
                f"pod {label}: partition {partition or '(default)'} has no usable node"
            )
        biggest = Size(
            max(n.cpus for n in nodes), max(n.memory_mb for n in nodes), max(n.gpus for n in nodes)
        )
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
        with self._lock:
            existing = self.store.get(ref.key)
            if existing is not None and existing.state == SUBMITTED and existing.jid:
                return api.create_struct(ref.uid, existing.jid)  # a retried create
            self._check_fits(spec, label)
            job_dir = self.jobs / ref.key
            entry = Entry(
                name=ref.name,
                namespace=ref.namespace,
                uid=ref.uid,
                job_dir=str(job_dir),
                containers=[c.name for c in spec.containers],
                init_containers=[c.name for c in spec.init_containers],
                images={c.name: c.image for c in [*spec.init_containers, *spec.containers]},
            )
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

    # ------------------------------------------------------------------ delete
    def delete(self, body: Any) -> str:
        ref = api.pod_ref(body)
        with self._lock:
            entry = self.store.get(ref.key)
            if entry is None:
                return f"pod {ref.namespace}/{ref.name}: not known here; nothing to do"
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
        if now.state == SUBMITTING:
            return False
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
        jobs = slurm.queue()
        mine = {e.jid for e in self.store.all() if e.jid}
        prefix = str(self.jobs) + "/"
        for job in jobs.values():
            if job.name.startswith(JOB_PREFIX) and (job.workdir + "/").startswith(prefix):
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
            if entry.jid in targets or entry.state == SUBMITTING:
                entry.state = DELETED
                self.store.put(entry)
        return targets
