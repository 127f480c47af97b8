"""Kubespray's own Python env: its requirements.txt pins an Ansible that decice does not use.

The env is built with ``python -m venv`` + ``pip install -r requirements.txt`` (pip reads
the machine's own index configuration) and kept until the requirements change: its
marker file holds the sha256 of requirements.txt and the Python version, written last.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from decice.errors import RunFailedError
from decice.kubespray import source
from decice.paths import Subpath

MARKER = "decice-requirements.sha256"
PIP_TIMEOUT_S = 1800


class VenvError(RunFailedError):
    """Kubespray's Python env could not be built or does not fit the checkout."""


@dataclass(frozen=True)
class KubesprayEnv:
    path: Path
    ansible_core: str
    window: tuple[str, str]
    built: bool  # built by this call (False: reused)

    bin_dir = Subpath("path", "bin")
    python = Subpath("bin_dir", "python")
    ansible_playbook = Subpath("bin_dir", "ansible-playbook")


def requirements_key(checkout: Path) -> str:
    """What the env depends on: requirements.txt and the interpreter's version."""
    digest = hashlib.sha256((checkout / "requirements.txt").read_bytes())
    digest.update(f"\npython {sys.version_info[0]}.{sys.version_info[1]}".encode())
    return digest.hexdigest()


def env_dir(src: source.Source) -> Path:
    """``cache_dir()/kubespray/<tag>/venv`` (a checkout you gave gets its own by path)."""
    if src.origin == "checkout":
        tag = "checkout-" + hashlib.sha256(str(src.path).encode()).hexdigest()[:12]
        return source.tag_dir(tag) / "venv"
    return source.tag_dir(src.tag) / "venv"


def is_current(path: Path, key: str) -> bool:
    marker = path / MARKER
    return marker.is_file() and marker.read_text(encoding="utf-8").strip() == key


def ensure(src: source.Source, *, python: str | None = None) -> KubesprayEnv:
    """The env for ``src`` (built when missing or stale) after checking its ansible-core."""
    window = source.ansible_window(src.path)
    path = env_dir(src)
    key = requirements_key(src.path)
    built = False
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with source._locked(path.parent / ".venv.lock"):
        if not is_current(path, key):
            _build(path, src.path / "requirements.txt", python or sys.executable)
            built = True
            version = ansible_core_version(path)
            check_window(version, window, src.path)
            (path / MARKER).write_text(key + "\n", encoding="utf-8")
    version = ansible_core_version(path)
    check_window(version, window, src.path)
    return KubesprayEnv(path, version, window, built)


def _build(path: Path, requirements: Path, python: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    log = path.parent / "venv-build.log"
    with log.open("w", encoding="utf-8") as out:
        for argv in (
            [python, "-m", "venv", str(path)],
            [str(path / "bin" / "python"), "-m", "pip", "install", "-r", str(requirements)],
        ):
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
            try:
                done = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=PIP_TIMEOUT_S,
                    check=False,
                    env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
                )
            except subprocess.TimeoutExpired:
                shutil.rmtree(path, ignore_errors=True)
                raise VenvError(f"building Kubespray's Python env timed out; see {log}") from None
            if done.returncode != 0:
                shutil.rmtree(path, ignore_errors=True)
                tail = "\n".join(log.read_text(encoding="utf-8").splitlines()[-8:])
                raise VenvError(
                    f"building Kubespray's Python env failed ({argv[2]} exited "
                    f"{done.returncode}); full log {log}\n{tail}"
                )


def ansible_core_version(path: Path) -> str:
    """ansible-core's version inside the env (read by the env's own interpreter)."""
    python = path / "bin" / "python"
    try:
        done = subprocess.run(
            [str(python), "-c", "from ansible.release import __version__; print(__version__)"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except OSError as exc:
        raise VenvError(f"{python}: cannot run: {exc}") from None
    if done.returncode != 0:
        raise VenvError(
            f"{path}: ansible-core is not installed in Kubespray's env\n"
            f"    {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ''}"
        )
    return done.stdout.strip()


def check_window(version: str, window: tuple[str, str], checkout: Path) -> None:
    low, high = window
    have = source.version_tuple(version)
    if not (source.version_tuple(low) <= have < source.version_tuple(high)):
        raise VenvError(
            f"ansible-core {version} in Kubespray's env is outside {low} <= v < {high} "
            f"that {checkout} asserts\n"
            "    fix: the checkout's requirements.txt must pin an Ansible inside that window"
        )
