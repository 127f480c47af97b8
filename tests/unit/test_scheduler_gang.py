"""Gang placement (decice_scheduler.gang.placement, .podgroup): the group logic without an API.

The harness plays the sync (state + queue + gang observer) and the scheduling loop
(pop, ``attempt``); binds and events are recorded, not sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from decice_kube.client import Response
from decice_scheduler.builders import make_node, make_pod
from decice_scheduler.cache.objects import pod_uid
from decice_scheduler.cache.state import ClusterState
from decice_scheduler.gang.placement import GangScheduler
from decice_scheduler.gang.podgroup import (
    ANNOTATION_MIN_MEMBER,
    ANNOTATION_TIMEOUT,
    DEFAULT_TIMEOUT,
    LABEL_GROUP,
    PODGROUP_LABEL,
    GroupSpec,
    InvalidMembership,
    Membership,
    PodGroupStore,
    PodGroupWatch,
    membership,
    spec_from_podgroup,
)
from decice_scheduler.metrics import Metrics
from decice_scheduler.profile import Profile
from decice_scheduler.queue import SchedulingQueue
from tests.support import FakeClock

pytestmark = pytest.mark.unit

OURS = "decice-scheduler"


class Binds:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def submit(self, pod: Mapping[str, Any], node: str) -> None:
        self.calls.append((pod["metadata"]["name"], node))


class Events:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def failed_scheduling(self, pod: Mapping[str, Any], message: str) -> None:
        self.calls.append((pod["metadata"]["name"], message))

    def for_pod(self, name: str) -> list[str]:
        return [m for n, m in self.calls if n == name]


def member(
    name: str,
    group: str,
    min_member: int | None = None,
    *,
    cpu: str = "1",
    timeout: str | None = None,
    podgroup: bool = False,
    node: str | None = None,
) -> dict[str, Any]:
    pod = make_pod(name, scheduler=OURS, requests={"cpu": cpu}, node=node)
    if podgroup:
        pod["metadata"]["labels"] = {PODGROUP_LABEL: group}
        return pod
    pod["metadata"]["labels"] = {LABEL_GROUP: group}
    annotations = {}
    if min_member is not None:
        annotations[ANNOTATION_MIN_MEMBER] = str(min_member)
    if timeout is not None:
        annotations[ANNOTATION_TIMEOUT] = timeout
    pod["metadata"]["annotations"] = annotations
    return pod


class Harness:
    def __init__(self, nodes: int, cpu: str = "1") -> None:
        self.clock = FakeClock(1000.0)
        self.state = ClusterState()
        self.queue = SchedulingQueue(clock=self.clock, max_backoff=1.0)
        self.binds = Binds()
        self.events = Events()
        self.metrics = Metrics()
        self.store = PodGroupStore()
        self.store.synced = True
        self.gang = GangScheduler(
            self.state,
            self.queue,
            Profile.default(),
            self.binds,
            self.events,
            self.metrics,
            self.store,
            clock=self.clock,
        )
        self.pods: dict[str, dict[str, Any]] = {}
        for i in range(nodes):
            self.add_node(f"n{i}", cpu)

    def add_node(self, name: str, cpu: str = "1") -> None:
        self.state.add_node(make_node(name, cpu=cpu))
        self.queue.cluster_changed()

    def add(self, pod: dict[str, Any]) -> str:
        uid = pod_uid(pod)
        self.pods[pod["metadata"]["name"]] = pod
        self.state.add_pod(pod)
        self.queue.upsert(uid, pod)
        self.gang.observe("ADDED", pod)
        return uid

    def delete(self, name: str) -> None:
        pod = self.pods.pop(name)
        uid = pod_uid(pod)
        self.state.remove_pod(uid)
        self.queue.remove(uid)
        self.gang.observe("DELETED", pod)

    def bound_by_watch(self, name: str, node: str) -> None:
        pod = {**self.pods[name], "spec": {**self.pods[name]["spec"], "nodeName": node}}
        self.pods[name] = pod
        uid = pod_uid(pod)
        self.state.update_pod(pod)
        self.queue.remove(uid)
        self.gang.observe("MODIFIED", pod)

    def drain(self) -> None:
        """Run the scheduling loop until the queue has nothing ready."""
        while (uid := self.queue._try_pop()) is not None:
            pod = self.queue.get(uid)
            assert pod is not None
            assert self.gang.handles(pod)
            self.gang.attempt(uid, pod, 0)

    def assumed(self) -> set[str]:
        names = {pod_uid(p): n for n, p in self.pods.items()}
        return {names[u] for u in self.state.assumed_pods()}

    def bound_names(self) -> set[str]:
        return {name for name, _ in self.binds.calls}

    def group(self, name: str) -> dict[str, Any]:
        return dict(self.gang.debug()["groups"][f"default/{name}"])


# ---------------------------------------------------------------- membership


def test_membership_label_form_podgroup_form_and_defaults() -> None:
    m = membership(member("a", "g", 4, timeout="7.5"))
    assert m == Membership(("default", "g"), "labels", GroupSpec(4, 7.5))
    m = membership(member("a", "g", 0))
    assert isinstance(m, Membership) and m.spec == GroupSpec(1, DEFAULT_TIMEOUT)
    pg = member("a", "pg", podgroup=True)
    pg["metadata"]["labels"][LABEL_GROUP] = "other"  # both: the PodGroup wins
    assert membership(pg) == Membership(("default", "pg"), "podgroup")
    assert membership(make_pod("plain")) is None
    assert spec_from_podgroup({"spec": {}}) == GroupSpec(1, DEFAULT_TIMEOUT)
    assert spec_from_podgroup(
        {"spec": {"minMember": 8, "scheduleTimeoutSeconds": 30}}
    ) == GroupSpec(8, 30.0)
    assert spec_from_podgroup({"spec": {"minMember": 2, "scheduleTimeoutSeconds": 0}}) == (
        GroupSpec(2, DEFAULT_TIMEOUT)
    )


def test_invalid_label_form_waits_with_an_event_naming_the_annotation() -> None:
    h = Harness(2)
    bad = membership(member("a", "g"))
    assert isinstance(bad, InvalidMembership) and ANNOTATION_MIN_MEMBER in bad.problem
    h.add(member("a", "g"))
    h.add(member("b", "g", 1, timeout="soon"))
    h.drain()
    assert not h.binds.calls
    assert ANNOTATION_MIN_MEMBER in h.events.for_pod("a")[0]
    assert ANNOTATION_TIMEOUT in h.events.for_pod("b")[0]
    assert h.queue.depth()["unschedulable"] == 2


# ---------------------------------------------------------------- all or nothing


def test_group_of_four_with_room_for_three_binds_none_until_a_node_is_added() -> None:
    h = Harness(3)
    for i in range(4):
        h.add(member(f"m{i}", "g", 4))
    h.drain()
    assert not h.binds.calls
    assert not h.assumed()  # nothing stays reserved when the group does not fit
    assert "pod group default/g: 3 of 4 waiting members fit" in h.events.for_pod("m0")[0]
    assert h.group("g")["state"] == "waiting"
    h.add_node("n3")
    h.clock.now += 5
    h.drain()
    assert h.bound_names() == {"m0", "m1", "m2", "m3"}
    assert sorted(node for _, node in h.binds.calls) == ["n0", "n1", "n2", "n3"]
    assert h.group("g")["state"] == "placed"
    assert h.gang.placed_total == 1
    assert h.metrics.gang_placed._value.get() == 1


def test_members_arriving_over_time_are_reserved_then_bound_together() -> None:
    h = Harness(4)
    h.add(member("m0", "g", 3))
    h.drain()
    h.add(member("m1", "g", 3))
    h.drain()
    assert not h.binds.calls
    assert h.assumed() == {"m0", "m1"}  # reserved in the state: others cannot take it
    assert len(h.group("g")["reserved"]) == 2
    h.add(member("m2", "g", 3))
    h.drain()
    assert h.bound_names() == {"m0", "m1", "m2"}
    # a member beyond minMember of a placed group is placed on its own
    h.add(member("m3", "g", 3))
    h.drain()
    assert "m3" in h.bound_names()


def test_timeout_releases_every_reservation_with_an_event_naming_the_group() -> None:
    h = Harness(4)
    for i in range(2):
        h.add(member(f"m{i}", "g", 3, timeout="5"))
    h.drain()
    assert h.assumed() == {"m0", "m1"}
    h.clock.now += 4.9
    h.gang.tick()
    assert h.assumed() == {"m0", "m1"}
    h.clock.now += 0.2
    h.gang.tick()
    assert not h.assumed()
    assert not h.binds.calls
    for name in ("m0", "m1"):
        (message,) = h.events.for_pod(name)
        assert "pod group default/g timed out after 5 s" in message
    assert h.queue.depth()["unschedulable"] + h.queue.depth()["backoff"] == 2
    assert h.group("g")["timeouts"] == 1
    assert h.gang.timeouts_total == 1 and h.metrics.gang_timeouts._value.get() == 1
    # within one timeout after it, the group does not hold a partial reservation again
    h.clock.now += 2
    h.drain()
    assert not h.assumed()
    # the missing member arrives: minMember fit at once -> placed
    h.add(member("m2", "g", 3, timeout="5"))
    h.drain()
    assert h.bound_names() == {"m0", "m1", "m2"}


def test_two_groups_needing_sixty_percent_one_placed_other_waits_never_partial() -> None:
    h = Harness(5)
    for i in range(3):  # interleaved arrival: both hold partial reservations for a while
        h.add(member(f"a{i}", "a", 3, timeout="10"))
        h.drain()
        h.add(member(f"b{i}", "b", 3, timeout="10"))
        h.drain()
    assert h.bound_names() == {"a0", "a1", "a2"}
    assert h.group("a")["state"] == "placed"
    assert h.group("b")["state"] == "waiting"
    h.clock.now += 11
    h.gang.tick()
    assert h.group("b")["reserved"] == []
    for _ in range(5):  # retried on events and backoff: still only two nodes free
        h.clock.now += 11
        h.queue.cluster_changed()
        h.drain()
        h.gang.tick()
    assert not any(name.startswith("b") for name in h.bound_names())
    assert {u for u in h.state.assumed_pods()} <= {pod_uid(h.pods[f"a{i}"]) for i in range(3)}


def test_two_complete_groups_the_first_tried_wins_whole() -> None:
    h = Harness(5)
    for i in range(3):
        h.add(member(f"a{i}", "a", 3))
        h.add(member(f"b{i}", "b", 3))
    h.drain()
    assert h.bound_names() == {"a0", "a1", "a2"}
    assert any("pod group default/b" in m for m in h.events.for_pod("b0"))


def _three_of_four_reserved() -> Harness:
    """Four nodes; three members of group g (min member 4) came: reserved, none bound."""
    h = Harness(4)
    for i in range(3):
        h.add(member(f"m{i}", "g", 4))
    h.drain()
    assert h.assumed() == {"m0", "m1", "m2"}
    return h


def test_member_deleted_or_terminating_while_reserved_releases_its_reservation() -> None:
    h = _three_of_four_reserved()
    h.delete("m1")
    assert h.assumed() == {"m0", "m2"}
    assert len(h.group("g")["reserved"]) == 2
    terminating = {**h.pods["m2"]}
    stamp = "2026-01-01T00:00:00Z"
    terminating["metadata"] = {**terminating["metadata"], "deletionTimestamp": stamp}
    h.pods["m2"] = terminating
    h.state.update_pod(terminating)
    h.queue.remove(pod_uid(terminating))
    h.gang.observe("MODIFIED", terminating)
    assert h.assumed() == {"m0"}
    assert not h.binds.calls


def test_members_disagreeing_largest_min_member_and_shortest_timeout_apply() -> None:
    h = Harness(4)
    h.add(member("m0", "g", 2, timeout="30"))
    h.add(member("m1", "g", 3, timeout="5"))
    h.drain()
    got = h.group("g")
    assert (got["min_member"], got["timeout_seconds"]) == (3, 5.0)
    assert not h.binds.calls and len(got["reserved"]) == 2


def test_member_relabelled_or_bound_elsewhere_while_reserved_releases_it() -> None:
    h = _three_of_four_reserved()
    moved = member("m0", "other", 4)
    moved["metadata"]["uid"] = h.pods["m0"]["metadata"]["uid"]
    h.pods["m0"] = moved
    h.state.update_pod(moved)
    h.queue.upsert(pod_uid(moved), moved)
    h.gang.observe("MODIFIED", moved)
    assert h.assumed() == {"m1", "m2"}
    assert h.queue.depth()["active"] == 1  # back in the queue, tried with its new group
    h.bound_by_watch("m1", "n3")  # another scheduler bound it
    assert h.group("g")["reserved"] == [pod_uid(h.pods["m2"])]
    assert h.group("g")["bound"] == 1


def test_after_a_restart_an_incomplete_group_goes_first_and_is_completed() -> None:
    """Killed between the binds of a group: 2 of 4 bound, 2 pending. The new instance
    sees them in its LIST and places the missing two before anything else."""
    h = Harness(4)
    pods = [member(f"m{i}", "g", 4, node=f"n{i}" if i < 2 else None) for i in range(4)]
    other = make_pod("other", scheduler=OURS, requests={"cpu": "1"})
    h.add(other)  # first in the queue
    for pod in pods:
        h.pods[pod["metadata"]["name"]] = pod
        h.state.add_pod(pod)
        if pod["spec"].get("nodeName") is None:
            h.queue.upsert(pod_uid(pod), pod)
    h.gang.observe_list([other, *pods])
    first = h.queue._try_pop()
    assert first in {pod_uid(pods[2]), pod_uid(pods[3])}
    popped = h.queue.get(first)
    assert popped is not None
    h.gang.attempt(first, popped, 0)
    assert h.bound_names() == {"m2", "m3"}
    assert h.group("g")["state"] == "placed"


def test_failed_bind_leaves_binding_and_the_member_is_tried_again() -> None:
    h = Harness(2)
    h.add(member("m0", "g", 2))
    h.add(member("m1", "g", 2))
    h.drain()
    assert h.group("g")["binding"] == 2
    h.bound_by_watch("m0", "n0")
    uid = pod_uid(h.pods["m1"])
    h.state.forget(uid)  # what the binder does on a 409/transport error
    h.queue.requeue(uid, backoff=False)
    h.gang.bind_failed(uid)
    assert h.group("g")["binding"] == 0 and h.group("g")["bound"] == 1
    h.binds.calls.clear()
    h.drain()
    assert h.bound_names() == {"m1"}  # the missing part of the group, at once


# ---------------------------------------------------------------- the PodGroup form


def test_podgroup_form_waits_for_the_store_then_uses_its_spec() -> None:
    h = Harness(3)
    h.store.synced = False
    for i in range(2):
        h.add(member(f"p{i}", "pg", podgroup=True))
    h.drain()
    assert not h.events.calls  # still listing PodGroups: quiet
    h.store.synced = True
    h.queue.cluster_changed()
    h.clock.now += 5
    h.drain()
    assert "PodGroup unknown" in h.events.for_pod("p0")[0]
    assert "not available" in h.events.for_pod("p0")[0]
    h.store.available = True
    h.store.specs[("default", "pg")] = GroupSpec(3, 60.0)
    h.gang.podgroups_changed()
    h.clock.now += 5
    h.drain()
    assert h.assumed() == {"p0", "p1"} and not h.binds.calls
    h.add(member("p2", "pg", podgroup=True))
    h.drain()
    assert h.bound_names() == {"p0", "p1", "p2"}
    assert h.gang.debug()["groups"]["default/pg"]["form"] == "podgroup"


class FakeClient:
    """The few Client calls PodGroupWatch makes."""

    def __init__(self, served: bool, items: list[dict[str, Any]] | None = None) -> None:
        self.served = served
        self.items = items or []

    async def request(self, method: str, path: str, **_: Any) -> Response:
        if not self.served:
            return Response(404, {"kind": "Status"})
        if path.endswith("/podgroups"):
            return Response(200, {"items": []})
        return Response(200, {"resources": [{"name": "podgroups"}, {"name": "podgroups/status"}]})

    async def list_all(self, path: str) -> tuple[list[dict[str, Any]], str]:
        return self.items, "10"

    async def watch(self, path: str, rv: str, **_: Any) -> AsyncIterator[dict[str, Any]]:
        yield {
            "type": "ADDED",
            "object": {
                "metadata": {"namespace": "ns", "name": "late", "resourceVersion": "11"},
                "spec": {"minMember": 2},
            },
        }
        await asyncio.sleep(3600)


def test_podgroup_watch_crd_absent_is_one_log_line_and_no_crash(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = PodGroupStore()
    changes: list[int] = []
    watch = PodGroupWatch(
        FakeClient(False),  # type: ignore[arg-type]
        store,
        lambda: changes.append(1),
        probe_interval=0.01,
    )

    async def go() -> None:
        task = asyncio.create_task(watch.run())
        await asyncio.sleep(0.1)  # several probes
        task.cancel()

    with caplog.at_level(logging.INFO, logger="decice_scheduler.podgroup"):
        asyncio.run(go())
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert len(lines) == 1, lines
    assert "PodGroup form of gang placement is off" in lines[0]
    assert "podgroups.scheduling.x-k8s.io is not installed" in lines[0]
    assert store.synced and not store.available and changes == [1]


def test_podgroup_watch_lists_then_follows_the_watch() -> None:
    store = PodGroupStore()
    first = {"metadata": {"namespace": "ns", "name": "pg"}, "spec": {"minMember": 4}}
    watch = PodGroupWatch(FakeClient(True, [first]), store, lambda: None)  # type: ignore[arg-type]

    async def go() -> None:
        task = asyncio.create_task(watch.run())
        for _ in range(100):
            await asyncio.sleep(0.01)
            if ("ns", "late") in store.specs:
                break
        task.cancel()

    asyncio.run(go())
    assert store.available and store.synced
    assert store.get(("ns", "pg")) == GroupSpec(4, DEFAULT_TIMEOUT)
    assert store.get(("ns", "late")) == GroupSpec(2, DEFAULT_TIMEOUT)


# ---------------------------------------------------------------- queue helpers


def test_queue_claim_and_prioritise() -> None:
    clock = FakeClock(1000.0)
    q = SchedulingQueue(clock=clock)
    for name in ("a", "b", "c"):
        q.upsert(name, make_pod(name, scheduler=OURS))
    assert q.claim("b") and not q.claim("zz")
    assert q.depth()["in_flight"] == 1
    q.unschedulable("b")
    q.prioritise(["c", "b"])
    assert [q._try_pop() for _ in range(3)] == ["c", "b", "a"]


def test_a_member_that_does_not_fit_releases_the_groups_holds_at_once() -> None:
    """#33's liveness defect: a waiting group kept the members it had reserved while its
    later members did not fit, and the room they held starved a group that fitted, until
    the timeout. Now the trial that finds a member not fitting releases every hold of the
    group: the other group is placed after its backoff (at most a second here), not the
    first group's 600 s timeout."""
    h = Harness(2)  # two nodes of one CPU
    h.add(member("a0", "a", 3, timeout="600"))
    h.drain()
    assert h.assumed() == {"a0"} and len(h.group("a")["reserved"]) == 1
    h.add(member("b0", "b", 2, timeout="600"))
    h.add(member("b1", "b", 2, timeout="600"))
    h.drain()
    assert not h.binds.calls  # b needs both nodes; a holds one
    h.add(member("a1", "a", 3, timeout="600", cpu="2"))  # fits no node
    h.drain()
    assert h.group("a")["reserved"] == []
    assert any("its reservations are released" in m for m in h.events.for_pod("a0"))
    h.clock.now += 1.1  # the parked pods' backoff, woken by the release
    h.drain()
    assert h.bound_names() == {"b0", "b1"}  # the freed room went to the group that fits
    assert not {pod_uid(h.pods[n]) for n in ("a0", "a1")} & set(h.state.assumed_pods())
    assert h.queue.depth()["in_flight"] == 2  # b0 and b1, bound but not yet seen bound
