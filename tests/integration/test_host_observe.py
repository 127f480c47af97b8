"""decice.hybrid.host_observe reports packages and services exactly as
ansible.builtin.package_facts and ansible.builtin.service_facts do, on a real lab node
(systemd, dpkg): the clean-slate snapshot takes them from it in one module run, and a
baseline taken before must compare equal with a snapshot taken after.

The node gets units of every kind service_facts treats differently first: one running,
one loaded but stopped, one masked, one failed, one only on disk (a unit file systemd has
not loaded: its state comes from `systemctl show`), a template, and a sysv init script.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from decice import lab
from tests.integration.labsupport import ssh
from tests.support import run_playbook

pytestmark = pytest.mark.cleanslate

PLANT = r"""
set -e
unit() { printf '[Service]\nExecStart=%s\n[Install]\nWantedBy=multi-user.target\n' "$2" \
  > /etc/systemd/system/$1.service; }
unit decice-obs-run '/bin/sleep infinity'
unit decice-obs-stopped '/bin/true'
unit decice-obs-failed '/bin/false'
unit decice-obs-disk '/bin/true'
unit decice-obs-tpl@ '/bin/echo %i'
printf '#!/bin/sh\ncase "$1" in status) exit 3;; esac\n' > /etc/init.d/decice-obs-sysv
chmod 755 /etc/init.d/decice-obs-sysv
systemctl daemon-reload
systemctl start decice-obs-run.service
systemctl enable decice-obs-stopped.service 2>/dev/null
systemctl start decice-obs-stopped.service
systemctl mask decice-obs-masked.service 2>/dev/null  # a link to /dev/null, no file
systemctl start decice-obs-failed.service || true
"""

CLEAN = r"""
systemctl stop decice-obs-run.service 2>/dev/null
systemctl disable decice-obs-stopped.service 2>/dev/null
systemctl unmask decice-obs-masked.service 2>/dev/null
rm -f /etc/systemd/system/decice-obs-*.service /etc/init.d/decice-obs-sysv
systemctl daemon-reload; systemctl reset-failed
true
"""

PLAYBOOK = """
- name: Observe one node both ways
  hosts: node1
  gather_facts: false
  tasks:
    - name: Packages, the stock way
      ansible.builtin.package_facts:
        manager: auto
    - name: Services, the stock way
      ansible.builtin.service_facts:
    - name: Both, decice's way
      decice.hybrid.host_observe:
        packages: true
        services: true
      register: observed
    - name: Write what was seen
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: >-
          {{ {'packages': ansible_facts.packages, 'services': ansible_facts.services,
              'observed': observed} | to_json }}
        mode: "0600"
      delegate_to: localhost
"""


def _packages(facts: dict[str, list[dict[str, object]]]) -> dict[str, set[tuple[str, str]]]:
    return {
        name: {(str(v["version"]), str(v.get("arch"))) for v in versions}
        for name, versions in facts.items()
    }


def _services(facts: dict[str, dict[str, object]]) -> dict[str, tuple[object, ...]]:
    return {
        name: (info.get("state"), info.get("status"), info.get("source"))
        for name, info in facts.items()
    }


def test_packages_and_services_match_the_stock_modules(
    lab_nodes: lab.LabInfo, tmp_path: Path
) -> None:
    ssh(lab_nodes, "node1", PLANT)
    try:
        (tmp_path / "observe.yml").write_text(PLAYBOOK)
        out = tmp_path / "seen.json"
        extra = json.dumps({"out": str(out)})
        result = run_playbook(lab_nodes.inventory, tmp_path / "observe.yml", "-e", extra)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    finally:
        ssh(lab_nodes, "node1", CLEAN)
    seen = json.loads(out.read_text())
    observed = seen["observed"]

    stock_packages = _packages(seen["packages"])
    assert len(stock_packages) > 50, "package_facts saw too few packages to compare"
    assert _packages(observed["packages"]) == stock_packages

    stock = _services(seen["services"])
    ours = _services(observed["services"])
    # every kind of unit planted was seen, and the ones whose state is certain have it
    planted = [f"decice-obs-{kind}.service" for kind in ("run", "stopped", "masked", "failed")]
    planted += ["decice-obs-disk.service", "decice-obs-tpl@.service", "decice-obs-sysv"]
    assert not [name for name in planted if name not in stock], sorted(stock)
    assert stock["decice-obs-run.service"][0] == "running"
    assert stock["decice-obs-failed.service"][1] == "failed"
    assert stock["decice-obs-masked.service"][1] == "masked"
    differing = {n: (stock.get(n), ours.get(n)) for n in stock.keys() | ours.keys()}
    differing = {n: pair for n, pair in differing.items() if pair[0] != pair[1]}
    assert not differing, differing
