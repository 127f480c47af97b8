"""Action plugin decice.hybrid.kubespray: Kubespray's cluster.yml / reset.yml for the play's hosts.

Runs on the controller through decice's own Kubespray code, the code the decice CLI's
``kubernetes`` phase runs, reached through decice's stable entry point for the collection
(``decice.hybrid_api``, contract :data:`DECICE_API`): the same pinned source, its own
Python env, the same generated inventory and group_vars, the same "not in the mirror"
explanation when a run stops at a file download. Documentation: ``modules/kubespray.py``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ansible import constants as C
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import load_extra_vars

display = Display()

# The inventory groups the decice inventory (and so Kubespray's) is built from.
GROUPS = ("kube_control_plane", "etcd", "kube_node", "decice_edge")
CLUSTER_GROUPS = ("kube_control_plane", "etcd", "kube_node")
STATES = ("present", "absent")
# magic variables Ansible adds to every host's view beyond C.INTERNAL_STATIC_VARS
MAGIC = frozenset(
    {"omit", "ansible_check_mode", "ansible_search_path", "ansible_local", "environment", "vars"}
)
ARGS = frozenset(
    {
        "state",
        "state_dir",
        "kubeconfig",
        "version",
        "kubespray_tag",
        "allow_untested_versions",
        "cni",
        "container_runtime",
        "mirror",
        "download_cache_dir",
        "target",
        "edge_exclusion",
        "base_dir",
    }
)
# the contract of decice.hybrid_api this plugin is written for
DECICE_API = 1
NO_DECICE = (
    "decice.hybrid.kubespray runs decice's Kubespray code on the controller, and the Python "
    "that runs ansible-playbook ({python}) cannot import it: {error}\n"
    "    fix: install decice next to Ansible - from a decice checkout, `{python} -m pip install .` "
    "(or run the play through the decice CLI)"
)


class ArgumentError(ValueError):
    """A bad task argument: the message names the argument and the fix."""


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in {"true", "yes", "on", "1"}:
        return True
    if text in {"false", "no", "off", "0", ""}:
        return False
    raise ArgumentError(f"{name}: {value!r} is not a boolean\n    fix: use true or false")


def _text(name: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ArgumentError(f"{name}: {value!r} is not a string")
    return value


def _mirror(value: Any) -> dict[str, Any] | None:
    """``mirror``: none/empty, a directory, an http(s)/file URL, or the spec's mapping."""
    if value is None or value == "" or value == {}:
        return None
    if isinstance(value, str):
        return {"url": value} if "://" in value else {"path": value}
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items() if v is not None}
    raise ArgumentError(
        f"mirror: {value!r} is neither a path, a URL nor a mapping\n"
        "    fix: give the mirror directory, its URL, or {path|url: ..., registry: ...}"
    )


def parse_args(args: Mapping[str, Any], cwd: Path) -> dict[str, Any]:
    """The task's arguments, checked: ``ArgumentError`` names the argument and the fix."""
    unknown = sorted(set(args) - ARGS)
    if unknown:
        raise ArgumentError(
            f"unsupported argument(s) {', '.join(unknown)}\n"
            f"    fix: use only {', '.join(sorted(ARGS))}"
        )
    state = args.get("state", "present")
    if state not in STATES:
        raise ArgumentError(f"state: {state!r} is not one of {', '.join(STATES)}")
    out: dict[str, Any] = {"state": state}
    for name in ("state_dir", "kubeconfig"):
        value = _text(name, args.get(name))
        if value is None:
            raise ArgumentError(
                f"{name}: required\n    fix: give the absolute path on the controller"
            )
        out[name] = Path(value).expanduser()
        if not out[name].is_absolute():
            raise ArgumentError(f"{name}: {value!r} is not an absolute path")
    base = _text("base_dir", args.get("base_dir"))
    out["base_dir"] = Path(base).expanduser() if base else cwd
    out["kubernetes"] = {
        key: _text(key, args.get(key))
        for key in ("version", "kubespray_tag", "cni", "container_runtime", "download_cache_dir")
        if _text(key, args.get(key)) is not None
    }
    out["allow_untested_versions"] = _bool(
        "allow_untested_versions", args.get("allow_untested_versions", False)
    )
    out["mirror"] = _mirror(args.get("mirror"))
    out["target"] = _text("target", args.get("target")) or "static"
    out["edge_exclusion"] = _bool("edge_exclusion", args.get("edge_exclusion", False))
    return out


