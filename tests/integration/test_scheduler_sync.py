"""decice-scheduler against a real control plane (etcd + kube-apiserver + controller-manager
+ the stock kube-scheduler running concurrently) and the sim node agent.

The scheduler runs as its own process (``python -m decice_scheduler``); the tests read
its /metrics, /debug/state and POST /debug/audit. Each test uses its own node group
(selected with the ``decice.io/sim-group`` label) and cleans up its pods.
"""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from decice_kube.quantity import parse_cpu
from tests.integration.schedsupport import group
from tests.integration.simsupport import (
    GROUP_LABEL,
    SCHED,
    SchedEnv,
    SchedulerProc,
    assert_no_drift,
    http,
    shared_env_fixture,
)
from tests.support import wait_for

pytestmark = pytest.mark.scheduler

NS = "sched-test"
HOLD = "decice.io/test-hold"


GROUPS = [
    group("fin", 1),
    group("del", 1),
    group("slow", 1, cpu="8"),
    group("mix", 4, cpu="4"),
    group("chg", 2),
    group("churn", 10, cpu="8", memory="32Gi"),
    group("le", 1, cpu="8"),
]


# ---------------------------------------------------------------- fixtures

env = shared_env_fixture("sched", GROUPS, (NS,))


# ---------------------------------------------------------------- helpers


def make_pod(
    name: str,
    group: str | None,
    *,
    cpu: str = "100m",
    scheduler: str = SCHED,
    annotations: dict[str, str] | None = None,
    finalizers: list[str] | None = None,
    node: str | None = None,
    selector: dict[str, str] | None = None,
) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations=annotations, finalizers=finalizers),
        spec=client.V1PodSpec(
            scheduler_name=scheduler,
            node_name=node,
            node_selector=selector or ({GROUP_LABEL: group} if group else None),
            termination_grace_period_seconds=30,
            containers=[
                client.V1Container(
                    name="main",
                    image="registry.invalid/none:1",
                    resources=client.V1ResourceRequirements(requests={"cpu": cpu}),
                )
            ],
        ),
    )


def create(core: client.CoreV1Api, *pods: client.V1Pod) -> None:
    for pod in pods:
        core.create_namespaced_pod(NS, pod)


def read(core: client.CoreV1Api, name: str) -> client.V1Pod | None:
    try:
        return core.read_namespaced_pod(name, NS)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def node_of(core: client.CoreV1Api, name: str) -> str | None:
    pod = read(core, name)
    return None if pod is None else pod.spec.node_name


def wait_bound(core: client.CoreV1Api, name: str, timeout: float = 30.0) -> str:
    return str(wait_for(f"{name} bound", lambda: node_of(core, name), timeout))


def wait_phase(core: client.CoreV1Api, name: str, phase: str, timeout: float = 30.0) -> None:
    wait_for(
        f"{name} {phase}",
        lambda: (lambda p: p is not None and p.status.phase == phase)(read(core, name)),
        timeout,
    )


def wait_gone(core: client.CoreV1Api, name: str, timeout: float = 30.0) -> None:
    wait_for(f"{name} gone", lambda: read(core, name) is None, timeout)


