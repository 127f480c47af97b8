"""Request/response JSON of decice-interlink-slurm against interLink 0.6.2's Go types.

The json tags below are copied from upstream at tag 0.6.2 (interlink-hq/interLink,
``pkg/interlink/types.go``) and from k8s.io/api v0.33.1 (``core/v1/types.go``, the
version interLink 0.6.2's go.mod pins) for the Kubernetes objects inside them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from decice.interlink import api
from decice.interlink.status import running, terminated, waiting

pytestmark = pytest.mark.unit

# pkg/interlink/types.go @ 0.6.2 --------------------------------------------------------
RETRIEVED_POD_DATA = {"pod", "container", "jobConfig", "jobScript"}
RETRIEVED_CONTAINER = {"name", "configMaps", "projectedvolumemaps", "secrets", "emptyDirs"}
CREATE_STRUCT = {"PodUID", "PodJID"}
POD_STATUS = {"name", "UID", "namespace", "JID", "containers", "initContainers"}
LOG_STRUCT = {"Namespace", "PodUID", "PodName", "ContainerName", "Opts"}
CONTAINER_LOG_OPTS = {
    "Tail",
    "Bytes",
    "Timestamps",
    "Follow",
    "Previous",
    "SinceSeconds",
    "SinceTime",
}
PING_RESPONSE = {"status", "resources", "taints"}
RESOURCES_RESPONSE = {"cpu", "memory", "pods", "accelerators"}
ACCELERATOR_RESPONSE = {"resourceType", "available"}
# k8s.io/api core/v1/types.go @ v0.33.1: tags without omitempty are always present -------
CONTAINER_STATUS = {
    "name",
    "state",
    "lastState",
    "ready",
    "restartCount",
    "image",
    "imageID",
    "containerID",
    "started",
    "allocatedResources",
    "resources",
    "volumeMounts",
    "user",
    "allocatedResourcesStatus",
    "stopSignal",
}
CONTAINER_STATUS_REQUIRED = {"name", "ready", "restartCount", "image", "imageID"}
STATE = {"waiting", "running", "terminated"}
WAITING = {"reason", "message"}
RUNNING = {"startedAt"}
TERMINATED = {"exitCode", "signal", "reason", "message", "startedAt", "finishedAt", "containerID"}

UID = "0f6a3c1e-6f5b-4a51-9a53-2d1b9d2f0c11"
POD = {
    "metadata": {"name": "p1", "namespace": "hpc", "uid": UID},
    "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"]}]},
}


def test_module_constants_are_the_go_tags():
    assert {api.POD, api.CONTAINERS, api.JOB_CONFIG, api.JOB_SCRIPT} == RETRIEVED_POD_DATA
    assert {
        api.RC_NAME,
        api.RC_CONFIGMAPS,
        api.RC_PROJECTED,
        api.RC_SECRETS,
        api.RC_EMPTYDIRS,
    } == RETRIEVED_CONTAINER
    assert {api.LOG_NAMESPACE, api.LOG_UID, api.LOG_POD, api.LOG_CONTAINER, api.LOG_OPTS} == (
        LOG_STRUCT
    )
    assert {
        api.OPT_TAIL,
        api.OPT_BYTES,
        api.OPT_TIMESTAMPS,
        api.OPT_FOLLOW,
        api.OPT_PREVIOUS,
        api.OPT_SINCE_SECONDS,
        api.OPT_SINCE_TIME,
    } == CONTAINER_LOG_OPTS
    assert {api.PING_STATUS, api.PING_RESOURCES, api.PING_TAINTS} == PING_RESPONSE
    assert {api.RES_CPU, api.RES_MEMORY, api.RES_PODS, api.RES_ACCELERATORS} == (RESOURCES_RESPONSE)
    assert {api.ACC_TYPE, api.ACC_AVAILABLE} == ACCELERATOR_RESPONSE


def test_create_reads_a_go_marshalled_retrieved_pod_data():
    # what encoding/json makes of RetrievedPodData (nil slices are null, omitempty dropped)
    body = json.loads(
        json.dumps(
            {
                "pod": POD,
                "container": [
                    {
                        "name": "main",
                        "configMaps": [{"metadata": {"name": "cm"}, "data": {"a": "1"}}],
                        "projectedvolumemaps": None,
                        "secrets": None,
                        "emptyDirs": None,
                    }
                ],
            }
        )
    )
    req = api.parse_create(body)
    assert req.ref == api.PodRef("p1", "hpc", UID)
    assert req.volumes["main"].configmaps[0]["data"] == {"a": "1"}
    assert req.volumes["main"].secrets == []


def test_create_struct_and_pod_status_keys():
    assert set(api.create_struct(UID, "42")) == CREATE_STRUCT
    status = api.pod_status(api.PodRef("p1", "hpc", UID), "42", [], [])
    assert set(status) == POD_STATUS
    assert status["UID"] == UID and status["JID"] == "42" and status["namespace"] == "hpc"


@pytest.mark.parametrize(
    ("status", "state", "fields"),
    [
        (waiting("c", "img", "Pending", "queued"), "waiting", WAITING),
        (running("c", "img", "2026-01-01T00:00:00Z"), "running", RUNNING),
        (
            terminated("c", "img", 3, "Error", "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z", "m"),
            "terminated",
            TERMINATED,
        ),
    ],
)
def test_container_status_is_a_v1_container_status(status, state, fields):
    assert set(status) <= CONTAINER_STATUS
    assert set(status) >= CONTAINER_STATUS_REQUIRED
    assert set(status["state"]) == {state} and set(status["state"]) <= STATE
    assert set(status["state"][state]) <= fields


def test_terminated_never_carries_an_empty_timestamp():
    # metav1.Time cannot unmarshal "": absent, never empty
    state = terminated("c", "img", 1, "Error", "", "")["state"]["terminated"]
    assert "startedAt" not in state and "finishedAt" not in state
    assert state["exitCode"] == 1


def test_log_struct_as_go_marshals_it():
    body = {
        "Namespace": "hpc",
        "PodUID": UID,
        "PodName": "p1",
        "ContainerName": "main",
        "Opts": {
            "Tail": 5,
            "Bytes": 0,
            "Timestamps": False,
            "Follow": False,
            "Previous": False,
            "SinceSeconds": 0,
            "SinceTime": "0001-01-01T00:00:00Z",
        },
    }
    assert set(body) == LOG_STRUCT and set(body["Opts"]) == CONTAINER_LOG_OPTS
    req = api.parse_logs(body)
    assert (req.namespace, req.uid, req.container, req.tail) == ("hpc", UID, "main", 5)


def test_ping_response_keys():
    ping = api.ping_response("4", "2048Mi", "4", {"nvidia.com/gpu": "2"})
    assert set(ping) <= PING_RESPONSE and ping["status"] == "ok"
    assert set(ping["resources"]) == RESOURCES_RESPONSE
    assert set(ping["resources"]["accelerators"][0]) == ACCELERATOR_RESPONSE
    no_gpu = api.ping_response("4", "2048Mi", "4", {})["resources"]
    assert "accelerators" not in no_gpu  # omitempty


def test_docs_name_every_route():
    text = (Path(__file__).parents[2] / "docs" / "interlink.md").read_text()
    for route in ("POST /create", "POST /delete", "GET /status", "GET /getLogs", "GET /ping"):
        assert route in text
