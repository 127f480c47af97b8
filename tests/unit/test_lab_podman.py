"""containers.conf rendering for lab nodes."""

from __future__ import annotations

import tomllib

import pytest

from decice.lab.errors import LabError
from decice.lab.podman import host_limits, render_containers_conf, write_containers_conf

pytestmark = pytest.mark.unit


def test_renders_limits_runtime_and_cgroups():
    conf = tomllib.loads(render_containers_conf(20000, 32768))
    assert conf["containers"]["default_ulimits"] == ["nofile=20000:20000", "nproc=32768:32768"]
    assert conf["engine"]["runtime"] == "runc"
    assert conf["engine"]["cgroup_manager"] == "cgroupfs"


def test_rejects_nonsense_limits():
    with pytest.raises(LabError, match="nofile=0"):
        render_containers_conf(0, 10)


def test_limits_never_exceed_the_hard_limits():
    import resource

    nofile, nproc = host_limits()
    hard_nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert nofile == hard_nofile or hard_nofile == resource.RLIM_INFINITY
    assert 1 <= nproc <= 32768


def test_write_is_idempotent(tmp_path):
    path = write_containers_conf(tmp_path)
    first = path.stat().st_mtime_ns
    assert write_containers_conf(tmp_path) == path
    assert path.stat().st_mtime_ns == first
    assert "nofile=" in path.read_text()
