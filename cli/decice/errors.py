"""Exceptions that map to the CLI's documented exit codes."""

from __future__ import annotations

EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_LOCKED = 3


class DeciceError(Exception):
    """Base of every error decice reports to the user (never as a traceback)."""

    exit_code = EXIT_RUN_FAILED


class InputError(DeciceError):
    """Bad input: nothing was touched."""

    exit_code = EXIT_BAD_INPUT


class LockHeldError(DeciceError):
    """Another run holds the state directory's lock."""

    exit_code = EXIT_LOCKED


class RunFailedError(DeciceError):
    """A run started and failed."""

    exit_code = EXIT_RUN_FAILED
