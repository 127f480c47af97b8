"""Drift audit: the incremental state against a full rebuild from a fresh LIST.

A LIST and the watch stream are never at exactly the same resourceVersion, so a
difference may be an event still on its way. The audit therefore compares again
(after ``settle`` seconds, with a new LIST) and counts only nodes that differ the same
way every time. Persistent drift is logged per node, counted in the metrics, and
repaired by a full relist (``Sync.request_relist`` -> ``ClusterState.replace_all``).

Off the scheduling loop: the LISTs (with a client of the audit's own, in pages of
``AUDIT_PAGE`` so that no single JSON parse holds the interpreter long), the rebuild
and the diff run on a loop of their own in a worker thread (:mod:`.offloop`); the diff
reads the live state through its lock only. The repair is the one step taken on the
scheduling loop, after the worker is done.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

from decice_kube.client import Client
from decice_scheduler.cache.state import ClusterState
from decice_scheduler.cache.sync import NODES, PODS, Sync
from decice_scheduler.cache.usage import NodeDrift
from decice_scheduler.metrics import Metrics
from decice_scheduler.offloop import run_in_thread

__all__ = ["AUDIT_PAGE", "AuditResult", "Auditor"]

AUDIT_PAGE = 500

log = logging.getLogger("decice_scheduler.audit")


@dataclass(frozen=True)
class AuditResult:
    drift: list[NodeDrift] = field(default_factory=list)
    nodes: int = 0
    pods: int = 0
    seconds: float = 0.0
    attempts: int = 0
    repaired: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "drift_nodes": len(self.drift),
            "drift": [d.describe() for d in self.drift],
            "nodes": self.nodes,
            "pods": self.pods,
            "seconds": round(self.seconds, 3),
            "attempts": self.attempts,
            "repaired": self.repaired,
        }


def _key(d: NodeDrift) -> tuple[Any, ...]:
    return (d.node, repr(d.ours), repr(d.theirs), d.only_ours, d.only_theirs)


@dataclass(eq=False)
class Auditor:
    """Audits ``state`` against fresh LISTs made with clients from ``client_factory``
    (one per audit, created and closed on the worker thread)."""

    client_factory: Callable[[], Client]
    state: ClusterState
    sync: Sync
    metrics: Metrics
    _: KW_ONLY
    attempts: int = 3
    settle: float = 1.0
    repair: bool = True
    _lock: asyncio.Lock = field(init=False, default_factory=asyncio.Lock)
    last: AuditResult | None = field(init=False, default=None)

    async def audit(self) -> AuditResult:
        async with self._lock:
            await self.sync.ready.wait()
            result = await run_in_thread(self._compare, name="audit")
            if result.drift and self.repair:
                self.sync.request_relist("drift")  # on the loop: Sync's state is its own
                result = replace(result, repaired=True)
        self.last = result
        self.metrics.audits.inc()
        self.metrics.drift_nodes.set(len(result.drift))
        self.metrics.drift.inc(len(result.drift))
        return result

    async def _compare(self) -> AuditResult:
        """On the worker thread: LIST, rebuild, diff until the drift is persistent."""
        started = time.monotonic()
        persistent: dict[tuple[Any, ...], NodeDrift] | None = None
        nodes: list[dict[str, Any]] = []
        pods: list[dict[str, Any]] = []
        attempt = 0
        client = self.client_factory()
        try:
            for attempt in range(1, self.attempts + 1):
                nodes, _ = await client.list_all(NODES, page=AUDIT_PAGE)
                pods, _ = await client.list_all(PODS, page=AUDIT_PAGE)
                fresh = ClusterState()
                fresh.replace_all(nodes, pods)
                drift = {_key(d): d for d in self.state.diff(fresh)}
                persistent = (
                    drift
                    if persistent is None
                    else {k: v for k, v in drift.items() if k in persistent}
                )
                if not persistent:
                    break
                if attempt < self.attempts:
                    await asyncio.sleep(self.settle)
        finally:
            await client.close()
        found = list((persistent or {}).values())
        for d in found:
            log.error("drift: %s", d.describe())
        if not found:
            log.info(
                "audit: no drift (%d nodes, %d pods, %d attempt(s))", len(nodes), len(pods), attempt
            )
        return AuditResult(found, len(nodes), len(pods), time.monotonic() - started, attempt)

    async def run_periodic(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self.audit()
            except Exception as exc:  # an audit failing must not stop the scheduler
                log.warning("audit failed: %s", exc)
