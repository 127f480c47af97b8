"""Benchmark (not a test): Ansible settings side by side on a lab `decice up` and `decice reset`.

    .venv/bin/python bench/ansible/speedups.py [--nodes 2] [--rounds 2]
        [--variants baseline,free,mitogen,factcache] [--keep]

Each variant gets a plain lab of its own (``decice.lab``, N podman nodes, no SLURM, made
before the first round and not timed) and a spec that keeps prepare to per-node settings:
``prepare_kernel_wide: false``, ``prepare_swap_off: false``, no kernel modules (lab nodes
share this machine's kernel). A run of a variant is ``decice up --only
preflight,baseline,prepare`` then ``decice reset --yes``, each timed; both must exit 0.
Before every up the controller's baselines of the lab are removed with their directory,
and the emptied prepare record directory (the reset before it verified the nodes against
the baselines), so every up is a first up on clean nodes and takes its snapshot; each run
checks that it is equivalent to the lab's first one: the same task counts per host
(ok/changed/skipped/...) and the same baseline sections as the first up took.

The variants differ only in the environment of the decice process (ansible-runner hands
os.environ on to ansible-playbook; ``decice.runner.ansible_env`` adds pipelining, forks 25,
...; every play sets ``gather_facts: false`` and ssh masters persist 60 s, in a directory
per run's inventory):

- ``baseline``: decice's settings with Ansible's own linear strategy;
- ``free``: ``ANSIBLE_STRATEGY=free``;
- ``mitogen``: ``ANSIBLE_STRATEGY_PLUGINS=<ansible_mitogen>/plugins/strategy``,
  ``ANSIBLE_STRATEGY=mitogen_linear`` (needs the ``mitogen`` package in this venv);
- ``factcache``: ``ANSIBLE_CACHE_PLUGIN=jsonfile``, ``ANSIBLE_CACHE_PLUGIN_CONNECTION=<a dir
  of the variant, kept over the rounds>``, ``ANSIBLE_GATHERING=smart``.

Rounds alternate the variants (A B C D A B C D ...), so the machine's drift hits all alike.
Measured per command: wall clock, the controller's CPU (decice, ansible-playbook and its
workers, ssh clients: this process's children) and the nodes' CPU (the containers'
cgroups). On a shared machine the nodes' CPU is on the wall clock too.

Prints one JSON line per run (both commands, the load average before and after), a failed
run with the end of its stderr and the run record's failures; then per command the median
of each variant and the median over the rounds of its ratio to baseline's run of the same
round. The labs are destroyed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decice import lab
from decice.paths import Subpath

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from labcpu import children_cpu, node_cpu

VARIANTS = ("baseline", "free", "mitogen", "factcache")
COMMANDS = ("up", "reset")
UP_ARGS = ("up", "--only", "preflight,baseline,prepare")
RESET_ARGS = ("reset", "--yes")
TIMEOUT_S = 1800.0
STDERR_TAIL = 1500
# settings a variant sets: never inherited from the caller's environment
OWN_SETTINGS = (
    "ANSIBLE_STRATEGY",
    "ANSIBLE_STRATEGY_PLUGINS",
    "ANSIBLE_CACHE_PLUGIN",
    "ANSIBLE_CACHE_PLUGIN_CONNECTION",
    "ANSIBLE_CACHE_PLUGIN_PREFIX",
    "ANSIBLE_CACHE_PLUGIN_TIMEOUT",
    "ANSIBLE_GATHERING",
)
SPEC = """\
name: {name}
target: lab
lab:
  name: {name}
  nodes: {nodes}
allocation:
  vars:
    prepare_kernel_wide: false
    restore_kernel_wide: false
    prepare_swap_off: false
    prepare_modules: []
