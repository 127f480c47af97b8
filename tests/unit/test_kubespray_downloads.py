"""decice.kubespray.downloads: naming the file Kubespray's download stage stopped at."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from decice.kubespray import downloads, render, run
from decice.mirror import Mirror
from decice.runner import HostResult, PlayStarted, RunFinished, TaskStarted

pytestmark = pytest.mark.unit

FILE = "etcd-3.5.25-linux-amd64.tar.gz"
REL = "github.com/etcd-io/etcd/releases/download/v3.5.25/etcd-v3.5.25-linux-amd64.tar.gz"


def _event(directory: Path, counter: int, event: str, host: str, task: str, **data: Any) -> None:
    body = {"counter": counter, "event": event, "event_data": {"host": host, "task": task, **data}}
    (directory / f"{counter}-x.json").write_text(json.dumps(body))


def _stopped_run(directory: Path, role_tasks: Path) -> None:
    """Job events of a run that stopped at etcd's download (as etcdctl_etcdutl includes it)."""
    directory.mkdir(parents=True)
    role_tasks.write_text(
        "- name: Download etcd binary\n"
        '  include_tasks: "../../download/tasks/download_file.yml"\n'
        "  vars:\n"
        '    download: "{{ download_defaults | combine(downloads.etcd) }}"\n'
    )
    body = {"counter": 1, "event": "playbook_on_include"}
    body["event_data"] = {"task": "Download etcd binary", "task_path": f"{role_tasks}:1"}
    (directory / "1-x.json").write_text(json.dumps(body))
    censored = {"censored": "the output has been hidden due to the fact that 'no_log: true'"}
    _event(directory, 10, "runner_on_failed", "node2", downloads.DOWNLOAD_TASK, res=censored)
    _event(directory, 11, "runner_on_failed", "node1", downloads.DOWNLOAD_TASK, res=censored)
    # an ignored failure and another task's failure are not download stops
    _event(directory, 12, "runner_on_failed", "node3", downloads.DOWNLOAD_TASK, ignore_errors=True)
    _event(directory, 13, "runner_on_failed", "node3", "Other task")
    (directory / "broken.json").write_text("{")


def test_failed_downloads_name_each_host_and_the_item_its_include_passes(tmp_path):
    _stopped_run(tmp_path / "job_events", tmp_path / "main.yml")
    assert downloads.failed_downloads(tmp_path / "job_events") == [
        downloads.FailedDownload("node2", "etcd"),
        downloads.FailedDownload("node1", "etcd"),
    ]
    assert downloads.failed_downloads(tmp_path / "none") == []
    assert downloads.included_item(f"{tmp_path}/main.yml:1") == "etcd"
    assert downloads.included_item(f"{tmp_path}/absent.yml:1") == ""
    assert downloads.included_item("no line number") == ""


def test_explain_names_the_file_its_mirror_place_and_the_fix(tmp_path):
    mirror = Mirror("path", str(tmp_path))
    files_repo = mirror.files_repo()
    failed = [downloads.FailedDownload("node2", "etcd"), downloads.FailedDownload("node1", "etcd")]
    listed = {"etcd": downloads.Listed("etcd", FILE, f"{files_repo}/{REL}")}
    message = downloads.explain(failed, listed, files_repo, mirror)
    assert message.splitlines() == [
        f"Kubespray's download stage stopped on node1, node2: {FILE} is not in the mirror",
        f"    wanted: {files_repo}/{REL}",
        f"    upstream: https://{REL}",
        f"    missing: {tmp_path}/files/{REL}",
        "    fix: run `decice mirror sync` on a machine with internet access to add "
        "Kubespray's offline files for the pinned versions, or copy the upstream file to "
        f"{tmp_path}/files/{REL}",
    ]
    # in the mirror on the controller, yet the nodes failed: the mirror is not mounted there
    placed = tmp_path / "files" / REL
    placed.parent.mkdir(parents=True)
    placed.write_text("x")
    mounted = downloads.explain(failed, listed, files_repo, mirror)
    assert f"it is in the mirror ({placed}) but the nodes cannot read it" in mounted
    assert f"mount the mirror at {tmp_path} on every node" in mounted


