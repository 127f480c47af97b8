"""The simulator's node agent: plays the kubelet for every simulated node at once.

``register_nodes`` creates the Nodes of the groups (status in the same POST; existing
nodes are left as they are; nodes ``<prefix>-<i>`` of a group with ``i >= count`` that
carry the decice sim labels are deleted). ``run_agent`` then lists and watches every
bound pod and, for pods bound to OUR nodes:

- admits a new pod when it fits next to the pods already admitted on that node (kubelet
  admission: pod count, cpu, memory, extended resources) and patches it ``Running``;
  otherwise patches it ``Failed`` with reason ``OutOf<resource>``;
- terminates pods annotated ``decice.io/sim-duration`` / ``decice.io/sim-exit-code``
  (see :mod:`decice.sim.agent.simnodes`) when their time is up: ``Succeeded`` or ``Failed``;
- ends the pods of Kubernetes Jobs without those annotations ``Succeeded`` after
  ``job_duration`` seconds (``--job-duration``, default 2 s; ``off``: they run forever),
  so that the Job controller completes their Jobs (Helm hook Jobs among them);
- force-deletes (grace period 0, uid precondition) pods that are being deleted, as a
  kubelet does once their containers stopped;
- keeps the nodes alive for the node-lifecycle controller with Lease renewals when it
  runs (see *Heartbeats*).

Heartbeats. The decice sim control plane runs kube-controller-manager with
``--controllers=...,-nodelifecycle`` and without the ``TaintNodesByCondition`` admission
plugin (``ControlPlane(node_lifecycle=False)``): Nodes created Ready stay Ready without
any heartbeat, and the agent sends none. When the node-lifecycle controller does run, it
marks a node Unknown (and taints it unreachable) 40 s after the last heartbeat; the agent
then renews one Lease per node in ``kube-node-lease`` (spread evenly over
``lease_interval`` seconds). ``heartbeat="auto"`` decides by a dry-run Node create: when
admission adds the ``node.kubernetes.io/not-ready`` taint, the lifecycle machinery is on.

Writes go through a queue served by ``max_in_flight`` workers over one HTTP/2
connection; everything is raw JSON. The agent's own accounting is what it admitted;
it does not second-guess the scheduler beyond what a kubelet's admission does.

Entry point (a detached managed process; logs to stderr; SIGTERM/SIGINT stop it)::

    python -m decice.sim.agent.run --kubeconfig K --nodes-file F.json
        [--status-file S.json] [--heartbeat auto|on|off] [--lease-interval 20]
        [--max-in-flight 64] [--job-duration 2s|off] [--interlink-file F]
        [--kubelet-dir D] [--log-level INFO]

F.json holds the node groups: a list of ``SimNodeGroup`` mappings, or ``{"nodes": [...]}``.

Nodes named in the ``--interlink-file`` (polled while the agent runs) are not simulated
for new pods: the agent plays their virtual kubelet against an interLink plugin
(:mod:`decice.sim.agent.vkubelet`), ``kubectl logs`` included.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import ipaddress
import json
import logging
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from decice import atomicfile
from decice.sim.agent import simnodes
from decice.sim.agent.simnodes import SimNode
from decice.sim.agent.vkubelet import VirtualKubelets
from decice.spec_model import SimNodeGroup
from decice_kube.client import MERGE_PATCH, ApiError, Client, Gone, gc_paused
from decice_scheduler.cache.resources import Resources, node_allocatable, pod_request

log = logging.getLogger("decice.sim.agent")

Heartbeat = Literal["auto", "on", "off"]
LEASE_NS = "kube-node-lease"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases"
BOUND = {"fieldSelector": "spec.nodeName!="}
GONE = frozenset({404, 409, 422})  # pod deleted, or replaced by another with the same name
USER_AGENT = "decice-sim-agent"
MAX_RETRIES = 8
WATCH_TIMEOUT = 300
# bookmarks arrive about once a minute; a silent stream longer than this is dead
WATCH_READ_TIMEOUT = WATCH_TIMEOUT + 60.0


def agent_client(kubeconfig: Path, *, max_in_flight: int = 64) -> Client:
    """The agent's API client: retries 429/5xx/transport errors with backoff and keeps
    at most ``max_in_flight`` requests in flight."""
    return Client.from_kubeconfig(
        kubeconfig, user_agent=USER_AGENT, max_retries=MAX_RETRIES, max_in_flight=max_in_flight
    )


# ================================================================== registration


@dataclass(frozen=True)
class RegisterResult:
    """Node names by what ``register_nodes`` did with them."""

    created: list[str]
    existing: list[str]
    deleted: list[str]


def load_groups(path: Path) -> list[SimNodeGroup]:
    """Node groups from a JSON file: a list of groups or ``{"nodes": [groups]}``."""
    data = json.loads(path.read_text())
    if isinstance(data, dict):
        data = data.get("nodes", [])
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of node groups or {{'nodes': [...]}}")
    return [SimNodeGroup.model_validate(item) for item in data]


async def register_nodes(
    client: Client, groups: Sequence[SimNodeGroup], *, now: datetime | None = None
) -> RegisterResult:
    """Create the missing Nodes of ``groups``; delete surplus ones of the same prefixes.

    Idempotent: an existing node is left exactly as it is (even when its group's capacity
    changed since). Surplus = ``<prefix>-<i>`` with ``i >= count`` and the sim labels.
    """
    nodes = list(simnodes.expand(groups))
    wanted = {n.name for n in nodes}
    items, _ = await client.list_all("/api/v1/nodes", {"labelSelector": simnodes.SIM_LABEL})
    present = {str(n["metadata"]["name"]): n for n in items}
    surplus = []
    for group in groups:
        for name, obj in present.items():
            labels = obj["metadata"].get("labels") or {}
            if (
                name not in wanted
                and labels.get(simnodes.GROUP_LABEL) == group.name_prefix
                and simnodes.index_of(group.name_prefix, name) is not None
            ):
                surplus.append(name)
    stamp = now or datetime.now(UTC)

    async def create(node: SimNode) -> bool:
        resp = await client.request(
            "POST",
            "/api/v1/nodes",
            body=simnodes.node_object(node, stamp),
            ok_status=frozenset({409}),
        )
        return resp.status != 409

    async def delete(name: str) -> None:
        await client.request("DELETE", f"/api/v1/nodes/{name}", ok_status=frozenset({404}))
        await client.request("DELETE", f"{LEASES}/{name}", ok_status=frozenset({404}))

    missing = [n for n in nodes if n.name not in present]
    created_flags = await asyncio.gather(*(create(n) for n in missing))
    await asyncio.gather(*(delete(n) for n in surplus))
    created = [n.name for n, made in zip(missing, created_flags, strict=True) if made]
    existing = [n.name for n in nodes if n.name not in set(created)]
    log.info(
        "nodes: %d created, %d existing, %d deleted", len(created), len(existing), len(surplus)
    )
    return RegisterResult(created, existing, sorted(surplus))


async def lifecycle_active(client: Client) -> bool:
    """Does admission taint new nodes not-ready (node-lifecycle machinery on)? Dry run."""
    probe = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"decice-sim-probe-{os.getpid()}"},
    }
    resp = await client.request(
        "POST", "/api/v1/nodes", body=probe, params={"dryRun": "All"}, ok_status=frozenset({409})
    )
    taints = ((resp.body or {}).get("spec") or {}).get("taints") or []
    return any(t.get("key") == "node.kubernetes.io/not-ready" for t in taints)


# ================================================================== agent state


@dataclass(slots=True)
class NodeState:
    name: str
    host_ip: str
    allocatable: Resources
    used: Resources = field(default_factory=Resources)


PodPhase = Literal["admitting", "running", "succeeded", "failed", "rejected", "deleting"]


@dataclass(slots=True)
class PodRecord:
    uid: str
    namespace: str
    name: str
    node: str
    request: Resources
    state: PodPhase
    holds: bool = False  # counted in its node's ``used``
    timer: asyncio.TimerHandle | None = None


@dataclass
class AgentStats:
    relists: int = 0
    last_relist: str | None = None
    events: int = 0
    writes: int = 0
    write_errors: int = 0
    heartbeats: int = 0


Action = tuple[Callable[..., Awaitable[None]], tuple[Any, ...]]


class NodeAgent:
    """State and behaviour of the simulated kubelets (see the module docstring)."""

    def __init__(
        self,
        client: Client,
        nodes: Sequence[SimNode],
        *,
        heartbeat: bool = False,
        lease_interval: float = 20.0,
        workers: int = 64,
        job_duration: float | None = simnodes.JOB_POD_DURATION,
        interlink_file: Path | None = None,
        kubelet_dir: Path | None = None,
    ) -> None:
        self.client = client
        self.job_duration = job_duration
        self.heartbeat = heartbeat
        self.lease_interval = lease_interval
        self.workers = workers
        self.nodes: dict[str, NodeState] = {}
        for node in nodes:
            fake = {"status": {"allocatable": simnodes.capacity_of(node.group)}}
            self.nodes[node.name] = NodeState(node.name, node.host_ip, node_allocatable(fake))
        self.pods: dict[str, PodRecord] = {}
        self.counts: Counter[str] = Counter()
        self.stats = AgentStats()
        self.queue: asyncio.Queue[Action] = asyncio.Queue()
        self.ready = asyncio.Event()
        self._next_ip = 1
        self.vk: VirtualKubelets | None = None
        if interlink_file is not None:  # virtual kubelet of plugin-backed nodes
            cert_dir = kubelet_dir or interlink_file.parent / "vkubelet"
            self.vk = VirtualKubelets(client, nodes, interlink_file, cert_dir, self.enqueue)

    # ------------------------------------------------------------ bookkeeping

    def _set_state(self, rec: PodRecord, state: PodPhase) -> None:
        self.counts[rec.state] -= 1
        rec.state = state
        self.counts[state] += 1

    def _hold(self, rec: PodRecord) -> None:
        if not rec.holds:
            node = self.nodes[rec.node]
            node.used = node.used.add(rec.request)
            rec.holds = True

    def _release(self, rec: PodRecord) -> None:
        if rec.timer is not None:
            rec.timer.cancel()
            rec.timer = None
        if rec.holds:
            node = self.nodes[rec.node]
            node.used = node.used.sub(rec.request)
            rec.holds = False

    def _forget(self, uid: str) -> None:
        rec = self.pods.pop(uid, None)
        if rec is not None:
            self._release(rec)
            self.counts[rec.state] -= 1

    def _pod_ip(self) -> str:
        size = simnodes.POD_NET.num_addresses - 2
        ip = ipaddress.IPv4Address(int(simnodes.POD_NET.network_address) + self._next_ip)
        self._next_ip = self._next_ip % size + 1
        return str(ip)

    def enqueue(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        self.queue.put_nowait((fn, args))

    # ------------------------------------------------------------ pod events

    def on_pod(self, kind: str, pod: Mapping[str, Any]) -> None:
        """Apply one pod event (ADDED/MODIFIED/DELETED) to the state; queue writes."""
        self.stats.events += 1
        spec = pod.get("spec") or {}
        node = self.nodes.get(spec.get("nodeName") or "")
        if node is None:
            return
        meta = pod["metadata"]
        uid = str(meta["uid"])
        if self.vk is not None and uid not in self.pods and self.vk.wants(pod):
            self.vk.on_pod(kind, pod)
            return
        if kind == "DELETED":
            self._forget(uid)
            return
        rec = self.pods.get(uid)
        phase = (pod.get("status") or {}).get("phase")
        if rec is None:
            rec = PodRecord(
                uid,
                str(meta.get("namespace")),
                str(meta["name"]),
                node.name,
                pod_request(pod),  # a request past any node's room: OutOf<resource>
                "admitting",
            )
            self.pods[uid] = rec
            self.counts["admitting"] += 1
            if not meta.get("deletionTimestamp"):
                if phase in ("Succeeded", "Failed"):  # seen after a restart or relist
                    self._set_state(rec, "succeeded" if phase == "Succeeded" else "failed")
                elif phase == "Running":
                    self._adopt(rec, pod)
                else:
                    self._admit(rec, pod, node)
                return
        if meta.get("deletionTimestamp"):
            if rec.state != "deleting":
                self._release(rec)
                self._set_state(rec, "deleting")
                self.enqueue(self._force_delete, rec)
            return
        if phase in ("Succeeded", "Failed") and rec.state == "running":
            # ended by someone else (an eviction, a test, a controller)
            self._release(rec)
            self._set_state(rec, "succeeded" if phase == "Succeeded" else "failed")

    def _admit(self, rec: PodRecord, pod: Mapping[str, Any], node: NodeState) -> None:
        verdict = simnodes.admission_failure(rec.request, node.allocatable, node.used)
        now = datetime.now(UTC)
        if verdict is not None:
            reason, message = verdict
            self._set_state(rec, "rejected")
            log.info("reject %s/%s on %s: %s", rec.namespace, rec.name, rec.node, message)
            self.enqueue(
                self._patch_status, rec, simnodes.rejected_status(pod, reason, message, now)
            )
            return
        self._hold(rec)
        self._set_state(rec, "running")
        patch = simnodes.running_status(pod, node.host_ip, self._pod_ip(), now)
        self.enqueue(self._patch_status, rec, patch)
        self._schedule_finish(rec, pod, now, 0.0)

    def _adopt(self, rec: PodRecord, pod: Mapping[str, Any]) -> None:
        """A pod already Running (agent restart): count it, resume its timer."""
        self._hold(rec)
        self._set_state(rec, "running")
        started_raw = (pod.get("status") or {}).get("startTime")
        started = datetime.now(UTC)
        if started_raw:
            with contextlib.suppress(ValueError):
                started = datetime.strptime(started_raw, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        elapsed = max(0.0, (datetime.now(UTC) - started).total_seconds())
        self._schedule_finish(rec, pod, started, elapsed)

    def _schedule_finish(
        self, rec: PodRecord, pod: Mapping[str, Any], started: datetime, elapsed: float
    ) -> None:
        work, warning = simnodes.workload_of(pod, self.job_duration)
        if warning:
            log.warning("%s/%s: %s (ignored)", rec.namespace, rec.name, warning)
        if work.duration is None:
            return
        # only the parts of the pod the final patch needs; the full JSON is not kept
        slim = {
            "metadata": {"uid": rec.uid},
            "spec": {
                "containers": [
                    {"name": c.get("name"), "image": c.get("image")}
                    for c in (pod.get("spec") or {}).get("containers") or ()
                ]
            },
        }
        delay = max(0.0, work.duration - elapsed)
        loop = asyncio.get_running_loop()
        rec.timer = loop.call_later(delay, self._finish, rec, slim, started, work.exit_code)

    def _finish(
        self, rec: PodRecord, pod: Mapping[str, Any], started: datetime, exit_code: int
    ) -> None:
        rec.timer = None
        if self.pods.get(rec.uid) is not rec or rec.state != "running":
            return
        self._release(rec)
        self._set_state(rec, "succeeded" if exit_code == 0 else "failed")
        patch = simnodes.finished_status(pod, started, datetime.now(UTC), exit_code)
        self.enqueue(self._patch_status, rec, patch)

    def relist(self, items: Sequence[Mapping[str, Any]]) -> None:
        """Replace the view of bound pods with a fresh LIST (see :class:`Relist`)."""
        relist = Relist(self)
        relist.page(items)
        relist.finish()

    # ------------------------------------------------------------ writes

    async def _patch_status(self, rec: PodRecord, patch: Mapping[str, Any]) -> None:
        path = f"/api/v1/namespaces/{rec.namespace}/pods/{quote(rec.name)}/status"
        resp = await self.client.request(
            "PATCH", path, body=patch, content_type=MERGE_PATCH, ok_status=GONE
        )
        if resp.status in GONE:
            log.debug(
                "%s/%s gone before its status patch (%d)", rec.namespace, rec.name, resp.status
            )

    async def _force_delete(self, rec: PodRecord) -> None:
        path = f"/api/v1/namespaces/{rec.namespace}/pods/{quote(rec.name)}"
        body = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": rec.uid},
        }
        await self.client.request("DELETE", path, body=body, ok_status=GONE)

    async def _worker(self) -> None:
        while True:
            fn, args = await self.queue.get()
            try:
                await fn(*args)
                self.stats.writes += 1
            except ApiError as exc:
                self.stats.write_errors += 1
                log.warning("write failed: %s", exc)
            except Exception:  # a bug must not silently kill a worker
                self.stats.write_errors += 1
                log.exception("write crashed")
            finally:
                self.queue.task_done()

    # ------------------------------------------------------------ sync

    async def sync_pods(self) -> None:
        """LIST + WATCH bound pods forever; relist on 410 and on errors."""
        backoff = 0.5
        while True:
            try:
                relist = Relist(self)
                with gc_paused():
                    rv = ""
                    pages = self.client.list_pages("/api/v1/pods", BOUND, 2000)
                    async for items, page_rv in pages:
                        relist.page(items)
                        rv = page_rv
                    relist.finish()
                del relist
                self.ready.set()
                while True:
                    events = self.client.watch(
                        "/api/v1/pods",
                        rv,
                        BOUND,
                        server_timeout=WATCH_TIMEOUT,
                        read_timeout=WATCH_READ_TIMEOUT,
                    )
                    async for event in events:
                        obj = event["object"]
                        rv = str(obj["metadata"].get("resourceVersion") or rv)
                        if event["type"] != "BOOKMARK":
                            self.on_pod(event["type"], obj)
                        backoff = 0.5
            except Gone:
                log.info("pod watch expired (410): relisting")
            except (ApiError, ValueError) as exc:
                log.warning("pod sync failed (%s); relisting in %.1f s", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    async def heartbeats(self) -> None:
        """Renew every node's Lease once per ``lease_interval``, spread over the interval."""
        names = sorted(self.nodes)
        now = datetime.now(UTC)

        async def ensure(name: str) -> None:
            await self.client.request(
                "POST", LEASES, body=simnodes.lease_object(name, now), ok_status=frozenset({409})
            )

        await asyncio.gather(*(ensure(n) for n in names))
        slices = max(1, int(self.lease_interval))
        tick = self.lease_interval / slices
        i = 0
        while True:
            started = time.monotonic()
            batch = names[i % slices :: slices]
            stamp = simnodes.micro_time(datetime.now(UTC))
            body = {"spec": {"renewTime": stamp}}

            async def renew(name: str, body: Mapping[str, Any] = body) -> None:
                try:
                    resp = await self.client.request(
                        "PATCH",
                        f"{LEASES}/{name}",
                        body=body,
                        content_type=MERGE_PATCH,
                        ok_status=frozenset({404}),
                    )
                    if resp.status == 404:
                        await ensure(name)
                    self.stats.heartbeats += 1
                except ApiError as exc:
                    log.warning("lease renewal of %s failed: %s", name, exc)

            await asyncio.gather(*(renew(n) for n in batch))
            i += 1
            await asyncio.sleep(max(0.0, tick - (time.monotonic() - started)))

    def status(self) -> dict[str, Any]:
        """The numbers written to the status file."""
        c = self.counts
        return {
            "pid": os.getpid(),
            "ready": self.ready.is_set(),
            "nodes": len(self.nodes),
            "pods": {
                "running": c["running"],
                "succeeded": c["succeeded"],
                "failed": c["failed"] + c["rejected"],
                "rejected": c["rejected"],
                "deleting": c["deleting"],
                "tracked": len(self.pods),
            },
            "queued_writes": self.queue.qsize(),
            "heartbeat": self.heartbeat,
            "relists": self.stats.relists,
            "last_relist": self.stats.last_relist,
            "events": self.stats.events,
            "writes": self.stats.writes,
            "write_errors": self.stats.write_errors,
            "heartbeats": self.stats.heartbeats,
            **({"interlink": self.vk.status()} if self.vk is not None else {}),
            "requests": self.client.requests,
            "retries": self.client.retries,
            "updated": simnodes.rfc3339(datetime.now(UTC)),
        }

    async def run(self, status_file: Path | None = None, status_interval: float = 2.0) -> None:
        """Serve until cancelled."""
        if self.vk is not None:  # backed nodes known before the first LIST is applied
            self.vk.check_file()
        tasks = [asyncio.create_task(self._worker()) for _ in range(self.workers)]
        tasks.append(asyncio.create_task(self.sync_pods()))
        if self.heartbeat:
            tasks.append(asyncio.create_task(self.heartbeats()))
        if self.vk is not None:
            tasks.append(asyncio.create_task(self.vk.run()))
        try:
            while True:
                for task in tasks:
                    if task.done() and not task.cancelled() and task.exception():
                        raise RuntimeError("agent task died") from task.exception()
                if status_file is not None:
                    write_status(status_file, self.status())
                await asyncio.sleep(status_interval)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if status_file is not None:
                write_status(status_file, {**self.status(), "ready": False, "stopped": True})


