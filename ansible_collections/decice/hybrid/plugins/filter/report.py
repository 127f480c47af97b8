"""Filters that render check results for humans (used by the preflight role)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def text_table(rows: Iterable[Mapping[str, Any]], columns: Iterable[str]) -> str:
    """Render ``rows`` (dicts) as an aligned plain-text table of ``columns``.

    The header is the upper-cased column names; missing values print as ``-``.
    """
    cols = list(columns)
    body = [[str(row.get(col, "-")) for col in cols] for row in rows]
    header = [col.upper() for col in cols]
    widths = [max(len(cell) for cell in column) for column in zip(header, *body, strict=False)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            cell.ljust(width) for cell, width in zip(cells, widths, strict=True)
        ).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(header), rule, *(line(cells) for cells in body)])


class FilterModule:
    """decice.hybrid reporting filters."""

    def filters(self) -> dict[str, Any]:
        return {"text_table": text_table}
