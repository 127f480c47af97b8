"""decice-scheduler under failures of its connection and under randomized churn, against a
real control plane (etcd + kube-apiserver 1.20 + controller-manager + the stock
kube-scheduler) and the sim node agent, no API mocks.

- the API server frozen (SIGSTOP) for longer than the watch's client read timeout;
- the API server (the whole control plane, etcd data kept) restarted under it;
- a silent partition (a proxy stops forwarding on every open connection without closing
  it): only timeouts + new connections get the scheduler going again;
- a seeded random churn with two schedulers (see test_randomized_churn_two_schedulers).
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from decice.sim.binaries.resolve import BinarySet
from decice_scheduler.cache.resources import Resources, parse_resource_list, pod_request
from tests.integration.schedsupport import (
    BlackholeProxy,
    create_pod,
    group,
    pod,
    raw_json,
    recreate_node,
    saved_node,
    wait_bound,
)
from tests.integration.simsupport import (
    SCHED,
    SchedEnv,
    SchedulerProc,
    assert_no_drift,
    running_env,
)
from tests.support import wait_for

pytestmark = [
    pytest.mark.scheduler,
    pytest.mark.own_control_plane(
        reason="freezes (SIGSTOP), restarts and cuts the apiserver for longer than its "
        "read timeout: no other module's agent or scheduler may be on it then"
    ),
]

NS = "churn"
CHURN_NODES = 6
GROUPS = [group("net", 2, cpu="4"), group("cr", CHURN_NODES, cpu="4", memory="8Gi")]
# the watch's client read timeout is the server timeout (3..3.6 s) + 15 s
WATCH_TIMEOUT = 3
READ_TIMEOUT = WATCH_TIMEOUT * 1.2 + 15


@pytest.fixture(scope="module")
def env(sim_binaries: BinarySet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchedEnv]:
    extra = ("--watch-timeout", str(WATCH_TIMEOUT))
    with running_env(
        sim_binaries, tmp_path_factory.mktemp("churn"), GROUPS, (NS,), sched_extra=extra
    ) as e:
        yield e


def api_pid(env: SchedEnv) -> int:
    info = env.cp.info()
    assert info is not None
    return info.processes["kube-apiserver"].pid


def metric(sched: SchedulerProc, name: str) -> float:
    return sum(v for k, v in sched.metrics().items() if k == name or k.startswith(name + "{"))


def churn_net(core: client.CoreV1Api, prefix: str, n: int, scheduler: str = SCHED) -> None:
    """Create ``n`` pods on the net group, delete every third: all others get bound."""
    for i in range(n):
        create_pod(core, NS, pod(f"{prefix}-{i}", "net", cpu="100m", scheduler=scheduler))
    for i in range(0, n, 3):
        core.delete_namespaced_pod(f"{prefix}-{i}", NS, grace_period_seconds=0)
    for i in range(n):
        if i % 3:
            wait_bound(core, NS, f"{prefix}-{i}", timeout=60)


# ---------------------------------------------------------------- connection failures


def test_apiserver_frozen_longer_than_read_timeout(env: SchedEnv, core: client.CoreV1Api) -> None:
    churn_net(core, "before", 6)
    restarts = metric(env.sched, "decice_scheduler_watch_restarts_total")
    pid = api_pid(env)
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(READ_TIMEOUT + 2)
        assert env.sched.running()
        assert env.sched.state()["ready"]  # the debug server does not hang on the API
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for("API back", lambda: env.core.list_namespace(_request_timeout=5) is not None)
    churn_net(core, "after", 9)
    assert metric(env.sched, "decice_scheduler_watch_restarts_total") > restarts
    assert_no_drift(env.sched)


def test_apiserver_restarted_keeping_etcd(env: SchedEnv, core: client.CoreV1Api) -> None:
    churn_net(core, "pre", 6)
    env.cp.stop()
    # changes the scheduler cannot see until it is reconnected
    env.cp.start()
    core.delete_namespaced_pod("pre-1", NS, grace_period_seconds=0)
    churn_net(core, "post", 9)
    assert_no_drift(env.sched)


def test_silent_partition_recovers(env: SchedEnv, core: client.CoreV1Api) -> None:
    """Every open connection of a second scheduler goes silent (no FIN/RST), new ones
    work: its watches must give up by their read timeout and its requests by theirs,
    and it must open new connections instead of waiting on the dead ones forever."""
    proxy = BlackholeProxy(env.info.ports["apiserver"]).start()
    name = "decice-px"
    kubeconfig = proxy.kubeconfig(env.info.kubeconfig, env.workdir / "proxy.kubeconfig")
    px = SchedulerProc(kubeconfig, env.workdir, name=name)
    px.extra = ("--watch-timeout", str(WATCH_TIMEOUT))
    px.start()
    try:
        create_pod(core, NS, pod("px-0", "net", scheduler=name))
        wait_bound(core, NS, "px-0")
        cut = proxy.partition()
        assert cut >= 2, "expected the watch and request connections"
        started = time.monotonic()
        for i in range(1, 4):
            create_pod(core, NS, pod(f"px-{i}", "net", scheduler=name))
        for i in range(1, 4):
            wait_bound(core, NS, f"px-{i}", timeout=READ_TIMEOUT + 60)
        print(f"recovered from the partition after {time.monotonic() - started:.1f} s")
        core.delete_namespaced_pod("px-2", NS, grace_period_seconds=0)
        create_pod(core, NS, pod("px-4", "net", scheduler=name))
        wait_bound(core, NS, "px-4", timeout=30)
        assert_no_drift(px)
    finally:
        if px.running():
            px.stop()
        proxy.stop()


# ---------------------------------------------------------------- randomized churn


@dataclass
class PodEvent:
    at: float
    kind: str
    uid: str
    key: str
    scheduler: str
    node: str | None
    terminal: bool
    request: Resources


@dataclass
class Recorder:
    """Every pod event of the API, in resourceVersion order, with its arrival time."""

    core: client.CoreV1Api
    events: list[PodEvent] = field(default_factory=list)
    error: BaseException | None = None
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> threading.Thread:
        listed = raw_json(self.core.list_pod_for_all_namespaces(_preload_content=False))
        now = time.monotonic()
        for p in listed["items"]:
            self.events.append(self._event(now, "ADDED", p))
        rv = listed["metadata"]["resourceVersion"]
        thread = threading.Thread(target=self._run, args=(rv,), daemon=True)
        thread.start()
        return thread

    @staticmethod
    def _event(at: float, kind: str, p: dict[str, Any]) -> PodEvent:
        meta, spec, status = p["metadata"], p["spec"], p.get("status") or {}
        return PodEvent(
            at,
            kind,
            meta["uid"],
            f"{meta['namespace']}/{meta['name']}",
            spec.get("schedulerName", "default-scheduler"),
            spec.get("nodeName"),
            status.get("phase") in ("Succeeded", "Failed"),
            pod_request(p),
        )

    def _run(self, rv: str) -> None:
        try:
            while not self.stop.is_set():
                resp = self.core.list_pod_for_all_namespaces(
                    watch=True,
                    resource_version=rv,
                    allow_watch_bookmarks=True,
                    timeout_seconds=5,
                    _preload_content=False,
                )
                for line in iter_resp_lines(resp):
                    event = json.loads(line)
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        raise RuntimeError(f"pod watch failed: {obj}")
                    rv = obj["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self.events.append(self._event(time.monotonic(), event["type"], obj))
        except BaseException as exc:
            self.error = exc


@dataclass
class Verdict:
    overcommits: list[str] = field(default_factory=list)  # by decice, not explained by a race
    raced: set[str] = field(default_factory=set)  # decice pods bound into a raced overcommit
    decice_binds: int = 0


RACE_WINDOW = 3.0


def replay(events: list[PodEvent], allocatable: dict[str, Resources]) -> Verdict:
    """Replay the API's pod history; judge every bind of a decice pod.

    At the moment the API records a decice pod's bind, its node's committed requests
    (bound, non-terminal pods of every scheduler, terminating ones included) plus the
    pod's own request must fit the node's allocatable. Excess is excused only when pods
    of *another* scheduler were bound to that node within RACE_WINDOW seconds before
    and request at least the excess: decice may not have seen those binds yet.
    """
    verdict = Verdict()
    live: dict[str, PodEvent] = {}
    foreign_binds: list[PodEvent] = []
    for ev in events:
        before = live.get(ev.uid)
        was_bound = before is not None and before.node is not None
        if ev.kind == "DELETED":
            live.pop(ev.uid, None)
            continue
        live[ev.uid] = ev
        if ev.node is None or was_bound:
            continue
        if ev.scheduler != SCHED:
            foreign_binds.append(ev)
            continue
        verdict.decice_binds += 1
        committed = Resources()
        for other in live.values():
            if other.uid != ev.uid and other.node == ev.node and not other.terminal:
                committed = committed.add(other.request)
        alloc = allocatable[ev.node]
        total = committed.add(ev.request)
        excess = {r: total.get(r) - alloc.get(r) for r in total.names()}
        excess = {r: x for r, x in excess.items() if x > 0}
        if not excess:
            continue
        racing = Resources()
        for other in foreign_binds:
            if other.node == ev.node and ev.at - other.at <= RACE_WINDOW:
                racing = racing.add(other.request)
        if all(racing.get(r) >= x for r, x in excess.items()):
            verdict.raced.add(ev.uid)
        else:
            verdict.overcommits.append(
                f"{ev.key} bound to {ev.node}: over by {excess}, racing binds only {racing}"
            )
    return verdict


# how long a pending pod of ours may fit somewhere once the churn has quiesced: the last
# running pods' sim-duration (5 s) plus the scheduler's longest backoff (2 s), and margin
STUCK_AFTER_S = 15.0


def test_randomized_churn_two_schedulers(env: SchedEnv, core: client.CoreV1Api) -> None:
    """Seeded churn (DECICE_CHURN_SEED to replay one) for CHURN_SECONDS: creations for
    decice-scheduler and the stock kube-scheduler on the same 6 nodes, timed completions
    (sim-duration, some failing), deletions, cordon/uncordon, deleting an empty cordoned
    node and adding it back.

    Oracles, after quiescing:
    1. the audit's full rebuild from a fresh LIST equals the incremental state;
    2. decice never over-commits by its own fault. Two schedulers binding to one node at
       the same instant can over-commit it without either being wrong about its own
       view (each saw the node before the other's bind), and the node agent (kubelet
       admission) then rejects whichever pod it sees second with OutOf<resource>. So
       the history of pod events, in the API's order, is replayed: at every bind of a
       decice pod, what was already bound there plus the pod must fit, unless pods of
       the other scheduler bound within the last RACE_WINDOW seconds account for the
       excess. Every decice pod the agent rejected must be such an excused race;
    3. no decice pod is left pending while some schedulable node has room for it.
    """
    seed = int(os.environ.get("DECICE_CHURN_SEED") or random.randrange(1 << 30))
    seconds = float(os.environ.get("DECICE_CHURN_SECONDS") or 60)
    print(f"churn seed {seed} ({seconds:.0f} s); replay with DECICE_CHURN_SEED={seed}")
    rng = random.Random(seed)
    nodes = [f"cr-{i}" for i in range(CHURN_NODES)]
    saved = {n: saved_node(core, n) for n in nodes}
    allocatable = {n: parse_resource_list(saved[n]["status"]["allocatable"]) for n in nodes}
    recorder = Recorder(core)
    watcher = recorder.start()
    cordoned: set[str] = set()
    deleted: set[str] = set()
    names: list[str] = []
    counts = dict.fromkeys(("decice", "kube", "delete", "cordon", "uncordon", "rm", "add"), 0)
    serial = 0
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            roll = rng.random()
            if roll < 0.62 and len(names) < 110:
                serial += 1
                mine = rng.random() < 0.7
                ann: dict[str, str] = {}
                if rng.random() < 0.35:
                    ann["decice.io/sim-duration"] = f"{rng.choice((1, 2, 3, 4))}s"
                    if rng.random() < 0.3:
                        ann["decice.io/sim-exit-code"] = "1"
                name = f"{'d' if mine else 'k'}{serial}"
                body = pod(
                    name,
                    "cr",
                    cpu=rng.choice(("100m", "250m", "500m", "1", "1500m")),
                    memory=rng.choice(("64Mi", "256Mi", "1Gi", "2Gi")),
                    scheduler=SCHED if mine else "default-scheduler",
                    annotations=ann,
                )
                create_pod(core, NS, body)
                names.append(name)
                counts["decice" if mine else "kube"] += 1
            elif roll < 0.9 and names:
                name = names.pop(rng.randrange(len(names)))
                try:
                    core.delete_namespaced_pod(name, NS, grace_period_seconds=rng.choice((0, None)))
                except ApiException as exc:
                    assert exc.status == 404
                counts["delete"] += 1
            elif roll < 0.95:
                up = [n for n in nodes if n not in cordoned and n not in deleted]
                if len(up) > 3:
                    n = rng.choice(up)
                    core.patch_node(n, {"spec": {"unschedulable": True}})
                    cordoned.add(n)
                    counts["cordon"] += 1
                elif cordoned:
                    n = rng.choice(sorted(cordoned))
                    core.patch_node(n, {"spec": {"unschedulable": False}})
                    cordoned.discard(n)
                    counts["uncordon"] += 1
            elif cordoned and rng.random() < 0.6:
                n = rng.choice(sorted(cordoned))
                on_it = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={n}")
                if not on_it.items:
                    core.delete_node(n)
                    cordoned.discard(n)
                    deleted.add(n)
                    counts["rm"] += 1
            elif deleted:
                n = rng.choice(sorted(deleted))
                recreate_node(core, saved[n])
                deleted.discard(n)
                counts["add"] += 1
            time.sleep(rng.uniform(0.02, 0.12))
        print(f"operations: {counts}")

        # quiesce: every node back and schedulable, nothing in flight
        for n in sorted(deleted):
            recreate_node(core, saved[n])
        for n in sorted(cordoned):
            core.patch_node(n, {"spec": {"unschedulable": False}})
        time.sleep(5.0)  # the longest sim-duration

        def quiet() -> bool:
            items = raw_json(core.list_namespaced_pod(NS, _preload_content=False))["items"]
            busy = [
                p
                for p in items
                if p["metadata"].get("deletionTimestamp")
                or (p["spec"].get("nodeName") and p["status"].get("phase") == "Pending")
            ]
            state = env.sched.state()
            queue = state["queue"]
            return (
                not busy
                and state["assumed"] == 0
                and not queue.get("active")
                and not queue.get("in_flight")
            )

        wait_for("churn quiesced", quiet, timeout=60, every=0.5)
        time.sleep(3.0)  # backoff (max 2 s) retries of the pending ones
    finally:
        recorder.stop.set()
        watcher.join(timeout=15)
    assert recorder.error is None, recorder.error

    # 1. no drift
    result = assert_no_drift(env.sched)
    assert env.sched.metrics()["decice_scheduler_drift_nodes"] == 0
    assert result["pods"] >= 20

    # 2. no over-commit by decice beyond the two-scheduler race
    verdict = replay(recorder.events, allocatable)
    items = raw_json(core.list_namespaced_pod(NS, _preload_content=False))["items"]
    rejected = {
        p["metadata"]["uid"]: (p["metadata"]["name"], p["spec"]["schedulerName"], p["status"])
        for p in items
        if str(p["status"].get("reason", "")).startswith("OutOf")
    }
    ours = {uid: r for uid, r in rejected.items() if r[1] == SCHED}
    print(
        f"decice binds {verdict.decice_binds}, raced {len(verdict.raced)}; OutOf rejections:"
        f" {len(ours)} of decice pods, {len(rejected) - len(ours)} of the stock scheduler's"
    )
    assert verdict.decice_binds >= 30, "too little churn to judge"
    assert not verdict.overcommits, verdict.overcommits
    unexplained = {r[0]: r[2].get("message") for uid, r in ours.items() if uid not in verdict.raced}
    assert not unexplained, unexplained

    # 3. nothing of ours stays pending while it fits somewhere. Pods bound in the quiesce
    # window may still be running and end (sim-duration up to 5 s) after the check reads
    # the cluster; the room they free is offered to a pending pod at its next retry (backoff
    # up to 2 s). So "fits and is pending" must not hold for STUCK_AFTER_S on end, read
    # afresh from the API each time: a pod stuck for good fails this; one about to be
    # retried does not.
    def stuck_pods() -> list[str]:
        listed = raw_json(core.list_pod_for_all_namespaces(_preload_content=False))["items"]
        free = dict(allocatable)
        for p in listed:
            node = p["spec"].get("nodeName")
            if node in free and p["status"].get("phase") not in ("Succeeded", "Failed"):
                free[node] = free[node].sub(pod_request(p))
        out = []
        for p in listed:
            if p["metadata"].get("namespace") != NS or p["spec"]["schedulerName"] != SCHED:
                continue
            if p["spec"].get("nodeName") or p["metadata"].get("deletionTimestamp"):
                continue
            req = pod_request(p)
            room = [n for n, f in free.items() if all(req.get(r) <= f.get(r) for r in req.names())]
            if room:
                out.append(f"{p['metadata']['name']} ({req}) fits on {room}")
        return out

    deadline = time.monotonic() + STUCK_AFTER_S
    stuck = stuck_pods()
    while stuck and time.monotonic() < deadline:
        time.sleep(0.5)
        stuck = stuck_pods()
    assert not stuck, stuck
