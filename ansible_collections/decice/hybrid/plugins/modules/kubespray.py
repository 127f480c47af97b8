#!/usr/bin/python
"""Documentation of decice.hybrid.kubespray (an action plugin: plugins/action/kubespray.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: kubespray
short_description: Deploy or reset Kubernetes with the pinned Kubespray, as the decice CLI does
version_added: 0.1.0
author:
  - decice maintainers (!UNKNOWN)
description:
  - Runs Kubespray's C(cluster.yml) (O(state=present)) or C(reset.yml) (O(state=absent)) for
    the hosts of the play's inventory, through decice's own Kubespray code - the code the
    decice CLI's C(kubernetes) phase runs - so plain C(ansible-playbook), molecule and the
    CLI deploy the same cluster. See C(docs/kubespray.md) of decice.
  - "An action plugin: it runs on the controller, in the Python that runs ansible-playbook,
    which must be able to import decice (from a decice checkout: C(pip install .) into that
    Python's environment). Without it the task fails saying so."
  - The pinned Kubespray source (cache, O(mirror) or upstream, tree sha256 checked), its own
    Python env (cached), then the generated inventory and group_vars under
    C(<state_dir>/playbook-runs/<UTC stamp>-<pid>/kubespray/) (0700). Its C(hosts.yml) is
    redacted when the task ends (only how hosts are reached is kept).
  - "Hosts: those of the inventory groups C(kube_control_plane), C(etcd) (empty: the control
    plane), C(kube_node); hosts of C(decice_edge) are checked not to be cluster hosts. Their
    variables are what the inventory gives them (host and group variables, group_vars and
    host_vars files), templated as the play sees them; Ansible's magic variables, extra
    variables and facts are left out. Every value reaches Kubespray as data (C(!unsafe))."
  - "O(state=present) refuses, changing nothing, while a cluster host has no baseline in
    O(state_dir) (C(baseline/<host>.json), the C(baseline) play of C(decice.hybrid.up));
    after C(cluster.yml) it writes the cluster-admin kubeconfig to O(kubeconfig) (0600,
    server - the first control plane as the controller reaches it)."
  - O(state=absent) does nothing when the inventory has no Kubespray host, or when no earlier
    run (CLI or this action) started Kubespray for O(state_dir); after C(reset.yml) it removes
    O(kubeconfig), the API baseline and every copy of Kubespray's C(admin.conf) in the state
    directory.
  - A run that stops at a file download fails with the file that is not in the mirror, where
    it was wanted and how to add it (C(decice mirror sync)); every failure says how far
    Kubespray got (its last play and task).
  - In check mode nothing is fetched, built or run (Kubespray's roles are not check-mode
    safe); the message says what would run.
options:
  state:
    description: C(present) runs C(cluster.yml), C(absent) runs C(reset.yml) (HPC-safe settings).
    type: str
    choices: [present, absent]
    default: present
  state_dir:
    description:
      - Absolute path of decice's state directory on the controller (baselines, work
        directories).
    type: path
    required: true
  kubeconfig:
    description:
      - Absolute path of the cluster-admin kubeconfig on the controller (written by
        C(present), removed by C(absent)).
    type: path
    required: true
  version:
    description: Kubernetes version (C(kube_version)); default the pinned one.
    type: str
  kubespray_tag:
    description: Kubespray release tag; default the pinned one.
    type: str
  allow_untested_versions:
    description: Allow O(version) / O(kubespray_tag) other than the pinned ones.
    type: bool
    default: false
  cni:
    description: Network plugin.
    type: str
    choices: [calico, flannel, cilium]
    default: calico
  container_runtime:
    description: Container runtime.
    type: str
    choices: [containerd]
    default: containerd
  mirror:
    description:
      - Where the Kubespray source and its offline files come from, as C(mirror) of a
        C(decice.yaml) - a directory, a URL, or a mapping with C(path) or C(url),
        C(allow_insecure_http), C(registry). Empty - upstream.
    type: raw
  download_cache_dir:
    description:
      - Controller directory Kubespray downloads each file to once (relative to O(base_dir)).
    type: str
  target:
    description:
      - decice target of the hosts. C(lab) - podman containers sharing this machine's kernel
        (Kubespray leaves swap, kernel sysctls and modules alone, and the nodes' resolv.conf).
        Hosts whose variables say C(prepare_kernel_wide=false) share a kernel on any target.
    type: str
    default: static
  edge_exclusion:
    description: KubeEdge is on - keep kube-proxy, CNI and nodelocaldns pods off edge nodes.
    type: bool
    default: false
  base_dir:
    description:
      - Directory relative O(mirror) paths and O(download_cache_dir) resolve against;
        default the current directory.
    type: path
notes:
  - Supports check mode (reports, runs nothing).
"""

EXAMPLES = r"""
- name: Deploy Kubernetes with Kubespray
  decice.hybrid.kubespray:
    state: present
    state_dir: "{{ playbook_dir }}/.decice"
    kubeconfig: "{{ playbook_dir }}/.decice/kubeconfig"
    mirror: /srv/mirror
"""

RETURN = r"""
msg:
  description: What was done (versions, API server), what would run (check mode), or why it failed.
  returned: always
  type: str
playbook:
  description: The Kubespray playbook of O(state).
  returned: always
  type: str
notes:
  description:
    - Where the source and env came from, and how far Kubespray got (its last play and task).
  returned: always
  type: list
  elements: str
versions:
  description: The deployed C(kubespray) tag and C(kubernetes) version.
  returned: when state=present succeeded
  type: dict
run_dir:
  description: This run's work directory (Kubespray's inventory, ansible-runner's output).
  returned: when Kubespray ran
  type: str
"""
