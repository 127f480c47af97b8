"""Spec validation: every bad input gives exit 2 and names the file and line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from decice import spec
from decice.errors import InputError
from tests.support import assert_plan_refuses

pytestmark = pytest.mark.unit

BAD = sorted((Path(__file__).parent.parent / "data" / "bad_specs").glob("*.yaml"))


def _expectations(path: Path) -> tuple[int, str]:
    text = path.read_text()
    line = re.search(r"# expect-line: (\d+)", text)
    message = re.search(r"# expect: (.+)", text)
    assert line and message, f"{path} lacks its expect comments"
    return int(line.group(1)), message.group(1).strip()


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_spec_names_file_and_line(path: Path, tmp_path: Path) -> None:
    line, message = _expectations(path)
    assert_plan_refuses(path, tmp_path, line, message)


def test_corpus_is_not_empty() -> None:
    assert len(BAD) >= 10


def test_all_issues_reported_at_once() -> None:
    text = "name: x\ntarget: nope\naddons:\n  volcano:\n    enabled: maybe\n    colour: red\n"
    with pytest.raises(spec.SpecError) as caught:
        spec.parse(text, "s.yaml")
    lines = sorted(issue.line for issue in caught.value.issues)
    assert lines == [2, 5, 6]


def test_builtin_default_spec_is_sim_and_valid(tmp_path: Path) -> None:
    loaded = spec.load(None, cwd=tmp_path)
    assert loaded.source is None
    assert loaded.spec.target == "sim"
    assert loaded.state_dir == tmp_path / ".decice"
    counts = {g.name_prefix: g.count for g in loaded.spec.sim.nodes}
    assert counts == {"cp": 1, "cpu": 2, "gpu": 2, "edge": 2, "hpc": 1}


def test_local_decice_yaml_wins_over_builtin(tmp_path: Path) -> None:
    (tmp_path / "decice.yaml").write_text("name: mine\ntarget: sim\n")
    loaded = spec.load(None, cwd=tmp_path)
    assert loaded.spec.name == "mine"
    assert loaded.source == tmp_path / "decice.yaml"


def test_missing_spec_file_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="spec file not found"):
        spec.load(tmp_path / "nope.yaml")


def test_allow_untested_versions_accepts_other_pins() -> None:
    parsed, _ = spec.parse(
        'name: x\nallow_untested_versions: true\nkubernetes: {version: "1.29.0"}\n', "s.yaml"
    )
    assert parsed.kubernetes.version == "1.29.0"


def test_pinned_version_written_out_is_accepted() -> None:
    from decice import versions

    pin = versions.version_of("volcano")
    parsed, _ = spec.parse(f'name: x\naddons: {{volcano: {{version: "v{pin}"}}}}\n', "s.yaml")
    assert parsed.addons.volcano.version == f"v{pin}"