"""


class VariantUnavailableError(Exception):
    """A variant cannot be set up on this machine (the message says why)."""


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def mitogen_strategy_dir() -> Path:
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None or not spec.submodule_search_locations:
        raise VariantUnavailableError(
            f"ansible_mitogen is not importable by {sys.executable}: "
            "`.venv/bin/python -m pip install mitogen` first (not a decice dependency)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "plugins" / "strategy"


def variant_env(variant: str, cache_dir: Path) -> dict[str, str]:
    """What ``variant`` adds to the environment of the decice process."""
    if variant == "baseline":
        return {}
    if variant == "free":
        return {"ANSIBLE_STRATEGY": "free"}
    if variant == "mitogen":
        return {
            "ANSIBLE_STRATEGY_PLUGINS": str(mitogen_strategy_dir()),
            "ANSIBLE_STRATEGY": "mitogen_linear",
        }
    if variant == "factcache":
        return {
            "ANSIBLE_CACHE_PLUGIN": "jsonfile",
            "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(cache_dir),
            "ANSIBLE_GATHERING": "smart",
        }
    raise ValueError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass
class Lab:
    """One variant's lab, its decice work directory and what its first up looked like."""

    variant: str
    name: str
    work: Path
    nodes: int
    containers: list[str] = field(default_factory=list)
    first_tasks: dict[str, dict[str, int]] | None = None
    first_baselines: dict[str, Any] | None = None

    state = Subpath("work", ".decice")
    cache_dir = Subpath("work", "factcache")

    def create(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "decice.yaml").write_text(SPEC.format(name=self.name, nodes=self.nodes))
        info = lab.create(self.name, self.nodes, False, self.state)
        self.containers = [n.container for n in info.nodes]

    def destroy(self) -> None:
        lab.destroy(self.name, self.state)

    def recreate(self) -> None:
        """A fresh lab (after a run left the old one in an unknown state)."""
        self.destroy()
        shutil.rmtree(self.state, ignore_errors=True)
        self.first_tasks = self.first_baselines = None
        self.create()

    def forget_baselines(self) -> None:
        """Remove the controller's baselines and its (empty) prepare record directory: the
        next up makes both directories and takes each snapshot, as the lab's first up did."""
        shutil.rmtree(self.state / "baseline", ignore_errors=True)
        with contextlib.suppress(OSError):
            (self.state / "prepare").rmdir()  # not empty: the reset left a record

    def baselines(self) -> dict[str, Any]:
        """The sections of each host's baseline (``taken_at`` left out)."""
        out: dict[str, Any] = {}
        for path in sorted((self.state / "baseline").glob("*.json")):
            data = json.loads(path.read_text())
            out[path.stem] = data.get("sections", {})
        return out


def decice(work: Path, containers: list[str], env: dict[str, str], *args: str) -> dict[str, Any]:
    """Run ``decice ARGS --json`` in ``work``: wall clock, CPU, exit code, record, stderr."""
    cpu0, node0, load0 = children_cpu(), node_cpu(containers), loadavg()
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "decice", *args, "--json"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # decice stops its ansible-playbook and workers
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        err += f"\n(bench: timed out after {TIMEOUT_S:.0f} s)"
    wall = time.monotonic() - t0
    try:
        record: dict[str, Any] = json.loads(out)
    except json.JSONDecodeError:
        record = {}
    result: dict[str, Any] = {
        "rc": proc.returncode,
        "wall_s": round(wall, 2),
        "controller_cpu_s": round(children_cpu() - cpu0, 2),
        "nodes_cpu_s": round(node_cpu(containers) - node0, 2),
        "load_before_after": [load0, loadavg()],
        "status": record.get("status"),
        "phases_s": {p["name"]: p.get("seconds") for p in record.get("phases", [])},
        "tasks": tasks_per_host(record),
    }
    if proc.returncode != 0:
        result["failures"] = [
            f"{f.get('phase', '')}: {f.get('host', '')}: {f.get('message', '')}"[:STDERR_TAIL]
            for f in record.get("failures", [])
        ]
        result["stderr_tail"] = err[-STDERR_TAIL:]
    return result


def tasks_per_host(record: dict[str, Any]) -> dict[str, dict[str, int]]:
    """The run's task counts per host (ok, changed, skipped, ...), zero counts left out."""
    return {
        host: {k: v for k, v in counts.items() if v}
        for host, counts in sorted((record.get("stats") or {}).items())
    }


def base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in OWN_SETTINGS}


def one_run(bench_lab: Lab, round_no: int) -> dict[str, Any]:
    """up then reset with the variant's settings; both must exit 0."""
    row: dict[str, Any] = {"round": round_no, "variant": bench_lab.variant}
    try:
        extra = variant_env(bench_lab.variant, bench_lab.cache_dir)
    except VariantUnavailableError as exc:
        row.update(ok=False, error=str(exc))
        return row
    env = {**base_env(), **extra}
    bench_lab.forget_baselines()
    up = decice(bench_lab.work, bench_lab.containers, env, *UP_ARGS)
    baselines = bench_lab.baselines()
    reset = decice(bench_lab.work, bench_lab.containers, env, *RESET_ARGS)
    row["up"], row["reset"] = up, reset
    row["ok"] = up["rc"] == 0 and reset["rc"] == 0
    if up["rc"] == 0:
        if bench_lab.first_tasks is None:
            bench_lab.first_tasks, bench_lab.first_baselines = up["tasks"], baselines
        row["up_same_tasks_as_first"] = up["tasks"] == bench_lab.first_tasks
        first = bench_lab.first_baselines or {}
        row["baseline_sections_unlike_first"] = sorted(
            f"{host}.{section}"
            for host in sorted(set(first) | set(baselines))
            for section in sorted(set(first.get(host, {})) | set(baselines.get(host, {})))
            if first.get(host, {}).get(section) != baselines.get(host, {}).get(section)
        )
    if bench_lab.variant == "factcache":
        row["factcache_files"] = sorted(p.name for p in bench_lab.cache_dir.glob("*"))
    if reset["rc"] != 0:
        repair(bench_lab, row)
    return row


