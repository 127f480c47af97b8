"""What the reference SLURM plugin's users write, run by decice-interlink-slurm (#30):
subPath, pre-exec, apptainer options and mounts, MPI, image root, pod IP, AMD GPUs,
runAsUser, notes for env left empty; the job script run with bash (no SLURM needed),
apptainer played by a stub that checks what it is given."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest

from decice.interlink.api import PodRef
from decice.interlink.errors import Unrunnable
from decice.interlink.jobscript import (
    Defaults,
    Runtime,
    container_argv,
    launch_of,
    sbatch_options,
    write_job_dir,
)
from tests.support import interlink_pod

pytestmark = pytest.mark.unit

UID = "0f6a3c1e-6f5b-4a51-9a53-2d1b9d2f0c12"
REF = PodRef("p", "ns", UID)


spec_of = functools.partial(interlink_pod, UID)


def cont(script: str = "true", **extra) -> dict:
    res = {"limits": {"cpu": "1", "memory": "10Mi"}}
    return {"name": "a", "image": "img", "command": ["sh", "-c", script], "resources": res, **extra}


def run(job: Path) -> int:
    return subprocess.run(
        ["setsid", "bash", str(job / "job.sh")], cwd=job, capture_output=True, timeout=30
    ).returncode


def test_sub_path_binds_one_entry_and_a_missing_one_is_made_a_directory(tmp_path: Path):
    cm = {"metadata": {"name": "cm"}, "data": {"app.conf": "x=1", "other": "y"}}
    mounts = [
        {"name": "cfg", "mountPath": "/etc/app.conf", "subPath": "app.conf"},
        {"name": "scratch", "mountPath": "/work", "subPath": "run/1"},
    ]
    spec = spec_of(
        [cont(volumeMounts=mounts)],
        volumes=[{"name": "cfg", "configMap": {"name": "cm"}}, {"name": "scratch", "emptyDir": {}}],
        delivered=[{"name": "a", "configMaps": [cm]}],
    )
    job = tmp_path / "job"
    write_job_dir(job, REF, spec, Runtime("apptainer", "apptainer"), Defaults())
    argv = container_argv(
        spec.containers[0], Runtime("apptainer", "apptainer"), launch_of(spec, Defaults()), job
    )
    binds = [argv[i + 1] for i, word in enumerate(argv) if word == "--bind"]
    assert binds == [
        f"{job}/volumes/cfg/app.conf:/etc/app.conf",
        f"{job}/volumes/scratch/run/1:/work",
    ]
    assert (job / "volumes/cfg/app.conf").read_bytes() == b"x=1"
    assert (job / "volumes/scratch/run/1").is_dir()


@pytest.mark.parametrize("sub", ["../../etc", "/abs", "a:b", "a,b"])
def test_a_sub_path_outside_its_volume_or_two_binds_is_refused(sub: str):
    with pytest.raises(Unrunnable, match="subPath"):
        spec_of(
            [cont(volumeMounts=[{"name": "v", "mountPath": "/w", "subPath": sub}])],
            volumes=[{"name": "v", "emptyDir": {}}],
        )


def test_pre_exec_runs_in_the_job_shell_before_the_containers(tmp_path: Path):
    spec = spec_of(
        [cont('echo "tool=$TOOL_HOME"')],
        ann={"slurm-job.vk.io/pre-exec": "export TOOL_HOME=/opt/tool\necho pre > pre.out"},
    )
    job = tmp_path / "job"
    write_job_dir(job, REF, spec, Runtime("bare"), Defaults())
    assert (job / "pre-exec.sh").stat().st_mode & 0o777 == 0o700
    lines = (job / "job.sh").read_text().splitlines()
    assert not [line for line in lines if "export TOOL_HOME" in line]  # its own file
    assert run(job) == 0
    assert (job / "a.log").read_text() == "tool=/opt/tool\n"
    assert (job / "pre.out").read_text() == "pre\n"


def test_a_failing_pre_exec_ends_every_container_with_its_code(tmp_path: Path):
    spec = spec_of([cont("echo never")], ann={"slurm-job.vk.io/pre-exec": "false"})
    job = tmp_path / "job"
    write_job_dir(job, REF, spec, Runtime("bare"), Defaults())
    assert run(job) == 1
    assert (job / "a.exit").read_text().split()[::2] == ["1", "PreExecError"]
    assert not (job / "a.log").exists()


def test_runtime_options_mounts_image_root_and_amd_gpus():
    spec = spec_of(
        [cont(resources={"limits": {"cpu": "1", "memory": "1Mi", "amd.com/gpu": "1"}})],
        ann={
            "slurm-job.vk.io/singularity-options": "--fakeroot --writable-tmpfs",
            "slurm-job.vk.io/singularity-mounts": "--bind /cvmfs:/cvmfs:ro",
            "slurm-job.vk.io/image-root": "/cvmfs/unpacked.cern.ch/registry.hub.docker.com/",
        },
    )
    argv = container_argv(
        spec.containers[0],
        Runtime("apptainer", "apptainer"),
        launch_of(spec, Defaults()),
        Path("/j"),
    )
    assert argv[:9] == [
        "apptainer",
        "exec",
        "--containall",
        "--cleanenv",
        "--fakeroot",
        "--writable-tmpfs",
        "--bind",
        "/cvmfs:/cvmfs:ro",
        "--env-file",
    ]
    assert "--rocm" in argv and "--nv" not in argv
    assert "/cvmfs/unpacked.cern.ch/registry.hub.docker.com/img" in argv
    assert sbatch_options(REF, spec, Path("/j"), Defaults())[-1] == "--gres=gpu:1"


@pytest.mark.parametrize(
    ("image", "expected"),
    [("docker://x:1", "docker://x:1"), ("/s/x.sif", "/s/x.sif"), ("x:1", "oras://r/x:1")],
)
def test_image_root_applies_to_plain_names_only(image: str, expected: str):
    spec = spec_of([cont(image=image)], ann={"slurm-job.vk.io/image-root": "oras://r/"})
    argv = container_argv(
        spec.containers[0], Runtime("apptainer", "a"), launch_of(spec, Defaults()), Path("/j")
    )
    assert expected in argv


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("slurm-job.vk.io/image-root", "-x"),
        ("slurm-job.vk.io/image-root", "relative/"),
        ("slurm-job.vk.io/singularity-options", "--a 'unclosed"),
        ("slurm-job.vk.io/singularity-mounts", "--bind a\nb"),
        ("slurm-job.vk.io/mpi-flags", "-np 'x"),
        ("interlink.eu/pod-ip", "10.0.0.300"),
        ("interlink.eu/pod-ip", "$(id)"),
    ],
)
def test_bad_annotations_are_refused_by_name(key: str, value: str):
    with pytest.raises(Unrunnable, match=f"annotation {key}"):
        spec_of([cont()], ann={key: value})


def test_mpi_flags_put_the_launcher_before_the_container(tmp_path: Path):
    """The launcher (--mpi-launcher) and the pod's flags start the command; srun in a job
    sbatch started with --export=NONE gets the env back (SLURM_EXPORT_ENV=ALL)."""
    ann = {"slurm-job.vk.io/mpi-flags": "--mca btl self", "slurm-job.vk.io/flags": "--ntasks=4"}
    spec = spec_of([cont("echo rank")], ann=ann)
    defaults = Defaults(mpi_launcher=("mpiexec", "-np", "4"))
    launch = launch_of(spec, defaults)
    bare = container_argv(spec.containers[0], Runtime("bare"), launch, tmp_path)
    assert bare == ["mpiexec", "-np", "4", "--mca", "btl", "self", "sh", "-c", "echo rank"]
    options = sbatch_options(REF, spec, tmp_path, defaults)
    assert options.index("--ntasks=4") > options.index("--ntasks=1")  # the pod's, last, wins
    plain = spec_of([cont()], ann={"slurm-job.vk.io/mpi-flags": "true"})
    assert launch_of(plain, defaults).mpi == ("mpiexec", "-np", "4")  # "true": no extra flags
    assert launch_of(spec_of([cont()]), defaults).mpi is None
    job = tmp_path / "job"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "mpiexec").write_text(
        '#!/bin/sh\necho "launched by mpiexec $*; export=$SLURM_EXPORT_ENV"\n'
    )
    (fake / "mpiexec").chmod(0o755)
    write_job_dir(job, REF, spec, Runtime("bare"), defaults)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(job / "job.sh")], cwd=job, env=env, timeout=30, check=False)
    assert done.returncode == 0
    assert (job / "a.log").read_text() == (
        "launched by mpiexec -np 4 --mca btl self sh -c echo rank; export=ALL\n"
    )


def test_pod_ip_is_exported_and_unresolved_env_is_noted_in_the_log(tmp_path: Path):
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k"}}}]
    spec = spec_of(
        [cont('echo "ip=$POD_IP token=[$TOKEN]"', env=env)],
        ann={"interlink.eu/pod-ip": "10.244.1.7"},
    )
    job = tmp_path / "job"
    write_job_dir(job, REF, spec, Runtime("bare"), Defaults())
    assert run(job) == 0
    first, second = (job / "a.log").read_text().splitlines()
    assert first.startswith("decice-interlink-slurm: env TOKEN is set empty: secretKeyRef")
    assert second == "ip=10.244.1.7 token=[]"


def test_run_as_user_is_taken_only_as_the_plugins_own():
    me = os.geteuid()
    assert spec_of([cont()], securityContext={"runAsUser": me})
    with pytest.raises(Unrunnable, match=f"runAsUser {me + 1}: jobs run as the plugin's user"):
        spec_of([cont(securityContext={"runAsUser": me + 1})])


def test_a_pod_without_memory_gets_no_mem_line():
    spec = spec_of([cont(resources={})])
    options = sbatch_options(REF, spec, Path("/j"), Defaults())
    assert "--cpus-per-task=1" in options and not [o for o in options if o.startswith("--mem")]


def test_sidecars_and_overhead_count_as_kubernetes_counts_them():
    """#28: one pod size across decice: max(containers + sidecars, the largest init step)
    + overhead, as decice-scheduler's pod_request counts it."""

    def c2(name: str, cpu: str, mem: str, **extra) -> dict:
        return {
            "name": name,
            "image": "i",
            "command": ["x"],
            **extra,
            "resources": {"limits": {"cpu": cpu, "memory": mem}},
        }

    spec = spec_of(
        [c2("a", "1", "100Mi")],
        initContainers=[
            c2("side", "500m", "50Mi", restartPolicy="Always"),
            c2("big", "3", "10Mi"),  # its step: 3 + the sidecar's 0.5 before it
        ],
        overhead={"cpu": "250m", "memory": "20Mi"},
    )
    assert (spec.size.cpus, spec.size.memory_mb) == (4, 170)  # ceil(3.5 + .25); 150 + 20
    assert [c.sidecar for c in spec.init_containers] == [True, False]


