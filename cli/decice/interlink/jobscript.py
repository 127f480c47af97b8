"""Pod -> job dir: the sbatch script, each container's env file and volume files.

Job dir ``<data dir>/jobs/<namespace>-<pod uid>/`` (0700), on a file system the compute
nodes share. In it: ``job.sh`` (0700), ``job.out`` (SLURM's output of the script),
``<container>.env`` (0600, may hold secrets), ``<container>.log`` (its stdout+stderr),
``<container>.started`` and ``<container>.exit`` ("<code> <finishedAt> <reason>") written
by the job, ``volumes/<volume>/`` (dirs 0700, files 0600).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from decice.interlink.api import PodRef
from decice.interlink.podspec import Container, PodSpec

SCRIPT = "job.sh"
OUTPUT = "job.out"
VOLUMES = "volumes"
JOB_PREFIX = "decice-"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def job_name(uid: str) -> str:
    """SLURM job name of the pod with ``uid``: how cancel-all recognises its jobs."""
    return f"{JOB_PREFIX}{uid}"


@dataclass(frozen=True)
class Runtime:
    """How a container runs: ``bare`` (its command on the node) or a container binary."""

    kind: str  # "bare" | "apptainer"
    binary: str = ""  # apptainer or singularity (path or name)


@dataclass(frozen=True)
class Defaults:
    partition: str = ""
    account: str = ""


def sbatch_options(ref: PodRef, spec: PodSpec, job_dir: Path, defaults: Defaults) -> list[str]:
    opts = [
        f"--job-name={job_name(ref.uid)}",
        f"--output={job_dir / OUTPUT}",
        f"--chdir={job_dir}",
        "--export=NONE",
        "--nodes=1",
        "--ntasks=1",
        f"--cpus-per-task={spec.size.cpus}",
        f"--mem={spec.size.memory_mb}M",
    ]
    if spec.size.gpus:
        opts.append(f"--gres=gpu:{spec.size.gpus}")
    if spec.time:
        opts.append(f"--time={spec.time}")
    partition = spec.partition or defaults.partition
    if partition:
        opts.append(f"--partition={partition}")
    account = spec.account or defaults.account
    if account:
        opts.append(f"--account={account}")
    return [*opts, *spec.flags]


def env_file(env: Sequence[tuple[str, str]]) -> str:
    """``NAME='value'`` lines: sourced with ``set -a`` (bare) or apptainer's --env-file."""
    return "".join(f"{name}={shlex.quote(value)}\n" for name, value in env)


def _image(image: str) -> str:
    if "://" in image or image.startswith("/"):
        return image
    return f"docker://{image}"


def container_argv(c: Container, runtime: Runtime, gpus: int, job_dir: Path) -> list[str]:
    """What runs a container (its env is in ``<name>.env``)."""
    if runtime.kind == "bare":
        return [*c.command, *c.args]
    argv = [runtime.binary, "exec" if c.command else "run", "--containall", "--cleanenv"]
    argv += ["--env-file", str(job_dir / f"{c.name}.env")]
    if gpus:
        argv.append("--nv")
    for m in c.mounts:
        src = job_dir / VOLUMES / m.volume
        argv += ["--bind", f"{src}:{m.path}{':ro' if m.read_only else ''}"]
    if c.working_dir:
        argv += ["--pwd", c.working_dir]
    return [*argv, _image(c.image), *c.command, *c.args]


def quote(value: str) -> str:
    """``value`` as one shell word on one line: shlex's quoting, or bash's ``$'...'`` when
    it holds a control character. A pod's newline never starts a line of job.sh, so no
    value a pod supplies can become a ``#SBATCH``, ``#PBS`` or ``#BSUB`` directive."""
    if not any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        return shlex.quote(value)
    out = []
    for ch in value:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


def _run_function(index: str, c: Container, runtime: Runtime, gpus: int, job_dir: Path) -> str:
    argv = " ".join(quote(a) for a in container_argv(c, runtime, gpus, job_dir))
    lines = [f"run_{index}() {{  # container {c.name}"]
    if runtime.kind == "bare":
        lines.append(f'  set -a; . "$JOB_DIR/{c.name}.env"; set +a')
        if c.working_dir:
            lines.append(f"  cd {quote(c.working_dir)} || exit 1")
    lines += [f"  exec {argv}", "}"]
    return "\n".join(lines)


