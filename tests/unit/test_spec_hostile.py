"""Hostile specs, init destinations and state dirs: exit 2 (or a warning), never a traceback.

Each case goes through the CLI; the message must name the file, the place and a fix.
"""

from __future__ import annotations

import json
import resource
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from decice import records, yamlpos
from decice.errors import EXIT_BAD_INPUT
from tests.support import run_decice, run_record

pytestmark = pytest.mark.unit

CPU_BOUND_S = 10  # a sanity bound per command (the figures are in bench/spec/load.py)


@dataclass(frozen=True)
class Case:
    """A spec text and what the error must say: line, words of the message, the fix."""

    id: str
    text: str | bytes
    line: int
    says: str
    fix: str


def _anchor_bomb(levels: int = 9) -> str:
    lines = ["name: bomb", 'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels + 1):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _static_hosts(count: int, last_role: str) -> str:
    lines = ["name: big", "target: static", "hosts:"]
    for index in range(count):
        role = "control_plane, etcd" if index == 0 else "worker"
        if index == count - 1:
            role = last_role
        address = f"10.{index // 65536}.{index // 256 % 256}.{index % 256}"
        lines += [f"  - name: node{index}", f"    address: {address}", f"    roles: [{role}]"]
    return "\n".join(lines) + "\n"


SPECS = [
    Case("anchor_bomb", _anchor_bomb(), 8, "expands to more than", "use fewer aliases"),
    Case(
        "deep_nesting",
        "name: x\nsim: " + "[" * 5000 + "]" * 5000 + "\n",
        2,
        "nested more than 64 levels deep",
        "flatten the structure",
    ),
    Case(
        "long_integer",
        "name: x\nscheduler: {burst: " + "9" * 5000 + "}\n",
        2,
        "5000 characters is too long",
        "quote it if it is text",
    ),
    Case(
        "python_object_tag",
        "name: x\nsim: !!python/object/apply:os.system ['true']\n",
        2,
        "tag !!python/object/apply:os.system is not allowed",
        "remove the tag",
    ),
    Case("local_tag", "name: x\nsim: !custom {}\n", 2, "tag !custom is not allowed", "remove"),
    Case(
        "two_documents",
        "name: x\ntarget: sim\n---\nname: y\n",
        3,
        "a second YAML document",
        "remove this '---'",
    ),
    Case("nul_byte", "name: x\ntarget: sim\x00\n", 2, "control character U+0000", "remove it"),
    Case(
        "null_key",
        "name: x\ntarget: sim\nnull: 3\n",
        3,
        "null: YAML reads the key 'null' as null",
        "quote it ('null':)",
    ),
    Case(
        "integer_key_top",
        "name: x\n1: 3\n",
        2,
        "1: YAML reads the key '1' as a number",
        "quote it ('1':)",
    ),
    Case(
        "integer_key_nested",
        "name: x\nsim:\n  nodes: []\n  1: 3\n",
        4,
        "sim.1: YAML reads the key '1' as a number",
        "quote it ('1':)",
    ),
    Case(
        "bool_key",
        "name: x\nscheduler:\n  yes: 1\n",
        3,
        "scheduler.yes: YAML reads the key 'yes' as true/false",
        "quote it",
    ),
    Case(
        "list_as_key",
        "name: x\n? [a, b]\n: 1\n",
        2,
        "a key must be a word, not a list or mapping",
        "plain word",
    ),
    Case("alias_loop", "name: x\nsim: &s {nodes: *s}\n", 2, "(a loop)", "write the value out"),
    Case("unknown_alias", "name: x\nsim: *nope\n", 2, "alias *nope has no anchor", "define &nope"),
    Case("merge_scalar", "name: x\nsim: {<<: 5}\n", 2, "'<<' merges mappings only", "<<: *name"),
    Case(
        "not_utf8",
        b"name: x\ntarget: \xff\xfe\n",
        2,
        "byte 0xff is not UTF-8 text",
        "save the spec as UTF-8 text",
    ),
    Case(
        "hosts_30k_last_bad",
        _static_hosts(30000, "boss"),
        3 + 3 * 29999 + 3,
        "hosts[29999].roles[0]",
        "use one of",
    ),
]


def _child_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _assert_refused(stderr: str, returncode: int, *names: str) -> None:
    assert returncode == EXIT_BAD_INPUT, stderr
    assert "Traceback" not in stderr, stderr
    for name in names:
        assert name in stderr, stderr
    assert "\n    fix: " in stderr, stderr


@pytest.mark.parametrize("case", SPECS, ids=[case.id for case in SPECS])
def test_hostile_spec_is_exit_2_naming_file_place_and_fix(case: Case, tmp_path: Path) -> None:
    spec = _write(tmp_path / "spec.yaml", case.text)
    start = _child_cpu_seconds()  # CPU, not wall: other work shares the machine
    result = run_decice(tmp_path, "plan", "-f", str(spec), timeout=120)
    elapsed = _child_cpu_seconds() - start
    _assert_refused(result.stderr, result.returncode, f"{spec}:{case.line}:", case.says)
    assert f"fix: {case.fix}" in result.stderr or case.fix in result.stderr, result.stderr
    assert "tabs" not in result.stderr, "only a tab gets the tab hint"
    assert elapsed < CPU_BOUND_S, f"{case.id} took {elapsed:.1f} s of CPU"
    assert not (tmp_path / ".decice").exists(), "bad input must touch nothing"


def test_anchor_bomb_fails_fast_in_process() -> None:
    start = time.process_time()
    with pytest.raises(yamlpos.YamlSyntaxError, match="expands to more than"):
        yamlpos.load(_anchor_bomb())
    assert time.process_time() - start < 1.0


def test_aliases_and_merges_within_the_bound_are_expanded(tmp_path: Path) -> None:
    text = (
        "name: x\n"
        "addons:\n"
        "  volcano: &on {enabled: true}\n"
        "  kubeedge: *on\n"
        "  sedna: {<<: *on, values: {a: 1}}\n"
    )
    doc = yamlpos.load(text)
    assert doc.data["addons"]["kubeedge"] == {"enabled": True}
    assert doc.data["addons"]["sedna"] == {"enabled": True, "values": {"a": 1}}
    assert doc.locate(("addons", "kubeedge")) == yamlpos.Pos(4, 13)
    result = run_decice(tmp_path, "plan", "--json", "-f", str(_write(tmp_path / "s.yaml", text)))
    assert result.returncode == 0, result.stderr


def test_nesting_limit_is_exact() -> None:
    def nested(levels: int) -> str:
        return "[" * levels + "]" * levels

    assert yamlpos.load(nested(yamlpos.MAX_DEPTH)).data is not None
    with pytest.raises(yamlpos.YamlSyntaxError, match="nested more than"):
        yamlpos.load(nested(yamlpos.MAX_DEPTH + 1))


def test_core_tags_are_read_as_plain_data() -> None:
    text = 'a: !!str 123\nb: !!int "5"\nc: !!float 1\nd: !!bool "true"\ne: !!null ""\n'
    text += "f: !!map {x: !!seq [1]}\n"
    doc = yamlpos.load(text)
    assert doc.data == {"a": "123", "b": 5, "c": 1.0, "d": True, "e": None, "f": {"x": [1]}}


def test_30k_host_spec_loads_in_sanity_time(tmp_path: Path) -> None:
    spec = _write(tmp_path / "big.yaml", _static_hosts(30000, "worker"))
    start = _child_cpu_seconds()
    result = run_decice(tmp_path, "plan", "--json", "-f", str(spec), timeout=120)
    elapsed = _child_cpu_seconds() - start
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(json.loads(result.stdout)["hosts"]) == 30000
    assert elapsed < CPU_BOUND_S, f"30k hosts took {elapsed:.1f} s of CPU"


def test_tab_indentation_keeps_the_tab_hint(tmp_path: Path) -> None:
    spec = _write(tmp_path / "s.yaml", "name: x\n\ttarget: sim\n")
    result = run_decice(tmp_path, "plan", "-f", str(spec))
    _assert_refused(result.stderr, result.returncode, f"{spec}:2:", "indent with spaces, not tabs")


def test_spec_path_that_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "d.yaml").mkdir()
    result = run_decice(tmp_path, "plan", "-f", "d.yaml")
    _assert_refused(result.stderr, result.returncode, f"{tmp_path / 'd.yaml'}: is a directory")


