"""decice-scheduler's event writing (aggregation, fields, rate limit; the writer process:
test_scheduler_eventproc.py) and placement scores (formula, units, flags), without an API
server; the sim tests are test_scheduler_events_scores.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from decice import spec
from decice.sim.scheduler_service import placement_crd, placement_flags
from decice_kube.client import Client
from decice_scheduler.__main__ import main
from decice_scheduler.binder import TokenBucket
from decice_scheduler.cache.resources import Resources
from decice_scheduler.events.recorder import (
    CORE_V1,
    EVENTS_V1,
    EventWriter,
    failed_record,
    scheduled_record,
)
from decice_scheduler.scores import compute_scores, headroom, normalize, parse_range

pytestmark = pytest.mark.unit

GIB = 1024**3


def pod(name: str, uid: str) -> dict[str, object]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid, "resourceVersion": "7"}}


def writer(**kw: object) -> EventWriter:
    def no_client() -> Client:
        raise AssertionError("no writes in this test")

    return EventWriter(no_client, "sched", api=EVENTS_V1, **kw)  # type: ignore[arg-type]


def test_repeats_of_one_pod_become_one_series() -> None:
    now = [1000.0]
    w = writer(clock=lambda: now[0], patch_every=30.0)
    bucket = TokenBucket(100, 100)
    steps = []
    for _ in range(4):
        record = failed_record(
            pod("p", "u"), "0/3 nodes are available: 3 Insufficient cpu.", now[0]
        )
        step = w._observe(record, bucket)
        steps.append(None if step is None else step[0])
        if step is not None and step[0] == "create":
            step[1].created = True
        now[0] += 1.0
    # one object; the first repeat is written at once, later ones wait for the sweep
    assert steps == ["create", "patch", None, None]
    (series,) = w._series.values()
    assert series.api == CORE_V1 and series.count == 4
    now[0] += 30.0
    due = w._sweep(now[0])
    assert [(kind, s.count) for kind, s, _, _ in due] == [("patch", 4)]
    assert w._sweep(now[0] + 400.0) == [] and not w._series  # ended and forgotten


def test_scheduled_event_has_kube_schedulers_fields() -> None:
    w = writer()
    record = scheduled_record(pod("p", "u"), "node-1", 1000.0)
    step = w._observe(record, TokenBucket(1, 1))
    assert step is not None
    path, body = w._create(step[1], "Scheduled", record)
    assert path == "/apis/events.k8s.io/v1/namespaces/ns/events"
    assert body["note"] == "Successfully assigned ns/p to node-1"
    assert (body["type"], body["reason"], body["action"]) == ("Normal", "Scheduled", "Binding")
    assert body["reportingController"] == "sched"
    assert body["reportingInstance"].startswith("sched-")
    assert body["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "ns",
        "name": "p",
        "uid": "u",
        "resourceVersion": "7",
    }
    assert body["metadata"]["name"].startswith("p.")


def test_failed_scheduling_burst_is_rate_limited() -> None:
    w = writer()
    bucket = TokenBucket(0.001, 3)
    created = 0
    for i in range(10):
        step = w._observe(failed_record(pod(f"p{i}", f"u{i}"), "no room", 1000.0), bucket)
        created += step is not None
    assert created == 3 and w.dropped == {"rate-limit": 7}
    assert w.changed.is_set()  # the process reports the counts when this is set


def test_normalize_is_ocms_score_normalizer() -> None:
    assert normalize(150, 0, 100) == 100
    assert normalize(0, 0, 100) == -100
    assert normalize(-5, 0, 100) == -100
    assert normalize(50, 0, 100) == 0
    assert normalize(75, 0, 100) == 50


def test_memory_is_in_mib_and_does_not_saturate() -> None:
    """64 GiB free is 65536 MiB of the default 1 TiB range: -87, not 100 (upstream's
    ``memAvailable / 1024 * 1024`` leaves bytes, which saturate any range in MiB)."""
    alloc = Resources(8000, 64 * GIB, 110, {"nvidia.com/gpu": 4})
    scores = {s["name"]: s["value"] for s in compute_scores([(False, alloc, Resources())])}
    assert scores["memNodeAvailable"] == scores["memClusterAvailable"] == -87
    assert scores["cpuNodeAvailable"] == -84  # 8 of 0..100 cores
    assert scores["gpuNodeAvailable"] == -60  # 4 of 0..20


def test_node_scope_is_the_best_node_cluster_scope_the_sum() -> None:
    big = Resources(16000, 32 * GIB, 110, {"nvidia.com/gpu": 8})
    small = Resources(4000, 8 * GIB, 110)
    used = Resources(2000, 4 * GIB, 3, {"nvidia.com/gpu": 6})
    cordoned = Resources(64000, 256 * GIB, 110, {"nvidia.com/gpu": 8})
    free = headroom([(False, big, used), (False, small, Resources()), (True, cordoned, used)])
    assert free["cpu"] == (14.0, 18.0)
    assert free["memory"] == (28 * 1024.0, 36 * 1024.0)
    assert free["nvidia.com/gpu"] == (2.0, 2.0)
    assert headroom([])["cpu"] == (0.0, 0.0)


def test_parse_range() -> None:
    assert parse_range("memory=0:262144") == ("memory", 0.0, 262144.0)
    for bad in ("disk=0:1", "cpu=5:1", "cpu=a:b", "cpu"):
        with pytest.raises(ValueError):
            parse_range(bad)


def test_bad_placement_range_flag_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--kubeconfig", "x", "--placement-scores", "--placement-scores-range", "cpu=9:1"])
    assert code == 2
    assert "MIN must be below MAX" in capsys.readouterr().err


def test_spec_placement_scores_option(tmp_path: Path) -> None:
    parsed, _ = spec.parse("name: x\n", "s.yaml")
    assert parsed.scheduler.placement_scores.enabled is False
    assert placement_flags(parsed.scheduler) == []
    text = "name: x\nscheduler:\n  placement_scores: {enabled: true, namespace: ocm, interval: 5}\n"
    parsed, _ = spec.parse(text, "s.yaml")
    assert placement_flags(parsed.scheduler) == [
        "--placement-scores",
        "--placement-scores-namespace",
        "ocm",
        "--placement-scores-name",
        "resource-usage-score",
        "--placement-scores-interval",
        "5",
    ]
    with pytest.raises(spec.SpecError) as caught:
        spec.parse("name: x\nscheduler:\n  placement_scores: {interval: 0}\n", "s.yaml")
    assert "placement_scores" in str(caught.value.issues)


def test_crd_manifest_is_labelled_and_namespaced() -> None:
    crd = placement_crd()
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "decice"
    assert crd["spec"]["scope"] == "Namespaced"
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