def untested(kubernetes: Mapping[str, Any], pinned: Mapping[str, Any]) -> list[str]:
    """The version arguments that differ from the pins (allowed only explicitly)."""
    wanted = {
        "version": str(pinned["kubernetes"]["kube_version"]).lstrip("v"),
        "kubespray_tag": "v" + str(pinned["kubespray"]["version"]).lstrip("v"),
    }
    out = []
    for key, pin in wanted.items():
        value = kubernetes.get(key)
        if value is None:
            continue
        given = value.lstrip("v") if key == "version" else "v" + value.lstrip("v")
        if given != pin:
            out.append(f"{key} {value} (pinned: {pin})")
    return out


def _plain(value: Any) -> Any:
    """A templated value as plain JSON data (Ansible's own str/dict/list subclasses off)."""
    return json.loads(json.dumps(value, default=str))


def inventory_names(hostvars: Any, name: str, playbook_dir: str | None) -> set[str] | None:
    """The names of the variables the inventory gives host ``name``: its own and its groups'
    (inventory sources), and those of group_vars/host_vars files (vars plugins, next to the
    inventory or the playbook). Not what the run added (set_fact, register, include_vars).
    None when ``hostvars`` is not Ansible's (then every variable of the view counts)."""
    inventory = getattr(hostvars, "_inventory", None)  # HostVars has no public accessor
    loader = getattr(hostvars, "_loader", None)
    if inventory is None:
        return None
    host = inventory.get_host(name)
    if host is None:
        return None
    from ansible.vars.plugins import get_vars_from_inventory_sources, get_vars_from_path

    entities = [*host.get_groups(), host]
    names = set(host.get_vars())
    for group in host.get_groups():
        names |= set(group.get_vars())
    for stage in ("inventory", "task"):
        names |= set(get_vars_from_inventory_sources(loader, inventory._sources, entities, stage))
        if playbook_dir:
            names |= set(get_vars_from_path(loader, playbook_dir, entities, stage))
    return names


def inventory_of(
    groups: Mapping[str, Any],
    hostvars: Mapping[str, Any],
    hidden: frozenset[str] | set[str],
    playbook_dir: str | None = None,
) -> dict[str, Any]:
    """A decice inventory (``{"all": {"hosts", "children"}}``) from the play's view.

    Hosts: those of the Kubespray groups and ``decice_edge``. Their variables: what the
    inventory gives them (host, group and group_vars/host_vars files), templated as the
    play sees them; Ansible's magic variables, extra variables, facts and ``hidden`` are
    left out. Every string is data for Kubespray (written ``!unsafe``).
    """
    from decice import hybrid_api

    # plain str: Ansible 2.19 hands out tagged str subclasses that YAML cannot represent
    members = {group: [str(h) for h in groups.get(group) or []] for group in GROUPS}
    hosts: dict[str, Any] = {}
    for name in dict.fromkeys(h for g in CLUSTER_GROUPS for h in members[g]):
        view = hostvars[name]
        facts = (view.get("ansible_facts") if "ansible_facts" in view else None) or {}
        skip = set(hidden) | set(C.INTERNAL_STATIC_VARS) | MAGIC
        skip |= set(facts) | {f"ansible_{key}" for key in facts}
        given = inventory_names(hostvars, name, playbook_dir)
        values: dict[str, Any] = {}
        for key in view:
            if key in skip or key.startswith("ansible_play_"):
                continue
            if given is not None and key not in given:
                continue
            try:
                values[key] = _plain(view[key])
            except Exception as exc:  # a template of the inventory that does not resolve
                raise ArgumentError(
                    f"host {name}: variable {key} does not resolve: {exc}\n"
                    "    fix: define what it refers to (e.g. with -e) or remove it"
                ) from None
        hosts[name] = hybrid_api.data(values)
    children: dict[str, Any] = {group: {"hosts": dict.fromkeys(members[group])} for group in GROUPS}
    children["k8s_cluster"] = {"children": {"kube_control_plane": {}, "kube_node": {}}}
    return {"all": {"hosts": hosts, "children": children}}


