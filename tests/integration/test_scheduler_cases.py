"""decice-scheduler edge cases against a real control plane (etcd + kube-apiserver 1.20 +
controller-manager + the stock kube-scheduler) and the sim node agent, no API mocks.

Covered already by test_scheduler_sync.py and not repeated here: finished/failed pods
freeing resources, deletion of pending/running/terminating pods, pods deleted during
their bind (same name, new uid, while the old bind waits), cordon/resize
(allocatable change)/removal of a node, FailedScheduling message, metrics, audit after
churn, clean restart, leader election, relist after 410.

Each test has its own node group (``decice.io/sim-group``) and removes its pods.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from decice.sim.binaries.resolve import BinarySet
from decice.sim.controlplane.loopback import ControlPlane
from decice_scheduler.cache.resources import node_allocatable, pod_request
from tests.integration import schedsupport as ss
from tests.integration.simsupport import (
    SchedEnv,
    SchedulerProc,
    assert_no_drift,
    running_env,
    shared_env_fixture,
)
from tests.support import wait_for

pytestmark = pytest.mark.scheduler

NS = "cases"
NS2 = "cases-two"
GROUPS = [
    ss.group("twin", 1),
    ss.group("gone", 1, cpu="4"),
    ss.group("tnt", 2),
    ss.group("eff", 1),
    ss.group("gpu", 2, cpu="8", **{"nvidia.com/gpu": "2"}),
    ss.group("late", 1, cpu="16"),
    ss.group("knine", 4, cpu="4"),
    ss.group("hostile", 1, cpu="4"),
]

env = shared_env_fixture("cases", GROUPS, (NS, NS2))


def stays_unbound(core: client.CoreV1Api, ns: str, name: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ss.bound_node(core, ns, name):
            return False
        time.sleep(0.2)
    return True


def usage(env: SchedEnv, node: str) -> dict[str, Any]:
    """What decice-scheduler counts on ``node`` (bound pods): requested and pod uids."""
    got = env.sched.state()["usage"].get(node)
    return dict(got) if got else {"requested": {}, "pods": []}


def pods_json(core: client.CoreV1Api) -> list[dict[str, Any]]:
    return list(ss.raw_json(core.list_pod_for_all_namespaces(_preload_content=False))["items"])


def nodes_json(core: client.CoreV1Api) -> list[dict[str, Any]]:
    return list(ss.raw_json(core.list_node(_preload_content=False))["items"])


def overcommitted(core: client.CoreV1Api, resources: tuple[str, ...]) -> list[str]:
    """Nodes where bound non-terminal pods request more than allocatable (effective
    requests, every scheduler)."""
    alloc = {n["metadata"]["name"]: node_allocatable(n) for n in nodes_json(core)}
    used: dict[str, Any] = {}
    for p in pods_json(core):
        node = p["spec"].get("nodeName")
        if not node or p.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        req = pod_request(p)
        used[node] = req if node not in used else used[node].add(req)
    return [
        f"{node}: {r} requested {used[node].get(r)} > {alloc[node].get(r)}"
        for node in used
        if node in alloc
        for r in resources
        if used[node].get(r) > alloc[node].get(r)
    ]


def rejected(core: client.CoreV1Api) -> list[str]:
    return [
        f"{p['metadata']['name']}: {p['status'].get('message')}"
        for p in pods_json(core)
        if str((p.get("status") or {}).get("reason", "")).startswith("OutOf")
    ]


# ---------------------------------------------------------------- identity


def test_same_name_in_two_namespaces_and_name_reused_after_deletion(
    env: SchedEnv, core: client.CoreV1Api
) -> None:
    """Pods are keyed by uid: ``twin`` in two namespaces counts twice; deleting one and
    creating ``twin`` again (new uid) frees the old one's share and counts the new once."""
    a = ss.create_pod(core, NS, ss.pod("twin", "twin", cpu="800m"))
    b = ss.create_pod(core, NS2, ss.pod("twin", "twin", cpu="800m"))
    assert ss.wait_bound(core, NS, "twin") == "twin-0"
    assert ss.wait_bound(core, NS2, "twin") == "twin-0"
    wait_for("both counted", lambda: len(usage(env, "twin-0")["pods"]) == 2)
    got = usage(env, "twin-0")
    assert set(got["pods"]) == {a["metadata"]["uid"], b["metadata"]["uid"]}
    assert got["requested"]["cpu"] == 1600
    # 400m left: a 500m pod must wait (both twins are counted, not one by name)
    ss.create_pod(core, NS, ss.pod("third", "twin", cpu="500m"))
    assert stays_unbound(core, NS, "third", 1.5)

    ss.wait_running(core, NS, "twin")
    core.delete_namespaced_pod("twin", NS)
    ss.wait_gone(core, NS, "twin")
    # the old twin's 800m are free: `third` (500m) lands
    assert ss.wait_bound(core, NS, "third") == "twin-0"
    # same name, new uid, 800m: 1600m counted (b + third) leaves 400m -> it waits
    c = ss.create_pod(core, NS, ss.pod("twin", "twin", cpu="800m"))
    assert c["metadata"]["uid"] != a["metadata"]["uid"]
    assert stays_unbound(core, NS, "twin", 1.5)
    core.delete_namespaced_pod("third", NS, grace_period_seconds=0)
    assert ss.wait_bound(core, NS, "twin") == "twin-0"
    wait_for("new twin counted", lambda: len(usage(env, "twin-0")["pods"]) == 2)
    got = usage(env, "twin-0")
    assert set(got["pods"]) == {b["metadata"]["uid"], c["metadata"]["uid"]}
    assert got["requested"]["cpu"] == 1600
    assert not rejected(core)
    assert_no_drift(env.sched)


