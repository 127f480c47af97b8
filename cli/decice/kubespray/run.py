"""Prepare, describe and run Kubespray's cluster.yml / reset.yml for a decice spec.

Generated inputs live under the run directory::

    <run>/kubespray/inventory/hosts.yml
    <run>/kubespray/inventory/group_vars/all/decice.yml
    <run>/kubespray/inventory/group_vars/k8s_cluster/decice.yml
    <run>/kubespray/artifacts/admin.conf          (written by Kubespray's client role)
    <run>/kubespray/runner/                       (ansible-runner's private data dir)
"""

from __future__ import annotations

import json
import os
import shlex
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from decice import mirror as mirrors
from decice import versions
from decice.errors import InputError, RunFailedError
from decice.kubespray import downloads, render, source, venv
from decice.runner import (
    Event,
    HostResult,
    PlaybookRun,
    PlayStarted,
    RunFinished,
    TaskStarted,
    run_playbook,
)

if TYPE_CHECKING:
    from decice.spec import LoadedSpec
    from decice.spec_model import KubernetesSpec, MirrorSpec

SUBDIR = "kubespray"
OPTIONS = ("--become",)
# Kubespray's ansible.cfg ssh_args without its `-o UserKnownHostsFile=/dev/null`, which
# would hide every known key (each host "unknown": a prompt or a failure). The hosts'
# ansible_ssh_common_args carry decice's known_hosts files, StrictHostKeyChecking and
# BatchMode (decice.inventory.trust_options); ssh takes the first value of an option.
# BatchMode=yes here too: a hand-written inventory run through plain ansible-playbook
# (decice.hybrid.kubespray) may carry no trust options, and Kubespray runs under a
# terminal ansible-runner gives it, where an unknown key would wait on a yes/no prompt.
SSH_ARGS = "-o ControlMaster=auto -o ControlPersist=30m -o ConnectionAttempts=100 -o BatchMode=yes"
RESET_EXTRAVARS = {"reset_confirmation": "yes"}  # playbooks/reset.yml: skips the prompt
MAX_FAILURES_SHOWN = 5


@dataclass(frozen=True)
class Invocation:
    """One ansible-playbook run of a Kubespray playbook: exactly what is executed."""

    playbook: Path
    binary: Path
    inventory: Path
    cwd: Path
    env: dict[str, str]  # on top of decice's ansible environment (runner.ansible_env)
    extravars: dict[str, str] = field(default_factory=dict)
    options: tuple[str, ...] = OPTIONS

    def argv(self) -> list[str]:
        # extra vars as one JSON object, the form ansible-runner passes them in
        extra = ["-e", json.dumps(self.extravars, separators=(",", ":"))] if self.extravars else []
        return [
            str(self.binary),
            *self.options,
            "-i",
            str(self.inventory),
            *extra,
            str(self.playbook),
        ]

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items() if k != "PATH")
        return f"cd {shlex.quote(str(self.cwd))} && {env} {shlex.join(self.argv())}"


def invocation(playbook: str, checkout: Path, env_path: Path, inventory_path: Path) -> Invocation:
    """The command, working directory and environment for ``playbook`` of ``checkout``."""
    if playbook not in {"cluster.yml", "reset.yml", "scale.yml", "upgrade-cluster.yml"}:
        raise InputError(f"{playbook}: not a Kubespray playbook decice runs")
    bin_dir = env_path / "bin"
    env = {
        # Kubespray's own settings (roles_path, library, ssh args, ...); its relative
        # paths resolve against the config file's directory, the checkout.
        "ANSIBLE_CONFIG": str(checkout / "ansible.cfg"),
        "VIRTUAL_ENV": str(env_path),  # ansible.cfg's roles_path mentions $VIRTUAL_ENV
        "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
        "ANSIBLE_SSH_ARGS": SSH_ARGS,
    }
    extravars = dict(RESET_EXTRAVARS) if playbook == "reset.yml" else {}
    return Invocation(
        playbook=checkout / playbook,
        binary=bin_dir / "ansible-playbook",
        inventory=inventory_path,
        cwd=checkout,
        env=env,
        extravars=extravars,
    )