def stays_unbound(core: client.CoreV1Api, name: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if node_of(core, name):
            return False
        time.sleep(0.2)
    return True


def _patch_finalizers(core: client.CoreV1Api, name: str, finalizers: list[str]) -> None:
    # a strategic merge patch merges finalizer lists: null removes them all
    value = finalizers or None
    try:
        core.patch_namespaced_pod(name, NS, {"metadata": {"finalizers": value}})
    except ApiException as exc:
        if exc.status != 404:
            raise


def committed(core: client.CoreV1Api) -> dict[str, tuple[int, int]]:
    """node -> (millicores requested by bound non-terminal pods, allocatable millicores)."""
    alloc = {
        n.metadata.name: parse_cpu(n.status.allocatable["cpu"]) for n in core.list_node().items
    }
    used = dict.fromkeys(alloc, 0)
    for pod in core.list_pod_for_all_namespaces().items:
        if not pod.spec.node_name or pod.status.phase in ("Succeeded", "Failed"):
            continue
        for c in pod.spec.containers:
            req = (c.resources.requests or {}) if c.resources else {}
            used[pod.spec.node_name] = used.get(pod.spec.node_name, 0) + parse_cpu(
                req.get("cpu", "0")
            )
    return {n: (used.get(n, 0), alloc.get(n, 0)) for n in set(alloc) | set(used)}


# ---------------------------------------------------------------- tests


def test_finished_pods_free_their_resources(env: SchedEnv, core: client.CoreV1Api) -> None:
    # one node with 2 cpu: each pod takes 1.5, so the next fits only once the last ended
    create(core, make_pod("ok", "fin", cpu="1500m", annotations={"decice.io/sim-duration": "3s"}))
    assert wait_bound(core, "ok") == "fin-0"
    create(
        core,
        make_pod(
            "crash",
            "fin",
            cpu="1500m",
            annotations={"decice.io/sim-duration": "2s", "decice.io/sim-exit-code": "1"},
        ),
    )
    assert stays_unbound(core, "crash", 1.0)
    assert wait_bound(core, "crash", timeout=20) == "fin-0"
    assert read(core, "ok").status.phase == "Succeeded"  # type: ignore[union-attr]
    create(core, make_pod("after", "fin", cpu="1500m"))
    assert stays_unbound(core, "after", 0.5)
    assert wait_bound(core, "after", timeout=20) == "fin-0"
    assert read(core, "crash").status.phase == "Failed"  # type: ignore[union-attr]
    assert_no_drift(env.sched)


def test_deleted_pending_running_and_terminating_pods(
    env: SchedEnv, core: client.CoreV1Api
) -> None:
    before = env.sched.metrics()
    # pending: never fits; deleting it leaves nothing queued
    create(core, make_pod("pending", "del", cpu="3"))
    wait_for(
        "pending found unschedulable",
        lambda: (
            env.sched.metrics()["decice_scheduler_unschedulable_total"]
            > before["decice_scheduler_unschedulable_total"]
        ),
    )
    core.delete_namespaced_pod("pending", NS)
    wait_gone(core, "pending")
    wait_for("queue empty", lambda: sum(env.sched.state()["queue"].values()) == 0, timeout=10)

    # running: deleted (graceful -> MODIFIED with deletionTimestamp -> DELETED)
    create(core, make_pod("running", "del", cpu="1500m"))
    wait_phase(core, "running", "Running")
    core.delete_namespaced_pod("running", NS)
    create(core, make_pod("next", "del", cpu="1500m"))
    assert wait_bound(core, "next") == "del-0"
    assert read(core, "running") is None

    # terminating: still counts until it is really gone
    create(core, make_pod("held", "del", cpu="400m", finalizers=[HOLD]))
    wait_phase(core, "held", "Running")
    core.delete_namespaced_pod("held", NS)
    wait_for(
        "held terminating",
        lambda: (lambda p: p is not None and p.metadata.deletion_timestamp)(read(core, "held")),
    )
    create(core, make_pod("waiter", "del", cpu="400m"))
    assert stays_unbound(core, "waiter", 2.0), "a terminating pod's resources were reused"
    _patch_finalizers(core, "held", [])  # the agent has force-deleted it: now it goes
    wait_gone(core, "held")
    assert wait_bound(core, "waiter") == "del-0"
    assert_no_drift(env.sched)


def test_pods_deleted_during_their_bind(env: SchedEnv, core: client.CoreV1Api) -> None:
    # a slow binder (1 bind/s): pods are assumed at once and deleted while their bind waits
    slow = SchedulerProc(env.info.kubeconfig, env.workdir, name="decice-slow")
    slow.extra = ("--qps", "1", "--burst", "1")
    slow.start()
    try:
        names = [f"slow-{i}" for i in range(8)]
        create(core, *(make_pod(n, "slow", scheduler="decice-slow") for n in names))
        wait_bound(core, names[0])
        for name in names[1:]:
            core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
        # the same name again with a new uid: the old bind must not land on it
        create(core, make_pod(names[3], "slow", scheduler="decice-slow"))
        assert wait_bound(core, names[3]) == "slow-0"
        time.sleep(1.5)
        assert {p.metadata.name for p in core.list_namespaced_pod(NS).items} == {
            names[0],
            names[3],
        }
        state = slow.state()
        assert state["assumed"] == 0
        assert len(state["usage"]["slow-0"]["pods"]) == 2
        assert state["usage"]["slow-0"]["requested"]["cpu"] == 200
        errors = sum(
            v
            for k, v in slow.metrics().items()
            if k.startswith("decice_scheduler_bind_errors_total")
        )
        assert errors >= 1
        assert_no_drift(slow)
    finally:
        assert slow.stop() == 0


def test_other_scheduler_on_the_same_nodes_never_overcommits(
    env: SchedEnv, core: client.CoreV1Api
) -> None:
    # 4 nodes x 4 cpu = 32 slots of 500m. First the stock kube-scheduler places 20 pods;
    # then 20 of ours and 8 more of theirs come at once: ours must count theirs.
    def pods(prefix: str, n: int, scheduler: str) -> list[client.V1Pod]:
        return [make_pod(f"{prefix}-{i}", "mix", cpu="500m", scheduler=scheduler) for i in range(n)]

    def create_all(items: list[client.V1Pod]) -> None:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda p: core.create_namespaced_pod(NS, p), items))

    def bound() -> list[client.V1Pod]:
        return [p for p in core.list_namespaced_pod(NS).items if p.spec.node_name]

    create_all(pods("kube", 20, "default-scheduler"))
    wait_for("20 placed by kube-scheduler", lambda: len(bound()) == 20)
    create_all(pods("ours", 20, SCHED))
    wait_for("12 of ours placed", lambda: len(bound()) == 32)
    assert all(
        stays_unbound(core, f"ours-{i}", 0.1) for i in range(20) if not node_of(core, f"ours-{i}")
    )
    wait_for("all running", lambda: all(p.status.phase == "Running" for p in bound()))

    # now both at once: 8 slots are freed while 8 more pods of theirs arrive; ours
    # (8 still pending) race them. Only in-flight binds of the two can collide; the
    # kubelet (agent) then rejects one of them: what stays counted never overcommits.
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: core.delete_namespaced_pod(f"kube-{i}", NS), range(8)))
    create_all(pods("kube2", 8, "default-scheduler"))

    def settled() -> bool:
        now = [p for p in bound() if not p.metadata.deletion_timestamp]
        return len(now) >= 32 and all(p.status.phase in ("Running", "Failed") for p in now)

    wait_for("slots refilled", settled, timeout=60)
    time.sleep(1.0)
    for node, (used, alloc) in committed(core).items():
        if node.startswith("mix-"):
            assert used <= alloc, f"{node}: {used}m requested > {alloc}m allocatable"
    rejected = [
        p.metadata.name for p in core.list_namespaced_pod(NS).items if p.status.phase == "Failed"
    ]
    print(f"pods rejected by the kubelet after racing binds: {rejected}")
    assert_no_drift(env.sched)


