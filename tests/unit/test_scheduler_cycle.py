import importlib.metadata
from importlib.metadata import EntryPoint

import pytest

from decice_scheduler import framework
from decice_scheduler.builders import make_node, make_pod
from decice_scheduler.cache.podinfo import PodInfo
from decice_scheduler.cache.state import ClusterState
from decice_scheduler.framework import FilterPlugin, Registry, ScorePlugin, Status
from decice_scheduler.plugins import builtin_registry
from decice_scheduler.plugins.allocation import MostAllocated
from decice_scheduler.profile import Profile, load_profile
from decice_scheduler.scheduling import feasible_target, schedule_one
from tests.support import cluster_state

pytestmark = pytest.mark.unit

GPU = "nvidia.com/gpu"


class RejectAll(FilterPlugin):
    name = "RejectAll"

    def filter(self, pod, node):
        return Status.unschedulable("nope")


class Broken(ScorePlugin):
    name = "Broken"

    def score(self, pod, node):
        return 101


def snapshot(*nodes, pods=()):
    state = cluster_state(nodes, pods)
    return state, state.snapshot()


def test_profile_from_yaml_with_dotted_plugin_and_weights():
    profile = load_profile(
        """
percentageOfNodesToScore: 30
filters:
  - NodeResourcesFit
  - name: tests.unit.test_scheduler_cycle:RejectAll
scores:
  - {name: MostAllocated, weight: 3, args: {resources: [{name: cpu, weight: 1}]}}
  - {name: GpuAware, weight: 0}
"""
    )
    assert profile.percentage_of_nodes_to_score == 30
    assert [type(f).__name__ for f in profile.filters] == ["NodeResourcesFit", "RejectAll"]
    assert len(profile.scores) == 1  # weight 0 drops the plugin
    plugin, weight = profile.scores[0]
    assert isinstance(plugin, MostAllocated) and weight == 3


def test_default_profile_has_all_builtin_filters():
    names = [f.name for f in Profile.default().filters]
    assert names == [
        "NodeUnschedulable",
        "NodeName",
        "NodeSelector",
        "NodeAffinity",
        "TaintToleration",
        "NodeResourcesFit",
    ]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"bogus": 1}, "unknown profile keys"),
        ({"percentageOfNodesToScore": 101}, r"0\.\.100"),
        ({"filters": ["NoSuchPlugin"]}, "unknown plugin"),
        ({"filters": ["LeastAllocated"]}, "not a FilterPlugin"),
        ({"scores": ["NodeName"]}, "not a ScorePlugin"),
        ({"scores": [{"name": "LeastAllocated", "weight": -1}]}, "weight"),
        ({"filters": ["os.path:join"]}, "not a FilterPlugin or ScorePlugin"),
        ({"filters": ["no.such.module:X"]}, "cannot import"),
    ],
)
def test_bad_profiles_are_rejected_clearly(config, message):
    with pytest.raises((ValueError, KeyError), match=message):
        Profile.from_config(config)


def test_registry_loads_entry_points(monkeypatch):
    ep = EntryPoint(
        "reject-all", "tests.unit.test_scheduler_cycle:RejectAll", framework.ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(
        importlib.metadata,  # framework imports it when a name is looked up
        "entry_points",
        lambda group: [ep] if group == framework.ENTRY_POINT_GROUP else [],
    )
    assert builtin_registry().resolve("reject-all") is RejectAll


def test_registry_refuses_duplicate_names():
    registry = Registry()
    registry.register(RejectAll)
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Broken, name="RejectAll")


def test_feasible_target_is_adaptive():
    assert feasible_target(50) == 50
    assert feasible_target(500) == 230  # 46 %
    assert feasible_target(5000) == 500  # 10 %
    assert feasible_target(20000) == 1000  # floor of 5 %
    assert feasible_target(150) == 100  # never fewer than 100
    assert feasible_target(5000, 100) == 5000
    assert feasible_target(5000, 20) == 1000


