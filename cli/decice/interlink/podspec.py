"""What a pod asks for: job size, SLURM annotations, containers with env and volumes.

Everything a job needs is resolved here, from the RetrievedPodData alone, before any
file is written or anything is submitted; what cannot run raises Unrunnable naming the
field (never a value: env values and volume contents may be secret). What the plugin
takes in a weaker form than asked (an env reference interLink did not deliver) is run
and noted: the note starts the container's log.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
import re
import shlex
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import PurePosixPath
from typing import Any

from decice.interlink import sbatchflags
from decice.interlink.api import DNS_LABEL, CreateRequest, Volumes
from decice.interlink.errors import Unrunnable
from decice_kube import quantity
from decice_kube.pods import peak_request

ANNOTATION_PREFIX = "slurm-job.vk.io/"
ANN_TIME = ANNOTATION_PREFIX + "time"
ANN_PARTITION = ANNOTATION_PREFIX + "partition"
ANN_ACCOUNT = ANNOTATION_PREFIX + "account"
ANN_FLAGS = ANNOTATION_PREFIX + "flags"
ANN_PRE_EXEC = ANNOTATION_PREFIX + "pre-exec"
ANN_RUNTIME_OPTIONS = ANNOTATION_PREFIX + "singularity-options"
ANN_RUNTIME_MOUNTS = ANNOTATION_PREFIX + "singularity-mounts"
ANN_MPI_FLAGS = ANNOTATION_PREFIX + "mpi-flags"
ANN_IMAGE_ROOT = ANNOTATION_PREFIX + "image-root"
ANN_POD_IP = "interlink.eu/pod-ip"
GPU = "nvidia.com/gpu"
AMD_GPU = "amd.com/gpu"
GPUS = (GPU, AMD_GPU)
MAX_ANNOTATION = 64 * 1024  # bytes of one annotation the plugin takes (pre-exec scripts)

TIME_RE = re.compile(r"^(\d+-)?\d+(:\d+){0,2}\Z|^UNLIMITED\Z|^INFINITE\Z")
NAME_RE = re.compile(r"^[A-Za-z0-9_.+-]{1,64}\Z")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+\Z")
# an image as a pod names it (docker.io/x:1, registry:5000/a/b@sha256:..., docker://..,
# /path/to.sif): never an option to apptainer, never more than one word
IMAGE_RE = re.compile(r"^[A-Za-z0-9/._][A-Za-z0-9._:/@+=-]{0,511}\Z")
# slurm-job.vk.io/image-root: a scheme ("oras://reg/") or a directory ("/cvmfs/unpacked/")
IMAGE_ROOT_RE = re.compile(r"^([a-z][a-z0-9+.-]*://|/)[A-Za-z0-9._:/@+=-]{0,511}\Z")
SCHEME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
BIND_UNSAFE = ",:"  # apptainer's --bind separators
FIELD_PATHS = {
    "metadata.name": lambda p: p["metadata"].get("name", ""),
    "metadata.namespace": lambda p: p["metadata"].get("namespace", "default"),
    "metadata.uid": lambda p: p["metadata"].get("uid", ""),
    "spec.nodeName": lambda p: p.get("spec", {}).get("nodeName", ""),
    "spec.serviceAccountName": lambda p: p.get("spec", {}).get("serviceAccountName", ""),
    "status.podIP": lambda p: (p.get("status") or {}).get("podIP", ""),
    "status.hostIP": lambda p: (p.get("status") or {}).get("hostIP", ""),
}


@dataclass(frozen=True)
class Size:
    """The job's size: what SLURM is asked for (memory 0: the partition's default)."""

    cpus: int
    memory_mb: int
    gpus: int = 0
    gpu_kind: str = GPU  # nvidia.com/gpu or amd.com/gpu: which runtime flag binds them


@dataclass(frozen=True)
class SizeDefaults:
    """What a pod that sets no cpu or no memory gets (``serve --default-cpu/-memory``)."""

    cpus: int = 1
    memory_mb: int = 0  # 0: no --mem line, the partition's DefMemPerCPU/-Node applies


@dataclass
class Volume:
    """A volume as files under the job dir's ``volumes/<name>/`` (``secret``: 0600 only)."""

    name: str
    files: dict[str, bytes] = field(default_factory=dict)
    secret: bool = False


