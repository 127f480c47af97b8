"""The sim node agent as virtual kubelet of the virtual HPC nodes an interLink plugin backs.

The endpoint file (``<state dir>/sim/interlink.json``, see
:func:`decice.sim.agent.vkmodel.parse_endpoints`) names the backed nodes. The agent checks it
every ``file_interval`` seconds (by mtime, size and inode): a missing file means no
backed node; a file that does not parse is logged once and ignored (the previous
endpoints stay) until it changes. Nodes not in the file keep the simulated behaviour.

For a pod bound to a backed node (:class:`VirtualKubelets`), per node in one loop:

- a new pod is first looked up with ``/status`` (after an agent restart the plugin may
  already run it: then it is only followed, never submitted twice); an unknown Pending
  pod is submitted with ``POST /create`` (RetrievedPodData with the configMaps and
  secrets it refers to, read from the API; a missing one keeps it Pending with the
  containers waiting ``CreateContainerConfigError`` and is retried); an unknown pod
  that already ran is marked Failed (``ProviderLost``);
- a refused ``/create`` (an HTTP error answer) makes the pod Failed with the plugin's
  reason and message; transport errors are retried;
- ``GET /status`` for all followed pods of the node every ``poll_interval`` seconds
  (one request): the pod's phase and container statuses follow the plugin's answer
  (:func:`decice.sim.agent.vkmodel.remote_status`) until it is terminal;
- a pod being deleted (or deleted at once, as terminal pods are): ``POST /delete``,
  then the force delete a kubelet does (retried for ``delete_grace`` seconds while the
  plugin is unreachable or answers 5xx, then force-deleted anyway with a warning);
- ``GET /status`` with an empty list is interLink's ping; an answer that is a
  PingResponse with ``resources`` sets the node's capacity (and allocatable), checked
  again every ``ping_interval`` seconds.

``kubectl logs``: the agent serves HTTPS on 127.0.0.1 (a self-signed certificate in
``cert_dir``; the sim's apiserver runs without ``--kubelet-certificate-authority`` and
so does not verify kubelet certificates) and points each backed node's
``status.daemonEndpoints.kubeletEndpoint.Port`` and addresses (InternalIP and Hostname:
127.0.0.1) at it. ``GET /containerLogs/{ns}/{pod}/{container}`` answers the plugin's
``/getLogs`` text (tailLines and limitBytes applied again locally). With ``follow`` the
answer is chunked: the agent reads the whole log again every ``FOLLOW_EVERY`` seconds
and sends what it added (``vkmodel.log_growth``) until the pod has ended (then what the
last read added), ``limitBytes`` are sent, or the client goes away. The endpoint is
not authenticated: the apiserver presents no client certificate (no
``--kubelet-client-certificate``); it listens on loopback only. A node that stops being
backed gets its simulated address, port and capacity back.

Secrets are sent to the plugin only; no log line carries their values or a token.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import ssl
import stat
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, InitVar, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

from decice.interlink import api
from decice.sim.agent import simnodes, vkmodel
from decice.sim.agent.simnodes import SimNode
from decice.sim.agent.vkmodel import Endpoint, MissingRef
from decice_kube import web
from decice_kube.client import MERGE_PATCH, ApiError, Client

log = logging.getLogger("decice.sim.vkubelet")

GONE = frozenset({404, 409, 422})
LOOPBACK = "127.0.0.1"
FOLLOW_EVERY = 1.0  # `kubectl logs -f`: the log is read again this often
FOLLOW_ENDED = frozenset({"terminal", "deleting", "done"})  # states after which no more log
CREATE_TIMEOUT = 120.0
REQUEST_TIMEOUT = 30.0
LOST_AFTER = 5  # consecutive /status answers without a followed pod
MAX_CONCURRENT = 8  # concurrent /create or /delete requests per node

Enqueue = Callable[..., None]
VkState = Literal["check", "create", "tracked", "terminal", "deleting", "done"]


# answers that may go away by themselves (token fixed, service back): asked again
TRANSIENT = frozenset({401, 404, 408, 429, 503, 504})
# /delete answers that mean "nothing (more) to delete"
DELETE_DONE = frozenset({400, 404, 422})


class PluginError(Exception):
    """The plugin could not be asked (transport error, token file): retry later."""


class PluginRefused(Exception):
    """The plugin answered an HTTP error (``status``; ``text``: its one-line reason)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status} {' '.join(text.split())[:300]}".rstrip())
        self.status, self.text = status, text

    @property
    def transient(self) -> bool:
        return self.status in TRANSIENT


