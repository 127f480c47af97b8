"""Pilot mode: lease whole nodes once (a pilot job), run each pod as a job step in it.

A pilot is one batch job of this plugin (name ``decice-pilot``, working dir
``<data dir>/pilots``) that holds ``--nodes`` whole nodes (``--exclusive``) for
``--time`` and runs nothing but a sleep. A pod bound to the virtual node becomes one
step of a pilot, started by a detached ``srun --jobid=<pilot> --nodelist=<node>`` with the
pod's cpus and memory, so SLURM accounts for every pod (``sacct`` shows it as a step)
and no pod waits in SLURM's queue. The pods' job dirs, job scripts, status and log files
are those of job mode (:mod:`decice.interlink.jobscript`).

The plugin places pods itself (best fit over the pilots' nodes, by the sizes it
recorded), queues the pods that do not fit (their containers wait, reason ``Pending``),
leases a new pilot for them up to ``--max-pilots``, releases a pilot idle for
``--idle-release`` seconds, and stops placing pods on a pilot whose walltime ends within
``--withdraw`` seconds. Pilots are found again after a restart by their name and
working dir, the pods by the store: no state of this module is only in memory except
the ``srun`` processes it started and when a pilot fell idle.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from decice.interlink import slurm
from decice.interlink.jobscript import OUTPUT, SCRIPT, job_name
from decice.interlink.podspec import Size
from decice.interlink.store import DELETED, LAUNCHING, QUEUED, SUBMITTED, Entry, Store

log = logging.getLogger("decice.interlink")

PILOT_NAME = "decice-pilot"
PILOTS = "pilots"  # under the data dir: the pilots' script, working dir and output
PILOT_SCRIPT = "pilot.sh"
SRUN_LOG = "srun.log"  # in a pod's job dir: srun's own messages
LAUNCH_GRACE = 15.0  # seconds a started srun may take before its step shows in squeue
KILL_GRACE = 10.0  # seconds between a deleted pod's SIGTERM and its step's cancel
REFRESH = 1.0  # seconds between two reads of the pilots and steps
REAP = 0.1  # seconds between two looks at the srun processes


@dataclass(frozen=True)
class PilotConfig:
    """``serve --mode pilot``'s settings (docs/interlink.md, "Pilot mode")."""

    nodes: int = 1
    time: str = "1:00:00"  # sbatch --time of each pilot
    partition: str = ""
    account: str = ""
    max_pilots: int = 1
    idle_release: float = 300.0  # seconds a pilot without pods is kept
    withdraw: float = 60.0  # seconds before a pilot's walltime when it takes no new pods

    # serve's flag (its dest) -> field
    FIELDS: ClassVar[dict[str, str]] = {
        "pilot_nodes": "nodes",
        "pilot_time": "time",
        "max_pilots": "max_pilots",
        "idle_release": "idle_release",
        "withdraw": "withdraw",
    }

    @classmethod
    def from_flags(cls, given: dict[str, Any]) -> PilotConfig:
        return cls(**{cls.FIELDS[k]: v for k, v in given.items() if k in cls.FIELDS})


@dataclass(frozen=True)
class Lease:
    """One pilot job as squeue shows it; ``ends_at`` is a ``time.time()`` (None: not
    running, or no time limit)."""

    jid: str
    job: slurm.Job
    nodes: tuple[str, ...] = ()
    ends_at: float | None = None

    @property
    def running(self) -> bool:
        return self.job.state == "RUNNING"

    @property
    def active(self) -> bool:
        return self.job.active

    def open(self, now: float, withdraw: float) -> bool:
        """Takes new pods: running, and its walltime not about to end."""
        return self.running and (self.ends_at is None or self.ends_at - now > withdraw)


def fits(size: Size, free: Size) -> bool:
    return size.cpus <= free.cpus and size.memory_mb <= free.memory_mb and size.gpus <= free.gpus


def minus(a: Size, b: Size) -> Size:
    return Size(a.cpus - b.cpus, a.memory_mb - b.memory_mb, a.gpus - b.gpus)


def place(
    size: Size, free: dict[tuple[str, str], Size], order: list[tuple[str, str]]
) -> tuple[str, str] | None:
    """The (pilot, node) with the least free cpus that still fits ``size`` (best fit:
    big holes stay whole for big pods and idle pilots stay idle, to be released);
    ties go to the earlier slot of ``order``."""
    best: tuple[str, str] | None = None
    for slot in order:
        room = free[slot]
        if fits(size, room) and (best is None or room.cpus < free[best].cpus):
            best = slot
    return best


