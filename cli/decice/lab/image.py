"""The lab node image: Debian from debootstrap, systemd as PID 1, SLURM + munge on board.

The recipe is data; its hash names the image (``localhost/decice-node:<hash>``), so the
image is rebuilt only when the recipe (or the host kernel it stubs modules for) changes.
The customized rootfs tarball is cached under ``cache_dir()/lab/`` so a removed image is
re-imported in seconds instead of re-bootstrapped.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import platform
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from decice.lab.errors import LabError
from decice.lab.host import debian_mirror, ensure_commands, run
from decice.lab.podman import Podman
from decice.paths import cache_dir

log = logging.getLogger("decice.lab")

IMAGE_REPO = "localhost/decice-node"
RECIPE_VERSION = 1

BASE_PACKAGES = (
    "python3",
    "python3-apt",
    "systemd",
    "systemd-sysv",
    "dbus",
    # pam_systemd: logins get a logind session and /run/user/<uid>, and a lingering user
    # its systemd --user manager, as on a real login host (interLink's user unit mode)
    "libpam-systemd",
    "openssh-server",
    "iproute2",
    "iputils-ping",
    "procps",
    "sudo",
    "ca-certificates",
    "kmod",
)
SLURM_PACKAGES = ("slurmd", "slurmctld", "slurm-client", "munge")

# Modules Kubernetes installers modprobe; the nodes share the host kernel, which has them
# built in or loaded already, but has no /lib/modules tree: declare them built in.
BUILTIN_MODULES = (
    "kernel/net/bridge/bridge.ko",
    "kernel/net/bridge/br_netfilter.ko",
    "kernel/fs/overlayfs/overlay.ko",
    "kernel/net/netfilter/nf_conntrack.ko",
    "kernel/net/netfilter/nf_nat.ko",
    "kernel/net/netfilter/x_tables.ko",
    "kernel/net/netfilter/xt_conntrack.ko",
    "kernel/net/ipv4/netfilter/ip_tables.ko",
    "kernel/net/ipv4/netfilter/iptable_filter.ko",
    "kernel/net/ipv4/netfilter/iptable_nat.ko",
    "kernel/net/ipv6/netfilter/ip6_tables.ko",
    "kernel/drivers/net/veth.ko",
    "kernel/drivers/net/vxlan.ko",
)

SSH_HOSTKEYS_DROPIN = (
    "[Service]\n"
    "# host keys are not baked into the image: each node makes its own at first boot\n"
    "ExecStartPre=\n"
    "ExecStartPre=/usr/bin/ssh-keygen -A\n"
    "ExecStartPre=/usr/sbin/sshd -t\n"
)


def _role_dropin(condition: str) -> str:
    return f"[Unit]\n# runs only on nodes booted with systemd.setenv=SLURM_ROLE=...\n{condition}\n"


@dataclass(frozen=True)
class Recipe:
    """Everything that determines the image's content."""

    kernel: str
    suite: str = "bookworm"
    packages: tuple[str, ...] = BASE_PACKAGES + SLURM_PACKAGES
    files: dict[str, str] = field(default_factory=dict)
    symlinks: dict[str, str] = field(default_factory=dict)
    remove_globs: tuple[str, ...] = ()
    chroot_commands: tuple[tuple[str, ...], ...] = ()
    version: int = RECIPE_VERSION

    def digest(self) -> str:
        """Stable short hash of the recipe (same recipe -> same hash on any machine)."""
        canonical = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    @property
    def ref(self) -> str:
        return f"{IMAGE_REPO}:{self.digest()}"


def node_recipe(kernel: str | None = None) -> Recipe:
    """The recipe of the one node image that serves plain and SLURM labs."""
    kver = kernel or platform.release()
    return Recipe(
        kernel=kver,
        files={
            "etc/machine-id": "",
            f"lib/modules/{kver}/modules.builtin": "".join(f"{m}\n" for m in BUILTIN_MODULES),
            "etc/systemd/system/ssh.service.d/decice-hostkeys.conf": SSH_HOSTKEYS_DROPIN,
            "etc/systemd/system/slurmctld.service.d/decice-role.conf": _role_dropin(
                "ConditionEnvironment=SLURM_ROLE=controller"
            ),
            "etc/systemd/system/slurmd.service.d/decice-role.conf": _role_dropin(
                "ConditionEnvironment=SLURM_ROLE=compute"
            ),
            "etc/systemd/system/munge.service.d/decice-role.conf": _role_dropin(
                "ConditionEnvironment=SLURM_ROLE"
            ),
        },
        symlinks={"var/lib/dbus/machine-id": "/etc/machine-id"},
        remove_globs=(
            "etc/ssh/ssh_host_*",
            "etc/munge/munge.key",
            "usr/lib/*/slurm-wlm/mpi_pmix*.so",
            "var/cache/apt/archives/*.deb",
            "var/lib/apt/lists/*_Packages",
        ),
        chroot_commands=(
            ("depmod", "-a", kver),
            # The package lists were removed above: date the lists directory "never
            # updated" (apt's cache age), so a node's first package install with a
            # cache_valid_time (Kubespray's system_packages) fetches them first.
            ("touch", "-d", "@0", "/var/lib/apt/lists"),
        ),
    )


@dataclass(frozen=True)
class NodeImage:
    """A node image present in podman's storage."""

    ref: str
    digest: str
    munge_uid: int
    munge_gid: int
    built_seconds: float | None  # None when the image already existed


def _cache() -> Path:
    return cache_dir() / "lab"


