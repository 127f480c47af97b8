"""The sim node agent against a real control plane (etcd + kube-apiserver +
kube-controller-manager + kube-scheduler on loopback), run as its managed process
``python -m decice.sim.agent``."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from decice.sim.agent.run import agent_client, register_nodes
from decice.sim.binaries.resolve import BinarySet
from decice.sim.controlplane.loopback import ControlPlane, ControlPlaneInfo
from decice.spec_model import SimNodeGroup
from tests.integration.simsupport import (
    create_namespace,
    leaves_nothing,
    start_agent,
    stop_process,
)
from tests.support import RUNNING_POD_CONDITIONS, wait_for

NS = "agent-test"
GROUPS = [
    {"name_prefix": "simcpu", "count": 3, "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    {
        "name_prefix": "simgpu",
        "count": 2,
        "capacity": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": 4},
        "labels": {"accelerator": "a100"},
        "taints": [{"key": "decice.io/gpu", "value": "true", "effect": "NoSchedule"}],
    },
]


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def control_plane(sched_control_plane: ControlPlane) -> Iterator[ControlPlaneInfo]:
    """The session's scheduler control plane (the stock scheduler on, node-lifecycle off:
    the sim default); this module's namespace and node groups are gone afterwards and it
    leaves nothing else (simsupport.leaves_nothing)."""
    info = sched_control_plane.info()
    assert info is not None, "the shared control plane is not running"
    with leaves_nothing(info.kubeconfig, GROUPS, (NS,)):
        yield info


@pytest.fixture(scope="module")
def core(control_plane: ControlPlaneInfo) -> Iterator[client.CoreV1Api]:
    """The API with the test namespace; its Jobs and pods are removed afterwards."""
    api_client = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    api = client.CoreV1Api(api_client)
    create_namespace(api, NS)
    yield api
    client.BatchV1Api(api_client).delete_collection_namespaced_job(
        NS, propagation_policy="Background"
    )
    api.delete_collection_namespaced_pod(NS, grace_period_seconds=0)
    wait_for("the test pods deleted", lambda: not api.list_namespaced_pod(NS).items, 60)


@pytest.fixture(scope="module")
def agent(
    control_plane: ControlPlaneInfo,
    core: client.CoreV1Api,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Path]:
    """The agent process for GROUPS; yields its status file. Stops with SIGTERM -> 0."""
    proc, status = start_agent(control_plane, tmp_path_factory.mktemp("agent"), GROUPS)
    try:
        yield status
    finally:
        code = stop_process(proc)
    assert code == 0
    final = json.loads(status.read_text())
    assert final.get("stopped") is True and final["ready"] is False


# ---------------------------------------------------------------- helpers


def make_pod(
    name: str,
    *,
    node: str | None = None,
    cpu: str = "100m",
    limits: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler: str | None = None,
) -> client.V1Pod:
    resources = client.V1ResourceRequirements(requests={"cpu": cpu}, limits=limits)
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations=annotations),
        spec=client.V1PodSpec(
            node_name=node,
            scheduler_name=scheduler,
            termination_grace_period_seconds=30,
            containers=[
                client.V1Container(
                    name="main", image="registry.invalid/none:1", resources=resources
                )
            ],
        ),
    )


def phase_of(core: client.CoreV1Api, name: str, wanted: str, timeout: float = 30.0) -> Any:
    return wait_for(
        f"pod {name} {wanted}",
        lambda: (lambda p: p if p.status.phase == wanted else None)(
            core.read_namespaced_pod(name, NS)
        ),
        timeout,
    )


def bind(core: client.CoreV1Api, pod: str, node: str) -> None:
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name=pod),
        target=client.V1ObjectReference(kind="Node", name=node),
    )
    core.create_namespaced_binding(NS, body, _preload_content=False)


# ---------------------------------------------------------------- tests


@pytest.mark.sim
def test_nodes_registered_ready_with_capacity_labels_and_taints(
    agent: Path, core: client.CoreV1Api
) -> None:
    nodes = {n.metadata.name: n for n in core.list_node(label_selector="decice.io/sim").items}
    assert set(nodes) == {"simcpu-0", "simcpu-1", "simcpu-2", "simgpu-0", "simgpu-1"}
    gpu = nodes["simgpu-1"]
    assert gpu.status.allocatable["nvidia.com/gpu"] == "4"
    assert gpu.metadata.labels["accelerator"] == "a100"
    assert gpu.metadata.labels["kubernetes.io/hostname"] == "simgpu-1"
    assert [t.key for t in gpu.spec.taints] == ["decice.io/gpu"]
    for node in nodes.values():
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready[0].status == "True"
    status = json.loads(agent.read_text())
    assert status["nodes"] == 5 and status["heartbeat"] is False


@pytest.mark.sim
def test_bound_pod_becomes_running(agent: Path, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, make_pod("bound", node="simcpu-0"))
    pod = phase_of(core, "bound", "Running")
    assert pod.status.host_ip == "10.64.0.0"
    assert pod.status.pod_ip and pod.status.start_time
    conds = {c.type: c.status for c in pod.status.conditions}
    assert conds == RUNNING_POD_CONDITIONS
    cs = pod.status.container_statuses[0]
    assert cs.ready and cs.state.running.started_at


@pytest.mark.sim
def test_pod_beyond_the_node_remainder_fails_outofcpu(agent: Path, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, make_pod("first", node="simcpu-1", cpu="3"))
    phase_of(core, "first", "Running")
    # nobody schedules it (unknown scheduler); bound by hand, as a scheduler would
    core.create_namespaced_pod(NS, make_pod("second", cpu="2", scheduler="nobody"))
    bind(core, "second", "simcpu-1")
    pod = phase_of(core, "second", "Failed")
    assert pod.status.reason == "OutOfcpu"
    assert pod.status.message == (
        "Pod Node didn't have enough resource: cpu, requested: 2000, used: 3000, capacity: 4000"
    )


@pytest.mark.sim
def test_extended_resource_missing_fails_outof_gpu(agent: Path, core: client.CoreV1Api) -> None:
    gpu = {"nvidia.com/gpu": "1"}
    core.create_namespaced_pod(NS, make_pod("wants-gpu", node="simcpu-2", limits=gpu))
    pod = phase_of(core, "wants-gpu", "Failed")
    assert pod.status.reason == "OutOfnvidia.com/gpu"
    assert pod.status.message.endswith("requested: 1, used: 0, capacity: 0")
    core.create_namespaced_pod(NS, make_pod("has-gpu", node="simgpu-0", limits=gpu))
    phase_of(core, "has-gpu", "Running")


@pytest.mark.sim
def test_sim_duration_ends_in_succeeded_and_exit_code_in_failed(
    agent: Path, core: client.CoreV1Api
) -> None:
    core.create_namespaced_pod(
        NS, make_pod("short", node="simcpu-2", annotations={"decice.io/sim-duration": "1s"})
    )
    core.create_namespaced_pod(
        NS,
        make_pod(
            "crash",
            node="simcpu-2",
            annotations={"decice.io/sim-duration": "500ms", "decice.io/sim-exit-code": "3"},
        ),
    )
    t0 = time.monotonic()
    phase_of(core, "short", "Running", timeout=10)
    pod = phase_of(core, "short", "Succeeded", timeout=10)
    assert 0.8 <= time.monotonic() - t0 <= 6.0
    term = pod.status.container_statuses[0].state.terminated
    assert term.exit_code == 0 and term.reason == "Completed"
    crashed = phase_of(core, "crash", "Failed", timeout=10)
    assert crashed.status.container_statuses[0].state.terminated.exit_code == 3


@pytest.mark.sim
def test_deleted_bound_pod_disappears(agent: Path, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, make_pod("doomed", node="simcpu-0"))
    phase_of(core, "doomed", "Running")
    core.delete_namespaced_pod("doomed", NS)  # default grace period 30 s

    def gone() -> bool:
        try:
            core.read_namespaced_pod("doomed", NS)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for("doomed to be deleted (no Terminating left)", gone, timeout=10)


@pytest.mark.sim
def test_default_scheduler_places_a_pod_that_runs(agent: Path, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, make_pod("scheduled", cpu="500m"))
    pod = phase_of(core, "scheduled", "Running", timeout=60)
    assert pod.spec.node_name.startswith("simcpu-")  # gpu nodes are tainted


@pytest.mark.sim
def test_status_file_counts(agent: Path, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, make_pod("counted", node="simcpu-0"))
    phase_of(core, "counted", "Running")
    status = wait_for(
        "status file update",
        lambda: (lambda s: s if s["pods"]["running"] >= 1 and s["last_relist"] else None)(
            json.loads(agent.read_text())
        ),
        timeout=10,
    )
    assert status["relists"] >= 1 and status["write_errors"] == 0


def make_job(name: str, annotations: dict[str, str] | None = None) -> client.V1Job:
    pod = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(annotations=annotations),
        spec=client.V1PodSpec(
            restart_policy="Never",
            containers=[client.V1Container(name="main", image="registry.invalid/none:1")],
        ),
    )
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(completions=1, backoff_limit=0, template=pod),
    )


def job_condition(batch: client.BatchV1Api, name: str) -> str | None:
    conds = batch.read_namespaced_job_status(name, NS).status.conditions or []
    return next((c.type for c in conds if c.status == "True"), None)


@pytest.mark.sim
def test_job_pod_succeeds_after_the_job_duration_and_the_job_completes(
    agent: Path, core: client.CoreV1Api
) -> None:
    batch = client.BatchV1Api(core.api_client)
    t0 = time.monotonic()
    batch.create_namespaced_job(NS, make_job("one-shot"))
    wait_for("job one-shot Complete", lambda: job_condition(batch, "one-shot") == "Complete", 60)
    assert time.monotonic() - t0 >= 2.0  # the agent's default Job pod duration
    pods = core.list_namespaced_pod(NS, label_selector="job-name=one-shot").items
    assert [p.status.phase for p in pods] == ["Succeeded"]
    term = pods[0].status.container_statuses[0].state.terminated
    assert term.exit_code == 0 and term.reason == "Completed"
    assert batch.read_namespaced_job_status("one-shot", NS).status.succeeded == 1


@pytest.mark.sim
def test_job_pod_annotations_keep_precedence(agent: Path, core: client.CoreV1Api) -> None:
    batch = client.BatchV1Api(core.api_client)
    batch.create_namespaced_job(NS, make_job("crashes", {"decice.io/sim-exit-code": "7"}))
    wait_for("job crashes Failed", lambda: job_condition(batch, "crashes") == "Failed", 60)
    pods = core.list_namespaced_pod(NS, label_selector="job-name=crashes").items
    assert [p.status.phase for p in pods] == ["Failed"]
    assert pods[0].status.container_statuses[0].state.terminated.exit_code == 7


@pytest.mark.sim
def test_register_is_idempotent_and_count_reduction_deletes_extra_nodes(
    control_plane: ControlPlaneInfo, core: client.CoreV1Api
) -> None:
    def groups(count: int) -> list[SimNodeGroup]:
        return [SimNodeGroup.model_validate({"name_prefix": "extra", "count": count})]

    async def register(count: int) -> Any:
        async with agent_client(control_plane.kubeconfig) as kc:
            return await register_nodes(kc, groups(count))

    first = asyncio.run(register(3))
    assert first.created == ["extra-0", "extra-1", "extra-2"] and not first.deleted
    core.patch_node("extra-0", {"metadata": {"labels": {"touched": "yes"}}})
    again = asyncio.run(register(3))
    assert not again.created and not again.deleted and len(again.existing) == 3
    assert core.read_node("extra-0").metadata.labels["touched"] == "yes"  # left as it was
    # a foreign node that merely shares the prefix is never deleted
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="extra-7")))
    fewer = asyncio.run(register(1))
    assert fewer.deleted == ["extra-1", "extra-2"]
    names = {n.metadata.name for n in core.list_node().items}
    assert {"extra-0", "extra-7"} <= names and not {"extra-1", "extra-2"} & names
    for name in ("extra-0", "extra-7"):
        core.delete_node(name)


@pytest.mark.sim
@pytest.mark.own_control_plane(reason="the node-lifecycle controller on; the shared one has it off")
def test_lease_heartbeats_when_node_lifecycle_runs(sim_binaries: BinarySet, tmp_path: Path) -> None:
    """With the node-lifecycle controller on, auto mode detects it and renews Leases; the
    controller lifts the not-ready taint and the node stays Ready."""
    cp = ControlPlane(tmp_path / "cp", sim_binaries, node_lifecycle=True)
    info = cp.start()
    proc = None
    try:
        groups = [{"name_prefix": "hb", "count": 2, "capacity": {"cpu": "2", "memory": "4Gi"}}]
        proc, status = start_agent(info, tmp_path, groups, "--lease-interval", "2")
        api = config.new_client_from_config(config_file=str(info.kubeconfig))
        core_hb = client.CoreV1Api(api)
        leases = client.CoordinationV1Api(api)
        assert json.loads(status.read_text())["heartbeat"] is True
        first = wait_for(
            "lease hb-1",
            lambda: leases.read_namespaced_lease("hb-1", "kube-node-lease").spec.renew_time,
        )
        wait_for(
            "lease renewal",
            lambda: leases.read_namespaced_lease("hb-1", "kube-node-lease").spec.renew_time > first,
            timeout=10,
        )

        def untainted() -> bool:
            taints = core_hb.read_node("hb-1").spec.taints or []
            return not any(t.key.startswith("node.kubernetes.io/") for t in taints)

        wait_for("not-ready taint lifted", untainted, timeout=60)
    finally:
        if proc is not None:
            assert stop_process(proc) == 0
        cp.stop()
