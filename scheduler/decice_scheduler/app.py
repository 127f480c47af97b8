"""The scheduler process: wires sync, queue, scheduling loop, binder, audit, metrics and
leader election onto one asyncio loop.

Threads: the asyncio loop does everything that touches the state and the queue (watch
events, scheduling cycles, bind completions), so there are no races between them; the
scheduling loop yields to the loop after every pod, so watch events and bind replies
are applied between cycles. The metrics/debug HTTP server runs in its own thread and
reads the state under its lock. An audit (periodic, SIGUSR1 or HTTP) is coordinated on
the loop, but its LISTs, rebuild and diff run in a worker thread (see ``audit``); only
the repair is applied on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from decice_kube.client import Client, load_kubeconfig
from decice_scheduler.binder import Binder, TokenBucket
from decice_scheduler.cache.audit import Auditor
from decice_scheduler.cache.podinfo import PodInfo
from decice_scheduler.cache.state import ClusterState
from decice_scheduler.cache.sync import Sync
from decice_scheduler.events.writer import QUEUE_SIZE, Events, WriterSettings
from decice_scheduler.gang.placement import GangScheduler
from decice_scheduler.gang.podgroup import PodGroupStore, PodGroupWatch
from decice_scheduler.leader import LeaderElector
from decice_scheduler.metrics import Metrics, MetricsServer
from decice_scheduler.profile import Profile
from decice_scheduler.queue import SchedulingQueue
from decice_scheduler.scores import ScorePublisher, ScoreSettings
from decice_scheduler.shapes import ShapeCache

__all__ = ["Options", "Scheduler"]

log = logging.getLogger("decice_scheduler")


@dataclass(frozen=True)
class Options:
    kubeconfig: str
    scheduler_name: str = "decice-scheduler"
    qps: float = 50.0
    burst: int = 100
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    debug_token: str | None = field(default=None, repr=False)
    debug_audit_window: float = 10.0
    leader_elect: bool = False
    lock_namespace: str = "kube-system"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    audit_interval: float = 0.0
    watch_timeout: int = 60
    bind_concurrency: int = 32
    event_qps: float = 5.0
    event_burst: int = 25
    max_backoff: float = 10.0
    events: bool = True
    event_queue_size: int = QUEUE_SIZE
    placement_scores: ScoreSettings | None = None  # None: not published


class Scheduler:
    def __init__(self, options: Options, profile: Profile) -> None:
        self.options = options
        self.profile = profile
        self.metrics = Metrics()
        self.state = ClusterState()
        self.queue = SchedulingQueue(max_backoff=options.max_backoff)
        # per pod shape: filter and score results per node, updated by node changes
        self.shapes = ShapeCache(profile)
        # every request over lean HTTP/1.1 (no httpx: see decice_kube.client)
        self.client = Client(
            load_kubeconfig(options.kubeconfig),
            user_agent=f"{options.scheduler_name}/decice",
            http1_only=True,
        )
        self.sync = Sync(
            self.client,
            self.state,
            self.queue,
            self.metrics,
            options.scheduler_name,
            watch_timeout=options.watch_timeout,
        )
        config = self.client.config
        # events are written by a child process (decice_scheduler.events.writer)
        self.events = Events(
            WriterSettings(
                kubeconfig=options.kubeconfig,
                controller=options.scheduler_name,
                user_agent=f"{options.scheduler_name}/decice-events",
                qps=options.qps,
                burst=options.burst,
                failed_qps=options.event_qps,
                failed_burst=options.event_burst,
                yield_below=max(1, options.event_queue_size // 2),
            ),
            self.metrics,
            queue_size=options.event_queue_size,
            enabled=options.events,
        )
        self.binder = Binder(
            self.client,
            self.state,
            self.queue,
            self.metrics,
            TokenBucket(options.qps, options.burst),
            concurrency=options.bind_concurrency,
            on_bound=self.events.scheduled,
        )
        self.events.binding = self.binder.in_flight  # the event writer yields to binds
        self.scores = (
            ScorePublisher(
                self.client,
                self.state,
                self.metrics,
                options.placement_scores,
                options.scheduler_name,
                active=lambda: self.leading and self.is_ready(),
            )
            if options.placement_scores is not None
            else None
        )
        # gang placement: groups of pods placed all or nothing (decice_scheduler.gang.placement)
        self.podgroups = PodGroupStore()
        self.gang = GangScheduler(
            self.state, self.queue, profile, self.binder, self.events, self.metrics, self.podgroups
        )
        self.podgroup_watch = PodGroupWatch(
            self.client,
            self.podgroups,
            self.gang.podgroups_changed,
            watch_timeout=options.watch_timeout,
        )
        self.sync.on_pod_event = self.gang.observe
        self.sync.on_pods_listed = self.gang.observe_list
        self.binder.on_failed = self.gang.bind_failed
        agent = f"{options.scheduler_name}/decice-audit"
        self.auditor = Auditor(
            lambda: Client(config, user_agent=agent), self.state, self.sync, self.metrics
        )
        self.identity = f"{socket.gethostname()}_{uuid.uuid4().hex[:12]}"
        self.elector = (
            LeaderElector(
                self.client,
                options.lock_namespace,
                options.scheduler_name,
                self.identity,
                lease_duration=options.lease_duration,
                renew_deadline=options.renew_deadline,
                retry_period=options.retry_period,
            )
            if options.leader_elect
            else None
        )
        self.leading = not options.leader_elect
        self.cycles = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = asyncio.Event()
        self.exit_code = 0
        self.server: MetricsServer | None = None

    # ------------------------------------------------------------ readiness / debug

    def is_ready(self) -> bool:
        return self.sync.ready.is_set()

    def debug_state(self) -> dict[str, Any]:
        usage = self.state.usage(include_assumed=False)
        return {
            "ready": self.is_ready(),
            "leader": self.leading,
            "nodes": self.state.node_count(),
            "pods": self.state.pod_count(),
            "assumed": len(self.state.assumed_pods()),
            "relists": self.sync.relists,
            "queue": self.queue.depth(),
            "gangs": self.gang.debug(),
            "usage": {
                node: {"requested": u.requested.as_dict(), "pods": sorted(u.pods)}
                for node, u in sorted(usage.items())
            },
        }

    def audit_now(self) -> dict[str, Any]:
        """From another thread: have the loop run an audit (its work goes to a worker
        thread, the loop keeps scheduling) and wait for the result."""
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(self.auditor.audit(), self._loop)
        return future.result(timeout=120).as_json()

    # ------------------------------------------------------------ run

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> int:
        self._loop = loop = asyncio.get_running_loop()
        # first: the writer is forked while this process has one thread and no connection
        await self.events.start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        loop.add_signal_handler(signal.SIGUSR1, self._audit_signal)
        if self.options.metrics_port:
            self.server = MetricsServer(
                self.options.metrics_port,
                self.metrics,
                ready=self.is_ready,
                state=self.debug_state,
                audit=self.audit_now,
                host=self.options.metrics_host,
                token=self.options.debug_token,
                audit_window=self.options.debug_audit_window,
            )
            self.server.start()
            log.info(
                "metrics on %s:%d (debug endpoints %s)",
                self.server.host,
                self.server.port,
                "need a bearer token" if self.server.authenticated else "open on loopback",
            )
        tasks = [
            asyncio.create_task(self.sync.run(), name="sync"),
            asyncio.create_task(self._main(), name="main"),
            asyncio.create_task(self._gauges(), name="gauges"),
            asyncio.create_task(self.gang.run(), name="gang"),
            asyncio.create_task(self.podgroup_watch.run(), name="podgroups"),
        ]
        if self.scores is not None:
            tasks.append(asyncio.create_task(self.scores.run(), name="placement-scores"))
        if self.options.audit_interval > 0:
            tasks.append(
                asyncio.create_task(
                    self.auditor.run_periodic(self.options.audit_interval), name="audit"
                )
            )
        stopper = asyncio.create_task(self._stop.wait(), name="stop")
        done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopper and not task.cancelled() and task.exception() is not None:
                log.error("%s failed", task.get_name(), exc_info=task.exception())
                self.exit_code = 1
        log.info("shutting down")
        for task in [*tasks, stopper]:
            task.cancel()
        await asyncio.gather(*tasks, stopper, return_exceptions=True)
        await self.binder.drain(timeout=5.0)
        await self.events.stop()
        if self.elector is not None:
            await self.elector.release()
        await self.client.close()
        if self.server is not None:
            self.server.stop()
        return self.exit_code

    def _audit_signal(self) -> None:
        log.info("SIGUSR1: audit requested")
        task = asyncio.create_task(self.auditor.audit())
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    async def _main(self) -> None:
        await self.sync.ready.wait()
        if self.elector is not None:
            await self.elector.acquire()
            self.leading = True
            self.metrics.leader.set(1)
            schedule = asyncio.create_task(self._schedule_loop())
            try:
                await self.elector.hold()
            finally:
                schedule.cancel()
                self.leading = False
                self.metrics.leader.set(0)
                with contextlib.suppress(asyncio.CancelledError):
                    await schedule
            self.exit_code = 1  # lost the lease: stop, a supervisor restarts us
            self.stop()
            return
        self.metrics.leader.set(1)
        await self._schedule_loop()

    async def _schedule_loop(self) -> None:
        start_index = 0
        decide = self.shapes.schedule
        state = self.state
        queue = self.queue
        gang = self.gang
        observe = self.metrics.algorithm_latency.observe
        observe_decision = self.metrics.decision_latency.observe
        observe_cpu = self.metrics.decision_cpu.observe
        thread_time = time.thread_time
        while True:
            uid = await queue.pop()
            pod = queue.get(uid)
            if pod is None:
                continue
            if state.pod_node(uid) is not None:
                queue.done(uid)  # already counted; the watch will remove it from the queue
                continue
            if gang.handles(pod):  # a pod group member: its whole group is tried
                start_index = gang.attempt(uid, pod, start_index)
                self.cycles += 1
                await asyncio.sleep(0)
                continue
            began = time.perf_counter()
            began_cpu = thread_time()
            try:
                info = PodInfo.from_pod(pod)
                decision = decide(info, state.snapshot(), start_index)
            except Exception:
                log.exception("scheduling %s failed", uid)
                queue.requeue(uid)
                continue
            took = time.perf_counter() - began
            observe_cpu(thread_time() - began_cpu)
            observe(took)
            observe_decision(took)
            self.cycles += 1
            start_index = decision.next_start_index
            if decision.node is not None:
                try:
                    state.assume(pod, decision.node)
                except ValueError as exc:
                    log.info("cannot assume: %s", exc)
                    queue.requeue(uid)
                else:
                    queue.done(uid)
                    self.binder.submit(pod, decision.node)
            else:
                self.metrics.unschedulable.inc()
                queue.unschedulable(uid)
                self.events.failed_scheduling(pod, decision.message())
            await asyncio.sleep(0)

    async def _gauges(self) -> None:
        while True:
            for name, value in self.queue.depth().items():
                self.metrics.queue_depth.labels(name).set(value)
            self.metrics.ready.set(1 if self.is_ready() else 0)
            await asyncio.sleep(1.0)
