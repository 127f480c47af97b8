"""decice-scheduler's events and OCM placement scores on the session control plane (real
kube-apiserver 1.20, controller-manager, no kubelet: pods stay bound and Pending).

Nodes are created through the API (no node agent), each test with its own scheduler
name, namespace and node prefix, all removed afterwards.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from kubernetes import client
from kubernetes.client.rest import ApiException

from decice.sim import scheduler_service
from decice.sim.agent.simnodes import expand, node_object
from decice.sim.controlplane import pki
from decice.sim.controlplane.loopback import ControlPlaneInfo
from decice.spec_model import SimNodeGroup
from decice_scheduler.cache.resources import Resources, node_allocatable
from decice_scheduler.cache.usage import compute_usage
from decice_scheduler.scores import compute_scores
from tests.integration.schedsupport import bound_node, create_pod, pod, raw_json
from tests.integration.simsupport import SchedulerProc, create_namespace
from tests.support import wait_for

pytestmark = pytest.mark.scheduler

GROUP = "cluster.open-cluster-management.io"
RANGES = ("--placement-scores-range", "nvidia.com/gpu=0:16")


def make_nodes(core: client.CoreV1Api, prefix: str, count: int, **capacity: str) -> list[str]:
    cap = {"cpu": "8", "memory": "16Gi", "pods": "110", **capacity}
    group = SimNodeGroup(name_prefix=prefix, count=count, capacity=cap)
    names = []
    for node in expand([group]):
        core.create_node(node_object(node, datetime.now(UTC)))
        names.append(node.name)
    return names


def scheduler(kubeconfig: Path, workdir: Path, name: str, *extra: str) -> SchedulerProc:
    """A decice-scheduler ``name`` with flags ``extra``, for ``with`` (started, stopped)."""
    return SchedulerProc(kubeconfig, workdir, name=name, extra=extra)


@contextlib.contextmanager
def scratch(core: client.CoreV1Api, ns: str, nodes: list[str]) -> Iterator[None]:
    try:
        yield
    finally:
        with contextlib.suppress(ApiException):
            core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        with contextlib.suppress(ApiException):
            core.delete_namespace(ns)
        for node in nodes:
            with contextlib.suppress(ApiException):
                core.delete_node(node)


def events_v1(api: client.ApiClient, ns: str, reason: str) -> list[dict[str, Any]]:
    resp = client.EventsV1Api(api).list_namespaced_event(
        ns, field_selector=f"reason={reason}", _preload_content=False
    )
    return list(raw_json(resp)["items"])


def metric(sched: SchedulerProc, key: str) -> float:
    return sched.metrics().get(key, 0.0)


# ---------------------------------------------------------------- events


def test_scheduled_events_and_failed_scheduling_series(
    sim_control_plane: ControlPlaneInfo, sim_api: client.ApiClient, tmp_path: Path
) -> None:
    """One events.k8s.io/v1 ``Scheduled`` event per bound pod with kube-scheduler's
    fields; an unschedulable pod retried several times is one FailedScheduling object
    whose count grows; a burst of unschedulable pods is cut by the event rate limit."""
    name, ns = "ev-sched", "ev-sched"
    core = client.CoreV1Api(sim_api)
    create_namespace(core, ns)
    nodes = make_nodes(core, "evs", 2)
    extra = ("--event-qps", "0.01", "--event-burst", "4", "--max-backoff", "1")
    with (
        scratch(core, ns, nodes),
        scheduler(sim_control_plane.kubeconfig, tmp_path, name, *extra) as s,
    ):
        uids = {}
        for i in range(3):
            body = pod(f"p{i}", None, scheduler=name, selector={"kubernetes.io/hostname": nodes[0]})
            uids[f"p{i}"] = create_pod(core, ns, body)["metadata"]["uid"]
        wait_for("3 Scheduled events", lambda: len(events_v1(sim_api, ns, "Scheduled")) == 3, 30)
        for ev in events_v1(sim_api, ns, "Scheduled"):
            pod_name = ev["regarding"]["name"]
            assert ev["regarding"]["uid"] == uids[pod_name]
            assert ev["regarding"]["kind"] == "Pod" and ev["regarding"]["namespace"] == ns
            assert ev["note"] == f"Successfully assigned {ns}/{pod_name} to {nodes[0]}"
            assert (ev["type"], ev["action"]) == ("Normal", "Binding")
            assert ev["reportingController"] == name
            assert ev["reportingInstance"].startswith(f"{name}-")
            assert bound_node(core, ns, pod_name) == nodes[0]

        # retried: one object, its count grows (the first repeat is written at once)
        create_pod(core, ns, pod("huge", None, cpu="100", scheduler=name))

        def huge_events() -> list[Any]:
            found = core.list_namespaced_event(
                ns, field_selector="involvedObject.name=huge,reason=FailedScheduling"
            ).items
            return list(found)

        def retried() -> bool:
            # a node change puts unschedulable pods back in the queue (else a 30 s flush)
            tick = {"metadata": {"labels": {"decice.test/tick": str(time.monotonic_ns())}}}
            core.patch_node(nodes[1], tick)
            return any((e.count or 0) >= 2 for e in huge_events())

        wait_for("huge counted twice", retried, 30, every=1.5)
        (ev,) = huge_events()
        assert ev.type == "Warning" and ev.source.component == name
        assert "Insufficient cpu" in ev.message

        # a burst of 10 more: at most the 3 tokens left are used, the rest dropped
        for i in range(10):
            create_pod(core, ns, pod(f"big{i}", None, cpu="100", scheduler=name))
        wait_for(
            "rate-limited",
            lambda: metric(s, "decice_scheduler_events_dropped_total{cause=rate-limit}") >= 7,
            30,
        )
        time.sleep(1.0)
        failed = core.list_namespaced_event(ns, field_selector="reason=FailedScheduling").items
        assert len(failed) <= 4, [e.involved_object.name for e in failed]
        assert metric(s, "decice_scheduler_events_total{reason=Scheduled}") == 3


class SlowRefusingWebhook:
    """An admission webhook on 127.0.0.1 (TLS, its own CA) that answers every request it
    gets after ``delay`` seconds with a refusal: a slow API server refusing events."""

    def __init__(self, directory: Path, delay: float) -> None:
        key, cert = pki.self_signed("127.0.0.1", timedelta(hours=1), ips=("127.0.0.1",))
        pki.write_pair(pki.Pair(cert=directory / "hook.crt", key=directory / "hook.key"), key, cert)
        self.pem = cert.public_bytes(serialization.Encoding.PEM)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(directory / "hook.crt", directory / "hook.key")
        self.calls = 0

        hook = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                hook.calls += 1
                time.sleep(delay)
                body = json.dumps(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": {
                            "uid": review["request"]["uid"],
                            "allowed": False,
                            "status": {"code": 403, "message": "events refused by the test"},
                        },
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def configuration(self, name: str, ns: str) -> dict[str, Any]:
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": f"{name}.decice.test",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{self.port}/",
                        "caBundle": base64.b64encode(self.pem).decode(),
                    },
                    "rules": [
                        {
                            "apiGroups": ["", "events.k8s.io"],
                            "apiVersions": ["*"],
                            "operations": ["CREATE"],
                            "resources": ["events"],
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                    "objectSelector": {},
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 10,
                }
            ],
        }

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_binding_goes_on_while_the_api_refuses_events_slowly(
    sim_control_plane: ControlPlaneInfo, sim_api: client.ApiClient, tmp_path: Path
) -> None:
    """Every event write of the namespace waits 2 s in an admission webhook and is then
    refused: all pods are still bound at the bind rate; the refusals are counted."""
    name, ns = "ev-refused", "ev-refused"
    core = client.CoreV1Api(sim_api)
    create_namespace(core, ns)
    core.patch_namespace(ns, {"metadata": {"labels": {"kubernetes.io/metadata.name": ns}}})
    hook = SlowRefusingWebhook(tmp_path, delay=2.0)
    admission = client.AdmissionregistrationV1Api(sim_api)
    admission.create_validating_webhook_configuration(hook.configuration(name, ns))  # type: ignore[arg-type]
    nodes = make_nodes(core, "evr", 2, cpu="64")
    try:
        with scratch(core, ns, nodes), scheduler(sim_control_plane.kubeconfig, tmp_path, name) as s:
            count = 60
            started = time.monotonic()
            for i in range(count):
                create_pod(core, ns, pod(f"q{i}", None, scheduler=name, cpu="10m"))
            created = time.monotonic() - started
            wait_for("all bound", lambda: metric(s, "decice_scheduler_scheduled_total") == count)
            took = time.monotonic() - started
            # at most 32 writes in flight, 2 s each: the writer is far behind the binder
            assert hook.calls < count, hook.calls
            wait_for(
                "refusals counted",
                lambda: (
                    metric(s, "decice_scheduler_events_dropped_total{cause=write-error}") >= count
                ),
                30,
            )
            assert metric(s, "decice_scheduler_events_total{reason=Scheduled}") == 0
            assert not events_v1(sim_api, ns, "Scheduled")
            assert took < created + 10, (took, created)
    finally:
        admission.delete_validating_webhook_configuration(name)
        hook.stop()


# ---------------------------------------------------------------- placement scores


def recomputed(api: client.ApiClient) -> list[dict[str, Any]]:
    core = client.CoreV1Api(api)
    nodes = raw_json(core.list_node(_preload_content=False))["items"]
    pods = raw_json(core.list_pod_for_all_namespaces(_preload_content=False))["items"]
    usage = compute_usage(pods)
    rows = []
    for node in nodes:
        name = node["metadata"]["name"]
        requested = usage[name].requested if name in usage else Resources()
        cordoned = bool((node.get("spec") or {}).get("unschedulable"))
        rows.append((cordoned, node_allocatable(node), requested))
    return compute_scores(rows, {"nvidia.com/gpu": (0.0, 16.0)})


def published(api: client.ApiClient, ns: str) -> list[dict[str, Any]] | None:
    custom = client.CustomObjectsApi(api)
    try:
        obj = custom.get_namespaced_custom_object(
            GROUP, "v1alpha1", ns, "addonplacementscores", "resource-usage-score"
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    status = dict(obj).get("status") or {}  # type: ignore[call-overload]
    return list(status.get("scores") or []) or None


def test_placement_scores_follow_the_cluster_and_the_crd(
    sim_control_plane: ControlPlaneInfo, sim_api: client.ApiClient, tmp_path: Path
) -> None:
    name, ns = "sc-sched", "sc-scores"
    kubeconfig = sim_control_plane.kubeconfig
    core = client.CoreV1Api(sim_api)
    create_namespace(core, ns)
    nodes = make_nodes(core, "scg", 2, **{"nvidia.com/gpu": "4"})
    flags: tuple[str, ...] = ("--placement-scores", "--placement-scores-namespace", ns)
    flags = (*flags, "--placement-scores-interval", "1", *RANGES)
    assert scheduler_service.remove_placement_crd(kubeconfig) is False  # none yet
    with scratch(core, ns, nodes), scheduler(kubeconfig, tmp_path, name, *flags) as s:
        # no CRD: nothing published, one clear log line, still scheduling
        wait_for("CRD-absent line", lambda: "is not installed" in s.log.read_text(), 20)
        create_pod(core, ns, pod("g0", None, gpu=2, scheduler=name))
        wait_for("g0 bound", lambda: bound_node(core, ns, "g0"), 20)
        time.sleep(2.5)
        assert s.running()
        assert s.log.read_text().count("placement scores not published") == 1

        # the CRD appears (installed by decice): published within an interval
        assert scheduler_service.ensure_placement_crd(kubeconfig) is True
        try:
            wait_for("published", lambda: published(sim_api, ns) == recomputed(sim_api), 20)
            before = published(sim_api, ns)
            for i in range(1, 4):
                create_pod(core, ns, pod(f"g{i}", None, gpu=2, scheduler=name))
            wait_for("3 more bound", lambda: all(bound_node(core, ns, f"g{i}") for i in (1, 2, 3)))
            wait_for("GPU pods", lambda: published(sim_api, ns) == recomputed(sim_api), 20)
            full = published(sim_api, ns)
            assert full != before
            # a node with 8 GPUs joins, one full node leaves
            nodes += make_nodes(core, "scb", 1, **{"nvidia.com/gpu": "8"})
            core.delete_node(nodes[0])
            wait_for("nodes", lambda: published(sim_api, ns) == recomputed(sim_api), 20)
            assert published(sim_api, ns) != full
            core.delete_namespaced_pod("g1", ns, grace_period_seconds=0)
            wait_for("pod gone", lambda: published(sim_api, ns) == recomputed(sim_api), 20)
            writes = metric(s, "decice_scheduler_placement_scores_published_total")
            time.sleep(3)  # nothing changes: nothing written
            assert metric(s, "decice_scheduler_placement_scores_published_total") == writes
        finally:
            assert scheduler_service.remove_placement_crd(kubeconfig) is True

    # a CRD decice did not install (no managed-by label) is left alone
    assert scheduler_service.ensure_placement_crd(kubeconfig) is True
    ext = client.ApiextensionsV1Api(sim_api)
    crd = scheduler_service.CRD_NAME
    ext.patch_custom_resource_definition(crd, {"metadata": {"labels": None}})
    try:
        assert scheduler_service.ensure_placement_crd(kubeconfig) is False
        assert scheduler_service.remove_placement_crd(kubeconfig) is False
        assert ext.read_custom_resource_definition(crd).metadata is not None
    finally:
        ext.delete_custom_resource_definition(crd)
