"""decice-scheduler entry point.

The placement core (state cache, snapshots, filter/score plugins, one
scheduling cycle) is in place; the API loop (list+watch sync, binder, audit,
metrics) is not yet, so this command validates its configuration and says so.
"""

from __future__ import annotations

import argparse
import sys

from decice_scheduler.profile import Profile, load_profile


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="decice-scheduler", description=__doc__)
    parser.add_argument("--kubeconfig", help="kubeconfig of the cluster to schedule for")
    parser.add_argument("--scheduler-name", default="decice-scheduler")
    parser.add_argument("--qps", type=float, default=50.0)
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--metrics-port", type=int, default=10261)
    parser.add_argument("--leader-elect", action="store_true")
    parser.add_argument("--config", help="YAML file: plugins and weights")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        profile = load_profile(args.config) if args.config else Profile.default()
    except (OSError, ValueError) as exc:
        print(f"decice-scheduler: {args.config}: {exc}", file=sys.stderr)
        return 2
    print(
        f"decice-scheduler: profile ok ({len(profile.filters)} filters, "
        f"{len(profile.scores)} scores); the API loop (sync, binder, audit) is not "
        "implemented yet: not scheduling",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
