"""The sim's virtual kubelet for interLink-backed nodes: endpoint file, request bodies
(field names of interLink 0.6.2's Go types), status mapping, and the per-node rounds
against a fake plugin (no API server: writes are only queued)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from decice.sim import procs
from decice.sim.agent import nodes_service, simnodes, vkmodel
from decice.sim.agent import run as agent
from decice.sim.agent.vkmodel import Endpoint, MissingRef
from decice.sim.agent.vkubelet import (
    BackedNode,
    PluginError,
    PluginRefused,
    VirtualKubelets,
)
from decice.spec_model import SimNodeGroup, SimSpec
from tests.support import RUNNING_POD_CONDITIONS

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def pod(
    uid: str = "u1",
    *,
    node: str = "hpc-0",
    phase: str = "Pending",
    containers: Sequence[Mapping[str, Any]] = ({"name": "main", "image": "busybox"},),
    init: Sequence[Mapping[str, Any]] = (),
    volumes: Sequence[Mapping[str, Any]] = (),
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"p-{uid}",
        "namespace": "ns",
        "uid": uid,
        "managedFields": [{"manager": "kubectl"}],
        "annotations": {"a": "x"},
        "labels": {"app": "demo"},
    }
    if deleting:
        meta["deletionTimestamp"] = "2025-01-02T03:04:05Z"
    spec: dict[str, Any] = {
        "nodeName": node,
        "containers": [dict(c) for c in containers],
        "volumes": list(volumes),
    }
    if init:
        spec["initContainers"] = [dict(c) for c in init]
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


# ---------------------------------------------------------------- endpoint file


@pytest.mark.unit
def test_endpoint_file_is_under_the_sim_state() -> None:
    assert vkmodel.endpoint_file(Path("/s")) == Path("/s/sim/interlink.json")


@pytest.mark.unit
def test_parse_endpoints_reads_nodes() -> None:
    text = json.dumps(
        {
            "nodes": {
                "hpc-0": {"url": "http://10.0.0.5:4000/", "token_file": "/t/hpc-0.token"},
                "hpc-1": {"url": "unix:/run/p.sock", "extra": 1},
            }
        }
    )
    got = vkmodel.parse_endpoints(text, "F")
    assert got == {
        "hpc-0": Endpoint("hpc-0", "http://10.0.0.5:4000", Path("/t/hpc-0.token")),
        "hpc-1": Endpoint("hpc-1", "unix:/run/p.sock", None),
    }


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{", "F: not JSON"),
        ("[]", 'F: expected {"nodes"'),
        ('{"nodes": {"n": 3}}', "F: nodes.n: expected a mapping"),
        ('{"nodes": {"n": {"url": "ftp://x"}}}', "F: nodes.n.url: 'ftp://x' is not"),
        ('{"nodes": {"n": {"url": "http://h:1"}}}', "F: nodes.n.token_file: required"),
        (
            '{"nodes": {"n": {"url": "http://h:1", "token_file": "rel"}}}',
            "F: nodes.n.token_file: 'rel' is not an absolute path",
        ),
    ],
)
def test_parse_endpoints_names_file_and_field(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match="^" + fragment.replace("{", r"\{").replace("[", r"\[")):
        vkmodel.parse_endpoints(text, "F")


@pytest.mark.unit
def test_token_file_must_be_private_and_regular() -> None:
    assert vkmodel.check_token_file(Path("/t"), 0o100600, True) is None
    assert "chmod 600 /t" in str(vkmodel.check_token_file(Path("/t"), 0o100640, True))
    assert "not a regular file" in str(vkmodel.check_token_file(Path("/t"), 0o600, False))


# ---------------------------------------------------------------- request bodies

CM = {"metadata": {"name": "cfg", "managedFields": [1]}, "data": {"A": "1", "B": "2"}}
SECRET = {"metadata": {"name": "sec"}, "data": {"PASS": b64("hunter2"), "U": b64("me")}}


@pytest.mark.unit
def test_env_resolution() -> None:
    container = {
        "name": "main",
        "envFrom": [
            {"configMapRef": {"name": "cfg"}, "prefix": "C_"},
            {"secretRef": {"name": "sec"}},
            {"configMapRef": {"name": "absent", "optional": True}},
        ],
        "env": [
            {"name": "PASS", "value": "explicit"},
            {"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "B"}}},
            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "PASS"}}},
            {
                "name": "OPT",
                "valueFrom": {"secretKeyRef": {"name": "sec", "key": "no", "optional": True}},
            },
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "ANN", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['a']"}}},
            {"name": "LBL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {
                "name": "CPU",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}},
            },
        ],
        "resources": {"limits": {"cpu": "2"}},
    }
    p = pod(containers=[container])
    env = vkmodel.resolve_env(p, p["spec"]["containers"][0], {"cfg": CM}, {"sec": SECRET})
    assert env == [
        {"name": "C_A", "value": "1"},
        {"name": "C_B", "value": "2"},
        {"name": "U", "value": "me"},
        {"name": "PASS", "value": "explicit"},
        {"name": "K", "value": "2"},
        {"name": "S", "value": "hunter2"},
        {"name": "POD", "value": "p-u1"},
        {"name": "ANN", "value": "x"},
        {"name": "LBL", "value": "demo"},
        {"name": "CPU", "value": "2"},
    ]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}},
            'secret "nope" not found',
        ),
        (
            {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "Z"}}},
            'key "Z" not found in configmap "cfg"',
        ),
    ],
)
def test_env_missing_required_ref(env: dict[str, Any], message: str) -> None:
    p = pod(containers=[{"name": "main", "env": [env]}])
    with pytest.raises(MissingRef, match=message):
        vkmodel.resolve_env(p, p["spec"]["containers"][0], {"cfg": CM}, {})


@pytest.mark.unit
def test_retrieved_pod_data_has_the_go_field_names() -> None:
    volumes = [
        {"name": "c", "configMap": {"name": "cfg"}},
        {"name": "s", "secret": {"secretName": "sec"}},
        {
            "name": "p",
            "projected": {
                "sources": [
                    {"configMap": {"name": "cfg", "items": [{"key": "A", "path": "a.txt"}]}},
                    {"secret": {"name": "sec"}},
                ]
            },
        },
        {"name": "e", "emptyDir": {}},
    ]
    containers: list[dict[str, Any]] = [
        {
            "name": "main",
            "image": "busybox",
            "volumeMounts": [{"name": n, "mountPath": f"/{n}"} for n in "cspe"],
            "envFrom": [{"configMapRef": {"name": "cfg"}}],
        },
        {"name": "side", "image": "busybox"},
    ]
    p = pod(containers=containers, init=[{"name": "setup", "image": "busybox"}], volumes=volumes)
    assert vkmodel.references(p) == ({"cfg"}, {"sec"})
    data = vkmodel.retrieved_pod_data(p, {"cfg": CM}, {"sec": SECRET})
    assert set(data) == {"pod", "container"}
    assert "managedFields" not in data["pod"]["metadata"]
    assert data["pod"]["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "2"},
    ]
    assert "envFrom" not in data["pod"]["spec"]["containers"][0]
    assert [c["name"] for c in data["container"]] == ["setup", "main", "side"]
    main = data["container"][1]
    assert set(main) == {"name", "configMaps", "projectedvolumemaps", "secrets", "emptyDirs"}
    assert main["configMaps"] == [{"metadata": {"name": "cfg"}, "data": CM["data"]}]
    assert main["secrets"] == [SECRET]
    assert main["projectedvolumemaps"] == [
        {"metadata": {"name": "p"}, "data": {"a.txt": "1", "PASS": "hunter2", "U": "me"}}
    ]
    assert data["container"][2]["configMaps"] == []
    assert p["spec"]["containers"][0]["envFrom"]  # the input is not changed


@pytest.mark.unit
def test_retrieved_pod_data_missing_volume() -> None:
    mounts = [{"name": "s", "mountPath": "/s"}]
    p = pod(
        containers=[{"name": "main", "volumeMounts": mounts}],
        volumes=[{"name": "s", "secret": {"secretName": "gone"}}],
    )
    with pytest.raises(MissingRef, match='secret "gone" not found'):
        vkmodel.retrieved_pod_data(p, {}, {})
    p["spec"]["volumes"][0]["secret"]["optional"] = True
    assert vkmodel.retrieved_pod_data(p, {}, {})["container"][0]["secrets"] == []


@pytest.mark.unit
def test_log_request_fields_and_tail() -> None:
    req = vkmodel.log_request(pod(), "main", {"tailLines": "3", "limitBytes": "9"})
    assert req == {
        "Namespace": "ns",
        "PodUID": "u1",
        "PodName": "p-u1",
        "ContainerName": "main",
        "Opts": {
            "Tail": 3,
            "Bytes": 0,  # plugins refuse both; applied locally
            "Timestamps": False,
            "Follow": False,
            "Previous": False,
            "SinceSeconds": 0,
            "SinceTime": "0001-01-01T00:00:00Z",
        },
    }
    assert (
        vkmodel.log_request(pod(), "c", {"limitBytes": "9", "tailLines": "x"})["Opts"]["Bytes"] == 9
    )
    assert vkmodel.tail_text("a\nb\nc\n", 2, 0) == "b\nc\n"
    assert vkmodel.tail_text("a\nb\nc\n", 0, 3) == "a\nb"
    assert vkmodel.tail_text("a\nb\nc", 0, 0) == "a\nb\nc"


# ---------------------------------------------------------------- answers


@pytest.mark.unit
def test_parse_create_and_statuses() -> None:
    assert vkmodel.parse_create({"PodUID": "u1", "PodJID": "42"}, "u1") == "42"
    with pytest.raises(ValueError, match="another pod"):
        vkmodel.parse_create({"PodUID": "u2", "PodJID": "42"}, "u1")
    with pytest.raises(ValueError, match="not a CreateStruct"):
        vkmodel.parse_create({"pod_jid": "42"}, "u1")
    statuses = [{"name": "p", "UID": "u1", "namespace": "ns", "JID": "42", "containers": []}]
    assert vkmodel.parse_statuses(statuses) == {"u1": statuses[0]}
    assert vkmodel.parse_statuses(None) == {}
    with pytest.raises(ValueError, match="list of PodStatus"):
        vkmodel.parse_statuses({"status": "ok"})


@pytest.mark.unit
def test_error_reason() -> None:
    assert vkmodel.error_reason(422, '{"reason": "Unrunnable", "message": "no limits"}') == (
        "Unrunnable",
        "no limits",
    )
    assert vkmodel.error_reason(422, '{"error": "too big"}') == ("Unrunnable", "too big")
    assert vkmodel.error_reason(502, "sbatch: error: x") == ("ProviderFailed", "sbatch: error: x")
    assert vkmodel.error_reason(400, "plain words\n") == ("ProviderFailed", "plain words")
    assert vkmodel.error_reason(500, "") == (
        "ProviderFailed",
        "the interLink plugin answered HTTP 500",
    )


@pytest.mark.unit
def test_ping_capacity() -> None:
    body = {
        "status": "ok",
        "resources": {
            "cpu": "96",
            "memory": "256Gi",
            "pods": "100",
            "accelerators": [{"resourceType": "nvidia.com/gpu", "available": "8"}],
        },
    }
    assert vkmodel.ping_capacity(body) == {
        "cpu": "96",
        "memory": "256Gi",
        "pods": "100",
        "nvidia.com/gpu": "8",
    }
    assert vkmodel.ping_capacity([]) is None
    assert vkmodel.ping_capacity({"resources": {"cpu": "lots"}}) is None


# ---------------------------------------------------------------- status mapping


def cs(name: str, **state: Any) -> dict[str, Any]:
    return {"name": name, "state": state, "ready": False, "restartCount": 0, "image": ""}


def remote(*containers: dict[str, Any], init: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    return {
        "name": "p",
        "UID": "u1",
        "namespace": "ns",
        "JID": "42",
        "containers": list(containers),
        "initContainers": list(init),
    }


@pytest.mark.unit
@pytest.mark.parametrize(
    ("answer", "phase"),
    [
        (remote(), "Pending"),
        (remote(cs("main", waiting={"reason": "Queued"})), "Pending"),
        (remote(cs("main", running={"startedAt": "2025-01-02T03:04:05Z"})), "Running"),
        (remote(cs("main", terminated={"exitCode": 0})), "Succeeded"),
        (remote(cs("main", terminated={"exitCode": 3, "reason": "Error"})), "Failed"),
    ],
)
def test_remote_status_phase(answer: dict[str, Any], phase: str) -> None:
    got, fields = vkmodel.remote_status(pod(), answer, "42")
    assert got == phase
    status = fields["containerStatuses"][0]
    assert status["name"] == "main" and status["image"] == "busybox"
    assert status["containerID"] == "interlink://42/main"
    assert status["ready"] is (phase == "Running")


@pytest.mark.unit
def test_remote_status_exit_codes_and_reasons_kept() -> None:
    answer = remote(
        cs("main", terminated={"exitCode": 0, "startedAt": None}),
        cs("side", terminated={"exitCode": 7, "reason": "Error", "message": "boom"}),
    )
    p = pod(containers=[{"name": "main", "image": "a"}, {"name": "side", "image": "b"}])
    phase, fields = vkmodel.remote_status(p, answer, "42")
    assert phase == "Failed"
    states = [s["state"] for s in fields["containerStatuses"]]
    assert states == [
        {"terminated": {"exitCode": 0, "reason": "Completed"}},
        {"terminated": {"exitCode": 7, "reason": "Error", "message": "boom"}},
    ]


@pytest.mark.unit
def test_remote_status_init_containers() -> None:
    p = pod(init=[{"name": "setup", "image": "x"}])
    running = remote(cs("main"), init=[cs("setup", running={})])
    phase, fields = vkmodel.remote_status(p, running, "42")
    assert phase == "Pending"
    assert fields["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    failed = remote(cs("main"), init=[cs("setup", terminated={"exitCode": 1})])
    assert vkmodel.remote_status(p, failed, "42")[0] == "Failed"
    done = remote(cs("main", running={}), init=[cs("setup", terminated={"exitCode": 0})])
    assert vkmodel.remote_status(p, done, "42")[0] == "Running"


@pytest.mark.unit
def test_status_patch() -> None:
    p = pod()
    phase, fields = vkmodel.remote_status(p, remote(cs("main", running={})), "42")
    patch = vkmodel.status_patch(p, phase, fields, "127.0.0.1", NOW, NOW)
    status = patch["status"]
    assert patch["metadata"] == {"uid": "u1"}
    assert status["phase"] == "Running" and status["startTime"] == "2025-01-02T03:04:05Z"
    assert {c["type"]: c["status"] for c in status["conditions"]} == RUNNING_POD_CONDITIONS
    failed = vkmodel.failed_patch(p, "Unrunnable", "no limits", NOW)
    assert failed["status"] == {
        "phase": "Failed",
        "reason": "Unrunnable",
        "message": "no limits",
        "startTime": "2025-01-02T03:04:05Z",
    }
    waiting = vkmodel.waiting_fields(p, "CreateContainerConfigError", 'secret "x" not found')
    assert waiting["containerStatuses"][0]["state"] == {
        "waiting": {"reason": "CreateContainerConfigError", "message": 'secret "x" not found'}
    }


@pytest.mark.unit
def test_node_patch() -> None:
    patch = vkmodel.node_patch(4443, "127.0.0.1", "127.0.0.1", {"cpu": "8"})
    assert patch["status"]["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 4443}}
    assert patch["status"]["addresses"][1] == {"type": "Hostname", "address": "127.0.0.1"}
    assert patch["status"]["capacity"] == patch["status"]["allocatable"] == {"cpu": "8"}
    assert "capacity" not in vkmodel.node_patch(None, "a", "b", None)["status"]


# ---------------------------------------------------------------- rounds with a fake plugin


class FakePlugin:
    """Stands in for PluginClient: records calls, answers from its fields."""

    def __init__(self) -> None:
        self.known: dict[str, dict[str, Any]] = {}
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.refuse: tuple[int, str] | None = None
        self.create_error = False
        self.status_error = False
        self.log_text = "l1\nl2\nl3\n"
        self.log_requests: list[Mapping[str, Any]] = []
        self.ping_body: Any = []

    async def create(self, data: Mapping[str, Any], uid: str) -> str:
        assert set(data) == {"pod", "container"}
        if self.refuse:
            raise PluginRefused(*self.refuse)
        self.created.append(uid)
        self.known[uid] = remote(cs("main", waiting={"reason": "Queued"})) | {"UID": uid}
        if self.create_error:
            raise PluginError("connection reset")
        return str(len(self.created))

    async def delete(self, pod: Mapping[str, Any]) -> None:
        self.deleted.append(pod["metadata"]["uid"])

    async def status(self, pods: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        if self.status_error:
            raise PluginError("down")
        uids = {p["metadata"]["uid"] for p in pods}
        return {u: s for u, s in self.known.items() if u in uids}

    async def ping(self) -> Any:
        return self.ping_body

    async def logs(self, request: Mapping[str, Any]) -> str:
        self.log_requests.append(request)
        return self.log_text

    async def close(self) -> None:
        return None


class Harness:
    def __init__(self, tmp_path: Path) -> None:
        group = SimNodeGroup.model_validate({"name_prefix": "hpc", "count": 2})
        self.writes: list[tuple[str, tuple[Any, ...]]] = []
        self.vk = VirtualKubelets(
            None,  # type: ignore[arg-type]  # no API calls in these tests
            list(simnodes.expand([group])),
            tmp_path / "interlink.json",
            tmp_path / "kubelet",
            lambda fn, *args: self.writes.append((fn.__name__, args)),
            ping_interval=0.0,
        )
        self.plugin = FakePlugin()
        self.node = BackedNode(Endpoint("hpc-0", "http://x:1", None), self.plugin)  # type: ignore[arg-type]
        self.vk.backed["hpc-0"] = self.node

        async def no_refs(kind: str, namespace: str, names: Any) -> dict[str, Any]:
            return {}

        self.vk._fetch = no_refs  # type: ignore[method-assign]

    def round(self) -> None:
        asyncio.run(self.vk._node_round(self.node))

    def add(self, p: dict[str, Any]) -> None:
        """The watch sees pod ``p`` added; then one round of the backed node."""
        self.vk.on_pod("ADDED", p)
        self.round()

    def patches(self) -> list[dict[str, Any]]:
        return [args[2] for name, args in self.writes if name == "_patch_status"]


@pytest.mark.unit
def test_new_pod_is_created_once_then_followed(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.add(pod())
    assert h.plugin.created == ["u1"]
    assert h.vk.pods["u1"].state == "tracked" and h.vk.pods["u1"].jid == "1"
    assert h.patches()[-1]["status"]["phase"] == "Pending"
    h.vk.on_pod("MODIFIED", pod())  # our own patch comes back: nothing new
    h.plugin.known["u1"] = remote(cs("main", running={})) | {"UID": "u1"}
    h.vk.pods["u1"].last_key = ""
    h.node.last_poll = 0
    h.round()
    assert h.plugin.created == ["u1"]
    assert h.patches()[-1]["status"]["phase"] == "Running"
    count = len(h.patches())
    h.node.last_poll = 0
    h.round()  # same answer: no new patch
    assert len(h.patches()) == count
    h.plugin.known["u1"] = remote(cs("main", terminated={"exitCode": 2})) | {"UID": "u1"}
    h.node.last_poll = 0
    h.round()
    last = h.patches()[-1]["status"]
    assert last["phase"] == "Failed"
    assert last["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 2
    assert h.vk.pods["u1"].state == "terminal"


@pytest.mark.unit
def test_restart_does_not_submit_twice(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.plugin.known["u1"] = remote(cs("main", running={})) | {"UID": "u1"}
    h.add(pod(phase="Running"))
    assert h.plugin.created == []
    assert h.vk.pods["u1"].state == "tracked" and h.vk.pods["u1"].jid == "42"


@pytest.mark.unit
def test_lost_answer_is_looked_up_before_a_second_create(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.plugin.create_error = True  # submitted, but the answer never arrived
    h.add(pod())
    assert h.vk.pods["u1"].state == "check"
    h.plugin.create_error = False
    h.round()
    assert h.plugin.created == ["u1"]
    assert h.vk.pods["u1"].state == "tracked"


@pytest.mark.unit
def test_refused_create_fails_the_pod(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.plugin.refuse = (422, '{"error": "pod has no cpu/memory limits or requests"}')
    h.add(pod())
    patch = h.patches()[-1]["status"]
    assert patch["phase"] == "Failed"
    assert patch["message"] == "pod has no cpu/memory limits or requests"
    assert patch["reason"] == "Unrunnable"
    assert h.vk.pods["u1"].state == "terminal"
    assert h.plugin.created == []


@pytest.mark.unit
def test_unknown_running_pod_is_lost(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.add(pod(phase="Running"))
    assert h.plugin.created == []
    assert h.patches()[-1]["status"]["reason"] == "ProviderLost"


@pytest.mark.unit
def test_plugin_down_keeps_the_pod_waiting(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.plugin.status_error = True
    h.add(pod())
    assert h.vk.pods["u1"].state == "check" and h.plugin.created == []
    assert h.node.error.startswith("/status: down")


@pytest.mark.unit
def test_missing_secret_waits(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    mounts = [{"name": "s", "mountPath": "/s"}]
    h.vk.on_pod(
        "ADDED",
        pod(
            containers=[{"name": "main", "volumeMounts": mounts}],
            volumes=[{"name": "s", "secret": {"secretName": "later"}}],
        ),
    )
    h.round()
    h.round()
    assert h.plugin.created == []
    assert len(h.patches()) == 1  # said once
    state = h.patches()[0]["status"]["containerStatuses"][0]["state"]["waiting"]
    assert state == {"reason": "CreateContainerConfigError", "message": 'secret "later" not found'}


@pytest.mark.unit
def test_delete_goes_through_the_plugin_then_force_deletes(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.add(pod())
    h.vk.on_pod("MODIFIED", pod(deleting=True))
    h.round()
    assert h.plugin.deleted == ["u1"]
    assert ("_force_delete", ("ns", "p-u1", "u1")) in h.writes
    assert h.vk.pods["u1"].state == "done"
    h.vk.on_pod("MODIFIED", pod(deleting=True))  # no second delete
    h.round()
    assert h.plugin.deleted == ["u1"]
    h.vk.on_pod("DELETED", pod(deleting=True))
    assert "u1" not in h.vk.pods


@pytest.mark.unit
def test_terminal_pod_deleted_at_once_is_still_deleted_in_the_plugin(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.vk.on_pod("ADDED", pod(phase="Succeeded"))
    h.vk.on_pod("DELETED", pod(phase="Succeeded"))
    h.round()
    assert h.plugin.deleted == ["u1"]
    assert not [w for w in h.writes if w[0] == "_force_delete"]
    assert "u1" not in h.vk.pods


@pytest.mark.unit
def test_ping_capacity_patches_the_node(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.plugin.ping_body = {"status": "ok", "resources": {"cpu": "64", "memory": "128Gi"}}
    h.round()
    nodes = [args for name, args in h.writes if name == "_patch_node"]
    assert nodes[-1][0] == "hpc-0"
    assert nodes[-1][1]["status"]["capacity"] == {"cpu": "64", "memory": "128Gi"}


@pytest.mark.unit
def test_logs_endpoint(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.vk.on_pod("ADDED", pod())

    async def ask(line: str) -> tuple[int, str]:
        reader = asyncio.StreamReader()
        reader.feed_data(f"{line}\r\nHost: x\r\n\r\n".encode())
        reader.feed_eof()
        status, text, follow = await h.vk._answer(reader)
        assert follow is None
        return status, text

    status, text = asyncio.run(ask("GET /containerLogs/ns/p-u1/main?tailLines=2 HTTP/1.1"))
    assert (status, text) == (200, "l2\nl3\n")
    assert h.plugin.log_requests[0]["Opts"]["Tail"] == 2
    assert asyncio.run(ask("GET /containerLogs/ns/other/main HTTP/1.1"))[0] == 404
    assert asyncio.run(ask("GET /exec/ns/p-u1/main HTTP/1.1"))[0] == 404
    assert asyncio.run(ask("POST /containerLogs/ns/p-u1/main HTTP/1.1"))[0] == 400


class FakeWriter:
    """Stands in for the connection's StreamWriter: keeps what was written."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.data += data

    async def drain(self) -> None:
        return None

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    async def wait_closed(self) -> None:
        return None


