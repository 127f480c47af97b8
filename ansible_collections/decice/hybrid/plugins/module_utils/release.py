"""One helm release as the add-on engine keeps it: helm run for one release, what an earlier
run left, and what the next step is (docs/addons.md).

``decice.hybrid.addon_install`` reads the release once (``helm list --all``: its state,
revision and chart; ``helm get values`` for a deployed one: its user-supplied values) and
decides here what to do:

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
import re
import subprocess
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

NOT_FOUND = "not found"
# the argument spec of one add-on's release, shared by addon_install and addon_remove
# (documented by the doc fragment decice.hybrid.helm_release)
OPTIONS: dict[str, dict[str, Any]] = {
    "name": {"type": "str", "required": True},
    "release": {"type": "str", "required": True},
    "namespace": {"type": "str", "required": True},
    "helm": {"type": "path", "default": "helm"},
}
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
        self, *args: str, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``helm ARGS --namespace NS [--kubeconfig K]``; the completed process, whatever its
        code."""
        argv = [self.binary, *args, "--namespace", self.namespace]
        if self.kubeconfig:
            argv += ["--kubeconfig", self.kubeconfig]
        try:
            return subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=self.timeout + 30,
                check=False,
                env=dict(env) if env is not None else None,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HelmError(f"running {self.binary} {args[0]}: {exc}") from None

    def must(self, *args: str, env: Mapping[str, str] | None = None) -> str:
        """``run``, its stdout; :class:`HelmError` with helm's own words when it fails."""
        done = self.run(*args, env=env)
        if done.returncode != 0:
            raise HelmError(f"helm {args[0]} {self.release}: {done.stderr.strip()[-2000:]}")
        return done.stdout

    def status(self) -> Earlier | None:
        """The release's latest revision as the last run left it (``helm list --all``, and
        ``helm get values`` when it is deployed); None when there is none."""
        listed = self.must("list", "--filter", f"^{re.escape(self.release)}$", "--all",
                           "--output", "json")  # fmt: skip
        try:
            entry = next((e for e in json.loads(listed or "[]") if e.get("name") == self.release),
                         None)  # fmt: skip
            if entry is None:
                return None
            earlier = Earlier.from_list(entry)
            if earlier.status == "deployed":
                got = self.must("get", "values", self.release, "--output", "json")
                earlier = replace(earlier, values=dict(json.loads(got or "null") or {}))
        except (ValueError, TypeError, AttributeError) as exc:
            raise HelmError(f"helm list {self.release}: unreadable output ({exc})") from None
        return earlier


@dataclass(frozen=True)
class Chart:
    """What identifies a chart to a release: name, version and appVersion."""

    name: str
    version: str
    app_version: str = ""

    @property
    def ref(self) -> str:
        """name-version, as ``helm list`` names a release's chart."""
        return f"{self.name}-{self.version}"


@dataclass(frozen=True)
class Earlier:
    """A release's latest revision as ``helm list --all -o json`` tells it; its user-supplied
    values (``helm get values``) are read only for a deployed one."""

    status: str
    revision: int
    chart: str  # name-version, as helm lists it
    app_version: str = ""
    values: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_list(cls, entry: Mapping[str, Any]) -> Earlier:
        return cls(
            status=str(entry.get("status") or ""),
            revision=int(entry.get("revision") or 0),
            chart=str(entry.get("chart") or ""),
            app_version=str(entry.get("app_version") or ""),
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
    same_chart = (earlier.chart, earlier.app_version) == (chart.ref, chart.app_version)
    return not same_chart or dict(earlier.values) != dict(values)


def revision_of(stdout: str) -> int:
    """The revision ``helm upgrade --install -o json`` reports; 0 when it says none."""
    try:
        return int(json.loads(stdout).get("version") or 0)
    except (ValueError, TypeError, AttributeError):
        return 0
