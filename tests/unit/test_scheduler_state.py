import copy

import pytest

from decice_scheduler.builders import make_node, make_pod
from decice_scheduler.cache.resources import Resources
from decice_scheduler.cache.state import ClusterState, StateCorrupt

pytestmark = pytest.mark.unit

GPU = "nvidia.com/gpu"


def bound(pod, node, phase="Running"):
    out = copy.deepcopy(pod)
    out["spec"]["nodeName"] = node
    out["status"]["phase"] = phase
    return out


def with_phase(pod, phase):
    out = copy.deepcopy(pod)
    out["status"]["phase"] = phase
    return out


@pytest.fixture
def state():
    s = ClusterState()
    s.add_node(make_node("n1"))
    s.add_node(make_node("n2"))
    return s


def test_bound_pods_of_every_scheduler_count(state):
    state.add_pod(make_pod("ours", node="n1", requests={"cpu": "1"}, scheduler="decice-scheduler"))
    state.add_pod(make_pod("theirs", node="n1", requests={"cpu": "500m"}))
    state.add_pod(make_pod("volcano", node="n1", requests={"cpu": "250m"}, scheduler="volcano"))
    assert state.requested("n1") == Resources(1750, 0, 3)
    assert state.requested("n2") == Resources()


def test_unbound_pods_count_nothing(state):
    state.add_pod(make_pod("pending", requests={"cpu": "1"}))
    assert state.requested("n1").is_zero()
    assert state.pod_count() == 1


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminal_pods_free_their_resources(state, phase):
    pod = make_pod("job", node="n1", requests={"cpu": "1", GPU: "1"}, phase="Running")
    state.add_pod(pod)
    assert state.requested("n1") == Resources(1000, 0, 1, {GPU: 1})
    state.update_pod(with_phase(pod, phase))
    assert state.requested("n1").is_zero()
    assert state.pod_node(pod["metadata"]["uid"]) is None
    # the terminal pod is still known until it is deleted, and deleting frees nothing twice
    assert state.remove_pod(pod) is True
    assert state.requested("n1").is_zero()


def test_pod_first_seen_terminal_counts_nothing(state):
    state.add_pod(make_pod("done", node="n1", requests={"cpu": "1"}, phase="Succeeded"))
    assert state.requested("n1").is_zero()


def test_terminating_pods_still_count_until_deleted(state):
    pod = make_pod("p", node="n1", requests={"cpu": "1"}, phase="Running")
    state.add_pod(pod)
    terminating = copy.deepcopy(pod)
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    state.update_pod(terminating)
    assert state.requested("n1").cpu == 1000
    state.remove_pod(terminating)
    assert state.requested("n1").is_zero()


def test_pods_are_keyed_by_uid_not_name(state):
    old = make_pod("web-0", uid="a", node="n1", requests={"cpu": "1"})
    new = make_pod("web-0", uid="b", node="n2", requests={"cpu": "1"})
    state.add_pod(old)
    state.add_pod(new)  # same name, new incarnation, before the old one's DELETE
    state.remove_pod("a")
    assert state.requested("n1").is_zero()
    assert state.requested("n2").cpu == 1000


def test_status_only_update_does_not_bump_generation(state):
    pod = make_pod("p", node="n1", requests={"cpu": "1"}, phase="Pending")
    state.add_pod(pod)
    gen = state.node_generation("n1")
    state.update_pod(with_phase(pod, "Running"))
    assert state.node_generation("n1") == gen
    state.update_pod(with_phase(pod, "Succeeded"))
    assert state.node_generation("n1") > gen


def test_assume_counts_at_once_then_watch_confirms(state):
    pod = make_pod("p", requests={"cpu": "1"}, scheduler="decice-scheduler")
    uid = pod["metadata"]["uid"]
    state.add_pod(pod)
    state.assume(pod, "n1")
    assert state.requested("n1").cpu == 1000
    assert state.is_assumed(uid)
    # a status update without nodeName (bind still in flight) keeps the assumption
    state.update_pod(with_phase(pod, "Pending"))
    assert state.is_assumed(uid) and state.requested("n1").cpu == 1000
    state.update_pod(bound(pod, "n1"))
    assert not state.is_assumed(uid)
    assert state.requested("n1").cpu == 1000  # counted once, not twice
    assert state.forget(uid) is False  # confirmed: nothing to forget


