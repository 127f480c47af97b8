"""An experiment's workload as a list of planned pods, and each one's manifest per arm.

Three sources, one result (a list of :class:`PlannedPod`, ordered by arrival):

- a **generator** with a seed: arrivals (fixed rate, Poisson, bursts), shapes drawn by
  weight, gang groups of ``min_size`` to ``max_size`` (a group's members arrive together);
  the same seed gives the same list;
- a **trace** (CSV with a header ``time,shape,duration,group``; ``duration`` and
  ``group`` may be empty or absent): one pod per row, ``time`` in seconds from the start,
  ``shape`` a shape's name, ``duration`` overriding the shape's, ``group`` a gang group
  whose members are the rows that name it;
- **manifests**: Pod YAML files, all submitted at the start in file order.

Bad rows and documents are named by file and line; nothing is submitted then.
"""

from __future__ import annotations

import copy
import csv
import io
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from decice.errors import InputError
from decice.experiment.model import Generator, LoadedExperiment, Shape, duration_seconds

EXPERIMENT_LABEL = "decice.io/experiment"
ARM_LABEL = "decice.io/experiment-arm"
SHAPE_LABEL = "decice.io/experiment-shape"
GROUP_LABEL = "decice.io/pod-group"
GROUP_MIN_MEMBER = "decice.io/pod-group-min-member"
GROUP_TIMEOUT = "decice.io/pod-group-timeout-seconds"
SIM_DURATION = "decice.io/sim-duration"
TRACE_COLUMNS = ("time", "shape", "duration", "group")
MAX_REPORTED = 20  # problems listed at most; the count says how many more


@dataclass(frozen=True)
class PlannedPod:
    """One pod of the workload: when it is submitted and what it is."""

    name: str
    at: float  # seconds after the arm's start
    shape: str
    cpu: str
    memory: str
    gpu: int
    duration: float
    place: str
    group: str = ""
    group_size: int = 0
    group_timeout: int = 0
    manifest: dict[str, Any] = field(default_factory=dict, compare=False)  # manifests only

    def summary(self) -> dict[str, Any]:
        """The JSON form written to the experiment's raw data."""
        return {
            "name": self.name,
            "at": round(self.at, 6),
            "shape": self.shape,
            "cpu": self.cpu,
            "memory": self.memory,
            "gpu": self.gpu,
            "duration": self.duration,
            "place": self.place,
            "group": self.group,
            "group_size": self.group_size,
        }


def plan(loaded: LoadedExperiment) -> list[PlannedPod]:
    """The experiment's workload; InputError naming file and line for a bad source."""
    workload = loaded.experiment.workload
    if workload.generator is not None:
        return generate(workload.generator, workload.shapes, workload.group_timeout)
    if workload.trace is not None:
        return read_trace(loaded.resolve(workload.trace), workload.shapes, workload.group_timeout)
    return read_manifests([loaded.resolve(p) for p in workload.manifests])


# ------------------------------------------------------------------ generator


def _pod(name: str, at: float, shape: Shape, duration: float | None = None) -> PlannedPod:
    return PlannedPod(
        name=name,
        at=at,
        shape=shape.name or "shape",
        cpu=shape.cpu,
        memory=shape.memory,
        gpu=shape.gpu,
        duration=shape.seconds if duration is None else duration,
        place=shape.place,
    )


