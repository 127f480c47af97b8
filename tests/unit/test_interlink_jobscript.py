"""Pod -> job dir and sbatch script; the script run with bash (no SLURM needed)."""

from __future__ import annotations

import ast
import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from decice.interlink.api import PodRef
from decice.interlink.jobscript import (
    Defaults,
    Launch,
    Runtime,
    _image,
    container_argv,
    write_job_dir,
)
from decice.interlink.slurm import (
    gpu_count,
    parse_default_partition,
    parse_nodes,
    parse_queue,
    sacct,
)
from decice.interlink.status import JobView, container_status
from tests.support import INTERLINK_DECICE_MODULES, interlink_pod, wait_for
from tests.support import INTERLINK_KUBE_MODULES as KUBE_MODULES

pytestmark = pytest.mark.unit

UID = "0f6a3c1e-6f5b-4a51-9a53-2d1b9d2f0c11"
REF = PodRef("p", "ns", UID)
PACKAGE = Path(__file__).resolve().parents[2] / "cli" / "decice" / "interlink"


spec_of = functools.partial(interlink_pod, UID)


def cont(name: str, script: str, cpu: str = "1", **extra) -> dict:
    res = {"limits": {"cpu": cpu, "memory": "10Mi"}}
    return {
        "name": name,
        "image": "img",
        "command": ["sh", "-c", script],
        "resources": res,
        **extra,
    }


def test_sbatch_header(tmp_path: Path):
    spec = spec_of(
        [cont("a", "true", cpu="2", env=[{"name": "X", "value": "it's"}])],
        ann={
            "slurm-job.vk.io/time": "10:00",
            "slurm-job.vk.io/flags": "--qos=low",
            "slurm-job.vk.io/account": "acct",
        },
    )
    spec.size = type(spec.size)(2, 10, 1)
    job = tmp_path / "job"
    script = write_job_dir(job, REF, spec, Runtime("bare"), Defaults(partition="batch"))
    text = script.read_text()
    header = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert header == [
        f"#SBATCH --job-name=decice-{UID}",
        f"#SBATCH --output={job}/job.out",
        f"#SBATCH --chdir={job}",
        "#SBATCH --export=NONE",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks=1",
        "#SBATCH --cpus-per-task=2",
        "#SBATCH --mem=10M",
        "#SBATCH --gres=gpu:1",
        "#SBATCH --time=10:00",
        "#SBATCH --partition=batch",
        "#SBATCH --account=acct",
        "#SBATCH --qos=low",
    ]
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    assert script.stat().st_mode & 0o777 == 0o700 and job.stat().st_mode & 0o777 == 0o700
    env = job / "a.env"
    assert env.read_text() == "X='it'\"'\"'s'\n" and env.stat().st_mode & 0o777 == 0o600


def test_volume_files_are_private(tmp_path: Path):
    spec = spec_of(
        [cont("a", "true", volumeMounts=[{"name": "s", "mountPath": "/s"}])],
        volumes=[{"name": "s", "emptyDir": {}}],
    )
    spec.volumes["s"].files = {"sub/key": b"v"}  # as a secret with items: {path: sub/key}
    write_job_dir(tmp_path / "j", REF, spec, Runtime("bare"), Defaults())
    key = tmp_path / "j" / "volumes" / "s" / "sub" / "key"
    assert key.read_bytes() == b"v" and key.stat().st_mode & 0o777 == 0o600
    assert key.parent.stat().st_mode & 0o777 == 0o700


def test_images_for_apptainer():
    assert _image("img") == "docker://img"
    assert _image("quay.io/org/img:1") == "docker://quay.io/org/img:1"
    assert _image("/shared/images/app.sif") == "/shared/images/app.sif"  # a local SIF file
    assert _image("library://org/app:1") == "library://org/app:1"


