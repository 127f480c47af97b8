"""The bundled scheduler on the sim target: a managed local process, tracked by pid.

``ensure`` starts ``python -m decice_scheduler`` (this interpreter, so the pid-reuse
guard of :mod:`decice.sim.procs` can check the executable) detached, with its metrics
server on a free loopback port, waits for ``/readyz``, then proves placement with a
smoke pod (``schedulerName`` = the spec's scheduler name, small requests,
``decice.io/sim-duration: 1s``): bound, ``Succeeded`` (the node agent plays the
kubelet), deleted. Readiness and the smoke pod are those of the Ansible role
``decice.hybrid.scheduler`` (its ``files/verify.yaml``). A running scheduler whose
settings are unchanged is kept; other settings restart it
(:class:`decice.sim.procs.ManagedProcess`). ``stop`` ends it by its recorded pid;
``status`` reads its process record and scrapes ``/metrics``.

With ``scheduler.placement_scores.enabled`` the scheduler publishes an OCM
``AddOnPlacementScore``; its CRD (the role's ``files/addonplacementscores.crd.yaml``,
labelled ``app.kubernetes.io/managed-by: decice``) is created only when the cluster has
none, and ``remove_api_objects`` (``down``) deletes it only when it carries that label:
a CRD that was there before decice (an OCM hub's) is never touched.

Files under ``<state>/sim/scheduler/``: ``process.json`` (the process record, the
sha256 of its settings, the metrics URL), ``scheduler.log``, ``profile.yaml`` (only
when the spec has a ``scheduler.config``; 0600, replaced atomically).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import secrets
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from decice import paths
from decice.errors import RunFailedError
from decice.sim import procs
from decice.spec_model import SchedulerSpec
from decice_kube import web
from decice_kube.client import ApiError, Client, load_kubeconfig

T = TypeVar("T")

SCHEDULER_DIR = "scheduler"
PORT_ATTEMPTS = 3
VERIFY_FILE = ("roles", "scheduler", "files", "verify.yaml")
CRD_FILE = ("roles", "scheduler", "files", "addonplacementscores.crd.yaml")
CRD_NAME = "addonplacementscores.cluster.open-cluster-management.io"
_CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
MANAGED_BY = "app.kubernetes.io/managed-by"


def verify_description() -> dict[str, Any]:
    """How a deployed decice-scheduler is proven to work, shared with the Ansible role
    ``decice.hybrid.scheduler``: readiness path and timeout, the smoke pod and its timeout."""
    data = yaml.safe_load(paths.collection_dir().joinpath(*VERIFY_FILE).read_text())
    return dict(data)


_VERIFY = verify_description()
READY_PATH: str = _VERIFY["ready_path"]
READY_TIMEOUT_S = float(_VERIFY["ready_timeout"])
SMOKE_TIMEOUT_S = float(_VERIFY["smoke_timeout"])
SMOKE_POD: str = _VERIFY["smoke_pod"]["metadata"]["name"]
SMOKE_NAMESPACE: str = _VERIFY["smoke_pod"]["metadata"]["namespace"]


def scheduler_dir(state_dir: Path) -> Path:
    return state_dir / "sim" / SCHEDULER_DIR


def debug_token_file(state_dir: Path) -> Path:
    """The bearer token of the sim scheduler's ``/debug/*`` (0600): another local user
    reaches 127.0.0.1 too, and /debug/state names every pod and node."""
    return scheduler_dir(state_dir) / "debug-token"


def _debug_token(state_dir: Path) -> Path:
    """The token file, made once per scheduler directory (kept across restarts)."""
    path = debug_token_file(state_dir)
    if not path.is_file() or path.is_symlink():
        procs.private_dir(path.parent)
        procs.write_private(path, secrets.token_hex(32) + "\n")
    return path


def settings_of(kubeconfig: Path, spec: SchedulerSpec) -> dict[str, Any]:
    """What the process is started with (its hash decides keep vs restart)."""
    return {
        "kubeconfig": str(kubeconfig),
        "name": spec.name,
        "qps": spec.qps,
        "burst": spec.burst,
        "config": spec.config,
        "placement_scores": spec.placement_scores.model_dump(),
        "python": sys.executable,
    }


def placement_flags(spec: SchedulerSpec) -> list[str]:
    """decice-scheduler's flags for the spec's ``placement_scores`` (none when off)."""
    scores = spec.placement_scores
    if not scores.enabled:
        return []
    return [
        "--placement-scores",
        "--placement-scores-namespace",
        scores.namespace,
        "--placement-scores-name",
        scores.name,
        "--placement-scores-interval",
        f"{scores.interval:g}",
    ]


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scheduler_argv(
    kubeconfig: Path,
    port: int,
    *,
    name: str | None = None,
    qps: float | None = None,
    burst: int | None = None,
    config: Path | None = None,
    host: str | None = None,
    token_file: Path | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """decice-scheduler's command line (this interpreter), its metrics server on
    ``port`` of the scheduler's default address 127.0.0.1 (or ``host``, which needs
    ``token_file``, or the token in the environment); flags left None keep the
    scheduler's defaults. The token itself is never on the command line."""
    argv = [sys.executable, "-m", "decice_scheduler", "--kubeconfig", str(kubeconfig)]
    if name is not None:
        argv += ["--scheduler-name", name]
    if qps is not None:
        argv += ["--qps", str(qps)]
    if burst is not None:
        argv += ["--burst", str(burst)]
    if host is not None:
        argv += ["--metrics-host", host]
    argv += ["--metrics-port", str(port)]
    if token_file is not None:
        argv += ["--debug-token-file", str(token_file)]
    if config is not None:
        argv += ["--config", str(config)]
    return [*argv, *extra]


