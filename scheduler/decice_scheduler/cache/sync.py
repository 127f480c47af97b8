"""List + watch of nodes and pods (all namespaces, every scheduler) into ClusterState.

One sync round: LIST nodes, LIST pods (the first round from the API server's watch
cache, a relist from etcd), ``state.replace_all`` (which reports the deletes of any
gap), rebuild the pending queue, mark ready; then watch both from their LIST's
resourceVersion with bookmarks. A watch that ends (server ``timeoutSeconds``, client
read timeout, transport error) resumes from the last resourceVersion it saw. A 410 Gone,
a ``StateCorrupt`` from the state, or a requested repair ends the round: both are listed
again (counted in ``relists``). Only ClusterState verbs are called.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from decice_kube.client import ApiError, Client, Gone, gc_paused
from decice_scheduler.cache.objects import node_name_of, pod_uid
from decice_scheduler.cache.state import ClusterState, StateCorrupt
from decice_scheduler.metrics import Metrics
from decice_scheduler.queue import SchedulingQueue, wants_scheduling

__all__ = ["Sync"]

log = logging.getLogger("decice_scheduler.sync")

NODES = "/api/v1/nodes"
PODS = "/api/v1/pods"


class _Relist(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(eq=False)
class Sync:
    client: Client
    state: ClusterState
    queue: SchedulingQueue
    metrics: Metrics
    scheduler_name: str
    _: KW_ONLY
    watch_timeout: int = 60
    on_pod_gone: Callable[[str], None] | None = None
    # every pod event (after state and queue applied it), and every full LIST: the
    # gang placement's view of group members (decice_scheduler.gang.placement)
    on_pod_event: Callable[[str, Mapping[str, Any]], None] | None = field(init=False, default=None)
    on_pods_listed: Callable[[list[dict[str, Any]]], None] | None = field(init=False, default=None)
    ready: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    relists: int = field(init=False, default=0)
    rounds: int = field(init=False, default=0)
    resource_versions: dict[str, str] = field(init=False, default_factory=dict)
    _repair: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    _repair_reason: str = field(init=False, default="")

    # ------------------------------------------------------------ public

    def request_relist(self, reason: str) -> None:
        """Make the running round end and list again (used by the audit to repair)."""
        self._repair_reason = reason
        self._repair.set()

    async def run(self) -> None:
        reason = "start"
        delay = 0.5
        while True:
            try:
                await self._round(reason)
                return  # pragma: no cover - _round only ends by raising
            except _Relist as exc:
                reason = exc.reason
                delay = 0.5
            except ApiError as exc:  # Gone is one
                # a failed LIST: retry with backoff (the watches were not running)
                log.warning("list failed (%s); retrying in %.1f s", exc, delay)
                reason = "list-error"
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 10.0)
            self.relists += 1
            self.metrics.relists.labels(reason).inc()
            log.info("relisting nodes and pods (%s)", reason)

    # ------------------------------------------------------------ one round

    async def _round(self, reason: str) -> None:
        started = time.monotonic()
        # the first round reads the API server's watch cache (resourceVersion 0, as
        # informers do; any staleness is made up by the watch from the list's
        # resourceVersion), a relist reads etcd (a repair wants the truth)
        params = {"resourceVersion": "0"} if reason == "start" else None
        # the first round that lists runs with the cyclic collector paused and ends by
        # freezing what it built (gc.freeze: the state lives as long as the process), so
        # the collector does not walk the whole state again and again while it ages
        first = self.rounds == 0
        with gc_paused() if first else nullcontext():
            nodes, nodes_rv, pods, pods_rv = await self._list_into_state(params, reason)
            if first:
                gc.freeze()
        self.queue.cluster_changed()
        self.resource_versions = {"nodes": nodes_rv, "pods": pods_rv}
        self.rounds += 1
        self._gauges()
        log.info(
            "listed %d nodes and %d pods in %.2f s (%s)",
            len(nodes),
            len(pods),
            time.monotonic() - started,
            reason,
        )
        del nodes, pods
        self.ready.set()
        self._repair.clear()
        tasks = [
            asyncio.create_task(self._watch("nodes", NODES, nodes_rv, self._on_node)),
            asyncio.create_task(self._watch("pods", PODS, pods_rv, self._on_pod)),
            asyncio.create_task(self._repair.wait()),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in done:
            exc = task.exception()
            if exc is not None:
                raise exc
        raise _Relist(self._repair_reason or "repair")

    async def _list_into_state(
        self, params: dict[str, str] | None, reason: str
    ) -> tuple[list[dict[str, Any]], str, list[dict[str, Any]], str]:
        """LIST nodes and pods into the state and the queue: (nodes, their list's
        resourceVersion, pods, theirs)."""
        # both LISTs at once: the API server serves one while this process decodes the
        # other; the first failure is raised (run() retries the round), the other cancelled
        lists = [
            asyncio.ensure_future(self.client.list_all(NODES, params)),
            asyncio.ensure_future(self.client.list_all(PODS, params)),
        ]
        try:
            (nodes, nodes_rv), (pods, pods_rv) = await asyncio.gather(*lists)
        finally:
            for listing in lists:
                listing.cancel()
            await asyncio.gather(*lists, return_exceptions=True)  # none left running
        result = self.state.replace_all(nodes, pods)
        self.queue.replace(
            (pod_uid(p), p) for p in pods if wants_scheduling(p, self.scheduler_name)
        )
        if self.on_pods_listed is not None:
            self.on_pods_listed(pods)
        if result.deleted_pods or result.deleted_nodes:
            self.metrics.gap_deletions.labels("pods").inc(len(result.deleted_pods))
            self.metrics.gap_deletions.labels("nodes").inc(len(result.deleted_nodes))
            log.info(
                "relist (%s): %d pods and %d nodes were deleted in the gap",
                reason,
                len(result.deleted_pods),
                len(result.deleted_nodes),
            )
            for pod in result.deleted_pods:
                if self.on_pod_gone is not None:
                    self.on_pod_gone(pod_uid(pod))
        return nodes, nodes_rv, pods, pods_rv

    async def _watch(
        self,
        resource: str,
        path: str,
        rv: str,
        handle: Callable[[str, Mapping[str, Any]], None],
    ) -> None:
        delay = 0.2
        while True:
            # jitter the server timeout so node and pod watches do not reconnect together
            server_timeout = max(1, int(self.watch_timeout * (1 + 0.2 * random.random())))
            try:
                async for event in self.client.watch(
                    path,
                    rv,
                    server_timeout=server_timeout,
                    read_timeout=server_timeout + 15.0,
                ):
                    kind = event.get("type")
                    obj = event.get("object") or {}
                    new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if kind != "BOOKMARK":
                        try:
                            handle(str(kind), obj)
                        except StateCorrupt as exc:
                            log.error("state corrupt: %s", exc)
                            raise _Relist("corrupt") from exc
                    if new_rv:
                        rv = str(new_rv)
                        self.resource_versions[resource] = rv
                    delay = 0.2
            except Gone as exc:
                raise _Relist("gone") from exc
            except ApiError as exc:
                log.info(
                    "%s watch ended (%s); resuming from %s in %.1f s", resource, exc, rv, delay
                )
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 5.0)
            self.metrics.watch_restarts.labels(resource).inc()

    # ------------------------------------------------------------ event handlers

    def _on_node(self, kind: str, node: Mapping[str, Any]) -> None:
        name = node_name_of(node)
        if kind == "DELETED":
            self.state.remove_node(name)
        elif kind in ("ADDED", "MODIFIED"):
            before = self.state.node_generation(name)
            self.state.update_node(node)
            if self.state.node_generation(name) != before:
                self.queue.cluster_changed()
        self.metrics.nodes.set(self.state.node_count())

    def _on_pod(self, kind: str, pod: Mapping[str, Any]) -> None:
        uid = pod_uid(pod)
        before = self.state.pod_node(uid)
        if kind == "DELETED":
            self.state.remove_pod(uid)
            self.queue.remove(uid)
            if self.on_pod_gone is not None:
                self.on_pod_gone(uid)
        elif kind in ("ADDED", "MODIFIED"):
            self.state.update_pod(pod)
            if wants_scheduling(pod, self.scheduler_name):
                self.queue.upsert(uid, pod)
            else:
                self.queue.remove(uid)
        else:
            return
        if self.on_pod_event is not None:
            self.on_pod_event(kind, pod)
        if before is not None and self.state.pod_node(uid) is None:
            self.queue.cluster_changed()  # resources were freed
        self.metrics.pods.set(self.state.pod_count())

    def _gauges(self) -> None:
        self.metrics.nodes.set(self.state.node_count())
        self.metrics.pods.set(self.state.pod_count())
