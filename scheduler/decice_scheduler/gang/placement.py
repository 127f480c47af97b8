"""Gang placement: the members of a pod group are bound only when at least minMember of
them fit at once.

Runs on the scheduling loop (one thread, no await inside a step), so a group's trial is
atomic with respect to every other scheduling decision:

1. A member is popped: every pending member of its group (in the queue, not reserved)
   is taken out of the queue and tried, one after the other, with the normal cycle
   (``schedule_one``) and ``ClusterState.assume`` — each placement counts before the
   next member is tried.
2. Enough (bound + binding + reserved + fitting >= minMember): every reserved and
   fitting member is bound (binds are issued only now, all together). The group is
   *placed*; later members of a placed group are placed one by one.
3. Not enough, but every pending member fits (peers have not arrived yet): they stay
   reserved (assumed, not bound) and the group *waits*, until its timeout.
4. Otherwise nothing new is reserved: the new assumptions are forgotten, and the
   group's earlier reservations are released too (a group holds room only while every
   pending member fits); the members are parked until a cluster event, each with a
   FailedScheduling event naming the group, and the freed room goes to other pods.

Two groups never deadlock: a group reserves only when all its pending members fit, so
a complete group is never blocked by a partial reservation of its own, and a partial
reservation of another group lasts at most that group's timeout. At the timeout every
reservation of the group is released (the pods go back to the queue with a
FailedScheduling event naming the group) and for one timeout period the group
reserves again only if minMember fit at once.

A member deleted, terminating, bound elsewhere or leaving the group while reserved
releases its reservation. A failed bind puts the member back in the queue; since its
peers are bound, it is placed as soon as it fits (the group's need is what is missing).
After a restart (the reservations lived in memory only) a group with some members
bound and fewer than minMember is *incomplete*: its pending members go to the front of
the queue and are placed as the missing part of the group.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Protocol

from decice_scheduler.cache.objects import is_terminal, is_terminating, pod_node_name, pod_uid
from decice_scheduler.cache.podinfo import PodInfo
from decice_scheduler.cache.state import ClusterState
from decice_scheduler.gang.podgroup import (
    GroupKey,
    GroupSpec,
    InvalidMembership,
    Membership,
    PodGroupStore,
    membership,
)
from decice_scheduler.metrics import Metrics
from decice_scheduler.profile import Profile
from decice_scheduler.queue import SchedulingQueue
from decice_scheduler.scheduling import schedule_one

__all__ = ["GangScheduler", "Group"]

log = logging.getLogger("decice_scheduler.gang")


class _Binder(Protocol):
    def submit(self, pod: Mapping[str, Any], node: str) -> None: ...


class _Events(Protocol):
    def failed_scheduling(self, pod: Mapping[str, Any], message: str) -> None: ...


@dataclass
class Group:
    key: GroupKey
    form: str
    members: set[str] = field(default_factory=set)  # known, not terminal
    bound: set[str] = field(default_factory=set)  # spec.nodeName set (any scheduler)
    binding: set[str] = field(default_factory=set)  # bind issued, not yet seen bound
    reserved: dict[str, str] = field(default_factory=dict)  # uid -> node (assumed only)
    label_specs: dict[str, GroupSpec] = field(default_factory=dict)
    deadline: float | None = None  # reservations released at this time
    hold_after: float = 0.0  # before: no partial reservation (after a timeout)
    timeouts: int = 0
    placed_count: int = 0

    @property
    def name(self) -> str:
        return f"{self.key[0]}/{self.key[1]}"

    def placed(self, spec: GroupSpec | None) -> bool:
        return spec is not None and len(self.bound) + len(self.binding) >= spec.min_member


@dataclass(eq=False)
class GangScheduler:
    """The group side of the scheduling loop; see the module docstring."""

    state: ClusterState
    queue: SchedulingQueue
    profile: Profile
    binder: _Binder
    events: _Events
    metrics: Metrics
    store: PodGroupStore
    _: KW_ONLY
    clock: Callable[[], float] = time.monotonic
    _groups: dict[GroupKey, Group] = field(init=False, default_factory=dict)
    _member_of: dict[str, GroupKey] = field(init=False, default_factory=dict)
    # groups holding reservations
    _waiting: set[GroupKey] = field(init=False, default_factory=set)
    # /debug/state reads from the HTTP thread
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    placed_total: int = field(init=False, default=0)
    timeouts_total: int = field(init=False, default=0)

    # ------------------------------------------------------------ pod events (sync)

    def observe(self, kind: str, pod: Mapping[str, Any]) -> None:
        """Every pod event of the watch (after state and queue applied it)."""
        labels = (pod.get("metadata") or {}).get("labels")
        uid = pod_uid(pod)
        if not labels and uid not in self._member_of:
            return
        with self._lock:
            self._observe(kind, pod, uid)

    def observe_list(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """After a (re)list: rebuild members and bound sets from the fresh LIST."""
        with self._lock:
            for group in self._groups.values():
                group.members.clear()
                group.bound.clear()
                group.label_specs.clear()
            self._member_of.clear()
            for pod in pods:
                if (pod.get("metadata") or {}).get("labels"):
                    self._observe("ADDED", pod, pod_uid(pod))
            for key, group in list(self._groups.items()):
                for uid in [u for u in group.reserved if u not in group.members]:
                    self._release(group, uid)
                group.binding &= group.members
                self._forget_if_empty(key, group)
            self._prioritise_incomplete()

    def _observe(self, kind: str, pod: Mapping[str, Any], uid: str) -> None:
        found = membership(pod)
        old = self._member_of.get(uid)
        if kind == "DELETED" or found is None or is_terminal(pod):
            if old is not None:
                self._drop(uid, old)
            return
        key = found.key
        if old is not None and old != key:
            self._drop(uid, old)
        group = self._group(key, found.form if isinstance(found, Membership) else "labels")
        group.members.add(uid)
        self._member_of[uid] = key
        if isinstance(found, Membership) and found.spec is not None:
            group.label_specs[uid] = found.spec
        if pod_node_name(pod) is not None:
            group.bound.add(uid)
            group.binding.discard(uid)
            if group.reserved.pop(uid, None) is not None:
                self._reservations_changed(group)
        else:
            group.bound.discard(uid)
            if is_terminating(pod) and uid in group.reserved:
                self._release(group, uid)

    def _drop(self, uid: str, key: GroupKey) -> None:
        self._member_of.pop(uid, None)
        group = self._groups.get(key)
        if group is None:
            return
        group.members.discard(uid)
        group.bound.discard(uid)
        group.binding.discard(uid)
        group.label_specs.pop(uid, None)
        if uid in group.reserved:
            self._release(group, uid)
        self._forget_if_empty(key, group)

    def bind_failed(self, uid: str) -> None:
        """The binder gave up on a bind (the pod is re-queued or gone)."""
        with self._lock:
            key = self._member_of.get(uid)
            if key is not None and key in self._groups:
                self._groups[key].binding.discard(uid)

    def podgroups_changed(self) -> None:
        """A PodGroup was added, changed or removed: members may be tried again."""
        self.queue.cluster_changed()

    # ------------------------------------------------------------ the scheduling loop

    @staticmethod
    def handles(pod: Mapping[str, Any]) -> bool:
        return membership(pod) is not None

    def attempt(self, uid: str, pod: Mapping[str, Any], start_index: int) -> int:
        """Try the group of popped member ``uid``; returns the next start index."""
        with self._lock:
            return self._attempt(uid, pod, start_index)

    def _attempt(self, uid: str, pod: Mapping[str, Any], start_index: int) -> int:
        found = membership(pod)
        if found is None:  # pragma: no cover - the caller checked
            raise ValueError("not a group member")
        if isinstance(found, InvalidMembership):
            self._park([uid], f"pod group {found.name}: {found.problem}")
            return start_index
        group = self._group(found.key, found.form)
        group.members.add(uid)
        self._member_of[uid] = found.key
        if found.spec is not None:
            group.label_specs[uid] = found.spec
        spec = self._spec(group)
        if spec is None:
            if not self.store.synced:
                self.queue.unschedulable(uid)  # the PodGroups are still being listed
                return start_index
            why = (
                "not found"
                if self.store.available
                else "unknown: the PodGroup CRD (scheduling.x-k8s.io/v1alpha1) is not available"
            )
            self._park([uid], f"pod group {group.name}: PodGroup {why}")
            return start_index
        return self._try_group(group, spec, uid, start_index)

    def _try_group(self, group: Group, spec: GroupSpec, popped: str, start: int) -> int:
        queue, state = self.queue, self.state
        placed_before = group.placed(spec)
        candidates = sorted(
            (
                u
                for u in group.members
                if u in queue
                and u not in group.reserved
                and u not in group.binding
                and u not in group.bound
            ),
            key=lambda u: _pod_name(queue.get(u)),
        )
        if popped not in candidates and popped in queue:
            candidates.append(popped)
        claimed = [u for u in candidates if queue.claim(u)]
        fits: list[tuple[str, Mapping[str, Any], str]] = []
        unfit: dict[str, str] = {}
        for u in claimed:
            member = queue.get(u)
            if member is None:  # pragma: no cover - claim() said it is queued
                continue
            try:
                decision = schedule_one(
                    PodInfo.from_pod(member), state.snapshot(), self.profile, start
                )
            except Exception:
                log.exception("scheduling %s failed", u)
                unfit[u] = "scheduling failed"
                continue
            start = decision.next_start_index
            if decision.node is None:
                unfit[u] = decision.message()
                continue
            try:
                state.assume(member, decision.node)
            except ValueError as exc:
                unfit[u] = str(exc)
                continue
            fits.append((u, member, decision.node))
        have = len(group.bound) + len(group.binding) + len(group.reserved)
        need = spec.min_member - have
        now = self.clock()
        if len(fits) >= need:
            self._bind_all(group, fits, placed_before, spec)
            for u, message in unfit.items():
                queue.unschedulable(u)
                self.metrics.unschedulable.inc()
                self._event(u, f"pod group {group.name} is placed; this member: {message}")
            return start
        if not unfit and now >= group.hold_after:
            for u, _member, node in fits:
                group.reserved[u] = node
                queue.done(u)
            if group.deadline is None:
                group.deadline = now + spec.timeout
            self._reservations_changed(group)
            return start
        # not enough: nothing new stays reserved
        for u, _member, _node in fits:
            state.forget(u)
        detail = next(iter(unfit.values()), "")
        if not unfit:
            detail = (
                f"it timed out less than {spec.timeout:g} s ago: it reserves again only "
                f"when minMember {spec.min_member} fit at once"
            )
        message = (
            f"pod group {group.name}: {len(fits)} of {len(claimed)} waiting members fit, "
            f"minMember {spec.min_member} needs {need} ({len(group.bound) + len(group.binding)} "
            f"bound, {len(group.reserved)} reserved); {detail}"
        )
        # a member that does not fit ends the group's claim to hold room: its reservations
        # go too, at once (held until the timeout they starved every other pod that fits
        # there), and the room they free is offered to the others
        released = list(group.reserved) if unfit else []
        for u in released:
            group.reserved.pop(u)
            state.forget(u)
        if released:
            self._reservations_changed(group)
            message += "; its reservations are released"
        self.metrics.unschedulable.inc()
        self._park([*claimed, *released], message)
        if released:
            self.queue.cluster_changed()
        return start

    def _bind_all(
        self,
        group: Group,
        fits: list[tuple[str, Mapping[str, Any], str]],
        placed_before: bool,
        spec: GroupSpec,
    ) -> None:
        for u, _member, node in fits:
            group.reserved[u] = node
            self.queue.done(u)
        count = len(group.reserved)
        for u, node in list(group.reserved.items()):
            member = self.queue.get(u)
            if member is None:
                # left the queue between reservation and now (cannot happen on one loop)
                self.state.forget(u)
                continue
            group.binding.add(u)
            self.binder.submit(member, node)
        group.reserved.clear()
        self._reservations_changed(group)
        if not placed_before and group.placed(spec):
            group.placed_count += 1
            self.placed_total += 1
            self.metrics.gang_placed.inc()
            log.info(
                "pod group %s placed: %d binds issued (minMember %d, %d bound before)",
                group.name,
                count,
                spec.min_member,
                len(group.bound),
            )

    # ------------------------------------------------------------ timeouts

    def tick(self) -> None:
        """Release the reservations of groups past their deadline; refresh the gauges."""
        now = self.clock()
        with self._lock:
            for key in list(self._waiting):
                group = self._groups.get(key)
                if group is None:
                    self._waiting.discard(key)
                    continue
                if group.deadline is not None and now >= group.deadline:
                    self._expire(group, now)
            counts = self._counts()
        self.metrics.gang_groups.labels("waiting").set(counts["waiting"])
        self.metrics.gang_groups.labels("placed").set(counts["placed"])
        self.metrics.gang_reserved.set(counts["reserved_pods"])

    async def run(self, every: float = 0.2) -> None:
        while True:
            await asyncio.sleep(every)
            self.tick()

    def _expire(self, group: Group, now: float) -> None:
        spec = self._spec(group)
        timeout = spec.timeout if spec is not None else 0.0
        released = list(group.reserved)
        for uid in released:
            self.state.forget(uid)
        group.reserved.clear()
        group.deadline = None
        group.hold_after = now + timeout
        group.timeouts += 1
        self.timeouts_total += 1
        self._waiting.discard(group.key)
        self.metrics.gang_timeouts.inc()
        need = spec.min_member if spec is not None else 0
        message = (
            f"pod group {group.name} timed out after {timeout:g} s: fewer than minMember "
            f"{need} members fit at once ({len(released)} reserved, "
            f"{len(group.bound) + len(group.binding)} bound); reservations released"
        )
        log.info("%s", message)
        for uid in released:
            self.queue.unschedulable(uid)
            self._event(uid, message)
        self.queue.cluster_changed()

    # ------------------------------------------------------------ introspection

    def debug(self) -> dict[str, Any]:
        """Groups for /debug/state (any thread)."""
        with self._lock:
            groups = {}
            for group in self._groups.values():
                spec = self._spec(group)
                groups[group.name] = {
                    "form": group.form,
                    "min_member": None if spec is None else spec.min_member,
                    "timeout_seconds": None if spec is None else spec.timeout,
                    "state": self._state_of(group, spec),
                    "members": len(group.members),
                    "pending": sum(
                        1
                        for u in group.members
                        if u in self.queue and u not in group.reserved and u not in group.binding
                    ),
                    "reserved": sorted(group.reserved),
                    "binding": len(group.binding),
                    "bound": len(group.bound),
                    "timeouts": group.timeouts,
                }
            counts = self._counts()
            return {
                "waiting": counts["waiting"],
                "placed": counts["placed"],
                "placed_total": self.placed_total,
                "timed_out_total": self.timeouts_total,
                "reserved_pods": counts["reserved_pods"],
                "podgroup_crd": self.store.available,
                "groups": dict(sorted(groups.items())),
            }

    def _state_of(self, group: Group, spec: GroupSpec | None) -> str:
        if group.placed(spec):
            return "placed"
        if group.reserved or any(u in self.queue for u in group.members):
            return "waiting"
        return "idle"

    def _counts(self) -> dict[str, int]:
        out = {"waiting": 0, "placed": 0, "reserved_pods": 0}
        for group in self._groups.values():
            state = self._state_of(group, self._spec(group))
            if state in out:
                out[state] += 1
            out["reserved_pods"] += len(group.reserved)
        return out

    # ------------------------------------------------------------ internals

    def _group(self, key: GroupKey, form: str) -> Group:
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = Group(key, form)
        group.form = form
        return group

    def _spec(self, group: Group) -> GroupSpec | None:
        if group.form == "podgroup":
            return self.store.get(group.key) if self.store.available else None
        if not group.label_specs:
            return None
        specs = group.label_specs.values()
        return GroupSpec(max(s.min_member for s in specs), min(s.timeout for s in specs))

    def _release(self, group: Group, uid: str) -> None:
        group.reserved.pop(uid, None)
        self.state.forget(uid)
        self.queue.requeue(uid, backoff=False)  # still pending (e.g. relabelled): try again
        self._reservations_changed(group)
        self.queue.cluster_changed()

    def _reservations_changed(self, group: Group) -> None:
        if group.reserved:
            self._waiting.add(group.key)
        else:
            group.deadline = None
            self._waiting.discard(group.key)

    def _forget_if_empty(self, key: GroupKey, group: Group) -> None:
        if not group.members and not group.reserved and not group.binding:
            del self._groups[key]
            self._waiting.discard(key)

    def _park(self, uids: Iterable[str], message: str) -> None:
        for uid in uids:
            self.queue.unschedulable(uid)
            self._event(uid, message)

    def _event(self, uid: str, message: str) -> None:
        pod = self.queue.get(uid)
        if pod is not None:
            self.events.failed_scheduling(pod, message)

    def _prioritise_incomplete(self) -> None:
        """Pending members of groups with some but fewer than minMember bound go first."""
        first: list[str] = []
        for group in self._groups.values():
            spec = self._spec(group)
            if spec is None or not group.bound or group.placed(spec):
                continue
            pending = [u for u in group.members if u in self.queue and u not in group.bound]
            if pending:
                log.info(
                    "pod group %s is incomplete (%d of minMember %d bound): its %d pending "
                    "members go first",
                    group.name,
                    len(group.bound),
                    spec.min_member,
                    len(pending),
                )
                first.extend(pending)
        if first:
            self.queue.prioritise(first)


def _pod_name(pod: Mapping[str, Any] | None) -> str:
    return str(((pod or {}).get("metadata") or {}).get("name") or "")