def _get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    status, body = web.probe(url, timeout=timeout)
    return status, body.decode(errors="replace")


def _ready(data: Mapping[str, Any]) -> bool:
    return _get(str(data["metrics_url"]) + READY_PATH)[0] == 200


def _process(state_dir: Path) -> procs.ManagedProcess[bool]:
    return procs.ManagedProcess(
        scheduler_dir(state_dir),
        name="decice-scheduler",
        what="decice-scheduler",
        log_name="scheduler.log",
        probe=_ready,
        ready_timeout=READY_TIMEOUT_S,
        ready_hint=lambda data: f" ({data['metrics_url']}{READY_PATH})",
    )


def running(state_dir: Path) -> bool:
    return _process(state_dir).running()


def ensure(state_dir: Path, kubeconfig: Path, spec: SchedulerSpec) -> dict[str, Any]:
    """Run the scheduler for ``spec`` (kept when running with the same settings).

    Returns ``{"pid", "metrics_url", "reused", "smoke_node"}``, or
    ``{"disabled": True, "stopped": bool}`` when the spec disables the scheduler.
    """
    if not spec.enabled:
        return {"disabled": True, "stopped": stop(state_dir)}
    directory = scheduler_dir(state_dir)

    def launch() -> procs.Launch:
        profile: Path | None = None
        if spec.config:
            profile = directory / "profile.yaml"
            procs.write_private(profile, yaml.safe_dump(spec.config, sort_keys=False))
        port = free_port()
        argv = scheduler_argv(
            kubeconfig,
            port,
            name=spec.name,
            qps=spec.qps,
            burst=spec.burst,
            config=profile,
            host="127.0.0.1",
            token_file=_debug_token(state_dir),  # /debug/* for this user only
            extra=placement_flags(spec),
        )
        return procs.Launch(argv, {"metrics_url": f"http://127.0.0.1:{port}"})

    if spec.placement_scores.enabled:
        ensure_placement_crd(kubeconfig)
    # Another process may take the port between our probe and the scheduler's bind.
    started = _process(state_dir).ensure(
        settings_of(kubeconfig, spec),
        launch,
        attempts=PORT_ATTEMPTS,
        retry_when="Address already in use",
    )
    node = smoke(kubeconfig, spec.name)
    return {
        "pid": started.record.pid,
        "metrics_url": str(started.data["metrics_url"]),
        "reused": started.reused,
        "smoke_node": node,
    }