def test_apptainer_command(tmp_path: Path):
    c = spec_of(
        [
            cont(
                "a",
                "echo",
                volumeMounts=[{"name": "v", "mountPath": "/data", "readOnly": True}],
                workingDir="/w",
            )
        ],
        volumes=[{"name": "v", "emptyDir": {}}],
    ).containers[0]
    argv = container_argv(c, Runtime("apptainer", "/usr/bin/apptainer"), Launch(gpus=1), tmp_path)
    assert argv == [
        "/usr/bin/apptainer",
        "exec",
        "--containall",
        "--cleanenv",
        "--env-file",
        f"{tmp_path}/a.env",
        "--nv",
        "--bind",
        f"{tmp_path}/volumes/v:/data:ro",
        "--pwd",
        "/w",
        "docker://img",
        "sh",
        "-c",
        "echo",
    ]
    c.command = []
    c.args = ["x"]
    assert container_argv(c, Runtime("apptainer", "apptainer"), Launch(), tmp_path)[1] == "run"


def run_job(job: Path) -> subprocess.Popen:
    return subprocess.Popen(
        ["setsid", "bash", str(job / "job.sh")],
        cwd=job,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_script_records_exit_codes_logs_and_env(tmp_path: Path):
    spec = spec_of(
        [
            cont("a", 'echo "a:$X:$DECICE_VOLUMES"; exit 0', env=[{"name": "X", "value": "$HOME"}]),
            cont("b", "echo b >&2; exit 6"),
        ],
        init=[cont("i", "echo init")],
    )
    job = tmp_path / "job"
    write_job_dir(job, REF, spec, Runtime("bare"), Defaults())
    assert run_job(job).wait(timeout=20) == 6
    assert (job / "a.log").read_text() == f"a:$HOME:{job}/volumes\n"
    assert (job / "b.log").read_text() == "b\n"
    assert (job / "i.log").read_text() == "init\n"
    for name, code, reason in (
        ("i", "0", "Completed"),
        ("a", "0", "Completed"),
        ("b", "6", "Error"),
    ):
        parts = (job / f"{name}.exit").read_text().split()
        assert (parts[0], parts[2]) == (code, reason)
        assert (job / f"{name}.started").read_text().strip() <= parts[1]


HOSTILE_ARGS = [
    "a\n#PBS -o /tmp/pwned\nb",  # finding 2 of the second security round
    "#BSUB -cwd /tmp",
    "x\n#SBATCH --output=/tmp/pwned",
    "it's \\ $(touch /tmp/pwned) `id` $HOME",
    "tab\tcr\rbell\x07del\x7f",
    "\n",
]


def test_pod_values_stay_one_shell_word_on_one_line(tmp_path: Path):
    """Args and a workingDir with newlines, quotes and shell syntax: no line of job.sh
    starts with a directive sbatch would read (only the plugin's #SBATCH header), and bash
    gives the container exactly the values the pod sent."""
    workdir = tmp_path / "wd\n#PBS -e x"
    workdir.mkdir()
    spec = spec_of(
        [
            {
                "name": "main",
                "image": "img",
                "command": ["printf", "[%s]"],
                "args": HOSTILE_ARGS,
                "workingDir": str(workdir),
                "resources": {"limits": {"cpu": "1", "memory": "10Mi"}},
            }
        ]
    )
    job = tmp_path / "job"
    script = write_job_dir(job, REF, spec, Runtime("bare"), Defaults())
    lines = script.read_text().splitlines()
    header = [n for n, line in enumerate(lines) if line.startswith("#SBATCH")]
    assert header == list(range(1, len(header) + 1))  # right after #!, nowhere else
    assert not [line for line in lines if line.lstrip().startswith(("#PBS", "#BSUB"))]
    assert run_job(job).wait(timeout=20) == 0
    assert (job / "main.log").read_bytes().decode() == "".join(f"[{a}]" for a in HOSTILE_ARGS)
    assert not Path("/tmp/pwned").exists()


# stands in for apptainer (not in this machine's Debian archive): checks the options the
# job script passes, then runs the command with the env file's variables, as exec does
APPTAINER_STUB = """#!/bin/bash
printf '%s\\n' "$*" >> "$(dirname "$0")/calls"
mode=$1; shift
case "$mode" in exec|run) ;; *) exit 90;; esac
envfile=""
while [ $# -gt 0 ]; do
  case "$1" in
    --containall|--cleanenv|--nv) shift;;
    --env-file) envfile=$2; shift 2;;
    --bind) [ -d "${2%%:*}" ] || exit 91; shift 2;;
    --pwd) cd "$2" || exit 93; shift 2;;
    *) break;;
  esac
done
image=$1; shift
[ -f "$envfile" ] || exit 92
set -a; . "$envfile"; set +a
export STUB_IMAGE="$image"
exec "$@"
"""


def test_whole_job_in_apptainer_mode(tmp_path: Path):
    stub = tmp_path / "bin" / "apptainer"
    stub.parent.mkdir()
    stub.write_text(APPTAINER_STUB)
    stub.chmod(0o755)
    spec = spec_of(
        [
            cont(
                "a",
                'echo "$STUB_IMAGE x=$X in $(pwd)"; ls /; exit 4',
                env=[{"name": "X", "value": "it's"}],
                volumeMounts=[{"name": "v", "mountPath": "/data"}],
                workingDir="/",
            ),
        ],
        init=[{**cont("i", "echo init"), "image": "oras://reg/x:1"}],
        volumes=[{"name": "v", "emptyDir": {}}],
    )
    job = tmp_path / "job"
    write_job_dir(job, REF, spec, Runtime("apptainer", str(stub)), Defaults())
    assert (job / "a.env").stat().st_mode & 0o777 == 0o600
    assert run_job(job).wait(timeout=20) == 4
    assert (job / "a.log").read_text().splitlines()[0] == "docker://img x=it's in /"
    assert (job / "i.log").read_text() == "init\n"
    assert (job / "a.exit").read_text().split()[::2] == ["4", "Error"]
    assert (job / "i.exit").read_text().split()[::2] == ["0", "Completed"]
    calls = (tmp_path / "bin" / "calls").read_text().splitlines()
    assert calls[0].startswith("exec --containall --cleanenv --env-file ")
    assert " oras://reg/x:1 sh -c echo init" in calls[0]  # a scheme is kept as given
    assert f"--bind {job}/volumes/v:/data --pwd / docker://img sh -c" in calls[1]


def test_script_records_killed_containers_on_sigterm(tmp_path: Path):
    spec = spec_of([cont("a", "sleep 60")])
    job = tmp_path / "job"
    write_job_dir(job, REF, spec, Runtime("bare"), Defaults())
    proc = run_job(job)
    wait_for("the container to start", (job / "a.started").exists, timeout=10)
    time.sleep(0.2)
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=10) == 143
    assert (job / "a.exit").read_text().split()[::2] == ["143", "Killed"]