def pilot_script(config: PilotConfig, directory: Path) -> str:
    """The pilot's batch script: whole nodes, held by a sleep until cancelled or timed out."""
    opts = [
        f"--job-name={PILOT_NAME}",
        f"--output={directory / 'pilot-%j.out'}",
        f"--chdir={directory}",
        "--export=NONE",
        f"--nodes={config.nodes}",
        "--exclusive",
        "--mem=0",
        f"--time={config.time}",
    ]
    if config.partition:
        opts.append(f"--partition={config.partition}")
    if config.account:
        opts.append(f"--account={config.account}")
    return "\n".join(
        [
            "#!/bin/bash",
            *(f"#SBATCH {o}" for o in opts),
            "# written by decice-interlink-slurm: a pilot; pods run in it as job steps",
            'export PATH="${PATH:-/usr/bin:/bin}"',
            "exec sleep 2147483647",
            "",
        ]
    )


def srun_argv(entry: Entry, size: Size, step_time: str) -> list[str]:
    """The detached srun that runs a pod's job script as a step on its pilot's node."""
    job_dir = Path(entry.job_dir)
    argv = [
        "srun",
        f"--jobid={entry.pilot}",
        "--nodes=1",
        "--ntasks=1",
        f"--nodelist={entry.node}",
        f"--cpus-per-task={size.cpus}",
        f"--job-name={job_name(entry.uid)}",
        f"--output={job_dir / OUTPUT}",
        f"--chdir={job_dir}",
        "--export=NONE",
        "--quiet",
    ]
    if size.memory_mb:
        argv.append(f"--mem={size.memory_mb}M")
    if step_time:
        argv.append(f"--time={step_time}")
    return [*argv, str(job_dir / SCRIPT)]


@dataclass
class Round:
    """What one look at SLURM found: the pilots, the steps, the nodes' sizes."""

    leases: dict[str, Lease] = field(default_factory=dict)
    steps: dict[str, slurm.Step] = field(default_factory=dict)
    sizes: dict[str, Size] = field(default_factory=dict)
    at: float = 0.0  # time.monotonic() of the look


