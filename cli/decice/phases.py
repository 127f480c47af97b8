"""Phase names per command (stable: they are the collection playbooks' tags)."""

from __future__ import annotations

from decice.errors import InputError

PHASES: dict[str, tuple[str, ...]] = {
    "up": ("preflight", "baseline", "prepare", "kubernetes", "addons", "scheduler"),
    "down": ("scheduler", "addons"),
    "reset": ("kubernetes", "restore", "verify"),
    "verify": ("cluster", "verify"),
}


def _split(values: list[str] | None) -> list[str]:
    out: list[str] = []
    for value in values or []:
        out.extend(part.strip() for part in value.split(",") if part.strip())
    return out


def select(command: str, only: list[str] | None = None, skip: list[str] | None = None) -> list[str]:
    """The phases of ``command`` to run, in order; unknown names are bad input."""
    known = PHASES[command]
    wanted, unwanted = _split(only), _split(skip)
    for option, names in (("--only", wanted), ("--skip", unwanted)):
        unknown = [name for name in names if name not in known]
        if unknown:
            raise InputError(
                f"{option}: unknown phase {', '.join(unknown)} for `decice {command}`\n"
                f"    fix: use {', '.join(known)} (comma-separated)"
            )
    chosen = [p for p in known if (not wanted or p in wanted) and p not in unwanted]
    if not chosen:
        raise InputError(f"--only/--skip leave no phase of `decice {command}` to run")
    return chosen
