"""decice command line: command definitions only; the work lives in modules below.

Exit codes: 0 ok, 1 a run failed, 2 bad input (nothing touched), 3 another run holds the lock,
130 interrupted (SIGINT/SIGTERM).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer


class _Lazy:
    """A module imported at its first use: `decice --help` imports nothing heavy."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


if TYPE_CHECKING:
    from decice import commands
    from decice import mirror_sync as mirror
    from decice.experiment import commands as experiments
else:
    commands = _Lazy("decice.commands")
    mirror = _Lazy("decice.mirror_sync")
    experiments = _Lazy("decice.experiment.commands")

EPILOG = (
    "Exit codes: 0 ok, 1 a run failed, 2 bad input (nothing touched), "
    "3 another run holds the lock, 130 interrupted (SIGINT/SIGTERM)."
)

app = typer.Typer(
    name="decice",
    help="Bring up a hybrid cloud-edge-HPC Kubernetes stack, run an experiment, "
    "and return every host to a clean slate.",
    epilog=EPILOG,
    no_args_is_help=True,
    # --install-completion / --show-completion [bash|zsh|fish|powershell]
    add_completion=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


def _group(name: str, text: str, **opts: Any) -> typer.Typer:
    """The command group ``decice NAME`` (``text``: its help)."""
    group = typer.Typer(help=text, epilog=EPILOG, **opts)
    app.add_typer(group, name=name)
    return group


runs_app = _group("runs", "List and show run records.", invoke_without_command=True)
lab_app = _group(
    "lab", "Local lab nodes: systemd containers (podman), optionally SLURM.", no_args_is_help=True
)
mirror_app = _group("mirror", "Artifact mirror for air-gapped sites.", no_args_is_help=True)
experiment_app = _group(
    "experiment",
    "Experiments: arms compared over repetitions from a clean slate, and a report.",
    no_args_is_help=True,
)

SpecOpt = Annotated[
    Path | None,
    typer.Option(
        "-f", "--spec", help="Spec file (default ./decice.yaml, else the built-in sim spec)."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print a machine-readable result on stdout.")]
VerboseOpt = Annotated[
    int, typer.Option("-v", "--verbose", count=True, help="More output (-vv: Ansible -v).")
]
OnlyOpt = Annotated[
    list[str] | None, typer.Option("--only", help="Run only these phases (comma-separated).")
]
SkipOpt = Annotated[
    list[str] | None, typer.Option("--skip", help="Skip these phases (comma-separated).")
]


def _print_version(value: bool) -> None:
    if value:
        from decice import __version__

        print(f"decice {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Bring up a hybrid cloud-edge-HPC Kubernetes stack, run an experiment, and return every
    host to a clean slate."""


def _guard(work: Callable[[], int]) -> None:
    """Run ``work``; turn decice errors into a message and the documented exit code."""
    from decice.errors import DeciceError

    try:
        code = work()
    except DeciceError as exc:
        import sys

        print(f"decice: {exc}", file=sys.stderr)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        from decice.interrupt import EXIT_INTERRUPTED

        raise typer.Exit(EXIT_INTERRUPTED) from None
    raise typer.Exit(code)


def _lifecycle(command: str, spec: Path | None, json_out: bool, verbose: int, **opts: Any) -> None:
    _guard(
        lambda: commands.run_lifecycle(command, spec, json_out=json_out, verbose=verbose, **opts)
    )


@app.command()
def up(
    spec: SpecOpt = None,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = 0,
    only: OnlyOpt = None,
    skip: SkipOpt = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Change nothing: Ansible check mode; phases decice does itself "
            "(sim control plane, Kubespray) only say what they would do.",
        ),
    ] = False,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict", help="Exit 1 when the run ends incomplete (a component not done)."
        ),
    ] = False,
) -> None:
    """Deploy: preflight, baseline, prepare, kubernetes, addons, scheduler."""
    _lifecycle("up", spec, json_out, verbose, only=only, skip=skip, check=check, strict=strict)


@app.command()
def down(spec: SpecOpt = None, json_out: JsonOpt = False, verbose: VerboseOpt = 0) -> None:
    """Remove the scheduler and the add-ons completely (the cluster stays)."""
    _lifecycle("down", spec, json_out, verbose)


@app.command()
def reset(
    spec: SpecOpt = None,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = 0,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Tear Kubernetes down and restore every host to its recorded baseline."""
    _lifecycle("reset", spec, json_out, verbose, yes=yes)


@app.command()
def verify(
    spec: SpecOpt = None,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = 0,
    only: OnlyOpt = None,
    skip: SkipOpt = None,
) -> None:
    """Prove a clean slate: the cluster's API objects against the API baseline taken
    before the add-ons and nothing of interLink's plugin on its login hosts (phase
    cluster), every host against its baseline (phase verify)."""
    _lifecycle("verify", spec, json_out, verbose, only=only, skip=skip)


@app.command()
def status(spec: SpecOpt = None, json_out: JsonOpt = False) -> None:
    """Show the state directory: lock holder, last run, baselines."""
    _guard(lambda: commands.show_status(spec, json_out=json_out))


@app.command()
def plan(
    spec: SpecOpt = None,
    json_out: JsonOpt = False,
    only: OnlyOpt = None,
    skip: SkipOpt = None,
) -> None:
    """Show hosts and roles, the phases that would run and every component's version."""
    _guard(lambda: commands.show_plan(spec, json_out=json_out, only=only, skip=skip))


class Shell(StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"
    powershell = "powershell"


@app.command()
def completion(
    shell: Annotated[Shell, typer.Argument(help="The shell to complete decice in.")],
) -> None:
    """Print the shell completion script for SHELL (e.g. `source <(decice completion bash)`;
    --install-completion installs it for the shell you are in)."""
    from typer.completion import get_completion_script

    print(get_completion_script(prog_name="decice", complete_var="_DECICE_COMPLETE", shell=shell))


@app.command()
def init(
    target: Annotated[
        str, typer.Option("--target", "-t", help="sim | lab | slurm | pbs | static")
    ] = "sim",
    path: Annotated[Path, typer.Option("--output", "-o", help="Where to write the spec.")] = Path(
        "decice.yaml"
    ),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented starter spec for a target."""
    _guard(lambda: commands.write_starter(target, path, force=force))


@runs_app.callback()
def runs(
    ctx: typer.Context,
    spec: SpecOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List the runs recorded in the state directory."""
    if ctx.invoked_subcommand is not None:
        return

    _guard(lambda: commands.list_runs(spec, json_out=json_out))


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="Run id, a unique prefix of it, or 'last'.")],
    spec: SpecOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show one run: phases with timings, component versions, failures."""
    _guard(lambda: commands.show_run(run_id, spec, json_out=json_out))


LabName = Annotated[
    str | None, typer.Option("--name", help="Lab name (default: the spec's lab.name).")
]


@lab_app.command("create")
def lab_create(
    spec: SpecOpt = None,
    json_out: JsonOpt = False,
    name: LabName = None,
    nodes: Annotated[int | None, typer.Option("--nodes", "-n", help="Number of nodes.")] = None,
    slurm: Annotated[
        bool | None, typer.Option("--slurm/--no-slurm", help="Run SLURM on them.")
    ] = None,
) -> None:
    """Create (or reuse) a lab: nodes with SSH, an inventory, an ssh config, SLURM if asked."""

    _guard(
        lambda: commands.lab_create(spec, name=name, nodes=nodes, slurm=slurm, json_out=json_out)
    )


@lab_app.command("destroy")
def lab_destroy(spec: SpecOpt = None, json_out: JsonOpt = False, name: LabName = None) -> None:
    """Remove a lab's containers, network, daemons and state."""
    _guard(lambda: commands.lab_destroy(spec, name=name, json_out=json_out))


@lab_app.command("status")
def lab_status(spec: SpecOpt = None, json_out: JsonOpt = False, name: LabName = None) -> None:
    """Show a lab: nodes and IPs, inventory, ssh config, SLURM environment."""
    _guard(lambda: commands.lab_status(spec, name=name, json_out=json_out))


@mirror_app.command("sync")
def mirror_sync(
    spec: SpecOpt = None,
    json_out: JsonOpt = False,
    dest: Annotated[
        Path | None,
        typer.Option("--dest", help="Mirror directory to fill (default: the spec's mirror.path)."),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="Copy from this mirror (directory, file:// or http(s):// URL) "
            "instead of the upstream sources.",
        ),
    ] = None,
) -> None:
    """Fetch every enabled add-on's pinned artifacts (sha256 or content pin checked) and its
    image list."""
    _guard(lambda: mirror.command(spec, dest=dest, source=source, json_out=json_out))


ExpArg = Annotated[Path, typer.Argument(help="The experiment file (EXP.yaml).")]


@experiment_app.command("plan")
def experiment_plan(experiment: ExpArg, json_out: JsonOpt = False) -> None:
    """Check an experiment file and show what a run would do (touches nothing)."""
    _guard(lambda: experiments.plan(experiment, json_out=json_out))


@experiment_app.command("run")
def experiment_run(
    experiment: ExpArg,
    json_out: JsonOpt = False,
    no_up: Annotated[
        bool,
        typer.Option("--no-up", help="Use the cluster as it is: no `decice up` first."),
    ] = False,
) -> None:
    """Bring the cluster up, run every arm of every repetition, write the report."""
    _guard(lambda: experiments.execute(experiment, json_out=json_out, up=not no_up))


@experiment_app.command("report")
def experiment_report(
    ref: Annotated[
        str,
        typer.Argument(help="An experiment run's directory, id, unique id prefix, or 'last'."),
    ] = "last",
    spec: SpecOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Write an experiment run's report again from its raw data (report.html, CSV, JSON)."""
    _guard(lambda: experiments.rewrite_report(ref, spec, json_out=json_out))


@experiment_app.command("list")
def experiment_list(spec: SpecOpt = None, json_out: JsonOpt = False) -> None:
    """List the experiment runs of the state directory."""
    _guard(lambda: experiments.list_runs(spec, json_out=json_out))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