def test_assume_then_forget_releases(state):
    pod = make_pod("p", requests={"cpu": "1"})
    state.add_pod(pod)
    state.assume(pod, "n1")
    assert state.forget(pod["metadata"]["uid"]) is True
    assert state.requested("n1").is_zero()
    assert state.pod_count() == 1  # still a known pending pod
    state.assume(pod, "n2")  # can be scheduled again
    assert state.requested("n2").cpu == 1000


def test_confirmation_on_another_node_moves_the_count(state):
    pod = make_pod("p", requests={"cpu": "1"})
    state.assume(pod, "n1")
    state.update_pod(bound(pod, "n2"))
    assert state.requested("n1").is_zero()
    assert state.requested("n2").cpu == 1000
    assert not state.is_assumed(pod["metadata"]["uid"])


def test_assume_twice_or_on_bound_pod_is_refused(state):
    pod = make_pod("p", requests={"cpu": "1"})
    state.assume(pod, "n1")
    with pytest.raises(ValueError, match="already assumed"):
        state.assume(pod, "n2")
    other = make_pod("q", node="n1")
    state.add_pod(other)
    with pytest.raises(ValueError, match="already bound"):
        state.assume(other, "n2")
    assert state.requested("n2").is_zero()


def test_deleting_an_assumed_pod_releases_it(state):
    pod = make_pod("p", requests={"cpu": "1"})
    state.assume(pod, "n1")
    assert state.remove_pod(pod) is True
    assert state.requested("n1").is_zero()
    assert state.assumed_pods() == {}


def test_bound_pod_moving_is_corruption_and_changes_nothing(state):
    pod = make_pod("p", node="n1", requests={"cpu": "1"})
    state.add_pod(pod)
    with pytest.raises(StateCorrupt, match="n1"):
        state.update_pod(bound(pod, "n2"))
    unbound = copy.deepcopy(pod)
    del unbound["spec"]["nodeName"]
    with pytest.raises(StateCorrupt):
        state.update_pod(unbound)
    assert state.requested("n1").cpu == 1000
    assert state.requested("n2").is_zero()


def test_pod_before_its_node_is_counted_and_attached_later():
    state = ClusterState()
    state.add_pod(make_pod("early", node="late-node", requests={"cpu": "1"}))
    assert state.requested("late-node").cpu == 1000
    assert "late-node" not in state.snapshot()
    state.add_node(make_node("late-node"))
    info = state.snapshot().get("late-node")
    assert info is not None
    assert info.requested.cpu == 1000


def test_removed_node_keeps_counting_its_pods_until_they_go():
    state = ClusterState()
    state.add_node(make_node("n1"))
    pod = make_pod("p", node="n1", requests={"cpu": "1"})
    state.add_pod(pod)
    state.remove_node("n1")
    assert "n1" not in state.snapshot()
    assert state.requested("n1").cpu == 1000
    state.add_node(make_node("n1"))  # came back before its pods were deleted
    assert state.snapshot().get("n1").requested.cpu == 1000
    state.remove_node("n1")
    state.remove_pod(pod)
    assert state.node_count() == 0
    assert state.usage() == {}


def test_node_update_changes_allocatable_and_labels(state):
    state.update_node(make_node("n1", cpu="16", labels={"zone": "a"}))
    info = state.snapshot().get("n1")
    assert info.allocatable.cpu == 16000
    assert info.labels["zone"] == "a"


def test_heartbeat_node_update_does_not_bump_generation(state):
    gen = state.node_generation("n1")
    node = make_node("n1")
    node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    state.update_node(node)
    assert state.node_generation("n1") == gen