def test_node_cordoned_resized_and_removed(env: SchedEnv, core: client.CoreV1Api) -> None:
    # two nodes with 2 cpu each
    core.patch_node("chg-0", {"spec": {"unschedulable": True}})
    create(core, make_pod("c1", "chg", cpu="1500m"))
    assert wait_bound(core, "c1") == "chg-1"
    create(core, make_pod("c2", "chg", cpu="1500m"))
    assert stays_unbound(core, "c2", 1.0)
    core.patch_node("chg-0", {"spec": {"unschedulable": False}})  # uncordon -> requeue
    assert wait_bound(core, "c2") == "chg-0"

    # shrink chg-1 to what is used: a small pod for it waits until it grows again
    # (the agent admits by its own idea of the capacity, 2 cpu: stay within it)
    def resize(cpu: str) -> None:
        cap = {"cpu": cpu, "memory": "8Gi", "pods": "110"}
        core.patch_node_status("chg-1", {"status": {"capacity": cap, "allocatable": cap}})

    resize("1500m")
    time.sleep(0.5)
    create(core, make_pod("c3", None, cpu="400m", selector={"kubernetes.io/hostname": "chg-1"}))
    assert stays_unbound(core, "c3", 1.0)
    resize("2")
    assert wait_bound(core, "c3") == "chg-1"

    nodes_before = env.sched.state()["nodes"]
    core.delete_node("chg-0")
    wait_for("node removed", lambda: env.sched.state()["nodes"] == nodes_before - 1)
    create(core, make_pod("c4", "chg", cpu="100m"))
    assert wait_bound(core, "c4") == "chg-1"  # the last 100m there
    create(core, make_pod("c5", "chg", cpu="100m"))
    assert stays_unbound(core, "c5", 1.0), node_of(core, "c5")
    assert_no_drift(env.sched)