def test_explain_an_unknown_item_lists_the_enabled_files_missing_from_the_mirror(tmp_path):
    mirror = Mirror("path", str(tmp_path))
    files_repo = mirror.files_repo()
    listed = {
        "etcd": downloads.Listed("etcd", FILE, f"{files_repo}/{REL}"),
        "kata": downloads.Listed("kata", "kata.tar.xz", f"{files_repo}/k/kata", enabled=False),
        "argocd": downloads.Listed("argocd", "argocd.yml", "https://elsewhere/argocd.yml"),
    }
    message = downloads.explain([downloads.FailedDownload("node1", "")], listed, files_repo, mirror)
    assert message.splitlines()[:2] == [
        "Kubespray's download stage stopped on node1: a file it fetches is not in the mirror",
        f"    not in the mirror: {FILE}",
    ]
    assert "decice mirror sync" in message


def test_explain_without_the_download_list_or_a_local_mirror():
    failed = [downloads.FailedDownload("node1", "etcd")]
    message = downloads.explain(failed, {}, "https://m.example/files", Mirror("url", "https://m"))
    assert message.splitlines()[0] == (
        "Kubespray's download stage stopped on node1: a file it fetches is not in the mirror "
        "(downloads.etcd)"
    )
    assert "decice mirror sync" in message and "not in the mirror:" not in message
    assert downloads.in_mirror("https://m.example/files/a", "https://m.example/files", None) is None
    assert downloads.upstream("https://other/x", "https://m.example/files") == "https://other/x"


def test_list_downloads_failure_gives_an_empty_list(tmp_path):
    missing = tmp_path / "no-such-ansible-playbook"
    assert downloads.list_downloads(missing, {}, tmp_path, tmp_path / "gv.yml", tmp_path) == {}
    assert "kubespray_defaults" in (tmp_path / "list-downloads.yml").read_text()


def test_a_local_mirror_gets_one_download_attempt_a_url_mirror_the_default(tmp_path):
    local = render.ClusterSettings(kube_version="1.32.10", files_repo="file:///m/files")
    remote = render.ClusterSettings(kube_version="1.32.10", files_repo="https://m/files")
    assert render.group_vars(local)["all"]["download_retries"] == 0
    assert "download_retries" not in render.group_vars(remote)["all"]


def test_lab_nodes_leave_resolv_conf_alone():
    lab = render.ClusterSettings(kube_version="1.32.10", container_nodes=True)
    assert render.group_vars(lab)["all"]["resolvconf_mode"] == "none"
    plain = render.ClusterSettings(kube_version="1.32.10")
    assert "resolvconf_mode" not in render.group_vars(plain)["all"]


def test_outcome_records_how_far_the_playbook_got(monkeypatch, tmp_path):
    events = [
        PlayStarted("", "Prepare for etcd install"),
        TaskStarted("", "Download_file | Set pathname of cached file"),
        TaskStarted("", downloads.DOWNLOAD_TASK),
        HostResult("", "node1", downloads.DOWNLOAD_TASK, "failed", "hidden"),
        RunFinished("failed", 2, {"node1": {"failed": 1}}),
    ]
    monkeypatch.setattr(run, "run", lambda *_a, **_k: iter(events))
    inv = run.invocation("cluster.yml", tmp_path, tmp_path / "venv", tmp_path / "hosts.yml")
    outcome = run.run_and_collect(inv, tmp_path / "runner", ident="cluster")
    assert not outcome.ok
    assert outcome.reached("cluster.yml") == (
        "kubespray cluster.yml reached play 'Prepare for etcd install', "
        "task 'Download_file | Download item'"
    )
    assert run.Outcome().reached("reset.yml") == "kubespray reset.yml: no play started"
