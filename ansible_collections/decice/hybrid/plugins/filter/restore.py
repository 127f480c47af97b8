"""Filters for the restore role: what undoing a prepare record still has to do, and what of a
cluster's leftovers one removal step takes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _collapse(value: Any) -> str:
    return " ".join(str(value).split())


def restore_undo(
    record: Mapping[str, Any], observed: Mapping[str, Any], unload_modules: bool = True
) -> dict[str, Any]:
    """From a prepare record and a ``decice.hybrid.host_observe`` result, what is left to undo.

    - ``paths``: the files prepare created that are still there (the observation's
      ``paths`` had them);
    - ``sysctls``: name to recorded value, for those recorded with a value that exist now
      and differ (whitespace collapsed, as ``sysctl`` prints them);
    - ``modules``: the modules prepare loaded that are loaded now (``/sys/module/NAME``
      was observed), last loaded first; none when ``unload_modules`` is false.

    A run cut short and run again therefore finds the done part empty (nothing changes).
    """
    present = {path for path, kind in (observed.get("paths") or {}).items() if kind is not None}
    now = observed.get("sysctls") or {}
    sysctls = {
        name: _collapse(value)
        for name, value in (record.get("sysctls") or {}).items()
        if value is not None
        and now.get(name) is not None
        and _collapse(now[name]) != _collapse(value)
    }
    modules = [
        name
        for name in reversed(list(record.get("modules_loaded") or []))
        if unload_modules and f"/sys/module/{name}" in present
    ]
    paths = [path for path in record.get("files_created") or [] if path in present]
    return {"paths": paths, "sysctls": sysctls, "modules": modules}


def restore_removals(
    leftovers: Mapping[str, Any],
    kernel_wide: bool = True,
    unload_modules: bool = True,
    remove_packages: bool = False,
) -> dict[str, Any]:
    """From ``decice.hybrid.snapshot_leftovers``' result, the arguments of the
    ``decice.hybrid.host_restore`` run that removes interfaces, paths, sysctls, modules,
    users and groups (after the units, mounts and firewall):

    - ``sysctls``: all of them with ``kernel_wide``, else only ``net.*`` (network namespaced);
    - ``modules``: in reverse order (the last loaded first), none without ``unload_modules``;
    - ``users``, ``groups``: none when ``remove_packages`` (they go after the packages, with
      the system accounts those made).
    """
    sysctls = {
        name: value
        for name, value in (leftovers.get("sysctls") or {}).items()
        if kernel_wide or str(name).startswith("net.")
    }
    return {
        "interfaces": list(leftovers.get("interfaces") or []),
        "paths": list(leftovers.get("paths") or []),
        "sysctls": sysctls,
        "modules": list(reversed(leftovers.get("modules") or [])) if unload_modules else [],
        "users": [] if remove_packages else list(leftovers.get("users") or []),
        "groups": [] if remove_packages else list(leftovers.get("groups") or []),
    }


class FilterModule:
    """decice.hybrid restore filters."""

    def filters(self) -> dict[str, Any]:
        return {"restore_undo": restore_undo, "restore_removals": restore_removals}