# ---------------------------------------------------------------- preparation


@dataclass(frozen=True)
class Prepared:
    """Everything needed to run Kubespray for one decice run."""

    source: source.Source
    env: venv.KubesprayEnv
    kube_version: str
    settings: render.ClusterSettings
    hosts: dict[str, Any]
    files: dict[str, Path]
    work_dir: Path
    mirror: mirrors.Mirror | None = None

    @property
    def artifacts_dir(self) -> Path:
        return self.work_dir / "artifacts"

    def invocation(self, playbook: str) -> Invocation:
        return invocation(playbook, self.source.path, self.env.path, self.files["hosts"])


@dataclass(frozen=True)
class Cluster:
    """What a Kubespray run depends on besides the hosts, whichever way in: the spec
    (the CLI, :func:`cluster_of`) or the arguments of the collection's
    ``decice.hybrid.kubespray`` action (plain ansible-playbook, molecule)."""

    kubernetes: KubernetesSpec
    mirror: MirrorSpec | None
    target: str  # lab: hosts share this machine's kernel and are containers
    edge_exclusion: bool  # KubeEdge on: CNI pods stay off edge nodes
    base: Path  # relative mirror.path and download_cache_dir resolve against it


def cluster_of(given: LoadedSpec | Cluster) -> Cluster:
    """``given`` as a :class:`Cluster` (a loaded spec: its kubernetes/mirror/target)."""
    if isinstance(given, Cluster):
        return given
    spec = given.spec
    return Cluster(
        kubernetes=spec.kubernetes,
        mirror=spec.mirror,
        target=spec.target,
        edge_exclusion=spec.addons.kubeedge.enabled,
        base=given.source.parent if given.source else Path.cwd(),
    )


def wanted_versions(given: LoadedSpec | Cluster) -> tuple[source.Pin, str]:
    """(Kubespray pin, kube_version) for the spec (overrides need allow_untested_versions)."""
    spec = cluster_of(given).kubernetes
    kube_version = spec.version or str(versions.pinned()["kubernetes"]["kube_version"])
    return source.pin(spec.kubespray_tag), kube_version.lstrip("v")


def spec_mirror(given: LoadedSpec | Cluster) -> mirrors.Mirror | None:
    cluster = cluster_of(given)
    return mirrors.from_spec(cluster.mirror, cluster.base)


def cache_dir_of(given: LoadedSpec | Cluster) -> Path | None:
    """``kubernetes.download_cache_dir`` as an absolute path (relative: to the spec's dir)."""
    cluster = cluster_of(given)
    value = cluster.kubernetes.download_cache_dir
    if value is None:
        return None
    path = Path(value).expanduser()
    return (path if path.is_absolute() else cluster.base / path).resolve()


def settings_of(
    given: LoadedSpec | Cluster,
    hosts: dict[str, Any],
    mirror: mirrors.Mirror | None,
    kube_version: str,
    artifacts_dir: Path,
    download_cache_dir: Path | None = None,
    *,
    read_mirror_yml: bool = True,
) -> render.ClusterSettings:
    """What decice decides for Kubespray from the spec, the mirror and the hosts."""
    cluster = cluster_of(given)
    return render.settings_for(
        cluster.kubernetes,
        kube_version,
        artifacts_dir=artifacts_dir,
        mirror=mirror,
        download_cache_dir=download_cache_dir or cache_dir_of(cluster),
        registry=render.registry_of(cluster.mirror, mirror if read_mirror_yml else None),
        kernel_shared=render.kernel_shared(hosts, cluster.target),
        container_nodes=cluster.target == "lab",
        edge_exclusion=cluster.edge_exclusion,
    )