def test_picks_highest_score_and_breaks_ties_by_name():
    _, snap = snapshot(
        make_node("b"),
        make_node("a"),
        make_node("c", cpu="64"),
    )
    p = PodInfo.from_pod(make_pod("p", requests={"cpu": "1"}))
    assert schedule_one(p, snap, Profile.default()).node == "c"  # most room left
    _, same = snapshot(make_node("b"), make_node("a"))
    assert schedule_one(p, same, Profile.default()).node == "a"


def test_unschedulable_reasons_are_grouped_with_node_counts():
    _, snap = snapshot(
        make_node("small-1", cpu="1"),
        make_node("small-2", cpu="1"),
        make_node("cordoned", cpu="64", unschedulable=True),
        make_node("gpu", cpu="1", extended={GPU: "1"}),
    )
    p = PodInfo.from_pod(make_pod("p", requests={"cpu": "2", GPU: "1"}))
    decision = schedule_one(p, snap, Profile.default())
    assert decision.node is None
    assert decision.reasons == {
        "Insufficient cpu": 3,
        "Insufficient nvidia.com/gpu": 2,
        "node(s) were unschedulable": 1,
    }
    assert decision.evaluated == 4
    assert decision.message().startswith("0/4 nodes are available: 3 Insufficient cpu")


def test_assumed_pods_steer_the_next_cycle():
    state, snap = snapshot(make_node("a", cpu="2"), make_node("b", cpu="2"))
    profile = Profile.default()
    first = make_pod("p1", requests={"cpu": "1500m"})
    d1 = schedule_one(PodInfo.from_pod(first), snap, profile)
    state.assume(first, d1.node)
    second = make_pod("p2", requests={"cpu": "1500m"})
    d2 = schedule_one(PodInfo.from_pod(second), state.snapshot(), profile)
    assert {d1.node, d2.node} == {"a", "b"}


def test_placement_annotation_wins_over_spreading():
    _, snap = snapshot(
        make_node("cloud", cpu="64"),
        make_node("edge", cpu="2", labels={"node-role.kubernetes.io/edge": ""}),
    )
    raw = make_pod("p", requests={"cpu": "1"})
    raw["metadata"]["annotations"] = {"decice.io/placement": "edge"}
    assert schedule_one(PodInfo.from_pod(raw), snap, Profile.default()).node == "edge"


def test_gpu_nodes_are_kept_for_gpu_pods():
    _, snap = snapshot(make_node("cpu"), make_node("gpu", extended={GPU: "4"}))
    profile = Profile.default()
    assert schedule_one(PodInfo.from_pod(make_pod("c")), snap, profile).node == "cpu"
    gpu_pod = PodInfo.from_pod(make_pod("g", requests={GPU: "1"}))
    assert schedule_one(gpu_pod, snap, profile).node == "gpu"


def test_adaptive_search_stops_early_and_rotates():
    nodes = [make_node(f"n{i:04d}") for i in range(1000)]
    _, snap = snapshot(*nodes)
    p = PodInfo.from_pod(make_pod("p"))
    d = schedule_one(p, snap, Profile.default())
    assert d.feasible == feasible_target(1000) == d.evaluated
    d2 = schedule_one(p, snap, Profile.default(), d.next_start_index)
    assert d2.next_start_index == (2 * d.evaluated) % 1000


def test_out_of_range_score_is_an_error():
    registry = builtin_registry()
    registry.register(Broken)
    profile = Profile.from_config({"scores": ["Broken"]}, registry)
    _, snap = snapshot(make_node("a"), make_node("b"))
    with pytest.raises(ValueError, match=r"0\.\.100"):
        schedule_one(PodInfo.from_pod(make_pod("p")), snap, profile)


def test_empty_cluster():
    d = schedule_one(PodInfo.from_pod(make_pod("p")), ClusterState().snapshot(), Profile.default())
    assert d.node is None and d.evaluated == 0
