"""Machines + role rules -> an Ansible inventory (Kubespray groups + decice groups)."""

from __future__ import annotations

import hashlib
import re
import shlex
import sys
from dataclasses import dataclass
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
    from decice.targets import registry

    return registry.get(loaded.spec.target).allocate(loaded, create=create)


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


@dataclass(frozen=True)
class SshTrust:
    """How this run's ssh reaches the hosts and trusts their keys, read from the spec once
    (:func:`ssh_trust`) and handed to everything that needs it: the inventory's ssh
    options, and the host keys accept-new records during the run."""

    ssh_config: Path | None  # allocation.ssh_config, resolved against the spec's folder
    jump_host: str | None
    #: the trust options (:func:`trust_options`)
    options: tuple[str, ...]
    #: option names allocation.ssh_config sets itself (not overridden)
    configured: frozenset[str]
    #: where accept-new records new keys (the state dir's known_hosts)
    known_hosts: Path
    accept_new: bool

    def common_args(self) -> str:
        """ssh options from the spec: an ssh config (names that do not resolve) and a jump
        host. Ansible splits ``ansible_ssh_common_args`` like a shell would: each value is
        quoted, so a path or jump host is one argument whatever it contains (both are also
        checked in the spec model)."""
        args = []
        if self.ssh_config is not None:
            if not self.ssh_config.is_file():
                raise InputError(
                    f"allocation.ssh_config: {self.ssh_config} does not exist\n"
                    "    fix: point it at an ssh config that maps the allocated names to "
                    "addresses"
                )
            args += ["-F", str(self.ssh_config)]
        if self.jump_host:
            args += ["-o", f"ProxyJump={self.jump_host}"]
        return shlex.join(args)

    def host_args(self, given: str) -> str:
        """A host's ``ansible_ssh_common_args``: ``given`` (its own, or :meth:`common_args`)
        plus each trust option neither it nor the ssh config sets."""
        return _with_trust(given, list(self.options), self.configured)

    def key_count(self) -> int:
        """Lines of the state dir's known_hosts now (see :meth:`notes`); with accept-new
        the file is created 0600 first, so ssh appends to a private file."""
        path = self.known_hosts
        if self.accept_new and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            path.touch(mode=0o600)
        return len(path.read_text(encoding="utf-8").splitlines()) if path.is_file() else 0

    def notes(self, before: int) -> list[str]:
        """The run record's notes on host keys: with accept-new, which were recorded."""
        if not self.accept_new:
            return []
        path = self.known_hosts
        lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
        new = [line.split()[0] for line in lines[before:] if line.strip() and " " in line]
        hosts = sorted(set(new))
        recorded = (
            f"recorded {len(new)} new host key(s) of {', '.join(hosts)}" if new else "no new key"
        )
        return [f"allocation.host_keys: accept-new - {recorded} in {path} (trusted from now on)"]


def ssh_trust(loaded: LoadedSpec) -> SshTrust:
    """This spec's :class:`SshTrust` (reads the ssh config once, if there is one)."""
    path = _ssh_config_path(loaded)
    return SshTrust(
        ssh_config=path,
        jump_host=loaded.spec.allocation.jump_host,
        options=tuple(trust_options(loaded)),
        configured=frozenset(_configured_options(path)),
        known_hosts=known_hosts_files(loaded)[0],
        accept_new=loaded.spec.allocation.host_keys == "accept-new",
    )


def _ssh_config_path(loaded: LoadedSpec) -> Path | None:
    value = loaded.spec.allocation.ssh_config
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_absolute() and loaded.source is not None:
        path = loaded.source.parent / path
    return path


# ---------------------------------------------------------------- ssh host keys

KNOWN_HOSTS = "known_hosts"  # <state_dir>/known_hosts: keys decice recorded (accept-new)


def known_hosts_files(loaded: LoadedSpec) -> list[Path]:
    """The files ssh checks host keys against: the state dir's (first: where accept-new
    writes), then the user's ``~/.ssh/known_hosts``."""
    return [loaded.state_dir.resolve() / KNOWN_HOSTS, Path.home() / ".ssh" / "known_hosts"]


def _ssh_path(path: Path) -> str:
    text = str(path)
    if '"' in text or any(ord(ch) < 32 for ch in text):
        raise InputError(
            f"{text}: ssh cannot take this path for known hosts (a quote or control character)\n"
            "    fix: keep the spec (and its .decice state dir) in a directory without quotes"
        )
    return f'"{text}"' if any(ch.isspace() for ch in text) else text


