"""Commented starter specs for `decice init --target X`."""

from __future__ import annotations

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
  interlink: {enabled: true}
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
