"""Session fixtures for integration tests: podman lab nodes, a SLURM lab, the sim control plane.

Each fixture brings its lab up once per test session (names carry the pid, so
concurrent sessions do not collide) and destroys it at the end.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from decice import lab
from decice.errors import DeciceError
from decice.sim.binaries.resolve import BinarySet, resolve_binaries
from decice.sim.controlplane.loopback import ControlPlane, ControlPlaneInfo
from tests.integration.labsupport import lab_name, require_lab_prerequisites
from tests.integration.schedsupport import cleanup_pods
from tests.integration.simsupport import (
    AddonNodes,
    SchedEnv,
    addon_cluster,
    require_sim,
    running_control_plane,
)
from tests.support import require


@pytest.fixture(scope="session")
def lab_state_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """State root shared by the session's labs (kept short: munge sockets live below it)."""
    return tmp_path_factory.mktemp("labs")


@contextlib.contextmanager
def _lab(kind: str, nodes: int, slurm: bool, root: Path) -> Iterator[lab.LabInfo]:
    require_lab_prerequisites()
    name = lab_name(kind)
    info = lab.create(name, nodes, slurm, root)
    try:
        yield info
    finally:
        lab.destroy(name, root)


@pytest.fixture(scope="session")
def lab_nodes(lab_state_root: Path) -> Iterator[lab.LabInfo]:
    """Two plain systemd nodes reachable over SSH; see LabInfo for inventory/ssh config."""
    with _lab("n", 2, False, lab_state_root) as info:
        yield info


@pytest.fixture(scope="session")
def slurm_cluster(lab_state_root: Path) -> Iterator[lab.LabInfo]:
    """A three-node SLURM lab; the host is a submit host with ``info.slurm_env``."""
    with _lab("s", 3, True, lab_state_root) as info:
        yield info


# ---------------------------------------------------------------- sim fixtures


@pytest.fixture(scope="session")
def sim_binaries() -> BinarySet:
    """Control-plane binaries: explicit dir, cache, or the offline build (~4 min once)."""
    require_sim()
    try:
        return resolve_binaries()
    except DeciceError as exc:
        require(False, f"cannot get the sim control-plane binaries: {exc}")
        raise


@pytest.fixture(scope="session")
def sim_control_plane(
    sim_binaries: BinarySet, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlaneInfo]:
    """One running control plane for the session (controller-manager on, node-lifecycle
    off: Nodes created Ready stay Ready without heartbeats; no kube-scheduler)."""
    with running_control_plane(
        tmp_path_factory.mktemp("sim-cp"), sim_binaries, node_lifecycle=False
    ) as info:
        yield info


@pytest.fixture(scope="session")
def sched_control_plane(
    sim_binaries: BinarySet, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    """The scheduler tests' control plane, one per worker (their modules are one xdist
    group, tests/suite_groups.py): the stock kube-scheduler on (a second scheduler on the
    same nodes), node-lifecycle off. A module uses it through
    ``simsupport.running_env(..., shared=...)``: its own node groups, namespaces, agent
    and decice-scheduler, and it must leave nothing behind."""
    require("kube-scheduler" in sim_binaries, "kube-scheduler binary")
    cp = ControlPlane(
        tmp_path_factory.mktemp("sched-cp"), sim_binaries, scheduler=True, node_lifecycle=False
    )
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()


@pytest.fixture
def core(env: SchedEnv) -> Iterator[client.CoreV1Api]:
    """The API of a scheduler test module's ``env``; every pod of its namespaces is removed
    afterwards."""
    yield env.core
    cleanup_pods(env)


@pytest.fixture(scope="module")
def addon_nodes(
    sim_control_plane: ControlPlaneInfo,
    sim_binaries: BinarySet,
    tmp_path_factory: pytest.TempPathFactory,
) -> AddonNodes:
    """``addon_nodes(name, groups)``: :func:`simsupport.addon_cluster` on the session control
    plane with the sim's helm, node ``groups`` and a new temporary directory ``name``."""

    def cluster(
        name: str, groups: Sequence[Mapping[str, Any]]
    ) -> contextlib.AbstractContextManager[dict[str, Any]]:
        tmp = tmp_path_factory.mktemp(name)
        return addon_cluster(sim_control_plane, sim_binaries.path("helm"), tmp, groups)

    return cluster


@pytest.fixture(scope="session")
def sim_api(sim_control_plane: ControlPlaneInfo) -> client.ApiClient:
    """A kubernetes ApiClient (cluster-admin) for the session control plane."""
    return config.new_client_from_config(config_file=str(sim_control_plane.kubeconfig))