def check_kube_version(checkout: Path, kube_version: str) -> None:
    known = source.kube_versions(checkout)
    if kube_version in known:
        return
    minor = ".".join(kube_version.split(".")[:2]) + "."
    same = [v for v in known if v.startswith(minor)]
    hint = f"versions of {minor}x it knows: {', '.join(same)}" if same else "no release of it"
    raise InputError(
        f"kube_version {kube_version}: Kubespray at {checkout} has no checksums for it "
        f"({hint})\n    fix: use a version it lists, or another Kubespray tag"
    )


def prepare(
    given: LoadedSpec | Cluster,
    decice_inventory: dict[str, Any],
    run_dir: Path,
    *,
    progress: Callable[[str], None] = lambda _text: None,
    explicit_checkout: str | Path | None = None,
    download_cache_dir: Path | None = None,
) -> Prepared:
    """Source + env + generated inventory: everything short of running Kubespray."""
    cluster = cluster_of(given)
    pinned, kube_version = wanted_versions(cluster)
    mirror = spec_mirror(cluster)
    hosts = render.inventory(decice_inventory)  # bad input fails before any download
    work_dir = run_dir / SUBDIR
    settings = settings_of(
        cluster, hosts, mirror, kube_version, work_dir / "artifacts", download_cache_dir
    )
    progress(f"kubespray {pinned.tag}: source")
    src = source.ensure(pinned, mirror, source.explicit_dir(explicit_checkout))
    check_kube_version(src.path, kube_version)
    progress(f"kubespray {pinned.tag}: Python env (a first build takes minutes)")
    env = venv.ensure(src)
    files = render.write(work_dir / "inventory", hosts, render.group_vars(settings))
    return Prepared(src, env, kube_version, settings, hosts, files, work_dir, mirror)


# ---------------------------------------------------------------- running


def run(
    inv: Invocation,
    private_data_dir: Path,
    *,
    ident: str,
    cancel: threading.Event | None = None,
) -> Iterator[Event]:
    """Run ``inv`` through ansible-runner and yield its typed events.

    ansible-runner takes the command line options from ``env/cmdline`` of its private
    data dir and runs from ``project/`` when that exists: the first holds ``--become``,
    the second is a link to the checkout, so the run matches ``inv.argv()`` and ``inv.cwd``.
    The binary is the env's ansible-playbook: ``inv.env`` puts its bin directory first
    on PATH, which ansible-runner (pexpect) searches.
    """
    private_data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    (private_data_dir / "env").mkdir(exist_ok=True, mode=0o700)
    (private_data_dir / "env" / "cmdline").write_text(shlex.join(inv.options), encoding="utf-8")
    project = private_data_dir / "project"
    if project.is_symlink() or project.exists():
        project.unlink()
    project.symlink_to(inv.cwd, target_is_directory=True)
    yield from run_playbook(
        PlaybookRun(
            playbook=inv.playbook,
            inventory=inv.inventory,
            private_data_dir=private_data_dir,
            extravars=dict(inv.extravars),
            envvars=dict(inv.env),
            ident=ident,
        ),
        cancel,
    )


@dataclass
class Outcome:
    status: str = ""
    rc: int = 0
    failures: list[HostResult] = field(default_factory=list)
    play: str = ""  # the last play that started
    task: str = ""  # the last task that started ("role : task" for a role's task)
    stats: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "successful" and self.rc == 0

    def reached(self, what: str) -> str:
        """How far the playbook got: its last play and task (the run record's note)."""
        if not self.play and not self.task:
            return f"kubespray {what}: no play started"
        return f"kubespray {what} reached play {self.play!r}, task {self.task!r}"

    def message(self, what: str, where: Path) -> str:
        lines = [f"Kubespray {what} {self.status or 'failed'} (rc {self.rc}); output in {where}"]
        for failure in self.failures[:MAX_FAILURES_SHOWN]:
            lines.append(f"  {failure.host}: {failure.task}: {failure.message}")
        if len(self.failures) > MAX_FAILURES_SHOWN:
            lines.append(f"  … and {len(self.failures) - MAX_FAILURES_SHOWN} more")
        return "\n".join(lines)


