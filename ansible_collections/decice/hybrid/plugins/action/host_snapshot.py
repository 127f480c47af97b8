"""Action plugin decice.hybrid.host_snapshot: a host's clean-slate snapshot in one task.

Sets the host fact ``baseline_host_snapshot``.

Runs ``decice.hybrid.host_observe`` on the host (one module run: packages, services, the
commands and files a snapshot reads, the tracked sysctls and paths) and turns its result
into ``{section: [entries]}`` on the controller with the filter's own code
(``filter/snapshot.py``: ``host_snapshot``), so the raw observation never goes through a
template. Documentation: ``modules/host_snapshot.py``.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase
from ansible_collections.decice.hybrid.plugins.filter.snapshot import host_snapshot

#: what a snapshot reads besides packages, services, sysctls and paths
COMMANDS = (
    ["ss", "-Hltnu"],
    ["iptables-save"],
    ["ip6tables-save"],
    ["nft", "list", "tables"],
    ["ip", "-o", "link"],
)
FILES = (
    "/proc/mounts",
    "/proc/swaps",
    "/proc/modules",
    "/etc/fstab",
    "/etc/hostname",
    "/proc/sys/kernel/hostname",
    "/etc/passwd",
    "/etc/group",
)
#: the options (documented in modules/host_snapshot.py)
ARGUMENT_SPEC = {
    name: {"type": "list", "elements": "str", "default": []}
    for name in ("paths", "sysctls", "ignore_services")
}


class ActionModule(ActionBase):
    """Observe the host with decice.hybrid.host_observe, return the snapshot."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        observed = self._execute_module(
            module_name="decice.hybrid.host_observe",
            module_args={
                "packages": True,
                "services": True,
                "commands": [list(argv) for argv in COMMANDS],
                "files": list(FILES),
                "sysctls": args["sysctls"],
                "paths": args["paths"],
            },
            task_vars=task_vars,
        )
        if observed.get("failed"):
            result.update(observed)
            return result
        snapshot = host_snapshot(
            {
                "packages": observed.get("packages"),
                "services": observed.get("services"),
                "ignore_services": args["ignore_services"],
                "observed": observed,
                "sysctl_keys": args["sysctls"],
                "paths": args["paths"],
            }
        )
        # a host fact, as package_facts returns its packages: no set_fact task per host
        result.update(changed=False, ansible_facts={"baseline_host_snapshot": snapshot})
        return result
