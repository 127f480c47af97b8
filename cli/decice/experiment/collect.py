"""One arm of one repetition against the cluster: submit the workload on its schedule in a
fresh namespace, watch every pod to its end, and keep what happened.

Times are seconds after the arm's start (``t0``) on this machine's monotonic clock, as
this watcher observed them: ``submitted`` (the create was sent), ``created`` (the API
answered the create, or the watch saw the pod, whichever came first), ``scheduled``
(first seen with a node), ``running``, ``finished`` (Succeeded or Failed). The API's
own timestamps (1 s resolution) are kept beside them in ``api``.
Events of the namespace are counted per pod and reason (``FailedScheduling`` with its
last message). Everything goes through decice's one Kubernetes client
(:mod:`decice_kube.client`).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from decice.experiment.workload import EXPERIMENT_LABEL, PlannedPod
from decice_kube.client import ApiError, Client, Gone

CREATE_IN_FLIGHT = 16  # concurrent pod creates (a burst)
TERMINAL = frozenset({"Succeeded", "Failed"})
NAMESPACE_GONE_TIMEOUT = 180.0
SERVICE_ACCOUNT_TIMEOUT = 60.0


@dataclass
class PodRecord:
    """What happened to one pod (times in seconds after the arm's start)."""

    name: str
    group: str = ""
    shape: str = ""
    cpu: str = ""
    gpu: int = 0
    planned_at: float = 0.0
    submitted: float | None = None
    created: float | None = None
    scheduled: float | None = None
    running: float | None = None
    finished: float | None = None
    node: str = ""
    phase: str = ""
    reason: str = ""
    message: str = ""
    events: dict[str, int] = field(default_factory=dict)
    api: dict[str, str] = field(default_factory=dict)
    # an HPC pod's SLURM job (interLink): from its containers' containerID
    # "interlink://<job>/<container>", as the sim's virtual kubelet reports it
    slurm_job: str = ""
    # create -> bound on the API server's own clock (the sim's audit log, sim.audit_log)
    api_bound: float | None = None


@dataclass
class ArmRun:
    """One arm in one repetition: its pods and how it ended."""

    repetition: int
    arm: str
    scheduler: str
    namespace: str
    status: str = "pending"  # pending, running, complete, timeout, interrupted, failed
    started: str = ""  # wall clock (UTC, ISO) at t0
    seconds: float = 0.0
    error: str = ""
    pods: dict[str, PodRecord] = field(default_factory=dict)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    # decice-scheduler's counters that moved during the arm (sim only; see run.py)
    scheduler_metrics: dict[str, float] = field(default_factory=dict)
    # the settings decice-scheduler ran this arm with, when an arm of the experiment sets
    # some (arms[].decice_scheduler)
    scheduler_settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["pods"] = [asdict(p) for p in self.pods.values()]
        return data


Progress = Callable[[int, int, int], None]  # pods scheduled, pods ended, pods in all


def _node_summary(node: dict[str, Any]) -> dict[str, Any]:
    meta = node.get("metadata") or {}
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return {
        "name": meta.get("name", ""),
        "group": (meta.get("labels") or {}).get("decice.io/sim-group", ""),
        "cpu": str(alloc.get("cpu", "0")),
        "memory": str(alloc.get("memory", "0")),
        "gpu": str(alloc.get("nvidia.com/gpu", "0")),
    }


class _Watcher:
    """Keeps ``run.pods`` up to date from pod and event watches of the namespace."""

    def __init__(self, client: Client, run: ArmRun, t0: float, progress: Progress) -> None:
        self.client = client
        self.run = run
        self.t0 = t0
        self.progress = progress
        self.all_done = asyncio.Event()
        self.submitted_all = False
        self.scheduled = 0  # pods seen with a node
        self.ended = 0  # pods with a `finished` time

    def now(self) -> float:
        return asyncio.get_running_loop().time() - self.t0

    def tell(self) -> None:
        """Progress out; the arm is done once every pod was submitted and has ended."""
        self.progress(self.scheduled, self.ended, len(self.run.pods))
        self.check_done()

    def check_done(self) -> None:
        if self.submitted_all and self.ended == len(self.run.pods):
            self.all_done.set()

    def see_pod(self, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        record = self.run.pods.get(name)
        if record is None:
            return
        now = self.now()
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        node = spec.get("nodeName") or ""
        phase = status.get("phase") or ""
        if record.created is None or now < record.created:
            record.created = now  # the watch saw it before the create's answer came back
        changed = False
        if node and record.scheduled is None:
            record.scheduled = now
            self.scheduled += 1
            changed = True
        record.node = node or record.node
        if phase == "Running" and record.running is None:
            record.running = now
        if phase in TERMINAL and record.finished is None:
            record.finished = now
            self.ended += 1
            if record.scheduled is not None and record.running is None:
                record.running = now
            changed = True
        record.phase = phase
        _api_times(record, obj)
        if changed:
            self.tell()

    async def pods(self, resource_version: str) -> None:
        path = f"/api/v1/namespaces/{self.run.namespace}/pods"
        rv = resource_version
        while True:
            try:
                async for event in self.client.watch(path, rv, server_timeout=60):
                    obj = event.get("object") or {}
                    if event.get("type") == "BOOKMARK":
                        rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                        continue
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    self.see_pod(obj)
            except Gone:
                items, rv = await self.client.list_all(path)
                for item in items:
                    self.see_pod(item)
            except ApiError:
                await asyncio.sleep(0.5)

    async def events(self) -> None:
        path = f"/api/v1/namespaces/{self.run.namespace}/events"
        items, rv = await self.client.list_all(path)
        seen: set[str] = set()
        for item in items:
            self._see_event(item, seen)
        while True:
            try:
                async for event in self.client.watch(path, rv, server_timeout=60):
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if event.get("type") in {"ADDED", "MODIFIED"}:
                        self._see_event(obj, seen)
            except Gone:
                items, rv = await self.client.list_all(path)
            except ApiError:
                await asyncio.sleep(0.5)

    def _see_event(self, obj: dict[str, Any], seen: set[str]) -> None:
        uid = (obj.get("metadata") or {}).get("uid", "")
        if uid in seen:
            return
        seen.add(uid)
        involved = obj.get("involvedObject") or obj.get("regarding") or {}
        record = self.run.pods.get(involved.get("name", ""))
        if record is None or involved.get("kind") not in {None, "Pod"}:
            return
        reason = str(obj.get("reason") or "")
        record.events[reason] = record.events.get(reason, 0) + 1
        if reason == "FailedScheduling":
            record.message = str(obj.get("message") or obj.get("note") or "")[:500]


# a SLURM job id (pilot mode: <job>.<step>); anything else is not taken (cluster input)
_SLURM_JOB = re.compile(r"interlink://([0-9]{1,20}(?:[._+][0-9]{1,20}){0,2})/[^/]*\Z")


def slurm_job(container_id: object) -> str:
    """The SLURM job of a containerID ``interlink://<job>/<container>``, else ""."""
    found = _SLURM_JOB.match(container_id) if isinstance(container_id, str) else None
    return found.group(1) if found else ""


def _api_times(record: PodRecord, obj: dict[str, Any]) -> None:
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    api = record.api
    if meta.get("creationTimestamp"):
        api["created"] = meta["creationTimestamp"]
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            if cond.get("status") == "True" and cond.get("lastTransitionTime"):
                api["scheduled"] = cond["lastTransitionTime"]
            elif cond.get("status") == "False":
                record.reason = str(cond.get("reason") or record.reason)
                record.message = str(cond.get("message") or record.message)[:500]
    if status.get("startTime"):
        api["started"] = status["startTime"]
    for container in status.get("containerStatuses") or []:
        ended = ((container.get("state") or {}).get("terminated") or {}).get("finishedAt")
        if ended:
            api["finished"] = ended
        job = slurm_job(container.get("containerID"))
        if job:
            record.slurm_job = job
    if status.get("reason"):
        record.reason = str(status["reason"])


async def _submit(
    client: Client,
    watcher: _Watcher,
    plans: list[PlannedPod],
    manifests: dict[str, dict[str, Any]],
) -> None:
    loop = asyncio.get_running_loop()
    slots = asyncio.Semaphore(CREATE_IN_FLIGHT)
    run = watcher.run
    path = f"/api/v1/namespaces/{run.namespace}/pods"

    async def create(plan: PlannedPod) -> None:
        record = run.pods[plan.name]
        async with slots:
            record.submitted = watcher.now()
            try:
                status, body = await client.request("POST", path, body=manifests[plan.name])
            except ApiError as exc:
                status, body = 0, {"message": str(exc)}
            answered = watcher.now()
            record.created = answered if record.created is None else min(record.created, answered)
        if not 200 <= status < 300:
            record.finished = record.created
            watcher.ended += 1
            record.phase = "NotCreated"
            record.reason = f"HTTP {status}"
            record.message = str((body or {}).get("message", ""))[:500]
            watcher.tell()

    pending: list[asyncio.Task[None]] = []
    for plan in plans:
        delay = watcher.t0 + plan.at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        pending.append(asyncio.create_task(create(plan)))
    await asyncio.gather(*pending)
    watcher.submitted_all = True
    watcher.check_done()


async def _final_read(client: Client, watcher: _Watcher) -> None:
    """One LIST at the end: API timestamps and reasons of every pod (also those a
    watch missed)."""
    items, _rv = await client.list_all(f"/api/v1/namespaces/{watcher.run.namespace}/pods")
    for item in items:
        name = (item.get("metadata") or {}).get("name", "")
        record = watcher.run.pods.get(name)
        if record is not None:
            _api_times(record, item)
            record.node = ((item.get("spec") or {}).get("nodeName")) or record.node
            record.phase = ((item.get("status") or {}).get("phase")) or record.phase


async def execute(
    client: Client,
    run: ArmRun,
    plans: list[PlannedPod],
    manifests: dict[str, dict[str, Any]],
    *,
    experiment_id: str,
    timeout: float,
    progress: Progress,
    token_secret: bool = False,
) -> None:
    """Run ``plans`` in ``run.namespace`` (created here) until every pod ended or
    ``timeout``; ``run`` is filled as it goes (a caller that is interrupted keeps what
    was seen). The namespace is left for :func:`delete_namespace`."""
    for plan in plans:
        run.pods[plan.name] = PodRecord(
            name=plan.name,
            group=plan.group,
            shape=plan.shape,
            cpu=plan.cpu,
            gpu=plan.gpu,
            planned_at=plan.at,
        )
    body = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": run.namespace, "labels": {EXPERIMENT_LABEL: experiment_id}},
    }
    await client.request("POST", "/api/v1/namespaces", body=body, ok_status=())
    await _service_account_ready(client, run.namespace, token_secret=token_secret)
    nodes, _ = await client.list_all("/api/v1/nodes")
    run.nodes = [_node_summary(n) for n in nodes]
    _items, rv = await client.list_all(f"/api/v1/namespaces/{run.namespace}/pods")
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    run.started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    run.status = "running"
    watcher = _Watcher(client, run, t0, progress)
    tasks = [
        asyncio.create_task(watcher.pods(rv)),
        asyncio.create_task(watcher.events()),
        asyncio.create_task(_submit(client, watcher, plans, manifests)),
    ]
    submit = tasks[2]
    done_wait = asyncio.create_task(watcher.all_done.wait())
    try:
        # every pod ended (which needs the submitter done), the submitter failed, or timeout
        await asyncio.wait(
            [done_wait, submit], timeout=timeout, return_when=asyncio.FIRST_EXCEPTION
        )
        if submit.done() and submit.exception() is not None:
            raise submit.exception()  # type: ignore[misc]
        run.status = "complete" if watcher.all_done.is_set() else "timeout"
        await _final_read(client, watcher)
    finally:
        run.seconds = round(loop.time() - t0, 3)
        for task in [*tasks, done_wait]:
            task.cancel()
        await asyncio.gather(*tasks, done_wait, return_exceptions=True)


async def _service_account_ready(client: Client, namespace: str, *, token_secret: bool) -> None:
    """Wait for the namespace's ``default`` ServiceAccount (pods are refused until the
    controller made it) and, with ``token_secret`` (Kubernetes before 1.24), its token
    Secret."""
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SERVICE_ACCOUNT_TIMEOUT
    while True:
        status, body = await client.request("GET", path)
        if status == 200 and (not token_secret or (body or {}).get("secrets")):
            return
        if loop.time() > deadline:
            raise ApiError("GET", path, status, f"no usable default ServiceAccount in {namespace}")
        await asyncio.sleep(0.1)


async def delete_namespace(client: Client, namespace: str, *, wait: bool = True) -> None:
    """Delete ``namespace`` and (``wait``) see it gone. Its pods (all the experiment's)
    are deleted first at once with grace 0: the namespace controller alone deletes them
    gracefully, one by one, each waiting for its kubelet (two minutes for 1000 pods on the
    sim). They are deleted so once more after the namespace's own delete: a create that
    was in flight (an interrupted arm's) lands between the two, and once the namespace is
    terminating no create is admitted."""
    path = f"/api/v1/namespaces/{namespace}"
    force = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    await client.request("DELETE", f"{path}/pods", body=force, ok_status={404})
    await client.request("DELETE", path, ok_status={404})
    await client.request("DELETE", f"{path}/pods", body=force, ok_status={404})
    if not wait:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + NAMESPACE_GONE_TIMEOUT
    while loop.time() < deadline:
        status, _ = await client.request("GET", path)
        if status == 404:
            return
        await asyncio.sleep(0.5)
    raise ApiError(
        "DELETE", path, 0, f"namespace {namespace} still there after {NAMESPACE_GONE_TIMEOUT:.0f} s"
    )


async def leftover_namespaces(client: Client) -> list[str]:
    """Namespaces an earlier, killed experiment run left (they carry the label)."""
    items, _ = await client.list_all("/api/v1/namespaces", {"labelSelector": EXPERIMENT_LABEL})
    return sorted((i.get("metadata") or {}).get("name", "") for i in items)
