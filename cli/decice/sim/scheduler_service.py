"""The bundled scheduler on the sim target: a managed local process, tracked by pid.

``ensure`` starts ``python -m decice_scheduler`` (this interpreter, so the pid-reuse
guard of :mod:`decice.sim.procs` can check the executable) detached, with its metrics
server on a free loopback port, waits for ``/readyz``, then proves placement with a
smoke pod (``schedulerName`` = the spec's scheduler name, small requests,
``decice.io/sim-duration: 1s``): bound, ``Succeeded`` (the node agent plays the
kubelet), deleted. A running scheduler whose settings are unchanged is kept; other
settings restart it. ``stop`` ends it by its recorded pid; ``status`` reads its
process record and scrapes ``/metrics``.

Files under ``<state>/sim/scheduler/``: ``process.json`` (the process record, the
sha256 of its settings, the metrics URL), ``scheduler.log``, ``profile.yaml`` (only
when the spec has a ``scheduler.config``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from decice.errors import RunFailedError
from decice.sim import procs
from decice.spec_model import SchedulerSpec

SCHEDULER_DIR = "scheduler"
READY_TIMEOUT_S = 120.0
SMOKE_TIMEOUT_S = 90.0
SMOKE_POD = "decice-scheduler-smoke"
SMOKE_NAMESPACE = "default"
PORT_ATTEMPTS = 3


def scheduler_dir(state_dir: Path) -> Path:
    return state_dir / "sim" / SCHEDULER_DIR


def _record_path(state_dir: Path) -> Path:
    return scheduler_dir(state_dir) / "process.json"


def _load(state_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(_record_path(state_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "process" in data else None


def _process(data: dict[str, Any]) -> procs.ProcessRecord:
    return procs.ProcessRecord.from_json(data["process"])


def settings_of(kubeconfig: Path, spec: SchedulerSpec) -> dict[str, Any]:
    """What the process is started with (its hash decides keep vs restart)."""
    return {
        "kubeconfig": str(kubeconfig),
        "name": spec.name,
        "qps": spec.qps,
        "burst": spec.burst,
        "config": spec.config,
        "python": sys.executable,
    }


def _digest(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except (urllib.error.URLError, OSError):
        return 0, ""


def running(state_dir: Path) -> bool:
    data = _load(state_dir)
    return data is not None and procs.is_alive(_process(data))


def ensure(state_dir: Path, kubeconfig: Path, spec: SchedulerSpec) -> dict[str, Any]:
    """Run the scheduler for ``spec`` (kept when running with the same settings).

    Returns ``{"pid", "metrics_url", "reused", "smoke_node"}``, or
    ``{"disabled": True, "stopped": bool}`` when the spec disables the scheduler.
    """
    if not spec.enabled:
        return {"disabled": True, "stopped": stop(state_dir)}
    directory = scheduler_dir(state_dir)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    settings = settings_of(kubeconfig, spec)
    digest = _digest(settings)
    current = _load(state_dir)
    reused = False
    if current is not None:
        record = _process(current)
        if procs.is_alive(record) and current.get("settings_sha256") == digest:
            url = str(current["metrics_url"])
            _wait_ready(record, url)
            reused = True
        else:
            procs.terminate(record)
            _record_path(state_dir).unlink(missing_ok=True)
    if not reused:
        record, url = _start(directory, kubeconfig, spec, settings, digest)
    node = smoke(kubeconfig, spec.name)
    return {"pid": record.pid, "metrics_url": url, "reused": reused, "smoke_node": node}


def _argv(kubeconfig: Path, spec: SchedulerSpec, port: int, profile: Path | None) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "decice_scheduler",
        "--kubeconfig",
        str(kubeconfig),
        "--scheduler-name",
        spec.name,
        "--qps",
        str(spec.qps),
        "--burst",
        str(spec.burst),
        "--metrics-host",
        "127.0.0.1",
        "--metrics-port",
        str(port),
    ]
    if profile is not None:
        argv += ["--config", str(profile)]
    return argv


def _start(
    directory: Path,
    kubeconfig: Path,
    spec: SchedulerSpec,
    settings: dict[str, Any],
    digest: str,
) -> tuple[procs.ProcessRecord, str]:
    profile: Path | None = None
    if spec.config:
        profile = directory / "profile.yaml"
        profile.write_text(yaml.safe_dump(spec.config, sort_keys=False), encoding="utf-8")
    for attempt in range(1, PORT_ATTEMPTS + 1):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        record = procs.spawn(
            "decice-scheduler",
            _argv(kubeconfig, spec, port, profile),
            directory / "scheduler.log",
            cwd=directory,
        )
        (directory / "process.json").write_text(
            json.dumps(
                {
                    "process": record.to_json(),
                    "settings_sha256": digest,
                    "settings": settings,
                    "metrics_url": url,
                }
            ),
            encoding="utf-8",
        )
        try:
            _wait_ready(record, url)
        except RunFailedError:
            # Another process may have taken the port between our probe and its bind.
            if attempt < PORT_ATTEMPTS and "Address already in use" in procs.tail(record.log):
                procs.terminate(record)
                continue
            raise
        return record, url
    raise AssertionError("unreachable")  # pragma: no cover


def _wait_ready(record: procs.ProcessRecord, url: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if _get(url + "/readyz")[0] == 200:
            return
        if not procs.is_alive(record):
            raise RunFailedError(
                "decice-scheduler exited while starting; its log ends with:\n"
                + procs.tail(record.log, 20)
            )
        time.sleep(0.2)
    raise RunFailedError(
        f"decice-scheduler was not ready after {READY_TIMEOUT_S:.0f} s "
        f"({url}/readyz); log: {record.log}"
    )


def smoke_pod(scheduler_name: str) -> dict[str, Any]:
    """A pod only ``scheduler_name`` may place; the node agent ends it after 1 s."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": SMOKE_POD,
            "labels": {"app.kubernetes.io/name": "decice-scheduler-smoke"},
            "annotations": {"decice.io/sim-duration": "1s"},
        },
        "spec": {
            "schedulerName": scheduler_name,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "smoke",
                    "image": "decice.invalid/smoke:1",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }
            ],
        },
    }


