"""The fast scheduling path decides exactly like the plain per-node plugin calls.

``reference_schedule_one`` is the scheduling cycle (``run_cycle``) with its two parts as
they were before the batch hooks (``FilterPlugin.prepare``, ``ScorePlugin.score_nodes``)
and the snapshot/index work: every filter called per node, every score per node,
``normalize`` on a dict. Random clusters (taints, labels, cordons, GPUs, load) and
random pods (selectors, affinity, tolerations, placement annotations, GPU requests, node
names) must give identical ``Decision`` objects, including reasons, counts and the
rotation index.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from decice_scheduler.builders import make_node, make_pod
from decice_scheduler.cache.nodeinfo import NodeInfo
from decice_scheduler.cache.podinfo import PodInfo
from decice_scheduler.cache.snapshot import Snapshot
from decice_scheduler.cache.state import ClusterState
from decice_scheduler.framework import MAX_SCORE, Code
from decice_scheduler.plugins import builtin_registry
from decice_scheduler.plugins.allocation import LeastAllocated
from decice_scheduler.profile import Profile
from decice_scheduler.scheduling import Decision, run_cycle, schedule_one
from decice_scheduler.shapes import ShapeCache

pytestmark = pytest.mark.unit

GPU = "nvidia.com/gpu"
ZONES = ("z0", "z1", "z2")


def reference_scan(
    pod: PodInfo, snapshot: Snapshot, profile: Profile, start: int, target: int
) -> tuple[list[NodeInfo], int, dict[str, int]]:
    nodes = snapshot.nodes
    total = len(nodes)
    feasible: list[NodeInfo] = []
    reasons: dict[str, int] = {}
    evaluated = 0
    for offset in range(total):
        node = nodes[(start + offset) % total]
        evaluated += 1
        for filter_plugin in profile.filters:
            status = filter_plugin.filter(pod, node)
            if status.code is not Code.SUCCESS:
                for reason in status.reasons:
                    reasons[reason] = reasons.get(reason, 0) + 1
                break
        else:
            feasible.append(node)
            if len(feasible) >= target:
                break
    return feasible, evaluated, reasons


def reference_pick(pod: PodInfo, profile: Profile, feasible: list[NodeInfo]) -> tuple[str, int]:
    totals = dict.fromkeys((n.name for n in feasible), 0)
    for plugin, weight in profile.scores:
        scores = {n.name: plugin.score(pod, n) for n in feasible}
        plugin.normalize(pod, scores)
        for name, value in scores.items():
            assert 0 <= value <= MAX_SCORE
            totals[name] += weight * value
    return min(totals.items(), key=lambda item: (-item[1], item[0]))


def reference_schedule_one(
    pod: PodInfo, snapshot: Snapshot, profile: Profile, start_index: int = 0
) -> Decision:
    return run_cycle(pod, snapshot, profile, start_index, reference_scan, reference_pick)


def random_node(rng: random.Random, i: int) -> dict[str, Any]:
    labels = {"topology.kubernetes.io/zone": rng.choice(ZONES), "rank": str(rng.randint(0, 9))}
    if rng.random() < 0.15:
        labels["node-role.kubernetes.io/edge"] = ""
    if rng.random() < 0.1:
        labels["type"] = "virtual-kubelet"
    taints = []
    if rng.random() < 0.15:
        taints.append({"key": "dedicated", "value": rng.choice(["a", "b"]), "effect": "NoSchedule"})
    if rng.random() < 0.2:
        taints.append({"key": "soft", "value": "x", "effect": "PreferNoSchedule"})
    return make_node(
        f"n{i:04d}",
        cpu=str(rng.choice([1, 2, 4, 8])),
        memory=rng.choice(["2Gi", "8Gi", "16Gi"]),
        pods=rng.choice([3, 10, 110]),
        extended={GPU: str(rng.choice([1, 2, 8]))} if rng.random() < 0.2 else None,
        labels=labels,
        taints=taints,
        unschedulable=rng.random() < 0.05,
    )


def random_pod(rng: random.Random, i: int, node_names: list[str]) -> dict[str, Any]:
    requests = {
        "cpu": rng.choice(["0", "100m", "500m", "1", "3"]),
        "memory": rng.choice(["0", "64Mi", "1Gi", "6Gi"]),
    }
    requests = {k: v for k, v in requests.items() if v != "0"}
    if rng.random() < 0.2:
        requests[GPU] = str(rng.choice([1, 2, 4]))
    pod = make_pod(f"p{i}", uid=f"u{i}", requests=requests)
    spec = pod["spec"]
    if rng.random() < 0.15:
        spec["nodeSelector"] = {"topology.kubernetes.io/zone": rng.choice(ZONES)}
    if rng.random() < 0.15:
        op = rng.choice(["In", "NotIn", "Gt", "Lt", "Exists", "DoesNotExist"])
        values = [str(rng.randint(0, 9))] if op in ("Gt", "Lt") else ["1", "2", "3"]
        req: dict[str, Any] = {"key": "rank", "operator": op}
        if op not in ("Exists", "DoesNotExist"):
            req["values"] = values
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [req]}]
                }
            }
        }
    tolerations = []
    if rng.random() < 0.3:
        tolerations.append({"key": "dedicated", "operator": "Equal", "value": "a"})
    if rng.random() < 0.1:
        tolerations.append({"key": "soft", "operator": "Exists"})
    if rng.random() < 0.05:
        tolerations.append(
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": ""}
        )
    if tolerations:
        spec["tolerations"] = tolerations
    if rng.random() < 0.03:
        spec["nodeName"] = rng.choice(node_names)
    if rng.random() < 0.3:
        pod["metadata"]["annotations"] = {
            "decice.io/placement": rng.choice(["edge", "hpc", "cloud", "moon"])
        }
    return pod


PROFILES: dict[str, dict[str, Any]] = {
    "default": {},
    "all-nodes": {"percentageOfNodesToScore": 100},
    "few": {"percentageOfNodesToScore": 7},
    "packing": {
        "scores": [
            {"name": "MostAllocated", "weight": 2},
            {"name": "GpuAware", "weight": 3, "args": {"mode": "pack"}},
            {
                "name": "LeastAllocated",
                "weight": 1,
                "args": {
                    "resources": [
                        {"name": "cpu", "weight": 3},
                        {"name": "memory", "weight": 0},
                        {"name": GPU, "weight": 2},
                        {"name": "pods", "weight": 1},
                    ]
                },
            },
        ]
    },
    "ignored-gpu": {
        "filters": [
            "NodeUnschedulable",
            "TaintToleration",
            {"name": "NodeResourcesFit", "args": {"ignoredResources": [GPU]}},
        ]
    },
    "fit-only": {"filters": ["NodeResourcesFit"], "scores": ["TaintTolerationScore"]},
    "no-filters": {"filters": [], "scores": ["HybridPlacement"]},
    "no-scores": {"scores": []},
}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("profile_name", sorted(PROFILES))
def test_fast_path_decides_like_the_reference(seed: int, profile_name: str) -> None:
    rng = random.Random(seed * 7919 + len(profile_name))
    profile = Profile.from_config(PROFILES[profile_name])
    count = rng.choice([3, 40, 130, 260])
    nodes = [random_node(rng, i) for i in range(count)]
    names = [n["metadata"]["name"] for n in nodes]
    state = ClusterState()
    for node in nodes:
        state.add_node(node)
    start = fast_start = 0
    for i in range(120):
        raw = random_pod(rng, i, names)
        info = PodInfo.from_pod(raw)
        snap = state.snapshot()
        expected = reference_schedule_one(info, snap, profile, start)
        got = schedule_one(info, snap, profile, fast_start)
        assert got == expected, (profile_name, seed, i)
        start = expected.next_start_index
        fast_start = got.next_start_index
        if got.node is not None:
            state.assume(raw, got.node)
        if rng.random() < 0.05:  # the cluster changes under the scheduler
            changed = random_node(rng, rng.randrange(count))
            state.update_node(changed)


class HalfLeast(LeastAllocated):
    """A research subclass changing the per-resource formula only."""

    name = "HalfLeast"

    def _per_resource(self, requested: int, allocatable: int) -> int:
        return super()._per_resource(requested, allocatable) // 2


def test_subclass_overrides_are_honoured_by_the_batch_hooks() -> None:
    state = ClusterState()
    state.add_node(make_node("a", cpu="4"))
    nodes = state.snapshot().nodes
    pod = PodInfo.from_pod(make_pod("p", requests={"cpu": "1"}))
    plugin = HalfLeast()
    assert plugin.score_nodes(pod, nodes) == [plugin.score(pod, nodes[0])]
    assert plugin.score_nodes(pod, nodes) != LeastAllocated().score_nodes(pod, nodes)


@pytest.mark.parametrize("seed", range(4))
def test_incremental_snapshots_match_the_state(seed: int) -> None:
    """Derived snapshots (copied tuple, shared index, cached resource positions) stay
    equal to what the state holds, keep the node order, and append new nodes last."""
    rng = random.Random(seed)
    state = ClusterState()
    live: list[str] = []
    assumed: list[str] = []
    for i in range(40):
        node = random_node(rng, i)
        state.add_node(node)
        live.append(node["metadata"]["name"])
    previous = state.snapshot()
    for step in range(400):
        op = rng.random()
        if op < 0.45 and live:
            uid = f"s{seed}-{step}"
            pod = make_pod(uid, uid=uid, requests={"cpu": "100m", GPU: str(rng.randint(0, 1))})
            state.add_pod(pod)
            state.assume(pod, rng.choice(live))
            assumed.append(uid)
        elif op < 0.6 and assumed:
            state.forget(assumed.pop(rng.randrange(len(assumed))))
        elif op < 0.8 and live:
            state.update_node(random_node(rng, int(rng.choice(live)[1:])))
        elif op < 0.9:
            i = rng.randrange(60)
            state.add_node(random_node(rng, i))
            if f"n{i:04d}" not in live:
                live.append(f"n{i:04d}")
        elif live:
            name = live.pop(rng.randrange(len(live)))
            state.remove_node(name)
        if rng.random() < 0.3:
            previous.positions_with(GPU)  # populate the cache that derive() carries on
        snap = state.snapshot()
        names = [n.name for n in snap.nodes]
        assert sorted(names) == sorted(live)
        assert len(set(names)) == len(names)
        for pos, info in enumerate(snap.nodes):
            assert snap.get(info.name) is info and snap.position(info.name) == pos
            assert info.generation == state.node_generation(info.name)
            assert info.requested == state.requested(info.name)
            assert info.free_cpu == info.allocatable.cpu - info.requested.cpu
        assert dict(snap.by_name) == {n.name: n for n in snap.nodes}
        assert snap.positions_with(GPU) == [
            i
            for i, n in enumerate(snap.nodes)
            if GPU in n.allocatable.extended or GPU in n.requested.extended
        ]
        kept = [n for n in [m.name for m in previous.nodes] if n in snap]
        assert names[: len(kept)] == kept  # old nodes keep their order, new ones go last
        previous = snap


def shaped_pod(
    rng: random.Random, i: int, shapes: list[dict[str, Any]], names: list[str]
) -> dict[str, Any]:
    """A pod of one of a few shapes (requests, tolerations, selector, annotations), so
    that the shape cache sees each shape many times; now and then a random one."""
    if rng.random() < 0.1:
        return random_pod(rng, 10_000 + i, names)
    template = rng.choice(shapes)
    pod = make_pod(f"s{i}", uid=f"su{i}")
    pod["spec"] = {**template["spec"]}
    pod["metadata"] = {**pod["metadata"], "annotations": template["metadata"].get("annotations")}
    if pod["metadata"]["annotations"] is None:
        del pod["metadata"]["annotations"]
    return pod


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("profile_name", sorted(PROFILES))
def test_shape_cache_decides_like_the_reference(seed: int, profile_name: str) -> None:
    """The per-shape tables give the reference's decisions while the cluster changes under
    them: pods assumed, nodes updated (taints, cordons, labels), added and removed."""
    rng = random.Random(seed * 104729 + len(profile_name))
    profile = Profile.from_config(PROFILES[profile_name])
    cache = ShapeCache(profile)
    count = rng.choice([3, 40, 130, 260])
    nodes = [random_node(rng, i) for i in range(count)]
    names = [n["metadata"]["name"] for n in nodes]
    shapes = [random_pod(rng, 20_000 + k, names) for k in range(4)]
    state = ClusterState()
    for node in nodes:
        state.add_node(node)
    start = cached_start = 0
    for i in range(200):
        raw = shaped_pod(rng, i, shapes, names)
        info = PodInfo.from_pod(raw)
        snap = state.snapshot()
        expected = reference_schedule_one(info, snap, profile, start)
        got = cache.schedule(info, snap, cached_start)
        assert got == expected, (profile_name, seed, i)
        start = expected.next_start_index
        cached_start = got.next_start_index
        if got.node is not None:
            state.assume(raw, got.node)
        roll = rng.random()
        if roll < 0.05:  # a node changes
            state.update_node(random_node(rng, rng.randrange(count)))
        elif roll < 0.07:  # a node comes
            state.add_node(random_node(rng, count + i))
        elif roll < 0.09 and len(state.snapshot()) > 1:  # a node goes
            state.remove_node(rng.choice([n.name for n in state.snapshot().nodes]))
        elif roll < 0.15 and got.node is not None:  # a bind failed
            state.forget(info.uid)
    assert cache.enabled  # built-in plugins only
    assert cache.hits > 0


def test_shape_cache_is_off_for_plugins_it_does_not_know() -> None:
    """A score subclass (it may override what the cache assumes) turns the cache off;
    decisions then come from schedule_one."""
    registry = builtin_registry()
    registry.register(HalfLeast)
    profile = Profile.from_config({"scores": ["HalfLeast"]}, registry)
    cache = ShapeCache(profile)
    assert not cache.enabled
    state = ClusterState()
    state.add_node(make_node("a", cpu="4"))
    state.add_node(make_node("b", cpu="8"))
    pod = PodInfo.from_pod(make_pod("p", requests={"cpu": "1"}))
    for _ in range(3):
        assert cache.schedule(pod, state.snapshot()) == schedule_one(pod, state.snapshot(), profile)
    assert cache.hits == 0
