"""decice-scheduler: the bundled scheduler's process.

Lists and watches nodes and pods of the cluster, schedules the pods whose
``spec.schedulerName`` is ``--scheduler-name``, binds them, audits its state, serves
metrics. All state is rebuilt from the API at start. SIGTERM/SIGINT stop it cleanly;
SIGUSR1 runs a drift audit.

The metrics/debug server listens on 127.0.0.1. Another --metrics-host needs a debug
token (--debug-token-file, a 0600 file; or the environment variable
DECICE_SCHEDULER_DEBUG_TOKEN), which /debug/state and POST /debug/audit then require
as "Authorization: Bearer <token>"; /metrics, /healthz and /readyz stay open.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from dataclasses import fields
from typing import TYPE_CHECKING

from decice_scheduler.debugaccess import TOKEN_ENV, load_token, require_token_off_loopback
from decice_scheduler.events.writer import QUEUE_SIZE
from decice_scheduler.profile import Profile, load_profile

if TYPE_CHECKING:
    from decice_scheduler.scores import ScoreSettings


class _PrintVersion(argparse.Action):
    """--version: looks the version up only when given."""

    def __init__(self, option_strings: list[str], dest: str, **_kwargs: object) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print the version"
        )

    def __call__(self, parser: argparse.ArgumentParser, *_args: object, **_kwargs: object) -> None:
        from decice_scheduler import version

        print(f"decice-scheduler {version()}")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    # no abbreviations: "--debug-token <secret>" must not pass for --debug-token-file
    parser = argparse.ArgumentParser(
        prog="decice-scheduler",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--version", action=_PrintVersion)
    parser.add_argument("--kubeconfig", help="kubeconfig of the cluster to schedule for")
    parser.add_argument("--scheduler-name", default="decice-scheduler")
    parser.add_argument("--qps", type=float, default=50.0, help="binds per second (token rate)")
    parser.add_argument("--burst", type=int, default=100, help="token bucket size for binds")
    parser.add_argument(
        "--metrics-port", type=int, default=10261, help="/metrics, /healthz, /readyz; 0 = off"
    )
    parser.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address of the metrics/debug server; a non-loopback one needs a debug token",
    )
    parser.add_argument(
        "--debug-token-file",
        metavar="PATH",
        help="file (mode 0600, owned by this user or root) with the bearer token that "
        f"/debug/* then require; default: the environment variable {TOKEN_ENV}",
    )
    parser.add_argument(
        "--debug-audit-min-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="POST /debug/audit runs at most once per this many seconds (429 inside); 0 = no limit",
    )
    parser.add_argument("--leader-elect", action="store_true", help="hold a Lease to schedule")
    parser.add_argument("--lock-namespace", default="kube-system", help="namespace of the Lease")
    parser.add_argument("--leader-elect-lease-duration", type=float, default=15.0)
    parser.add_argument("--leader-elect-renew-deadline", type=float, default=10.0)
    parser.add_argument("--leader-elect-retry-period", type=float, default=2.0)
    parser.add_argument("--config", help="YAML file: plugins and weights")
    parser.add_argument(
        "--audit-interval", type=float, default=300.0, help="seconds between audits; 0 = off"
    )
    parser.add_argument(
        "--watch-timeout", type=int, default=60, help="server-side watch timeout (seconds)"
    )
    parser.add_argument("--bind-concurrency", type=int, default=32)
    parser.add_argument(
        "--events",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write Scheduled and FailedScheduling events (off the scheduling loop, "
        "aggregated, rate-limited at --qps/--burst); --no-events writes none",
    )
    parser.add_argument(
        "--event-queue-size",
        type=int,
        default=QUEUE_SIZE,
        help="events waiting to be written; more are dropped (counted)",
    )
    parser.add_argument(
        "--event-qps", type=float, default=5.0, help="new FailedScheduling events per second"
    )
    parser.add_argument(
        "--event-burst", type=int, default=25, help="FailedScheduling events saved up"
    )
    parser.add_argument(
        "--placement-scores",
        action="store_true",
        help="publish an OCM AddOnPlacementScore (cluster.open-cluster-management.io/v1alpha1) "
        "with node- and cluster-scope cpu/memory/nvidia.com/gpu headroom scores",
    )
    parser.add_argument("--placement-scores-namespace", default="default")
    parser.add_argument("--placement-scores-name", default="resource-usage-score")
    parser.add_argument(
        "--placement-scores-interval",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="scores are computed at most this often and written only when one changed",
    )
    parser.add_argument(
        "--placement-scores-range",
        action="append",
        default=[],
        metavar="RESOURCE=MIN:MAX",
        help="normalisation range (cpu in cores, memory in MiB, nvidia.com/gpu in devices; "
        "defaults cpu=0:100, memory=0:1048576, nvidia.com/gpu=0:20); repeatable",
    )
    parser.add_argument("--max-backoff", type=float, default=10.0)
    parser.add_argument("--log-level", default="INFO")
    return parser


def _score_settings(args: argparse.Namespace) -> ScoreSettings | None:
    from decice_scheduler.scores import DEFAULT_RANGES, ScoreSettings, parse_range

    ranges = dict(DEFAULT_RANGES)
    for text in args.placement_scores_range:
        resource, low, high = parse_range(text)
        ranges[resource] = (low, high)
    if not args.placement_scores:
        return None
    return ScoreSettings(
        namespace=args.placement_scores_namespace,
        name=args.placement_scores_name,
        interval=args.placement_scores_interval,
        ranges=ranges,
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        profile = load_profile(args.config) if args.config else Profile.default()
    except (OSError, ValueError, KeyError) as exc:
        print(f"decice-scheduler: {args.config}: {exc}", file=sys.stderr)
        return 2
    if not args.kubeconfig:
        print("decice-scheduler: --kubeconfig is required", file=sys.stderr)
        return 2
    if args.qps <= 0 or args.burst < 1:
        print("decice-scheduler: --qps must be > 0 and --burst >= 1", file=sys.stderr)
        return 2
    if args.debug_audit_min_interval < 0:
        print("decice-scheduler: --debug-audit-min-interval must be >= 0", file=sys.stderr)
        return 2
    try:
        scores = _score_settings(args)
    except ValueError as exc:
        print(f"decice-scheduler: --placement-scores-range {exc}", file=sys.stderr)
        return 2
    if args.placement_scores_interval <= 0 or args.event_queue_size < 1:
        print(
            "decice-scheduler: --placement-scores-interval must be > 0 and --event-queue-size >= 1",
            file=sys.stderr,
        )
        return 2
    try:
        token = load_token(args.debug_token_file, os.environ)
        if args.metrics_port:
            require_token_off_loopback(args.metrics_host, token)
    except ValueError as exc:
        print(f"decice-scheduler: {exc}", file=sys.stderr)
        return 2

    from decice_scheduler.app import Options, Scheduler
    from decice_scheduler.logsetup import configure_logging

    configure_logging(args.log_level)
    # every option whose flag has the field's name, then those named otherwise
    same = {f.name: getattr(args, f.name) for f in fields(Options) if hasattr(args, f.name)}
    options = Options(
        **{
            **same,
            "debug_token": token,
            "debug_audit_window": args.debug_audit_min_interval,
            "lease_duration": args.leader_elect_lease_duration,
            "renew_deadline": args.leader_elect_renew_deadline,
            "retry_period": args.leader_elect_retry_period,
            "placement_scores": scores,
        }
    )
    try:
        scheduler = Scheduler(options, profile)
    except (OSError, ValueError) as exc:
        print(f"decice-scheduler: {args.kubeconfig}: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(scheduler.run())


if __name__ == "__main__":
    sys.exit(main())