def _arrivals(gen: Generator, count: int, rng: random.Random) -> list[float]:
    arrival = gen.arrival
    if arrival.process == "fixed":
        return [i / arrival.rate for i in range(count)]
    if arrival.process == "bursts":
        every = duration_seconds(arrival.every)
        return [(i // arrival.size) * every for i in range(count)]
    times, now = [], 0.0
    for _ in range(count):
        times.append(now)
        now += rng.expovariate(arrival.rate)
    return times


def generate(gen: Generator, shapes: list[Shape], group_timeout: int = 120) -> list[PlannedPod]:
    """``gen.pods`` pods from ``gen.seed``: the same arguments give the same list."""
    rng = random.Random(gen.seed)
    named = [
        s if s.name else s.model_copy(update={"name": f"shape{i}"}) for i, s in enumerate(shapes)
    ]
    weights = [s.weight for s in named]
    groups = gen.groups
    mean_size = (groups.min_size + groups.max_size) / 2
    # a group starts with probability p so that about `fraction` of the pods are in one
    start_p = (
        0.0
        if groups.fraction <= 0
        else groups.fraction / (mean_size * (1 - groups.fraction) + groups.fraction)
    )
    units: list[tuple[Shape, int]] = []  # (shape, group size; 0 = a single pod)
    left = gen.pods
    while left > 0:
        shape = rng.choices(named, weights)[0]
        if start_p and rng.random() < start_p and left >= groups.min_size:
            size = min(rng.randint(groups.min_size, groups.max_size), left)
            units.append((shape, size))
            left -= size
        else:
            units.append((shape, 0))
            left -= 1
    arrivals = _arrivals(gen, len(units), rng)
    pods: list[PlannedPod] = []
    group_count = 0
    for (shape, size), at in zip(units, arrivals, strict=True):
        if not size:
            pods.append(_pod(f"p{len(pods):05d}", at, shape))
            continue
        group = f"g{group_count:04d}"
        group_count += 1
        for _ in range(size):
            pod = _pod(f"p{len(pods):05d}", at, shape)
            pods.append(_grouped(pod, group, size, group_timeout))
    return pods


def _grouped(pod: PlannedPod, group: str, size: int, timeout: int) -> PlannedPod:
    return PlannedPod(
        **{**pod.__dict__, "group": group, "group_size": size, "group_timeout": timeout}
    )


# ---------------------------------------------------------------------- trace


def read_trace(path: Path, shapes: list[Shape], group_timeout: int = 120) -> list[PlannedPod]:
    """The pods of a trace CSV; InputError naming each bad row as ``file:line``."""
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(
            f"{path}: cannot read the trace: {exc}\n    fix: give a readable UTF-8 CSV file"
        ) from None
    by_name = {s.name: s for s in shapes}
    reader = csv.reader(io.StringIO(text))
    problems: list[str] = []
    header = next(reader, None)
    columns = [c.strip().lower() for c in header or []]
    if not columns or columns[:2] != ["time", "shape"] or not set(columns) <= set(TRACE_COLUMNS):
        raise InputError(
            f"{path}:1: the header must be time,shape[,duration][,group] "
            f"(got {','.join(columns)!r})\n"
            "    fix: start the file with the line `time,shape,duration,group`"
        )
    rows: list[tuple[int, float, Shape, float, str]] = []
    for row in reader:
        line = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        cells = dict(zip(columns, (c.strip() for c in row), strict=False))
        if len(row) > len(columns):
            problems.append(f"{path}:{line}: {len(row)} cells for {len(columns)} columns")
            continue
        try:
            at = float(cells.get("time", ""))
            if not math.isfinite(at) or at < 0:
                raise ValueError
        except ValueError:
            problems.append(
                f"{path}:{line}: time: {cells.get('time', '')!r} is not a number of seconds >= 0"
            )
            continue
        shape = by_name.get(cells.get("shape", ""))
        if shape is None:
            known = ", ".join(sorted(by_name)) or "none"
            problems.append(
                f"{path}:{line}: shape: {cells.get('shape', '')!r} is not a shape of the "
                f"experiment (known: {known})"
            )
            continue
        duration = shape.seconds
        if cells.get("duration"):
            try:
                duration = duration_seconds(cells["duration"])
            except ValueError as exc:
                problems.append(f"{path}:{line}: duration: {exc}")
                continue
        rows.append((line, at, shape, duration, cells.get("group", "")))
    if not rows and not problems:
        problems.append(f"{path}: the trace has no pods")
    if problems:
        more = len(problems) - MAX_REPORTED
        tail = [f"... and {more} more"] if more > 0 else []
        raise InputError(
            "\n".join([*problems[:MAX_REPORTED], *tail])
            + "\n    fix: correct those rows (time in seconds, a shape name from the "
            "experiment file, a duration like 5s)"
        )
    sizes: dict[str, int] = {}
    for *_, group in rows:
        if group:
            sizes[group] = sizes.get(group, 0) + 1
    rows.sort(key=lambda r: (r[1], r[0]))
    pods = []
    for index, (_line, at, shape, duration, group) in enumerate(rows):
        pod = _pod(f"p{index:05d}", at, shape, duration)
        if group:
            pod = _grouped(pod, _group_name(group), sizes[group], group_timeout)
        pods.append(pod)
    return pods


def _group_name(text: str) -> str:
    """A trace's group as a label value (63 characters of [a-z0-9-])."""
    clean = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
    return ("g-" + clean)[:63].rstrip("-") or "g"


# ------------------------------------------------------------------ manifests


def read_manifests(files: list[Path]) -> list[PlannedPod]:
    """The Pods of YAML files (other kinds are refused, naming file and line)."""
    pods: list[PlannedPod] = []
    problems: list[str] = []
    for path in files:
        try:
            text = path.read_text("utf-8")
            nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}: cannot read it: {exc}")
            continue
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark
            where = f"{path}:{mark.line + 1}" if mark else str(path)
            problems.append(f"{where}: invalid YAML: {exc.problem}")
            continue
        for node in nodes:
            if node is None:
                continue
            line = node.start_mark.line + 1
            doc = yaml.safe_load(yaml.serialize(node))
            if not isinstance(doc, dict) or doc.get("kind") != "Pod":
                kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
                problems.append(f"{path}:{line}: kind {kind!r}: only Pods are supported")
                continue
            name = (doc.get("metadata") or {}).get("name")
            if not isinstance(name, str) or not name:
                problems.append(f"{path}:{line}: metadata.name is missing")
                continue
            pods.append(_manifest_pod(doc, name))
    if not pods and not problems:
        problems.append("the manifests hold no Pod")
    names = [p.name for p in pods]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append(f"pod names appear twice: {', '.join(dupes)}")
    if problems:
        raise InputError(
            "\n".join(problems[:MAX_REPORTED])
            + "\n    fix: give Pod manifests with unique metadata.name"
        )
    return pods


def _manifest_pod(doc: dict[str, Any], name: str) -> PlannedPod:
    meta = doc.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    containers = (doc.get("spec") or {}).get("containers") or [{}]
    requests = (containers[0].get("resources") or {}).get("requests") or {}
    gpu_text = str(requests.get("nvidia.com/gpu", "0"))
    try:
        duration = duration_seconds(str(annotations.get(SIM_DURATION, "0s")))
    except ValueError:
        duration = 0.0
    group = str(labels.get(GROUP_LABEL, ""))
    try:
        size = int(annotations.get(GROUP_MIN_MEMBER, 0)) if group else 0
    except ValueError:
        size = 0
    return PlannedPod(
        name=name,
        at=0.0,
        shape=str(labels.get(SHAPE_LABEL, "manifest")),
        cpu=str(requests.get("cpu", "0")),
        memory=str(requests.get("memory", "0")),
        gpu=int(gpu_text) if gpu_text.isdigit() else 0,
        duration=duration,
        place="any",
        group=group,
        group_size=size,
        manifest=doc,
    )


# ------------------------------------------------------------------ manifests out


def _seconds_text(seconds: float) -> str:
    millis = round(seconds * 1000)
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def manifest(
    pod: PlannedPod,
    *,
    namespace: str,
    scheduler: str,
    labels: dict[str, str],
    image: str,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The Pod to create for ``pod`` in one arm's namespace (``node_selector``: the arm's,
    merged over the pod's own)."""
    doc = _pod_doc(pod, namespace=namespace, scheduler=scheduler, labels=labels, image=image)
    if node_selector:
        spec = doc["spec"]
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **node_selector}
    return doc


def _pod_doc(
    pod: PlannedPod, *, namespace: str, scheduler: str, labels: dict[str, str], image: str
) -> dict[str, Any]:
    if pod.manifest:
        doc = copy.deepcopy(pod.manifest)
        meta = doc.setdefault("metadata", {})
        meta["namespace"] = namespace
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
        doc.setdefault("spec", {})["schedulerName"] = scheduler
        return doc
    requests: dict[str, str] = {"cpu": pod.cpu, "memory": pod.memory}
    limits: dict[str, str] = {}
    if pod.gpu:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(pod.gpu)
    all_labels = {**labels, SHAPE_LABEL: _label_value(pod.shape)}
    annotations = {SIM_DURATION: _seconds_text(pod.duration)}
    if pod.group:
        all_labels[GROUP_LABEL] = pod.group
        annotations[GROUP_MIN_MEMBER] = str(pod.group_size)
        annotations[GROUP_TIMEOUT] = str(pod.group_timeout or 120)
    container: dict[str, Any] = {
        "name": "work",
        "image": image,
        "command": ["sleep", f"{pod.duration:g}"],
        "resources": {"requests": requests, **({"limits": limits} if limits else {})},
    }
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "containers": [container],
    }
    if pod.place == "edge":
        spec["nodeSelector"] = {"node-role.kubernetes.io/edge": ""}
        spec["tolerations"] = [
            {"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoSchedule"}
        ]
    elif pod.place == "hpc":
        spec["nodeSelector"] = {"type": "virtual-kubelet"}
        spec["tolerations"] = [{"key": "virtual-node.interlink/no-schedule", "operator": "Exists"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": namespace,
            "labels": all_labels,
            "annotations": annotations,
        },
        "spec": spec,
    }


def _label_value(text: str) -> str:
    clean = "".join(c if c.isalnum() or c in "-_." else "-" for c in text)[:63]
    return clean.strip("-_.") or "shape"
