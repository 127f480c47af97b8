"""Upstream sources of artifacts: the site's rewrite of upstream's prefixes.

Shared by the filter ``decice.hybrid.upstream_url`` (the add-on engine's resolve step)
and ``decice plan`` (which names each source before anything is fetched). Standard
library only.
"""

from __future__ import annotations

from collections.abc import Mapping


def rewritten(url: str, rewrite: Mapping[str, str] | None) -> str:
    """``url`` with the longest prefix of ``rewrite`` that it starts with replaced (the
    spec's ``upstream.rewrite``: a proxy or stand-in for upstream's hosts); as it is when
    none matches."""
    table = rewrite or {}
    best = max((p for p in table if url.startswith(p)), key=len, default="")
    return table[best] + url[len(best) :] if best else url
