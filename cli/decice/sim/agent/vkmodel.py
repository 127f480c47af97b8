"""Pure parts of the sim's virtual kubelet (:mod:`decice.sim.agent.vkubelet`): the endpoint
file, the request bodies sent to an interLink plugin, and the pod status patches made
from its answers. No I/O, so that they are cheap to unit-test.

Shapes are interLink 0.6.2's (``pkg/interlink/types.go``): ``RetrievedPodData``
``{pod, container: [{name, configMaps, projectedvolumemaps, secrets, emptyDirs}]}``,
``CreateStruct`` ``{PodUID, PodJID}``, ``PodStatus`` ``{name, UID, namespace, JID,
containers, initContainers}``, ``LogStruct`` ``{Namespace, PodUID, PodName,
ContainerName, Opts: {Tail, Bytes, Timestamps, Follow, Previous, SinceSeconds,
SinceTime}}`` and ``PingResponse`` ``{status, resources: {cpu, memory, pods,
accelerators: [{resourceType, available}]}, taints}``.

Before ``/create`` the agent resolves what upstream's virtual kubelet resolves on its
side: every ``envFrom`` is expanded into ``env`` and every ``valueFrom`` (configMap and
secret keys, pod fields, resource fields) becomes a plain ``value``, so the plugin gets
literal environment values; configMap, secret and projected (configMap/secret sources)
volumes travel as the container's ``configMaps`` / ``secrets`` /
``projectedvolumemaps`` exactly as interLink's API server builds them.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from decice.interlink import api
from decice.sim.agent.simnodes import rejected_status, rfc3339

ENDPOINT_FILE = "interlink.json"
GO_ZERO_TIME = "0001-01-01T00:00:00Z"
PHASES = ("Pending", "Running", "Succeeded", "Failed")


def json_bytes(body: Any) -> bytes:
    """Compact JSON of ``body``."""
    return json.dumps(body, separators=(",", ":")).encode()


def endpoint_file(state_dir: Path) -> Path:
    """``<state dir>/sim/interlink.json``: which virtual nodes a plugin backs."""
    return state_dir / "sim" / ENDPOINT_FILE


# ------------------------------------------------------------------ endpoint file


@dataclass(frozen=True)
class Endpoint:
    """Where the plugin of one virtual node listens and the bearer token file for it."""

    node: str
    url: str
    token_file: Path | None = None


def parse_endpoints(text: str, source: str) -> dict[str, Endpoint]:
    """The endpoint file's nodes; ValueError naming ``source``, the field and the fix.

    ``{"nodes": {"<node>": {"url": "http://host:port" | "unix:/abs/path",
    "token_file": "/abs/path"}}}``; ``token_file`` is required for http(s) URLs.
    Other keys are ignored.
    """
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{source}: not JSON ({exc}); fix: rewrite the file") from exc
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict):
        raise ValueError(f'{source}: expected {{"nodes": {{"<node>": {{"url": ..., ...}}}}}}')
    out: dict[str, Endpoint] = {}
    for node, entry in data["nodes"].items():
        where = f"{source}: nodes.{node}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: expected a mapping with url and token_file")
        url = entry.get("url")
        if not isinstance(url, str) or not re.match(r"^(https?://[^/\s]+/?\Z|unix:/\S+\Z)", url):
            raise ValueError(
                f"{where}.url: {url!r} is not http://HOST:PORT, https://HOST:PORT or "
                "unix:/ABSOLUTE/PATH"
            )
        raw_token = entry.get("token_file")
        token: Path | None = None
        if raw_token is not None:
            if not isinstance(raw_token, str) or not raw_token.startswith("/"):
                raise ValueError(f"{where}.token_file: {raw_token!r} is not an absolute path")
            token = Path(raw_token)
        elif not url.startswith("unix:"):
            raise ValueError(f"{where}.token_file: required for {url} (a 0600 bearer token file)")
        out[str(node)] = Endpoint(str(node), url.rstrip("/"), token)
    return out


def check_token_file(path: Path, mode: int, regular: bool) -> str | None:
    """Why a token file cannot be used (None when it can): a regular file, mode 0600."""
    if not regular:
        return f"token file {path} is not a regular file"
    if mode & 0o077:
        return f"token file {path} has mode {mode & 0o777:04o}; fix: chmod 600 {path}"
    return None


# ------------------------------------------------------------------ references


class MissingRef(Exception):
    """A configMap/secret (or one of its keys) the pod needs does not exist."""

    def __init__(self, kind: str, name: str, key: str | None = None) -> None:
        self.kind, self.name, self.key = kind, name, key
        what = (
            f'{kind} "{name}" not found'
            if key is None
            else f'key "{key}" not found in {kind} "{name}"'
        )
        super().__init__(what)


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]


def references(pod: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """Names of the configMaps and secrets the pod's volumes and env refer to."""
    configmaps: set[str] = set()
    secrets: set[str] = set()
    for vol in (pod.get("spec") or {}).get("volumes") or ():
        if vol.get("configMap"):
            configmaps.add(str(vol["configMap"].get("name")))
        if vol.get("secret"):
            secrets.add(str(vol["secret"].get("secretName")))
        for src in (vol.get("projected") or {}).get("sources") or ():
            if src.get("configMap"):
                configmaps.add(str(src["configMap"].get("name")))
            if src.get("secret"):
                secrets.add(str(src["secret"].get("name")))
    for container in _containers(pod):
        for env in container.get("env") or ():
            ref = env.get("valueFrom") or {}
            if ref.get("configMapKeyRef"):
                configmaps.add(str(ref["configMapKeyRef"].get("name")))
            if ref.get("secretKeyRef"):
                secrets.add(str(ref["secretKeyRef"].get("name")))
        for src in container.get("envFrom") or ():
            if src.get("configMapRef"):
                configmaps.add(str(src["configMapRef"].get("name")))
            if src.get("secretRef"):
                secrets.add(str(src["secretRef"].get("name")))
    return configmaps, secrets