# ---------------------------------------------------------------- nodes


def test_node_deleted_with_pods_then_recreated(env: SchedEnv, core: client.CoreV1Api) -> None:
    """A node deleted under its pods leaves the cluster's schedulable set at once; its
    pods count against the name until they are gone (as the API still reports them
    bound there). A node recreated with the same name starts with exactly what is still
    bound to that name: nothing once the orphans were removed."""
    node = ss.saved_node(core, "gone-0")
    ss.create_pod(core, NS, ss.pod("a", "gone", cpu="1500m"))
    ss.create_pod(core, NS, ss.pod("b", "gone", cpu="1500m"))
    ss.wait_running(core, NS, "a")
    ss.wait_running(core, NS, "b")
    nodes = env.sched.state()["nodes"]
    core.delete_node("gone-0")
    wait_for("node removed", lambda: env.sched.state()["nodes"] == nodes - 1)
    ss.create_pod(core, NS, ss.pod("big", "gone", cpu="3"))
    assert stays_unbound(core, NS, "big", 1.0), "bound to a deleted node"
    assert_no_drift(env.sched)

    # one orphan removed (what podgc would do), then the node comes back:
    # b (1500m) is still bound to the name and must be counted -> big (3 cpu) waits
    core.delete_namespaced_pod("a", NS)
    ss.wait_gone(core, NS, "a")
    ss.recreate_node(core, node)
    wait_for("node back", lambda: env.sched.state()["nodes"] == nodes)
    assert stays_unbound(core, NS, "big", 1.5), "the orphan's 1500m were not counted"
    assert usage(env, "gone-0")["requested"]["cpu"] == 1500

    # gone again, last orphan removed while it is away: the ghost must vanish entirely,
    # so the node recreated next starts empty and `big` + 1 cpu fit exactly
    core.delete_node("gone-0")
    wait_for("node removed again", lambda: env.sched.state()["nodes"] == nodes - 1)
    core.delete_namespaced_pod("b", NS)
    ss.wait_gone(core, NS, "b")
    wait_for("ghost gone", lambda: "gone-0" not in env.sched.state()["usage"])
    ss.recreate_node(core, node)
    assert ss.wait_bound(core, NS, "big") == "gone-0"
    ss.create_pod(core, NS, ss.pod("rest", "gone", cpu="1"))
    assert ss.wait_bound(core, NS, "rest") == "gone-0"
    ss.create_pod(core, NS, ss.pod("more", "gone", cpu="100m"))
    assert stays_unbound(core, NS, "more", 1.0)
    ss.wait_running(core, NS, "rest")
    assert usage(env, "gone-0")["requested"]["cpu"] == 4000
    assert not rejected(core)
    assert_no_drift(env.sched)


