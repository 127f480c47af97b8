"""Simulated nodes: Node JSON, durations, workload annotations, kubelet admission, and the
agent's bookkeeping (no API server: writes are only queued)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from decice.sim.agent import simnodes
from decice.sim.agent.run import NodeAgent
from decice.spec_model import SimNodeGroup
from decice_scheduler.cache.resources import Resources, node_allocatable, pod_request
from tests.support import RUNNING_POD_CONDITIONS

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def gpu_group(count: int = 3) -> SimNodeGroup:
    return SimNodeGroup.model_validate(
        {
            "name_prefix": "gpu",
            "count": count,
            "capacity": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": 4},
            "labels": {"accelerator": "a100"},
            "taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}],
        }
    )


def pod(uid: str, node: str = "gpu-0", cpu: str = "1", phase: str = "Pending", **extra):
    meta = {
        "uid": uid,
        "name": f"p-{uid}",
        "namespace": "default",
        "creationTimestamp": f"2025-01-01T00:00:{uid[-2:]}Z",
    }
    meta.update(extra.pop("meta", {}))
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "main", "image": "img:1", "resources": {"requests": {"cpu": cpu}}}
            ],
        },
        "status": {"phase": phase},
    }


@pytest.mark.unit
def test_nodes_are_named_from_zero_and_carry_group_labels_taints_and_status():
    nodes = list(simnodes.expand([gpu_group(3)]))
    assert [n.name for n in nodes] == ["gpu-0", "gpu-1", "gpu-2"]
    obj = simnodes.node_object(nodes[1], NOW)
    labels = obj["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == "gpu-1"
    assert labels["accelerator"] == "a100"
    assert labels[simnodes.SIM_LABEL] == "true" and labels[simnodes.GROUP_LABEL] == "gpu"
    assert obj["spec"]["taints"] == [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]
    status = obj["status"]
    assert (
        status["capacity"]
        == status["allocatable"]
        == {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4", "pods": "110"}
    )
    ready = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "True"
    assert ready[0]["lastHeartbeatTime"] == "2025-01-02T03:04:05Z"
    assert {"type": "InternalIP", "address": "10.64.0.1"} in status["addresses"]
    assert status["nodeInfo"]["kubeletVersion"] == "v1.20.2"
    alloc = node_allocatable(obj)
    assert (alloc.cpu, alloc.pods, alloc.get("nvidia.com/gpu")) == (16000, 110, 4)


@pytest.mark.unit
def test_expand_rejects_duplicate_prefixes_and_index_of_is_strict():
    with pytest.raises(ValueError, match="used twice"):
        list(simnodes.expand([gpu_group(1), gpu_group(2)]))
    assert simnodes.index_of("gpu", "gpu-12") == 12
    for other in ("gpu-big-0", "gpu-", "gpu-01", "gpux-1", "cpu-1", "gpu--1"):
        assert simnodes.index_of("gpu", other) is None


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("30s", 30.0),
        ("2m", 120.0),
        ("1h30m", 5400.0),
        ("1.5s", 1.5),
        ("0", 0.0),
        ("1m0.25s", 60.25),
        ("100us", 1e-4),
        ("+2s", 2.0),
        (".5h", 1800.0),
    ],
)
def test_go_durations(text, seconds):
    assert simnodes.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.unit
@pytest.mark.parametrize("text", ["", "30", "-1s", "1d", "s", "1h 30m", "abc", "1.2.3s"])
def test_bad_durations(text):
    with pytest.raises(ValueError, match="invalid duration"):
        simnodes.parse_duration(text)


@pytest.mark.unit
def test_workload_annotations():
    def ann(**a):
        return simnodes.workload_of({"metadata": {"annotations": a}})

    assert ann() == (simnodes.Workload(None, 0), None)
    assert ann(**{"decice.io/sim-duration": "2m"}) == (simnodes.Workload(120.0, 0), None)
    assert ann(**{"decice.io/sim-duration": "1s", "decice.io/sim-exit-code": "3"})[0] == (
        simnodes.Workload(1.0, 3)
    )
    assert ann(**{"decice.io/sim-exit-code": "1"})[0] == simnodes.Workload(0.0, 1)
    work, warning = ann(**{"decice.io/sim-duration": "soon"})
    assert work == simnodes.Workload(None, 0) and "sim-duration" in (warning or "")
    work, warning = ann(**{"decice.io/sim-exit-code": "300"})
    assert work == simnodes.Workload(None, 0) and "exit code" in (warning or "")


@pytest.mark.unit
def test_admission_verdicts_read_like_the_kubelet():
    alloc = Resources(16000, 64 * 2**30, 110, {"nvidia.com/gpu": 4})
    used = Resources(14000, 2**30, 3, {"nvidia.com/gpu": 4})
    assert simnodes.admission_failure(Resources(2000, 0, 1), alloc, used) is None
    assert simnodes.admission_failure(Resources(4000, 0, 1), alloc, used) == (
        "OutOfcpu",
        "Pod Node didn't have enough resource: cpu, requested: 4000, used: 14000, capacity: 16000",
    )
    reason, _ = simnodes.admission_failure(
        Resources(0, 0, 1, {"nvidia.com/gpu": 1}), alloc, used
    ) or ("", "")
    assert reason == "OutOfnvidia.com/gpu"
    reason, msg = simnodes.admission_failure(Resources(0, 128 * 2**30, 1), alloc, used) or ("", "")
    assert reason == "OutOfmemory" and "capacity: 68719476736" in msg
    full = Resources(0, 0, 110)
    assert simnodes.admission_failure(Resources(0, 0, 1), alloc, full) == (
        "OutOfpods",
        "Pod Node didn't have enough resource: pods, requested: 1, used: 110, capacity: 110",
    )
    # a node without the extended resource at all: capacity 0
    reason, msg = simnodes.admission_failure(
        Resources(0, 0, 1, {"example.com/fpga": 1}), alloc, Resources()
    ) or ("", "")
    assert reason == "OutOfexample.com/fpga" and msg.endswith("capacity: 0")


@pytest.mark.unit
def test_status_patches_carry_uid_precondition_and_kubelet_fields():
    p = pod("u-01")
    p["spec"]["initContainers"] = [{"name": "init", "image": "i:1"}]
    running = simnodes.running_status(p, "10.64.0.1", "10.128.0.7", NOW)
    assert running["metadata"] == {"uid": "u-01"}
    st = running["status"]
    assert st["phase"] == "Running" and st["podIP"] == "10.128.0.7"
    assert st["hostIP"] == "10.64.0.1" and st["startTime"] == "2025-01-02T03:04:05Z"
    assert {c["type"]: c["status"] for c in st["conditions"]} == RUNNING_POD_CONDITIONS
    assert st["containerStatuses"][0]["state"] == {"running": {"startedAt": "2025-01-02T03:04:05Z"}}
    assert st["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    done = simnodes.finished_status(p, NOW, NOW, 2)["status"]
    assert done["phase"] == "Failed"
    assert done["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 2
    assert simnodes.finished_status(p, NOW, NOW, 0)["status"]["phase"] == "Succeeded"
    rej = simnodes.rejected_status(p, "OutOfcpu", "Pod Node didn't ...", NOW)["status"]
    assert (rej["phase"], rej["reason"]) == ("Failed", "OutOfcpu")


def make_agent(count: int = 2) -> NodeAgent:
    return NodeAgent(
        SimpleNamespace(requests=0, retries=0), list(simnodes.expand([gpu_group(count)]))
    )  # type: ignore[arg-type]


def queued(agent: NodeAgent) -> list[tuple[str, dict]]:
    out = []
    while not agent.queue.empty():
        fn, args = agent.queue.get_nowait()
        out.append((fn.__name__, args[1] if len(args) > 1 else {}))
    return out


@pytest.mark.unit
def test_agent_admits_until_full_then_rejects_and_frees_on_delete():
    agent = make_agent()
    for i in range(4):
        agent.on_pod("ADDED", pod(f"u-{i:02d}", cpu="4"))
    agent.on_pod("ADDED", pod("u-09", cpu="4"))  # 5th 4-cpu pod on a 16-cpu node
    agent.on_pod("ADDED", pod("u-10", node="elsewhere"))  # not ours: ignored
    writes = queued(agent)
    phases = [w[1]["status"]["phase"] for w in writes]
    assert phases == ["Running"] * 4 + ["Failed"]
    assert writes[-1][1]["status"]["reason"] == "OutOfcpu"
    assert agent.nodes["gpu-0"].used == Resources(16000, 0, 4)
    # echo of our own patch changes nothing
    agent.on_pod("MODIFIED", pod("u-00", cpu="4", phase="Running"))
    assert not queued(agent)
    # deletion: force delete queued, resources freed; DELETED forgets it
    agent.on_pod(
        "MODIFIED",
        pod("u-00", cpu="4", phase="Running", meta={"deletionTimestamp": "2025-01-01T00:00:00Z"}),
    )
    assert [w[0] for w in queued(agent)] == ["_force_delete"]
    assert agent.nodes["gpu-0"].used == Resources(12000, 0, 3)
    agent.on_pod("DELETED", pod("u-00", cpu="4"))
    assert "u-00" not in agent.pods
    assert agent.status()["pods"]["running"] == 3
    assert agent.status()["pods"]["failed"] == 1


@pytest.mark.unit
def test_agent_relist_forgets_vanished_pods_and_adopts_running_ones():
    agent = make_agent()
    agent.on_pod("ADDED", pod("u-01", cpu="8"))
    queued(agent)
    running = pod("u-02", cpu="6", phase="Running")
    agent.relist([running, pod("u-03", cpu="4")])  # u-01 vanished during a watch gap
    assert "u-01" not in agent.pods
    assert agent.pods["u-02"].state == "running"
    assert [w[1]["status"]["phase"] for w in queued(agent)] == ["Running"]  # only u-03
    assert agent.nodes["gpu-0"].used == Resources(10000, 0, 2)
    assert pod_request(running) == Resources(6000, 0, 1)


@pytest.mark.unit
def test_agent_finishes_annotated_pods():
    async def scenario():
        agent = make_agent()
        agent.on_pod(
            "ADDED",
            pod(
                "u-01",
                meta={
                    "annotations": {
                        "decice.io/sim-duration": "50ms",
                        "decice.io/sim-exit-code": "4",
                    }
                },
            ),
        )
        assert [w[1]["status"]["phase"] for w in queued(agent)] == ["Running"]
        await asyncio.sleep(0.2)
        writes = queued(agent)
        assert [w[1]["status"]["phase"] for w in writes] == ["Failed"]
        term = writes[0][1]["status"]["containerStatuses"][0]["state"]["terminated"]
        assert term["exitCode"] == 4
        assert agent.nodes["gpu-0"].used == Resources()

    asyncio.run(scenario())
