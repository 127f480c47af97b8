"""What decice-interlink-slurm reads from a pod: size, annotations, env, volumes."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from decice.interlink.errors import Unrunnable
from decice.interlink.podspec import Size, SizeDefaults, parse_flags, parse_pod
from decice_kube import quantity
from tests.support import interlink_request

pytestmark = pytest.mark.unit

UID = "0f6a3c1e-6f5b-4a51-9a53-2d1b9d2f0c11"


def request(spec: dict, annotations: dict | None = None, containers: list | None = None) -> Any:
    return interlink_request(UID, spec, annotations, containers)


def c(name: str = "main", resources: dict | None = None, **extra: Any) -> dict:
    res = {"requests": {"cpu": "1", "memory": "1Gi"}} if resources is None else resources
    return {"name": name, "image": "img", "command": ["run"], "resources": res, **extra}


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", 0.5), ("2", 2), ("1Gi", 2**30), ("128M", 128 * 10**6), ("1e3", 1000), ("1.5", 1.5)],
)
def test_quantities(text, value):
    assert quantity.exact(text) == value


@pytest.mark.parametrize("text", ["", "1x", "-1", "abc", None, True])
def test_bad_quantities(text):
    with pytest.raises(ValueError):
        quantity.exact(text)


@pytest.mark.parametrize(
    "text",
    ["1e20", "100e18", "9Ei", "1e20000000", "1e-20000000", "1e" + "9" * 5000, "9" * 5000, 2**70],
)
def test_quantities_past_int64_are_refused_without_evaluating_them(text):
    """Finding 5 of the second security round: "1e20000000" memory (valid for the API
    server) held the plugin for 18 s, then answered 500. Now: a plain refusal."""
    with pytest.raises(ValueError, match="out of range"):
        quantity.exact(text)


def test_a_pod_with_an_absurd_quantity_is_unrunnable_with_the_reason():
    spec = {"containers": [c(resources={"requests": {"cpu": "1", "memory": "1e20000000"}})]}
    with pytest.raises(
        Unrunnable, match=r"resources.requests.memory: '1e20000000' is out of range"
    ):
        parse_pod(request(spec))


def test_size_sums_containers_limits_win_init_is_a_floor():
    spec = {
        "containers": [
            c("a", {"requests": {"cpu": "250m", "memory": "100Mi"}, "limits": {"cpu": "1500m"}}),
            c("b", {"requests": {"cpu": "1", "memory": "200Mi", "nvidia.com/gpu": "1"}}),
        ],
        "initContainers": [c("i", {"requests": {"cpu": "4", "memory": "10Mi"}})],
    }
    assert parse_pod(request(spec)).size == Size(cpus=4, memory_mb=300, gpus=1)


def test_size_rounds_up():
    spec = {"containers": [c(resources={"requests": {"cpu": "100m", "memory": "1000k"}})]}
    assert parse_pod(request(spec)).size == Size(cpus=1, memory_mb=1, gpus=0)


def test_pods_without_sizes_get_the_defaults():
    """As the reference plugin: a pod that sets no cpu gets one (or --default-cpu), no
    memory the partition's default (no --mem line) or --default-memory."""
    bare = request({"containers": [c(resources={})]})
    assert parse_pod(bare).size == Size(cpus=1, memory_mb=0)
    assert parse_pod(bare, SizeDefaults(4, 2048)).size == Size(cpus=4, memory_mb=2048)
    half = request({"containers": [c(resources={"limits": {"memory": "1Gi"}})]})
    assert parse_pod(half, SizeDefaults(2, 512)).size == Size(cpus=2, memory_mb=1024)


def test_amd_gpus_count_and_one_kind_per_job():
    amd = {"limits": {"cpu": "1", "memory": "1Mi", "amd.com/gpu": "2"}}
    assert parse_pod(request({"containers": [c(resources=amd)]})).size == Size(
        1, 1, 2, "amd.com/gpu"
    )
    both = {"limits": {**amd["limits"], "nvidia.com/gpu": "1"}}
    with pytest.raises(Unrunnable, match=r"both nvidia\.com/gpu and amd\.com/gpu"):
        parse_pod(request({"containers": [c(resources=both)]}))


def test_a_bad_quantity_is_refused_by_field():
    bad = {"requests": {"cpu": "1", "memory": "lots"}}
    with pytest.raises(Unrunnable, match=r"resources\.requests\.memory"):
        parse_pod(request({"containers": [c(resources=bad)]}))