def smoke_pod(scheduler_name: str) -> dict[str, Any]:
    """The shared smoke pod, for ``scheduler_name`` only; the node agent ends it after 1 s."""
    pod = copy.deepcopy(_VERIFY["smoke_pod"])
    pod["spec"]["schedulerName"] = scheduler_name
    return dict(pod)


_POD_PATH = f"/api/v1/namespaces/{SMOKE_NAMESPACE}/pods"
_SMOKE_PATH = f"{_POD_PATH}/{SMOKE_POD}"


async def _read_pod(api: Client) -> dict[str, Any] | None:
    status, body = await api.request("GET", _SMOKE_PATH)
    if status == 404:
        return None
    if status != 200 or not isinstance(body, dict):
        raise ApiError("GET", _SMOKE_PATH, status, json.dumps(body))
    return body


async def _delete_pod(api: Client, uid: str | None = None, wait_s: float = 30.0) -> None:
    body: dict[str, Any] = {"gracePeriodSeconds": 0}
    if uid:
        body["preconditions"] = {"uid": uid}
    with contextlib.suppress(ApiError):
        await api.request("DELETE", _SMOKE_PATH, body=body)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        pod = await _read_pod(api)
        if pod is None or (uid and pod["metadata"]["uid"] != uid):
            return
        await asyncio.sleep(0.2)
    raise RunFailedError(f"the smoke pod {SMOKE_NAMESPACE}/{SMOKE_POD} was not deleted in time")


async def _smoke(api: Client, scheduler_name: str) -> str:
    old = await _read_pod(api)
    if old is not None:  # left over from an interrupted run
        await _delete_pod(api, old["metadata"]["uid"])
    status, created = await api.request("POST", _POD_PATH, body=smoke_pod(scheduler_name))
    if status != 201 or not isinstance(created, dict):
        raise ApiError("POST", _POD_PATH, status, json.dumps(created))
    uid = created["metadata"]["uid"]
    try:
        deadline = time.monotonic() + SMOKE_TIMEOUT_S
        node, phase = "", ""
        while time.monotonic() < deadline:
            pod = await _read_pod(api)
            if pod is None or pod["metadata"]["uid"] != uid:
                raise RunFailedError("the smoke pod disappeared before it finished")
            node = pod["spec"].get("nodeName") or ""
            phase = (pod.get("status") or {}).get("phase") or ""
            if phase == "Failed":
                reason = (pod.get("status") or {}).get("reason") or "no reason"
                raise RunFailedError(f"the smoke pod failed on {node or '?'}: {reason}")
            if node and phase == "Succeeded":
                return str(node)
            await asyncio.sleep(0.2)
        where = f"bound to {node}, phase {phase or '?'}" if node else "never bound"
        raise RunFailedError(
            f"the smoke pod did not succeed within {SMOKE_TIMEOUT_S:.0f} s ({where}); "
            f"is {scheduler_name} scheduling?"
        )
    finally:
        await _delete_pod(api, uid)


async def _with_client(kubeconfig: Path, work: Callable[[Client], Awaitable[T]]) -> T:
    api = Client(load_kubeconfig(kubeconfig), timeout=10.0)
    try:
        return await work(api)
    finally:
        await api.close()


def smoke(kubeconfig: Path, scheduler_name: str) -> str:
    """Place the smoke pod, wait until bound and Succeeded, delete it; return its node."""
    return asyncio.run(_with_client(kubeconfig, lambda api: _smoke(api, scheduler_name)))


def remove_smoke_pod(kubeconfig: Path) -> None:
    """Delete a leftover smoke pod (best effort: the API may be gone already)."""
    if not kubeconfig.is_file():
        return
    with contextlib.suppress(Exception):
        asyncio.run(_with_client(kubeconfig, lambda api: _delete_pod(api, wait_s=10.0)))


def placement_crd() -> dict[str, Any]:
    """The AddOnPlacementScore CRD decice installs (from the scheduler role's files)."""
    return dict(yaml.safe_load(paths.collection_dir().joinpath(*CRD_FILE).read_text()))


