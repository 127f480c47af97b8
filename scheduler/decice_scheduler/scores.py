"""Open Cluster Management placement scores from the scheduler's own state.

An ``AddOnPlacementScore`` (``cluster.open-cluster-management.io/v1alpha1``, namespaced)
carries ``status.scores`` (``[{name, value}]``, each value -100..100), ``status.validUntil``
and ``status.conditions``; OCM's Placement can sort clusters by them. decice-scheduler
publishes the same score names as OCM's resource-usage-collect add-on, for cpu, memory
and nvidia.com/gpu:

- node scope (``cpuNodeAvailable``, ``memNodeAvailable``, ``gpuNodeAvailable``): the
  largest headroom of one schedulable node, headroom = allocatable - the requests of the
  non-terminal pods counted there (0 when no schedulable node has any);
- cluster scope (``cpuClusterAvailable``, ...): the sum of the headrooms of the
  schedulable nodes (a node is schedulable unless cordoned: ``spec.unschedulable``);
- units: cpu in cores, memory in MiB (bytes / 1024 / 1024), GPUs in devices; each value
  is normalised between a configured ``min`` and ``max`` like OCM's ScoreNormalizer:
  ``> max`` gives 100, ``<= min`` gives -100, else ``int(200 * (v - min) / (max - min) -
  100)``. Defaults are the add-on's: cpu 0..100 cores, memory 0..1048576 MiB (1 TiB),
  GPU 0..20.

The numbers come from the delta-maintained state (``ClusterState.snapshot()``: its
requested totals include the scheduler's own not yet confirmed assumptions), never from
a LIST. ``ScorePublisher`` computes them at most every ``interval`` seconds and writes
the object's status only when a score changed, or when ``validUntil`` is less than half
its validity away. Without the CRD nothing is published: one log line says so, and the
publisher looks again every interval.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from decice_kube.client import MERGE_PATCH, ApiError, Client
from decice_scheduler.cache.resources import Resources
from decice_scheduler.cache.state import ClusterState
from decice_scheduler.metrics import Metrics

__all__ = [
    "DEFAULT_RANGES",
    "GROUP_VERSION",
    "RESOURCES",
    "ScorePublisher",
    "ScoreSettings",
    "compute_scores",
    "headroom",
    "normalize",
    "parse_range",
]

log = logging.getLogger("decice_scheduler.scores")

GROUP_VERSION = "cluster.open-cluster-management.io/v1alpha1"
GPU = "nvidia.com/gpu"
RESOURCES = ("cpu", "memory", GPU)
PREFIX = {"cpu": "cpu", "memory": "mem", GPU: "gpu"}
UNIT = {"cpu": 1000.0, "memory": 1024.0 * 1024.0, GPU: 1.0}  # millicores, bytes, devices
DEFAULT_RANGES: Mapping[str, tuple[float, float]] = {
    "cpu": (0.0, 100.0),
    "memory": (0.0, 1024.0 * 1024.0),
    GPU: (0.0, 20.0),
}
MAX_SCORE, MIN_SCORE = 100, -100


def normalize(value: float, low: float, high: float) -> int:
    """OCM's ScoreNormalizer: -100 at or below ``low``, 100 above ``high``, linear between."""
    if value > high:
        return MAX_SCORE
    if value <= low:
        return MIN_SCORE
    return int((MAX_SCORE - MIN_SCORE) * (value - low) / (high - low) + MIN_SCORE)


def parse_range(text: str) -> tuple[str, float, float]:
    """``RESOURCE=MIN:MAX`` (e.g. ``memory=0:262144``) -> (resource, min, max)."""
    resource, sep, bounds = text.partition("=")
    low, colon, high = bounds.partition(":")
    if not sep or not colon or resource not in RESOURCES:
        raise ValueError(
            f"{text!r}: expected RESOURCE=MIN:MAX with RESOURCE one of {', '.join(RESOURCES)}"
        )
    try:
        lo, hi = float(low), float(high)
    except ValueError as exc:
        raise ValueError(f"{text!r}: MIN and MAX must be numbers") from exc
    if not lo < hi:
        raise ValueError(f"{text!r}: MIN must be below MAX")
    return resource, lo, hi


def headroom(
    nodes: Iterable[tuple[bool, Resources, Resources]],
) -> dict[str, tuple[float, float]]:
    """Per resource (in its unit): (largest headroom of one schedulable node, sum over the
    schedulable nodes). ``nodes``: (unschedulable, allocatable, requested) per node."""
    best = dict.fromkeys(RESOURCES, 0)
    total = dict.fromkeys(RESOURCES, 0)
    for unschedulable, allocatable, requested in nodes:
        if unschedulable:
            continue
        for resource in RESOURCES:
            have = allocatable.get(resource)
            free = have - requested.get(resource)
            total[resource] += free
            if have and free > best[resource]:
                best[resource] = free
    return {r: (best[r] / UNIT[r], total[r] / UNIT[r]) for r in RESOURCES}


