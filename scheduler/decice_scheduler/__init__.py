"""decice-scheduler: the bundled scheduler with exact state sync."""


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