def test_noschedule_taint_avoided_unless_tolerated(env: SchedEnv, core: client.CoreV1Api) -> None:
    taint = {"key": "decice.io/test", "value": "x", "effect": "NoSchedule"}
    core.patch_node("tnt-0", {"spec": {"taints": [taint]}})
    try:
        wait_for(
            "taint seen",
            lambda: ss.raw_json(core.read_node("tnt-0", _preload_content=False))["spec"].get(
                "taints"
            ),
        )
        time.sleep(0.5)
        for i in range(3):
            ss.create_pod(core, NS, ss.pod(f"plain-{i}", "tnt", cpu="500m"))
        for i in range(3):
            assert ss.wait_bound(core, NS, f"plain-{i}") == "tnt-1"
        # tnt-1 has 500m left, tnt-0 is tainted: 1 cpu fits nowhere for an intolerant pod
        ss.create_pod(core, NS, ss.pod("wait", "tnt", cpu="1"))
        assert stays_unbound(core, NS, "wait", 1.5), "an intolerant pod landed on tnt-0"
        tolerate = [{"key": "decice.io/test", "operator": "Equal", "value": "x"}]
        ss.create_pod(core, NS, ss.pod("tol", "tnt", cpu="1", tolerations=tolerate))
        assert ss.wait_bound(core, NS, "tol") == "tnt-0"
        assert ss.bound_node(core, NS, "wait") is None
        # untainted: the waiting pod is re-tried and takes the rest of tnt-0
        core.patch_node("tnt-0", {"spec": {"taints": None}})
        assert ss.wait_bound(core, NS, "wait", timeout=20) == "tnt-0"
    finally:
        core.patch_node("tnt-0", {"spec": {"taints": None}})
    assert not rejected(core)
    assert_no_drift(env.sched)


# ---------------------------------------------------------------- effective requests