def test_status_from_files_and_queue(tmp_path: Path):
    queue = parse_queue("7|RUNNING|None|decice-x|/d\n8|PENDING|Priority|decice-y|/e\n")
    assert queue["7"].active and queue["8"].reason == "Priority"
    now = "2026-01-01T00:00:09Z"
    pending = container_status("a", "img", tmp_path, JobView("8", queue["8"]), now)
    assert pending["state"]["waiting"]["reason"] == "Pending"
    creating = container_status("a", "img", tmp_path, JobView("7", queue["7"]), now)
    assert creating["state"]["waiting"]["reason"] == "ContainerCreating"
    (tmp_path / "a.started").write_text("2026-01-01T00:00:01Z\n")
    run = container_status("a", "img", tmp_path, JobView("7", queue["7"]), now)
    assert run["state"] == {"running": {"startedAt": "2026-01-01T00:00:01Z"}} and run["ready"]
    gone = container_status("a", "img", tmp_path, JobView("7", None, ("TIMEOUT", 0)), now)
    assert gone["state"]["terminated"]["reason"] == "DeadlineExceeded"
    assert gone["state"]["terminated"]["exitCode"] == 143
    cancelled = container_status("a", "img", tmp_path, JobView("7", None, None, True), now)
    assert cancelled["state"]["terminated"]["reason"] == "Cancelled"
    unknown = container_status("a", "img", tmp_path, JobView("7", None), now)["state"]
    assert unknown["terminated"]["reason"] == "JobGone"
    (tmp_path / "a.exit").write_text("9 2026-01-01T00:00:05Z Error\n")
    done = container_status("a", "img", tmp_path, JobView("7", queue["7"]), now)
    assert done["state"]["terminated"] == {
        "exitCode": 9,
        "reason": "Error",
        "startedAt": "2026-01-01T00:00:01Z",
        "finishedAt": "2026-01-01T00:00:05Z",
    }


