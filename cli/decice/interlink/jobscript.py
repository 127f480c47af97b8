"""Pod -> job dir: the sbatch script, each container's env file and volume files.

Job dir ``<data dir>/jobs/<namespace>-<pod uid>/`` (0700), on a file system the compute
nodes share. In it: ``job.sh`` (0700), ``job.out`` (SLURM's output of the script),
``<container>.env`` (0600, may hold secrets), ``<container>.log`` (its stdout+stderr),
``<container>.started`` and ``<container>.exit`` ("<code> <finishedAt> <reason>") written
by the job, ``<container>.log.times`` ("<bytes> <epoch seconds>" lines: the log's size
each second it grew, what log timestamps and ``Since*`` are read from), ``pre-exec.sh``
(0700, the pod's ``slurm-job.vk.io/pre-exec``), ``volumes/<volume>/`` (dirs 0700, files
0600).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from decice.interlink.api import PodRef
from decice.interlink.podspec import AMD_GPU, GPU, SCHEME_RE, Container, PodSpec

SCRIPT = "job.sh"
OUTPUT = "job.out"
PRE_EXEC = "pre-exec.sh"
VOLUMES = "volumes"
TIMES = ".log.times"  # after the container's name
NOTE = "decice-interlink-slurm: "  # starts each note line in a container's log
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
    mpi_launcher: tuple[str, ...] = ("mpiexec",)  # serve --mpi-launcher


@dataclass(frozen=True)
class Launch:
    """How every container of one pod starts: GPUs, apptainer options, image root, MPI."""

    gpus: int = 0
    gpu_kind: str = GPU
    options: tuple[str, ...] = ()  # slurm-job.vk.io/singularity-options and -mounts
    image_root: str = ""  # slurm-job.vk.io/image-root
    mpi: tuple[str, ...] | None = None  # launcher + slurm-job.vk.io/mpi-flags


def launch_of(spec: PodSpec, defaults: Defaults) -> Launch:
    mpi = None if spec.mpi is None else (*defaults.mpi_launcher, *spec.mpi)
    return Launch(
        spec.size.gpus, spec.size.gpu_kind, tuple(spec.runtime_options), spec.image_root, mpi
    )


def sbatch_options(ref: PodRef, spec: PodSpec, job_dir: Path, defaults: Defaults) -> list[str]:
    opts = [
        f"--job-name={job_name(ref.uid)}",
        f"--output={job_dir / OUTPUT}",
        f"--chdir={job_dir}",
        "--export=NONE",
        "--nodes=1",
        "--ntasks=1",
        f"--cpus-per-task={spec.size.cpus}",
    ]
    if spec.size.memory_mb:  # else the partition's default memory
        opts.append(f"--mem={spec.size.memory_mb}M")
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


def _image(image: str, root: str = "") -> str:
    """An image as apptainer takes it: a scheme or a path as given, else under the pod's
    image root (``slurm-job.vk.io/image-root``), else from a docker registry."""
    if SCHEME_RE.match(image) or image.startswith("/"):
        return image
    return f"{root or 'docker://'}{image}"


def container_argv(c: Container, runtime: Runtime, launch: Launch, job_dir: Path) -> list[str]:
    """What runs a container (its env is in ``<name>.env``), under the MPI launcher when
    the pod asks for one."""
    mpi = list(launch.mpi) if launch.mpi is not None else []
    if runtime.kind == "bare":
        return [*mpi, *c.command, *c.args]
    argv = [runtime.binary, "exec" if c.command else "run", "--containall", "--cleanenv"]
    argv += [*launch.options, "--env-file", str(job_dir / f"{c.name}.env")]
    if launch.gpus:
        argv.append("--rocm" if launch.gpu_kind == AMD_GPU else "--nv")
    for m in c.mounts:
        src = job_dir / VOLUMES / m.volume
        if m.sub_path:
            src = src / m.sub_path
        argv += ["--bind", f"{src}:{m.path}{':ro' if m.read_only else ''}"]
    if c.working_dir:
        argv += ["--pwd", c.working_dir]
    return [*mpi, *argv, _image(c.image, launch.image_root), *c.command, *c.args]


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


def _run_function(index: str, c: Container, runtime: Runtime, launch: Launch, job_dir: Path) -> str:
    argv = " ".join(quote(a) for a in container_argv(c, runtime, launch, job_dir))
    lines = [f"run_{index}() {{  # container {c.name}"]
    if launch.mpi is not None:  # srun in a job started with --export=NONE would pass none
        lines.append("  export SLURM_EXPORT_ENV=ALL")
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
SIDECARS=""
ALL="%(all)s"
declare -A SIZES
sample() {  # "<bytes> <epoch>" to <container>.log.times for each log that grew
  local c n t
  printf -v t '%%(%%s)T' -1
  for c in $ALL; do
    [ -e "$JOB_DIR/$c.log" ] || continue
    n=$(stat -c %%s "$JOB_DIR/$c.log" 2>/dev/null) || continue
    [ "$n" = "${SIZES[$c]:-0}" ] && continue
    SIZES[$c]=$n
    echo "$n $t" >> "$JOB_DIR/$c.log.times"
  done
}
# the sampler's own sleep ends with it: a step (pilot mode) lasts until its last process
sampler() {
  trap 'kill "${NAP:-}" 2>/dev/null; exit 0' TERM
  while :; do sleep 1 & NAP=$!; wait "$NAP"; sample; done
}
sampler & SAMPLER=$!
on_exit() { kill "$SAMPLER" $SIDECARS 2>/dev/null; sample; }
trap on_exit EXIT
on_signal() {  # scancel, walltime, node failure: the plugin reads SLURM's verdict
  [ -n "$PIDS$SIDECARS" ] && kill -TERM $PIDS $SIDECARS 2>/dev/null
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
    launch = launch_of(spec, defaults)
    for i, c in enumerate(spec.init_containers):
        body.append(_run_function(f"i{i}", c, runtime, launch, job_dir))
    for i, c in enumerate(spec.containers):
        body.append(_run_function(f"c{i}", c, runtime, launch, job_dir))
    flow = []
    if spec.pre_exec:
        flow += [
            "# slurm-job.vk.io/pre-exec, in this shell (a module load reaches the containers)",
            f'set +u; . "$JOB_DIR/{PRE_EXEC}"; rc=$?; set -u',
            'if [ "$rc" -ne 0 ]; then',
            '  for c in $ALL; do finished "$c" "$rc" PreExecError; done',
            '  exit "$rc"',
            "fi",
        ]
    if spec.init_containers:
        flow.append(
            "# init containers, one after the other (one failing ends the job); a sidecar "
            "(restartPolicy Always) starts and runs beside the rest"
        )
    sidecars = []
    for i, c in enumerate(spec.init_containers):
        log = f'"$JOB_DIR/{c.name}.log"'
        if c.sidecar:
            sidecars.append((i, c))
            flow.append(
                f'started {c.name}; ( run_i{i} ) >>{log} 2>&1 & S{i}=$!; SIDECARS="$SIDECARS $S{i}"'
            )
            continue
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
    if sidecars:
        flow.append("# the containers have ended: the sidecars are stopped, as the kubelet does")
    for i, c in sidecars:
        flow.append(
            f'kill -TERM $S{i} 2>/dev/null; wait $S{i}; r=$?; finished {c.name} $r "$(reason $r)"'
        )
    if sidecars:
        flow.append('SIDECARS=""')
    flow.append('exit "$rc"')
    return "\n".join([*header, *body, *flow]) + "\n"


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
    finally:
        os.close(fd)


def _runtime_notes(spec: PodSpec, runtime: Runtime) -> list[str]:
    if runtime.kind != "bare":
        return []
    unused = [
        what
        for what, given in (
            ("singularity-options/-mounts", spec.runtime_options),
            ("image-root", spec.image_root),
        )
        if given
    ]
    if not unused:
        return []
    return [
        f"slurm-job.vk.io/{' and '.join(unused)} not used: the plugin runs containers "
        "bare (no apptainer or singularity where it started)"
    ]


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
        for m in c.mounts:  # a subPath the volume lacks is made a directory, as the kubelet does
            if m.sub_path:
                target = volumes / m.volume / m.sub_path
                if not target.exists():
                    for part in reversed(PurePosixPath(m.sub_path).parents[:-1]):
                        (volumes / m.volume / part).mkdir(mode=0o700, exist_ok=True)
                    target.mkdir(mode=0o700, exist_ok=True)
        _write(job_dir / f"{c.name}.env", env_file(c.env).encode(), 0o600)
        notes = [*c.notes, *_runtime_notes(spec, runtime)]
        if notes:  # its log starts with what the plugin took in a weaker form
            text = "".join(f"{NOTE}{n}\n" for n in notes)
            _write(job_dir / f"{c.name}.log", text.encode(), 0o600)
    if spec.pre_exec:
        _write(job_dir / PRE_EXEC, spec.pre_exec.encode() + b"\n", 0o700)
    script = job_dir / SCRIPT
    _write(script, render_script(ref, spec, job_dir, runtime, defaults).encode(), 0o700)
    return script