async def _ensure_crd(api: Client, timeout: float = 60.0) -> bool:
    status, _ = await api.request("GET", _CRD_PATH)
    if status == 200:
        return False  # there already (ours from an earlier run, or someone else's)
    if status != 404:
        raise ApiError("GET", _CRD_PATH, status, "")
    collection = _CRD_PATH.rsplit("/", 1)[0]
    await api.request("POST", collection, body=placement_crd(), ok_status=(409,))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, crd = await api.request("GET", _CRD_PATH)
        conditions = ((crd or {}).get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            return True
        await asyncio.sleep(0.2)
    raise RunFailedError(f"the CRD {CRD_NAME} was not Established within {timeout:.0f} s")


def ensure_placement_crd(kubeconfig: Path) -> bool:
    """Create the AddOnPlacementScore CRD when the cluster has none; True when created."""
    return asyncio.run(_with_client(kubeconfig, _ensure_crd))


async def _remove_crd(api: Client) -> bool:
    status, crd = await api.request("GET", _CRD_PATH)
    if status != 200 or not isinstance(crd, dict):
        return False
    labels = (crd.get("metadata") or {}).get("labels") or {}
    if labels.get(MANAGED_BY) != "decice":
        return False  # not installed by decice: left alone
    uid = crd["metadata"]["uid"]
    body = {"preconditions": {"uid": uid}}
    await api.request("DELETE", _CRD_PATH, body=body, ok_status=(404, 409))
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        status, _ = await api.request("GET", _CRD_PATH)
        if status == 404:
            return True
        await asyncio.sleep(0.2)
    raise RunFailedError(f"the CRD {CRD_NAME} was not deleted within 60 s")


def remove_placement_crd(kubeconfig: Path) -> bool:
    """Delete the AddOnPlacementScore CRD if decice installed it; True when deleted."""
    if not kubeconfig.is_file():
        return False
    return asyncio.run(_with_client(kubeconfig, _remove_crd))


def remove_api_objects(kubeconfig: Path) -> None:
    """``down``: a leftover smoke pod, and the AddOnPlacementScore CRD if decice installed it
    (best effort: the API may be gone already)."""
    remove_smoke_pod(kubeconfig)
    with contextlib.suppress(ApiError, OSError):
        remove_placement_crd(kubeconfig)


def stop(state_dir: Path) -> bool:
    """Stop the scheduler by its recorded pid; True when it was running."""
    return _process(state_dir).stop()


def parse_metrics(text: str) -> dict[str, float]:
    """scheduled / drift / relists totals from a /metrics page (absent ones left out)."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {
        "decice_scheduler_scheduled": "scheduled",
        "decice_scheduler_drift": "drift",
        "decice_scheduler_relists": "relists",
    }
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        key = wanted.get(family.name)
        if key is None:
            continue
        total = sum(s.value for s in family.samples if s.name.endswith("_total"))
        out[key] = out.get(key, 0.0) + total
    return out


def metrics_text(state_dir: Path) -> str | None:
    """The running scheduler's /metrics page, or None (not running, not answering)."""
    data = _process(state_dir).load()
    url = str((data or {}).get("metrics_url") or "")
    if not url:
        return None
    code, text = _get(url + "/metrics", timeout=5.0)
    return text if code == 200 else None


def status(state_dir: Path) -> dict[str, Any]:
    """{running, pid, metrics_url} and, while running, scheduled/drift/relists."""
    data = _process(state_dir).load()
    if data is None:
        return {"running": False, "pid": None, "metrics_url": None}
    record = procs.ProcessRecord.from_json(data["process"])
    alive = procs.is_alive(record)
    url = str(data.get("metrics_url") or "")
    out: dict[str, Any] = {
        "running": alive,
        "pid": record.pid,
        "metrics_url": url or None,
        "log": record.log,
    }
    if alive and url:
        code, ready = _get(url + READY_PATH)
        out["ready"] = code == 200 and ready.strip() == "ok"
        code, text = _get(url + "/metrics")
        if code == 200:
            with contextlib.suppress(ValueError):
                out.update({k: int(v) for k, v in parse_metrics(text).items()})
    return out