def run_and_collect(
    inv: Invocation,
    private_data_dir: Path,
    *,
    ident: str,
    progress: Callable[[str], None] = lambda _text: None,
    cancel: threading.Event | None = None,
) -> Outcome:
    outcome = Outcome()
    for event in run(inv, private_data_dir, ident=ident, cancel=cancel):
        if isinstance(event, PlayStarted):
            outcome.play = event.play
        elif isinstance(event, TaskStarted):
            outcome.task = event.task
            progress(f"kubespray: {event.task}")
        elif isinstance(event, HostResult):
            if event.status == "unreachable" or (event.status == "failed" and not event.ignored):
                outcome.failures.append(event)
        elif isinstance(event, RunFinished):
            outcome.status, outcome.rc = event.status, event.rc
            outcome.stats = event.stats or outcome.stats
    return outcome


# ---------------------------------------------------------------- kubeconfig


def reachable_address(hosts: dict[str, Any]) -> str:
    """The first control-plane host as decice reaches it (ansible_host, else access_ip/ip)."""
    first = next(iter(hosts["all"]["children"]["kube_control_plane"]["hosts"]))
    hv = hosts["all"]["hosts"].get(first) or {}
    for key in ("ansible_host", "access_ip", "ip"):
        if hv.get(key):
            return str(hv[key])
    return str(first)


def install_kubeconfig(admin_conf: Path, dest: Path, address: str) -> str:
    """Copy Kubespray's admin.conf to ``dest`` (0600), server rewritten to ``address``.

    Kubespray writes the control plane's ``ip`` (often an internal interface); decice
    keeps the port and uses the address it reaches the host by. Returns the server URL.
    """
    if not admin_conf.is_file():
        raise RunFailedError(
            f"{admin_conf}: Kubespray wrote no admin kubeconfig\n"
            "    fix: check that kubeconfig_localhost ran (Kubespray's client role)"
        )
    config = yaml.safe_load(admin_conf.read_text(encoding="utf-8")) or {}
    clusters = config.get("clusters") or []
    if not clusters:
        raise RunFailedError(f"{admin_conf}: no clusters in the kubeconfig")
    host = f"[{address}]" if ":" in address else address
    server = ""
    for entry in clusters:
        cluster = entry.get("cluster") or {}
        old = urllib.parse.urlsplit(str(cluster.get("server", "")))
        port = old.port or 6443
        server = f"https://{host}:{port}"
        cluster["server"] = server
    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        yaml.safe_dump(config, handle, sort_keys=False)
    tmp.replace(dest)
    dest.chmod(0o600)
    return server


@dataclass(frozen=True)
class Deployed:
    tag: str
    kube_version: str
    kubeconfig: Path
    server: str
    source: str

    def record_versions(self) -> dict[str, str]:
        return {"kubespray": self.tag, "kubernetes": self.kube_version}


def download_stop(prepared: Prepared, inv: Invocation, artifacts: Path) -> str | None:
    """The "not in the mirror" message when the run stopped at a file download, else None."""
    failed = downloads.failed_downloads(artifacts / "job_events")
    if not failed:
        return None
    var_files = [prepared.files[g] for g in ("all", "k8s_cluster") if g in prepared.files]
    urls = downloads.list_downloads(inv.binary, inv.env, inv.cwd, var_files, prepared.work_dir)
    return downloads.explain(failed, urls, prepared.settings.files_repo, prepared.mirror)


