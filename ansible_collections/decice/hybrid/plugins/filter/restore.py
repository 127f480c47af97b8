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


_KINDS = ("units", "mounts", "iptables", "ip6tables", "nftables", "interfaces", "paths",
          "sysctls", "modules", "packages", "users", "groups")  # fmt: skip


def restore_report(
    restore: Mapping[str, Any], removed: Mapping[str, Any] | None = None
) -> list[str]:
    """The lines that say what the restore of one host did, from the ``decice_restore`` fact
    the ``decice.hybrid.restore_host`` action sets; ``removed`` is the result of the role's
    removal step after the firewall - when it ran (not skipped), it stands for the action's."""
    host, settings = restore.get("host"), restore.get("settings") or {}
    record = restore.get("record")
    lines = []
    if record is None:
        lines.append(
            f"restore: nothing to do for {host}: no prepare record at {restore.get('record_path')}"
            " (prepare never ran for this host, or it was restored already)"
        )
    else:
        undone = restore.get("undone") or {}
        done = undone.get("removed") or {}
        stuck = (undone.get("stuck") or {}).get("modules") or []
        swaps = len(record.get("swap_active") or []) if settings.get("swap_on") else 0
        packages = (
            len(record.get("packages_installed") or []) if settings.get("remove_packages") else 0
        )
        lines.append(
            f"restore: {host} undone from {restore.get('record_path')}:"
            f" {len(done.get('sysctls') or {})} sysctl(s) set back to their previous values,"
            f" {len(record.get('fstab_commented') or [])} fstab line(s) reinstated,"
            f" {swaps} swap area(s) on again, {len(done.get('paths') or [])} file(s) removed,"
            f" {len(record.get('files_replaced') or {})} file(s) put back,"
            f" {len(done.get('modules') or [])} module(s) unloaded, {packages} package(s) removed;"
            + (f" could not unload {', '.join(stuck)} (in use; they stay loaded until reboot);"
               if stuck else "")
            + (" record kept (restore_keep_record)" if settings.get("keep_record")
               else " record removed")
        )  # fmt: skip
    if not restore.get("leftovers_known"):
        if settings.get("cluster_leftovers"):
            lines.append(
                f"restore: no baseline for {host} at {restore.get('baseline_path')}: cannot tell"
                " what a cluster left from what the host had; leftovers not removed"
            )
        return lines
    leftovers = restore.get("leftovers") or {}
    parts = [
        f"{kind}: {', '.join(map(str, leftovers.get(kind) or [])) or 'none'}" for kind in _KINDS
    ]
    late = removed is not None and not removed.get("skipped")  # the role's step ran
    stuck_now = ((removed if late else restore.get("removed")) or {}).get("stuck") or {}
    cannot = ([f"delete interface(s): {' / '.join(stuck_now['interfaces'])}"]
              if stuck_now.get("interfaces") else []) + (
        [f"unload module(s) {', '.join(stuck_now['modules'])} (in use or built in)"]
        if stuck_now.get("modules") else [])  # fmt: skip
    lines.append(
        f"restore: {host}: leftovers of a cluster removed - {'; '.join(parts)}"
        + (f". Could not {'; '.join(cannot)}; verify will name them" if cannot else "")
    )
    return lines


class FilterModule:
    """decice.hybrid restore filters."""

    def filters(self) -> dict[str, Any]:
        return {f.__name__: f for f in (restore_undo, restore_removals, restore_report)}
