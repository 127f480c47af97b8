"""The command line the simple benchmarks share (bench/interlink/latency.py,
bench/interlink/pilot.py, bench/ansible/poll.py): one option per setting."""

from __future__ import annotations

import argparse


def options(doc: str, **defaults: float | bool) -> argparse.Namespace:
    """This process's command line for the benchmark ``doc`` describes (its first line is
    the help's description): one ``--NAME`` per keyword (``_`` written ``-``) of its
    default's type, and a flag for a ``False`` default."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    for name, default in defaults.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(flag, action="store_true")
        else:
            parser.add_argument(flag, type=type(default), default=default)
    return parser.parse_args()