def test_annotations():
    ann = {
        "slurm-job.vk.io/time": "1-02:00:00",
        "slurm-job.vk.io/partition": "gpu",
        "slurm-job.vk.io/account": "proj42",
        "slurm-job.vk.io/flags": "--qos=high --constraint haswell -N 1",
    }
    spec = parse_pod(request({"containers": [c()]}, ann))
    assert (spec.time, spec.partition, spec.account) == ("1-02:00:00", "gpu", "proj42")
    assert spec.flags == ["--qos=high", "--constraint=haswell", "--nodes=1"]


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({"slurm-job.vk.io/time": "tomorrow"}, "slurm-job.vk.io/time"),
        ({"slurm-job.vk.io/partition": "a b"}, "slurm-job.vk.io/partition"),
        ({"slurm-job.vk.io/account": "x;rm"}, "slurm-job.vk.io/account"),
        ({"slurm-job.vk.io/flags": "--job-name=x"}, "--job-name is set by the plugin"),
        ({"slurm-job.vk.io/flags": "-o /tmp/x"}, r"-o \(--output\) is set by the plugin"),
        ({"slurm-job.vk.io/flags": "qos"}, "not an sbatch option"),
        ({"slurm-job.vk.io/flags": "--comment='a b'"}, "blank, quote"),
        ({"slurm-job.vk.io/flags": "--x\nrm -rf /"}, "not valid"),
    ],
)
def test_bad_annotations_are_refused(annotations: dict[str, str], message: str):
    with pytest.raises(Unrunnable, match=message):
        parse_pod(request({"containers": [c()]}, annotations))


def test_flags_pair_values_with_their_option():
    assert parse_flags("-p debug --mail-type END --exclusive -H -t5:00", "x") == [
        "--partition=debug",
        "--mail-type=END",
        "--exclusive",
        "--hold",
        "--time=5:00",
    ]


@pytest.mark.parametrize(
    ("flags", "refused"),
    [
        # finding 3 of the second security round: abbreviations sbatch takes as the option
        ("--outp=/home/u/.bashrc", r"--outp \(--output\) is set by the plugin"),
        ("--err=/home/u/.bashrc", r"--err \(--error\) is set by the plugin"),
        ("--chd=/", r"--chd \(--chdir\) is set by the plugin"),
        ("--job-n x", r"--job-n \(--job-name\) is set by the plugin"),
        ("--exp=ALL", r"--exp is ambiguous \(--export, --export-file\)"),
        ("--export", "--export is set by the plugin"),
        ("--wr=id", r"--wr \(--wrap\) would replace the job script"),
        ("-W", r"-W \(--wait\) sbatch would not return"),
        ("--arr=1-3", r"--arr \(--array\) one job per pod"),
        ("-M other", r"-M \(--clusters\) the plugin tracks jobs on its own cluster"),
        ("--uid=0", "--uid the job runs as the plugin's user"),
        ("--nodef=/etc/hosts", r"--nodef \(--nodefile\) reads a file on the login host"),
        ("--test-only", "--test-only is not an sbatch option"),
        ("-Z", "-Z is not an sbatch option"),
        ("--qos", "--qos needs a value"),
        ("--hold=1", "--hold takes no value"),
        ("-Hk", "give -H on its own"),
        ("qos", "is not an sbatch option"),
    ],
)
def test_flags_are_resolved_as_sbatch_does_and_checked_against_what_a_pod_may_set(flags, refused):
    with pytest.raises(Unrunnable, match=refused):
        parse_flags(flags, "pod ns/p")


def test_allowed_abbreviations_are_written_out_in_full():
    """The line in job.sh names the option sbatch resolved, so no sbatch version can
    read the pod's abbreviation as another option."""
    assert parse_flags("--cons=haswell --mail-u=me@example.org --exclud=n1", "x") == [
        "--constraint=haswell",
        "--mail-user=me@example.org",
        "--exclude=n1",
    ]


def test_env_values_refs_and_fields():
    secret = {"metadata": {"name": "s"}, "data": {"pw": base64.b64encode(b"hunter2").decode()}}
    cm = {"metadata": {"name": "cm"}, "data": {"mode": "fast", "lvl": "3"}}
    env = [
        {"name": "PLAIN", "value": "a b"},
        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "mode"}}},
        {
            "name": "OPT",
            "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y", "optional": True}},
        },
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    main = c(env=env, envFrom=[{"configMapRef": {"name": "cm"}, "prefix": "CM_"}])
    spec = parse_pod(
        request(
            {"containers": [main]},
            containers=[{"name": "main", "configMaps": [cm], "secrets": [secret]}],
        )
    )
    assert dict(spec.containers[0].env) == {
        "CM_mode": "fast",
        "CM_lvl": "3",
        "PLAIN": "a b",
        "PW": "hunter2",
        "MODE": "fast",
        "POD": "p",
        "NS": "ns",
    }


