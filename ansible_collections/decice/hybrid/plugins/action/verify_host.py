"""Action plugin decice.hybrid.verify_host: compare a host with its baseline in one task.

Sets the host fact ``decice_verify``. Documentation: ``modules/verify_host.py``.

Reads the host's baseline on the controller, takes a fresh snapshot (``host_snapshot``'s
code: one ``host_observe`` run) with the settings that baseline was taken with, and compares
the two with the filters' own code (``snapshot_differences``, ``snapshot_diff``), so neither
snapshot goes through a template.
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
from ansible_collections.decice.hybrid.plugins.filter.snapshot import (
    SECTIONS,
    snapshot_diff,
    snapshot_differences,
)

#: the options (documented in modules/verify_host.py)
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "state_dir": {"type": "str", "required": True},
    "sections": {"type": "list", "elements": "str", "default": list(SECTIONS)},
    "use_baseline_settings": {"type": "bool", "default": True},
    "require_baseline": {"type": "bool", "default": True},
    "snapshot": {"type": "dict", "default": {}},
}
SETTINGS = ("paths", "sysctls", "ignore_services")


def snapshot_settings(
    baseline: dict[str, Any], fallback: dict[str, Any], use_baseline: bool
) -> dict[str, list[str]]:
    """The baseline's own settings when it has all of them (and ``use_baseline``), else the
    ``fallback`` (the baseline role's variables as set)."""
    config = baseline.get("config") or {}
    own = use_baseline and all(key in config for key in SETTINGS)
    source = config if own else fallback
    return {key: list(source.get(key) or []) for key in SETTINGS}


class ActionModule(HostAction):
    """Snapshot the host and compare it with its stored baseline."""

    ARGUMENT_SPEC = ARGUMENT_SPEC

    def act(self, args: dict[str, Any], task_vars: dict[str, Any], execute: Execute) -> Result:
        host = str(task_vars.get("inventory_hostname", ""))
        path = Path(args["state_dir"]).expanduser().resolve() / "baseline" / f"{host}.json"
        unknown = [s for s in args["sections"] if s not in SECTIONS]
        if unknown:
            return {"failed": True, "msg": f"verify: unknown sections {unknown} in "
                    f"verify_sections; known: {list(SECTIONS)}"}  # fmt: skip
        if not path.is_file():
            message = (
                f"verify: no baseline for {host}: {path} does not exist. A baseline is taken by"
                " the 'baseline' phase of up (before anything is installed); without it there"
                " is nothing to compare with."
            )
            if args["require_baseline"]:
                return {"failed": True, "msg": message}
            missing = {
                "missing": f"verify: no baseline for {host} ({path}): nothing to compare with"
                " - up never took one, so nothing was restored either"
            }
            return {"changed": False, "ansible_facts": {"decice_verify": missing}}
        try:
            baseline = json.loads(path.read_text(encoding="utf-8"))
            sections = baseline["sections"]
            if not isinstance(sections, dict):
                raise TypeError("'sections' is not a mapping")
        except (OSError, ValueError, KeyError, TypeError) as err:
            return {"failed": True, "msg": f"verify: cannot read the baseline {path}: "
                    f"{err}; take a new one (decice reset, then up)"}  # fmt: skip
        settings = snapshot_settings(baseline, args["snapshot"], args["use_baseline_settings"])
        snapshot, failed = take_snapshot(
            execute, settings["paths"], settings["sysctls"], settings["ignore_services"]
        )
        if snapshot is None:
            return {**failed}
        wanted = args["sections"]
        fact: dict[str, Any] = {
            "taken_at": baseline.get("taken_at", "?"),
            "differences": snapshot_differences(sections, snapshot, wanted),
            "difference": snapshot_diff(sections, snapshot, wanted),
            "compared": [s for s in wanted if s in sections and s in snapshot],
        }
        return {"changed": False, "ansible_facts": {"decice_verify": fact}}
