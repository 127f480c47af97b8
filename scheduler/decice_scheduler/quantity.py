"""Kubernetes resource quantities ("500m", "1Gi", "1e3", "0.5") as integers.

CPU is counted in millicores, everything else in whole units (bytes for memory and
ephemeral storage, devices for extended resources). Like Kubernetes, fractions are
rounded up: "0.1m" CPU is 1 millicore, "0.5" bytes is 1 byte.

Parsing is on the hot path (every pod event), so the results for distinct strings are
cached; a cluster uses a few hundred distinct quantity strings at most.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from functools import lru_cache

__all__ = ["parse_cpu", "parse_int", "parse_quantity", "to_units"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_EXP = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

# sign, number (digits with an optional fraction), then a binary/decimal suffix or an exponent.
# The exponent alternative comes first: "1E3" is 1000, a lone "E" is exa.
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:[eE](?P<exp>[+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)"
)
# Kubernetes quantities saturate at int64; anything larger here is junk, not a request.
_MAX_ABS = Decimal(2**63 - 1)
_MAX_EXPONENT = 40


def parse_quantity(text: str | int | float) -> Decimal:
    """Return the exact value of a quantity; raise ValueError for anything else."""
    if isinstance(text, bool):
        raise ValueError(f"invalid quantity {text!r}: not a number")
    if isinstance(text, int):
        return Decimal(text)
    if isinstance(text, float):
        return Decimal(repr(text))
    if not isinstance(text, str):
        raise ValueError(f"invalid quantity {text!r}: expected a string")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid quantity {text!r}: expected e.g. '500m', '2', '1.5Gi', '1e3'")
    value = Decimal(match["num"])
    if match["exp"] is not None:
        exponent = int(match["exp"])
        if abs(exponent) > _MAX_EXPONENT:
            raise ValueError(f"invalid quantity {text!r}: exponent out of range")
        value = value.scaleb(exponent)
    else:
        suffix = match["suffix"] or ""
        if suffix in _BINARY:
            value *= _BINARY[suffix]
        else:
            value = value.scaleb(_DECIMAL_EXP[suffix])
    if match["sign"] == "-":
        value = -value
    if abs(value) > _MAX_ABS:
        raise ValueError(f"invalid quantity {text!r}: out of range")
    return value


def _ceil(value: Decimal) -> int:
    try:
        return int(value.to_integral_value(rounding=ROUND_CEILING))
    except InvalidOperation as exc:  # pragma: no cover - parse_quantity rejects these
        raise ValueError(f"invalid quantity value {value}") from exc


@lru_cache(maxsize=8192)
def _cpu_cached(text: str) -> int:
    return _ceil(parse_quantity(text) * 1000)


@lru_cache(maxsize=8192)
def _int_cached(text: str) -> int:
    return _ceil(parse_quantity(text))


def parse_cpu(text: str | int | float) -> int:
    """CPU quantity in millicores, rounded up ("250m" -> 250, "1.5" -> 1500)."""
    if isinstance(text, str):
        return _cpu_cached(text)
    return _ceil(parse_quantity(text) * 1000)


def parse_int(text: str | int | float) -> int:
    """Any non-CPU quantity in whole units, rounded up ("1Ki" -> 1024, "1k" -> 1000)."""
    if isinstance(text, str):
        return _int_cached(text)
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    return _ceil(parse_quantity(text))


def to_units(resource: str, text: str | int | float) -> int:
    """Parse a quantity in the unit the scheduler counts ``resource`` in."""
    if resource == "cpu":
        return parse_cpu(text)
    return parse_int(text)