def compute_scores(
    nodes: Iterable[tuple[bool, Resources, Resources]],
    ranges: Mapping[str, tuple[float, float]] = DEFAULT_RANGES,
) -> list[dict[str, Any]]:
    """``status.scores`` for ``nodes`` (see :func:`headroom`), in a fixed order."""
    free = headroom(nodes)
    scores: list[dict[str, Any]] = []
    for resource in RESOURCES:
        low, high = ranges.get(resource, DEFAULT_RANGES[resource])
        node, cluster = free[resource]
        prefix = PREFIX[resource]
        scores.append({"name": f"{prefix}NodeAvailable", "value": normalize(node, low, high)})
        scores.append({"name": f"{prefix}ClusterAvailable", "value": normalize(cluster, low, high)})
    return scores


def _stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class ScoreSettings:
    namespace: str = "default"
    name: str = "resource-usage-score"
    interval: float = 30.0
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=lambda: DEFAULT_RANGES)
    validity: float = 0.0  # 0: max(600 s, 10 intervals)

    @property
    def valid_for(self) -> float:
        return self.validity or max(600.0, 10 * self.interval)


@dataclass(eq=False)
class ScorePublisher:
    """Publishes the scores of ``state`` while ``active()`` (see the module docstring)."""

    client: Client
    state: ClusterState
    metrics: Metrics
    settings: ScoreSettings
    controller: str
    _: KW_ONLY
    active: Callable[[], bool] = lambda: True
    clock: Callable[[], float] = time.time
    published: list[dict[str, Any]] | None = field(init=False, default=None)
    valid_until: float = field(init=False, default=0.0)
    writes: int = field(init=False, default=0)
    _crd_missing_logged: bool = field(init=False, default=False)
    _since: str = field(init=False, default="")
    _base: str = field(init=False)
    _path: str = field(init=False)

    def __post_init__(self) -> None:
        s = self.settings
        self._base = f"/apis/{GROUP_VERSION}/namespaces/{quote(s.namespace)}/addonplacementscores"
        self._path = f"{self._base}/{quote(s.name)}"

    def current(self) -> list[dict[str, Any]]:
        """Scores of the state now (on the loop: reads the snapshot)."""
        began = time.thread_time()
        snapshot = self.state.snapshot()
        scores = compute_scores(
            ((n.unschedulable, n.allocatable, n.requested) for n in snapshot.nodes),
            self.settings.ranges,
        )
        self.metrics.scores_seconds.observe(time.thread_time() - began)
        return scores

    async def run(self) -> None:
        while True:
            if self.active():
                try:
                    await self.publish_once()
                except ApiError as exc:
                    log.warning("placement scores not published: %s", exc)
            await asyncio.sleep(self.settings.interval)

    async def publish_once(self) -> bool:
        """Write the status when a score changed or validUntil needs renewing; True if
        written. Nothing (and one log line, once) without the CRD."""
        scores = self.current()
        now = self.clock()
        renew = self.valid_until - now < self.settings.valid_for / 2
        if scores == self.published and not renew:
            return False
        if not await self._ensure_object():
            return False
        valid_until = now + self.settings.valid_for
        if not self._since:
            self._since = _stamp(now)
        status = {
            "scores": scores,
            "validUntil": _stamp(valid_until),
            "conditions": [
                {
                    "type": "ScoresAvailable",
                    "status": "True",
                    "reason": "FromSchedulerState",
                    "message": f"computed by {self.controller} from its incremental state",
                    "lastTransitionTime": self._since,
                }
            ],
        }
        await self.client.request(
            "PATCH",
            f"{self._path}/status",
            body={"status": status},
            content_type=MERGE_PATCH,
            ok_status=(),
        )
        self.published = scores
        self.valid_until = valid_until
        self.writes += 1
        self.metrics.scores_published.inc()
        return True

    async def _ensure_object(self) -> bool:
        status, _ = await self.client.request("GET", self._path)
        if status == 200:
            return True
        if status == 404:
            body = {
                "apiVersion": GROUP_VERSION,
                "kind": "AddOnPlacementScore",
                "metadata": {
                    "name": self.settings.name,
                    "namespace": self.settings.namespace,
                    "labels": {"app.kubernetes.io/managed-by": self.controller},
                },
            }
            created, reply = await self.client.request("POST", self._base, body=body)
            if created in (200, 201, 409):
                self._crd_missing_logged = False
                return True
            status = created
            message = reply.get("message", "") if isinstance(reply, dict) else ""
        else:
            message = ""
        if not self._crd_missing_logged:
            self._crd_missing_logged = True
            if status == 404 and not await self._crd_served():
                log.warning(
                    "placement scores not published: the API server does not serve %s "
                    "addonplacementscores (the AddOnPlacementScore CRD is not installed); "
                    "looking again every %g s",
                    GROUP_VERSION,
                    self.settings.interval,
                )
            else:
                log.warning(
                    "placement scores not published: %s/%s: HTTP %s %s",
                    self.settings.namespace,
                    self.settings.name,
                    status,
                    message,
                )
        return False

    async def _crd_served(self) -> bool:
        status, body = await self.client.request("GET", f"/apis/{GROUP_VERSION}")
        if status != 200 or not isinstance(body, dict):
            return False
        return any(r.get("name") == "addonplacementscores" for r in body.get("resources") or ())