@dataclass
class Mount:
    volume: str
    path: str
    read_only: bool = False
    sub_path: str = ""  # a file or directory inside the volume, bound alone


@dataclass
class Container:
    name: str
    image: str
    command: list[str]
    args: list[str]
    env: list[tuple[str, str]]
    mounts: list[Mount]
    working_dir: str = ""
    notes: list[str] = field(default_factory=list)  # start its log (never a value)
    sidecar: bool = False  # an init container with restartPolicy Always: runs beside the rest


@dataclass
class PodSpec:
    size: Size
    time: str
    partition: str
    account: str
    flags: list[str]
    init_containers: list[Container]
    containers: list[Container]
    volumes: dict[str, Volume]
    pre_exec: str = ""  # slurm-job.vk.io/pre-exec: shell run in the job before containers
    runtime_options: list[str] = field(default_factory=list)  # apptainer's, before --env-file
    mpi: list[str] | None = None  # slurm-job.vk.io/mpi-flags: launcher's extra flags
    image_root: str = ""  # slurm-job.vk.io/image-root


def _control(value: str) -> bool:
    return any(ord(ch) < 32 or ord(ch) == 127 for ch in value)


def _where(ref_name: str, what: str) -> str:
    return f"pod {ref_name}: {what}"


def _asks(res: Any, name: str) -> dict[str, Fraction]:
    """What one resources object asks for: limits where given, else requests (cpu,
    memory, GPUs)."""
    res = res or {}
    asked: dict[str, Fraction] = {}
    if not isinstance(res, dict):
        raise Unrunnable(f"container {name}: resources: not an object")
    for kind in ("requests", "limits"):  # limits win
        given = res.get(kind) or {}
        if not isinstance(given, dict):
            raise Unrunnable(f"container {name}: resources.{kind}: not an object")
        for resource, value in given.items():
            if resource not in ("cpu", "memory", *GPUS):
                continue
            try:
                asked[resource] = quantity.exact(value)
            except ValueError as exc:
                raise Unrunnable(f"container {name}: resources.{kind}.{resource}: {exc}") from exc
    return asked


def job_size(pod: dict[str, Any], label: str, defaults: SizeDefaults | None = None) -> Size:
    """What the pod holds at its peak, counted as Kubernetes counts a pod's request
    (:func:`decice_kube.pods.peak_request`: app containers, sidecars, init steps,
    pod-level resources, overhead) from each container's limits, else its requests. What
    no container sets comes from ``defaults`` (one cpu, the partition's memory)."""
    defaults = defaults or SizeDefaults()
    total = peak_request(pod, _asks)
    cpus = max(1, quantity.ceil(total["cpu"])) if total.get("cpu") else defaults.cpus
    memory_mb = (
        max(1, quantity.ceil(total["memory"] / 2**20))
        if total.get("memory")
        else defaults.memory_mb
    )
    nvidia = quantity.ceil(total.get(GPU, Fraction(0)))
    amd = quantity.ceil(total.get(AMD_GPU, Fraction(0)))
    if nvidia and amd:
        raise Unrunnable(_where(label, f"asks for both {GPU} and {AMD_GPU}; a job binds one kind"))
    return Size(cpus, memory_mb, nvidia or amd, AMD_GPU if amd else GPU)


def _annotation(pod: dict[str, Any], key: str, pattern: re.Pattern[str], label: str) -> str:
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(key, "")
    if value and (
        not isinstance(value, str) or len(value) > MAX_ANNOTATION or not pattern.match(value)
    ):
        shown = repr(value)[:80] if isinstance(value, str) else type(value).__name__
        raise Unrunnable(_where(label, f"annotation {key}: {shown} is not valid"))
    return str(value or "")


