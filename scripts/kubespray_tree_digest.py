#!/usr/bin/env python3
"""Print the tree sha256 of Kubespray archives or checkouts (docs/kubespray.md, "tree sha256").

    scripts/kubespray_tree_digest.py ../shared/mirror/kubespray/kubespray-v2.29.1.tar.gz
    scripts/kubespray_tree_digest.py --check ARCHIVE   # exit 1 unless it equals the pin

An archive is extracted with the same checks decice applies before a run (into a
temporary directory, removed afterwards); a directory is digested as it is (a top-level
``.git`` is left out). The figure is what ``decice_versions.kubespray.tree_sha256`` in
ansible_collections/decice/hybrid/roles/common/vars/main/versions.yml pins. Exit 0 ok, 1
mismatch (with --check), 2 unreadable or unsafe input.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))

from decice import versions
from decice.kubespray import tree


def digest_of(path: Path) -> str:
    """Tree sha256 of a directory as it is, or of an archive after a checked extraction."""
    if path.is_dir():
        return tree.digest(path)
    with tempfile.TemporaryDirectory(prefix="kubespray-tree-") as scratch:
        return tree.digest(tree.unpack(path, Path(scratch)).top)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("paths", nargs="+", type=Path, help="archive (.tar.gz) or directory")
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare with decice_versions.kubespray.tree_sha256 (exit 1 on a mismatch)",
    )
    args = parser.parse_args(argv)
    pinned = str(versions.pinned()["kubespray"].get("tree_sha256") or "")
    status = 0
    for path in args.paths:
        try:
            found = digest_of(path)
        except (tree.TreeError, OSError) as exc:
            print(f"{path}: {exc}", file=sys.stderr)
            return 2
        print(f"{found}  {path}")
        if args.check and found != pinned:
            print(f"{path}: tree sha256 {found} is not the pinned {pinned or '(none)'}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
