"""Well-known locations: the bundled collection, the user cache, the state dir."""

from __future__ import annotations

import os
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def collection_root() -> Path:
    """Directory that holds ``ansible_collections/`` (bundled in the wheel or the checkout)."""
    bundled = _PKG / "_data"
    if (bundled / "ansible_collections" / "decice" / "hybrid").is_dir():
        return bundled
    checkout = _PKG.parent.parent
    if (checkout / "ansible_collections" / "decice" / "hybrid").is_dir():
        return checkout
    raise FileNotFoundError("the decice.hybrid collection is missing from this installation")


def collection_dir() -> Path:
    """The ``decice.hybrid`` collection directory."""
    return collection_root() / "ansible_collections" / "decice" / "hybrid"


def versions_file() -> Path:
    """The one file that pins every component version (read by CLI and collection)."""
    return collection_dir() / "vars" / "versions.yml"


def addons_file() -> Path:
    """The add-on registry (names, order, namespaces, dependencies, targets)."""
    return collection_dir() / "vars" / "addons.yml"


def cache_dir() -> Path:
    """User cache for slow-to-build artifacts.

    ``$DECICE_CACHE_DIR``, else ``$XDG_CACHE_HOME/decice``, else ``~/.cache/decice``.
    """
    explicit = os.environ.get("DECICE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "decice"
