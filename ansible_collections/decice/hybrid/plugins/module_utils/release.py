"""One helm release as the add-on engine keeps it: helm run for one release, what an earlier
run left, and what the next step is (docs/addons.md).

``decice.hybrid.addon_install`` reads the release once (``helm status -o json``: its state,
revision, chart and user-supplied values) and decides here what to do:

- a first install that never completed (``pending-install``, or ``failed`` at revision 1):
  remove it first (uninstalling a release that was once deployed would take its templated
  CRDs, and every custom resource, with it: that is never done);
- an upgrade or rollback killed mid-way (``pending-upgrade``, ``pending-rollback``): helm
  refuses every later operation on it, so roll back to the revision before first;
- then ``helm upgrade --install`` unless the release is deployed with the same chart (name,
  version, appVersion) and the same values: then it is kept (no new helm revision).

``decice.hybrid.addon_remove`` runs helm through :class:`Helm` too. Standard library only,
apart from PyYAML for a chart's ``Chart.yaml``.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NOT_FOUND = "not found"
#: the states a killed first install leaves: removed before the install
BROKEN_FIRST = ("pending-install",)
#: the states a killed upgrade or rollback leaves: rolled back before the upgrade
BROKEN_UPGRADE = ("pending-upgrade", "pending-rollback")


class HelmError(Exception):
    """helm could not be run, or refused; the message says which command and why."""


@dataclass(frozen=True)
class Helm:
    """helm for one release in one namespace (``--kubeconfig`` when given)."""

    binary: str
    release: str
    namespace: str
    kubeconfig: str = ""
    timeout: float = 300

    def run(
        self, verb: str, *args: str, stdin: str | None = None, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``helm VERB RELEASE ARGS --namespace NS``; the completed process, whatever its code."""
        argv = [self.binary, verb, self.release, *args, "--namespace", self.namespace]
        if self.kubeconfig:
            argv += ["--kubeconfig", self.kubeconfig]
        try:
            return subprocess.run(
                argv,
                input=stdin,
                capture_output=True,
                text=True,
                timeout=self.timeout + 30,
                check=False,
                env=dict(env) if env is not None else None,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HelmError(f"running {self.binary} {verb}: {exc}") from None

    def must(self, verb: str, *args: str, env: Mapping[str, str] | None = None) -> str:
        """``run``, its stdout; :class:`HelmError` with helm's own words when it fails."""
        done = self.run(verb, *args, env=env)
        if done.returncode != 0:
            raise HelmError(f"helm {verb} {self.release}: {done.stderr.strip()[-2000:]}")
        return done.stdout

    def status(self) -> Earlier | None:
        """The release as the last run left it; None when there is none."""
        done = self.run("status", "--output", "json")
        if done.returncode != 0:
            if NOT_FOUND in done.stderr.lower():
                return None
            raise HelmError(f"helm status {self.release}: {done.stderr.strip()[-2000:]}")
        try:
            return Earlier.from_status(json.loads(done.stdout))
        except (ValueError, TypeError, AttributeError) as exc:
            raise HelmError(f"helm status {self.release}: unreadable output ({exc})") from None


@dataclass(frozen=True)
class Chart:
    """What identifies a chart to a release: name, version and appVersion."""

    name: str
    version: str
    app_version: str = ""


@dataclass(frozen=True)
class Earlier:
    """A release's latest revision as ``helm status -o json`` tells it."""

    status: str
    revision: int
    chart: Chart
    values: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_status(cls, doc: Mapping[str, Any]) -> Earlier:
        meta = (doc.get("chart") or {}).get("metadata") or {}
        return cls(
            status=str((doc.get("info") or {}).get("status") or ""),
            revision=int(doc.get("version") or 0),
            chart=Chart(
                str(meta.get("name") or ""),
                str(meta.get("version") or ""),
                str(meta.get("appVersion") or ""),
            ),
            values=dict(doc.get("config") or {}),
        )


def chart_of(path: str) -> Chart:
    """The Chart.yaml of a chart: a directory's own, or a packaged chart's (``.tgz``) top
    directory's."""
    import yaml  # PyYAML comes with ansible-core

    try:
        if Path(path).is_dir():
            meta = yaml.safe_load((Path(path) / "Chart.yaml").read_bytes())
        else:
            meta = _packaged_chart_yaml(path, yaml)
    except (OSError, tarfile.TarError, yaml.YAMLError) as exc:
        raise HelmError(f"{path}: cannot read the chart: {exc}") from None
    if not isinstance(meta, Mapping) or not meta.get("name") or not meta.get("version"):
        raise HelmError(f"{path}: Chart.yaml names no chart name and version")
    return Chart(str(meta["name"]), str(meta["version"]), str(meta.get("appVersion") or ""))


def _packaged_chart_yaml(path: str, yaml: Any) -> Any:
    with tarfile.open(path, "r:gz") as archive:
        for member in archive:
            parts = member.name.split("/")
            if len(parts) == 2 and parts[1] == "Chart.yaml" and member.isfile():
                stream = archive.extractfile(member)
                return yaml.safe_load(stream.read()) if stream else None
    raise HelmError(f"{path}: no Chart.yaml at the chart's top")


def repair(earlier: Earlier | None) -> str:
    """What an earlier run left that must be undone first: ``remove`` (a first install that
    never completed), ``rollback`` (a killed upgrade or rollback) or ``""``."""
    if earlier is None:
        return ""
    if earlier.status in BROKEN_FIRST or (earlier.status == "failed" and earlier.revision == 1):
        return "remove"
    if earlier.status in BROKEN_UPGRADE:
        return "rollback"
    return ""


def deploy_needed(earlier: Earlier | None, chart: Chart, values: Mapping[str, Any]) -> bool:
    """Whether ``helm upgrade --install`` must run: no release (or one being uninstalled),
    one not deployed, or another chart or other values than wanted."""
    if earlier is None or earlier.status != "deployed":
        return True
    return earlier.chart != chart or dict(earlier.values) != dict(values)


def revision_of(stdout: str) -> int:
    """The revision ``helm upgrade --install -o json`` reports; 0 when it says none."""
    try:
        return int(json.loads(stdout).get("version") or 0)
    except (ValueError, TypeError, AttributeError):
        return 0
