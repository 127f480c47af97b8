"""Kubernetes resource quantities ("500m", "1Gi", "1e3", "0.5") as integers.

CPU is counted in millicores, everything else in whole units (bytes for memory and
ephemeral storage, devices for extended resources). Like Kubernetes, fractions are
rounded up: "0.1m" CPU is 1 millicore, "0.5" bytes is 1 byte.

Magnitude is no error: the API server stores quantities far beyond what a node has
("1e20" memory becomes "100e18", "1e20000000" is valid too), and anyone who can create a
pod can send one. Counts saturate at :data:`INT64_MAX` (Kubernetes counts in int64), so
such a request fits no node and such a capacity is as large as a count can be; an
exponent is not evaluated beyond what decides that. Only text outside the quantity
grammar is a ValueError.

Parsing is on the hot path (every pod event), so the results for distinct strings are
cached; a cluster uses a few hundred distinct quantity strings at most.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from functools import lru_cache

__all__ = ["INT64_MAX", "parse_cpu", "parse_int", "parse_quantity", "to_units"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_EXP = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

# sign, number (digits with an optional fraction), then a binary/decimal suffix or an exponent.
# The exponent alternative comes first: "1E3" is 1000, a lone "E" is exa.
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:[eE](?P<exp>[+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)"
)
# where counts saturate; an exponent beyond _MAX_EXPONENT (either way) is decided without
# evaluating it: past int64 above, below a millicore's smallest fraction under
_MAX_EXPONENT = 40
INT64_MAX = 2**63 - 1
_MAX_ABS = Decimal(INT64_MAX)
_TINY = Decimal(1).scaleb(-_MAX_EXPONENT)
_EXP_DIGITS = 3  # an exponent with more digits is past _MAX_EXPONENT: not converted


def parse_quantity(text: str | int | float) -> Decimal:
    """The value of a quantity, exact up to :data:`INT64_MAX` in magnitude and saturated
    there; ValueError for anything that is not a quantity."""
    if isinstance(text, bool):
        raise ValueError(f"invalid quantity {text!r}: not a number")
    if isinstance(text, int):
        return max(-_MAX_ABS, min(_MAX_ABS, Decimal(text)))
    if isinstance(text, float):
        if text != text or text in (float("inf"), float("-inf")):
            raise ValueError(f"invalid quantity {text!r}: not a finite number")
        return max(-_MAX_ABS, min(_MAX_ABS, Decimal(repr(text))))
    if not isinstance(text, str):
        raise ValueError(f"invalid quantity {text!r}: expected a string")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid quantity {text!r}: expected e.g. '500m', '2', '1.5Gi', '1e3'")
    value = Decimal(match["num"])
    if match["exp"] is not None and value:
        digits = match["exp"].lstrip("+-").lstrip("0") or "0"
        exponent = int(digits) if len(digits) <= _EXP_DIGITS else _MAX_EXPONENT + 1
        negative = match["exp"].startswith("-")
        if exponent > _MAX_EXPONENT:
            value = _TINY if negative else _MAX_ABS
        else:
            value = value.scaleb(-exponent if negative else exponent)
    elif match["exp"] is None:
        suffix = match["suffix"] or ""
        if suffix in _BINARY:
            value *= _BINARY[suffix]
        else:
            value = value.scaleb(_DECIMAL_EXP[suffix])
    if match["sign"] == "-":
        value = -value
    return max(-_MAX_ABS, min(_MAX_ABS, value))


def _ceil(value: Decimal) -> int:
    """Rounded up, saturated at int64 (a CPU count in millicores can pass it)."""
    try:
        units = int(value.to_integral_value(rounding=ROUND_CEILING))
    except InvalidOperation as exc:  # pragma: no cover - parse_quantity bounds the value
        raise ValueError(f"invalid quantity value {value}") from exc
    return max(-INT64_MAX, min(INT64_MAX, units))


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
        return max(-INT64_MAX, min(INT64_MAX, text))
    return _ceil(parse_quantity(text))


def to_units(resource: str, text: str | int | float) -> int:
    """Parse a quantity in the unit the scheduler counts ``resource`` in."""
    if resource == "cpu":
        return parse_cpu(text)
    return parse_int(text)
