"""Leader election on a coordination.k8s.io/v1 Lease (the client-go protocol).

A candidate reads the Lease; it takes it when there is none, when it holds it, when
the holder released it (empty holderIdentity), or when the record has not changed for
``leaseDurationSeconds`` as observed on the local clock (no trust in other clocks).
Updates carry the Lease's resourceVersion, so two candidates cannot both win. The
leader renews every ``retry_period``; if it cannot renew within ``renew_deadline`` it
loses leadership (the process then stops scheduling and exits, like kube-scheduler).
On a clean shutdown the leader releases the Lease so a standby takes over at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from decice_kube.client import ApiError, Client

__all__ = ["LeaderElector"]

log = logging.getLogger("decice_scheduler.leader")


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(eq=False)
class LeaderElector:
    client: Client
    namespace: str
    name: str
    identity: str
    _: KW_ONLY
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    path: str = field(init=False)
    is_leader: bool = field(init=False, default=False)
    _observed: tuple[Any, ...] | None = field(init=False, default=None)
    _observed_at: float = field(init=False, default=0.0)
    _acquire_time: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{quote(self.namespace)}/leases"

    async def acquire(self) -> None:
        """Return once this instance holds the Lease."""
        logged = False
        while True:
            try:
                if await self._try():
                    self.is_leader = True
                    log.info(
                        "became leader (%s/%s as %s)", self.namespace, self.name, self.identity
                    )
                    return
            except ApiError as exc:
                log.warning("leader election: %s", exc)
            if not logged:
                log.info(
                    "waiting for the lease %s/%s held by another instance",
                    self.namespace,
                    self.name,
                )
                logged = True
            await asyncio.sleep(self.retry_period)

    async def hold(self) -> None:
        """Renew until renewal fails for ``renew_deadline``; then return (leadership lost)."""
        last_ok = time.monotonic()
        while True:
            await asyncio.sleep(self.retry_period)
            try:
                ok = await self._try()
            except ApiError as exc:
                log.warning("lease renewal failed: %s", exc)
                ok = False
            if ok:
                last_ok = time.monotonic()
            elif time.monotonic() - last_ok > self.renew_deadline:
                self.is_leader = False
                log.error("lost the lease %s/%s", self.namespace, self.name)
                return

    async def release(self) -> None:
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            status, lease = await self.client.request("GET", f"{self.path}/{quote(self.name)}")
            if status != 200 or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            spec = dict(lease.get("spec") or {})
            spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=_micro_now())
            lease["spec"] = spec
            await self.client.request("PUT", f"{self.path}/{quote(self.name)}", body=lease)
            log.info("released the lease %s/%s", self.namespace, self.name)
        except ApiError as exc:
            log.warning("could not release the lease: %s", exc)

    async def _try(self) -> bool:
        status, lease = await self.client.request("GET", f"{self.path}/{quote(self.name)}")
        now = time.monotonic()
        if status == 404:
            self._acquire_time = _micro_now()
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec({}, 0),
            }
            status, _ = await self.client.request("POST", self.path, body=body)
            return status in (200, 201)
        if status != 200:
            raise ApiError("GET", f"{self.path}/{self.name}", status, str(lease))
        spec: Mapping[str, Any] = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed = record
            self._observed_at = now
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and now - self._observed_at < duration:
            return False  # somebody else holds a live lease
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder != self.identity:
            transitions += 1
            self._acquire_time = _micro_now()
        lease["spec"] = self._spec(spec, transitions)
        status, reply = await self.client.request(
            "PUT", f"{self.path}/{quote(self.name)}", body=lease
        )
        if status == 200:
            new_spec = (reply or {}).get("spec") or {}
            self._observed = (
                new_spec.get("holderIdentity"),
                new_spec.get("renewTime"),
                new_spec.get("leaseTransitions"),
            )
            self._observed_at = time.monotonic()
            return True
        return False  # 409: somebody else wrote it first

    def _spec(self, old: Mapping[str, Any], transitions: int) -> dict[str, Any]:
        return {
            **old,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": self._acquire_time or old.get("acquireTime") or _micro_now(),
            "renewTime": _micro_now(),
            "leaseTransitions": transitions,
        }