def test_relist_reports_deletions_in_the_gap_and_keeps_inflight_assumptions(state):
    gone = make_pod("gone", node="n1", requests={"cpu": "1"})
    stays = make_pod("stays", node="n2", requests={"cpu": "1"})
    assumed_gone = make_pod("assumed-gone", requests={"cpu": "1"})
    assumed_pending = make_pod("assumed-pending", requests={"cpu": "2"})
    assumed_bound = make_pod("assumed-bound", requests={"cpu": "3"})
    for pod in (gone, stays, assumed_gone, assumed_pending, assumed_bound):
        state.add_pod(pod)
    state.assume(assumed_gone, "n1")
    state.assume(assumed_pending, "n1")
    state.assume(assumed_bound, "n1")
    new_pod = make_pod("new", node="n2", requests={"cpu": "500m"})

    result = state.replace_all(
        [make_node("n2"), make_node("n3")],
        [stays, assumed_pending, bound(assumed_bound, "n2"), new_pod],
    )

    deleted = {p["metadata"]["name"] for p in result.deleted_pods}
    assert deleted == {"gone", "assumed-gone"}
    assert result.deleted_nodes == ["n1"]
    assert state.assumed_pods() == {assumed_pending["metadata"]["uid"]: "n1"}
    assert state.requested("n1").cpu == 2000  # the in-flight assumption, node now unknown
    assert state.requested("n2").cpu == 1000 + 3000 + 500
    snap = state.snapshot()
    assert sorted(n.name for n in snap) == ["n2", "n3"]


def test_relist_clears_corruption(state):
    pod = make_pod("p", node="n1", requests={"cpu": "1"})
    state.add_pod(pod)
    with pytest.raises(StateCorrupt):
        state.update_pod(bound(pod, "n2"))
    state.replace_all([make_node("n1"), make_node("n2")], [bound(pod, "n2")])
    assert state.requested("n2").cpu == 1000
    assert state.requested("n1").is_zero()


def test_snapshot_copies_only_changed_nodes(state):
    state.add_node(make_node("n3"))
    first = state.snapshot()
    assert state.snapshot() is first  # nothing changed: the same snapshot
    state.add_pod(make_pod("p", node="n2", requests={"cpu": "1"}))
    second = state.snapshot()
    assert second is not first
    assert second.get("n1") is first.get("n1")
    assert second.get("n3") is first.get("n3")
    assert second.get("n2") is not first.get("n2")
    assert second.get("n2").generation > first.get("n2").generation
    # the older snapshot is unchanged
    assert first.get("n2").requested.is_zero()
    assert second.get("n2").requested.cpu == 1000


def test_snapshot_drops_removed_nodes(state):
    state.snapshot()
    state.remove_node("n1")
    assert [n.name for n in state.snapshot()] == ["n2"]


def test_incremental_usage_matches_rebuild_after_churn():
    state = ClusterState()
    nodes = [make_node(f"n{i}", extended={GPU: "2"}) for i in range(5)]
    for node in nodes:
        state.add_node(node)
    pods = []
    for i in range(60):
        pod = make_pod(f"p{i}", node=f"n{i % 5}", requests={"cpu": f"{i + 1}m", GPU: "1"})
        pods.append(pod)
        state.add_pod(pod)
    for i, pod in enumerate(pods):
        if i % 3 == 0:
            state.update_pod(with_phase(pod, "Succeeded"))
        elif i % 3 == 1:
            state.remove_pod(pod)
    assumed = make_pod("a", requests={"cpu": "7m"})
    state.assume(assumed, "n0")
    assert state.usage() == state.rebuild_totals()
    assert state.usage(include_assumed=False) == state.rebuild_totals(include_assumed=False)
    assert state.usage()["n0"].requested.cpu > state.usage(False)["n0"].requested.cpu


def test_diff_reports_drift_per_node(state):
    a = make_pod("a", node="n1", requests={"cpu": "1"})
    b = make_pod("b", node="n2", requests={"cpu": "1"})
    state.add_pod(a)
    state.add_pod(b)
    fresh = ClusterState()
    fresh.replace_all([make_node("n1"), make_node("n2")], [a])
    drift = state.diff(fresh)
    assert [d.node for d in drift] == ["n2"]
    assert drift[0].only_ours == frozenset({b["metadata"]["uid"]})
    assert drift[0].theirs is None
    assert "n2" in drift[0].describe()
    fresh.add_pod(b)
    assert state.diff(fresh) == []


def test_diff_ignores_assumptions_by_default(state):
    pod = make_pod("p", requests={"cpu": "1"})
    state.assume(pod, "n1")
    fresh = ClusterState()
    fresh.replace_all([make_node("n1"), make_node("n2")], [pod])
    assert state.diff(fresh) == []
    assert [d.node for d in state.diff(fresh, include_assumed=True)] == ["n1"]