def _core(kubeconfig: Path) -> Any:
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))


def _read_pod(api: Any) -> dict[str, Any] | None:
    from kubernetes.client.exceptions import ApiException

    try:
        raw = api.read_namespaced_pod(
            SMOKE_POD, SMOKE_NAMESPACE, _preload_content=False, _request_timeout=10
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    data = json.loads(raw.data)
    return data if isinstance(data, dict) else None


def _delete_pod(api: Any, uid: str | None = None, wait_s: float = 30.0) -> None:
    from kubernetes.client.exceptions import ApiException

    body: dict[str, Any] = {"gracePeriodSeconds": 0}
    if uid:
        body["preconditions"] = {"uid": uid}
    with contextlib.suppress(ApiException):
        api.delete_namespaced_pod(
            SMOKE_POD, SMOKE_NAMESPACE, body=body, _preload_content=False, _request_timeout=10
        )
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        pod = _read_pod(api)
        if pod is None or (uid and pod["metadata"]["uid"] != uid):
            return
        time.sleep(0.2)
    raise RunFailedError(f"the smoke pod {SMOKE_NAMESPACE}/{SMOKE_POD} was not deleted in time")


def smoke(kubeconfig: Path, scheduler_name: str) -> str:
    """Place the smoke pod, wait until bound and Succeeded, delete it; return its node."""
    api = _core(kubeconfig)
    old = _read_pod(api)
    if old is not None:  # left over from an interrupted run
        _delete_pod(api, old["metadata"]["uid"])
    created = api.create_namespaced_pod(
        SMOKE_NAMESPACE, smoke_pod(scheduler_name), _preload_content=False, _request_timeout=10
    )
    uid = json.loads(created.data)["metadata"]["uid"]
    try:
        deadline = time.monotonic() + SMOKE_TIMEOUT_S
        node, phase = "", ""
        while time.monotonic() < deadline:
            pod = _read_pod(api)
            if pod is None or pod["metadata"]["uid"] != uid:
                raise RunFailedError("the smoke pod disappeared before it finished")
            node = pod["spec"].get("nodeName") or ""
            phase = (pod.get("status") or {}).get("phase") or ""
            if phase == "Failed":
                reason = (pod.get("status") or {}).get("reason") or "no reason"
                raise RunFailedError(f"the smoke pod failed on {node or '?'}: {reason}")
            if node and phase == "Succeeded":
                return str(node)
            time.sleep(0.2)
        where = f"bound to {node}, phase {phase or '?'}" if node else "never bound"
        raise RunFailedError(
            f"the smoke pod did not succeed within {SMOKE_TIMEOUT_S:.0f} s ({where}); "
            f"is {scheduler_name} scheduling?"
        )
    finally:
        _delete_pod(api, uid)


def remove_smoke_pod(kubeconfig: Path) -> None:
    """Delete a leftover smoke pod (best effort: the API may be gone already)."""
    if not kubeconfig.is_file():
        return
    with contextlib.suppress(Exception):
        _delete_pod(_core(kubeconfig), wait_s=10.0)


def stop(state_dir: Path) -> bool:
    """Stop the scheduler by its recorded pid; True when it was running."""
    data = _load(state_dir)
    if data is None:
        return False
    stopped = procs.terminate(_process(data))
    _record_path(state_dir).unlink(missing_ok=True)
    return stopped


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


def status(state_dir: Path) -> dict[str, Any]:
    """{running, pid, metrics_url} and, while running, scheduled/drift/relists."""
    data = _load(state_dir)
    if data is None:
        return {"running": False, "pid": None, "metrics_url": None}
    record = _process(data)
    alive = procs.is_alive(record)
    url = str(data.get("metrics_url") or "")
    out: dict[str, Any] = {
        "running": alive,
        "pid": record.pid,
        "metrics_url": url or None,
        "log": record.log,
    }
    if alive and url:
        code, ready = _get(url + "/readyz")
        out["ready"] = code == 200 and ready.strip() == "ok"
        code, text = _get(url + "/metrics")
        if code == 200:
            with contextlib.suppress(ValueError):
                out.update({k: int(v) for k, v in parse_metrics(text).items()})
    return out
