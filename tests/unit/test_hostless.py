"""A segment whose plays match no host needs no ansible-playbook run: the host patterns of
the collection's plays resolved against the inventories decice writes, and every pattern
only Ansible can resolve left to Ansible."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from decice import inventory, lifecycle

SIM = {
    "all": {
        "hosts": {"localhost": {"ansible_connection": "local"}},
        "children": {
            "kube_control_plane": {"hosts": {}},
            "kube_node": {"hosts": {}},
            "decice_edge": {"hosts": {}},
            "decice_hpc": {"hosts": {}},
            "k8s_cluster": {"children": {"kube_control_plane": {}, "kube_node": {}}},
        },
    }
}
LAB = {
    "all": {
        "hosts": {"localhost": {}},
        "children": {
            "kube_control_plane": {"hosts": {"node1": {}}},
            "kube_node": {"hosts": {"node1": {}, "node2": {}}},
            "decice_edge": {"hosts": {"edge1": {}}},
            # a child listed as {} names the group defined above
            "k8s_cluster": {"children": {"kube_control_plane": {}, "kube_node": {}}},
        },
    }
}


@pytest.mark.parametrize(
    ("inv", "pattern", "hosts"),
    [
        (SIM, "k8s_cluster:decice_edge:decice_hpc", set()),
        (SIM, "localhost", {"localhost"}),
        (SIM, "localhost:decice_edge", {"localhost"}),
        (LAB, "k8s_cluster:decice_edge:decice_hpc", {"node1", "node2", "edge1"}),
        (LAB, "k8s_cluster", {"node1", "node2"}),
        (LAB, "node2, decice_edge", {"node2", "edge1"}),
        (LAB, "nonesuch", set()),
        (LAB, "all", {"localhost", "node1", "node2", "edge1"}),
    ],
)
def test_plain_unions_of_names_resolve(inv: dict[str, Any], pattern: str, hosts: set[str]) -> None:
    assert inventory.pattern_hosts(inv, pattern) == hosts


@pytest.mark.parametrize(
    "pattern",
    ["k8s_*", "k8s_cluster:!decice_edge", "k8s_cluster:&kube_node", "~node\\d", "a[0]", ""],
)
def test_other_patterns_are_left_to_ansible(pattern: str) -> None:
    assert inventory.pattern_hosts(LAB, pattern) is None


def test_a_group_that_contains_itself_ends() -> None:
    loop = {
        "all": {"children": {"a": {"hosts": {"h": {}}, "children": {"b": {"children": {"a": {}}}}}}}
    }
    assert inventory.pattern_hosts(loop, "b") == {"h"}


def test_the_collections_host_phases_are_hostless_on_a_sim_only() -> None:
    up = lifecycle.playbook_for("up")
    assert lifecycle.hostless(up, ["preflight", "baseline", "prepare"], SIM)
    assert not lifecycle.hostless(up, ["preflight", "baseline", "prepare"], LAB)
    # one phase with a host is enough to run the segment
    assert not lifecycle.hostless(up, ["prepare", "kubernetes"], SIM)
    assert not lifecycle.hostless(up, ["addons"], SIM)
    reset = lifecycle.playbook_for("reset")
    assert lifecycle.hostless(reset, ["restore", "verify"], SIM)
    assert not lifecycle.hostless(reset, ["restore", "verify"], LAB)


def test_a_phase_the_playbook_does_not_name_runs(tmp_path: Path) -> None:
    book = tmp_path / "up.yml"
    book.write_text("- name: 'other: x'\n  hosts: k8s_cluster\n  tasks: []\n")
    assert lifecycle.play_patterns(book) == {"other": "k8s_cluster"}
    assert not lifecycle.hostless(book, ["preflight"], SIM)
    assert lifecycle.hostless(book, ["other"], SIM)