# ================================================================== plugin client


class PluginClient:
    """HTTP client of one plugin (interLink's plugin API; JSON bodies, GET with a body)."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._http = web.Service(endpoint.url)

    async def close(self) -> None:
        await self._http.aclose()

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        path = self.endpoint.token_file
        if path is None:
            return headers
        try:
            info = path.stat()
            problem = vkmodel.check_token_file(path, info.st_mode, stat.S_ISREG(info.st_mode))
            if problem:
                raise PluginError(problem)
            token = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise PluginError(f"token file {path}: {exc.strerror or exc}") from exc
        if not token:
            raise PluginError(f"token file {path} is empty")
        headers["Authorization"] = f"Bearer {token}"
        return headers

    async def call(
        self, method: str, path: str, body: Any, timeout: float = REQUEST_TIMEOUT
    ) -> web.Reply:
        """One request; PluginError on transport errors, PluginRefused on HTTP errors."""
        content = vkmodel.json_bytes(body)
        try:
            resp = await self._http.request(method, path, content, self._headers(), timeout)
        except web.WebError as exc:
            raise PluginError(str(exc)) from exc
        if resp.status >= 400:
            raise PluginRefused(resp.status, resp.text)
        return resp

    async def create(self, data: Mapping[str, Any], uid: str) -> str:
        resp = await self.call("POST", "/create", data, timeout=CREATE_TIMEOUT)
        try:
            return vkmodel.parse_create(json.loads(resp.content), uid)
        except ValueError as exc:
            raise PluginError(f"/create answer: {exc}") from exc

    async def delete(self, pod: Mapping[str, Any]) -> None:
        await self.call("POST", "/delete", vkmodel.status_request_pods([pod])[0])

    async def status(self, pods: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        resp = await self.call("GET", "/status", vkmodel.status_request_pods(pods))
        try:
            return vkmodel.parse_statuses(
                json.loads(resp.content) if resp.content.strip() else None
            )
        except ValueError as exc:
            raise PluginError(f"/status answer: {exc}") from exc

    async def ping(self) -> Any:
        resp = await self.call("GET", "/status", [])
        try:
            return json.loads(resp.content)
        except ValueError:
            return resp.text

    async def logs(self, request: Mapping[str, Any]) -> str:
        resp = await self.call("GET", "/getLogs", request)
        return resp.text


# ================================================================== state


@dataclass(slots=True)
class BackedPod:
    uid: str
    namespace: str
    name: str
    node: str
    pod: dict[str, Any]
    state: VkState
    jid: str = ""
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    last_key: str = ""
    misses: int = 0
    deleted: bool = False  # gone from the API already: /delete only
    delete_since: float = 0.0
    waiting: str = ""  # last config-wait message patched


@dataclass(slots=True)
class BackedNode:
    endpoint: Endpoint
    client: PluginClient
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    last_poll: float = 0.0
    last_ping: float = 0.0
    error: str = ""  # last error logged (each distinct one once)
    capacity: dict[str, str] | None = None


@dataclass(slots=True)
class LogFollow:
    """A ``kubectl logs -f`` being answered: what was read so far and what may still go."""

    uid: str
    node: BackedNode
    request: dict[str, Any]  # the whole log: no tail, no byte limit
    seen: str
    left: int | None  # bytes still to send under limitBytes; None: no limit


def _chunk(data: bytes) -> bytes:
    """One chunk of a chunked HTTP/1.1 body."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