def test_env_interlink_did_not_resolve_is_empty_with_a_note():
    """interLink forwards valueFrom it does not resolve and delivers only mounted objects:
    the variable is set empty (the reference plugin's behaviour) and a note says why."""
    env = [
        {"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}},
        {"name": "Y", "valueFrom": {"fieldRef": {"fieldPath": "spec.hostname"}}},
        {"name": "Z", "valueFrom": {"weird": {}}},
    ]
    main = parse_pod(request({"containers": [c(env=env)]})).containers[0]
    assert dict(main.env) == {"X": "", "Y": "", "Z": ""}
    assert main.notes[0].startswith("env X is set empty: secretKeyRef nope/k was not delivered")
    assert "fieldRef 'spec.hostname' is not one it resolves" in main.notes[1]
    assert "valueFrom weird" in main.notes[2] and len(main.notes) == 3


def test_resource_field_refs_are_resolved_like_the_kubelet():
    res = {"limits": {"cpu": "1500m", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Mi"}}
    env = [
        {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
        {
            "name": "MEM_MI",
            "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
        },
        {
            "name": "REQ_M",
            "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}},
        },
    ]
    main = parse_pod(request({"containers": [c(resources=res, env=env)]})).containers[0]
    assert dict(main.env) == {"CPU": "2", "MEM_MI": "1024", "REQ_M": "1000"}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ([{"name": "A.B", "value": "1"}], "not a shell identifier"),
        (
            [
                {
                    "name": "X",
                    "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "0"}},
                }
            ],
            "env\\[0\\]: resourceFieldRef divisor is 0",
        ),
    ],
)
def test_bad_env_is_refused_by_name_not_value(env, message):
    with pytest.raises(Unrunnable, match=message):
        parse_pod(request({"containers": [c(env=env)]}))


def test_volumes_from_delivered_configmaps_secrets_projected_and_emptydirs():
    spec = {
        "containers": [
            c(
                volumeMounts=[
                    {"name": "conf", "mountPath": "/etc/app"},
                    {"name": "creds", "mountPath": "/creds", "readOnly": True},
                    {"name": "scratch", "mountPath": "/scratch"},
                    {"name": "kube-api-access", "mountPath": "/var/run/secrets/x"},
                ]
            )
        ],
        "volumes": [
            {
                "name": "conf",
                "configMap": {"name": "cm", "items": [{"key": "a", "path": "d/a.ini"}]},
            },
            {"name": "creds", "secret": {"secretName": "s"}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "kube-api-access", "projected": {"sources": []}},
        ],
    }
    delivered = [
        {
            "name": "main",
            "configMaps": [{"metadata": {"name": "cm"}, "data": {"a": "x=1", "b": "unused"}}],
            "secrets": [
                {"metadata": {"name": "s"}, "data": {"key": base64.b64encode(b"k").decode()}}
            ],
            "projectedvolumemaps": [
                {"metadata": {"name": "kube-api-access"}, "data": {"token": "t"}}
            ],
        }
    ]
    parsed = parse_pod(request(spec, containers=delivered))
    vols = parsed.volumes
    assert vols["conf"].files == {"d/a.ini": b"x=1"} and not vols["conf"].secret
    assert vols["creds"].files == {"key": b"k"} and vols["creds"].secret
    assert vols["scratch"].files == {}
    assert vols["kube-api-access"].files == {"token": b"t"}
    mounts = {m.volume: (m.path, m.read_only) for m in parsed.containers[0].mounts}
    assert mounts["creds"] == ("/creds", True)


@pytest.mark.parametrize(
    ("volume", "delivered", "message"),
    [
        ({"name": "v", "hostPath": {"path": "/"}}, [], "hostPath volumes are not supported"),
        ({"name": "v", "configMap": {"name": "cm"}}, [], "configMap cm was not delivered"),
        ({"name": "v", "secret": {"secretName": "s"}}, [], "secret s was not delivered"),
        (
            {"name": "v", "configMap": {"name": "cm", "items": [{"key": "a", "path": "../x"}]}},
            [{"name": "main", "configMaps": [{"metadata": {"name": "cm"}, "data": {"a": "1"}}]}],
            "not a relative path",
        ),
    ],
)
def test_bad_volumes_are_refused(volume, delivered, message):
    spec = {"containers": [c(volumeMounts=[{"name": "v", "mountPath": "/v"}])], "volumes": [volume]}
    with pytest.raises(Unrunnable, match=message):
        parse_pod(request(spec, containers=delivered))


@pytest.mark.parametrize(
    "mount_path",
    ["/data,/root/.ssh", "/data:/etc", "data", "/data\n", "/da\x07ta"],
)
def test_a_mount_path_that_would_be_more_than_one_bind_is_refused(mount_path):
    """Finding 8 of the second security round: `/data,/root/.ssh` became two apptainer
    binds. A mountPath is one absolute path without bind separators."""
    spec = {
        "containers": [c(volumeMounts=[{"name": "v", "mountPath": mount_path}])],
        "volumes": [{"name": "v", "emptyDir": {}}],
    }
    with pytest.raises(Unrunnable, match=r"mountPath .* is not usable"):
        parse_pod(request(spec))


@pytest.mark.parametrize(
    "image", ["--bind=/://host", "-x", "ubuntu 22.04", "ubuntu\n--bind=/:/host", "a" * 600]
)
def test_an_image_that_would_be_an_option_or_two_words_is_refused(image):
    with pytest.raises(Unrunnable, match="is not an image reference"):
        parse_pod(request({"containers": [c(image=image)]}))


@pytest.mark.parametrize(
    "image",
    [
        "ubuntu:22.04",
        "docker://ghcr.io/org/app:1.2",
        "registry.local:5000/a/b@sha256:" + "0" * 64,
        "/shared/images/app.sif",
        "oras://registry/app:latest",
    ],
)
def test_real_image_references_are_taken(image):
    spec = parse_pod(request({"containers": [c(image=image)]}))
    assert spec.containers[0].image == image
