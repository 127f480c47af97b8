"""The sim's audit log: the API server's own timestamps of pod creates and bindings.

With ``sim.audit_log: true`` in the spec, kube-apiserver writes one JSON line per completed
create of a pod or of a pod's binding (``POLICY``: Metadata level, ResponseComplete only,
nothing else) to ``<control plane dir>/audit.log``. A pod's create → bound is then the
``stageTimestamp`` at which its binding's POST completed minus the one at which its
create's POST completed, both stamped by the API server: neither a watcher's nor a
client's delays are in it. ``decice experiment`` reads it per arm; the scheduler
streaming bench (bench/scheduler/streaming.py) reads it per run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from decice import atomicfile

LOG_NAME = "audit.log"
POLICY_NAME = "audit-policy.json"
MAX_LOG_MB = 1000  # one log file of up to this size (then kube-apiserver rotates it)

POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "Metadata",
            "verbs": ["create"],
            "resources": [{"group": "", "resources": ["pods", "pods/binding"]}],
        },
        {"level": "None"},
    ],
}


def write_policy(directory: Path) -> Path:
    """The policy file in ``directory`` (0600)."""
    policy = directory / POLICY_NAME
    atomicfile.write(policy, json.dumps(POLICY, indent=1) + "\n", mode=0o600)
    return policy


def apiserver_args(directory: Path, *, write: bool = True) -> list[str]:
    """kube-apiserver's flags for the audit log in ``directory`` (its policy written there
    unless ``write`` is False: the flags alone, to compare with a running server's)."""
    policy = write_policy(directory) if write else directory / POLICY_NAME
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={directory / LOG_NAME}",
        f"--audit-log-maxsize={MAX_LOG_MB}",
        "--audit-log-maxbackup=1",
        "--audit-log-format=json",
    ]


def _micro_time(text: str) -> float:
    """Seconds since the epoch of an audit MicroTime ("2026-11-27T22:15:28.123456Z")."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def create_to_bound(
    lines: Iterable[str], *, namespace: str | None = None, prefix: str = ""
) -> dict[str, float]:
    """Create → bound seconds per pod name on the API server's clock, for pods of
    ``namespace`` (None: any) whose name starts with ``prefix`` and whose create and first
    successful binding are both in ``lines``. Anything else in ``lines`` (another event,
    a refused request, a line that is not JSON) is skipped. A pod bound before its
    create's response completed (the scheduler's watch saw it first) gets a slightly
    negative figure, kept, so that the fastest pods are not dropped."""
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("stage") != "ResponseComplete":
            continue
        ref = event.get("objectRef")
        if not isinstance(ref, dict) or ref.get("resource") != "pods":
            continue
        name = ref.get("name")
        if not isinstance(name, str) or not name.startswith(prefix):
            continue
        if namespace is not None and ref.get("namespace") != namespace:
            continue
        status = event.get("responseStatus")
        code = status.get("code", 0) if isinstance(status, dict) else 0
        if type(code) is not int or not 200 <= code < 300 or event.get("verb") != "create":
            continue
        sub = ref.get("subresource") or ""
        if sub not in ("", "binding"):
            continue
        try:
            stamp = _micro_time(str(event.get("stageTimestamp")))
        except ValueError:
            continue
        (bound if sub == "binding" else created).setdefault(name, stamp)
    return {name: bound[name] - created[name] for name in bound if name in created}
