"""Action plugin decice.hybrid.restore_host: a host's restore in one task.

Sets the host fact ``decice_restore``. Documentation: ``modules/restore_host.py``.

Reads the host's prepare record and baseline on the controller, then runs on the host only
the modules the steps need, in the order the steps must go:

1. undo (a record): ``host_observe`` reads what the record names now, filter
   ``restore_undo`` works out what is still to undo, ``host_restore`` does it;
2. leftovers (a baseline): a snapshot (``host_snapshot``'s code, with the baseline's own
   settings), filter ``snapshot_leftovers``, ``host_restore`` for the units and mounts, then,
   unless firewall work comes first, ``host_restore`` for the interfaces, paths, sysctls,
   modules, users and groups (filter ``restore_removals``).

What rarely has work (the system undo: fstab, swap, replaced files, packages, hostname,
SELinux; the firewall; packages) stays in the role's task files: the fact says which of them
this host needs (``rare``), so a host without any costs no task for them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ansible_collections.decice.hybrid.plugins.action.host_snapshot import (
    Execute,
    HostAction,
    Result,
    take_snapshot,
)
from ansible_collections.decice.hybrid.plugins.filter.restore import (
    restore_removals,
    restore_undo,
)
from ansible_collections.decice.hybrid.plugins.filter.snapshot import snapshot_leftovers

_FLAG = {"type": "bool", "default": True}
#: the options (documented in modules/restore_host.py)
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "state_dir": {"type": "str", "required": True},
    "keep_record": {"type": "bool", "default": False},
    "cluster_leftovers": _FLAG,
    "swap_on": _FLAG,
    "unload_modules": _FLAG,
    "remove_packages": _FLAG,
    "hostname": _FLAG,
    "selinux": _FLAG,
    "kernel_wide": _FLAG,
    "leftover_packages": _FLAG,
    "rules": {"type": "dict", "default": {}},
    "snapshot": {"type": "dict", "default": {}},
}
SCHEMA = 1
MASKED = ("masked", "masked-runtime")
_UNDO_KINDS = ("paths", "modules")


def _read(path: str) -> tuple[Any, str]:
    """A JSON document on the controller: ``(value, "")``, ``(None, "")`` when there is no
    file, or ``(None, error)``."""
    if not Path(path).is_file():
        return None, ""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8")), ""
    except (OSError, ValueError) as err:
        return None, f"restore: cannot read {path}: {err}; move it away to start afresh"


def _now(observed: dict[str, Any]) -> dict[str, Any]:
    """What undo_system.yml compares the record with: swap areas on, hostname, swap.target,
    SELinux mode, from the ``host_observe`` result."""
    files = observed.get("files") or {}
    commands = observed.get("commands") or []
    etc = files.get("/etc/hostname")
    return {
        "swaps": [
            line.split()[0]
            for line in (files.get("/proc/swaps") or "").splitlines()[1:]
            if line.split()
        ],
        "hostname": {
            "kernel": (files.get("/proc/sys/kernel/hostname") or "").strip(),
            "etc": etc.strip() if etc is not None else None,
        },
        "swap_target": (commands[0].get("stdout") or "").strip() if commands else "",
        "selinux": (commands[1].get("stdout") or "").strip() if len(commands) > 1 else "",
    }


def needs_system_undo(record: dict[str, Any], now: dict[str, Any], args: dict[str, Any]) -> bool:
    """Whether undo_system.yml has work: fstab lines, swap areas, swap.target, replaced
    files, packages, hostname or SELinux."""
    hostname = record.get("hostname") or {}
    kernel = hostname.get("kernel") or ""
    return bool(
        record.get("fstab_commented")
        or (
            args["swap_on"]
            and any(a.get("path") not in now["swaps"] for a in record.get("swap_active") or [])
        )
        or (
            record.get("swap_target", "unknown") not in (*MASKED, "unknown")
            and now["swap_target"] in MASKED
        )
        or record.get("files_replaced")
        or (args["remove_packages"] and record.get("packages_installed"))
        or (
            args["hostname"]
            and kernel
            and (
                kernel != now["hostname"]["kernel"]
                or (hostname.get("etc") is not None and hostname["etc"] != now["hostname"]["etc"])
            )
        )
        or (args["selinux"] and record.get("selinux") is not None)
    )


def _undo(execute: Execute, record: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """Step 1: read, work out what is left to undo, undo it (one module run each)."""
    commands = [["systemctl", "is-enabled", "swap.target"]]
    if args["selinux"] and record.get("selinux") is not None:
        commands.append(["getenforce"])
    observed = execute(
        "decice.hybrid.host_observe",
        {
            "files": ["/proc/swaps", "/etc/hostname", "/proc/sys/kernel/hostname"],
            "sysctls": list(record.get("sysctls") or {}),
            "paths": list(record.get("files_created") or [])
            + [f"/sys/module/{name}" for name in record.get("modules_loaded") or []],
            "commands": commands,
        },
    )
    if observed.get("failed"):
        return {"failed": observed}
    now = _now(observed)
    undo = restore_undo(record, observed, args["unload_modules"])
    undone: dict[str, Any] = {}
    if any(undo[kind] for kind in _UNDO_KINDS) or undo["sysctls"]:
        undone = execute("decice.hybrid.host_restore", undo)
        if undone.get("failed"):
            return {"failed": undone}
    return {"now": now, "undone": undone, "system": needs_system_undo(record, now, args)}


def _leftovers(
    execute: Execute, baseline: dict[str, Any], record: dict[str, Any] | None, args: dict[str, Any]
) -> dict[str, Any]:
    """Step 2: snapshot, work out the leftovers, remove units and mounts, then the rest
    unless the firewall goes first. The packages prepare installed are not a cluster's: with
    ``remove_packages`` the system undo (after this action) removes them."""
    config = baseline.get("config") or {}
    fallback = args["snapshot"]
    settings = {
        key: list(config[key] if key in config else fallback.get(key) or [])
        for key in ("paths", "sysctls", "ignore_services")
    }
    snapshot, failed = take_snapshot(
        execute, settings["paths"], settings["sysctls"], settings["ignore_services"]
    )
    if snapshot is None:
        return {"failed": failed}
    sections = baseline.get("sections") or {}
    leftovers = snapshot_leftovers(sections, snapshot, args["rules"])
    if record is not None and args["remove_packages"]:
        prepared = set(record.get("packages_installed") or [])
        leftovers["packages"] = [p for p in leftovers["packages"] if p not in prepared]
    out: dict[str, Any] = {"leftovers": leftovers}
    if leftovers["units"] or leftovers["mounts"]:
        stopped = execute(
            "decice.hybrid.host_restore",
            {"units": leftovers["units"], "mounts": leftovers["mounts"]},
        )
        if stopped.get("failed"):
            return {"failed": stopped}
        out["stopped"] = stopped
    out["firewall"] = bool(
        leftovers["iptables"] + leftovers["ip6tables"] + leftovers["nftables"]
        or (
            "nftables" in sections
            and set(snapshot.get("nftables") or []) - set(sections["nftables"])
        )
    )
    out["packages"] = bool(args["leftover_packages"] and leftovers["packages"])
    out["removals"] = restore_removals(
        leftovers, args["kernel_wide"], args["unload_modules"], out["packages"]
    )
    out["removed"] = {}
    if not out["firewall"] and any(out["removals"].values()):
        out["removed"] = execute("decice.hybrid.host_restore", out["removals"])
        if out["removed"].get("failed"):
            return {"failed": out["removed"]}
    return out


class ActionModule(HostAction):
    """Undo the prepare record, remove a cluster's leftovers; say what rarely has work."""

    ARGUMENT_SPEC = ARGUMENT_SPEC

    def act(self, args: dict[str, Any], task_vars: dict[str, Any], execute: Execute) -> Result:
        host = str(task_vars.get("inventory_hostname", ""))
        state = Path(args["state_dir"]).expanduser().resolve()
        record_path = str(state / "prepare" / f"{host}.json")
        baseline_path = str(state / "baseline" / f"{host}.json")
        record, error = _read(record_path)
        if (
            not error
            and record is not None
            and (not isinstance(record, dict) or record.get("schema", 0) != SCHEMA)
        ):
            schema = record.get("schema", "none") if isinstance(record, dict) else "none"
            error = f"restore: {record_path} has schema {schema}; this role reads schema {SCHEMA}"
        baseline = None
        if not error and args["cluster_leftovers"]:
            baseline, error = _read(baseline_path)
            if not error and baseline is not None and not isinstance(baseline, dict):
                error = f"restore: {baseline_path} is not a baseline (a JSON object)"
        if error:
            return {"failed": True, "msg": error}
        fact: dict[str, Any] = {
            "host": host,
            "record_path": record_path,
            "record": record,
            "forget": record_path if record is not None and not args["keep_record"] else "",
            "baseline_path": baseline_path,
            "leftovers_known": baseline is not None,
            "settings": {
                k: args[k]
                for k in ("keep_record", "cluster_leftovers", "swap_on", "remove_packages")
            },
            "system": False,
            "firewall": False,
            "packages": False,
        }
        steps = [("undo", lambda: _undo(execute, record, args))] if record is not None else []
        if baseline is not None:
            steps.append(("leftovers", lambda: _leftovers(execute, baseline, record, args)))
            fact["baseline_sections"] = baseline.get("sections") or {}
        for step, work in steps:
            done = work()
            if "failed" in done:
                failed = done["failed"]
                return {
                    **failed,
                    "failed": True,
                    "msg": f"restore ({step}): " + str(failed.get("msg") or "a module run failed"),
                }
            fact.update(done)
        fact["rare"] = fact["system"] or fact["firewall"] or fact["packages"]
        changed = any(
            (fact.get(key) or {}).get("changed") for key in ("undone", "stopped", "removed")
        )
        return {"changed": changed, "ansible_facts": {"decice_restore": fact}}