def trust_options(loaded: LoadedSpec) -> list[str]:
    """ssh options that make host-key trust explicit and never prompt.

    UserKnownHostsFile = the state dir's known_hosts + ~/.ssh/known_hosts,
    StrictHostKeyChecking = yes (``allocation.host_keys: strict``) or accept-new (a new
    host's key is recorded, unhashed so the run record can name it, in the state dir's
    file), BatchMode=yes (no password or passphrase prompt either).
    """
    files = " ".join(_ssh_path(p) for p in known_hosts_files(loaded))
    options = [f"UserKnownHostsFile={files}"]
    if loaded.spec.allocation.host_keys == "accept-new":
        options += ["StrictHostKeyChecking=accept-new", "HashKnownHosts=no"]
    else:
        options += ["StrictHostKeyChecking=yes"]
    options += ["BatchMode=yes"]
    return [arg for option in options for arg in ("-o", option)]


def _option_name(word: str) -> str:
    """``StrictHostKeyChecking`` of ``-oStrictHostKeyChecking=yes`` / ``...Checking yes``."""
    word = word[2:] if word.startswith("-o") else word
    return re.split(r"[=\s]", word.strip(), maxsplit=1)[0].lower()


def _configured_options(path: Path | None) -> set[str]:
    """Option names (lower case) that ``allocation.ssh_config`` (``path``) sets anywhere: the
    user's own trust settings there (a lab's known_hosts, a site's) are not overridden."""
    if path is None or not path.is_file():
        return set()
    names = set()
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        words = line.strip().replace("=", " ", 1).split()
        if words and not words[0].startswith("#"):
            names.add(words[0].lower())
    return names


def _with_trust(
    existing: str, trust: list[str], configured: frozenset[str] | set[str] = frozenset()
) -> str:
    """``existing`` ssh args plus each trust option it does not set itself (ssh takes the
    first value of an option, so a host's own setting - a lab's known_hosts - stays)."""
    words = shlex.split(existing)
    have = {_option_name(w) for w in words} | set(configured)
    extra: list[str] = []
    for flag, option in zip(trust[::2], trust[1::2], strict=True):
        if option.split("=", 1)[0].lower() not in have:
            extra += [flag, option]
    return shlex.join([*words, *extra])


# ---------------------------------------------------------------- the inventory


def check_kubespray_names(loaded: LoadedSpec, groups: dict[str, list[str]]) -> None:
    """Refuse (exit 2) cluster host names Kubespray's "Stop if bad hostname" rejects."""
    from decice.allocation import checks

    names = dict.fromkeys(h for g in ("kube_control_plane", "etcd", "kube_node") for h in groups[g])
    bad = [name for name in names if checks.kubespray_host_name_problem(name)]
    if not bad:
        return
    from decice import spec as specs
    from decice import yamlpos

    spec_hosts = [h.name for h in loaded.spec.hosts]
    issues = []
    for name in bad:
        problem = checks.kubespray_host_name_problem(name) or ""
        if name in spec_hosts and loaded.source is not None:
            path = ("hosts", spec_hosts.index(name), "name")
            pos = yamlpos.load(loaded.text).locate(path)
            issues.append(
                specs.SpecIssue(
                    loaded.label,
                    pos.line,
                    pos.column,
                    f"hosts[{path[1]}].name",
                    f"{checks.shown(name)}: {problem}",
                    checks.KUBESPRAY_HOSTNAME_FIX,
                )
            )
        else:
            raise InputError(
                f"host {checks.shown(name)} (allocation {loaded.spec.target}): {problem}\n"
                f"    fix: {checks.KUBESPRAY_HOSTNAME_FIX}"
            )
    raise specs.SpecError(issues)


