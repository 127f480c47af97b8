import pytest

from decice_scheduler.builders import make_node, make_pod
from decice_scheduler.cache.podinfo import PodInfo
from decice_scheduler.framework import Code
from decice_scheduler.plugins.allocation import LeastAllocated, MostAllocated
from decice_scheduler.plugins.fit import NodeResourcesFit
from decice_scheduler.plugins.gpu import GpuAware
from decice_scheduler.plugins.node_filters import (
    NodeAffinity,
    NodeName,
    NodeSelector,
    NodeUnschedulable,
)
from decice_scheduler.plugins.placement import HybridPlacement, node_class
from decice_scheduler.plugins.taints import TaintToleration, TaintTolerationScore
from tests.support import cluster_state

pytestmark = pytest.mark.unit

GPU = "nvidia.com/gpu"


def infos(*nodes, pods=()):
    snap = cluster_state(nodes, pods).snapshot()
    return {n.name: n for n in snap}


def info(node, pods=()):
    return next(iter(infos(node, pods=pods).values()))


def pod(**kw):
    return PodInfo.from_pod(make_pod("p", **kw))


def affinity_pod(*terms):
    return pod(
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
            }
        }
    )


def expr(key, op, *values):
    out = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


NODE = info(make_node("n1", labels={"zone": "a", "gen": "5", "disk": "ssd"}))


@pytest.mark.parametrize(
    ("term", "ok"),
    [
        ({"matchExpressions": [expr("zone", "In", "a", "b")]}, True),
        ({"matchExpressions": [expr("zone", "In", "b")]}, False),
        ({"matchExpressions": [expr("zone", "NotIn", "b")]}, True),
        ({"matchExpressions": [expr("zone", "NotIn", "a")]}, False),
        ({"matchExpressions": [expr("absent", "NotIn", "a")]}, True),
        ({"matchExpressions": [expr("disk", "Exists")]}, True),
        ({"matchExpressions": [expr("absent", "Exists")]}, False),
        ({"matchExpressions": [expr("absent", "DoesNotExist")]}, True),
        ({"matchExpressions": [expr("disk", "DoesNotExist")]}, False),
        ({"matchExpressions": [expr("gen", "Gt", "4")]}, True),
        ({"matchExpressions": [expr("gen", "Gt", "5")]}, False),
        ({"matchExpressions": [expr("gen", "Lt", "6")]}, True),
        ({"matchExpressions": [expr("gen", "Lt", "5")]}, False),
        ({"matchExpressions": [expr("zone", "Gt", "1")]}, False),  # label not an integer
        ({"matchExpressions": [expr("gen", "Gt", "x")]}, False),  # value not an integer
        ({"matchExpressions": [expr("gen", "Gt", "1", "2")]}, False),  # not exactly one value
        ({"matchExpressions": [expr("zone", "Like", "a")]}, False),  # unknown operator
        ({"matchExpressions": [expr("zone", "In", "a"), expr("disk", "In", "hdd")]}, False),
        ({"matchFields": [expr("metadata.name", "In", "n1")]}, True),
        ({"matchFields": [expr("metadata.name", "NotIn", "n1")]}, False),
        ({"matchFields": [expr("metadata.uid", "In", "n1")]}, False),
        ({}, False),  # an empty term matches nothing
    ],
)
def test_node_affinity_operators(term, ok):
    assert NodeAffinity().filter(affinity_pod(term), NODE).ok is ok


def test_node_affinity_terms_are_ored():
    miss = {"matchExpressions": [expr("zone", "In", "z")]}
    hit = {"matchExpressions": [expr("zone", "In", "a")]}
    assert NodeAffinity().filter(affinity_pod(miss, hit), NODE).ok
    assert not NodeAffinity().filter(affinity_pod(miss), NODE).ok
    assert not NodeAffinity().filter(affinity_pod(), NODE).ok  # no terms: nothing matches
    assert NodeAffinity().filter(pod(), NODE).ok  # no affinity at all


