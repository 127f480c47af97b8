"""Reading the API server's JSON: one function, :func:`loads`, for every body and watch
event the client decodes.

orjson decodes faster than the standard library, and the scheduler reads one pod's
watch event per pod it binds, besides a LIST of every pod at start (the effect on the
scheduler: ``bench/README.md``, "orjson, the first LIST frozen, events held while
binding"). What orjson refuses and the standard library reads (``NaN``, ``Infinity``,
a lone surrogate escape) is read by the standard library; a document that neither
reads raises ``ValueError`` as before. One difference remains: orjson reads an integer
beyond 64 bits as a float (the standard library: as an int). The API server holds
every integer field of the objects decice reads to int32/int64, so only a custom
resource's unvalidated field can carry one.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["loads"]


def loads(content: bytes | str) -> Any:
    """The decoded JSON document ``content``; ValueError if it is not JSON."""
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return json.loads(content)