@contextmanager
def _build_lock() -> Iterator[None]:
    _cache().mkdir(parents=True, exist_ok=True)
    with (_cache() / "image.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def customize(rootfs: Path, recipe: Recipe) -> None:
    """Apply the recipe's files, symlinks, removals and chroot commands to ``rootfs``."""
    for pattern in recipe.remove_globs:
        for path in rootfs.glob(pattern):
            path.unlink()
    for rel, text in recipe.files.items():
        path = rootfs / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o444 if rel == "etc/machine-id" else 0o644)
    for rel, target in recipe.symlinks.items():
        link = rootfs / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    for argv in recipe.chroot_commands:
        run(["chroot", str(rootfs), *argv])


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root.resolve()) + "/"
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        target = line.split()[1].encode().decode("unicode_escape")
        if target.startswith(prefix):
            found.append(target)
    return sorted(found, key=len, reverse=True)


def remove_tree(root: Path) -> None:
    """Delete a build tree without ever following a mount left behind (/proc, /sys, /dev)."""
    if not root.exists():
        return
    for target in _mounts_under(root):
        run(["umount", "-l", target], check=False)
    if _mounts_under(root):
        raise LabError(f"mounts remain under {root}; unmount them, then delete it by hand")
    run(["rm", "-rf", "--one-file-system", str(root)])


def _bootstrap(recipe: Recipe, tarball: Path) -> None:
    """debootstrap + customize + tar into ``tarball`` (atomic)."""
    ensure_commands({"debootstrap": "debootstrap"}, "building the lab node image")
    if os.geteuid() != 0:
        raise LabError("building the lab node image needs root (debootstrap); run as root")
    mirror = debian_mirror(recipe.suite)
    work = _cache() / f"build-{recipe.digest()}"
    remove_tree(work)
    rootfs = work / "rootfs"
    rootfs.mkdir(parents=True)
    try:
        started = time.monotonic()
        log.info("debootstrap %s into %s (takes about a minute)", recipe.suite, rootfs)
        run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(recipe.packages)}",
                recipe.suite,
                str(rootfs),
                mirror,
            ]
        )
        log.info("debootstrap done in %.0f s", time.monotonic() - started)
        customize(rootfs, recipe)
        partial = tarball.with_suffix(".partial")
        tar = ["tar", "-C", str(rootfs), "--one-file-system", "--numeric-owner"]
        run([*tar, "-cf", str(partial), "."])
        partial.replace(tarball)
    finally:
        remove_tree(work)


def _prune_tarballs(keep: Path) -> None:
    for old in _cache().glob("rootfs-*.tar"):
        if old != keep:
            log.info("removing stale rootfs tarball %s", old)
            old.unlink()


def _prune_images(podman: Podman, keep: str) -> None:
    """Remove node images of older recipes; ones still used by a container stay."""
    out = podman("images", "--format", "{{.Repository}}:{{.Tag}}", IMAGE_REPO).stdout
    for ref in out.split():
        stale = ref != keep and ref.startswith(f"{IMAGE_REPO}:")
        if stale and podman("rmi", ref, check=False).returncode == 0:
            log.info("removed node image of an older recipe: %s", ref)


def _import(podman: Podman, recipe: Recipe, tarball: Path, uid: int, gid: int) -> None:
    changes = [
        'CMD ["/sbin/init"]',
        "STOPSIGNAL SIGRTMIN+3",
        f"LABEL decice.recipe={recipe.digest()}",
        f"LABEL decice.munge_uid={uid}",
        f"LABEL decice.munge_gid={gid}",
    ]
    argv = ["import"]
    for change in changes:
        argv += ["--change", change]
    podman(*argv, str(tarball), recipe.ref)


def _ids_from_tarball(tarball: Path) -> tuple[int, int]:
    proc = run(["tar", "-xOf", str(tarball), "./etc/passwd"])
    for line in proc.stdout.splitlines():
        parts = line.split(":")
        if parts[0] == "munge":
            return int(parts[2]), int(parts[3])
    raise LabError(f"user 'munge' missing from {tarball}: delete it and run again")


def _labels(podman: Podman, ref: str) -> dict[str, str]:
    data = podman.json("image", "inspect", ref)
    labels = (data[0].get("Labels") or {}) if data else {}
    return {str(k): str(v) for k, v in labels.items()}


def ensure_image(podman: Podman, recipe: Recipe | None = None) -> NodeImage:
    """Return the node image for ``recipe``, building or importing it only when missing."""
    ensure_commands({"podman": "podman", "runc": "runc"}, "lab nodes")
    recipe = recipe or node_recipe()
    with _build_lock():
        built: float | None = None
        if not podman.image_exists(recipe.ref):
            started = time.monotonic()
            tarball = _cache() / f"rootfs-{recipe.digest()}.tar"
            if not tarball.is_file():
                _bootstrap(recipe, tarball)
            else:
                log.info("importing cached rootfs %s", tarball)
            uid, gid = _ids_from_tarball(tarball)
            _import(podman, recipe, tarball, uid, gid)
            _prune_tarballs(tarball)
            _prune_images(podman, recipe.ref)
            built = time.monotonic() - started
            log.info("node image %s ready in %.0f s", recipe.ref, built)
        labels = _labels(podman, recipe.ref)
    try:
        uid, gid = int(labels["decice.munge_uid"]), int(labels["decice.munge_gid"])
    except (KeyError, ValueError) as exc:
        raise LabError(
            f"image {recipe.ref} lacks decice labels; remove it with `podman rmi {recipe.ref}`"
        ) from exc
    return NodeImage(recipe.ref, recipe.digest(), uid, gid, built)
