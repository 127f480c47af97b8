"""The one exception type of the lab package."""

from __future__ import annotations

from decice.errors import DeciceError


class LabError(DeciceError):
    """A lab operation failed; the message names what went wrong and how to fix it."""