class Pilots:
    """The pilots of one data dir and the pods placed in them (see the module's doc)."""

    def __init__(
        self, config: PilotConfig, data_dir: Path, store: Store, lock: threading.Lock
    ) -> None:
        self.config = config
        self.dir = data_dir / PILOTS
        self.store = store
        self.lock = lock  # the plugin's: one create/delete/dispatch at a time
        self.seen = Round()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}  # pod key -> its srun
        self._exited: set[str] = set()  # pod keys whose srun (of this process) has ended
        self._idle_since: dict[str, float] = {}
        self._signalled: set[str] = set()  # deleted pods sent SIGTERM
        self._refreshing = threading.Lock()  # one squeue at a time; the others share it
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ looking at SLURM
    def refresh(self, force: bool = False) -> Round:
        """Read the pilots and steps again unless read within REFRESH seconds."""
        if not force and time.monotonic() - self.seen.at < REFRESH:
            return self.seen
        with self._refreshing:
            if not force and time.monotonic() - self.seen.at < REFRESH:
                return self.seen  # read by another thread meanwhile
            return self._read()

    def _read(self) -> Round:
        now = time.monotonic()
        jobs = slurm.queue()
        steps = slurm.steps()
        wall = time.time()
        leases = {}
        for job in jobs.values():
            if job.name != PILOT_NAME or job.workdir != str(self.dir):
                continue
            before = self.seen.leases.get(job.jid)
            nodes = before.nodes if before is not None and before.nodes else ()
            if not nodes and job.state == "RUNNING":
                nodes = tuple(slurm.hostnames(job.nodelist))
            left = slurm.seconds(job.time_left) if job.state == "RUNNING" else None
            leases[job.jid] = Lease(job.jid, job, nodes, None if left is None else wall + left)
        sizes = dict(self.seen.sizes)
        wanted = {n for lease in leases.values() for n in lease.nodes}
        if wanted - sizes.keys():
            for node in slurm.nodes():
                sizes[node.name] = Size(node.cpus, node.memory_mb, node.gpus)
        self.seen = Round(leases, steps, sizes, now)
        return self.seen

    def _step(self, entry: Entry) -> slurm.Step | None:
        step = self.seen.steps.get(job_name(entry.uid))
        if step is None or not step.step_id.startswith(f"{entry.pilot}."):
            return None
        return step

    def _proc_alive(self, entry: Entry) -> bool | None:
        key = entry.ref.key
        if key in self._exited:
            return False
        proc = self._procs.get(key)
        if proc is None:
            return None  # started by an earlier plugin process, or never
        return proc.poll() is None

    def holds_room(self, entry: Entry, now: float) -> bool:
        """A placed pod still holds its cpus and memory: its step runs, or its srun was
        started a moment ago and its step is not in squeue yet."""
        if entry.state not in (LAUNCHING, SUBMITTED, DELETED) or not entry.pilot:
            return False
        lease = self.seen.leases.get(entry.pilot)
        if lease is None or not lease.active:
            return False
        alive = self._proc_alive(entry)
        if alive is not None:  # this process started its srun: srun's end is the step's
            return alive
        if self._step(entry) is not None:
            return True
        return not entry.step and now - entry.launched_at < LAUNCH_GRACE  # not seen yet

    # ------------------------------------------------------------ placing pods
    def _free(self, entries: list[Entry], now: float) -> dict[tuple[str, str], Size]:
        free = {
            (lease.jid, node): self.seen.sizes.get(node, Size(0, 0))
            for lease in self.seen.leases.values()
            if lease.running
            for node in lease.nodes
        }
        for entry in entries:
            slot = (entry.pilot, entry.node)
            if slot in free and self.holds_room(entry, now):
                free[slot] = minus(free[slot], Size(entry.cpus, entry.memory_mb, entry.gpus))
        return free

    def dispatch(self) -> None:
        """Place the queued pods that fit, lease a pilot for those that do not, end the
        grace of deleted pods, release idle pilots. Called with the plugin's lock held."""
        now = time.time()
        entries = [e for e in self.store.all() if e.mode == "pilot"]
        self._settle(entries, now)
        free = self._free(entries, now)
        order = [
            (lease.jid, node)
            for lease in sorted(self.seen.leases.values(), key=lambda x: int(x.jid))
            if lease.open(now, self.config.withdraw)
            for node in lease.nodes
        ]
        waiting = []
        for entry in sorted((e for e in entries if e.state == QUEUED), key=lambda e: e.queued_at):
            size = Size(entry.cpus, entry.memory_mb, entry.gpus)
            slot = place(size, free, order)
            if slot is None:
                waiting.append(entry)
                continue
            free[slot] = minus(free[slot], size)
            self._launch(entry, *slot)
        self._lease_more(waiting)
        self._release_idle(entries, waiting, now)

    def _settle(self, entries: list[Entry], now: float) -> None:
        """Launches a dead plugin left half-done, and the grace of deleted pods."""
        for entry in entries:
            step = self._step(entry)
            if step is not None and not entry.step:  # seen once: its absence is its end
                entry.step = step.step_id
                self.store.put(entry)
            if entry.state == LAUNCHING and self._proc_alive(entry) is None:
                job_dir = Path(entry.job_dir)
                began = step is not None or any(job_dir.glob("*.started"))
                if began:
                    entry.state = SUBMITTED
                    self.store.put(entry)
                elif now - entry.launched_at > LAUNCH_GRACE:  # srun never ran: again
                    log.info("pod %s: its step never started; queued again", entry.ref.key)
                    entry.state, entry.pilot, entry.node = QUEUED, "", ""
                    self.store.put(entry)
            if entry.state != DELETED or step is None:
                continue
            key = entry.ref.key
            if now - entry.deleted_at > KILL_GRACE:
                slurm.scancel([step.step_id])
            elif key not in self._signalled:
                slurm.scancel([step.step_id], signal="TERM")
                self._signalled.add(key)

    def _launch(self, entry: Entry, pilot: str, node: str) -> None:
        entry.state, entry.pilot, entry.node = LAUNCHING, pilot, node
        entry.launched_at = time.time()
        entry.jid = pilot
        self.store.put(entry)  # before srun: a plugin killed in between launches it again
        size = Size(entry.cpus, entry.memory_mb, entry.gpus)
        argv = srun_argv(entry, size, entry.step_time)
        job_dir = Path(entry.job_dir)
        fd = os.open(job_dir / SRUN_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            proc = subprocess.Popen(  # its own session: it outlives the plugin
                argv, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True
            )
        except OSError as exc:
            log.error("pod %s: srun did not start: %s; queued again", entry.ref.key, exc)
            entry.state, entry.pilot, entry.node, entry.jid = QUEUED, "", "", ""
            self.store.put(entry)
            return
        finally:
            os.close(fd)
        self._procs[entry.ref.key] = proc
        entry.state = SUBMITTED
        self.store.put(entry)
        log.info(
            "pod %s/%s: step started in pilot %s on %s (%s)",
            entry.namespace,
            entry.name,
            pilot,
            node,
            shlex.join(argv[1:6]),
        )

    def _lease_more(self, waiting: list[Entry]) -> None:
        """One more pilot when pods wait, none is pending and the limit allows."""
        active = [lease for lease in self.seen.leases.values() if lease.active]
        if not waiting or len(active) >= self.config.max_pilots:
            return
        if any(not lease.running for lease in active):
            return  # one is on its way: the queue waits for it
        self.dir.mkdir(mode=0o700, exist_ok=True)
        script = self.dir / PILOT_SCRIPT
        tmp = script.with_name(f".{PILOT_SCRIPT}.tmp")
        tmp.write_text(pilot_script(self.config, self.dir))
        tmp.chmod(0o700)
        tmp.replace(script)
        jid = slurm.sbatch(script)
        log.info("pilot %s submitted (%d pods wait for room)", jid, len(waiting))
        self.refresh(force=True)

    def _release_idle(self, entries: list[Entry], waiting: list[Entry], now: float) -> None:
        busy = {e.pilot for e in entries if self.holds_room(e, now)}
        for lease in self.seen.leases.values():
            if lease.active and not lease.running and not waiting:
                log.info("pilot %s: no pod waits for it any more: cancelled", lease.jid)
                slurm.scancel([lease.jid])
                self.seen.at = 0.0
                continue
            if not lease.running or lease.jid in busy or waiting:
                self._idle_since.pop(lease.jid, None)
                continue
            since = self._idle_since.setdefault(lease.jid, now)
            if now - since >= self.config.idle_release:
                log.info("pilot %s idle for %.0f s: released", lease.jid, now - since)
                slurm.scancel([lease.jid])
                self._idle_since.pop(lease.jid, None)
                self.seen.at = 0.0  # read again at the next round

    # ------------------------------------------------------------ capacity
    def capacity(self, biggest: Size) -> Size:
        """What the virtual node offers: the open pilots' nodes, plus one more pilot of
        the partition's biggest nodes while the limit allows one (so pods bound beyond
        the lease make it grow); at the limit, pods beyond it stay Pending in Kubernetes."""
        now = time.time()
        total = Size(0, 0)
        for lease in self.seen.leases.values():
            if lease.open(now, self.config.withdraw):
                for node in lease.nodes:
                    size = self.seen.sizes.get(node, Size(0, 0))
                    total = Size(
                        total.cpus + size.cpus,
                        total.memory_mb + size.memory_mb,
                        total.gpus + size.gpus,
                    )
        active = sum(1 for lease in self.seen.leases.values() if lease.active)
        if active < self.config.max_pilots:
            n = self.config.nodes
            total = Size(
                total.cpus + n * biggest.cpus,
                total.memory_mb + n * biggest.memory_mb,
                total.gpus + n * biggest.gpus,
            )
        return total

    # ------------------------------------------------------------ deleting
    def delete(self, entry: Entry) -> str:
        """Stop a pod: a queued one is dropped, a placed one gets SIGTERM now and its step
        is cancelled KILL_GRACE seconds later if it still runs. Lock held."""
        if entry.state == QUEUED:
            entry.state = DELETED
            self.store.put(entry)
            return "removed from the queue (it never started)"
        self.refresh(force=True)
        step = self._step(entry)
        proc = self._procs.get(entry.ref.key)
        entry.state, entry.deleted_at = DELETED, time.time()
        self.store.put(entry)
        if step is not None:
            slurm.scancel([step.step_id], signal="TERM")
            self._signalled.add(entry.ref.key)
            return f"step {step.step_id} sent SIGTERM (cancelled in {KILL_GRACE:.0f} s)"
        if proc is not None and proc.poll() is None:
            proc.terminate()  # srun still waiting for its step
            return f"srun of pilot {entry.pilot} stopped"
        return "its step had already ended"

    def gone(self, entry: Entry) -> bool:
        """A deleted pod's step has ended (its job dir and entry may go)."""
        if entry.state == QUEUED or not entry.pilot:
            return True
        if self._step(entry) is not None:
            return False
        return self._proc_alive(entry) is not True

    def reap(self) -> int:
        """Collect the srun processes that ended (their exit is in the job dir's files);
        how many did: their room is free."""
        ended = 0
        for key, proc in list(self._procs.items()):
            if proc.poll() is not None:
                self._exited.add(key)
                self._procs.pop(key, None)
                ended += 1
        return ended

    def forget(self) -> None:
        """Drop what is remembered of the pods whose entries have left the store."""
        self._exited = {key for key in self._exited if self.store.path(key).exists()}

    # ------------------------------------------------------------ the loop
    def start(self, tick: Callable[[], None]) -> None:
        """Run ``tick`` each REFRESH seconds, at once when woken, and within REAP seconds
        of an srun's end (its room is free for the next pod)."""

        def loop() -> None:
            last = 0.0
            while not self._stop.is_set():
                woken = self._wake.wait(REAP)
                self._wake.clear()
                if self._stop.is_set():
                    break
                ended = self.reap()
                if not (woken or ended or time.monotonic() - last >= REFRESH):
                    continue
                last = time.monotonic()
                try:
                    tick()
                except Exception:  # a failed SLURM command: the next round tries again
                    log.exception("pilot round failed")

        self._thread = threading.Thread(target=loop, name="pilots", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
