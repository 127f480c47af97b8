"""Kubespray: the pinned source, its own Python env, generated inventory/vars, the runs.

source.py   the checkout: explicit dir, cache, mirror or upstream archive (tree-sha256-pinned)
tree.py     checked extraction of its archive and the packing-independent tree sha256
venv.py     Kubespray's own Python env (its requirements pin an older Ansible)
render.py   decice inventory + spec -> Kubespray inventory and group_vars
run.py      the exact invocation, running it through ansible-runner, the kubeconfig, plan
edge.py     keep kube-proxy / CNI / nodelocaldns DaemonSets off KubeEdge edge nodes
phases.py   the `kubernetes` phase of `up` and `reset` for targets with real hosts
"""

from __future__ import annotations

from decice.kubespray.run import (
    Deployed,
    Invocation,
    Prepared,
    deploy,
    describe,
    install_kubeconfig,
    invocation,
    prepare,
    reset,
)

__all__ = [
    "Deployed",
    "Invocation",
    "Prepared",
    "deploy",
    "describe",
    "install_kubeconfig",
    "invocation",
    "prepare",
    "reset",
]