@pytest.mark.parametrize(
    ("printed", "rc", "verdict"),
    [
        ("OUT_OF_MEMORY|0:125\n", 0, ("OUT_OF_MEMORY", 0)),  # exit code:signal
        ("CANCELLED by 1500|0:15\n", 0, ("CANCELLED", 0)),
        ("FAILED|3:0\n", 0, ("FAILED", 3)),
        ("NODE_FAIL|0:0\n", 0, ("NODE_FAIL", 0)),
        ("", 0, ("", 0)),  # accounting works but knows no such job
        ("TIMEOUT|n/a\n", 0, ("", 0)),  # an exit code that is no number
        ("", 1, None),  # no accounting at all (the lab: accounting_storage/none)
    ],
)
def test_sacct_verdicts(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    printed: str,
    rc: int,
    verdict: tuple[str, int] | None,
) -> None:
    fake = tmp_path / "sacct"
    (tmp_path / "out").write_text(printed)
    fake.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/argv\ncat {tmp_path}/out\nexit {rc}\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert sacct("42") == verdict
    assert (tmp_path / "argv").read_text().split() == [
        "-n",
        "-P",
        "-X",
        "-j",
        "42",
        "-o",
        "State,ExitCode",
    ]


@pytest.mark.parametrize(
    ("accounting", "reason", "code"),
    [
        (("OUT_OF_MEMORY", 0), "OOMKilled", 137),
        (("NODE_FAIL", 0), "NodeFail", 1),
        (("BOOT_FAIL", 0), "NodeFail", 1),
        (("PREEMPTED", 0), "Preempted", 143),
        (("DEADLINE", 0), "DeadlineExceeded", 143),
        (("FAILED", 3), "Error", 1),
        (("COMPLETED", 0), "Error", 1),  # ended, yet the container wrote no exit code
        (("", 0), "JobGone", 1),
    ],
)
def test_a_job_gone_from_squeue_ends_with_accountings_verdict(
    tmp_path: Path, accounting: tuple[str, int], reason: str, code: int
) -> None:
    now = "2026-01-01T00:00:09Z"
    state = container_status("a", "img", tmp_path, JobView("7", None, accounting), now)["state"]
    assert (state["terminated"]["reason"], state["terminated"]["exitCode"]) == (reason, code)
    assert "the container never started" in state["terminated"]["message"]


def test_scontrol_parsing():
    nodes = parse_nodes(
        "NodeName=n1 CPUAlloc=2 CPUTot=8 RealMemory=4000 AllocMem=100 Gres=gpu:a100:4(S:0-1) "
        "GresUsed=gpu:a100:1(IDX:0) State=MIXED Partitions=a,b\n"
        "NodeName=n2 CPUTot=8 State=IDLE+DRAIN Partitions=a\n"
    )
    assert (nodes[0].cpus, nodes[0].cpus_alloc, nodes[0].gpus, nodes[0].gpus_alloc) == (8, 2, 4, 1)
    assert nodes[0].partitions == ("a", "b") and nodes[0].usable and not nodes[1].usable
    assert gpu_count("(null)") == 0 and gpu_count("gpu:2,mps:100") == 2
    assert (
        parse_default_partition("PartitionName=x Default=NO\nPartitionName=y Default=YES\n") == "y"
    )
    assert parse_default_partition("PartitionName=only Default=NO\n") == "only"


def test_package_is_stdlib_only_and_self_contained():
    """The plugin imports the standard library, itself, and the Kubernetes library's
    stdlib-only quantity grammar and pod-request rule (test_layout holds those to it)."""
    allowed = set(sys.stdlib_module_names) | {"decice", "decice_kube"}
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module in ("decice", "decice_kube"):
                names = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"
                if name.startswith("decice_kube"):
                    assert name in KUBE_MODULES, name
                elif name.startswith("decice"):
                    ours = name in INTERLINK_DECICE_MODULES or name.startswith("decice.interlink")
                    assert ours, f"{path.name} imports {name}"