def repair(bench_lab: Lab, row: dict[str, Any]) -> None:
    """After a failed reset: reset with the baseline's settings, else a fresh lab."""
    env = base_env()
    again = decice(bench_lab.work, bench_lab.containers, env, *RESET_ARGS)
    if again["rc"] == 0:
        row["repair"] = "reset with baseline settings: ok"
        return
    row["repair"] = f"reset with baseline settings failed (rc {again['rc']}): lab recreated"
    bench_lab.recreate()


def median_ratio(rows: list[dict[str, Any]], variant: str, command: str, key: str) -> float | None:
    """Median over the rounds of variant/baseline for ``key`` (rounds where both were ok)."""
    by_round: dict[int, dict[str, float]] = {}
    for row in rows:
        if row.get("ok"):
            by_round.setdefault(row["round"], {})[row["variant"]] = row[command][key]
    ratios = [
        runs[variant] / runs["baseline"]
        for runs in by_round.values()
        if variant in runs and runs.get("baseline")
    ]
    return round(statistics.median(ratios), 2) if ratios else None


def summary(rows: list[dict[str, Any]], variants: list[str]) -> list[dict[str, Any]]:
    out = []
    for command in COMMANDS:
        for variant in variants:
            ok = [r for r in rows if r["variant"] == variant and r.get("ok")]
            line: dict[str, Any] = {
                "command": command,
                "variant": variant,
                "runs": sum(r["variant"] == variant for r in rows),
                "ok": len(ok),
            }
            for key in ("wall_s", "controller_cpu_s", "nodes_cpu_s"):
                values = [r[command][key] for r in ok]
                line[key] = round(statistics.median(values), 2) if values else None
                line[key.removesuffix("_s") + "_ratio"] = median_ratio(rows, variant, command, key)
            out.append(line)
    return out


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def print_table(lines: list[dict[str, Any]]) -> None:
    print(
        "| command | variant | ok/runs | wall s | wall ratio | controller CPU s | ratio "
        "| nodes CPU s | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for line in lines:
        cells = [
            line["command"],
            line["variant"],
            f"{line['ok']}/{line['runs']}",
            *(
                _cell(line[k])
                for k in (
                    "wall_s",
                    "wall_ratio",
                    "controller_cpu_s",
                    "controller_cpu_ratio",
                    "nodes_cpu_s",
                    "nodes_cpu_ratio",
                )
            ),
        ]
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--keep", action="store_true", help="keep the labs")
    args = parser.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for variant in variants:
        if variant not in VARIANTS:
            parser.error(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
    if variants[0] != "baseline" and "baseline" in variants:
        variants.remove("baseline")
        variants.insert(0, "baseline")
    if "mitogen" in variants:
        try:
            mitogen_strategy_dir()
        except VariantUnavailableError as exc:
            print(f"mitogen: {exc}", file=sys.stderr)

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=Path(__file__).resolve().parent,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    print(
        json.dumps(
            {
                "commit": commit,
                "nodes": args.nodes,
                "rounds": args.rounds,
                "variants": variants,
                "ansible_core": package_version("ansible-core"),
                "mitogen": package_version("mitogen"),
                "loadavg": loadavg(),
            }
        ),
        flush=True,
    )
    root = Path(tempfile.mkdtemp(prefix="bench-ans-", dir="/tmp"))
    tag = os.getpid() % 10000
    labs = [Lab(v, f"bench-ans-{v}-{tag}", root / v, args.nodes) for v in variants]
    rows: list[dict[str, Any]] = []
    loads: list[float] = []
    try:
        for bench_lab in labs:
            t0 = time.monotonic()
            bench_lab.create()
            print(
                json.dumps(
                    {
                        "lab": bench_lab.name,
                        "containers": bench_lab.containers,
                        "create_s": round(time.monotonic() - t0, 1),
                    }
                ),
                flush=True,
            )
        for round_no in range(1, args.rounds + 1):
            for bench_lab in labs:
                row = one_run(bench_lab, round_no)
                rows.append(row)
                for command in COMMANDS:
                    for load in row.get(command, {}).get("load_before_after", []):
                        loads.append(float(load.split()[0]))
                print(json.dumps(row), flush=True)
    finally:
        if not args.keep:
            for bench_lab in labs:
                bench_lab.destroy()
            shutil.rmtree(root, ignore_errors=True)
    lines = summary(rows, variants)
    for line in lines:
        print(json.dumps(line))
    for row in rows:
        if not row.get("ok"):
            print(f"FAILED: round {row['round']} {row['variant']}: see its JSON line above")
    print()
    print(
        f"{args.nodes} nodes, {args.rounds} rounds, commit {commit}; medians of the ok runs; "
        "ratio: median over the rounds of variant / baseline of the same round"
    )
    print_table(lines)
    if loads:
        print(
            f"load average (1 min) over the runs: {min(loads):.2f}-{max(loads):.2f}; "
            f"/proc/loadavg now: {loadavg()}"
        )


if __name__ == "__main__":
    main()