def test_init_sidecar_and_overhead_accounting(env: SchedEnv, core: client.CoreV1Api) -> None:
    """eff-0 has 2 cpu; a filler takes 500m, leaving 1500m. Each pod below fits in that
    remainder only if its effective request is computed as Kubernetes does
    (max(app + sidecars, largest init step) + overhead), in both directions."""
    node_api = client.NodeV1Api(env.api)
    rc: dict[str, Any] = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "decice-test-rc"},
        "handler": "decice",
        "overhead": {"podFixed": {"cpu": "250m"}},
    }
    node_api.create_runtime_class(rc, _preload_content=False)  # type: ignore[arg-type]
    try:
        ss.create_pod(core, NS, ss.pod("filler", "eff", cpu="500m"))
        ss.wait_running(core, NS, "filler")

        # does this API server keep initContainers[].restartPolicy (sidecars, 1.28+)?
        probe = ss.create_pod(
            core, NS, ss.pod("sidecar", "eff", cpu="1", init=[{"request": "600m", "sidecar": True}])
        )
        sidecars_kept = probe["spec"]["initContainers"][0].get("restartPolicy") == "Always"
        # kept: 1000m + 600m sidecar = 1600m > 1500m; dropped (1.20): a plain init step
        # of 600m -> max(1000m, 600m) = 1000m
        sidecar_cpu = 1600 if sidecars_kept else 1000
        print(f"sidecars kept by the API server: {sidecars_kept}")

        must_not_fit = {
            # ignoring the init container: 100m would fit
            "init-big": ss.pod("init-big", "eff", cpu="100m", init=[{"request": "1600m"}]),
            # ignoring the overhead: 1300m would fit; with it 1550m does not
            "overhead-over": ss.pod(
                "overhead-over", "eff", cpu="1300m", runtime_class=rc["metadata"]["name"]
            ),
        }
        must_fit = {
            # summing init and app containers (2500m) would not fit; max is 1500m
            "init-max": (ss.pod("init-max", "eff", cpu="1", init=[{"request": "1500m"}]), 1500),
            # 1250m + 250m overhead = exactly the remainder
            "overhead-exact": (
                ss.pod("overhead-exact", "eff", cpu="1250m", runtime_class=rc["metadata"]["name"]),
                1500,
            ),
        }
        for body in must_not_fit.values():
            stored = ss.create_pod(core, NS, body)
            assert pod_request(stored).cpu > 1500
        if sidecar_cpu > 1500:
            must_not_fit["sidecar"] = probe
        for name in must_not_fit:
            assert stays_unbound(core, NS, name, 2.0 if name == "init-big" else 0.2), name
        for name in must_not_fit:
            core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
            ss.wait_gone(core, NS, name)

        if sidecar_cpu <= 1500:
            assert ss.wait_bound(core, NS, "sidecar") == "eff-0"
            wait_for("sidecar pod counted", lambda: len(usage(env, "eff-0")["pods"]) == 2)
            assert usage(env, "eff-0")["requested"]["cpu"] == 500 + sidecar_cpu
            ss.wait_running(core, NS, "sidecar")
            core.delete_namespaced_pod("sidecar", NS, grace_period_seconds=0)
            ss.wait_gone(core, NS, "sidecar")

        for name, (body, effective) in must_fit.items():
            stored = ss.create_pod(core, NS, body)
            assert pod_request(stored).cpu == effective
            assert ss.wait_bound(core, NS, name) == "eff-0", name
            ss.wait_running(core, NS, name)
            wait_for(f"{name} counted", lambda: len(usage(env, "eff-0")["pods"]) == 2)
            assert usage(env, "eff-0")["requested"]["cpu"] == 500 + effective, name
            core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
            ss.wait_gone(core, NS, name)
        assert not rejected(core)
        assert_no_drift(env.sched)
    finally:
        node_api.delete_runtime_class(rc["metadata"]["name"])


def test_gpu_pods_only_on_gpu_nodes_never_overcommitted(
    env: SchedEnv, core: client.CoreV1Api
) -> None:
    """Two GPU nodes with 2 GPUs each, no node selector on the pods: 6 one-GPU pods ->
    exactly 4 bound, all on gpu-*, at most 2 per node; a 3-GPU pod never fits."""
    for i in range(6):
        ss.create_pod(core, NS, ss.pod(f"g{i}", None, cpu="100m", gpu=1))
    ss.create_pod(core, NS, ss.pod("g-three", None, cpu="100m", gpu=3))

    def bound() -> dict[str, str]:
        return {n: node for i in range(6) if (node := ss.bound_node(core, NS, n := f"g{i}"))}

    wait_for("4 gpu pods bound", lambda: len(bound()) == 4)
    time.sleep(1.5)
    placed = bound()
    assert len(placed) == 4, placed
    assert set(placed.values()) == {"gpu-0", "gpu-1"}
    assert sorted(placed.values()).count("gpu-0") == 2
    assert ss.bound_node(core, NS, "g-three") is None

    event = ss.failed_scheduling_event(core, NS, "g-three")
    assert "Insufficient nvidia.com/gpu" in wait_for("g-three event", event, timeout=20).message
    # free one GPU: exactly one of the two waiting one-GPU pods takes it
    victim = next(iter(placed))
    freed_on = placed[victim]
    core.delete_namespaced_pod(victim, NS)
    ss.wait_gone(core, NS, victim)
    wait_for("a waiting pod bound", lambda: len(bound()) == 4)
    time.sleep(1.0)
    now = bound()
    assert len(now) == 4
    newcomer = (set(now) - set(placed)).pop()
    assert now[newcomer] == freed_on
    wait_for(
        "all running",
        lambda: all(
            (ss.read_pod(core, NS, n) or {}).get("status", {}).get("phase") == "Running"
            for n in now
        ),
    )
    assert not overcommitted(core, ("nvidia.com/gpu",))
    assert not rejected(core)
    for node in ("gpu-0", "gpu-1"):
        assert usage(env, node)["requested"]["nvidia.com/gpu"] == 2
    assert_no_drift(env.sched)