def _secret_values(secret: Mapping[str, Any]) -> dict[str, str]:
    out = {str(k): str(v) for k, v in (secret.get("stringData") or {}).items()}
    for key, value in (secret.get("data") or {}).items():
        out[str(key)] = base64.b64decode(str(value)).decode(errors="replace")
    return out


def _referenced(
    objects: Mapping[str, Mapping[str, Any]],
    kind: str,
    ref: Mapping[str, Any],
    name_key: str = "name",
) -> Mapping[str, Any] | None:
    """The configMap/secret ``ref`` names (by ``name_key``); None when it is missing and
    optional, MissingRef when it is missing and required."""
    name = str(ref.get(name_key))
    obj = objects.get(name)
    if obj is None and not ref.get("optional"):
        raise MissingRef(kind, name)
    return obj


def _lookup(
    objects: Mapping[str, Mapping[str, Any]], kind: str, ref: Mapping[str, Any], key: str | None
) -> str | None:
    """A key's value (secrets decoded); None when missing and optional."""
    obj = _referenced(objects, kind, ref)
    if obj is None:
        return None
    values = _secret_values(obj) if kind == "secret" else dict(obj.get("data") or {})
    if key is None:
        return ""
    if key not in values:
        if ref.get("optional"):
            return None
        raise MissingRef(kind, str(ref.get("name")), key)
    return str(values[key])


_ANNOTATION = re.compile(r"""^metadata\.(annotations|labels)\[['"]?(.+?)['"]?\]\Z""")


def _field(pod: Mapping[str, Any], path: str) -> str:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
    }
    if path in simple:
        return str(simple[path] or "")
    match = _ANNOTATION.match(path)
    if match:
        return str((meta.get(match[1]) or {}).get(match[2], ""))
    return ""


