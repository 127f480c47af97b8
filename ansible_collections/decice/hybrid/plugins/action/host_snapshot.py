"""Action plugin decice.hybrid.host_snapshot: a host's clean-slate snapshot in one task.

Sets the host fact ``baseline_host_snapshot``.

Runs ``decice.hybrid.host_observe`` on the host (one module run: packages, services, the
commands and files a snapshot reads, the tracked sysctls and paths) and turns its result
into ``{section: [entries]}`` on the controller with the filter's own code
(``filter/snapshot.py``: ``host_snapshot``), so the raw observation never goes through a
template. Documentation: ``modules/host_snapshot.py``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

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


#: a module run's or an action's result
Result = dict[str, Any]


class Execute(Protocol):
    """Run a module on the host and return its result; ``become=False`` runs it as the login
    user whatever the task's become."""

    def __call__(self, module: str, args: dict[str, Any], become: bool = True) -> Result: ...


def take_snapshot(
    execute: Execute, paths: list[str], sysctls: list[str], ignore_services: list[str]
) -> tuple[dict[str, list[str]] | None, dict[str, Any]]:
    """One ``host_observe`` run turned into the snapshot; also used by the ``restore_host``
    and ``verify_host`` actions. Returns ``(snapshot, {})``, or ``(None, the failed result)``.

    Always as the login user (without become), as the baseline is taken: a snapshot taken
    as root would see what the user cannot (firewall rules) as new since the baseline."""
    observed = execute(
        "decice.hybrid.host_observe",
        {
            "packages": True,
            "services": True,
            "commands": [list(argv) for argv in COMMANDS],
            "files": list(FILES),
            "sysctls": sysctls,
            "paths": paths,
        },
        become=False,
    )
    if observed.get("failed"):
        return None, observed
    snapshot = host_snapshot(
        {
            "packages": observed.get("packages"),
            "services": observed.get("services"),
            "ignore_services": ignore_services,
            "observed": observed,
            "sysctl_keys": sysctls,
            "paths": paths,
        }
    )
    return snapshot, {}


class HostAction(ActionBase):
    """An action whose work is module runs on its host (this one, ``restore_host``,
    ``verify_host``): the arguments checked against ``ARGUMENT_SPEC``, the modules run
    through a plain function (with the task's become, or without it), the remote temporary
    directory removed at the end."""

    TRANSFERS_FILES = False
    ARGUMENT_SPEC: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._VALID_ARGS = frozenset(cls.ARGUMENT_SPEC)  # unknown options refused by name

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        options = self.validate_argument_spec(argument_spec=self.ARGUMENT_SPEC)[1]

        def execute(module: str, args: dict[str, Any], become: bool = True) -> Result:
            escalation = self._connection.become
            if not become:  # Ansible adds become per command when the connection has it
                self._connection.set_become_plugin(None)
            try:
                done: Result = self._execute_module(
                    module_name=module, module_args=args, task_vars=task_vars
                )
            finally:
                if not become:
                    self._connection.set_become_plugin(escalation)
            return done

        try:
            return {**result, **self.act(options, task_vars or {}, execute)}
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)

    def act(self, args: dict[str, Any], task_vars: dict[str, Any], execute: Execute) -> Result:
        """The action's work: what goes into the task's result."""
        raise NotImplementedError


class ActionModule(HostAction):
    """Observe the host with decice.hybrid.host_observe, return the snapshot."""

    ARGUMENT_SPEC = ARGUMENT_SPEC

    def act(self, args: dict[str, Any], task_vars: dict[str, Any], execute: Execute) -> Result:
        snapshot, failed = take_snapshot(
            execute, args["paths"], args["sysctls"], args["ignore_services"]
        )
        if snapshot is None:
            return failed
        # a host fact, as package_facts returns its packages: no set_fact task per host
        return {"changed": False, "ansible_facts": {"baseline_host_snapshot": snapshot}}
