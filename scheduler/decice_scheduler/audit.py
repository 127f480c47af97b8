"""Drift audit: the incremental state against a full rebuild from a fresh LIST.

A LIST and the watch stream are never at exactly the same resourceVersion, so a
difference may be an event still on its way. The audit therefore compares again
(after ``settle`` seconds, with a new LIST) and counts only nodes that differ the same
way every time. Persistent drift is logged per node, counted in the metrics, and
repaired by a full relist (``Sync.request_relist`` -> ``ClusterState.replace_all``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from decice_scheduler.client import Client
from decice_scheduler.metrics import Metrics
from decice_scheduler.state import ClusterState
from decice_scheduler.sync import NODES, PODS, Sync
from decice_scheduler.usage import NodeDrift

__all__ = ["AuditResult", "Auditor"]

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


class Auditor:
    def __init__(
        self,
        client: Client,
        state: ClusterState,
        sync: Sync,
        metrics: Metrics,
        *,
        attempts: int = 3,
        settle: float = 1.0,
        repair: bool = True,
    ) -> None:
        self.client = client
        self.state = state
        self.sync = sync
        self.metrics = metrics
        self.attempts = attempts
        self.settle = settle
        self.repair = repair
        self._lock = asyncio.Lock()
        self.last: AuditResult | None = None

    async def audit(self) -> AuditResult:
        async with self._lock:
            result = await self._audit()
        self.last = result
        self.metrics.audits.inc()
        self.metrics.drift_nodes.set(len(result.drift))
        self.metrics.drift.inc(len(result.drift))
        return result

    async def _audit(self) -> AuditResult:
        started = time.monotonic()
        persistent: dict[tuple[Any, ...], NodeDrift] | None = None
        nodes: list[dict[str, Any]] = []
        pods: list[dict[str, Any]] = []
        attempt = 0
        for attempt in range(1, self.attempts + 1):
            await self.sync.ready.wait()
            nodes, _ = await self.client.list_all(NODES)
            pods, _ = await self.client.list_all(PODS)
            fresh = ClusterState()
            fresh.replace_all(nodes, pods)
            drift = {_key(d): d for d in self.state.diff(fresh)}
            persistent = (
                drift if persistent is None else {k: v for k, v in drift.items() if k in persistent}
            )
            if not persistent:
                break
            if attempt < self.attempts:
                await asyncio.sleep(self.settle)
        found = list((persistent or {}).values())
        repaired = False
        if found:
            for d in found:
                log.error("drift: %s", d.describe())
            if self.repair:
                self.sync.request_relist("drift")
                repaired = True
        else:
            log.info(
                "audit: no drift (%d nodes, %d pods, %d attempt(s))", len(nodes), len(pods), attempt
            )
        return AuditResult(
            found, len(nodes), len(pods), time.monotonic() - started, attempt, repaired
        )

    async def run_periodic(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self.audit()
            except Exception as exc:  # an audit failing must not stop the scheduler
                log.warning("audit failed: %s", exc)