@dataclass
class VkStats:
    creates: int = 0
    create_refused: int = 0
    deletes: int = 0
    status_calls: int = 0
    plugin_errors: int = 0
    patches: int = 0
    log_requests: int = 0
    file_errors: int = 0


@dataclass(eq=False, repr=False)
class VirtualKubelets:
    """The virtual kubelets of the backed nodes (see the module docstring)."""

    client: Client
    nodes: InitVar[Sequence[SimNode]]
    endpoint_file: Path
    cert_dir: Path
    enqueue: Enqueue
    _: KW_ONLY
    poll_interval: float = 1.5
    file_interval: float = 2.0
    ping_interval: float = 60.0
    delete_grace: float = 30.0
    sim_nodes: dict[str, SimNode] = field(init=False)
    follow_every: float = field(init=False, default=FOLLOW_EVERY)
    backed: dict[str, BackedNode] = field(init=False, default_factory=dict)
    pods: dict[str, BackedPod] = field(init=False, default_factory=dict)
    by_name: dict[tuple[str, str], str] = field(init=False, default_factory=dict)
    stats: VkStats = field(init=False, default_factory=VkStats)
    port: int | None = field(init=False, default=None)
    _server: asyncio.Server | None = field(init=False, default=None)
    _file_sig: tuple[int, int, int] | None = field(init=False, default=None)
    _tasks: set[asyncio.Task[Any]] = field(init=False, default_factory=set)

    def __post_init__(self, nodes: Sequence[SimNode]) -> None:
        self.sim_nodes = {n.name: n for n in nodes}

    # ------------------------------------------------------------ pod events (sync)

    def wants(self, pod: Mapping[str, Any]) -> bool:
        """Is this pod ours: followed already, or new on a backed node?"""
        uid = str(pod["metadata"]["uid"])
        return uid in self.pods or (pod.get("spec") or {}).get("nodeName") in self.backed

    def on_pod(self, kind: str, pod: Mapping[str, Any]) -> None:
        """Apply one pod event for a pod :meth:`wants`."""
        meta = pod["metadata"]
        uid = str(meta["uid"])
        bp = self.pods.get(uid)
        if kind == "DELETED":
            if bp is not None and bp.state == "done":
                self._forget(bp)
            elif bp is not None:
                bp.deleted = True
                self._begin_delete(bp)
            return
        if bp is not None and bp.state == "done":
            return  # force-deleted: waiting for the DELETED event
        phase = (pod.get("status") or {}).get("phase")
        if bp is None:
            node = str((pod.get("spec") or {}).get("nodeName"))
            terminal = phase in ("Succeeded", "Failed")
            bp = BackedPod(
                uid,
                str(meta.get("namespace")),
                str(meta["name"]),
                node,
                dict(pod),
                "terminal" if terminal else "check",
            )
            started = (pod.get("status") or {}).get("startTime")
            if started:
                with contextlib.suppress(ValueError):
                    bp.started = datetime.strptime(started, "%Y-%m-%dT%H:%M:%SZ").replace(
                        tzinfo=UTC
                    )
            self.pods[uid] = bp
            self.by_name[(bp.namespace, bp.name)] = uid
        else:
            bp.pod = dict(pod)
            if phase in ("Succeeded", "Failed") and bp.state in ("check", "create", "tracked"):
                bp.state = "terminal"  # ended by someone else
        if meta.get("deletionTimestamp"):
            self._begin_delete(bp)
            return
        if bp.state in ("check", "create"):
            self._wake(bp.node)

    def _begin_delete(self, bp: BackedPod) -> None:
        if bp.state in ("deleting", "done"):
            return
        bp.state = "deleting"
        bp.delete_since = time.monotonic()
        self._wake(bp.node)
        if bp.node not in self.backed:  # nobody to tell: what a kubelet does
            self._finish_delete(bp)

    def forget_missing(self, present: Iterable[str]) -> None:
        """After a relist: pods no longer listed were deleted meanwhile."""
        keep = set(present)
        for bp in list(self.pods.values()):
            if bp.uid not in keep and bp.state == "done":
                self._forget(bp)
            elif bp.uid not in keep:
                bp.deleted = True
                self._begin_delete(bp)
            elif bp.state == "done":  # its force delete may have failed: try again
                self.enqueue(self._force_delete, bp.namespace, bp.name, bp.uid)

    def _forget(self, bp: BackedPod) -> None:
        self.pods.pop(bp.uid, None)
        if self.by_name.get((bp.namespace, bp.name)) == bp.uid:
            del self.by_name[(bp.namespace, bp.name)]

    def _wake(self, node: str) -> None:
        backed = self.backed.get(node)
        if backed is not None:
            backed.wake.set()

    # ------------------------------------------------------------ writes (agent queue)

    def _patch(self, bp: BackedPod, patch: Mapping[str, Any]) -> None:
        self.stats.patches += 1
        self.enqueue(self._patch_status, bp.namespace, bp.name, patch)

    async def _patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/status"
        await self.client.request(
            "PATCH", path, body=patch, content_type=MERGE_PATCH, ok_status=GONE
        )

    async def _force_delete(self, namespace: str, name: str, uid: str) -> None:
        body = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": uid},
        }
        await self.client.request(
            "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body=body, ok_status=GONE
        )

    async def _patch_node(self, name: str, patch: Mapping[str, Any]) -> None:
        await self.client.request(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            body=patch,
            content_type=MERGE_PATCH,
            ok_status=frozenset({404}),
        )

    def _finish_delete(self, bp: BackedPod) -> None:
        """Force-delete (kept as ``done`` until the DELETED event), or forget a pod the
        API deleted already."""
        bp.state = "done"
        if bp.deleted:
            self._forget(bp)
        else:
            self.enqueue(self._force_delete, bp.namespace, bp.name, bp.uid)

    # ------------------------------------------------------------ endpoint file

    def check_file(self) -> None:
        """Re-read the endpoint file when it changed; apply the node set it names."""
        try:
            info = self.endpoint_file.stat()
        except FileNotFoundError:
            if self._file_sig is not None or self.backed:
                log.info("%s is gone: no node is backed by an interLink plugin", self.endpoint_file)
            self._file_sig = None
            self._apply({})
            return
        except OSError as exc:
            log.error("cannot read %s: %s", self.endpoint_file, exc)
            return
        sig = (info.st_mtime_ns, info.st_size, info.st_ino)
        if sig == self._file_sig:
            return
        self._file_sig = sig
        try:
            text = self.endpoint_file.read_text(encoding="utf-8")
            endpoints = vkmodel.parse_endpoints(text, str(self.endpoint_file))
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            self.stats.file_errors += 1
            log.error("%s; ignored until the file changes", exc)
            return
        unknown = sorted(set(endpoints) - set(self.sim_nodes))
        if unknown:
            log.warning(
                "%s names nodes that are not simulated nodes (ignored): %s",
                self.endpoint_file,
                ", ".join(unknown),
            )
        self._apply({k: v for k, v in endpoints.items() if k in self.sim_nodes})

    def _apply(self, endpoints: Mapping[str, Endpoint]) -> None:
        for name in list(self.backed):
            if endpoints.get(name) != self.backed[name].endpoint:
                self._detach(name, restore=name not in endpoints)
        for name, endpoint in endpoints.items():
            if name not in self.backed:
                self._attach(endpoint)

    def _attach(self, endpoint: Endpoint) -> None:
        node = BackedNode(endpoint, PluginClient(endpoint))
        self.backed[endpoint.node] = node
        log.info("node %s: backed by the interLink plugin at %s", endpoint.node, endpoint.url)
        node.task = self._spawn(self._node_loop(node))

    def _detach(self, name: str, *, restore: bool) -> None:
        node = self.backed.pop(name)
        if node.task is not None:
            node.task.cancel()
        self._spawn(node.client.close())
        if restore:
            log.info("node %s: no longer backed; simulated again for new pods", name)
            sim = self.sim_nodes[name]
            patch = vkmodel.node_patch(10250, sim.host_ip, name, simnodes.capacity_of(sim.group))
            self.enqueue(self._patch_node, name, patch)
            for bp in list(self.pods.values()):
                if bp.node == name and bp.state == "deleting":
                    self._finish_delete(bp)

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------ per-node loop

    async def _node_loop(self, node: BackedNode) -> None:
        name = node.endpoint.node
        await self._ensure_server()
        self.enqueue(
            self._patch_node, name, vkmodel.node_patch(self.port, LOOPBACK, LOOPBACK, None)
        )
        while True:
            try:
                await self._node_round(node)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not end the node's kubelet
                log.exception("node %s: round failed", name)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(node.wake.wait(), timeout=self.poll_interval)
            node.wake.clear()

    def _report(self, node: BackedNode, error: str | None) -> None:
        """Log each distinct plugin error once (and when it clears)."""
        if error is None:
            if node.error:
                log.info("node %s: the plugin answers again", node.endpoint.node)
            node.error = ""
            return
        self.stats.plugin_errors += 1
        if error != node.error:
            log.warning("node %s: %s", node.endpoint.node, error)
        node.error = error

    async def _node_round(self, node: BackedNode) -> None:
        name = node.endpoint.node
        mine = [bp for bp in self.pods.values() if bp.node == name]
        deleting = [bp for bp in mine if bp.state == "deleting"]
        if deleting:
            await _bounded(self._delete(node, bp) for bp in deleting)
        now = time.monotonic()
        if now - node.last_ping >= self.ping_interval:
            node.last_ping = now
            await self._ping(node)
        check = [bp for bp in mine if bp.state == "check"]
        tracked = [bp for bp in mine if bp.state == "tracked"]
        if check or (tracked and now - node.last_poll >= self.poll_interval * 0.9):
            node.last_poll = now
            await self._poll(node, check + tracked)
        creating = [bp for bp in mine if bp.state == "create"]
        if creating:
            await _bounded(self._create(node, bp) for bp in creating)

    async def _ping(self, node: BackedNode) -> None:
        try:
            body = await node.client.ping()
        except (PluginError, PluginRefused) as exc:
            self._report(node, f"ping: {exc}")
            return
        capacity = vkmodel.ping_capacity(body)
        if capacity and capacity != node.capacity:
            node.capacity = capacity
            log.info("node %s: capacity from the plugin %s", node.endpoint.node, capacity)
            patch = vkmodel.node_patch(self.port, LOOPBACK, LOOPBACK, capacity)
            self.enqueue(self._patch_node, node.endpoint.node, patch)

    async def _poll(self, node: BackedNode, pods: Sequence[BackedPod]) -> None:
        self.stats.status_calls += 1
        try:
            statuses = await node.client.status([bp.pod for bp in pods])
        except (PluginError, PluginRefused) as exc:
            self._report(node, f"/status: {exc}")
            return
        self._report(node, None)
        now = datetime.now(UTC)
        for bp in pods:
            if bp.state not in ("check", "tracked"):
                continue  # changed while we waited
            remote = statuses.get(bp.uid)
            if remote is None:
                self._unknown(bp, now)
                continue
            bp.misses = 0
            if bp.state == "check":
                log.info(
                    "%s/%s: the plugin already runs it (job %s): followed",
                    bp.namespace,
                    bp.name,
                    remote.get(api.PS_JID),
                )
            bp.state = "tracked"
            bp.jid = str(remote.get(api.PS_JID) or bp.jid)
            self._apply_status(bp, remote, now)

    def _unknown(self, bp: BackedPod, now: datetime) -> None:
        phase = (bp.pod.get("status") or {}).get("phase") or "Pending"
        if bp.state == "check":
            if phase == "Pending" and not bp.last_key:
                bp.state = "create"
                return
            bp.misses = LOST_AFTER
        else:
            bp.misses += 1
        if bp.misses >= LOST_AFTER:
            bp.state = "terminal"
            message = f"the interLink plugin of node {bp.node} does not know this pod (any more)"
            log.warning("%s/%s: %s; marked Failed", bp.namespace, bp.name, message)
            self._patch(bp, vkmodel.failed_patch(bp.pod, "ProviderLost", message, now))

    def _apply_status(self, bp: BackedPod, remote: Mapping[str, Any], now: datetime) -> None:
        phase, fields = vkmodel.remote_status(bp.pod, remote, bp.jid)
        key = vkmodel.json_bytes([phase, fields]).decode()
        if phase in ("Succeeded", "Failed"):
            bp.state = "terminal"
        if key == bp.last_key:
            return
        bp.last_key = key
        if phase in ("Succeeded", "Failed"):
            codes = [
                s["state"]["terminated"].get("exitCode")
                for s in fields["containerStatuses"]
                if "terminated" in s["state"]
            ]
            log.info(
                "%s/%s: %s (job %s, exit codes %s)", bp.namespace, bp.name, phase, bp.jid, codes
            )
        self._patch(bp, vkmodel.status_patch(bp.pod, phase, fields, LOOPBACK, bp.started, now))

    # ------------------------------------------------------------ create / delete

    async def _fetch(self, kind: str, namespace: str, names: Iterable[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in sorted(names):
            resp = await self.client.request(
                "GET", f"/api/v1/namespaces/{namespace}/{kind}/{name}", ok_status=frozenset({404})
            )
            if resp.status == 200 and isinstance(resp.body, dict):
                out[name] = resp.body
        return out

    async def _create(self, node: BackedNode, bp: BackedPod) -> None:
        now = datetime.now(UTC)
        configmap_names, secret_names = vkmodel.references(bp.pod)
        try:
            configmaps = await self._fetch("configmaps", bp.namespace, configmap_names)
            secrets = await self._fetch("secrets", bp.namespace, secret_names)
            data = vkmodel.retrieved_pod_data(bp.pod, configmaps, secrets)
        except ApiError as exc:
            log.warning(
                "%s/%s: reading its configMaps/secrets failed: %s",
                bp.namespace,
                bp.name,
                exc.status,
            )
            return
        except MissingRef as exc:
            message = str(exc)
            if message != bp.waiting:
                bp.waiting = message
                log.info("%s/%s: waits: %s", bp.namespace, bp.name, message)
                fields = vkmodel.waiting_fields(bp.pod, "CreateContainerConfigError", message)
                self._patch(bp, vkmodel.status_patch(bp.pod, "Pending", fields, LOOPBACK, now, now))
            return
        if bp.state != "create":
            return
        self.stats.creates += 1
        try:
            jid = await node.client.create(data, bp.uid)
        except PluginRefused as exc:
            if exc.transient:
                self._report(node, f"/create: {exc}")
                return
            self.stats.create_refused += 1
            reason, message = vkmodel.error_reason(exc.status, exc.text)
            log.info(
                "%s/%s: the plugin refused it (%s): %s", bp.namespace, bp.name, reason, message
            )
            bp.state = "terminal"
            self._patch(bp, vkmodel.failed_patch(bp.pod, reason, message, now))
            return
        except PluginError as exc:
            # an answer lost on the way may still have submitted it: look it up first
            self._report(node, f"/create: {exc}")
            if bp.state == "create":
                bp.state = "check"
            return
        self._report(node, None)
        bp.jid = jid
        bp.started = now
        log.info(
            "%s/%s: submitted through %s as job %s", bp.namespace, bp.name, node.endpoint.url, jid
        )
        if bp.state != "create":
            return  # being deleted meanwhile: the delete round handles it
        bp.state = "tracked"
        fields = vkmodel.waiting_fields(bp.pod, "ContainerCreating")
        bp.last_key = vkmodel.json_bytes(["Pending", fields]).decode()
        self._patch(bp, vkmodel.status_patch(bp.pod, "Pending", fields, LOOPBACK, now, now))

    async def _delete(self, node: BackedNode, bp: BackedPod) -> None:
        try:
            await node.client.delete(bp.pod)
        except (PluginError, PluginRefused) as exc:
            if isinstance(exc, PluginRefused) and exc.status in DELETE_DONE:
                log.info("%s/%s: /delete answered %s", bp.namespace, bp.name, exc)
            else:
                self._report(node, f"/delete: {exc}")
                if time.monotonic() - bp.delete_since < self.delete_grace:
                    return
                log.warning(
                    "%s/%s: the plugin could not be told to delete it for %.0f s; its job %s "
                    "may still run",
                    bp.namespace,
                    bp.name,
                    self.delete_grace,
                    bp.jid or "(unknown)",
                )
        else:
            self._report(node, None)
        self.stats.deletes += 1
        log.info("%s/%s: deleted through the plugin (job %s)", bp.namespace, bp.name, bp.jid or "-")
        self._finish_delete(bp)

    # ------------------------------------------------------------ kubelet endpoint

    async def _ensure_server(self) -> None:
        if self._server is not None:
            return
        context = serving_context(self.cert_dir)
        self._server = await asyncio.start_server(
            self._serve_conn, LOOPBACK, 0, ssl=context, ssl_handshake_timeout=10
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("kubelet endpoint for backed nodes on https://%s:%d", LOOPBACK, self.port)

    async def _serve_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, text, follow = await asyncio.wait_for(self._answer(reader), timeout=120)
        except (TimeoutError, ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
            writer.close()
            return
        payload = text.encode()
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "Error")
        head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        if follow is None:
            data = f"{head}Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
            data += payload
        else:
            data = f"{head}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n".encode()
            data += _chunk(payload) if payload else b""
        try:
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                writer.write(data)
                await writer.drain()
                if follow is not None:
                    await self._follow_logs(follow, reader, writer)
                    writer.write(b"0\r\n\r\n")
                    await writer.drain()
        finally:  # also when the agent stops (cancelled) or a follow failed
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _follow_logs(
        self, follow: LogFollow, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Send what a followed log adds, every ``follow_every`` seconds, until its pod has
        ended (then what the last read added), the byte limit is sent, or the client left."""
        error = ""
        while follow.left is None or follow.left > 0:
            await asyncio.sleep(self.follow_every)
            if reader.at_eof() or writer.is_closing():
                return
            bp = self.pods.get(follow.uid)
            if bp is not None and self.backed.get(bp.node) is not follow.node:
                return  # the node is no longer backed by that plugin (its client is closed)
            ended = bp is None or bp.state in FOLLOW_ENDED
            try:
                now = await follow.node.client.logs(follow.request)
            except (PluginError, PluginRefused) as exc:
                if str(exc) != error:  # each distinct error once, not every second
                    error = str(exc)
                    log.info("logs -f of %s: the plugin could not be asked: %s", follow.uid, exc)
                now = ""  # nothing new this round
            except RuntimeError:
                return  # its client was closed: the agent stops
            new, follow.seen = vkmodel.log_growth(follow.seen, now)
            data = new.encode()
            if follow.left is not None:
                data = data[: follow.left]
                follow.left -= len(data)
            if data:
                writer.write(_chunk(data))
                await writer.drain()
            if ended:
                return

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[int, str, LogFollow | None]:
        line = (await reader.readline()).decode("latin-1").strip()
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass
        parts = line.split()
        if len(parts) < 2 or parts[0] != "GET":
            return 400, "only GET /containerLogs/{namespace}/{pod}/{container} is served\n", None
        url = urlsplit(parts[1])
        segments = [unquote(s) for s in url.path.split("/") if s]
        if len(segments) != 4 or segments[0] != "containerLogs":
            return 404, f"not served here: {url.path}\n", None
        _, namespace, pod_name, container = segments
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        uid = self.by_name.get((namespace, pod_name))
        bp = self.pods.get(uid or "")
        node = self.backed.get(bp.node) if bp is not None else None
        if bp is None or node is None:
            return (
                404,
                f"pod {namespace}/{pod_name} is not on a node backed by an interLink plugin\n",
                None,
            )
        self.stats.log_requests += 1
        follow = query.get("follow") == "true"
        # following: the whole log is read, what to send is worked out here
        asked = {k: v for k, v in query.items() if k not in ("tailLines", "limitBytes")}
        request = vkmodel.log_request(bp.pod, container, asked if follow else query)
        try:
            text = await node.client.logs(request)
        except PluginRefused as exc:
            return (
                404,
                f"the interLink plugin has no logs: HTTP {exc.status} {exc.text[:500]}\n",
                None,
            )
        except PluginError as exc:
            return 500, f"the interLink plugin could not be asked for logs: {exc}\n", None
        tail = int(query.get("tailLines", "0")) if query.get("tailLines", "").isdigit() else 0
        limit = int(query.get("limitBytes", "0")) if query.get("limitBytes", "").isdigit() else 0
        tailed = vkmodel.tail_text(text, tail, 0)
        first = vkmodel.tail_text(tailed, 0, limit)
        if not follow:
            return 200, first, None
        # the limit reached: nothing more (a character cut at it is dropped, as the kubelet
        # would cut it); else the bytes still allowed
        untrimmed = len(tailed.encode())
        left = None if limit <= 0 else (0 if untrimmed >= limit else limit - untrimmed)
        return 200, first, LogFollow(bp.uid, node, request, text, left)

    # ------------------------------------------------------------ run

    def status(self) -> dict[str, Any]:
        """Numbers for the agent's status file."""
        states: dict[str, int] = {}
        for bp in self.pods.values():
            states[bp.state] = states.get(bp.state, 0) + 1
        return {
            "nodes": {n: b.endpoint.url for n, b in sorted(self.backed.items())},
            "kubelet_port": self.port,
            "pods": states,
            "creates": self.stats.creates,
            "create_refused": self.stats.create_refused,
            "deletes": self.stats.deletes,
            "status_calls": self.stats.status_calls,
            "plugin_errors": self.stats.plugin_errors,
            "log_requests": self.stats.log_requests,
            "file_errors": self.stats.file_errors,
        }

    async def run(self) -> None:
        """Watch the endpoint file until cancelled; node loops run as their own tasks."""
        try:
            while True:
                self.check_file()
                await asyncio.sleep(self.file_interval)
        finally:
            for node in list(self.backed.values()):
                if node.task is not None:
                    node.task.cancel()
                await node.client.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            if self._server is not None:
                self._server.close()


async def _bounded(calls: Iterable[Awaitable[None]], limit: int = MAX_CONCURRENT) -> None:
    """Await ``calls`` with at most ``limit`` of them running at once."""
    slots = asyncio.Semaphore(limit)

    async def one(call: Awaitable[None]) -> None:
        async with slots:
            await call

    await asyncio.gather(*(one(c) for c in calls))


def serving_context(cert_dir: Path) -> ssl.SSLContext:
    """TLS context of the kubelet endpoint: a self-signed EC certificate for 127.0.0.1
    (new at every start; key and certificate 0600 in ``cert_dir``, 0700)."""
    from decice.sim.controlplane import pki

    cert_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    cert_dir.chmod(0o700)
    key, cert = pki.self_signed(
        "decice-sim-vkubelet", dt.timedelta(days=365), ca=False, ips=(LOOPBACK,)
    )
    pair = pki.Pair(cert=cert_dir / "kubelet.crt", key=cert_dir / "kubelet.key")
    pki.write_pair(pair, key, cert)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pair.cert, pair.key)
    return context
