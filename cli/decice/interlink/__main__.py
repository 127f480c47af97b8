"""decice-interlink-slurm serve | cancel-all (see docs/interlink.md)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import shlex
import shutil
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from decice import __version__
from decice.interlink import slurm
from decice.interlink.errors import PluginError, UsageError
from decice.interlink.jobscript import Defaults, Runtime
from decice.interlink.pilot import PilotConfig
from decice.interlink.plugin import Config, Plugin
from decice.interlink.podspec import NAME_RE, SizeDefaults
from decice.interlink.server import (
    Listen,
    check_private,
    check_tcp_access,
    make_server,
    parse_listen,
    read_token,
)
from decice.interlink.tunnel import Tunnel, TunnelSpec, parse_target
from decice_kube import quantity

log = logging.getLogger("decice.interlink")

EXIT_USAGE = 2
SAFE_DIR = re.compile(r"^/[A-Za-z0-9_.,+@=/-]*\Z")  # goes into #SBATCH lines and scripts


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="decice-interlink-slurm",
        description="interLink 0.6.2 plugin running pods as SLURM jobs, without root.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the plugin API")
    serve.add_argument("--data-dir", required=True, type=Path, help="on a shared file system")
    serve.add_argument("--listen", help="tcp:HOST:PORT or unix:PATH (default unix:D/plugin.sock)")
    serve.add_argument(
        "--token-file",
        type=Path,
        help="bearer token file (0600); needed for tcp on a routable address",
    )
    serve.add_argument("--partition", default="", help="SLURM partition (default: SLURM's)")
    serve.add_argument("--account", default="", help="SLURM account (default: none)")
    serve.add_argument("--runtime", choices=["auto", "apptainer", "bare"], default="auto")
    serve.add_argument(
        "--default-cpu", default="1", help="cpus of a pod that sets none (default 1)"
    )
    serve.add_argument(
        "--default-memory",
        default="",
        help="memory of a pod that sets none, e.g. 2Gi (default: the partition's default)",
    )
    serve.add_argument(
        "--mpi-launcher",
        default="mpiexec",
        help="what runs a pod's containers with slurm-job.vk.io/mpi-flags (default mpiexec; "
        "srun for SLURM's own)",
    )
    serve.add_argument(
        "--max-pods", type=int, default=1000, help="pods the node takes (ping), default 1000"
    )
    serve.add_argument("--pidfile", type=Path, help="written while serving, removed on exit")
    serve.add_argument(
        "--tunnel", metavar="USER@HOST[:PORT]", help="keep an ssh remote forward to this bastion"
    )
    serve.add_argument("--tunnel-key", type=Path, help="the tunnel's ssh private key (0600)")
    serve.add_argument("--tunnel-known-hosts", type=Path, help="the bastion's host key")
    serve.add_argument(
        "--tunnel-remote-port", type=int, default=3000, help="port on the bastion (default 3000)"
    )
    pilot = serve.add_argument_group('pilot mode (docs/interlink.md, "Pilot mode")')
    pilot.add_argument(
        "--mode",
        choices=["job", "pilot"],
        default="job",
        help="job: one SLURM job per pod (default); pilot: pods as steps of leased pilots",
    )
    pilot.add_argument("--pilot-nodes", type=int, help="nodes per pilot (default 1)")
    pilot.add_argument("--pilot-time", help="walltime per pilot (sbatch --time; default 1:00:00)")
    pilot.add_argument("--pilot-partition", help="partition (default: --partition)")
    pilot.add_argument("--pilot-account", help="account (default: --account)")
    pilot.add_argument("--max-pilots", type=int, help="pilots at most (default 1)")
    pilot.add_argument(
        "--idle-release", type=float, help="seconds a pilot without pods is kept (default 300)"
    )
    pilot.add_argument(
        "--withdraw",
        type=float,
        help="seconds before a pilot's walltime when it takes no new pods (default 60)",
    )
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    cancel = sub.add_parser("cancel-all", help="scancel every job of this data dir still queued")
    cancel.add_argument("--data-dir", required=True, type=Path)
    cancel.add_argument("--wait", type=float, default=30.0, help="seconds to wait until gone")
    return p


def _data_dir(path: Path) -> Path:
    full = path.expanduser().absolute()
    if not SAFE_DIR.match(str(full)):
        raise UsageError(
            f"--data-dir {full}: use a path of letters, digits and _.,+@=/- only "
            "(it goes into job scripts)"
        )
    return full


def detect_runtime(choice: str) -> Runtime:
    if choice == "bare":
        return Runtime("bare")
    for name in ("apptainer", "singularity"):
        found = shutil.which(name)
        if found:
            return Runtime("apptainer", found)
    if choice == "apptainer":
        raise UsageError("--runtime apptainer: neither apptainer nor singularity is on PATH")
    return Runtime("bare")


def _check_name(value: str, flag: str) -> str:
    if value and not NAME_RE.match(value):
        raise UsageError(f"{flag} {value!r}: letters, digits and _.+- only")
    return value


def _launcher(text: str) -> tuple[str, ...]:
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:
        raise UsageError(f"--mpi-launcher {text!r}: {exc}") from None
    if not words or words[0].startswith("-"):
        raise UsageError(f"--mpi-launcher {text!r}: give a command, e.g. mpiexec or srun")
    return words


def _size_defaults(cpu: str, memory: str) -> SizeDefaults:
    try:
        cpus = quantity.ceil(quantity.exact(cpu))
        memory_mb = quantity.ceil(quantity.exact(memory) / 2**20) if memory else 0
    except ValueError as exc:
        raise UsageError(f"--default-cpu/--default-memory: {exc}") from None
    if cpus < 1:
        raise UsageError(f"--default-cpu {cpu!r}: give at least 1")
    return SizeDefaults(cpus, memory_mb)


PILOT_FLAGS = (
    "pilot_nodes",
    "pilot_time",
    "pilot_partition",
    "pilot_account",
    "max_pilots",
    "idle_release",
    "withdraw",
)


def _pilot_config(args: argparse.Namespace, defaults: Defaults) -> PilotConfig | None:
    """--mode pilot's settings, checked; None in job mode (a pilot flag is then refused)."""
    given = {f: getattr(args, f) for f in PILOT_FLAGS if getattr(args, f) is not None}
    if args.mode != "pilot":
        if given:
            raise UsageError(f"--{next(iter(given)).replace('_', '-')} needs --mode pilot")
        return None
    config = PilotConfig.from_flags(given)
    if config.nodes < 1 or config.max_pilots < 1:
        raise UsageError("--pilot-nodes and --max-pilots: give at least 1")
    if not slurm.seconds(config.time):
        raise UsageError(
            f"--pilot-time {config.time!r}: give a SLURM time limit, e.g. 30:00 or 1-00:00:00"
        )
    if config.idle_release < 0 or config.withdraw < 0:
        raise UsageError("--idle-release and --withdraw: give seconds, 0 or more")
    return dataclasses.replace(
        config,
        partition=_check_name(args.pilot_partition or "", "--pilot-partition")
        or defaults.partition,
        account=_check_name(args.pilot_account or "", "--pilot-account") or defaults.account,
    )