def _run(
    prepared: Prepared,
    playbook: str,
    progress: Callable[[str], None],
    cancel: threading.Event | None,
    note: Callable[[str], None],
) -> None:
    """Run one Kubespray playbook through ansible-runner; a failure names its artifacts.

    ``note`` gets how far the playbook got (its last play and task), success or not.
    A stop at a file download names the file that is not in the mirror and the fix.
    """
    ident = playbook.removesuffix(".yml")
    runner_dir = prepared.work_dir / "runner"
    inv = prepared.invocation(playbook)
    outcome = run_and_collect(inv, runner_dir, ident=ident, progress=progress, cancel=cancel)
    note(outcome.reached(playbook))
    if outcome.ok:
        return
    artifacts = runner_dir / "artifacts" / ident
    stopped = download_stop(prepared, inv, artifacts)
    message = outcome.message(playbook, artifacts)
    if stopped is not None:
        message = f"{stopped}\n{message}"
    raise RunFailedError(f"{message}\n  {outcome.reached(playbook)}")


def deploy(
    prepared: Prepared,
    kubeconfig: Path,
    *,
    progress: Callable[[str], None] = lambda _text: None,
    cancel: threading.Event | None = None,
    note: Callable[[str], None] = lambda _text: None,
) -> Deployed:
    """cluster.yml, then the admin kubeconfig at ``kubeconfig`` (0600)."""
    _run(prepared, "cluster.yml", progress, cancel, note)
    server = install_kubeconfig(
        prepared.artifacts_dir / "admin.conf", kubeconfig, reachable_address(prepared.hosts)
    )
    return Deployed(
        prepared.source.tag, prepared.kube_version, kubeconfig, server, prepared.source.describe()
    )


def reset(
    prepared: Prepared,
    kubeconfig: Path,
    *,
    progress: Callable[[str], None] = lambda _text: None,
    cancel: threading.Event | None = None,
    note: Callable[[str], None] = lambda _text: None,
) -> None:
    """reset.yml (confirmed, HPC-safe group_vars), then forget the kubeconfig."""
    _run(prepared, "reset.yml", progress, cancel, note)
    kubeconfig.unlink(missing_ok=True)


# ---------------------------------------------------------------- plan


def describe(given: LoadedSpec | Cluster, decice_inventory: dict[str, Any]) -> dict[str, Any]:
    """What `decice up` would run for Kubespray; fetches and builds nothing.

    Paths under the run directory are shown as ``<run>/kubespray/...``.
    """
    cluster = cluster_of(given)
    pinned, kube_version = wanted_versions(cluster)
    mirror = spec_mirror(cluster)
    hosts = render.inventory(decice_inventory)
    work = Path("<run>") / SUBDIR
    # mirror.yml is read for a URL mirror too (a small file): plan shows what up uses
    registry_note = ""
    try:
        settings = settings_of(cluster, hosts, mirror, kube_version, work / "artifacts")
    except mirrors.MirrorError as exc:
        registry_note = f"unknown: {exc}"
        settings = settings_of(
            cluster, hosts, mirror, kube_version, work / "artifacts", read_mirror_yml=False
        )
    registry = settings.registry
    shown_registry = registry_note or (
        f"{registry.host} via {registry.containerd_mirrors()[0]['mirrors'][0]['host']}"
        if registry
        else None
    )
    explicit = source.explicit_dir()
    origin = source.plan_source(pinned, mirror, explicit)
    checkout = explicit or source.tag_dir(pinned.tag) / "src"
    env_path = source.tag_dir(pinned.tag) / "venv"
    if explicit is not None:
        env_path = venv.env_dir(source.Source(pinned.tag, explicit, "checkout", "", None, ""))
    inventory_path = work / "inventory" / "hosts.yml"
    commands = {
        name: invocation(name, checkout, env_path, inventory_path)
        for name in ("cluster.yml", "reset.yml")
    }
    return {
        "tag": pinned.tag,
        "kube_version": kube_version,
        "source": origin,
        "sha256": pinned.sha256,
        "commit": pinned.commit,
        "venv": str(env_path),
        "hosts": {g: render.group_hosts(hosts, g) for g in render.KUBESPRAY_GROUPS},
        "registry": shown_registry,
        "group_vars": render.group_vars(settings),
        "commands": {
            name: {"argv": inv.argv(), "cwd": str(inv.cwd), "env": inv.env}
            for name, inv in commands.items()
        },
    }
