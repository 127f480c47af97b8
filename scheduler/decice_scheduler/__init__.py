"""decice-scheduler: the bundled scheduler with exact state sync."""

import sys


def version() -> str:
    """The version of the installed decice distribution, which ships this package: one
    source (``decice/__init__.py``, read by the wheel's build), looked up only when asked
    (importlib.metadata costs milliseconds at every start otherwise)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as distribution_version

    try:
        return distribution_version("decice")
    except PackageNotFoundError:
        return "unknown (decice is not installed)"


# httpx imports its command-line client (click, rich, pygments) whenever those are
# installed: about 0.1 s of CPU at every start of the scheduler and of its event writer
# in an environment that has them (the CLI's own venv, where the sim target runs the
# scheduler). Nothing in this package uses httpx's command line; a None entry makes that
# one import fail as httpx expects when its CLI extras are absent (httpx then defines a
# stub ``main``). An httpx already imported keeps its own.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