def test_node_selector_and_node_name():
    assert NodeSelector().filter(pod(nodeSelector={"zone": "a"}), NODE).ok
    status = NodeSelector().filter(pod(nodeSelector={"zone": "a", "disk": "hdd"}), NODE)
    assert status.code is Code.UNRESOLVABLE
    assert NodeName().filter(PodInfo.from_pod(make_pod("p", node="n1")), NODE).ok
    assert not NodeName().filter(PodInfo.from_pod(make_pod("p", node="n2")), NODE).ok


def test_cordoned_node_needs_the_cordon_toleration():
    cordoned = info(make_node("c", unschedulable=True))
    assert NodeUnschedulable().filter(pod(), cordoned).reasons == ("node(s) were unschedulable",)
    tolerant = pod(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}])
    assert NodeUnschedulable().filter(tolerant, cordoned).ok
    assert NodeUnschedulable().filter(pod(), NODE).ok


TAINTED = info(
    make_node(
        "t",
        taints=[
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
            {"key": "virtual-node.interlink/no-schedule", "value": "true", "effect": "NoExecute"},
            {"key": "soft", "value": "x", "effect": "PreferNoSchedule"},
        ],
    )
)


@pytest.mark.parametrize(
    ("tolerations", "ok"),
    [
        ([], False),
        ([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}], False),  # NoExecute left
        (
            [
                {"key": "dedicated", "operator": "Equal", "value": "gpu"},
                {"key": "virtual-node.interlink/no-schedule", "operator": "Exists"},
            ],
            True,
        ),
        (
            [
                {"key": "dedicated", "value": "cpu"},
                {"key": "virtual-node.interlink/no-schedule", "operator": "Exists"},
            ],
            False,
        ),
        ([{"operator": "Exists"}], True),  # tolerates everything
        ([{"operator": "Exists", "effect": "NoSchedule"}], False),
    ],
)
def test_taint_filter(tolerations, ok):
    status = TaintToleration().filter(pod(tolerations=tolerations), TAINTED)
    assert status.ok is ok
    if not ok:
        assert status.reasons[0].startswith("node(s) had untolerated taint {")


def test_prefer_no_schedule_only_affects_scoring():
    soft = info(
        make_node("s", taints=[{"key": "soft", "value": "x", "effect": "PreferNoSchedule"}])
    )
    assert TaintToleration().filter(pod(), soft).ok
    plugin = TaintTolerationScore()
    plain = pod()
    scores = {"s": plugin.score(plain, soft), "n1": plugin.score(plain, NODE)}
    plugin.normalize(plain, scores)
    assert scores == {"s": 0, "n1": 100}
    tolerant = pod(tolerations=[{"key": "soft", "operator": "Exists"}])
    scores = {"s": plugin.score(tolerant, soft), "n1": plugin.score(tolerant, NODE)}
    plugin.normalize(tolerant, scores)
    assert scores == {"s": 100, "n1": 100}


def test_resource_fit_reasons_include_extended_resources():
    node = info(
        make_node("g", cpu="2", extended={GPU: "1"}),
        pods=[make_pod("used", node="g", requests={"cpu": "1500m", GPU: "1"})],
    )
    status = NodeResourcesFit().filter(pod(requests={"cpu": "1", GPU: "1"}), node)
    assert status.code is Code.UNSCHEDULABLE
    assert status.reasons == ("Insufficient cpu", "Insufficient nvidia.com/gpu")
    assert NodeResourcesFit().filter(pod(requests={"cpu": "500m"}), node).ok
    ignoring = NodeResourcesFit({"ignoredResources": [GPU]})
    assert ignoring.filter(pod(requests={"cpu": "500m", GPU: "1"}), node).ok


def test_resource_fit_counts_pods():
    node = info(make_node("small", pods=1), pods=[make_pod("a", node="small")])
    assert NodeResourcesFit().filter(pod(), node).reasons == ("Too many pods",)


