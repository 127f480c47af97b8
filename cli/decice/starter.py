"""Commented starter specs for `decice init --target X`."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from decice.errors import InputError
from decice.spec_model import TARGETS

_HEAD = """\
# decice experiment spec ({target}).  Check it with: decice plan -f THIS_FILE
# Every key is optional unless marked; pinned versions come from decice itself.
name: my-experiment          # required: a DNS label naming this cluster
target: {target}
"""

_TARGET = {
    "sim": """\
# A real kube-apiserver on loopback with simulated nodes.
sim:
  nodes:
    - name_prefix: cpu
      count: 4
      capacity: {cpu: "16", memory: 64Gi, pods: "110"}
    - name_prefix: gpu
      count: 2
      capacity: {cpu: "32", memory: 256Gi, pods: "110", nvidia.com/gpu: "4"}
""",
    "lab": """\
# systemd containers (podman) on this machine as nodes.
lab:
  name: lab                  # several labs can live side by side
  nodes: 3
  slurm: false               # true: a SLURM controller + slurmd on every node
""",
    "slurm": """\
# Run inside a SLURM job (salloc/sbatch): the job's nodes become the cluster.
allocation:
  control_plane: 1           # the first K hosts are control plane + etcd (odd)
  edge: []                   # hosts that join as KubeEdge edge nodes
  hpc_endpoints: []          # interLink endpoints (e.g. the login node)
  # jump_host: login01       # when the nodes are only reachable through it
  # ssh_config: ~/.ssh/config
  # vars: {ansible_user: me}  # Ansible variables for every allocated host
""",
    "pbs": """\
# Run inside a PBS job: the hosts of $PBS_NODEFILE become the cluster.
allocation:
  control_plane: 1
""",
    "static": """\
# A fixed list of machines (required for static: hosts or allocation.hosts_file).
hosts:
  - name: node1
    address: 192.0.2.11
    roles: [control_plane, etcd]
  - name: node2
    address: 192.0.2.12
    roles: [worker]
""",
}

_TAIL = """\
kubernetes:
  cni: calico                # calico | flannel | cilium
addons:                      # each: enabled, version (pinned if absent), values
  volcano: {enabled: true}
  interlink:                 # virtual HPC nodes whose pods run as SLURM jobs
    enabled: true
    endpoints: []            # one per virtual node, e.g.:
    # - node: hpc-0          #   the virtual node's name (a DNS label, unique)
    #   login_host: login1   #   an hpc host of this spec (sim: a name ssh reaches)
    #   user: alice          #   optional; else the inventory's ssh user (never root)
    #   port: 4000           #   sim: the plugin's TCP port on the login host
    #   partition: batch
    #   account: proj1       #   optional
    #   data_dir: /shared/decice-interlink   # absolute, shared with the compute nodes
    #   runtime: auto        #   auto | apptainer | bare
    #   default_cpu: "1"     #   what a pod that sets no cpu gets
    #   default_memory: 2Gi  #   optional; else the partition's default memory
    #   mpi_launcher: mpiexec   # runs pods with slurm-job.vk.io/mpi-flags (or srun)
    #   bastion_port: 31022  #   real clusters: the node's ssh bastion (NodePort; 31022 + index)
    #   bastion_host: 10.0.0.5   # optional; else the first control-plane host's address
    #   mode: job            #   job: a SLURM job per pod | pilot: steps in leased pilots
    #   pilot: {nodes: 2, time: "4:00:00", max_pilots: 1, idle_release: 300}   # mode pilot
  kubeedge: {enabled: true}  # with EdgeMesh
  sedna: {enabled: true}     # needs kubeedge
  kubeflow: {enabled: true}  # Kubeflow Trainer
scheduler:
  enabled: true
  name: decice-scheduler
# mirror:                    # for sites without internet: exactly one of
#   path: /shared/decice-mirror
#   url: https://mirror.example.org/decice
"""


def render(target: str) -> str:
    if target not in TARGETS:
        raise InputError(
            f"--target {target!r}: unknown target\n    fix: use one of {', '.join(TARGETS)}"
        )
    return _HEAD.format(target=target) + _TARGET[target] + _TAIL


def write(target: str, path: Path, *, force: bool) -> None:
    """Write the starter spec for ``target`` to ``path`` (never through a symlink).

    Raises InputError naming the path and the fix when ``path`` exists (without
    ``force``), is a directory, a symlink or a special file, or its directory is missing.
    """
    from decice import spec

    text = render(target)
    spec.parse(text, str(path))  # the starter must itself be valid
    _check_destination(path, force=force)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        raise InputError(
            f"{path}: cannot write the spec: {exc.strerror}\n"
            "    fix: choose a writable location with -o"
        ) from None
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def _check_destination(path: Path, *, force: bool) -> None:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        _check_directory(path.parent)
        return
    except OSError as exc:  # a loop or a file among the parent directories
        raise InputError(
            f"{path}: cannot use this path: {exc.strerror}\n"
            "    fix: give -o a path whose directories exist (and are not symlink loops)"
        ) from None
    if stat.S_ISLNK(mode):
        raise InputError(
            f"{path}: is a symbolic link; decice does not write through links\n"
            "    fix: give -o the path of the file itself, or remove the link"
        )
    if stat.S_ISDIR(mode):
        raise InputError(
            f"{path}: is a directory\n    fix: give a file name, e.g. -o {path / 'decice.yaml'}"
        )
    if not stat.S_ISREG(mode):
        raise InputError(f"{path}: is not a regular file\n    fix: choose another -o")
    if not force:
        raise InputError(f"{path}: exists already\n    fix: pass --force to overwrite, or -o OTHER")


def _check_directory(directory: Path) -> None:
    try:
        mode = directory.stat().st_mode
    except FileNotFoundError:
        raise InputError(
            f"{directory}: directory does not exist\n"
            f"    fix: create it (mkdir -p {directory}) or choose another -o"
        ) from None
    except OSError as exc:
        raise InputError(
            f"{directory}: cannot use this directory: {exc.strerror}\n"
            "    fix: give -o a path whose directories exist (and are not symlink loops)"
        ) from None
    if not stat.S_ISDIR(mode):
        raise InputError(
            f"{directory}: is not a directory\n    fix: choose another -o inside a directory"
        )
