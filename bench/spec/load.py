"""Spec load time: decice's YAML loader on libyaml vs pure Python, 1k/10k/30k hosts (not a test).

    .venv/bin/python bench/spec/load.py [--hosts 1000 10000 30000] [--runs 3]

For each host count it writes a static-target spec (one control-plane host, the rest
workers, each with a name, an address and roles) and times, in one process:

- ``yamlpos.load`` with libyaml's parser (``yaml.CSafeLoader``, what decice uses when
  it is installed) and with PyYAML's pure-Python parser (``yaml.SafeLoader``);
- ``spec.parse``: that load (libyaml) plus the whole validation, what every command
  pays before it starts.

Prints one JSON line per host count: the fastest of ``--runs`` runs in seconds (CPU
time of this process, so other work on the machine inflates it less than the wall
clock), the text size and the 1-minute load average at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable

import yaml

from decice import spec, yamlpos


def spec_text(hosts: int) -> str:
    lines = ["name: bench", "target: static", "hosts:"]
    for index in range(hosts):
        roles = "[control_plane, etcd]" if index == 0 else "[worker]"
        address = f"10.{index // 65536}.{index // 256 % 256}.{index % 256}"
        lines += [f"  - name: node{index}", f"    address: {address}", f"    roles: {roles}"]
    return "\n".join(lines) + "\n"


def fastest(runs: int, work: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return round(best, 3)


def measure(hosts: int, runs: int) -> dict[str, object]:
    text = spec_text(hosts)
    return {
        "hosts": hosts,
        "bytes": len(text.encode()),
        "load_libyaml_s": fastest(runs, lambda: yamlpos.load(text)),
        "load_pure_python_s": fastest(runs, lambda: yamlpos.load(text, loader=yaml.SafeLoader)),
        "spec_parse_s": fastest(runs, lambda: spec.parse(text, "bench.yaml")),
        "load1": round(os.getloadavg()[0], 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1000, 10000, 30000])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if not getattr(yaml, "__with_libyaml__", False):
        print("PyYAML here is built without libyaml: nothing to compare", file=sys.stderr)
        return 1
    for hosts in args.hosts:
        print(json.dumps(measure(hosts, args.runs)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