def _resource(pod: Mapping[str, Any], container: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    target_name = ref.get("containerName") or container.get("name")
    for c in _containers(pod):
        if c.get("name") == target_name:
            kind, _, res = str(ref.get("resource", "")).partition(".")
            return str(((c.get("resources") or {}).get(kind) or {}).get(res, ""))
    return ""


def resolve_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    configmaps: Mapping[str, Mapping[str, Any]],
    secrets: Mapping[str, Mapping[str, Any]],
) -> list[dict[str, str]]:
    """The container's env as plain values: envFrom expanded (explicit env wins, later
    sources win over earlier ones), every valueFrom resolved. MissingRef for a required
    configMap/secret/key that is not there."""
    explicit = {str(e.get("name")) for e in container.get("env") or ()}
    merged: dict[str, str] = {}
    for src in container.get("envFrom") or ():
        prefix = str(src.get("prefix") or "")
        if src.get("configMapRef"):
            ref = src["configMapRef"]
            if _lookup(configmaps, "configmap", ref, None) is not None:
                for k, v in (configmaps[str(ref.get("name"))].get("data") or {}).items():
                    merged[prefix + str(k)] = str(v)
        if src.get("secretRef"):
            ref = src["secretRef"]
            if _lookup(secrets, "secret", ref, None) is not None:
                for k, v in _secret_values(secrets[str(ref.get("name"))]).items():
                    merged[prefix + k] = v
    out = [{"name": k, "value": v} for k, v in merged.items() if k not in explicit]
    for env in container.get("env") or ():
        name = str(env.get("name"))
        source = env.get("valueFrom")
        if not source:
            out.append({"name": name, "value": str(env.get("value") or "")})
            continue
        value: str | None
        if source.get("configMapKeyRef"):
            ref = source["configMapKeyRef"]
            value = _lookup(configmaps, "configmap", ref, str(ref.get("key")))
        elif source.get("secretKeyRef"):
            ref = source["secretKeyRef"]
            value = _lookup(secrets, "secret", ref, str(ref.get("key")))
        elif source.get("fieldRef"):
            value = _field(pod, str(source["fieldRef"].get("fieldPath", "")))
        elif source.get("resourceFieldRef"):
            value = _resource(pod, container, source["resourceFieldRef"])
        else:
            value = ""
        if value is not None:
            out.append({"name": name, "value": value})
    return out


