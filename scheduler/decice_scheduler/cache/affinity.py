"""Node selector terms (required node affinity), compiled once per pod.

Terms are ORed, the requirements inside one term ANDed. An empty term, or an empty
list of terms, matches no node. Operators: In, NotIn, Exists, DoesNotExist, Gt, Lt on
labels; In and NotIn on the field ``metadata.name``. A malformed requirement (unknown
operator, Gt/Lt without exactly one integer value) matches nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["NodeSelector", "Requirement"]

_LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
_FIELD_OPERATORS = frozenset({"In", "NotIn"})


def _int_or_none(text: object) -> int | None:
    try:
        return int(str(text))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: frozenset[str]
    number: int | None  # the single value of Gt/Lt
    on_field: bool = False

    @classmethod
    def parse(cls, raw: Mapping[str, Any], on_field: bool = False) -> Requirement:
        values = [str(v) for v in raw.get("values") or ()]
        operator = str(raw.get("operator") or "")
        number = _int_or_none(values[0]) if operator in ("Gt", "Lt") and len(values) == 1 else None
        return cls(str(raw.get("key") or ""), operator, frozenset(values), number, on_field)

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        if self.on_field:
            if self.key != "metadata.name" or self.operator not in _FIELD_OPERATORS:
                return False
            value: str | None = node_name
        else:
            value = labels.get(self.key)
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if op in ("Gt", "Lt"):
            if value is None or self.number is None:
                return False
            actual = _int_or_none(value)
            if actual is None:
                return False
            return actual > self.number if op == "Gt" else actual < self.number
        return False


@dataclass(frozen=True, slots=True)
class NodeSelector:
    terms: tuple[tuple[Requirement, ...], ...]

    @classmethod
    def parse(cls, terms: Iterable[Mapping[str, Any]]) -> NodeSelector:
        compiled = []
        for term in terms:
            reqs = [Requirement.parse(r) for r in term.get("matchExpressions") or ()]
            reqs += [Requirement.parse(r, on_field=True) for r in term.get("matchFields") or ()]
            compiled.append(tuple(reqs))
        return cls(tuple(compiled))

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        return any(term and all(r.matches(labels, node_name) for r in term) for term in self.terms)