class Relist:
    """A fresh LIST applied page by page, holding only slim copies of pending pods.

    Pods no longer listed are forgotten (deleted during a watch gap), pods in a terminal
    phase, Running or being deleted are applied at once, and pending pods are admitted
    at the end, oldest first, like a restarting kubelet.
    """

    def __init__(self, agent: NodeAgent) -> None:
        self.agent = agent
        self.present: set[str] = set()
        self.pending: list[dict[str, Any]] = []

    def page(self, items: Sequence[Mapping[str, Any]]) -> None:
        nodes = self.agent.nodes
        vk = self.agent.vk
        for pod in items:
            meta = pod["metadata"]
            self.present.add(str(meta["uid"]))
            if (pod.get("spec") or {}).get("nodeName") not in nodes:
                continue
            if vk is not None and vk.wants(pod) and str(meta["uid"]) not in self.agent.pods:
                self.agent.on_pod("MODIFIED", pod)  # the whole pod: /create needs it
                continue
            phase = (pod.get("status") or {}).get("phase")
            if phase == "Pending" and not meta.get("deletionTimestamp"):
                self.pending.append(_slim(pod))
            else:
                self.agent.on_pod("MODIFIED", pod)

    def finish(self) -> None:
        agent = self.agent
        agent.stats.relists += 1
        agent.stats.last_relist = simnodes.rfc3339(datetime.now(UTC))
        for uid in [u for u in agent.pods if u not in self.present]:
            agent._forget(uid)
        if agent.vk is not None:
            agent.vk.forget_missing(self.present)
        for rec in agent.pods.values():
            if rec.state == "deleting":  # its force delete may have failed: try again
                agent.enqueue(agent._force_delete, rec)
        self.pending.sort(key=lambda p: p["metadata"].get("creationTimestamp") or "")
        for pod in self.pending:
            agent.on_pod("MODIFIED", pod)
        self.pending = []


