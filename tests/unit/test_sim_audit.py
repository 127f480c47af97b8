"""The sim's audit log (decice.sim.controlplane.audit): its policy, flags and its
create → bound reader."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from decice.sim.controlplane import audit

pytestmark = pytest.mark.unit


def _event(
    name: str, stamp: str, sub: str = "", code: int = 201, ns: str = "default", verb: str = "create"
) -> str:
    ref = {"resource": "pods", "namespace": ns, "name": name, "apiVersion": "v1"}
    if sub:
        ref["subresource"] = sub
    return json.dumps(
        {
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": "Metadata",
            "stage": "ResponseComplete",
            "verb": verb,
            "objectRef": ref,
            "responseStatus": {"metadata": {}, "code": code},
            "requestReceivedTimestamp": stamp,
            "stageTimestamp": stamp,
        }
    )


def test_create_to_bound_on_the_servers_clock() -> None:
    lines = [
        _event("s-000001", "2026-11-27T22:15:28.100000Z"),
        _event("s-000002", "2026-11-27T22:15:28.105000Z"),
        _event("w-000001", "2026-11-27T22:15:28.106000Z"),  # not the prefix
        _event("s-000001", "2026-11-27T22:15:28.112500Z", sub="binding"),
        _event("s-000001", "2026-11-27T22:15:28.300000Z", sub="binding", code=409),  # again
        _event("s-000002", "2026-11-27T22:15:29.005000Z", sub="binding", code=500),  # failed
        _event("s-000002", "2026-11-27T22:15:29.105000Z", sub="binding"),  # its retry
        _event("s-000003", "2026-11-27T22:15:29.2Z", sub="binding"),  # create not logged
        _event("s-000004", "2026-11-27T22:15:29.3Z", sub="status"),  # another subresource
        _event("s-000004", "2026-11-27T22:15:29.3Z", code=409),  # a create refused
        _event("s-000005", "2026-11-27T22:15:29.4002Z", sub="binding"),  # bound before ...
        _event("s-000005", "2026-11-27T22:15:29.4005Z"),  # ... its create's response ended
        _event("s-000006", "2026-11-27T22:15:29.5Z", ns="other"),  # another namespace
        _event("s-000006", "2026-11-27T22:15:29.6Z", sub="binding", ns="other"),
        _event("s-000007", "not a time"),
        _event("s-000007", "2026-11-27T22:15:29.6Z", sub="binding"),
        _event("s-000008", "2026-11-27T22:15:29.6Z", code=True),  # type: ignore[arg-type]
        "not json",
        "[]",
        json.dumps({"stage": "ResponseComplete", "objectRef": "pods"}),
        json.dumps({"stage": "ResponseStarted", "objectRef": {"resource": "pods"}}),
    ]
    latency = audit.create_to_bound(lines, namespace="default", prefix="s-")
    assert set(latency) == {"s-000001", "s-000002", "s-000005"}
    assert latency["s-000005"] == pytest.approx(-0.0003, abs=1e-6)
    assert latency["s-000001"] == pytest.approx(0.0125, abs=1e-6)
    assert latency["s-000002"] == pytest.approx(1.0, abs=1e-6)
    assert set(audit.create_to_bound(lines)) == {"s-000001", "s-000002", "s-000005", "s-000006"}


def test_policy_logs_only_pod_and_binding_creates_and_the_flags_name_it(tmp_path: Path) -> None:
    rules = audit.POLICY["rules"]
    assert isinstance(rules, list)
    assert rules[0] == {
        "level": "Metadata",
        "verbs": ["create"],
        "resources": [{"group": "", "resources": ["pods", "pods/binding"]}],
    }
    assert rules[-1] == {"level": "None"} and audit.POLICY["omitStages"] == ["RequestReceived"]
    args = audit.apiserver_args(tmp_path)
    policy = tmp_path / audit.POLICY_NAME
    assert json.loads(policy.read_text()) == audit.POLICY
    assert stat.S_IMODE(policy.stat().st_mode) == 0o600
    assert f"--audit-policy-file={policy}" in args
    assert f"--audit-log-path={tmp_path / audit.LOG_NAME}" in args
    assert "--audit-log-format=json" in args
