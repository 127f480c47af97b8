#!/usr/bin/env python3
"""Print Helm charts' content pins, compare two charts, or write the pins into versions.yml.

    scripts/chart_content_digest.py CHART.tgz ...       # "<pin>  <path>  (<name> <version>, N)"
    scripts/chart_content_digest.py --diff A.tgz B.tgz  # which files differ; exit 1 if any
    scripts/chart_content_digest.py --write MIRROR      # set every artifact's content_sha256
    scripts/chart_content_digest.py --check MIRROR      # exit 1 unless they are set so

The content pin (docs/addons.md "Content pins"; plugins/module_utils/chartpin.py) is what
the add-on engine checks a chart against when its bytes are not the mirror copy's:
upstream's own packaged tgz, an OCI pull, a repackaged directory. ``--write`` reads each
``artifact.file`` of the pinned versions (ansible_collections/decice/hybrid/roles/common/
vars/main/versions.yml) below the mirror and rewrites only the ``content_sha256:`` line of
that artifact (added below ``sha256:`` when missing), keeping every comment. Exit 0 ok, 1
mismatch or differences, 2 unreadable.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ansible_collections.decice.hybrid.plugins.module_utils import chartpin  # noqa: E402

VERSIONS = REPO / "ansible_collections/decice/hybrid/roles/common/vars/main/versions.yml"
_FILE = re.compile(r'^(\s+)file: "(charts/[^"]+\.tgz)"')
_PIN = re.compile(r"^(\s+)(content_sha256|sha256): ")


def show(paths: list[Path]) -> int:
    for path in paths:
        c = chartpin.file_content(str(path))
        print(f"{c.digest}  {path}  ({c.name} {c.version}, {len(c.files)} files)")
    return 0


def diff(a: Path, b: Path) -> int:
    left, right = chartpin.file_content(str(a)).files, chartpin.file_content(str(b)).files
    lines = [f"only in {a}: {p}" for p in sorted(left.keys() - right.keys())]
    lines += [f"only in {b}: {p}" for p in sorted(right.keys() - left.keys())]
    lines += [f"differs: {p}" for p in sorted(left.keys() & right.keys()) if left[p] != right[p]]
    print("\n".join(lines) or "same content")
    return 1 if lines else 0


def pins_in(text: str) -> dict[str, int]:
    """artifact file -> index of the line holding its ``file:``."""
    return {m.group(2): i for i, line in enumerate(text.splitlines()) if (m := _FILE.match(line))}


def rewritten(text: str, mirror: Path) -> tuple[str, list[str]]:
    """versions.yml with each mirrored artifact's content_sha256 set; and what changed."""
    lines = text.splitlines(keepends=True)
    changed: list[str] = []
    for file, at in sorted(pins_in(text).items(), key=lambda kv: -kv[1]):
        path = mirror / file
        if not path.is_file():
            continue
        digest = chartpin.file_content(str(path)).digest
        indent = _FILE.match(lines[at]).group(1)  # type: ignore[union-attr]
        new = f'{indent}content_sha256: "{digest}"\n'
        block = range(at + 1, min(at + 6, len(lines)))
        keys = {i: m.group(2) for i in block if (m := _PIN.match(lines[i]))}
        existing = [i for i, key in keys.items() if key == "content_sha256"]
        if existing:
            if lines[existing[0]] != new:
                lines[existing[0]] = new
                changed.append(file)
            continue
        sha = next((i for i, key in keys.items() if key == "sha256"), at)
        lines.insert(sha + 1, new)
        changed.append(file)
    return "".join(lines), sorted(changed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--diff", action="store_true", help="compare two charts file by file")
    group.add_argument("--write", metavar="MIRROR", type=Path, help="set the pins in versions.yml")
    group.add_argument("--check", metavar="MIRROR", type=Path, help="exit 1 unless they are set")
    parser.add_argument("paths", nargs="*", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.diff:
            if len(args.paths) != 2:
                parser.error("--diff takes two charts")
            return diff(*args.paths)
        if args.write or args.check:
            mirror = args.write or args.check
            text, changed = rewritten(VERSIONS.read_text(), mirror)
            for file in changed:
                print(f"{'set' if args.write else 'not pinned as the mirror has it'}: {file}")
            if args.write and changed:
                VERSIONS.write_text(text)
            return 1 if args.check and changed else 0
        if not args.paths:
            parser.error("name a chart, or --write/--check MIRROR")
        return show(args.paths)
    except (OSError, chartpin.ChartError) as exc:
        print(f"chart_content_digest: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
