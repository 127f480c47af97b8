"""Kubernetes resource quantities ("500m", "1Gi", "1e3", "0.5"): one grammar, two readings.

The grammar is the API server's: a sign, a number, then one binary suffix (Ki..Ei), one
decimal suffix (n, u, m, k, M, G, T, P, E) or one exponent (the exponent first: "1E3" is
1000, a lone "E" is exa). Two readings of it:

- **counting** (the scheduler, the sim's node agent): :func:`parse_quantity` and the
  counts :func:`parse_cpu` (millicores) and :func:`parse_int` (whole units), rounded up as
  Kubernetes rounds. Magnitude is no error: the API server stores quantities far past
  what a node has ("1e20" memory, "1e20000000"), and anyone who can create a pod can send
  one, so values saturate at :data:`INT64_MAX` (Kubernetes counts in int64) and an
  exponent is not evaluated beyond what decides that.
- **exact** (the interLink plugin sizing a SLURM job, the spec's checks): :func:`exact`
  gives the value as a fraction and refuses a negative one or one past
  :data:`INT64_MAX`, naming which, so the pod is refused with the reason.

Only text outside the grammar is a ValueError in both. Counting is on the scheduler's
hot path (every pod event), so the counts for distinct strings are cached; a cluster uses
a few hundred distinct quantity strings at most.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Context, Decimal, InvalidOperation
from fractions import Fraction
from functools import lru_cache

__all__ = [
    "INT64_MAX",
    "MAX_EXPONENT",
    "ceil",
    "exact",
    "parse_cpu",
    "parse_int",
    "parse_quantity",
    "to_units",
]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_EXP = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:[eE](?P<exp>[+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)"
)
INT64_MAX = 2**63 - 1
# an exponent beyond this (either way) is decided without evaluating it: past int64 above,
# below a millicore's smallest fraction under
MAX_EXPONENT = 40
_EXP_DIGITS = 3  # an exponent with more digits is past MAX_EXPONENT: not converted
_MAX_DIGITS = 100  # exact reading: a longer number is past INT64_MAX or a fraction nobody means
_MAX_ABS = Decimal(INT64_MAX)
_TINY = Decimal(1).scaleb(-MAX_EXPONENT)
_OVER = _MAX_ABS + 1
# room for every digit a quantity the exact reading takes can have, so scaling never rounds
_CONTEXT = Context(prec=2 * _MAX_DIGITS + MAX_EXPONENT + 60)
_EXAMPLE = "e.g. 500m, 2, 1Gi"


def _magnitude(match: re.Match[str]) -> Decimal:
    """The unsigned value of a matched quantity; an exponent past MAX_EXPONENT gives a
    value just past INT64_MAX (or a tiny positive one) without being evaluated."""
    value = Decimal(match["num"])
    exp = match["exp"]
    if exp is not None:
        if not value:
            return value
        digits = exp.lstrip("+-").lstrip("0") or "0"
        exponent = int(digits) if len(digits) <= _EXP_DIGITS else MAX_EXPONENT + 1
        negative = exp.startswith("-")
        if exponent > MAX_EXPONENT:
            return _TINY if negative else _OVER
        return value.scaleb(-exponent if negative else exponent, _CONTEXT)
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return _CONTEXT.multiply(value, Decimal(_BINARY[suffix]))
    return value.scaleb(_DECIMAL_EXP[suffix], _CONTEXT)


def parse_quantity(text: str | int | float) -> Decimal:
    """The counting reading: the value, exact up to :data:`INT64_MAX` in magnitude and
    saturated there; ValueError for anything that is not a quantity."""
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
    value = min(_MAX_ABS, _magnitude(match))
    return -value if match["sign"] == "-" else value


def exact(value: object) -> Fraction:
    """The exact reading: the value as a fraction; ValueError names what is wrong (not a
    quantity, negative, or past :data:`INT64_MAX`)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{value!r} is not a quantity")
    match = _QUANTITY.fullmatch(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a quantity ({_EXAMPLE})")
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    out_of_range = ValueError(f"{shown} is out of range (at most {INT64_MAX})")
    exp = (match["exp"] or "0").lstrip("+-").lstrip("0") or "0"
    if len(match["num"]) > _MAX_DIGITS or len(exp) > _EXP_DIGITS or int(exp) > MAX_EXPONENT:
        raise out_of_range
    number = _magnitude(match)
    if match["sign"] == "-" and number:
        raise ValueError(f"{shown} is negative")
    if number > _MAX_ABS:
        raise out_of_range
    return Fraction(number)


def ceil(value: Fraction) -> int:
    """Rounded up to a whole number."""
    return -((-value.numerator) // value.denominator)


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