def take_target(inventory: Mapping[str, Any], target: str) -> None:
    """Check the hosts' ``decice_target`` (what ``decice lab`` writes into its inventory)
    against the task's target, and take it out of their variables (it is not Kubespray's).
    A host that says another target stops the task before Kubespray touches anything:
    e.g. lab nodes (podman containers) reset as static hosts fail in Kubespray's reset
    after changing them (/etc/resolv.conf is a bind mount there)."""
    for name, values in inventory["all"]["hosts"].items():
        said = values.pop("decice_target", None)
        if said is not None and str(said) != target:
            raise ArgumentError(
                f"target {target}, but the inventory says host {name} is decice_target "
                f"{said}\n    fix: leave kubernetes_target to its default (it reads "
                f"decice_target), or pass -e kubernetes_target={said}"
            )


def cluster_of(parsed: Mapping[str, Any]) -> Any:
    """decice's Kubespray cluster from parsed arguments (checked exactly as in a
    ``decice.yaml``)."""
    from decice import hybrid_api

    try:
        return hybrid_api.kubespray_cluster(
            parsed["kubernetes"],
            parsed["mirror"],
            target=parsed["target"],
            edge_exclusion=parsed["edge_exclusion"],
            base=parsed["base_dir"],
        )
    except ValueError as exc:
        raise ArgumentError(str(exc)) from None


def execute(
    parsed: Mapping[str, Any],
    cluster: Any,
    inventory: dict[str, Any],
    *,
    check: bool,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """Do what the task says with decice's Kubespray code; the task's result."""
    from decice import hybrid_api

    return hybrid_api.kubespray(
        parsed["state"],
        cluster,
        inventory,
        state_dir=parsed["state_dir"],
        kubeconfig=parsed["kubeconfig"],
        check=check,
        progress=progress,
    )


class ActionModule(ActionBase):
    """See ``modules/kubespray.py``."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        try:
            from decice import hybrid_api
        except ImportError as exc:
            return {
                **result,
                "failed": True,
                "msg": NO_DECICE.format(python=sys.executable, error=exc),
            }
        try:
            hybrid_api.require(DECICE_API, "decice.hybrid.kubespray")
            parsed = parse_args(self._task.args, Path.cwd())
            ahead = untested(parsed["kubernetes"], hybrid_api.pinned_versions())
            if ahead and not parsed["allow_untested_versions"]:
                raise ArgumentError(
                    f"{'; '.join(ahead)}: not the tested versions\n"
                    "    fix: leave them to their defaults, or set allow_untested_versions: true"
                )
            cluster = cluster_of(parsed)
            hidden = set(load_extra_vars(self._loader))
            inventory = inventory_of(
                task_vars.get("groups") or {},
                task_vars["hostvars"],
                hidden,
                task_vars.get("playbook_dir"),
            )
            take_target(inventory, parsed["target"])
        except ValueError as exc:  # ArgumentError, or decice's API refusing a field
            return {**result, "failed": True, "msg": f"decice.hybrid.kubespray: {exc}"}

        def progress(text: str) -> None:
            display.v(text)

        check = bool(self._play_context.check_mode)
        outcome = execute(parsed, cluster, inventory, check=check, progress=progress)
        return {**result, **outcome}
