"""Create, inspect and destroy a lab: N systemd node containers, optionally a SLURM cluster.

Everything a lab owns carries the podman label ``decice.lab=<name>`` and lives under
``<state_root>/lab/<name>/``; ``destroy`` removes exactly that and leaves nothing running.
Each node's SSH host key is made here and mounted into it, so the lab's ``known_hosts``
holds them from the start and SSH checks them strictly.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from decice.lab import munge, users
from decice.lab import nodes as node_ops
from decice.lab import slurm as slurm_ops
from decice.lab.errors import LabError
from decice.lab.image import ensure_image
from decice.lab.model import LabInfo, LabNode, load, save
from decice.lab.network import MAX_NODES, controller_ip, create_network, node_ip
from decice.lab.podman import Podman, write_containers_conf
from decice.lab.render import render_inventory, render_known_hosts, render_ssh_config
from decice.sim.procs import write_private

log = logging.getLogger("decice.lab")

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,29}\Z")
CONTROLLER = "slurmctl"
CONTAINERD_VOLUME = "/var/lib/containerd"  # overlay mounts inside a node need a volume
HOST_KEYS_DIR = "hostkeys"  # <node>/ssh_host_ed25519_key: made here, mounted into the node
UNSAFE_PATH_CHARS = ('"', "%", "\n")  # ssh_config cannot quote them


LABEL = "decice.lab"  # the lab's name
DIR_LABEL = "decice.lab.dir"  # its state dir: the same name under another state root is not ours


def _labels(name: str, directory: Path) -> list[str]:
    return [f"{LABEL}={name}", f"{DIR_LABEL}={directory}"]


def _owned(found: dict[str, dict[str, str]], directory: Path) -> tuple[list[str], list[str]]:
    """Split labelled objects into (ours, foreign) by their state-dir label."""
    ours = [n for n, labels in found.items() if labels.get(DIR_LABEL) == str(directory)]
    return ours, [n for n in found if n not in ours]


def state_dir(name: str, state_root: Path) -> Path:
    return Path(state_root).resolve() / "lab" / name


def _validate(name: str, count: int) -> None:
    if not NAME_RE.match(name):
        raise LabError(
            f"invalid lab name {name!r}: use 1-30 lower-case letters, digits and dashes, "
            "starting with a letter (e.g. 'lab1')"
        )
    if not 1 <= count <= MAX_NODES:
        raise LabError(f"invalid node count {count}: choose between 1 and {MAX_NODES}")


def _podman(directory: Path) -> Podman:
    return Podman(write_containers_conf(directory))


def _states(podman: Podman, info: LabInfo) -> dict[str, str | None]:
    return {c: podman.container_state(c) for c in info.containers()}


def status(name: str, state_root: Path) -> LabInfo | None:
    """The recorded lab with each container's current state, or None if there is none."""
    directory = state_dir(name, state_root)
    info = load(directory)
    if info is None:
        return None
    return info.with_states(_states(_podman(directory), info))


def _healthy(info: LabInfo) -> bool:
    if not info.known_hosts or not Path(info.known_hosts).is_file():
        return False  # made before decice kept the nodes' host keys: recreate it
    if not info.shared_dir or not Path(info.shared_dir).is_dir():
        return False  # made before labs had the decice user and /shared: recreate it
    containers = [*info.nodes, *([info.controller] if info.controller else [])]
    if not all(n.state == "running" for n in containers):
        return False
    if info.slurm_env is None:
        return True
    paths = slurm_ops.SlurmFiles(Path(info.state_dir) / "slurm").munge
    return info.munged_pid is not None and munge.is_running(info.munged_pid, paths.socket)


def create(name: str, nodes: int, slurm: bool, state_root: Path) -> LabInfo:
    """Bring up lab ``name`` (idempotent: a healthy lab of the same shape is returned as is)."""
    _validate(name, nodes)
    if os.geteuid() != 0:
        raise LabError(
            "lab nodes are privileged podman containers and need root; "
            "run the command as root (e.g. with sudo)"
        )
    current = status(name, state_root)
    if current is not None:
        same_shape = len(current.nodes) == nodes and current.slurm == slurm
        if same_shape and _healthy(current):
            log.info("lab %s is already up", name)
            return current
        if not same_shape:
            raise LabError(
                f"lab {name!r} exists with {len(current.nodes)} nodes "
                f"(slurm={'on' if current.slurm else 'off'}); "
                f"run `decice lab destroy {name}` first or pick another name"
            )
        log.warning(
            "lab %s is incomplete (%s); recreating it",
            name,
            ", ".join(f"{n.name}={n.state}" for n in current.nodes),
        )
    _refuse_foreign(name, state_dir(name, state_root))
    destroy(name, state_root)  # also clears leftovers of an interrupted create
    try:
        return _create(name, nodes, slurm, state_root)
    except BaseException:
        log.error("creating lab %s failed; removing what was made", name)
        destroy(name, state_root)
        raise


