"""The one form of decice's machine-readable output.

Every ``--json`` document on stdout, every JSON progress line on stderr and every record
decice writes (a run's ``record.json``, an experiment's ``raw.json`` and
``summary.json``) carries ``format_version``. It goes up when a field changes its meaning
or goes away; a new field does not change it. A document is always a JSON object (lists
are under a named key), so a reader checks the version before anything else.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

FORMAT_VERSION = 1
KEY = "format_version"


def document(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with the format version first."""
    return {KEY: FORMAT_VERSION, **{k: v for k, v in data.items() if k != KEY}}


def emit(data: Mapping[str, Any]) -> None:
    """One ``--json`` document (indented) on stdout."""
    sys.stdout.write(json.dumps(document(data), indent=2, default=str) + "\n")


def line(data: Mapping[str, Any]) -> str:
    """One JSON progress line (its kind's key first, the format version last)."""
    return json.dumps({**data, KEY: FORMAT_VERSION}, default=str) + "\n"


def check_readable(data: Mapping[str, Any]) -> None:
    """Refuse (ValueError) a document of a newer format; one without a version predates
    the key and is format 1."""
    version = data.get(KEY, 1)
    if type(version) is not int or not 1 <= version <= FORMAT_VERSION:
        raise ValueError(
            f"{KEY} {version!r}: not a format this decice reads (1 to {FORMAT_VERSION}); "
            "a newer decice wrote it"
        )