def test_a_sidecar_runs_beside_the_rest_and_is_stopped_at_the_end(tmp_path: Path):
    spec = spec_of(
        [cont("for i in 1 2 3; do [ -s side.log ] && break; sleep 0.2; done; cat side.log")],
        initContainers=[
            {
                **cont("echo up > side.log; exec sleep 600"),
                "name": "side",
                "restartPolicy": "Always",
            },
            {**cont("echo init sees the sidecar"), "name": "after"},
        ],
    )
    job = tmp_path / "job"
    write_job_dir(job, REF, spec, Runtime("bare"), Defaults())
    assert run(job) == 0  # the sidecar's sleep did not hold the job
    assert (job / "a.log").read_text() == "up\n"
    assert (job / "after.exit").read_text().split()[::2] == ["0", "Completed"]
    assert (job / "side.exit").read_text().split()[0] == "143"  # stopped by the job


def test_a_negative_init_step_shrinks_no_job():
    """The plugin counts a pod's peak as the scheduler does: a negative init request
    (raw JSON; the API server refuses it) lowers nothing below the app's own ask."""
    from decice_kube.pods import peak_request

    pod = {
        "spec": {
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "2"}}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "-1"}}}],
        }
    }
    assert peak_request(pod, lambda res, _name: {"cpu": int(res["requests"]["cpu"])}) == {"cpu": 2}
    pod["spec"]["containers"] = []
    assert peak_request(pod, lambda res, _name: {"cpu": int(res["requests"]["cpu"])}) == {}