def _words(value: str, key: str, label: str) -> list[str]:
    """An annotation as shell words (apptainer's or the MPI launcher's options): each
    becomes one quoted argument, never shell text."""
    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise Unrunnable(_where(label, f"annotation {key}: {exc}")) from exc
    for word in words:
        if _control(word):
            raise Unrunnable(_where(label, f"annotation {key}: a control character"))
    return words


def _pod_ip(pod: dict[str, Any], label: str) -> str:
    value = _annotation(pod, ANN_POD_IP, re.compile(r"^[0-9A-Fa-f.:]{2,45}\Z"), label)
    if value:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise Unrunnable(_where(label, f"annotation {ANN_POD_IP}: not an IP address")) from None
    return value


def parse_flags(value: str, label: str) -> list[str]:
    """``slurm-job.vk.io/flags`` as one full ``--option[=value]`` per item, each an sbatch
    option a pod may give (:mod:`decice.interlink.sbatchflags`)."""
    try:
        tokens = shlex.split(value)
    except ValueError as exc:
        raise Unrunnable(_where(label, f"annotation {ANN_FLAGS}: {exc}")) from exc
    for token in tokens:
        if any(ch.isspace() for ch in token) or any(ch in token for ch in "\"'\\#\0"):
            raise Unrunnable(
                _where(label, f"annotation {ANN_FLAGS}: {token!r} has a blank, quote or '#'")
            )
    try:
        return sbatchflags.canonical(tokens)
    except sbatchflags.FlagError as exc:
        raise Unrunnable(_where(label, f"annotation {ANN_FLAGS}: {exc}")) from exc


