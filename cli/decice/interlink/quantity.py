"""Kubernetes resource quantities ("500m", "2", "1Gi", "128M", "1e3") as exact numbers."""

from __future__ import annotations

import re
from fractions import Fraction

_QTY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
_SUFFIX = {
    "": Fraction(1),
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
    match = _QTY.match(str(value).strip())
    if not match:
        raise ValueError(f"{value!r} is not a quantity (e.g. 500m, 2, 1Gi)")
    try:
        number = Fraction(match.group(1))
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a quantity (e.g. 500m, 2, 1Gi)") from exc
    if number < 0:
        raise ValueError(f"{value!r} is negative")
    return number * _SUFFIX[match.group(2) or ""]


def ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)