def test_spec_path_that_is_a_symlink_loop(tmp_path: Path) -> None:
    (tmp_path / "loop.yaml").symlink_to("loop.yaml")
    result = run_decice(tmp_path, "plan", "-f", "loop.yaml")
    _assert_refused(result.stderr, result.returncode, f"{tmp_path / 'loop.yaml'}: cannot open")


def test_local_decice_yaml_directory_is_not_skipped(tmp_path: Path) -> None:
    (tmp_path / "decice.yaml").mkdir()
    result = run_decice(tmp_path, "plan")
    _assert_refused(result.stderr, result.returncode, f"{tmp_path / 'decice.yaml'}: is a directory")


# ------------------------------------------------------------------ init -o


def _init_destinations(root: Path) -> dict[str, tuple[Path, str]]:
    """-o value -> (the path the message names, words it says), after planting them."""
    (root / "self").symlink_to("self")
    (root / "a").symlink_to("b")
    (root / "b").symlink_to("a")
    (root / "dir").mkdir()
    (root / "dangling").symlink_to(root / "created-through-link.yaml")
    (root / "file").write_text("x")
    return {
        "missing/decice.yaml": (root / "missing", "directory does not exist"),
        "a/decice.yaml": (root / "a/decice.yaml", "cannot use this path"),
        "self": (root / "self", "is a symbolic link"),
        "dangling": (root / "dangling", "is a symbolic link"),
        "dir": (root / "dir", "is a directory"),
        "file/decice.yaml": (root / "file/decice.yaml", "cannot use this path"),
    }