def test_unschedulable_pod_bound_once_a_fitting_node_appears(
    env: SchedEnv, core: client.CoreV1Api
) -> None:
    node = ss.saved_node(core, "late-0")
    nodes = env.sched.state()["nodes"]
    core.delete_node("late-0")
    try:
        wait_for("node removed", lambda: env.sched.state()["nodes"] == nodes - 1)
        ss.create_pod(core, NS, ss.pod("waits", None, cpu="12"))

        ev = wait_for("FailedScheduling", ss.failed_scheduling_event(core, NS, "waits"), timeout=20)
        assert "Insufficient cpu" in ev.message
        assert ss.bound_node(core, NS, "waits") is None
    finally:
        ss.recreate_node(core, node)
    assert ss.wait_bound(core, NS, "waits", timeout=20) == "late-0"
    ss.wait_running(core, NS, "waits")
    assert_no_drift(env.sched)


# ---------------------------------------------------------------- crash


def test_kill_9_with_binds_in_flight_then_restart(env: SchedEnv, core: client.CoreV1Api) -> None:
    """A slow binder (10 binds/s) is killed with SIGKILL while most of its 80 pods are
    assumed and waiting for their bind; a new instance rebuilds from the API. 4 nodes x
    4 cpu hold 64 of the 250m pods: every pod bound at most once (the API refuses a
    second bind), 64 bound, none rejected by the node agent, 16 pending, no drift."""
    name = "decice-knine"
    slow = SchedulerProc(
        env.info.kubeconfig, env.workdir, name=name, extra=("--qps", "10", "--burst", "1")
    )
    slow.start()
    try:
        for i in range(80):
            ss.create_pod(core, NS, ss.pod(f"k{i}", "knine", cpu="250m", scheduler=name))

        def bound() -> list[dict[str, Any]]:
            return [
                p
                for p in pods_json(core)
                if p["metadata"]["namespace"] == NS and p["spec"].get("nodeName")
            ]

        wait_for("some bound", lambda: len(bound()) >= 5, timeout=30)
        assert slow.proc is not None
        assumed = slow.state()["assumed"]
        slow.proc.send_signal(signal.SIGKILL)
        slow.proc.wait()
        first = len(bound())
        print(f"killed with {first} bound and {assumed} assumed")
        assert first < 64 and assumed > 0, "nothing was in flight at the kill"
        slow.extra = ("--qps", "50", "--burst", "10")
        slow.start()
        wait_for("64 bound", lambda: len(bound()) == 64, timeout=60)
        time.sleep(1.5)
        assert len(bound()) == 64
        wait_for(
            "all running",
            lambda: all(p.get("status", {}).get("phase") == "Running" for p in bound()),
        )
        assert not overcommitted(core, ("cpu", "pods"))
        assert not rejected(core)
        per_node: dict[str, int] = {}
        for p in bound():
            per_node[p["spec"]["nodeName"]] = per_node.get(p["spec"]["nodeName"], 0) + 1
        assert per_node == {f"knine-{i}": 16 for i in range(4)}, per_node
        state = slow.state()
        assert state["assumed"] == 0
        assert sum(len(state["usage"][f"knine-{i}"]["pods"]) for i in range(4)) == 64
        assert_no_drift(slow)
    finally:
        if slow.running():
            slow.stop()