def dechunk(body: bytes) -> bytes:
    """The content of a chunked body; fails unless it ends with the last chunk."""
    out = b""
    while True:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            assert body == b"\r\n", body
            return out
        out, body = out + body[:size], body[size:]
        assert body.startswith(b"\r\n")
        body = body[2:]


def follow_logs(h: Harness, query: str, steps: Sequence[Any]) -> tuple[bytes, bytes]:
    """Serve one ``logs -f`` request; after each pause of the follow loop the next step
    (a callable) runs. Returns the response's head and its de-chunked body."""
    h.vk.follow_every = 0.01

    async def scenario() -> bytes:
        reader = asyncio.StreamReader()
        reader.feed_data(f"GET /containerLogs/ns/p-u1/main?{query} HTTP/1.1\r\n\r\n".encode())
        writer = FakeWriter()
        serving = asyncio.create_task(h.vk._serve_conn(reader, writer))  # type: ignore[arg-type]
        for step in steps:
            await asyncio.sleep(0.05)
            step(reader)
        await asyncio.wait_for(serving, 5)
        assert writer.closed
        return bytes(writer.data)

    head, _, body = asyncio.run(scenario()).partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head, head
    return head, dechunk(body)


@pytest.mark.unit
def test_logs_follow_sends_what_the_log_adds_until_the_pod_ends(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.vk.on_pod("ADDED", pod())

    def add(text: str) -> Any:
        return lambda _reader: setattr(h.plugin, "log_text", h.plugin.log_text + text)

    def end(_reader: asyncio.StreamReader) -> None:
        h.plugin.log_text += "l6\n"
        h.vk.pods["u1"].state = "terminal"

    head, body = follow_logs(h, "follow=true&tailLines=1", [add("l4\n"), add("l5\n"), end])
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert body == b"l3\nl4\nl5\nl6\n"
    # the plugin was asked for the whole log each time (the tail is applied here, once)
    assert {r["Opts"]["Tail"] for r in h.plugin.log_requests} == {0}
    assert len(h.plugin.log_requests) >= 4


@pytest.mark.unit
def test_logs_follow_ends_when_the_client_leaves_or_the_limit_is_sent(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.vk.on_pod("ADDED", pod())
    _, body = follow_logs(h, "follow=true", [lambda reader: reader.feed_eof()])
    assert body == b"l1\nl2\nl3\n"  # the pod runs on; the loop ended with the connection
    _, body = follow_logs(h, "follow=true&limitBytes=4", [])
    assert body == b"l1\nl"


@pytest.mark.unit
def test_logs_follow_stops_at_a_limit_that_cut_a_character(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.vk.on_pod("ADDED", pod())
    h.plugin.log_text = "abcd\u00e9\n"  # the limit of 5 bytes cuts the 2-byte character

    def add(_reader: asyncio.StreamReader) -> None:
        h.plugin.log_text += "more\n"

    _, body = follow_logs(h, "follow=true&limitBytes=5", [add])
    assert body == b"abcd"  # nothing after the limit, not the next line's first byte


@pytest.mark.unit
def test_logs_follow_ends_when_the_node_is_no_longer_backed(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.vk.on_pod("ADDED", pod())
    asked = len(h.plugin.log_requests)

    def unback(_reader: asyncio.StreamReader) -> None:
        h.vk.backed.pop("hpc-0")  # its plugin client is closed by the agent

    _, body = follow_logs(h, "follow=true", [unback])
    assert body == b"l1\nl2\nl3\n"
    after = len(h.plugin.log_requests)
    assert asked < after  # the first read, and the rounds before the node went


@pytest.mark.unit
def test_log_growth_of_repeated_lines_in_a_moving_window_is_placed_and_bounded() -> None:
    seen = "x\n" * 50_000 + "y\n"
    now = seen[20:] + "z\n"  # the window moved 20 characters on, one line was added
    assert vkmodel.log_growth(seen, now) == ("z\n", now)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("seen", "now", "new"),
    [
        ("a\nb\n", "a\nb\nc\n", "c\n"),  # grew
        ("a\nb\n", "a\nb\n", ""),  # unchanged
        ("a\nb\n", "", ""),  # the file not there for a moment
        ("a\nb\nc\n", "b\nc\nd\n", "d\n"),  # the plugin's window moved on
        ("a\nb\n", "x\ny\n", "x\ny\n"),  # replaced: all of it is new
        (  # a long overlap (found by searching for the probe)
            "".join(f"line {i}\n" for i in range(50)),
            "".join(f"line {i}\n" for i in range(20, 60)),
            "".join(f"line {i}\n" for i in range(50, 60)),
        ),
    ],
)
def test_log_growth(seen: str, now: str, new: str) -> None:
    added, after = vkmodel.log_growth(seen, now)
    assert added == new
    assert after == (now or seen)


# ---------------------------------------------------------------- endpoint file polling


@pytest.mark.unit
def test_endpoint_file_changes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(tmp_path)
    h.vk.backed.clear()
    attached: list[str] = []
    detached: list[tuple[str, bool]] = []

    def attach(endpoint: Endpoint) -> None:
        attached.append(endpoint.node)
        h.vk.backed[endpoint.node] = BackedNode(endpoint, FakePlugin())  # type: ignore[arg-type]

    def detach(name: str, *, restore: bool) -> None:
        detached.append((name, restore))
        h.vk.backed.pop(name)

    h.vk._attach = attach  # type: ignore[method-assign]
    h.vk._detach = detach  # type: ignore[method-assign]
    file = tmp_path / "interlink.json"
    h.vk.check_file()  # missing: nothing backed
    assert h.vk.backed == {}
    good = {"nodes": {"hpc-0": {"url": "unix:/p.sock"}, "cpu-9": {"url": "unix:/q.sock"}}}
    file.write_text(json.dumps(good))
    h.vk.check_file()
    assert attached == ["hpc-0"]  # cpu-9 is not a sim node
    assert "not simulated nodes (ignored): cpu-9" in caplog.text
    file.write_text("{broken")
    h.vk.check_file()
    h.vk.check_file()
    assert caplog.text.count("not JSON") == 1 and list(h.vk.backed) == ["hpc-0"]
    file.write_text(json.dumps({"nodes": {"hpc-1": {"url": "unix:/p.sock"}}}))
    h.vk.check_file()
    assert detached == [("hpc-0", True)] and list(h.vk.backed) == ["hpc-1"]
    file.unlink()
    h.vk.check_file()
    assert h.vk.backed == {}


@pytest.mark.unit
def test_secret_values_never_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    h = Harness(tmp_path)

    async def refs(kind: str, namespace: str, names: Any) -> dict[str, Any]:
        return {"sec": SECRET} if kind == "secrets" else {}

    h.vk._fetch = refs  # type: ignore[method-assign]
    env = [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "PASS"}}}]
    h.add(pod(containers=[{"name": "main", "env": env}]))
    assert h.plugin.created == ["u1"]
    assert "hunter2" not in caplog.text and b64("hunter2") not in caplog.text