def build(
    loaded: LoadedSpec, allocation: Allocation | None, trust: SshTrust | None = None
) -> dict[str, Any]:
    """The inventory as a YAML-ready dict; ``trust`` is the run's :func:`ssh_trust` (read
    from the spec when not given)."""
    trust = trust if trust is not None else ssh_trust(loaded)
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    children: dict[str, Any] = {group: {"hosts": {}} for group in GROUPS}
    hostvars: dict[str, dict[str, Any]] = {"localhost": local}
    if allocation is not None:
        from decice.targets import registry

        groups = assign_roles(allocation.machines, loaded.spec.allocation)
        if registry.get(loaded.spec.target).uses_kubespray:
            check_kubespray_names(loaded, groups)
        for machine in allocation.machines:
            hv: dict[str, Any] = {
                key: unsafe(value)
                for key, value in {**loaded.spec.allocation.vars, **machine.vars}.items()
            }
            if machine.address:
                hv.setdefault("ansible_host", Unsafe(machine.address))
            if machine.ip:
                hv.setdefault("ip", Unsafe(machine.ip))
            if hv.get("ansible_connection") == "local":
                hv.setdefault("ansible_python_interpreter", sys.executable)
            hostvars[machine.name] = hv
        common = trust.common_args()  # once: it checks the ssh config is there
        for name in (m.name for m in allocation.machines):
            hv = hostvars[name]
            if hv.get("ansible_connection") in {"local", "podman", "docker"}:
                continue
            own = str(hv.get("ansible_ssh_common_args", common))
            hv["ansible_ssh_common_args"] = Unsafe(trust.host_args(own))
        for group in GROUPS:
            children[group] = {"hosts": dict.fromkeys(groups[group])}
    _add_login_hosts(loaded, trust, hostvars, children)
    children["k8s_cluster"] = {"children": {"kube_control_plane": {}, "kube_node": {}}}
    return {"all": {"hosts": hostvars, "children": children}}


INTERLINK_GROUP = "decice_interlink"


def _add_login_hosts(
    loaded: LoadedSpec,
    trust: SshTrust,
    hostvars: dict[str, dict[str, Any]],
    children: dict[str, Any],
) -> None:
    """The login hosts of ``addons.interlink.endpoints`` that no allocation gave (on sim:
    all of them) as hosts of their own group, reached with ``allocation``'s ssh options.

    The interlink role reaches them by delegation as the endpoint's user, never as root;
    they are in no group that preflight, baseline or prepare act on (those need root).
    """
    interlink = loaded.spec.addons.interlink
    names = [] if not interlink.enabled else [e.login_host for e in interlink.endpoints]
    extra = [name for name in dict.fromkeys(names) if name not in hostvars]
    children[INTERLINK_GROUP] = {"hosts": dict.fromkeys(extra)}
    if not extra:
        return
    args = trust.host_args(trust.common_args())
    for name in extra:
        hostvars[name] = {"ansible_ssh_common_args": Unsafe(args)}


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


# characters of Ansible's host patterns beyond a plain union of names (wildcards, regexes,
# negation, intersection, slices): a pattern with one is not resolved here
_PATTERN_SPECIAL = frozenset("*?!&[]~")


def pattern_hosts(inventory: dict[str, Any], pattern: str) -> set[str] | None:
    """The hosts of ``inventory`` that a play's ``hosts: pattern`` matches, for a plain
    union of group and host names (``k8s_cluster:decice_edge``, ``localhost``); None for
    any other pattern, which only Ansible can resolve. A group is every definition of that
    name in the tree (a child listed as ``{}`` names a group defined elsewhere) with its
    children's hosts; ``localhost`` always matches (Ansible's implicit localhost)."""
    names = [part.strip() for part in pattern.replace(",", ":").split(":")]
    if not all(names) or any(ch in _PATTERN_SPECIAL for name in names for ch in name):
        return None
    groups: dict[str, tuple[set[str], set[str]]] = {}

    def walk(name: str, body: Any) -> None:
        hosts, children = groups.setdefault(name, (set(), set()))
        body = body if isinstance(body, dict) else {}
        hosts.update(body.get("hosts") or {})
        for child, child_body in (body.get("children") or {}).items():
            children.add(child)
            walk(child, child_body)

    walk("all", inventory.get("all"))

    def members(name: str, seen: frozenset[str]) -> set[str]:
        hosts, children = groups[name]
        out = set(hosts)
        for child in children - seen:
            out |= members(child, seen | {child})
        return out

    every = members("all", frozenset({"all"}))
    matched: set[str] = set()
    for name in names:
        if name in groups:
            matched |= members(name, frozenset({name}))
        elif name in every or name in {"localhost", "127.0.0.1"}:
            matched.add(name)
    return matched