def _check_pidfile(path: Path) -> None:
    """Refuse a pidfile naming a live process other than this one."""
    if path.is_file():
        try:
            pid = int(path.read_text().strip())
            os.kill(pid, 0)
        except (ValueError, ProcessLookupError):
            pass
        except PermissionError:
            raise UsageError(f"--pidfile {path}: process {path.read_text().strip()} runs") from None
        else:
            if pid != os.getpid():
                raise UsageError(f"--pidfile {path}: the plugin already runs as pid {pid}")


def _write_pidfile(path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{os.getpid()}\n")
    tmp.replace(path)


def _tunnel(args: argparse.Namespace, listen: Listen) -> TunnelSpec | None:
    """The --tunnel flags checked: a unix listen, a private key, a host key file, ssh."""
    given = [f for f in ("tunnel_key", "tunnel_known_hosts") if getattr(args, f) is not None]
    if not args.tunnel:
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')} needs --tunnel")
        return None
    user, host, port = parse_target(args.tunnel)
    if listen.kind != "unix":
        raise UsageError(
            "--tunnel forwards to the plugin's unix socket: use --listen unix:PATH (the default)"
        )
    if args.tunnel_key is None or args.tunnel_known_hosts is None:
        raise UsageError("--tunnel needs --tunnel-key and --tunnel-known-hosts")
    check_private(args.tunnel_key, "--tunnel-key")
    if not args.tunnel_known_hosts.is_file():
        raise UsageError(f"--tunnel-known-hosts {args.tunnel_known_hosts}: not a file")
    if not 0 < args.tunnel_remote_port < 65536:
        raise UsageError(f"--tunnel-remote-port {args.tunnel_remote_port}: give 1-65535")
    if shutil.which("ssh") is None:
        raise UsageError("--tunnel: no ssh client on PATH")
    return TunnelSpec(
        user,
        host,
        port,
        args.tunnel_key.absolute(),
        args.tunnel_known_hosts.absolute(),
        args.tunnel_remote_port,
        listen.path,
    )


def serve(args: argparse.Namespace) -> int:
    data_dir = _data_dir(args.data_dir)
    listen: Listen = parse_listen(args.listen or f"unix:{data_dir / 'plugin.sock'}")
    tunnel_spec = _tunnel(args, listen)
    token = read_token(args.token_file) if args.token_file else None
    check_tcp_access(listen, token)  # before anything is made on disk
    runtime = detect_runtime(args.runtime)
    defaults = Defaults(
        partition=_check_name(args.partition, "--partition"),
        account=_check_name(args.account, "--account"),
        mpi_launcher=_launcher(args.mpi_launcher),
    )
    sizes = _size_defaults(args.default_cpu, args.default_memory)
    if args.pidfile:
        _check_pidfile(args.pidfile)
    if args.max_pods < 1:
        raise UsageError(f"--max-pods {args.max_pods}: give a positive number")
    pilot = _pilot_config(args, defaults)
    plugin = Plugin(Config(data_dir, runtime, defaults, args.max_pods, sizes, pilot))
    plugin.ensure_dirs()
    server = make_server(plugin, listen, token)
    if args.pidfile:
        _write_pidfile(args.pidfile)

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping (jobs keep running; cancel-all cancels them)", signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info(
        "serving on %s, data dir %s, runtime %s%s, %s",
        listen,
        data_dir,
        runtime.kind,
        ", bearer token required" if token else "",
        "job mode"
        if pilot is None
        else f"pilot mode ({pilot.nodes} nodes x {pilot.time}, at most {pilot.max_pilots})",
    )
    tunnel = Tunnel(tunnel_spec) if tunnel_spec is not None else None
    plugin.start()
    try:
        if tunnel is not None:
            tunnel.start()
        server.serve_forever(poll_interval=0.2)
    finally:
        plugin.stop()
        if tunnel is not None:
            tunnel.stop()
        server.server_close()
        if listen.kind == "unix":
            Path(listen.path).unlink(missing_ok=True)
        if args.pidfile:
            args.pidfile.unlink(missing_ok=True)
    log.info("stopped")
    return 0


def cancel_all(args: argparse.Namespace) -> int:
    data_dir = _data_dir(args.data_dir)
    plugin = Plugin(Config(data_dir, Runtime("bare"), Defaults()))
    cancelled = plugin.cancel_all(wait=args.wait)
    for jid in cancelled:
        print(f"cancelled SLURM job {jid}")
    if not cancelled:
        print("no job of this plugin is queued or running")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(args, "log_level", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return serve(args) if args.command == "serve" else cancel_all(args)
    except UsageError as exc:
        print(f"decice-interlink-slurm: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PluginError as exc:
        print(f"decice-interlink-slurm: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
