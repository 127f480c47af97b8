"""What each CLI command does: load the spec, call the module, print the result."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console

from decice import history, interrupt, jsonout, lifecycle, plan, records, spec, starter
from decice.errors import EXIT_OK, EXIT_RUN_FAILED, InputError
from decice.progress import JsonLinesView, LiveView, View, print_summary

_out = Console(highlight=False, soft_wrap=True)
_err = Console(stderr=True, highlight=False)


def _report(
    json_out: bool, data: Callable[[], dict[str, Any]], render: Callable[[Console], None]
) -> int:
    """``data()`` as JSON on stdout with --json, else ``render`` to the console."""
    if json_out:
        jsonout.emit(data())
    else:
        render(_out)
    return EXIT_OK


def _confirm_reset(loaded: spec.LoadedSpec) -> None:
    if not sys.stdin.isatty():
        raise InputError(
            "reset needs confirmation\n    fix: pass --yes to run it without a terminal"
        )
    answer = input(
        f"Reset '{loaded.spec.name}' ({loaded.spec.target}): tear Kubernetes down and restore "
        "every host to its baseline? [y/N] "
    )
    if answer.strip().lower() not in {"y", "yes"}:
        raise InputError("reset cancelled; nothing was touched")


def run_lifecycle(
    command: str,
    spec_path: Path | None,
    *,
    json_out: bool,
    verbose: int,
    only: list[str] | None = None,
    skip: list[str] | None = None,
    check: bool = False,
    yes: bool = False,
    strict: bool = False,
) -> int:
    loaded = spec.load(spec_path)
    options = lifecycle.RunOptions(only=only or [], skip=skip or [], check=check, verbose=verbose)
    prepared = lifecycle.prepare(command, loaded, options)  # bad input fails before the prompt
    if command == "reset" and not yes:
        _confirm_reset(loaded)
    view: View = JsonLinesView(sys.stderr) if json_out else LiveView(_err, verbose=verbose > 0)
    record = lifecycle.execute(command, loaded, options, view, prepared)
    if json_out:
        jsonout.emit(record.to_dict())
    else:
        print_summary(record, _err)
    if record.status == "interrupted":
        return interrupt.EXIT_INTERRUPTED
    if record.status == "ok" or (record.status == "incomplete" and not strict):
        return EXIT_OK
    return EXIT_RUN_FAILED


def show_plan(
    spec_path: Path | None, *, json_out: bool, only: list[str] | None, skip: list[str] | None
) -> int:
    loaded = spec.load(spec_path)
    data = plan.build(loaded, only=only or [], skip=skip or [])
    return _report(json_out, lambda: data, partial(plan.render, data))


def show_status(spec_path: Path | None, *, json_out: bool) -> int:
    loaded = spec.load(spec_path)
    data = history.status(loaded)
    return _report(json_out, lambda: data, partial(history.render_status, data))


def list_runs(spec_path: Path | None, *, json_out: bool) -> int:
    from decice.experiment.store import cluster_links

    loaded = spec.load(spec_path)
    runs = history.load_runs(loaded.state_dir)
    links = cluster_links(loaded.state_dir)
    return _report(
        json_out,
        lambda: {"runs": [{**history.brief(r), "experiment": links.get(r.id)} for r in runs]},
        partial(history.render_runs, runs, links=links),
    )


def show_run(run_id: str, spec_path: Path | None, *, json_out: bool) -> int:
    loaded = spec.load(spec_path)
    record = records.RunStore(loaded.state_dir).get(run_id)
    return _report(json_out, record.to_dict, partial(history.render_run, record))


def write_starter(target: str, path: Path, *, force: bool) -> int:
    starter.write(target, path, force=force)
    _err.print(f"wrote {path} (target {target}); edit it, then `decice plan -f {path}`")
    return EXIT_OK


def _lab_settings(
    spec_path: Path | None, name: str | None, nodes: int | None, slurm: bool | None
) -> tuple[spec.LoadedSpec, str, int, bool]:
    loaded = spec.load(spec_path)
    lab_spec = loaded.spec.lab
    return (
        loaded,
        name or lab_spec.name,
        lab_spec.nodes if nodes is None else nodes,
        lab_spec.slurm if slurm is None else slurm,
    )


def _lab_summary(info: Any) -> dict[str, Any]:
    data = {"exists": True, **info.to_dict()}
    data["slurm_env"] = info.slurm_env_file
    return data


def lab_create(
    spec_path: Path | None,
    *,
    name: str | None,
    nodes: int | None,
    slurm: bool | None,
    json_out: bool,
) -> int:
    from decice import lab

    loaded, lab_name, count, with_slurm = _lab_settings(spec_path, name, nodes, slurm)
    if not 1 <= count <= 64:
        raise InputError(f"--nodes {count}: a lab has 1 to 64 nodes")
    with records.locked(loaded.state_dir, "lab create"):
        info = lab.create(lab_name, count, with_slurm, loaded.state_dir)
    if json_out:
        jsonout.emit(_lab_summary(info))
    else:
        _render_lab(info)
    return EXIT_OK


def lab_destroy(spec_path: Path | None, *, name: str | None, json_out: bool) -> int:
    from decice import lab

    loaded, lab_name, _, _ = _lab_settings(spec_path, name, None, None)
    with records.locked(loaded.state_dir, "lab destroy"):
        existed = lab.destroy(lab_name, loaded.state_dir)
    if json_out:
        jsonout.emit({"name": lab_name, "destroyed": existed})
    else:
        _err.print(f"lab {lab_name}: " + ("destroyed" if existed else "nothing to destroy"))
    return EXIT_OK


def lab_status(spec_path: Path | None, *, name: str | None, json_out: bool) -> int:
    from decice import lab

    loaded, lab_name, _, _ = _lab_settings(spec_path, name, None, None)
    info = lab.status(lab_name, loaded.state_dir)
    if info is None:
        if json_out:
            jsonout.emit({"name": lab_name, "exists": False})
            return EXIT_OK
        raise InputError(f"no lab {lab_name!r} in {loaded.state_dir}\n    fix: decice lab create")
    if json_out:
        jsonout.emit(_lab_summary(info))
    else:
        _render_lab(info)
    return EXIT_OK


def _render_lab(info: Any) -> None:
    _out.print(f"[bold]lab {info.name}[/] ({len(info.nodes)} nodes, network {info.network})")
    for node in info.nodes:
        _out.print(f"  {node.name:<10} {node.ip:<15} {node.state}")
    _out.print(f"inventory  {info.inventory}")
    _out.print(f"ssh config {info.ssh_config}")
    if info.shared_dir:
        _out.print(f"user       {info.user} (ssh -F {info.ssh_config} {info.user}@node1)")
        _out.print(f"shared     {info.shared_dir} -> {info.shared_mount} on every node")
    if info.slurm_env_file:
        _out.print(f"slurm      source {info.slurm_env_file}")
