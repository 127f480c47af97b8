"""What a pod asks for: job size, SLURM annotations, containers with env and volumes.

Everything a job needs is resolved here, from the RetrievedPodData alone, before any
file is written or anything is submitted; what cannot run raises Unrunnable naming the
field (never a value: env values and volume contents may be secret).
"""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import PurePosixPath
from typing import Any

from decice.interlink import quantity, sbatchflags
from decice.interlink.api import DNS_LABEL, CreateRequest, Volumes
from decice.interlink.errors import Unrunnable

ANNOTATION_PREFIX = "slurm-job.vk.io/"
ANN_TIME = ANNOTATION_PREFIX + "time"
ANN_PARTITION = ANNOTATION_PREFIX + "partition"
ANN_ACCOUNT = ANNOTATION_PREFIX + "account"
ANN_FLAGS = ANNOTATION_PREFIX + "flags"
GPU = "nvidia.com/gpu"

TIME_RE = re.compile(r"^(\d+-)?\d+(:\d+){0,2}\Z|^UNLIMITED\Z|^INFINITE\Z")
NAME_RE = re.compile(r"^[A-Za-z0-9_.+-]{1,64}\Z")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+\Z")
# an image as a pod names it (docker.io/x:1, registry:5000/a/b@sha256:..., docker://..,
# /path/to.sif): never an option to apptainer, never more than one word
IMAGE_RE = re.compile(r"^[A-Za-z0-9/._][A-Za-z0-9._:/@+=-]{0,511}\Z")
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
    """The job's size: what SLURM is asked for."""

    cpus: int
    memory_mb: int
    gpus: int = 0


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


@dataclass
class Container:
    name: str
    image: str
    command: list[str]
    args: list[str]
    env: list[tuple[str, str]]
    mounts: list[Mount]
    working_dir: str = ""


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


def _control(value: str) -> bool:
    return any(ord(ch) < 32 or ord(ch) == 127 for ch in value)


def _where(ref_name: str, what: str) -> str:
    return f"pod {ref_name}: {what}"


def _resources(container: dict[str, Any]) -> dict[str, Fraction]:
    """A container's asks: limits where given, else requests (cpu, memory, GPUs)."""
    res = container.get("resources") or {}
    asked: dict[str, Fraction] = {}
    for kind in ("requests", "limits"):  # limits win
        for name, value in (res.get(kind) or {}).items():
            if name not in ("cpu", "memory", GPU):
                continue
            try:
                asked[name] = quantity.parse(value)
            except ValueError as exc:
                cname = container.get("name")
                raise Unrunnable(f"container {cname}: resources.{kind}.{name}: {exc}") from exc
    return asked


def job_size(pod: dict[str, Any], label: str) -> Size:
    """Sum over containers, at least the largest init container (as Kubernetes does)."""
    spec = pod.get("spec") or {}
    total: dict[str, Fraction] = {}
    for c in spec.get("containers") or []:
        for name, value in _resources(c).items():
            total[name] = total.get(name, Fraction(0)) + value
    for c in spec.get("initContainers") or []:
        for name, value in _resources(c).items():
            total[name] = max(total.get(name, Fraction(0)), value)
    missing = [r for r in ("cpu", "memory") if not total.get(r)]
    if missing:
        raise Unrunnable(
            _where(
                label,
                f"no {' and no '.join(missing)} in its containers' resources.requests or "
                "limits; a SLURM job needs its size: set resources.requests (or limits) "
                "cpu and memory on the containers",
            )
        )
    cpus = max(1, quantity.ceil(total["cpu"]))
    memory_mb = max(1, quantity.ceil(total["memory"] / 2**20))
    gpus = quantity.ceil(total.get(GPU, Fraction(0)))
    return Size(cpus, memory_mb, gpus)


def _annotation(pod: dict[str, Any], key: str, pattern: re.Pattern[str], label: str) -> str:
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(key, "")
    if value and (not isinstance(value, str) or not pattern.match(value)):
        raise Unrunnable(_where(label, f"annotation {key}: {value!r} is not valid"))
    return str(value or "")


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
    if "configMap" in vol:
        cm_name = str((vol["configMap"] or {}).get("name"))
        cm = _find(delivered.configmaps, cm_name)
        if cm is None:
            raise Unrunnable(f"{what}: configMap {cm_name} was not delivered with the pod")
        items = (vol["configMap"] or {}).get("items")
        return Volume(name, _select(_configmap_data(cm), items, what))
    if "secret" in vol:
        s_name = str((vol["secret"] or {}).get("secretName"))
        secret = _find(delivered.secrets, s_name)
        if secret is None:
            raise Unrunnable(f"{what}: secret {s_name} was not delivered with the pod")
        items = (vol["secret"] or {}).get("items")
        return Volume(name, _select(_secret_data(secret), items, what), secret=True)
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


def _env_value(
    item: dict[str, Any], pod: dict[str, Any], req: CreateRequest, what: str
) -> str | None:
    if "value" in item or "valueFrom" not in item:
        return str(item.get("value") or "")
    source = item["valueFrom"] or {}
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
            raise Unrunnable(f"{what}: {kind} {ref.get('name')}/{key} was not delivered")
    if "fieldRef" in source:
        path = str((source["fieldRef"] or {}).get("fieldPath", ""))
        if path in FIELD_PATHS:
            return str(FIELD_PATHS[path](pod))
        match = re.match(r"^metadata\.(labels|annotations)\['([^']+)'\]\Z", path)
        if match:
            return str(((pod["metadata"].get(match.group(1))) or {}).get(match.group(2), ""))
        raise Unrunnable(f"{what}: fieldRef {path!r} is not supported")
    raise Unrunnable(f"{what}: valueFrom {'/'.join(source) or '{}'} is not supported")


def _env(c: dict[str, Any], pod: dict[str, Any], req: CreateRequest, label: str) -> list:
    cname = c.get("name")
    env: dict[str, str] = {}
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
        value = _env_value(item, pod, req, what)
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
            mounts.append(Mount(vname, path, bool(m.get("readOnly"))))
        image = str(c.get("image") or "")
        if image and not IMAGE_RE.match(image):  # none: the bare runtime needs none
            raise Unrunnable(
                _where(
                    label,
                    f"container {cname}: image {image[:80]!r} is not an image reference "
                    "(it may not start with '-' or hold blanks or control characters)",
                )
            )
        out.append(
            Container(
                name=cname,
                image=image,
                command=_strings(c.get("command"), _where(label, f"container {cname}.command")),
                args=_strings(c.get("args"), _where(label, f"container {cname}.args")),
                env=_env(c, pod, req, label),
                mounts=mounts,
                working_dir=str(c.get("workingDir") or ""),
            )
        )
    return out


def parse_pod(req: CreateRequest) -> PodSpec:
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
    flags_text = _annotation(pod, ANN_FLAGS, re.compile(r"^[^\n\0]*\Z"), label)
    return PodSpec(
        size=job_size(pod, label),
        time=_annotation(pod, ANN_TIME, TIME_RE, label),
        partition=_annotation(pod, ANN_PARTITION, NAME_RE, label),
        account=_annotation(pod, ANN_ACCOUNT, NAME_RE, label),
        flags=parse_flags(flags_text, label) if flags_text else [],
        init_containers=init,
        containers=main,
        volumes=volumes,
    )
