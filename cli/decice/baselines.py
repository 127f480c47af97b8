"""Host baselines on the controller: where they live and the rule that guards them.

A host's baseline - the clean-slate snapshot the collection's ``baseline`` role takes
before anything is installed - is ``<state dir>/baseline/<host>.json``. No phase may
change a host that has none: a later `up` would snapshot the changed host as its clean
slate, and `reset` + `verify` would then prove nothing. The collection's own check
(``roles/baseline/tasks/require.yml``, used by ``prepare``) refuses with the same words.

With ``--check`` a host also counts as having a baseline when this run's ``baseline``
phase ran (in check mode it only says it would write the file): `up --check` predicts
`up`, which takes the baselines before it changes anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from decice.errors import RunFailedError
from decice.records import RunRecord

BASELINE_DIR = "baseline"
BASELINE_PHASE = "baseline"


def baseline_dir(state_dir: Path) -> Path:
    """The directory of the hosts' baselines (0700, files 0600)."""
    return state_dir.resolve() / BASELINE_DIR


def baseline_path(state_dir: Path, host: str) -> Path:
    """The baseline of ``host`` (a name checked at the edge: no ``/``, no ``..``)."""
    return baseline_dir(state_dir) / f"{host}.json"


def without_baseline(state_dir: Path, hosts: Iterable[str]) -> list[str]:
    """Those of ``hosts`` (in their order) whose baseline file does not exist."""
    return [host for host in hosts if not baseline_path(state_dir, host).is_file()]


def taken_in_this_run(record: RunRecord) -> bool:
    """Did this run's ``baseline`` phase succeed (so every host has, or would have, one)?"""
    return any(p.name == BASELINE_PHASE and p.status == "ok" for p in record.phases)


def refusal(phase: str, hosts: list[str], state_dir: Path) -> str:
    """The message of a phase refusing ``hosts`` that have no baseline."""
    return (
        f"{phase}: refused - no baseline for {', '.join(hosts)} "
        f"({baseline_dir(state_dir)}/<host>.json does not exist). A host's clean-slate "
        "baseline must be taken before any phase changes it, or a later up would record "
        "the changed host as its clean slate. Nothing was changed.\n"
        "    fix: run `decice up --only baseline` first (or `decice up` without "
        "--skip baseline)"
    )


def require(
    phase: str, state_dir: Path, hosts: Iterable[str], record: RunRecord, *, check: bool
) -> None:
    """Raise :class:`RunFailedError` (exit 1) naming every host of ``hosts`` without a baseline.

    ``check``: the run is ``--check``; then a ``baseline`` phase of the same run counts.
    """
    if check and taken_in_this_run(record):
        return
    missing = without_baseline(state_dir, hosts)
    if missing:
        raise RunFailedError(refusal(phase, missing, state_dir))