PRELUDE = """\
set -u
export PATH="${PATH:-%(path)s}"
JOB_DIR=%(job_dir)s
export DECICE_VOLUMES="$JOB_DIR/volumes"
now() { date -u +%%Y-%%m-%%dT%%H:%%M:%%SZ; }
started() {  # <container>
  now > "$JOB_DIR/$1.started.tmp" && mv -f "$JOB_DIR/$1.started.tmp" "$JOB_DIR/$1.started"
}
finished() {  # <container> <exit code> <reason>: "<code> <finishedAt> <reason>", once
  [ -e "$JOB_DIR/$1.exit" ] && return 0
  printf '%%s %%s %%s\\n' "$2" "$(now)" "$3" > "$JOB_DIR/$1.exit.tmp"
  mv -f "$JOB_DIR/$1.exit.tmp" "$JOB_DIR/$1.exit"
}
reason() { if [ "$1" -eq 0 ]; then echo Completed; else echo Error; fi; }
PIDS=""
ALL="%(all)s"
on_signal() {  # scancel, walltime: record the containers that ran as killed
  [ -n "$PIDS" ] && kill -TERM $PIDS 2>/dev/null
  for c in $ALL; do [ -e "$JOB_DIR/$c.started" ] && finished "$c" 143 Killed; done
  exit 143
}
trap on_signal TERM INT
"""


def render_script(
    ref: PodRef, spec: PodSpec, job_dir: Path, runtime: Runtime, defaults: Defaults
) -> str:
    header = ["#!/bin/bash"]
    header += [f"#SBATCH {opt}" for opt in sbatch_options(ref, spec, job_dir, defaults)]
    header.append(
        f"# written by decice-interlink-slurm for pod {ref.namespace}/{ref.name} "
        f"(uid {ref.uid}), runtime {runtime.kind}"
    )
    every = [*spec.init_containers, *spec.containers]
    body = [
        PRELUDE
        % {
            "path": DEFAULT_PATH,
            "job_dir": shlex.quote(str(job_dir)),
            "all": " ".join(c.name for c in every),
        }
    ]
    gpus = spec.size.gpus
    for i, c in enumerate(spec.init_containers):
        body.append(_run_function(f"i{i}", c, runtime, gpus, job_dir))
    for i, c in enumerate(spec.containers):
        body.append(_run_function(f"c{i}", c, runtime, gpus, job_dir))
    flow = []
    if spec.init_containers:
        flow.append("# init containers, one after the other; one failing ends the job")
    for i, c in enumerate(spec.init_containers):
        log = f'"$JOB_DIR/{c.name}.log"'
        flow += [
            f"started {c.name}; ( run_i{i} ) >>{log} 2>&1 & PIDS=$!",
            f'wait $PIDS; rc=$?; PIDS=""; finished {c.name} $rc "$(reason $rc)"',
            '[ "$rc" -eq 0 ] || exit "$rc"',
        ]
    flow.append("# containers, side by side; the job's exit code is the first non-zero one")
    for i, c in enumerate(spec.containers):
        flow.append(f'started {c.name}; ( run_c{i} ) >>"$JOB_DIR/{c.name}.log" 2>&1 & P{i}=$!')
    flow.append('PIDS="' + " ".join(f"$P{i}" for i in range(len(spec.containers))) + '"')
    flow.append("rc=0")
    for i, c in enumerate(spec.containers):
        flow += [
            f'wait $P{i}; r=$?; finished {c.name} $r "$(reason $r)"',
            '[ "$rc" -ne 0 ] || rc=$r',
        ]
    flow.append('exit "$rc"')
    return "\n".join([*header, *body, *flow]) + "\n"


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
    finally:
        os.close(fd)


def write_job_dir(
    job_dir: Path, ref: PodRef, spec: PodSpec, runtime: Runtime, defaults: Defaults
) -> Path:
    """Create the job dir with every file the job reads; returns the script's path."""
    job_dir.mkdir(mode=0o700, parents=False, exist_ok=True)
    job_dir.chmod(0o700)
    volumes = job_dir / VOLUMES
    volumes.mkdir(mode=0o700, exist_ok=True)
    for vol in spec.volumes.values():
        root = volumes / vol.name
        root.mkdir(mode=0o700, exist_ok=True)
        for rel, data in vol.files.items():
            path = root / rel
            for parent in reversed(path.relative_to(root).parents[:-1]):
                (root / parent).mkdir(mode=0o700, exist_ok=True)
            _write(path, data, 0o600)
    for c in [*spec.init_containers, *spec.containers]:
        _write(job_dir / f"{c.name}.env", env_file(c.env).encode(), 0o600)
    script = job_dir / SCRIPT
    _write(script, render_script(ref, spec, job_dir, runtime, defaults).encode(), 0o700)
    return script
