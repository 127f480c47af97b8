"""decice-interlink-slurm over HTTP against a fake SLURM whose jobs run on this machine."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from decice.interlink import slurm
from decice.interlink.__main__ import main
from decice.interlink.jobscript import Defaults, Runtime
from decice.interlink.plugin import Config, Plugin
from decice.interlink.server import Listen, make_server
from decice.interlink.store import SUBMITTING, Entry
from tests.support import wait_for
from tests.unit import interlink_fakes

pytestmark = pytest.mark.unit

TOKEN = "t0k3n-for-tests"
REPO = Path(__file__).resolve().parents[2]


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=30)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(self.unix_path)
        self.sock = sock


@dataclass
class Client:
    listen: Listen
    token: str | None

    def call(self, method: str, path: str, body: Any = None, token: str | None = "") -> tuple:
        conn: http.client.HTTPConnection
        if self.listen.kind == "unix":
            conn = UnixConnection(self.listen.path)
        else:
            conn = http.client.HTTPConnection(self.listen.host, self.listen.port, timeout=30)
        headers = {"Content-Type": "application/json"}
        use = self.token if token == "" else token
        if use:
            headers["Authorization"] = f"Bearer {use}"
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read().decode()
        conn.close()
        ctype = resp.getheader("Content-Type", "")
        return resp.status, json.loads(raw) if ctype.startswith("application/json") else raw


@dataclass
class Env:
    data: Path
    registry: Path
    bin_dir: Path


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    env = Env(tmp_path / "data", tmp_path / "registry", tmp_path / "bin")
    interlink_fakes.install(env.bin_dir, env.registry)
    for key, value in interlink_fakes.env(env.bin_dir, env.registry, env.data).items():
        monkeypatch.setenv(key, value)
    yield env
    interlink_fakes.kill_all(env.registry)


def start(env: Env, listen: Listen, token: str | None) -> tuple[Client, Any]:
    plugin = Plugin(Config(env.data, Runtime("bare"), Defaults()))
    plugin.ensure_dirs()
    server = make_server(plugin, listen, token)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}).start()
    if listen.kind == "tcp":
        listen = Listen("tcp", "127.0.0.1", server.server_address[1])  # type: ignore[attr-defined]
    return Client(listen, token), server


@pytest.fixture
def plugin(fake_slurm: Env) -> Iterator[Client]:
    client, server = start(fake_slurm, Listen("tcp", "127.0.0.1", 0), TOKEN)
    yield client
    server.shutdown()
    server.server_close()


def pod(
    name: str,
    uid: str,
    script: str,
    resources: dict | None = None,
    *,
    init: str | None = None,
    extra: dict | None = None,
) -> dict:
    res = {"requests": {"cpu": "500m", "memory": "64Mi"}} if resources is None else resources
    main_c: dict[str, Any] = {"name": "main", "image": "busybox", "command": ["sh", "-c", script]}
    main_c["resources"] = res
    spec: dict[str, Any] = {"containers": [main_c]}
    if init:
        spec["initContainers"] = [{"name": "setup", "image": "b", "command": ["sh", "-c", init]}]
    spec.update(extra or {})
    return {"metadata": {"name": name, "namespace": "hpc", "uid": uid}, "spec": spec}


def uid(n: int) -> str:
    return f"{n:08d}-0000-4000-8000-000000000000"


def create(client: Client, p: dict, containers: list | None = None) -> tuple:
    return client.call("POST", "/create", {"pod": p, "container": containers or []})


def state_of(client: Client, p: dict, which: str = "containers") -> dict:
    code, body = client.call("GET", "/status", [p])
    assert code == 200, body
    return body[0][which][0]["state"]


def wait_terminated(client: Client, p: dict, which: str = "containers") -> dict:
    def done() -> dict | None:
        state = state_of(client, p, which)
        return state.get("terminated")

    return wait_for("the container to terminate", done, timeout=20)


def registry_jobs(env: Env) -> list[str]:
    return sorted(f.stem for f in env.registry.glob("*.name"))


def test_pod_runs_to_success_with_logs(plugin: Client, fake_slurm: Env):
    p = pod("ok", uid(1), "echo one; echo two; echo three; sleep 1")
    code, body = create(plugin, p)
    assert code == 200
    assert body == {"PodUID": uid(1), "PodJID": "1"}
    running = wait_for("running", lambda: state_of(plugin, p).get("running"), timeout=10)
    assert running["startedAt"].endswith("Z")
    done = wait_terminated(plugin, p)
    assert done["exitCode"] == 0 and done["reason"] == "Completed"
    assert done["startedAt"] <= done["finishedAt"]
    log_req = {"Namespace": "hpc", "PodUID": uid(1), "PodName": "ok", "ContainerName": "main"}
    code, text = plugin.call("GET", "/getLogs", {**log_req, "Opts": {}})
    assert (code, text) == (200, "one\ntwo\nthree\n")
    code, text = plugin.call("GET", "/getLogs", {**log_req, "Opts": {"Tail": 2}})
    assert text == "two\nthree\n"
    code, text = plugin.call("GET", "/getLogs", {**log_req, "Opts": {"Bytes": 5}})
    assert text == "one\nt"
    code, text = plugin.call("GET", "/getLogs", {**log_req, "Opts": {"Previous": True}})
    assert (code, text) == (200, "")  # never restarted: no previous log, as a kubelet says
    script = (fake_slurm.registry / "1.script").read_text()
    assert "#SBATCH --cpus-per-task=1\n" in script and "#SBATCH --mem=64M\n" in script
    assert f"#SBATCH --job-name=decice-{uid(1)}\n" in script
    # sbatch told to read only the plugin's #SBATCH lines, not #PBS/#BSUB ones a pod could plant
    assert (fake_slurm.registry / "sbatch-calls").read_text().split()[:2] == [
        "--parsable",
        "--ignore-pbs",
    ]


def test_failing_pod_reports_its_exit_code(plugin: Client):
    p = pod("bad", uid(2), "echo oops >&2; exit 7")
    assert create(plugin, p)[0] == 200
    done = wait_terminated(plugin, p)
    assert (done["exitCode"], done["reason"]) == (7, "Error")


def test_failing_init_container_ends_the_job(plugin: Client):
    p = pod("init", uid(3), "echo never", init="exit 4")
    assert create(plugin, p)[0] == 200
    assert wait_terminated(plugin, p, "initContainers")["exitCode"] == 4
    main_done = wait_terminated(plugin, p)
    assert main_done["exitCode"] != 0 and "never started" in main_done["message"]


def test_pending_job_is_waiting(plugin: Client, fake_slurm: Env):
    (fake_slurm.registry / "hold").touch()
    p = pod("held", uid(4), "true")
    assert create(plugin, p)[0] == 200
    waiting = state_of(plugin, p)["waiting"]
    assert waiting["reason"] == "Pending" and "Resources" in waiting["message"]


def test_delete_cancels_the_running_job(plugin: Client, fake_slurm: Env):
    p = pod("long", uid(5), "sleep 300")
    assert create(plugin, p)[0] == 200
    wait_for("running", lambda: state_of(plugin, p).get("running"), timeout=10)
    code, text = plugin.call("POST", "/delete", p)
    assert code == 200 and "cancelled" in text
    assert (fake_slurm.registry / "cancelled").read_text().split() == ["1"]
    pid = int((fake_slurm.registry / "1.pid").read_text())
    wait_for("the job's process to end", lambda: not Path(f"/proc/{pid}").exists(), timeout=10)
    assert plugin.call("GET", "/status", [p]) == (200, [])
    assert not (fake_slurm.data / "jobs" / f"hpc-{uid(5)}").exists()
    assert not (fake_slurm.data / "state" / f"hpc-{uid(5)}.json").exists()
    code, text = plugin.call("DELETE", "/delete", p)  # again: nothing to do, no error
    assert code == 200 and "not known" in text


@pytest.mark.parametrize(
    ("resources", "reason"),
    [
        ({"limits": {"cpu": "5", "memory": "1Gi"}}, "asks for 5 cpus; the largest node"),
        ({"limits": {"cpu": "1", "memory": "9000Mi"}}, "9000 MiB of memory"),
        ({"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "3"}}, "3 GPUs"),
    ],
)
def test_unrunnable_pod_submits_nothing(plugin: Client, fake_slurm: Env, resources, reason):
    code, text = create(plugin, pod("x", uid(6), "true", resources))
    assert code == 422 and reason in text
    assert registry_jobs(fake_slurm) == []
    assert not list((fake_slurm.data / "state").iterdir())
    assert not list((fake_slurm.data / "jobs").iterdir())


def test_store_entry_is_written_before_sbatch(plugin: Client, fake_slurm: Env):
    assert create(plugin, pod("s", uid(7), "true"))[0] == 200
    seen = (fake_slurm.registry / "state-at-sbatch").read_text().split()
    assert seen == [f"hpc-{uid(7)}.json"]
    entry = json.loads((fake_slurm.registry / "entries-at-sbatch").read_text())
    assert entry["state"] == SUBMITTING and entry["jid"] == ""
    stored = json.loads((fake_slurm.data / "state" / f"hpc-{uid(7)}.json").read_text())
    assert stored["state"] == "submitted" and stored["jid"] == "1"


def test_failed_sbatch_leaves_nothing(plugin: Client, fake_slurm: Env):
    (fake_slurm.registry / "fail-sbatch").touch()
    code, text = create(plugin, pod("f", uid(8), "true"))
    assert code == 502 and "Batch job submission failed" in text
    assert not list((fake_slurm.data / "state").iterdir())
    assert not list((fake_slurm.data / "jobs").iterdir())


def test_retried_create_does_not_submit_twice(plugin: Client, fake_slurm: Env):
    p = pod("twice", uid(9), "sleep 5")
    assert create(plugin, p)[1] == create(plugin, p)[1] == {"PodUID": uid(9), "PodJID": "1"}
    assert registry_jobs(fake_slurm) == ["1"]


def test_restarted_plugin_keeps_tracking(fake_slurm: Env):
    first, server = start(fake_slurm, Listen("tcp", "127.0.0.1", 0), TOKEN)
    p = pod("r", uid(10), "sleep 2; exit 3")
    assert create(first, p)[0] == 200
    server.shutdown()
    server.server_close()
    second, server = start(fake_slurm, Listen("tcp", "127.0.0.1", 0), TOKEN)
    try:
        assert wait_terminated(second, p)["exitCode"] == 3
    finally:
        server.shutdown()
        server.server_close()


def test_ended_job_forgotten_by_squeue_still_has_its_exit_code(plugin: Client, fake_slurm: Env):
    (fake_slurm.registry / "forget-ended").touch()
    p = pod("gone", uid(11), "exit 5")
    assert create(plugin, p)[0] == 200
    assert wait_terminated(plugin, p)["exitCode"] == 5


def test_ping_reports_free_resources_of_usable_nodes(plugin: Client):
    expected = {
        "status": "ok",
        "resources": {
            "cpu": "7",
            "memory": "15000Mi",
            "pods": "1000",
            "accelerators": [{"resourceType": "nvidia.com/gpu", "available": "1"}],
        },
    }
    assert plugin.call("GET", "/status", []) == (200, expected)
    assert plugin.call("POST", "/status", []) == (200, expected)
    assert plugin.call("GET", "/ping") == (200, expected)


def test_bearer_token_is_required(plugin: Client):
    assert plugin.call("GET", "/ping", token=None) == (401, "missing or wrong bearer token")
    assert plugin.call("GET", "/ping", token="wrong")[0] == 401
    assert plugin.call("GET", "/nothing")[0] == 404


def test_bad_requests_are_400(plugin: Client):
    code, text = plugin.call("POST", "/create", {"pod": {"metadata": {"uid": "../x"}}})
    assert code == 400 and "metadata.uid" in text
    bad_log = {"Namespace": "hpc", "PodUID": uid(1), "Opts": {"Tail": 1, "Bytes": 1}}
    assert plugin.call("GET", "/getLogs", bad_log)[0] == 400
    unknown = {"Namespace": "hpc", "PodUID": uid(99), "PodName": "x", "Opts": {}}
    assert plugin.call("GET", "/getLogs", unknown)[0] == 404


def test_unix_socket_is_private(fake_slurm: Env):
    sock = fake_slurm.data / "plugin.sock"
    fake_slurm.data.mkdir(mode=0o700)
    client, server = start(fake_slurm, Listen("unix", path=str(sock)), None)
    try:
        assert sock.stat().st_mode & 0o777 == 0o600
        assert client.call("GET", "/ping")[0] == 200
    finally:
        server.shutdown()
        server.server_close()


def test_cancel_all_finds_jobs_by_store_and_by_name(plugin: Client, fake_slurm: Env, capsys):
    p = pod("a", uid(12), "sleep 300")
    assert create(plugin, p)[0] == 200
    # a job submitted by a plugin that died before recording its id: found by its
    # name decice-<uid> and its working dir under this data dir
    lost = uid(13)
    job_dir = fake_slurm.data / "jobs" / f"hpc-{lost}"
    job_dir.mkdir()
    script = job_dir / "job.sh"
    script.write_text(
        f"#!/bin/bash\n#SBATCH --job-name=decice-{lost}\n#SBATCH --chdir={job_dir}\n"
        f"#SBATCH --output={job_dir}/job.out\nsleep 300\n"
    )
    subprocess.run(["sbatch", "--parsable", str(script)], check=True, capture_output=True)
    # a job of someone else with the same name prefix elsewhere: left alone
    other = fake_slurm.data.parent / "other"
    other.mkdir()
    (other / "job.sh").write_text(
        f"#!/bin/bash\n#SBATCH --job-name=decice-{uid(14)}\n#SBATCH --chdir={other}\n"
        f"#SBATCH --output={other}/job.out\nsleep 300\n"
    )
    subprocess.run(["sbatch", str(other / "job.sh")], check=True, capture_output=True)
    assert main(["cancel-all", "--data-dir", str(fake_slurm.data), "--wait", "10"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == ["cancelled SLURM job 1", "cancelled SLURM job 2"]
    assert (fake_slurm.registry / "cancelled").read_text().split() == ["1", "2"]
    assert main(["cancel-all", "--data-dir", str(fake_slurm.data), "--wait", "1"]) == 0
    assert "no job of this plugin" in capsys.readouterr().out


def test_delete_finds_a_job_whose_id_was_never_recorded(plugin: Client, fake_slurm: Env):
    lost = uid(15)
    job_dir = fake_slurm.data / "jobs" / f"hpc-{lost}"
    job_dir.mkdir()
    (job_dir / "job.sh").write_text(
        f"#!/bin/bash\n#SBATCH --job-name=decice-{lost}\n#SBATCH --chdir={job_dir}\n"
        f"#SBATCH --output={job_dir}/job.out\nsleep 300\n"
    )
    subprocess.run(["sbatch", str(job_dir / "job.sh")], check=True, capture_output=True)
    from decice.interlink.store import Store

    Store(fake_slurm.data / "state").put(Entry("lost", "hpc", lost, str(job_dir)))
    code, text = plugin.call("POST", "/delete", pod("lost", lost, "true"))
    assert code == 200 and "SLURM job 1 cancelled" in text


def _serve_argv(data: Path, *extra: str) -> list[str]:
    return ["serve", "--data-dir", str(data), *extra]


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::", "node1.example"])
def test_a_routable_tcp_listen_without_a_token_is_refused_at_start(
    tmp_path: Path, capsys, host: str
):
    data = tmp_path / "d"
    assert main(_serve_argv(data, "--listen", f"tcp:{host}:4000")) == 2
    err = capsys.readouterr().err
    assert f"tcp:{host}:4000: without --token-file this would be an open port" in err
    assert "tcp:127.0.0.1:PORT" in err and not data.exists()


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_needs_no_token(host: str):
    from decice.interlink.server import check_tcp_access, is_loopback

    assert is_loopback(host)
    check_tcp_access(Listen("tcp", host, 4000), None)  # raises on refusal


def test_interlink_without_authorization_is_answered_on_loopback(fake_slurm: Env):
    """interLink 0.6.2 sends no Authorization header: on loopback it gets its answers."""
    client, server = start(fake_slurm, Listen("tcp", "127.0.0.1", 0), None)
    try:
        code, body = client.call("GET", "/ping")
        assert code == 200 and body["status"] == "ok"
        p = pod("noauth", uid(30), "echo hi")
        assert create(client, p)[0] == 200
        assert wait_terminated(client, p)["exitCode"] == 0
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--default-cpu", "0"], "--default-cpu '0': give at least 1"),
        (["--default-cpu", "many"], "--default-cpu/--default-memory: 'many' is not a quantity"),
        (["--default-memory", "lots"], "'lots' is not a quantity"),
        (["--mpi-launcher", ""], "--mpi-launcher '': give a command"),
        (["--mpi-launcher", "-np 4"], "give a command"),
        (["--mpi-launcher", "mpiexec 'x"], "No closing quotation"),
    ],
)
def test_bad_size_defaults_and_launcher_exit_2_before_anything_is_made(
    tmp_path: Path, capsys, flags: list[str], says: str
):
    data = tmp_path / "d"
    assert main(_serve_argv(data, *flags)) == 2
    assert says in capsys.readouterr().err
    assert not data.exists()


def test_size_defaults_and_launcher_reach_the_job(fake_slurm: Env):
    from decice.interlink.podspec import SizeDefaults

    plugin = Plugin(
        Config(
            fake_slurm.data,
            Runtime("bare"),
            Defaults(mpi_launcher=("srun", "--mpi=pmix")),
            sizes=SizeDefaults(2, 512),
        )
    )
    plugin.ensure_dirs()
    body = pod("dflt", uid(43), "true", {})
    body["metadata"]["annotations"] = {"slurm-job.vk.io/mpi-flags": "true"}
    plugin.create({"pod": body})
    script = (fake_slurm.registry / "1.script").read_text()
    assert "#SBATCH --cpus-per-task=2\n#SBATCH --mem=512M\n" in script
    assert "exec srun --mpi=pmix sh -c true" in script


def test_tcp_needs_a_private_token_file(tmp_path: Path, capsys):
    data = tmp_path / "d"
    token = tmp_path / "token"
    token.write_text("x\n")
    token.chmod(0o644)
    assert (
        main(_serve_argv(data, "--listen", "tcp:127.0.0.1:4000", "--token-file", str(token))) == 2
    )
    err = capsys.readouterr().err
    assert f"--token-file {token}: mode 0644" in err and "chmod 600" in err
    assert main(_serve_argv(data, "--token-file", str(tmp_path / "missing"))) == 2
    assert "cannot read it" in capsys.readouterr().err
    assert main(_serve_argv(data, "--listen", "http://x")) == 2
    assert "use tcp:HOST:PORT" in capsys.readouterr().err
    assert main(_serve_argv(tmp_path / "a b")) == 2
    assert "--data-dir" in capsys.readouterr().err


def test_sigterm_stops_serving_and_removes_the_pidfile(fake_slurm: Env, tmp_path: Path):
    pidfile = tmp_path / "plugin.pid"
    env = {**os.environ, "PYTHONPATH": str(REPO / "cli")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "decice.interlink",
            "serve",
            "--data-dir",
            str(fake_slurm.data),
            "--pidfile",
            str(pidfile),
            "--runtime",
            "bare",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        sock = fake_slurm.data / "plugin.sock"
        wait_for("the socket", sock.exists, timeout=10)
        assert pidfile.read_text().strip() == str(proc.pid)
        client = Client(Listen("unix", path=str(sock)), None)
        assert client.call("GET", "/ping")[0] == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert "jobs keep running" in err
    assert not pidfile.exists() and not sock.exists()


def test_secrets_never_reach_the_log(fake_slurm: Env, caplog):
    caplog.set_level("DEBUG", logger="decice.interlink")
    client, server = start(fake_slurm, Listen("tcp", "127.0.0.1", 0), TOKEN)
    try:
        p = pod("sec", uid(16), "true")
        p["spec"]["containers"][0]["env"] = [{"name": "PASSWORD", "value": "hunter2-secret"}]
        assert create(client, p)[0] == 200
        create(client, pod("bad", uid(17), "true", {}))
        time.sleep(0.2)
    finally:
        server.shutdown()
        server.server_close()
    assert "hunter2-secret" not in caplog.text and TOKEN not in caplog.text
    env_file = fake_slurm.data / "jobs" / f"hpc-{uid(16)}" / "main.env"
    assert env_file.stat().st_mode & 0o777 == 0o600


def test_status_calls_share_one_squeue_per_second(plugin: Client, fake_slurm: Env):
    a, b = pod("a", uid(18), "sleep 30"), pod("b", uid(19), "sleep 30")
    assert create(plugin, a)[0] == 200
    calls = fake_slurm.registry / "squeue-calls"
    calls.unlink(missing_ok=True)
    for _ in range(3):
        assert plugin.call("GET", "/status", [a])[0] == 200
    assert len(calls.read_text().splitlines()) == 1
    assert create(plugin, b)[0] == 200  # a create makes the next /status ask again
    assert "waiting" in state_of(plugin, b) or "running" in state_of(plugin, b)
    assert len(calls.read_text().splitlines()) == 2


def _log_call(client: Client, body: dict) -> tuple[int, list[bytes], str]:
    conn = http.client.HTTPConnection(client.listen.host, client.listen.port, timeout=30)
    headers = {"Authorization": f"Bearer {client.token}"}
    conn.request("GET", "/getLogs", json.dumps(body), headers)
    resp = conn.getresponse()
    chunks = []
    while chunk := resp.read1(65536):
        chunks.append(chunk)
    conn.close()
    return resp.status, chunks, resp.getheader("Transfer-Encoding", "")


def test_follow_timestamps_and_since_over_http(plugin: Client, fake_slurm: Env):
    p = pod("follow", uid(40), "echo one; sleep 1.5; echo two; sleep 1.5; echo three")
    assert create(plugin, p)[0] == 200
    req = {"Namespace": "hpc", "PodUID": uid(40), "PodName": "follow", "ContainerName": "main"}
    started = time.monotonic()
    code, chunks, framing = _log_call(plugin, {**req, "Opts": {"Follow": True}})
    assert (code, framing) == (200, "chunked")
    assert b"".join(chunks) == b"one\ntwo\nthree\n"
    assert len(chunks) >= 2  # sent as the lines came, not at the end
    assert time.monotonic() - started >= 2.5  # it waited for the container to end
    wait_terminated(plugin, p)
    code, text = plugin.call("GET", "/getLogs", {**req, "Opts": {"Timestamps": True}})
    stamps = [line.split(" ", 1) for line in text.splitlines()]
    assert [words for _, words in stamps] == ["one", "two", "three"]
    assert stamps[0][0] < stamps[2][0] and all(s.endswith("Z") for s, _ in stamps)
    code, text = plugin.call("GET", "/getLogs", {**req, "Opts": {"SinceTime": stamps[1][0]}})
    assert text == "two\nthree\n"


def test_a_followed_log_of_an_ended_container_ends_at_once(plugin: Client, fake_slurm: Env):
    p = pod("quick", uid(41), "echo done")
    create(plugin, p)
    wait_terminated(plugin, p)
    req = {"Namespace": "hpc", "PodUID": uid(41), "PodName": "quick", "ContainerName": "main"}
    code, chunks, _ = _log_call(plugin, {**req, "Opts": {"Follow": True, "Tail": 1}})
    assert code == 200 and b"".join(chunks) == b"done\n"


def test_deleting_a_pod_whose_job_ended_says_so(plugin: Client, fake_slurm: Env):
    p = pod("ended", uid(42), "true")
    create(plugin, p)
    wait_terminated(plugin, p)
    wait_for("the job to end", lambda: slurm.queue()["1"].state == "COMPLETED", timeout=10)
    code, text = plugin.call("POST", "/delete", p)
    assert code == 200 and "had already ended (COMPLETED)" in text, text