def _refuse_foreign(name: str, directory: Path) -> None:
    """Container and network names are global: refuse a name another state root uses."""
    with tempfile.TemporaryDirectory(prefix="decice-lab-") as scratch:
        podman = _podman(Path(scratch))
        found = podman.containers_labelled(LABEL, name)
        _, foreign = _owned(found, directory)
        if not foreign:
            found = podman.networks_labelled(LABEL, name)
            _, foreign = _owned(found, directory)
    if foreign:
        other = found[foreign[0]].get(DIR_LABEL, "an unknown state dir")
        raise LabError(
            f"lab name {name!r} is in use by the lab recorded in {other}; destroy it there "
            f"(`decice lab destroy {name}` with that state dir) or pick another name"
        )


def _create(name: str, count: int, slurm_enabled: bool, state_root: Path) -> LabInfo:
    directory = state_dir(name, state_root)
    if any(c in str(directory) for c in UNSAFE_PATH_CHARS):
        raise LabError(
            f"{directory}: the lab's state dir holds a character ssh_config cannot carry "
            f"({' '.join(repr(c) for c in UNSAFE_PATH_CHARS)}); use another state dir"
        )
    directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.mkdir(exist_ok=True)
    directory.chmod(0o755)
    podman = _podman(directory)
    image = ensure_image(podman)
    labels = _labels(name, directory)
    network = f"{name}-net"
    net = create_network(podman, network, name, labels)
    lab_nodes = [
        LabNode(f"node{i}", node_ip(net, i), f"{name}-node{i}") for i in range(1, count + 1)
    ]
    controller = (
        LabNode(CONTROLLER, controller_ip(net), f"{name}-{CONTROLLER}") if slurm_enabled else None
    )
    everyone = [*lab_nodes, *([controller] if controller else [])]

    key = directory / "id_ed25519"
    node_ops.make_ssh_key(key, f"decice-lab-{name}")
    host_keys = directory / HOST_KEYS_DIR
    known_hosts = directory / "known_hosts"
    write_private(
        known_hosts,
        render_known_hosts([(n, node_ops.make_host_key(host_keys, n)) for n in everyone]),
    )
    inventory = directory / "inventory.yml"
    write_private(inventory, render_inventory(lab_nodes, key, known_hosts))
    ssh_config = directory / "ssh_config"
    write_private(ssh_config, render_ssh_config(everyone, key, known_hosts))

    files = slurm_ops.SlurmFiles(directory / "slurm") if controller else None
    shared = users.make_shared_dir(directory)
    info = LabInfo(
        name=name,
        nodes=lab_nodes,
        network=network,
        subnet=str(net),
        image=image.ref,
        state_dir=str(directory),
        inventory=str(inventory),
        ssh_config=str(ssh_config),
        ssh_key=str(key),
        known_hosts=str(known_hosts),
        controller=controller,
        slurm_env=files.env() if files else None,
        slurm_env_file=str(files.env_file) if files else None,
        user=users.USER,
        shared_dir=str(shared),
        shared_mount=users.SHARED_MOUNT,
    )
    save(info, directory)  # recorded before anything runs, so destroy finds it all

    mounts: list[str] = [users.shared_mount(directory)]
    # (container, volumes, systemd arguments): the SLURM controller first, then the nodes
    starts: list[tuple[LabNode, list[str], list[str]]] = []
    if files and controller:
        slurm_ops.write_files(files, name, controller, lab_nodes, image.munge_uid, image.munge_gid)
        mounts += files.mounts()
        starts.append((controller, [], ["systemd.setenv=SLURM_ROLE=controller"]))
    compute = ["systemd.setenv=SLURM_ROLE=compute"] if files else []
    starts.extend((node, [CONTAINERD_VOLUME], compute) for node in lab_nodes)
    for node, volumes, init_args in starts:
        node_ops.start_container(
            podman,
            node,
            image=image.ref,
            network=network,
            labels=labels,
            hosts=everyone,
            mounts=[*mounts, *node_ops.host_key_mounts(host_keys, node)],
            volumes=volumes,
            init_args=init_args,
        )
    public = key.with_suffix(".pub").read_text()
    for node in everyone:
        node_ops.install_authorized_key(podman, node.container, public)
        users.add_user(podman, node.container, public)
    node_ops.wait_all(podman, ssh_config, everyone)

    if files:
        pid = munge.start_host_munged(files.munge)
        info = replace(info, munged_pid=pid)
        save(info, directory)
        slurm_ops.wait_idle(files, count)
    log.info("lab %s is up: %s", name, ", ".join(f"{n.name}={n.ip}" for n in everyone))
    return info.with_states(_states(podman, info))


def destroy(name: str, state_root: Path) -> bool:
    """Remove the lab's containers, network, host munged and state dir; True if any existed."""
    _validate(name, 1)
    directory = state_dir(name, state_root)
    info = load(directory)
    found = info is not None or directory.exists()
    munge_paths = slurm_ops.SlurmFiles(directory / "slurm").munge
    munge.stop_host_munged(munge_paths, info.munged_pid if info else None)

    with tempfile.TemporaryDirectory(prefix="decice-lab-") as scratch:
        podman = _podman(Path(scratch))
        containers, _ = _owned(podman.containers_labelled(LABEL, name), directory)
        if containers:
            found = True
            podman("rm", "-f", "-v", "-t", "5", *containers)
        networks, _ = _owned(podman.networks_labelled(LABEL, name), directory)
        if networks:
            found = True
            podman("network", "rm", "-f", *networks)
    if directory.exists():
        shutil.rmtree(directory)
    if found:
        log.info("lab %s destroyed", name)
    return found
