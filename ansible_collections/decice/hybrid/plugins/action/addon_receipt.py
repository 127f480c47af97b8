"""Action plugin decice.hybrid.addon_receipt: adds the run's inputs sha256 to the module.

For ``state: check`` the sha256 covers everything an add-on install is made from that a
run can change: every variable of the play named ``decice_*``, ``addon_engine_*`` or
``<add-on>_*`` for the add-ons of ``names`` (templated; the play-internal ``decice__*``
left out), the files of this collection (roles, playbooks, plugins, vars) and the Python
files of the decice package when the controller has one (its post-renderer adapts charts
for the sim). Documentation: ``modules/addon_receipt.py``.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase
from ansible_collections.decice.hybrid.plugins.module_utils import receipts

COLLECTION = Path(__file__).resolve().parents[2]
CODE_DIRS = ("roles", "playbooks", "plugins", "vars")


def _decice_package() -> list[Path]:
    try:
        spec = importlib.util.find_spec("decice")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(location) for location in spec.submodule_search_locations]


def code_sha256() -> str:
    """sha256 of the collection's code and the decice package's Python files."""
    return receipts.digest(
        {
            "collection": receipts.tree_digest(COLLECTION / name for name in CODE_DIRS),
            "decice": receipts.tree_digest(_decice_package(), suffixes=(".py",)),
        }
    )


def input_names(task_vars: dict[str, Any], addons: list[str]) -> list[str]:
    """The variables the inputs' sha256 covers."""
    prefixes = ["decice", "addon_engine", *addons]
    pattern = re.compile(rf"^({'|'.join(re.escape(p) for p in prefixes)})_(?!_)")
    return sorted(name for name in task_vars if pattern.match(name))


class ActionModule(ActionBase):
    """See ``modules/addon_receipt.py``."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def _value(self, value: Any) -> Any:
        try:
            return self._templar.template(value)
        except Exception:  # an undefined reference: the text itself is the input
            return repr(value)

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)
        if args.get("state", "check") == "check":
            names = [str(name) for name in args.get("names") or []]
            inputs = {name: self._value(task_vars[name]) for name in input_names(task_vars, names)}
            args["inputs_sha256"] = receipts.digest({"vars": inputs, "code": code_sha256()})
        outcome = self._execute_module(
            module_name="decice.hybrid.addon_receipt", module_args=args, task_vars=task_vars
        )
        if args.get("inputs_sha256"):
            outcome["inputs_sha256"] = args["inputs_sha256"]
        return {**result, **outcome}