def _projected(
    vol: Mapping[str, Any],
    configmaps: Mapping[str, Mapping[str, Any]],
    secrets: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """A projected volume as interLink sends it: a ConfigMap named like the volume whose
    keys are the file paths (configMap and secret sources; items honoured)."""
    data: dict[str, str] = {}
    for src in (vol.get("projected") or {}).get("sources") or ():
        for kind, objects in (("configMap", configmaps), ("secret", secrets)):
            ref = src.get(kind)
            obj = _referenced(objects, kind.lower(), ref) if ref else None
            if obj is None:
                continue
            values = _secret_values(obj) if kind == "secret" else dict(obj.get("data") or {})
            items = ref.get("items")
            if items:
                for item in items:
                    if item.get("key") in values:
                        data[str(item.get("path"))] = str(values[item["key"]])
            else:
                data.update({str(k): str(v) for k, v in values.items()})
    return {"metadata": {"name": vol.get("name")}, "data": data}


def retrieved_pod_data(
    pod: Mapping[str, Any],
    configmaps: Mapping[str, Mapping[str, Any]],
    secrets: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """The ``/create`` body (RetrievedPodData) for ``pod`` with the namespace's
    configMaps/secrets it refers to (by name). MissingRef when a required one is not
    there. The pod goes without managedFields, with its env resolved (envFrom removed)."""
    pod_out = json.loads(json.dumps(pod))
    pod_out.get("metadata", {}).pop("managedFields", None)
    spec = pod_out.setdefault("spec", {})
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or ():
            container["env"] = resolve_env(pod, container, configmaps, secrets)
            container.pop("envFrom", None)
    volumes = {str(v.get("name")): v for v in spec.get("volumes") or ()}
    entries = []
    for container in _containers({"spec": spec}):
        entry: dict[str, Any] = {
            api.RC_NAME: container.get("name"),
            api.RC_CONFIGMAPS: [],
            api.RC_PROJECTED: [],
            api.RC_SECRETS: [],
            api.RC_EMPTYDIRS: [],
        }
        for mount in container.get("volumeMounts") or ():
            vol = volumes.get(str(mount.get("name")))
            if vol is None:
                continue
            if vol.get("configMap"):
                obj = _referenced(configmaps, "configmap", vol["configMap"])
                if obj is not None:
                    entry[api.RC_CONFIGMAPS].append(_clean(obj))
            elif vol.get("secret"):
                obj = _referenced(secrets, "secret", vol["secret"], "secretName")
                if obj is not None:
                    entry[api.RC_SECRETS].append(_clean(obj))
            elif vol.get("projected"):
                entry[api.RC_PROJECTED].append(_projected(vol, configmaps, secrets))
        entries.append(entry)
    return {api.POD: pod_out, api.CONTAINERS: entries}


def _clean(obj: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(obj)
    meta = dict(out.get("metadata") or {})
    meta.pop("managedFields", None)
    out["metadata"] = meta
    return out


def status_request_pods(pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The ``/status`` body: the pods (list of v1 Pod) without managedFields."""
    out = []
    for pod in pods:
        copy = dict(pod)
        copy["metadata"] = {
            k: v for k, v in (pod.get("metadata") or {}).items() if k != "managedFields"
        }
        out.append(copy)
    return out


def log_request(pod: Mapping[str, Any], container: str, query: Mapping[str, str]) -> dict[str, Any]:
    """The ``/getLogs`` body (LogStruct) from the kubelet's containerLogs query
    (tailLines, limitBytes, timestamps, previous, sinceSeconds, sinceTime, follow)."""
    meta = pod.get("metadata") or {}

    def number(name: str) -> int:
        try:
            return max(0, int(query.get(name, "0")))
        except ValueError:
            return 0

    tail = number("tailLines")
    return {
        api.LOG_NAMESPACE: meta.get("namespace"),
        api.LOG_UID: meta.get("uid"),
        api.LOG_POD: meta.get("name"),
        api.LOG_CONTAINER: container,
        api.LOG_OPTS: {
            api.OPT_TAIL: tail,
            # both set is refused by plugins; with a tail the byte limit is applied here
            api.OPT_BYTES: 0 if tail else number("limitBytes"),
            api.OPT_TIMESTAMPS: query.get("timestamps") == "true",
            api.OPT_FOLLOW: False,
            api.OPT_PREVIOUS: query.get("previous") == "true",
            api.OPT_SINCE_SECONDS: number("sinceSeconds"),
            api.OPT_SINCE_TIME: query.get("sinceTime") or GO_ZERO_TIME,
        },
    }


def tail_text(text: str, tail_lines: int, limit_bytes: int) -> str:
    """The last ``tail_lines`` lines (0: all), then at most ``limit_bytes`` bytes (0: no
    limit) from the start, as the kubelet applies them."""
    if tail_lines > 0:
        lines = text.splitlines(keepends=True)
        text = "".join(lines[-tail_lines:])
    if limit_bytes > 0:
        text = text.encode()[:limit_bytes].decode(errors="ignore")
    return text


LOG_PROBES = (64, 4096, 65536)  # lengths of the start of a new read looked for in the last
LOG_CANDIDATES = 16  # places tried per probe: bounded work for a log of repeated lines


def log_growth(seen: str, now: str) -> tuple[str, str]:
    """What ``now`` (a container's log read again) adds to ``seen`` (the last read), and
    what counts as seen after it.

    A plugin returns at most the last part of a long log, so the start of ``now`` may lie
    inside ``seen``: then what follows the longest end of ``seen`` that ``now`` starts with
    is new. An empty or shorter read that ``seen`` starts with (a log file not there for a
    moment) adds nothing; a read with no overlap at all (the log was replaced) is new as a
    whole. Matching is by content, so it has the limits of content: lines that repeat
    exactly where a moving window starts can be taken for each other, and a log that
    starts again with what it started with before (a container run again) is sent from
    where the two differ. The search is bounded (``LOG_PROBES`` x ``LOG_CANDIDATES``
    places); a window that cannot be placed within it is sent whole.
    """
    if now.startswith(seen):
        return now[len(seen) :], now
    if not now or seen.startswith(now):
        return "", seen
    for size in LOG_PROBES:
        probe = now[:size]
        start, tried = seen.find(probe), 0
        while start != -1 and tried < LOG_CANDIDATES:
            if seen.startswith(now[: len(seen) - start], start):
                return now[len(seen) - start :], now
            start, tried = seen.find(probe, start + 1), tried + 1
        if len(probe) < size:
            break  # the whole of `now` was the probe: longer ones find nothing more
    # overlaps shorter than the first probe, one by one (at most 63)
    for start in range(max(1, len(seen) - LOG_PROBES[0] + 1), len(seen)):
        if seen.startswith(now[: len(seen) - start], start):
            return now[len(seen) - start :], now
    return now, now


# ------------------------------------------------------------------ answers


def parse_create(body: Any, uid: str) -> str:
    """The PodJID of a CreateStruct answer for ``uid``; ValueError when it is not one."""
    if isinstance(body, list) and len(body) == 1:  # tolerated: a list of one
        body = body[0]
    if not isinstance(body, dict) or api.CS_JID not in body:
        raise ValueError(f"not a CreateStruct {{PodUID, PodJID}}: {str(body)[:200]!r}")
    if body.get(api.CS_UID) not in (None, "", uid):
        raise ValueError(f"CreateStruct for another pod ({body.get(api.CS_UID)!r}, wanted {uid})")
    return str(body[api.CS_JID])


def parse_statuses(body: Any) -> dict[str, dict[str, Any]]:
    """PodStatus entries of a ``/status`` answer by pod UID; ValueError when not a list."""
    if body is None:
        return {}
    if not isinstance(body, list):
        raise ValueError(f"/status did not answer a list of PodStatus: {str(body)[:200]!r}")
    return {str(s[api.PS_UID]): s for s in body if isinstance(s, dict) and s.get(api.PS_UID)}


def error_reason(status: int, text: str) -> tuple[str, str]:
    """(reason, message) for a failed ``/create`` from the plugin's answer: a JSON object
    with ``reason``/``message`` (or ``error``/``detail``) or plain text. The reason is
    ``Unrunnable`` for 422 (a pod the plugin cannot run), else ``ProviderFailed``."""
    reason, message = ("Unrunnable" if status == 422 else "ProviderFailed"), text.strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        reason = str(data.get("reason") or reason)
        message = str(data.get("message") or data.get("error") or data.get("detail") or text)
    elif isinstance(data, str):
        message = data
    if not message:
        message = f"the interLink plugin answered HTTP {status}"
    return reason, message[:2000]


_QTY = re.compile(r"^[0-9]+(\.[0-9]+)?([munkMGTPE]|[KMGTPE]i)?\Z")


def ping_capacity(body: Any) -> dict[str, str] | None:
    """Node capacity from a PingResponse's ``resources`` (None when it has none)."""
    if not isinstance(body, dict) or not isinstance(body.get(api.PING_RESOURCES), dict):
        return None
    res = body[api.PING_RESOURCES]
    out: dict[str, str] = {}
    for key in (api.RES_CPU, api.RES_MEMORY, api.RES_PODS):
        value = res.get(key)
        if isinstance(value, (str, int)) and _QTY.match(str(value)):
            out[key] = str(value)
    for acc in res.get(api.RES_ACCELERATORS) or ():
        if not isinstance(acc, dict):
            continue
        name, amount = acc.get(api.ACC_TYPE), acc.get(api.ACC_AVAILABLE)
        if isinstance(name, str) and name and _QTY.match(str(amount)):
            out[name] = str(amount)
    return out or None


# ------------------------------------------------------------------ status patches


def _state(remote: Mapping[str, Any] | None) -> dict[str, Any]:
    """One of terminated/running/waiting (in that order of precedence), nulls dropped;
    no state: waiting ContainerCreating."""
    state = (remote or {}).get("state") or {}
    for kind in ("terminated", "running", "waiting"):
        value = state.get(kind)
        if isinstance(value, dict):
            clean = {k: v for k, v in value.items() if v is not None and v != GO_ZERO_TIME}
            if kind == "terminated":
                code = int(clean.get("exitCode") or 0)
                clean["exitCode"] = code
                clean.setdefault("reason", "Completed" if code == 0 else "Error")
            return {kind: clean}
    return {"waiting": {"reason": "ContainerCreating"}}


def _container_statuses(
    containers: Sequence[Mapping[str, Any]],
    remote: Sequence[Mapping[str, Any]] | None,
    jid: str,
    hold: str | None = None,
) -> list[dict[str, Any]]:
    by_name = {str(r.get("name")): r for r in remote or () if isinstance(r, dict)}
    out = []
    for c in containers:
        name = str(c.get("name"))
        rs = by_name.get(name)
        state = {"waiting": {"reason": hold}} if hold else _state(rs)
        running = "running" in state
        out.append(
            {
                "name": name,
                "image": str(c.get("image", "")),
                "imageID": str((rs or {}).get("imageID") or ""),
                "containerID": str((rs or {}).get("containerID") or f"interlink://{jid}/{name}"),
                "ready": running,
                "started": running,
                "restartCount": int((rs or {}).get("restartCount") or 0),
                "state": state,
                "lastState": {},
            }
        )
    return out


def _exit(status: Mapping[str, Any]) -> int | None:
    term = status["state"].get("terminated")
    return None if term is None else int(term["exitCode"])


def remote_status(
    pod: Mapping[str, Any], remote: Mapping[str, Any], jid: str
) -> tuple[str, dict[str, Any]]:
    """(phase, status fields) from the plugin's PodStatus, as upstream's virtual kubelet
    derives them: an init container that exited non-zero fails the pod; init containers
    still to finish keep it Pending; all containers terminated: Succeeded when every exit
    code is 0, else Failed; any running: Running; else Pending."""
    spec = pod.get("spec") or {}
    init_spec = spec.get("initContainers") or []
    init = _container_statuses(init_spec, remote.get(api.PS_INIT), jid)
    init_codes = [_exit(s) for s in init]
    hold = None
    if any(code not in (None, 0) for code in init_codes):
        phase = "Failed"
        hold = "PodInitializing"
    elif any(code is None for code in init_codes):
        phase = "Pending"
        hold = "PodInitializing"
    containers = _container_statuses(
        spec.get("containers") or [], remote.get(api.PS_CONTAINERS), jid, hold
    )
    if hold is None:
        codes = [_exit(s) for s in containers]
        if containers and all(code is not None for code in codes):
            phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
        elif any("running" in s["state"] for s in containers):
            phase = "Running"
        else:
            phase = "Pending"
    fields: dict[str, Any] = {"containerStatuses": containers}
    if init:
        fields["initContainerStatuses"] = init
    return phase, fields


def status_patch(
    pod: Mapping[str, Any],
    phase: str,
    fields: Mapping[str, Any],
    host_ip: str,
    started: datetime,
    now: datetime,
) -> dict[str, Any]:
    """Merge patch for the pod's status: ``phase``, conditions, hostIP, startTime and
    ``fields`` (container statuses)."""
    ts = rfc3339(now)
    initialized = phase != "Pending" or all(
        "terminated" in s["state"] for s in fields.get("initContainerStatuses") or ()
    )
    ready = phase == "Running" and all(s["ready"] for s in fields.get("containerStatuses") or ())

    def cond(kind: str, status: bool) -> dict[str, Any]:
        return {
            "type": kind,
            "status": "True" if status else "False",
            "lastProbeTime": None,
            "lastTransitionTime": ts,
        }

    return {
        "metadata": {"uid": pod["metadata"]["uid"]},
        "status": {
            "phase": phase,
            "conditions": [
                cond("Initialized", initialized),
                cond("Ready", ready),
                cond("ContainersReady", ready),
                cond("PodScheduled", True),
            ],
            "hostIP": host_ip,
            "startTime": rfc3339(started),
            **fields,
        },
    }


def waiting_fields(pod: Mapping[str, Any], reason: str, message: str = "") -> dict[str, Any]:
    """Container statuses of a pod whose containers wait (``reason``, ``message``)."""
    spec = pod.get("spec") or {}
    out: dict[str, Any] = {}
    for key, status_key in (
        ("initContainers", "initContainerStatuses"),
        ("containers", "containerStatuses"),
    ):
        statuses = _container_statuses(spec.get(key) or [], None, "", reason)
        if message:
            for s in statuses:
                s["state"]["waiting"]["message"] = message
        if statuses:
            out[status_key] = statuses
    return out


def failed_patch(
    pod: Mapping[str, Any], reason: str, message: str, now: datetime
) -> dict[str, Any]:
    """Merge patch for a pod the plugin refused (or lost): Failed with reason/message,
    as a kubelet's rejection (:func:`decice.sim.agent.simnodes.rejected_status`) but
    keeping the pod's startTime when it has one."""
    patch = rejected_status(pod, reason, message, now)
    started = (pod.get("status") or {}).get("startTime")
    if started:
        patch["status"]["startTime"] = started
    return patch


def node_patch(
    port: int | None, address: str, hostname: str, capacity: Mapping[str, str] | None
) -> dict[str, Any]:
    """Merge patch of a node's status: its kubelet endpoint (port, addresses) and, when
    given, capacity = allocatable."""
    status: dict[str, Any] = {
        "addresses": [
            {"type": "InternalIP", "address": address},
            {"type": "Hostname", "address": hostname},
        ],
    }
    if port is not None:
        status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": port}}
    if capacity:
        status["capacity"] = dict(capacity)
        status["allocatable"] = dict(capacity)
    return {"status": status}
