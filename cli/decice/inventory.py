"""Machines + role rules -> an Ansible inventory (Kubespray groups + decice groups)."""

from __future__ import annotations

import hashlib
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from decice.allocation import Allocation, Machine
from decice.errors import InputError
from decice.spec_model import AllocationSpec

if TYPE_CHECKING:
    from decice.spec import LoadedSpec

GROUPS = ("kube_control_plane", "etcd", "kube_node", "decice_edge", "decice_hpc")
_ROLE_GROUP = {
    "control_plane": "kube_control_plane",
    "etcd": "etcd",
    "worker": "kube_node",
    "edge": "decice_edge",
    "hpc": "decice_hpc",
}


class Unsafe(str):
    """A string Ansible must take as data: written as ``!unsafe``, never templated.

    Whatever a user wrote (addresses, variables, ssh options) is wrapped in it before it
    enters an inventory. Every YAML safe dump writes it with the ``!unsafe`` tag (the
    representer is registered on PyYAML's SafeRepresenter), so it stays data in any
    inventory written from it - decice's, Kubespray's.
    """

    __slots__ = ()


def _represent_unsafe(dumper: yaml.representer.SafeRepresenter, data: Unsafe) -> yaml.Node:
    return dumper.represent_scalar("!unsafe", str(data))


yaml.representer.SafeRepresenter.add_representer(Unsafe, _represent_unsafe)
yaml.representer.Representer.add_representer(Unsafe, _represent_unsafe)


class _Loader(yaml.SafeLoader):
    """Reads an inventory decice wrote; ``!unsafe`` strings come back as Unsafe."""


def _construct_unsafe(loader: yaml.SafeLoader, node: yaml.Node) -> Unsafe:
    assert isinstance(node, yaml.ScalarNode)
    return Unsafe(loader.construct_scalar(node))


_Loader.add_constructor("!unsafe", _construct_unsafe)


def unsafe(value: Any) -> Any:
    """``value`` with every string in it (mapping keys too) marked Unsafe."""
    if isinstance(value, str):
        return value if isinstance(value, Unsafe) else Unsafe(value)
    if isinstance(value, dict):
        return {unsafe(k): unsafe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [unsafe(v) for v in value]
    return value


def allocate(loaded: LoadedSpec, *, create: bool = False) -> Allocation | None:
    """The machines of this spec's target (see decice.targets); None without real hosts."""
    from decice import targets

    return targets.get(loaded.spec.target).allocate(loaded, create=create)


def assign_roles(machines: tuple[Machine, ...], rules: AllocationSpec) -> dict[str, list[str]]:
    """Group -> host names. Explicit roles win; else the first K hosts are control plane."""
    names = [m.name for m in machines]
    unknown = [n for n in rules.edge if n not in names]
    if unknown:
        raise InputError(
            f"allocation.edge: {', '.join(unknown)} not among the allocated hosts\n"
            f"    fix: list only hosts of the allocation ({', '.join(names)})"
        )
    groups: dict[str, list[str]] = {g: [] for g in GROUPS}
    explicit = any(m.roles for m in machines)
    cluster = [
        m for m in machines if m.name not in rules.edge and m.name not in rules.hpc_endpoints
    ]
    if explicit:
        for machine in machines:
            for role in machine.roles:
                groups[_ROLE_GROUP[role]].append(machine.name)
    else:
        if len(cluster) < rules.control_plane:
            raise InputError(
                f"allocation.control_plane: {rules.control_plane} control-plane hosts wanted, "
                f"only {len(cluster)} cluster hosts available"
            )
        control = [m.name for m in cluster[: rules.control_plane]]
        groups["kube_control_plane"] = control
        groups["etcd"] = list(control)
        groups["kube_node"] = [m.name for m in cluster[rules.control_plane :]] or list(control)
    groups["decice_edge"] = sorted(set(groups["decice_edge"]) | set(rules.edge), key=names.index)
    groups["decice_hpc"] = list(dict.fromkeys(groups["decice_hpc"] + rules.hpc_endpoints))
    etcd = len(groups["etcd"])
    if etcd and etcd % 2 == 0:
        raise InputError(f"etcd needs an odd number of hosts; the roles give {etcd}")
    if (groups["kube_node"] or groups["decice_edge"]) and not groups["kube_control_plane"]:
        raise InputError(
            "no host has the control_plane role\n"
            "    fix: give one host roles: [control_plane, etcd]"
        )
    return groups


def _ssh_args(loaded: LoadedSpec) -> str:
    """ssh options from the spec: an ssh config (names that do not resolve) and a jump host.

    Ansible splits ``ansible_ssh_common_args`` like a shell would: each value is quoted,
    so a path or jump host is one argument whatever it contains (both are also checked
    in the spec model).
    """
    rules = loaded.spec.allocation
    args = []
    if rules.ssh_config:
        path = Path(rules.ssh_config).expanduser()
        if not path.is_absolute() and loaded.source is not None:
            path = loaded.source.parent / path
        if not path.is_file():
            raise InputError(
                f"allocation.ssh_config: {path} does not exist\n"
                "    fix: point it at an ssh config that maps the allocated names to addresses"
            )
        args += ["-F", str(path)]
    if rules.jump_host:
        args += ["-o", f"ProxyJump={rules.jump_host}"]
    return shlex.join(args)


def build(loaded: LoadedSpec, allocation: Allocation | None) -> dict[str, Any]:
    """The inventory as a YAML-ready dict."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    children: dict[str, Any] = {group: {"hosts": {}} for group in GROUPS}
    hostvars: dict[str, dict[str, Any]] = {"localhost": local}
    if allocation is not None:
        groups = assign_roles(allocation.machines, loaded.spec.allocation)
        for machine in allocation.machines:
            hv: dict[str, Any] = {
                key: unsafe(value)
                for key, value in {**loaded.spec.allocation.vars, **machine.vars}.items()
            }
            if machine.address:
                hv.setdefault("ansible_host", Unsafe(machine.address))
                hv.setdefault("ip", Unsafe(machine.address))
            if hv.get("ansible_connection") == "local":
                hv.setdefault("ansible_python_interpreter", sys.executable)
            hostvars[machine.name] = hv
        ssh_args = _ssh_args(loaded)
        if ssh_args:
            for name in (m.name for m in allocation.machines):
                hostvars[name].setdefault("ansible_ssh_common_args", Unsafe(ssh_args))
        for group in GROUPS:
            children[group] = {"hosts": dict.fromkeys(groups[group])}
    children["k8s_cluster"] = {"children": {"kube_control_plane": {}, "kube_node": {}}}
    return {"all": {"hosts": hostvars, "children": children}}


def write(inventory: dict[str, Any], path: Path) -> str:
    """Write the inventory YAML (0600; Unsafe values tagged ``!unsafe``); return its sha256."""
    text = yaml.safe_dump(inventory, sort_keys=False)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)
    return hashlib.sha256(text.encode()).hexdigest()


def read(path: Path) -> dict[str, Any]:
    """An inventory :func:`write` wrote, with its ``!unsafe`` values back as Unsafe."""
    data: dict[str, Any] = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
    return data


def host_roles(inventory: dict[str, Any]) -> dict[str, list[str]]:
    """Host -> groups it belongs to (for `decice plan`)."""
    out: dict[str, list[str]] = {}
    for group, body in inventory["all"]["children"].items():
        for host in body.get("hosts") or {}:
            out.setdefault(host, []).append(group)
    return out