def test_failed_scheduling_event_names_the_reasons(env: SchedEnv, core: client.CoreV1Api) -> None:
    create(core, make_pod("huge", None, cpu="1000"))

    def event() -> Any:
        items = core.list_namespaced_event(
            NS, field_selector="involvedObject.name=huge,reason=FailedScheduling"
        ).items
        return items[0] if items else None

    ev = wait_for("FailedScheduling event", event, timeout=20)
    nodes = env.sched.state()["nodes"]
    assert ev.type == "Warning" and ev.source.component == SCHED
    assert ev.message.startswith(f"0/{nodes} nodes are available: ")
    assert "Insufficient cpu" in ev.message
    assert ev.involved_object.kind == "Pod"


def test_metrics_and_health_endpoints(env: SchedEnv, core: client.CoreV1Api) -> None:
    create(core, make_pod("m1", "churn"), make_pod("m2", "churn", cpu="100"))
    wait_bound(core, "m1")
    wait_for(
        "m2 unschedulable",
        lambda: env.sched.metrics().get("decice_scheduler_queue_depth{queue=unschedulable}"),
        timeout=10,
    )
    assert http(env.sched.port, "/healthz")[0] == 200
    assert http(env.sched.port, "/readyz")[0] == 200
    m = env.sched.metrics()
    assert m["decice_scheduler_scheduled_total"] >= 1
    assert m["decice_scheduler_unschedulable_total"] >= 1
    assert m["decice_scheduler_e2e_scheduling_seconds_count"] >= 1
    assert m["decice_scheduler_bind_seconds_count"] >= 1
    assert m["decice_scheduler_ready"] == 1 and m["decice_scheduler_leader"] == 1
    assert "decice_scheduler_drift_nodes" in m
    assert any(k.startswith("decice_scheduler_queue_depth") for k in m)


def test_audit_finds_no_drift_after_churn(env: SchedEnv, core: client.CoreV1Api) -> None:
    pods = []
    for i in range(120):
        ann = {}
        if i % 3 == 0:
            ann["decice.io/sim-duration"] = "1s"
        if i % 6 == 0:
            ann["decice.io/sim-exit-code"] = "2"
        sched = "default-scheduler" if i % 5 == 0 else SCHED
        pods.append(make_pod(f"churn-{i}", "churn", cpu="300m", scheduler=sched, annotations=ann))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda p: core.create_namespaced_pod(NS, p), pods))
        # delete some right away (pending or mid-bind) and some once bound
        list(
            pool.map(
                lambda i: core.delete_namespaced_pod(f"churn-{i}", NS, grace_period_seconds=0),
                range(1, 120, 7),
            )
        )
    time.sleep(1.0)
    for pod in core.list_namespaced_pod(NS).items[::4]:
        if pod.spec.node_name:
            core.delete_namespaced_pod(pod.metadata.name, NS)

    busy: list[tuple[str, str | None, str]] = []

    def quiet() -> bool:
        busy[:] = [
            (p.metadata.name, p.spec.node_name, p.status.phase)
            for p in core.list_namespaced_pod(NS).items
            if not p.spec.node_name or p.status.phase == "Pending" or p.metadata.deletion_timestamp
        ]
        return not busy

    try:
        wait_for("churn settled", quiet, timeout=30)
    except BaseException:
        print("not settled:", busy, env.sched.state()["queue"])
        raise
    result = assert_no_drift(env.sched)
    assert result["pods"] >= 50


def test_restart_rebuilds_the_same_state(env: SchedEnv, core: client.CoreV1Api) -> None:
    create(core, *(make_pod(f"keep-{i}", "churn", cpu="250m") for i in range(12)))
    for i in range(12):
        wait_bound(core, f"keep-{i}")
    wait_for("nothing assumed", lambda: env.sched.state()["assumed"] == 0)
    before = env.sched.state()
    assert env.sched.stop() == 0  # clean SIGTERM shutdown
    env.sched.start()
    after = env.sched.state()
    assert after["usage"] == before["usage"]
    assert (after["nodes"], after["pods"]) == (before["nodes"], before["pods"])
    create(core, make_pod("after-restart", "churn", cpu="250m"))
    wait_bound(core, "after-restart")
    assert_no_drift(env.sched)