def test_least_and_most_allocated():
    empty = info(make_node("e", cpu="4", memory="4Gi"))
    busy = info(
        make_node("b", cpu="4", memory="4Gi"),
        pods=[make_pod("x", node="b", requests={"cpu": "2", "memory": "2Gi"})],
    )
    p = pod(requests={"cpu": "1", "memory": "1Gi"})
    least, most = LeastAllocated(), MostAllocated()
    assert least.score(p, empty) == 75 and least.score(p, busy) == 25
    assert most.score(p, empty) == 25 and most.score(p, busy) == 75
    cpu_only = LeastAllocated({"resources": [{"name": "cpu", "weight": 1}]})
    assert cpu_only.score(pod(requests={"cpu": "1"}), empty) == 75


def test_best_effort_pods_still_spread():
    empty = info(make_node("e"))
    used = info(make_node("u"), pods=[make_pod("be", node="u")])
    be = pod()
    assert LeastAllocated().score(be, empty) > LeastAllocated().score(be, used)


def test_allocation_weights_are_validated():
    with pytest.raises(ValueError, match="positive weight"):
        LeastAllocated({"resources": [{"name": "cpu", "weight": 0}]})


def _gpu_scores(plugin, p, nodes):
    scores = {n.name: plugin.score(p, n) for n in nodes}
    plugin.normalize(p, scores)
    return scores


GPU_NODES = infos(
    make_node("cpu-only"),
    make_node("gpu-8", extended={GPU: "8"}),
    make_node("gpu-4-half", extended={GPU: "4"}),
    pods=[make_pod("g", node="gpu-4-half", requests={GPU: "2"})],
).values()


def test_gpu_score_gpu_pods_prefer_most_free_gpus():
    scores = _gpu_scores(GpuAware(), pod(requests={GPU: "1"}), GPU_NODES)
    assert scores == {"cpu-only": 0, "gpu-8": 100, "gpu-4-half": 25}


def test_gpu_score_pack_mode_prefers_fewest_free():
    scores = _gpu_scores(GpuAware({"mode": "pack"}), pod(requests={GPU: "1"}), GPU_NODES)
    assert scores["gpu-4-half"] > scores["gpu-8"]


def test_gpu_score_cpu_pods_keep_gpu_nodes_free():
    scores = _gpu_scores(GpuAware(), pod(requests={"cpu": "1"}), GPU_NODES)
    assert scores == {"cpu-only": 100, "gpu-8": 0, "gpu-4-half": 75}


def test_gpu_score_is_neutral_without_free_gpus():
    nodes = infos(make_node("a"), make_node("b")).values()
    assert _gpu_scores(GpuAware(), pod(), nodes) == {"a": 100, "b": 100}


@pytest.mark.parametrize(
    ("labels", "cls"),
    [
        ({}, "cloud"),
        ({"node-role.kubernetes.io/edge": ""}, "edge"),
        ({"type": "virtual-kubelet"}, "hpc"),
        ({"virtual-node.interlink/type": "slurm"}, "hpc"),
    ],
)
def test_node_class(labels, cls):
    assert node_class(labels) == cls


def test_hybrid_placement_prefers_annotated_class():
    nodes = infos(
        make_node("cloud"),
        make_node("edge", labels={"node-role.kubernetes.io/edge": ""}),
        make_node("vk", labels={"type": "virtual-kubelet"}),
    )
    plugin = HybridPlacement()

    def scores(value):
        annotations = {"decice.io/placement": value} if value else {}
        p = PodInfo.from_pod(
            {**make_pod("p"), "metadata": {"uid": "u", **{"annotations": annotations}}}
        )
        return {name: plugin.score(p, n) for name, n in nodes.items()}

    assert scores("edge") == {"cloud": 0, "edge": 100, "vk": 0}
    assert scores("hpc") == {"cloud": 0, "edge": 0, "vk": 100}
    assert scores("cloud") == {"cloud": 100, "edge": 0, "vk": 0}
    assert scores(None) == {"cloud": 0, "edge": 0, "vk": 0}
    assert scores("moon") == {"cloud": 0, "edge": 0, "vk": 0}
