"""decice.hybrid.host_observe's packages and services, from canned command outputs: the
shapes package_facts and service_facts give, the dpkg/rpm rules, the batched
`systemctl show` and its fallbacks. The same against the stock modules on a real node:
tests/integration/test_host_observe.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO, load_file

pytestmark = pytest.mark.unit

MODULE = REPO / "ansible_collections/decice/hybrid/plugins/modules/host_observe.py"


observe = load_file(MODULE, "decice_host_observe_t")


class FakeModule:
    """Answers run_command from ``outputs`` (argv tuple -> (rc, stdout)); records calls."""

    def __init__(self, outputs: dict[tuple[str, ...], tuple[int, str]], bins: set[str]) -> None:
        self.outputs = outputs
        self.bins = bins
        self.calls: list[tuple[str, ...]] = []

    def get_bin_path(self, name: str, *args: Any, **kw: Any) -> str | None:
        return f"/usr/bin/{name}" if name in self.bins else None

    def run_command(self, argv: list[str], **kw: Any) -> tuple[int, str, str]:
        key = (Path(argv[0]).name, *argv[1:])
        self.calls.append(key)
        rc, out = self.outputs.get(key, (1, ""))
        return rc, out, ""

    def fail_json(self, **kw: Any) -> None:
        raise AssertionError(kw)


DPKG = ("dpkg-query", "-W", "-f", "${db:Status-Abbrev}\t${Package}\t${Version}\t${Architecture}\n")


def test_dpkg_packages_as_package_facts_gives_them() -> None:
    lines = [
        "ii \tbash\t5.2.15-2+b7\tamd64",
        "ii \ttzdata\t2024a-0+deb12u1\tall",
        "ii \tlibc6\t2.36-9\ti386",  # foreign: name qualified, as python-apt's cache keys
        "rc \told-tool\t1.0\tamd64",  # config-files only: not installed
        "un \tnever\t\tamd64",
        "iU \tunpacked\t1:2.0\tamd64",  # has a current version
    ]
    fake = FakeModule(
        {DPKG: (0, "\n".join(lines) + "\n"), ("dpkg", "--print-architecture"): (0, "amd64\n")},
        {"dpkg-query", "dpkg"},
    )
    packages = observe._packages(fake)
    assert packages == {
        "bash": [{"name": "bash", "version": "5.2.15-2+b7", "arch": "amd64", "source": "apt"}],
        "tzdata": [
            {"name": "tzdata", "version": "2024a-0+deb12u1", "arch": "all", "source": "apt"}
        ],
        "libc6:i386": [
            {"name": "libc6:i386", "version": "2.36-9", "arch": "i386", "source": "apt"}
        ],
        "unpacked": [{"name": "unpacked", "version": "1:2.0", "arch": "amd64", "source": "apt"}],
    }


def test_rpm_packages_keep_epoch_and_release_like_package_facts() -> None:
    rpm = ("rpm", "-qa", "--qf", "%{NAME}\t%{VERSION}\t%{RELEASE}\t%{EPOCH}\t%{ARCH}\n")
    fake = FakeModule(
        {rpm: (0, "bash\t5.1.8\t6.el9\t(none)\tx86_64\nkernel\t5.14.0\t362.el9\t1\tx86_64\n")},
        {"rpm"},
    )
    packages = observe._packages(fake)
    assert packages["bash"] == [
        {"name": "bash", "version": "5.1.8", "release": "6.el9", "epoch": "None"}
        | {"arch": "x86_64", "source": "rpm"}
    ]
    assert packages["kernel"][0]["epoch"] == "1"
    assert observe._packages(FakeModule({}, set())) == {}


UNITS = ("systemctl", "list-units", "--no-pager", "--type", "service", "--all", "--plain")
FILES = ("systemctl", "list-unit-files", "--no-pager", "--type", "service", "--all")

LIST_UNITS = """\
ssh.service        loaded    active   running OpenBSD Secure Shell server
cron.service       loaded    inactive dead    Regular background program processing daemon
bad.service        loaded    failed   failed  A failing unit
gone.service       not-found inactive dead    gone.service
"""
LIST_FILES = """\
UNIT FILE            STATE    VENDOR PRESET
ssh.service          enabled  enabled
cron.service         disabled enabled
bad.service          enabled  enabled
disk-a.service       disabled enabled
disk-b.service       masked   enabled
getty@.service       enabled  enabled

6 unit files listed.
"""


def _services_fake(show: dict[tuple[str, ...], tuple[int, str]]) -> FakeModule:
    outputs = {
        ("service", "--status-all"): (0, " [ + ]  procps\n [ - ]  rsync\n"),
        UNITS: (0, LIST_UNITS),
        FILES: (0, LIST_FILES),
        **show,
    }
    return FakeModule(outputs, {"service", "systemctl"})


@pytest.fixture(autouse=True)
def _systemd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(observe, "is_systemd_managed", lambda module: True)


def test_services_as_service_facts_gives_them_with_one_show_for_the_unloaded() -> None:
    batch = ("systemctl", "show", "--property=Id,ActiveState", "--", "disk-a.service")
    fake = _services_fake(
        {
            (*batch, "disk-b.service"): (
                0,
                "Id=disk-a.service\nActiveState=inactive\n\nId=disk-b.service\nActiveState=inactive\n",
            ),
            ("systemctl", "show", "getty@.service", "--property=ActiveState"): (1, ""),
        }
    )
    services = observe._services(fake)

    def unit(name: str, state: str, status: str) -> tuple[str, dict[str, str]]:
        return name, {"name": name, "state": state, "status": status, "source": "systemd"}

    assert services == {
        "procps": {"name": "procps", "state": "running", "source": "sysv"},
        "rsync": {"name": "rsync", "state": "stopped", "source": "sysv"},
        **dict(
            [
                unit("ssh.service", "running", "enabled"),
                unit("cron.service", "stopped", "disabled"),
                # a bad state from list-units is kept over the unit file's state
                unit("bad.service", "stopped", "failed"),
                unit("gone.service", "stopped", "not-found"),
                unit("disk-a.service", "inactive", "disabled"),
                unit("disk-b.service", "inactive", "masked"),
                # a template cannot be shown: 'unknown', as service_facts reports it
                unit("getty@.service", "unknown", "enabled"),
            ]
        ),
    }
    shows = [call for call in fake.calls if call[:2] == ("systemctl", "show")]
    assert len(shows) == 2, shows  # one batch for the unloaded units, one for the template


def test_a_failing_batch_falls_back_to_one_show_per_unit() -> None:
    one = ("systemctl", "show")
    fake = _services_fake(
        {
            (*one, "disk-a.service", "--property=ActiveState"): (0, "ActiveState=active\n"),
            (*one, "disk-b.service", "--property=ActiveState"): (0, "ActiveState=inactive\n"),
        }
    )
    services = observe._services(fake)
    assert services["disk-a.service"]["state"] == "active"
    assert services["disk-b.service"]["state"] == "inactive"
    assert services["getty@.service"]["state"] == "unknown"


def test_without_systemd_only_sysv_scripts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(observe, "is_systemd_managed", lambda module: False)
    services = observe._services(_services_fake({}))
    assert sorted(services) == ["procps", "rsync"]