_SPEC_KEYS = ("nodeName", "containers", "initContainers", "overhead", "resources")
_CONTAINER_KEYS = ("name", "image", "resources", "restartPolicy")


def _slim(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a pod that admission and the status patches read."""
    meta = pod["metadata"]
    spec = pod.get("spec") or {}
    slim_spec: dict[str, Any] = {k: spec[k] for k in _SPEC_KEYS if k in spec}
    for key in ("containers", "initContainers"):
        if key in slim_spec:
            slim_spec[key] = [
                {k: c[k] for k in _CONTAINER_KEYS if k in c} for c in slim_spec[key] or ()
            ]
    slim_meta = {
        k: meta[k]
        for k in ("uid", "name", "namespace", "creationTimestamp", "annotations", "ownerReferences")
        if k in meta
    }
    return {"metadata": slim_meta, "spec": slim_spec, "status": {"phase": "Pending"}}


def write_status(path: Path, data: Mapping[str, Any]) -> None:
    """Write the status file (0644) atomically (:func:`decice.atomicfile.write`)."""
    atomicfile.write(path, json.dumps(data, indent=1) + "\n")


# ================================================================== entry points


async def run_agent(
    kubeconfig: Path,
    groups: Sequence[SimNodeGroup],
    *,
    heartbeat: Heartbeat = "auto",
    lease_interval: float = 20.0,
    max_in_flight: int = 64,
    status_file: Path | None = None,
    stop: asyncio.Event | None = None,
    job_duration: float | None = simnodes.JOB_POD_DURATION,
    interlink_file: Path | None = None,
    kubelet_dir: Path | None = None,
) -> None:
    """Register the nodes, then play their kubelets until ``stop`` is set (or cancelled)."""
    client = agent_client(kubeconfig, max_in_flight=max_in_flight)
    try:
        t0 = time.monotonic()
        result = await register_nodes(client, groups)
        log.info(
            "registered %d nodes in %.1f s",
            len(result.created) + len(result.existing),
            time.monotonic() - t0,
        )
        beat = heartbeat == "on" or (heartbeat == "auto" and await lifecycle_active(client))
        log.info("lease heartbeats %s", "on" if beat else "off")
        gc.collect()
        gc.freeze()  # what exists now lives for the whole run: keep it out of GC passes
        agent = NodeAgent(
            client,
            list(simnodes.expand(groups)),
            heartbeat=beat,
            lease_interval=lease_interval,
            workers=max_in_flight,
            job_duration=job_duration,
            interlink_file=interlink_file,
            kubelet_dir=kubelet_dir,
        )
        runner = asyncio.create_task(agent.run(status_file))
        waiter = asyncio.create_task((stop or asyncio.Event()).wait())
        done, _ = await asyncio.wait({runner, waiter}, return_when=asyncio.FIRST_COMPLETED)
        for task in (runner, waiter):
            task.cancel()
        await asyncio.gather(runner, waiter, return_exceptions=True)
        if runner in done and runner.exception() is not None:
            raise runner.exception()  # type: ignore[misc]
    finally:
        await client.close()


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m decice.sim.agent.run", description="Node agent of the decice simulator."
    )
    parser.add_argument("--kubeconfig", type=Path, required=True, help="admin kubeconfig")
    parser.add_argument(
        "--nodes-file",
        type=Path,
        required=True,
        help="JSON: a list of node groups, or {'nodes': [...]}",
    )
    parser.add_argument(
        "--status-file", type=Path, help="JSON counts, rewritten atomically every 2 s"
    )
    parser.add_argument(
        "--heartbeat",
        choices=("auto", "on", "off"),
        default="auto",
        help="renew node Leases (auto: when admission taints new nodes not-ready)",
    )
    parser.add_argument(
        "--lease-interval", type=float, default=20.0, help="seconds between renewals of a Lease"
    )
    parser.add_argument(
        "--max-in-flight", type=int, default=64, help="concurrent API requests (HTTP/2 streams)"
    )
    parser.add_argument(
        "--job-duration",
        type=_job_duration,
        default=simnodes.JOB_POD_DURATION,
        help="how long a Job's pod without sim annotations runs before it succeeds "
        "(Go duration, e.g. 2s; 'off': it runs forever)",
    )
    parser.add_argument(
        "--interlink-file",
        type=Path,
        help="JSON endpoint file naming the nodes an interLink plugin backs (polled; "
        "see decice.sim.agent.vkubelet); without it every node is simulated",
    )
    parser.add_argument(
        "--kubelet-dir",
        type=Path,
        help="directory (0700) for the kubelet endpoint's self-signed certificate "
        "(default: <interlink file's directory>/vkubelet)",
    )
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def _job_duration(text: str) -> float | None:
    """``--job-duration``: a Go duration in seconds, or None for ``off``."""
    if text.strip().lower() == "off":
        return None
    try:
        return simnodes.parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit code."""
    args = _parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        groups = load_groups(args.nodes_file)
        list(simnodes.expand(groups))  # validate names and sizes up front
    except (OSError, ValueError) as exc:
        log.error("bad nodes file: %s", exc)
        return 2
    gc.set_threshold(50_000, 20, 20)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run_agent(
            args.kubeconfig,
            groups,
            heartbeat=args.heartbeat,
            lease_interval=args.lease_interval,
            max_in_flight=args.max_in_flight,
            status_file=args.status_file,
            stop=stop,
            job_duration=args.job_duration,
            interlink_file=args.interlink_file,
            kubelet_dir=args.kubelet_dir,
        )

    try:
        asyncio.run(serve())
    except (ApiError, OSError) as exc:
        log.error("agent failed: %s", exc)
        return 1
    log.info("agent stopped")
    return 0