def test_init_to_a_bad_destination_is_exit_2_and_writes_nothing(tmp_path: Path) -> None:
    for output, (named, says) in _init_destinations(tmp_path).items():
        before = sorted(p.name for p in tmp_path.iterdir())
        result = run_decice(tmp_path, "init", "-o", str(tmp_path / output), "--force")
        _assert_refused(result.stderr, result.returncode, f"{named}: {says}")
        assert sorted(p.name for p in tmp_path.iterdir()) == before, output
    assert not (tmp_path / "created-through-link.yaml").exists()


def test_init_writes_a_valid_starter_and_refuses_to_overwrite(tmp_path: Path) -> None:
    assert run_decice(tmp_path, "init", "-o", "new.yaml").returncode == 0
    assert run_decice(tmp_path, "plan", "-f", "new.yaml").returncode == 0
    again = run_decice(tmp_path, "init", "-o", "new.yaml")
    _assert_refused(again.stderr, again.returncode, "new.yaml: exists already")


# ------------------------------------------------------------------ state dir


@pytest.mark.parametrize("command", ["status", "runs"])
def test_state_dir_that_is_a_file(command: str, tmp_path: Path) -> None:
    (tmp_path / ".decice").write_text("")
    result = run_decice(tmp_path, command)
    _assert_refused(
        result.stderr, result.returncode, f"{tmp_path / '.decice'}: the state directory is not"
    )


@pytest.mark.parametrize("command", ["status", "runs"])
def test_lock_that_is_a_directory(command: str, tmp_path: Path) -> None:
    (tmp_path / ".decice" / records.LOCK_NAME).mkdir(parents=True)
    result = run_decice(tmp_path, command)
    _assert_refused(result.stderr, result.returncode, f"{tmp_path / '.decice' / 'lock'}: ")


@pytest.mark.parametrize("command", ["status", "runs"])
def test_record_that_is_a_json_list_is_skipped_with_a_warning(command: str, tmp_path: Path) -> None:
    store = records.RunStore(tmp_path / ".decice")
    good = run_record("20250101T000000-aaaa")
    good.status = "ok"
    store.create(good)
    bad = store.run_dir("20250101T000001-bbbb") / records.RECORD_NAME
    bad.parent.mkdir(parents=True)
    bad.write_text("[1, 2]\n")
    result = run_decice(tmp_path, command, "--json")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert f"warning: {bad}: not a run record" in result.stderr
    assert "fix: " in result.stderr
    data = json.loads(result.stdout)
    ids = [run["id"] for run in data["runs"]] if command == "runs" else [data["last_run"]["id"]]
    assert ids == [good.id]
    assert bad.exists(), "a skipped record is left as it is"