# what a pod author can send and the 1.20 API server stores: every one past any node's room
HOSTILE = [
    ("mem-1e20", {"requests": {"memory": "1e20"}}),  # stored as 100e18
    ("mem-9ei", {"requests": {"memory": "9Ei"}}),
    ("cpu-1e19", {"requests": {"cpu": "1e19"}}),
    ("mem-huge-exp", {"requests": {"memory": "1e20000000"}}),
    ("ext-1e20", {"limits": {"example.com/widget": "1e20"}}),
]


def test_hostile_quantities_neither_stop_the_scheduler_nor_fit(
    env: SchedEnv, core: client.CoreV1Api
) -> None:
    """Quantities far past int64 (finding 1 of the second security round: "1e20" memory
    stopped decice-scheduler with "out of range", and kept it from starting while the pod
    existed). Pending for decice-scheduler they get FailedScheduling naming the resource;
    one bound by nodeName is counted too (the node agent rejects it as a kubelet would,
    OutOfmemory, instead of counting it as 0); the scheduler stays up, restarts with them
    present, binds the next good pod, and its state matches a fresh LIST."""
    for name, resources in HOSTILE:
        body = ss.pod(name, "hostile", cpu=None)
        body["spec"]["containers"][0]["resources"] = resources
        ss.create_pod(core, NS, body)
    bound = ss.pod("bound-1e20", None, cpu=None, memory="1e20")
    bound["spec"]["nodeName"] = "hostile-0"
    ss.create_pod(core, NS, bound)
    stored = ss.read_pod(core, NS, "mem-1e20")
    assert stored is not None
    assert stored["spec"]["containers"][0]["resources"]["requests"]["memory"] == "100e18"

    for name, resources in HOSTILE:
        event = wait_for(f"{name} FailedScheduling", ss.failed_scheduling_event(core, NS, name), 30)
        resource = next(iter(next(iter(resources.values()))))
        assert f"Insufficient {resource}" in event.message, (name, event.message)
        assert ss.bound_node(core, NS, name) is None
    rejected_pod = wait_for(
        "bound-1e20 rejected",
        lambda: (
            (p := ss.read_pod(core, NS, "bound-1e20"))
            and (p.get("status") or {}).get("reason")
            and p
        ),
        30,
    )
    assert rejected_pod["status"]["phase"] == "Failed"
    assert rejected_pod["status"]["reason"] == "OutOfmemory"
    assert env.sched.running(), "decice-scheduler stopped on a hostile quantity"

    env.sched.stop()
    env.sched.start()  # starts with them all present (it could not before the fix)
    ss.create_pod(core, NS, ss.pod("after-hostile", "twin"))
    ss.wait_bound(core, NS, "after-hostile")
    assert env.sched.running()
    assert_no_drift(env.sched)


def test_a_module_leaving_things_on_the_shared_control_plane_fails(
    sim_binaries: BinarySet, sched_control_plane: ControlPlane, tmp_path: Path
) -> None:
    """The shared control plane's guard (running_env's teardown): a user that leaves a pod
    in its namespace or a namespace of its own making fails, naming both; its node group
    and namespaces are removed all the same."""
    with (
        pytest.raises(AssertionError) as left,
        running_env(
            sim_binaries, tmp_path, [ss.group("leak", 1)], ("leak",), shared=sched_control_plane
        ) as leaky,
    ):
        ss.create_pod(leaky.core, "leak", ss.pod("stays", "leak", scheduler="nobody"))
        extra = client.V1ObjectMeta(name="leak-extra")
        leaky.core.create_namespace(client.V1Namespace(metadata=extra))
    assert "pod leak/stays" in str(left.value) and "namespace leak-extra" in str(left.value)
    core = leaky.core
    assert "leak" not in {ns.metadata.name for ns in core.list_namespace().items}
    assert "leak-0" not in {node.metadata.name for node in core.list_node().items}
    core.delete_namespace("leak-extra")
    wait_for(
        "leak-extra deleted",
        lambda: "leak-extra" not in {ns.metadata.name for ns in core.list_namespace().items},
        timeout=120,
    )
