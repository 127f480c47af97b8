"""The node image recipe: stable hash, and what customize does to a rootfs."""

from __future__ import annotations

import dataclasses

import pytest

from decice.lab.image import IMAGE_REPO, customize, node_recipe, remove_tree

pytestmark = pytest.mark.unit


def test_recipe_hash_is_stable():
    a, b = node_recipe("6.1.0-test"), node_recipe("6.1.0-test")
    assert a.digest() == b.digest()
    assert len(a.digest()) == 16
    assert a.ref == f"{IMAGE_REPO}:{a.digest()}"


def test_recipe_hash_follows_content():
    base = node_recipe("6.1.0-test")
    assert node_recipe("6.1.0-other").digest() != base.digest()
    more = dataclasses.replace(base, packages=(*base.packages, "vim"))
    assert more.digest() != base.digest()
    edited = dataclasses.replace(base, files={**base.files, "etc/motd": "hi"})
    assert edited.digest() != base.digest()


def test_recipe_content():
    recipe = node_recipe("6.1.0-test")
    wanted = ("systemd", "openssh-server", "kmod", "slurmd", "slurmctld", "slurm-client", "munge")
    for pkg in wanted:
        assert pkg in recipe.packages
    assert recipe.files["etc/machine-id"] == ""
    assert "br_netfilter" in recipe.files["lib/modules/6.1.0-test/modules.builtin"]
    assert (
        "SLURM_ROLE=controller"
        in recipe.files["etc/systemd/system/slurmctld.service.d/decice-role.conf"]
    )
    assert (
        "SLURM_ROLE=compute" in recipe.files["etc/systemd/system/slurmd.service.d/decice-role.conf"]
    )
    assert "ssh-keygen -A" in recipe.files["etc/systemd/system/ssh.service.d/decice-hostkeys.conf"]
    assert ("depmod", "-a", "6.1.0-test") in recipe.chroot_commands
    assert ("touch", "-d", "@0", "/var/lib/apt/lists") in recipe.chroot_commands


def test_customize_applies_files_links_and_removals(tmp_path):
    root = tmp_path / "rootfs"
    (root / "etc/ssh").mkdir(parents=True)
    (root / "etc/ssh/ssh_host_ed25519_key").write_text("secret")
    (root / "etc/ssh/sshd_config").write_text("keep")
    plugin_dir = root / "usr/lib/x86_64-linux-gnu/slurm-wlm"
    plugin_dir.mkdir(parents=True)
    (plugin_dir / "mpi_pmix_v4.so").write_text("")
    (plugin_dir / "mpi_none.so").write_text("")
    (root / "etc/machine-id").write_text("0123456789abcdef")
    (root / "var/lib/dbus").mkdir(parents=True)
    (root / "var/lib/dbus/machine-id").write_text("0123456789abcdef")
    recipe = dataclasses.replace(node_recipe("6.1.0-test"), chroot_commands=())

    customize(root, recipe)

    assert not (root / "etc/ssh/ssh_host_ed25519_key").exists()
    assert (root / "etc/ssh/sshd_config").read_text() == "keep"
    assert not (plugin_dir / "mpi_pmix_v4.so").exists()
    assert (plugin_dir / "mpi_none.so").exists()
    assert (root / "etc/machine-id").read_text() == ""
    assert str((root / "var/lib/dbus/machine-id").readlink()) == "/etc/machine-id"
    assert (root / "lib/modules/6.1.0-test/modules.builtin").is_file()
    assert (root / "etc/systemd/system/slurmd.service.d/decice-role.conf").is_file()


def test_remove_tree(tmp_path):
    tree = tmp_path / "t"
    (tree / "a/b").mkdir(parents=True)
    (tree / "a/b/f").write_text("x")
    remove_tree(tree)
    assert not tree.exists()
    remove_tree(tree)  # absent: no error
