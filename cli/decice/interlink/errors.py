"""Errors the plugin answers with an HTTP status and a one-line reason."""

from __future__ import annotations


class PluginError(Exception):
    """A request the plugin refuses or cannot serve; ``status`` is the HTTP status."""

    status = 500

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


class BadRequest(PluginError):
    """Malformed request (not JSON, wrong shape, unsafe names)."""

    status = 400


class Unrunnable(PluginError):
    """A well-formed pod this plugin cannot run here (no sizes, too big, bad annotation)."""

    status = 422


class SlurmError(PluginError):
    """A SLURM command failed."""

    status = 502


class UsageError(Exception):
    """Bad command line or setup (token file, listen address): exit 2."""