def _find(items: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    for item in items:
        if (item.get("metadata") or {}).get("name") == name:
            return item
    return None


def _configmap_data(cm: dict[str, Any]) -> dict[str, bytes]:
    data = {str(k): str(v).encode() for k, v in (cm.get("data") or {}).items()}
    for k, v in (cm.get("binaryData") or {}).items():
        data[str(k)] = _b64(v, f"binaryData.{k}")
    return data


def _b64(value: Any, what: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise Unrunnable(f"{what}: not base64") from exc


def _secret_data(secret: dict[str, Any]) -> dict[str, bytes]:
    data = {str(k): _b64(v, f"secret data.{k}") for k, v in (secret.get("data") or {}).items()}
    for k, v in (secret.get("stringData") or {}).items():
        data[str(k)] = str(v).encode()
    return data


def _safe_rel(path: str, what: str) -> str:
    rel = PurePosixPath(path)
    if not path or rel.is_absolute() or ".." in rel.parts or "\0" in path:
        raise Unrunnable(f"{what}: {path!r} is not a relative path inside the volume")
    return str(rel)


def _select(data: dict[str, bytes], items: list[dict[str, Any]] | None, what: str) -> dict:
    if not items:
        for key in data:
            if not KEY_RE.match(key) or key in (".", ".."):
                raise Unrunnable(f"{what}: key {key!r} is not a file name")
        return dict(data)
    chosen: dict[str, bytes] = {}
    for item in items:
        key = str(item.get("key", ""))
        if key not in data:
            raise Unrunnable(f"{what}: items names key {key!r} it does not have")
        chosen[_safe_rel(str(item.get("path") or key), f"{what} items")] = data[key]
    return chosen


# volumes of objects delivered with the pod: kind -> (the key naming the object, secret)
_DELIVERED = {"configMap": ("name", False), "secret": ("secretName", True)}


def _volume(
    vol: dict[str, Any], delivered: Volumes, label: str, spec_volumes: dict[str, Volume]
) -> Volume:
    name = str(vol.get("name"))
    if name in spec_volumes:
        return spec_volumes[name]
    if not DNS_LABEL.match(name):
        raise Unrunnable(_where(label, f"volume {name!r} is not a DNS label"))
    what = _where(label, f"volume {name}")
    if "emptyDir" in vol:
        return Volume(name)
    for kind, (ref_key, secret) in _DELIVERED.items():
        if kind in vol:
            source = vol[kind] or {}
            ref = str(source.get(ref_key))
            obj = _find(delivered.secrets if secret else delivered.configmaps, ref)
            if obj is None:
                raise Unrunnable(f"{what}: {kind} {ref} was not delivered with the pod")
            data = _secret_data(obj) if secret else _configmap_data(obj)
            return Volume(name, _select(data, source.get("items"), what), secret=secret)
    if "projected" in vol:
        pm = _find(delivered.projected, name)
        files = {}
        if pm is not None:
            for key, value in _configmap_data(pm).items():
                files[_safe_rel(key, what)] = value
        return Volume(name, files, secret=True)  # service account tokens
    kinds = [k for k in vol if k != "name"]
    raise Unrunnable(
        f"{what}: {'/'.join(kinds) or 'this'} volumes are not supported "
        "(configMap, secret, projected and emptyDir are)"
    )


def _resource_field(source: dict[str, Any], container: dict[str, Any], what: str) -> str:
    """``resourceFieldRef`` of this container (limits.cpu, requests.memory, ...), in units
    of its divisor and rounded up, as the kubelet gives it; a limit not set is 0."""
    ref = source.get("resourceFieldRef") or {}
    kind, _, name = str(ref.get("resource", "")).partition(".")
    if kind not in ("limits", "requests") or name not in ("cpu", "memory", "ephemeral-storage"):
        raise _Unresolved(f"resourceFieldRef {ref.get('resource')!r} is not one it resolves")
    res = container.get("resources") or {}
    raw = (res.get(kind) or {}).get(name) or (res.get("limits") or {}).get(name)
    try:
        value = quantity.exact(raw) if raw is not None else Fraction(0)
        divisor = quantity.exact(ref.get("divisor") or "1")
    except ValueError as exc:
        raise Unrunnable(f"{what}: resourceFieldRef: {exc}") from exc
    if not divisor:
        raise Unrunnable(f"{what}: resourceFieldRef divisor is 0")
    return str(quantity.ceil(value / divisor))


class _Unresolved(Exception):
    """An env reference the plugin cannot resolve from what interLink sent: the variable
    is set empty and the container's log says why (the reference plugin does the same)."""


def _env_value(
    item: dict[str, Any],
    pod: dict[str, Any],
    req: CreateRequest,
    what: str,
    container: dict[str, Any],
) -> str | None:
    if "value" in item or "valueFrom" not in item:
        return str(item.get("value") or "")
    source = item["valueFrom"] or {}
    if "resourceFieldRef" in source:
        return _resource_field(source, container, what)
    every_cm = [cm for v in req.volumes.values() for cm in v.configmaps]
    every_secret = [s for v in req.volumes.values() for s in v.secrets]
    for kind, items, reader in (
        ("configMapKeyRef", every_cm, _configmap_data),
        ("secretKeyRef", every_secret, _secret_data),
    ):
        if kind in source:
            ref = source[kind] or {}
            obj = _find(items, str(ref.get("name")))
            data = reader(obj) if obj is not None else {}
            key = str(ref.get("key"))
            if key in data:
                return data[key].decode(errors="replace")
            if ref.get("optional"):
                return None
            raise _Unresolved(
                f"{kind} {ref.get('name')}/{key} was not delivered with the pod (interLink "
                "sends only ConfigMaps and Secrets the pod mounts)"
            )
    if "fieldRef" in source:
        path = str((source["fieldRef"] or {}).get("fieldPath", ""))
        if path in FIELD_PATHS:
            return str(FIELD_PATHS[path](pod))
        match = re.match(r"^metadata\.(labels|annotations)\['([^']+)'\]\Z", path)
        if match:
            return str(((pod["metadata"].get(match.group(1))) or {}).get(match.group(2), ""))
        raise _Unresolved(f"fieldRef {path[:80]!r} is not one it resolves")
    raise _Unresolved(f"valueFrom {'/'.join(map(str, source))[:80] or '{}'} is not one it resolves")


def _env(
    c: dict[str, Any], pod: dict[str, Any], req: CreateRequest, label: str, notes: list[str]
) -> list:
    cname = c.get("name")
    env: dict[str, str] = {}
    pod_ip = _pod_ip(pod, label)
    if pod_ip:
        env["POD_IP"] = pod_ip  # interlink.eu/pod-ip, as the reference exports it
    delivered = req.volumes.get(str(cname), Volumes())
    for src in c.get("envFrom") or []:
        prefix = str(src.get("prefix") or "")
        if "configMapRef" in src:
            ref, data = src["configMapRef"] or {}, None
            obj = _find(delivered.configmaps, str(ref.get("name")))
            data = _configmap_data(obj) if obj else None
        elif "secretRef" in src:
            ref = src["secretRef"] or {}
            obj = _find(delivered.secrets, str(ref.get("name")))
            data = _secret_data(obj) if obj else None
        else:
            raise Unrunnable(_where(label, f"container {cname}: envFrom kind not supported"))
        if data is None:
            if ref.get("optional"):
                continue
            raise Unrunnable(
                _where(label, f"container {cname}: envFrom {ref.get('name')} was not delivered")
            )
        for key, raw in data.items():
            env[prefix + key] = raw.decode(errors="replace")
    for i, item in enumerate(c.get("env") or []):
        what = _where(label, f"container {cname}: env[{i}]")
        try:
            value = _env_value(item, pod, req, what, c)
        except _Unresolved as why:
            name = str(item.get("name"))[:80]
            notes.append(f"env {name} is set empty: {why}")
            value = ""
        if value is not None:
            env[str(item.get("name"))] = value
    for name in env:
        if not ENV_NAME_RE.match(name):
            raise Unrunnable(
                _where(label, f"container {cname}: env name {name!r} is not a shell identifier")
            )
    return list(env.items())


def _strings(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Unrunnable(f"{what}: expected a list of strings")
    return list(value)


def _containers(
    items: list[dict[str, Any]],
    pod: dict[str, Any],
    req: CreateRequest,
    label: str,
    volumes: dict[str, Volume],
) -> list[Container]:
    spec_vols = {str(v.get("name")): v for v in (pod.get("spec") or {}).get("volumes") or []}
    out = []
    for c in items:
        cname = c.get("name")
        if not isinstance(cname, str) or not DNS_LABEL.match(cname):
            raise Unrunnable(_where(label, f"container name {cname!r} is not a DNS label"))
        mounts = []
        for m in c.get("volumeMounts") or []:
            vname = str(m.get("name"))
            if vname not in spec_vols:
                raise Unrunnable(
                    _where(label, f"container {cname}: volumeMount {vname} has no volume")
                )
            delivered = req.volumes.get(cname, Volumes())
            volumes[vname] = _volume(spec_vols[vname], delivered, label, volumes)
            path = str(m.get("mountPath") or "")
            if not path.startswith("/") or any(ch in path for ch in BIND_UNSAFE) or _control(path):
                raise Unrunnable(
                    _where(
                        label,
                        f"container {cname}: mountPath {path!r} is not usable "
                        "(an absolute path without ',' or ':', which would make it more "
                        "than one apptainer bind)",
                    )
                )
            sub = str(m.get("subPath") or "")
            if sub:
                sub = _safe_rel(
                    sub, _where(label, f"container {cname}: volumeMount {vname} subPath")
                )
                if any(ch in sub for ch in BIND_UNSAFE) or _control(sub):
                    raise Unrunnable(
                        _where(label, f"container {cname}: subPath {sub!r} holds ',' or ':'")
                    )
            if m.get("subPathExpr"):
                raise Unrunnable(
                    _where(
                        label,
                        f"container {cname}: volumeMount {vname}: subPathExpr is "
                        "not supported (give subPath)",
                    )
                )
            mounts.append(Mount(vname, path, bool(m.get("readOnly")), sub))
        image = str(c.get("image") or "")
        if image and not IMAGE_RE.match(image):  # none: the bare runtime needs none
            raise Unrunnable(
                _where(
                    label,
                    f"container {cname}: image {image[:80]!r} is not an image reference "
                    "(it may not start with '-' or hold blanks or control characters)",
                )
            )
        notes: list[str] = []
        out.append(
            Container(
                name=cname,
                image=image,
                command=_strings(c.get("command"), _where(label, f"container {cname}.command")),
                args=_strings(c.get("args"), _where(label, f"container {cname}.args")),
                env=_env(c, pod, req, label, notes),
                mounts=mounts,
                working_dir=str(c.get("workingDir") or ""),
                notes=notes,
                sidecar=c.get("restartPolicy") == "Always",
            )
        )
    return out


def _run_as(pod: dict[str, Any], label: str) -> None:
    """``runAsUser`` is honoured only as the plugin's own user: SLURM gives ``--uid`` to
    root alone, and the plugin runs without root."""
    spec = pod.get("spec") or {}
    asked = [("spec.securityContext", (spec.get("securityContext") or {}).get("runAsUser"))]
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        sc = c.get("securityContext") or {}
        asked.append((f"container {c.get('name')} securityContext", sc.get("runAsUser")))
    me = os.geteuid()
    for where, uid in asked:
        if uid is not None and uid != me:
            raise Unrunnable(
                _where(
                    label,
                    f"{where}.runAsUser {uid!r}: jobs run as the plugin's user (uid {me}); "
                    "SLURM lets only root submit for another user (--uid); drop runAsUser "
                    f"or set it to {me}",
                )
            )


def parse_pod(req: CreateRequest, defaults: SizeDefaults | None = None) -> PodSpec:
    pod = req.pod
    label = f"{req.ref.namespace}/{req.ref.name}"
    spec = pod.get("spec") or {}
    if not spec.get("containers"):
        raise Unrunnable(_where(label, "spec.containers is empty"))
    volumes: dict[str, Volume] = {}
    init = _containers(spec.get("initContainers") or [], pod, req, label, volumes)
    main = _containers(spec["containers"], pod, req, label, volumes)
    names = [c.name for c in [*init, *main]]
    if len(set(names)) != len(names):
        raise Unrunnable(_where(label, "two containers share a name"))
    _run_as(pod, label)
    one_line = re.compile(r"^[^\n\0]*\Z")
    flags_text = _annotation(pod, ANN_FLAGS, one_line, label)
    options = [
        *_words(_annotation(pod, ANN_RUNTIME_OPTIONS, one_line, label), ANN_RUNTIME_OPTIONS, label),
        *_words(_annotation(pod, ANN_RUNTIME_MOUNTS, one_line, label), ANN_RUNTIME_MOUNTS, label),
    ]
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    mpi_text = _annotation(pod, ANN_MPI_FLAGS, one_line, label)
    mpi = None
    if ANN_MPI_FLAGS in annotations:
        mpi = [] if mpi_text.strip() in ("", "true") else _words(mpi_text, ANN_MPI_FLAGS, label)
    return PodSpec(
        size=job_size(pod, label, defaults),
        time=_annotation(pod, ANN_TIME, TIME_RE, label),
        partition=_annotation(pod, ANN_PARTITION, NAME_RE, label),
        account=_annotation(pod, ANN_ACCOUNT, NAME_RE, label),
        flags=parse_flags(flags_text, label) if flags_text else [],
        init_containers=init,
        containers=main,
        volumes=volumes,
        pre_exec=_annotation(pod, ANN_PRE_EXEC, re.compile(r"^[^\0]*\Z"), label),
        runtime_options=options,
        mpi=mpi,
        image_root=_annotation(pod, ANN_IMAGE_ROOT, IMAGE_ROOT_RE, label),
    )