@pytest.mark.unit
def test_transient_refusal_is_retried(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.plugin.refuse = (401, "missing or wrong bearer token")
    h.add(pod())
    assert h.vk.pods["u1"].state == "create" and h.patches() == []
    assert h.node.error == "/create: HTTP 401 missing or wrong bearer token"
    h.plugin.refuse = None
    h.round()
    assert h.plugin.created == ["u1"] and h.node.error == ""


@pytest.mark.unit
def test_delete_retried_then_forced_after_the_grace(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.vk.delete_grace = 0.2
    h.add(pod())

    async def down(pod: Mapping[str, Any]) -> None:
        raise PluginError("connection refused")

    h.plugin.delete = down  # type: ignore[method-assign]
    h.vk.on_pod("MODIFIED", pod(deleting=True))
    h.round()
    assert h.vk.pods["u1"].state == "deleting"
    assert not [w for w in h.writes if w[0] == "_force_delete"]
    time.sleep(0.25)
    h.round()
    assert ("_force_delete", ("ns", "p-u1", "u1")) in h.writes


@pytest.mark.unit
def test_nodes_service_passes_the_endpoint_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans: list[procs.Launch] = []
    settings: list[Mapping[str, Any]] = []

    class Launched:
        def ensure(self, wanted: Mapping[str, Any], launch: Any, **_: Any) -> Any:
            settings.append(wanted)
            plans.append(launch())
            return procs.Running(procs.ProcessRecord("x", 1, "/x", 1, "/x.log"), {}, {}, False)

    monkeypatch.setattr(nodes_service, "_process", lambda _state: Launched())
    procs.private_dir(nodes_service.agent_dir(tmp_path))
    sim = SimSpec(nodes=[SimNodeGroup(name_prefix="hpc", count=1)])
    nodes_service.ensure(tmp_path, tmp_path / "kubeconfig", sim)
    argv = plans[0].argv
    endpoint = str(tmp_path / "sim" / "interlink.json")
    assert argv[argv.index("--interlink-file") + 1] == endpoint
    assert argv[argv.index("--kubelet-dir") + 1] == str(tmp_path / "sim" / "agent" / "kubelet")
    assert settings[0]["interlink_file"] == endpoint
    nodes_file = nodes_service.agent_dir(tmp_path) / "nodes.json"
    assert set(json.loads(nodes_file.read_text())) == {"nodes"}


@pytest.mark.unit
def test_agent_flags_reach_the_virtual_kubelets(tmp_path: Path) -> None:
    args = agent._parse_args(
        ["--kubeconfig", "k", "--nodes-file", "n", "--interlink-file", str(tmp_path / "f")]
    )
    assert args.interlink_file == tmp_path / "f" and args.kubelet_dir is None
    group = SimNodeGroup.model_validate({"name_prefix": "hpc", "count": 1})
    na = agent.NodeAgent(
        None,  # type: ignore[arg-type]
        list(simnodes.expand([group])),
        interlink_file=tmp_path / "f",
    )
    assert na.vk is not None and na.vk.cert_dir == tmp_path / "vkubelet"
    assert agent.NodeAgent(None, [], interlink_file=None).vk is None  # type: ignore[arg-type]
