"""Kubernetes resource quantities ("500m", "2", "1Gi", "128M", "1e3") as exact numbers.

Bounded: the API server stores quantities far past anything a cluster has ("1e20" memory,
"1e20000000"), and any pod author can send one. An exponent beyond :data:`MAX_EXPONENT`
is refused without being evaluated, and so is a value past :data:`MAX_VALUE` (Kubernetes
counts in int64): the pod is refused with the reason, the plugin stays responsive."""

from __future__ import annotations

import re
from fractions import Fraction

# Kubernetes' grammar: a number, then one binary suffix, one decimal suffix or one
# exponent (the exponent first: "1E3" is 1000, a lone "E" is exa); the same grammar as
# decice_scheduler.quantity, which this stdlib-only copy agrees with (a test checks)
_QTY = re.compile(
    r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:[eE]([+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?"
)
MAX_EXPONENT = 40
MAX_VALUE = 2**63 - 1
_MAX_DIGITS = 100  # a longer number is past MAX_VALUE or a fraction nobody means
_SUFFIX = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


def parse(value: object) -> Fraction:
    """The quantity's value; ValueError names what is wrong."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{value!r} is not a quantity")
    match = _QTY.fullmatch(str(value).strip())
    if not match:
        raise ValueError(f"{value!r} is not a quantity (e.g. 500m, 2, 1Gi)")
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    digits, exponent, suffix = match.groups()
    magnitude = (exponent or "0").lstrip("+-").lstrip("0") or "0"
    if len(digits) > _MAX_DIGITS or len(magnitude) > 3 or int(magnitude) > MAX_EXPONENT:
        raise ValueError(f"{shown} is out of range (at most {MAX_VALUE})")
    try:
        number = Fraction(digits)
    except ValueError as exc:
        raise ValueError(f"{shown} is not a quantity (e.g. 500m, 2, 1Gi)") from exc
    if number < 0:
        raise ValueError(f"{shown} is negative")
    if exponent is not None:
        number *= Fraction(10) ** int(exponent)
    number *= _SUFFIX[suffix or ""]
    if number > MAX_VALUE:
        raise ValueError(f"{shown} is out of range (at most {MAX_VALUE})")
    return number


def ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)
