"""The JSON shapes of interLink 0.6.2's plugin API (``pkg/interlink/types.go``).

Field names are the Go types' json tags, exactly; Kubernetes objects (v1.Pod,
v1.ConfigMap, v1.Secret, v1.ContainerStatus) use their API field names. Readers here
check shapes and names that end up in file paths; they never log values (secrets).
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass, field
from typing import Any

from decice.interlink.errors import BadRequest

# RetrievedPodData
POD = "pod"
CONTAINERS = "container"
JOB_CONFIG = "jobConfig"
JOB_SCRIPT = "jobScript"
# RetrievedContainer
RC_NAME = "name"
RC_CONFIGMAPS = "configMaps"
RC_PROJECTED = "projectedvolumemaps"
RC_SECRETS = "secrets"
RC_EMPTYDIRS = "emptyDirs"
# CreateStruct
CS_UID = "PodUID"
CS_JID = "PodJID"
# PodStatus
PS_NAME = "name"
PS_UID = "UID"
PS_NAMESPACE = "namespace"
PS_JID = "JID"
PS_CONTAINERS = "containers"
PS_INIT = "initContainers"
# LogStruct / ContainerLogOpts
LOG_NAMESPACE = "Namespace"
LOG_UID = "PodUID"
LOG_POD = "PodName"
LOG_CONTAINER = "ContainerName"
LOG_OPTS = "Opts"
OPT_TAIL = "Tail"
OPT_BYTES = "Bytes"
OPT_TIMESTAMPS = "Timestamps"
OPT_FOLLOW = "Follow"
OPT_PREVIOUS = "Previous"
OPT_SINCE_SECONDS = "SinceSeconds"
OPT_SINCE_TIME = "SinceTime"
# PingResponse / ResourcesResponse / AcceleratorResponse
PING_STATUS = "status"
PING_RESOURCES = "resources"
PING_TAINTS = "taints"
RES_CPU = "cpu"
RES_MEMORY = "memory"
RES_PODS = "pods"
RES_ACCELERATORS = "accelerators"
ACC_TYPE = "resourceType"
ACC_AVAILABLE = "available"

GO_ZERO_TIME = "0001-01-01T00:00:00Z"  # a zero time.Time as Go marshals it (no omitempty)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
UID_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9]{0,62})\Z")


def _obj(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest(f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest(f"{what}: expected a JSON list, got {type(value).__name__}")
    return value


def _label(value: Any, what: str) -> str:
    if not isinstance(value, str) or not DNS_LABEL.match(value):
        raise BadRequest(f"{what}: {value!r} is not a DNS label (a-z, 0-9, '-', 1-63 chars)")
    return value


@dataclass(frozen=True)
class PodRef:
    """The identity of a pod: what paths, job names and statuses are built from."""

    name: str
    namespace: str
    uid: str

    @property
    def key(self) -> str:
        """``<namespace>-<uid>``: the job dir's and the store entry's name."""
        return f"{self.namespace}-{self.uid}"


def pod_ref(pod: Any, what: str = "pod") -> PodRef:
    """Name, namespace and UID of a v1.Pod, checked safe for file and job names."""
    meta = _obj(_obj(pod, what).get("metadata"), f"{what}.metadata")
    uid = meta.get("uid")
    if not isinstance(uid, str) or not UID_RE.match(uid):
        raise BadRequest(f"{what}.metadata.uid: {uid!r} is not a pod UID")
    name = meta.get("name")
    if not isinstance(name, str) or not name or "/" in name or "\n" in name or len(name) > 253:
        raise BadRequest(f"{what}.metadata.name: {name!r} is not a pod name")
    namespace = _label(meta.get("namespace") or "default", f"{what}.metadata.namespace")
    return PodRef(name, namespace, uid)


@dataclass
class Volumes:
    """ConfigMaps, Secrets and projected volume maps of a RetrievedContainer."""

    configmaps: list[dict[str, Any]] = field(default_factory=list)
    secrets: list[dict[str, Any]] = field(default_factory=list)
    projected: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CreateRequest:
    """A RetrievedPodData: the pod and, per container name, its volume data."""

    pod: dict[str, Any]
    ref: PodRef
    volumes: dict[str, Volumes]
    job_script: str = ""


def parse_create(body: Any) -> CreateRequest:
    data = _obj(body, "RetrievedPodData")
    pod = _obj(data.get(POD), f"RetrievedPodData.{POD}")
    ref = pod_ref(pod, f"RetrievedPodData.{POD}")
    volumes: dict[str, Volumes] = {}
    for i, item in enumerate(_list(data.get(CONTAINERS), f"RetrievedPodData.{CONTAINERS}")):
        what = f"RetrievedPodData.{CONTAINERS}[{i}]"
        rc = _obj(item, what)
        name = _label(rc.get(RC_NAME), f"{what}.{RC_NAME}")
        volumes[name] = Volumes(
            configmaps=[_obj(x, what) for x in _list(rc.get(RC_CONFIGMAPS), what)],
            secrets=[_obj(x, what) for x in _list(rc.get(RC_SECRETS), what)],
            projected=[_obj(x, what) for x in _list(rc.get(RC_PROJECTED), what)],
        )
    script = data.get(JOB_SCRIPT) or ""
    if not isinstance(script, str):
        raise BadRequest(f"RetrievedPodData.{JOB_SCRIPT}: expected a string")
    return CreateRequest(pod=pod, ref=ref, volumes=volumes, job_script=script)


def parse_pods(body: Any) -> list[PodRef]:
    """The list of v1.Pod of /status (an empty or missing body is an empty list)."""
    return [pod_ref(p, f"pods[{i}]") for i, p in enumerate(_list(body, "pods"))]


@dataclass(frozen=True)
class LogRequest:
    namespace: str
    uid: str
    pod: str
    container: str
    tail: int = 0
    limit_bytes: int = 0
    previous: bool = False
    timestamps: bool = False
    follow: bool = False
    since: float | None = None  # epoch seconds, from SinceSeconds or SinceTime


_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})\Z"
)


def parse_time(value: Any, what: str) -> float | None:
    """An RFC 3339 time (Go's time.Time in JSON) as epoch seconds; Go's zero time and an
    empty value are None (not set)."""
    if value in (None, "", GO_ZERO_TIME):
        return None
    match = _RFC3339.match(value) if isinstance(value, str) else None
    if not match:
        raise BadRequest(f"{what}: {str(value)[:40]!r} is not an RFC 3339 time")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction, zone = match.group(7), match.group(8)
    if year < 1970:
        return None
    try:
        epoch = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    except (ValueError, OverflowError) as exc:
        raise BadRequest(f"{what}: {value!r} is not a time") from exc
    if zone not in ("Z", "z"):
        sign = 1 if zone[0] == "+" else -1
        epoch -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return epoch + (float(fraction) if fraction else 0.0)


def _int(value: Any, what: str) -> int:
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadRequest(f"{what}: expected a non-negative integer")
    return value


def parse_logs(body: Any) -> LogRequest:
    data = _obj(body, "LogStruct")
    namespace = _label(data.get(LOG_NAMESPACE), f"LogStruct.{LOG_NAMESPACE}")
    uid = data.get(LOG_UID)
    if not isinstance(uid, str) or not UID_RE.match(uid):
        raise BadRequest(f"LogStruct.{LOG_UID}: {uid!r} is not a pod UID")
    container = data.get(LOG_CONTAINER) or ""
    if container:
        _label(container, f"LogStruct.{LOG_CONTAINER}")
    opts = _obj(data.get(LOG_OPTS) or {}, f"LogStruct.{LOG_OPTS}")
    tail = _int(opts.get(OPT_TAIL), f"LogStruct.{LOG_OPTS}.{OPT_TAIL}")
    limit = _int(opts.get(OPT_BYTES), f"LogStruct.{LOG_OPTS}.{OPT_BYTES}")
    if tail and limit:
        raise BadRequest("LogStruct.Opts: Tail and Bytes both set; set only one of them")
    since_seconds = _int(opts.get(OPT_SINCE_SECONDS), f"LogStruct.{LOG_OPTS}.{OPT_SINCE_SECONDS}")
    since_time = parse_time(opts.get(OPT_SINCE_TIME), f"LogStruct.{LOG_OPTS}.{OPT_SINCE_TIME}")
    if since_seconds and since_time is not None:
        raise BadRequest(
            "LogStruct.Opts: SinceSeconds and SinceTime both set; set only one of them"
        )
    since = time.time() - since_seconds if since_seconds else since_time
    return LogRequest(
        namespace=namespace,
        uid=uid,
        pod=str(data.get(LOG_POD) or ""),
        container=container,
        tail=tail,
        limit_bytes=limit,
        previous=bool(opts.get(OPT_PREVIOUS)),
        timestamps=bool(opts.get(OPT_TIMESTAMPS)),
        follow=bool(opts.get(OPT_FOLLOW)),
        since=since,
    )


def create_struct(uid: str, jid: str) -> dict[str, str]:
    return {CS_UID: uid, CS_JID: jid}


def pod_status(
    ref: PodRef, jid: str, containers: list[dict[str, Any]], init: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        PS_NAME: ref.name,
        PS_UID: ref.uid,
        PS_NAMESPACE: ref.namespace,
        PS_JID: jid,
        PS_CONTAINERS: containers,
        PS_INIT: init,
    }


def ping_response(cpu: str, memory: str, pods: str, accelerators: dict[str, str]) -> dict[str, Any]:
    resources: dict[str, Any] = {RES_CPU: cpu, RES_MEMORY: memory, RES_PODS: pods}
    if accelerators:
        resources[RES_ACCELERATORS] = [
            {ACC_TYPE: kind, ACC_AVAILABLE: n} for kind, n in sorted(accelerators.items())
        ]
    return {PING_STATUS: "ok", PING_RESOURCES: resources}
