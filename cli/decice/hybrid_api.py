"""What the decice.hybrid collection's Python plugins may call (a stable entry point).

The collection's plugins run inside Ansible and need decice's own code: the
``decice.hybrid.kubespray`` action runs Kubespray the way the CLI's ``kubernetes`` phase
does, and the ``decice.hybrid.allocation`` inventory builds the hosts of a SLURM or PBS job
the way ``decice up`` does. They import this module and nothing else of decice, so the
CLI's internals can move without breaking a collection, and :data:`API_VERSION` says which
contract an installed decice speaks: a plugin that wants another stops with the fix
(:func:`require`).

Every failure these functions report is a :class:`ValueError` whose message names the
field and the fix; nothing here raises an internal type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from decice.kubespray.run import Cluster

#: the contract below; raised only when a function changes in a way a plugin can notice
API_VERSION = 1

NO_HOSTS_TO_RESET = (
    "no host in kube_control_plane, etcd or kube_node: no Kubespray cluster to reset"
)


def require(wanted: int, plugin: str) -> None:
    """Stop ``plugin`` (built for contract ``wanted``) when this decice speaks another."""
    if wanted != API_VERSION:
        raise ValueError(
            f"{plugin} was built for decice's collection API {wanted}, and the installed "
            f"decice speaks {API_VERSION}\n"
            "    fix: install the decice release this collection came with (or the collection "
            "of the installed decice: `decice` ships it)"
        )


def data(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` as data for Kubespray: every string written ``!unsafe`` (never templated)."""
    from decice import inventory

    return inventory.unsafe(values)


def pinned_versions() -> Mapping[str, Any]:
    """The ``decice_versions`` mapping (the collection's pinned versions)."""
    from decice import versions

    return versions.pinned()


def _pydantic_errors(prefix: str, exc: Any, *, inner: str = "") -> list[str]:
    """``field: message`` per error; ``prefix`` goes before each field, ``inner`` (the key
    a config nests its fields under) comes off."""
    lines = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ())).removeprefix(inner)
        where = prefix + where if where else prefix.rstrip(".")
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        lines.append(f"{where}: {message}")
    return lines


def kubespray_cluster(
    kubernetes: Mapping[str, Any],
    mirror: Mapping[str, Any] | None,
    *,
    target: str,
    edge_exclusion: bool,
    base: Path,
) -> Cluster:
    """The Kubespray cluster a task describes, its fields checked exactly as in a
    ``decice.yaml`` (``kubernetes.*``, ``mirror.*``)."""
    import pydantic

    from decice.kubespray import run
    from decice.spec_model import KubernetesSpec, MirrorSpec

    try:
        spec = KubernetesSpec(**kubernetes)
    except pydantic.ValidationError as exc:
        raise ValueError("\n".join(_pydantic_errors("", exc))) from None
    try:
        mirror_spec = MirrorSpec(**mirror) if mirror else None
    except pydantic.ValidationError as exc:
        raise ValueError("\n".join(_pydantic_errors("mirror.", exc))) from None
    return run.Cluster(
        kubernetes=spec, mirror=mirror_spec, target=target, edge_exclusion=edge_exclusion, base=base
    )


def kubespray(
    state: str,
    cluster: Cluster,
    inventory: dict[str, Any],
    *,
    state_dir: Path,
    kubeconfig: Path,
    check: bool,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """Kubespray's cluster.yml (``state`` present) or reset.yml (absent) for ``inventory``
    with decice's code, as the CLI's ``kubernetes`` phase runs it: the task's result
    (``changed``, ``msg``, ``playbook``, ``notes``; ``failed`` with the reason)."""
    from decice import baselines, redact
    from decice.errors import DeciceError
    from decice.kubespray import phases

    playbook = "cluster.yml" if state == "present" else "reset.yml"
    notes: list[str] = []
    result: dict[str, Any] = {"changed": False, "playbook": playbook, "notes": notes}
    try:
        if state == "absent" and not inventory["all"]["hosts"]:
            result["msg"] = NO_HOSTS_TO_RESET
            return result
        if state == "absent" and not phases.ever_deployed(state_dir):
            result["msg"] = phases.NOTHING_TO_RESET
            return result
        if check:
            result["msg"] = phases.would_run(cluster, inventory, playbook)
            return result
        if state == "present":
            missing = phases.missing_baselines(state_dir, inventory)
            if missing:
                refusal = baselines.refusal("kubernetes", missing, state_dir)
                return {**result, "failed": True, "msg": refusal}
        run_dir = phases.playbook_run_dir(state_dir)
        result["run_dir"] = str(run_dir)
        try:
            if state == "present":
                summary, done = phases.deploy(
                    cluster, inventory, run_dir, kubeconfig, progress=progress, note=notes.append
                )
                result["versions"] = done
            else:
                summary = phases.reset(
                    cluster,
                    inventory,
                    run_dir,
                    kubeconfig,
                    state_dir,
                    progress=progress,
                    note=notes.append,
                )
        finally:
            redact.scrub_run_dir(run_dir)  # its inventory held the hosts' variables
        result.update(changed=True, msg=summary)
    except DeciceError as exc:
        result.update(failed=True, msg=str(exc))
    return result


def allocation_inventory(raw: Mapping[str, Any], config: Path) -> dict[str, Any]:
    """The decice inventory (``{"all": {"hosts", "children"}}``) of an allocation config:
    ``raw`` is a spec's ``name``, ``target``, ``hosts`` and ``allocation``, checked as in a
    ``decice.yaml``; ``config`` is the file it came from (paths in it are relative to it)."""
    from decice import inventory
    from decice.errors import InputError
    from decice.spec import LoadedSpec
    from decice.spec_model import Spec

    try:
        spec = Spec.model_validate(dict(raw))
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        if not callable(getattr(exc, "errors", None)):
            raise ValueError(str(exc)) from None
        raise ValueError("; ".join(_pydantic_errors("", exc, inner="allocation."))) from None
    loaded = LoadedSpec(
        spec=spec,
        source=config,
        text=config.read_text(encoding="utf-8"),
        state_dir=config.parent / ".decice",
        raw=dict(raw),
    )
    try:
        return inventory.build(loaded, inventory.allocate(loaded))
    except InputError as exc:
        raise ValueError(str(exc)) from None