def test_leader_election_one_active_then_failover(env: SchedEnv, core: client.CoreV1Api) -> None:
    lease = (
        "--leader-elect",
        "--lock-namespace",
        NS,
        "--leader-elect-lease-duration",
        "4",
        "--leader-elect-renew-deadline",
        "3",
        "--leader-elect-retry-period",
        "0.5",
    )
    a = SchedulerProc(env.info.kubeconfig, env.workdir, name="decice-le", extra=lease)
    b = SchedulerProc(env.info.kubeconfig, env.workdir / "b", name="decice-le", extra=lease)
    (env.workdir / "b").mkdir(exist_ok=True)
    a.start()
    b.start()
    try:

        def leaders() -> list[SchedulerProc]:
            return [s for s in (a, b) if s.metrics()["decice_scheduler_leader"] == 1]

        first = wait_for("a leader", lambda: leaders(), timeout=15)
        time.sleep(1.0)
        assert len(leaders()) == 1
        create(core, make_pod("le-1", "le", scheduler="decice-le"))
        wait_bound(core, "le-1")
        standby = b if first[0] is a else a
        assert standby.metrics()["decice_scheduler_scheduled_total"] == 0
        assert first[0].stop() == 0  # releases the lease
        wait_for("failover", lambda: standby.metrics()["decice_scheduler_leader"] == 1, 10)
        create(core, make_pod("le-2", "le", scheduler="decice-le"))
        wait_bound(core, "le-2")
        assert standby.metrics()["decice_scheduler_scheduled_total"] == 1
    finally:
        for s in (a, b):
            if s.running():
                s.stop()


def test_relist_after_410_gone_leaves_no_drift(env: SchedEnv, core: client.CoreV1Api) -> None:
    """The scheduler is frozen (SIGSTOP) while pods and a node change and the API server
    restarts: its watches resume from a resourceVersion older than the new watch cache,
    get 410 Gone, and relist; the gap's deletions must be applied."""
    create(core, *(make_pod(f"gap-{i}", "churn", cpu="200m") for i in range(10)))
    for i in range(10):
        wait_bound(core, f"gap-{i}")
    wait_for("nothing assumed", lambda: env.sched.state()["assumed"] == 0)
    relists = env.sched.metrics().get("decice_scheduler_relists_total{reason=gone}", 0)
    assert env.sched.proc is not None
    env.sched.proc.send_signal(signal.SIGSTOP)
    try:
        # restart first (the frozen process's connections die with the old API server),
        # then change things: none of it can reach it through the old watch streams
        env.cp.stop()
        env.cp.start()
        for i in range(0, 10, 2):
            core.delete_namespaced_pod(f"gap-{i}", NS, grace_period_seconds=0)
        # bound by hand (another scheduler's work) while we were away
        others = [make_pod(f"gap-x{i}", None, node="churn-3", scheduler="x") for i in range(5)]
        create(core, *others)
        for i in range(0, 10, 2):
            wait_gone(core, f"gap-{i}")
    finally:
        env.sched.proc.send_signal(signal.SIGCONT)
    wait_for(
        "relist after 410",
        lambda: env.sched.metrics().get("decice_scheduler_relists_total{reason=gone}", 0) > relists,
        timeout=60,
    )
    # the relist counter goes up when the relist starts, the gap count after its LIST
    gap_key = "decice_scheduler_gap_deletions_total{resource=pods}"
    wait_for("gap deletions counted", lambda: env.sched.metrics().get(gap_key, 0) >= 5, timeout=30)
    assert env.sched.metrics().get(gap_key, 0) >= 5
    state = env.sched.state()
    uids = {p.metadata.uid for p in core.list_namespaced_pod(NS).items}
    counted = {uid for u in state["usage"].values() for uid in u["pods"]}
    assert uids <= counted
    assert_no_drift(env.sched)
    create(core, make_pod("post-relist", "churn"))
    wait_bound(core, "post-relist")
