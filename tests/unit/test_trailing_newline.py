"""A value ending in a newline is refused wherever a pattern checks a value (finding 4 of
the second security round): `re.match` with a final `$` matches before a final "\\n", so
such a name passed every check and split the job script or the spec's meaning.

Product patterns end in `\\Z` (or are matched whole); the static check keeps it so."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from decice import lab
from decice.interlink.api import CreateRequest, parse_create, pod_ref
from decice.interlink.errors import BadRequest, Unrunnable
from decice.interlink.podspec import ANN_FLAGS, ANN_PARTITION, ANN_TIME, parse_pod
from decice.lab.errors import LabError
from decice.spec import SpecError, parse
from tests.support import REPO

pytestmark = pytest.mark.unit

PRODUCT = (
    "cli/decice",
    "kube/decice_kube",
    "scheduler/decice_scheduler",
    "ansible_collections/decice/hybrid/plugins",
)


def _dollar_patterns(source: str) -> list[tuple[int, str]]:
    """Patterns given to re.compile/match/search whose text has a `$` (no MULTILINE)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "re"
            and node.func.attr in ("compile", "match", "search")
            and node.args
        ):
            continue
        pattern = node.args[0]
        call = ast.unparse(node)
        if "MULTILINE" in call or "re.M)" in call:
            continue
        if isinstance(pattern, ast.Constant) and "$" in str(pattern.value):
            found.append((node.lineno, str(pattern.value)))
    return found


def test_no_product_pattern_ends_in_a_dollar() -> None:
    offenders = {
        f"{path.relative_to(REPO)}:{line}": pattern
        for root in PRODUCT
        for path in sorted((REPO / root).rglob("*.py"))
        for line, pattern in _dollar_patterns(path.read_text())
    }
    assert offenders == {}, "end the pattern with \\Z (or fullmatch): " + repr(offenders)
    # the check sees the bug it is for
    assert _dollar_patterns('re.compile(r"^[a-z]+$")') == [(1, "^[a-z]+$")]
    assert _dollar_patterns('re.compile(r"^x$", re.MULTILINE)') == []


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ('name: "exp\\n"\n', "name"),
        ('name: x\nlab: {name: "lab1\\n"}\n', "lab.name"),
        (
            'name: x\nsim:\n  nodes:\n    - name_prefix: "cpu\\n"\n      count: 1\n',
            "name_prefix",
        ),
        (
            "name: x\nsim:\n  nodes:\n    - name_prefix: cpu\n      count: 1\n"
            '      capacity: {cpu: "4\\n"}\n',
            "capacity",
        ),
        (
            "name: x\nsim:\n  nodes:\n    - name_prefix: cpu\n      count: 1\n"
            '      labels: {"zone\\n": a}\n',
            "labels",
        ),
        (
            "name: x\naddons:\n  interlink:\n    endpoints:\n      - node: hpc-0\n"
            '        login_host: h\n        partition: "lab\\n"\n',
            "partition",
        ),
        (
            "name: x\naddons:\n  interlink:\n    endpoints:\n      - node: hpc-0\n"
            '        login_host: h\n        account: "acct\\n"\n',
            "account",
        ),
    ],
)
def test_spec_values_ending_in_a_newline_are_refused(spec: str, where: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse(spec, "decice.yaml")
    assert where in str(refused.value), str(refused.value)


def _pod(**meta: object) -> dict[str, object]:
    return {"metadata": {"name": "p", "namespace": "default", "uid": "u-1", **meta}}


@pytest.mark.parametrize("field", ["name", "namespace", "uid"])
def test_the_plugin_refuses_pod_names_ending_in_a_newline(field: str) -> None:
    pod_ref(_pod())  # the same pod without the newline is fine
    with pytest.raises(BadRequest):
        pod_ref(_pod(**{field: "x1\n"}))


def _create(annotations: dict[str, str], env_name: str = "A") -> CreateRequest:
    container = {
        "name": "main",
        "image": "img",
        "command": ["run"],
        "env": [{"name": env_name, "value": "1"}],
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
    }
    meta = {"name": "p", "namespace": "ns", "uid": "u-1", "annotations": annotations}
    return parse_create({"pod": {"metadata": meta, "spec": {"containers": [container]}}})


@pytest.mark.parametrize(
    ("annotations", "env_name"),
    [
        ({ANN_FLAGS: "--comment=x\n"}, "A"),
        ({ANN_TIME: "10:00\n"}, "A"),
        ({ANN_PARTITION: "lab\n"}, "A"),
        ({}, "A\n"),
    ],
)
def test_job_script_values_ending_in_a_newline_are_refused(
    annotations: dict[str, str], env_name: str
) -> None:
    parse_pod(_create({}))  # the same pod without the newline is fine
    with pytest.raises(Unrunnable):
        parse_pod(_create(annotations, env_name))


def test_lab_names_ending_in_a_newline_are_refused() -> None:
    with pytest.raises(LabError, match="invalid lab name"):
        lab.create("lab1\n", 1, False, Path("/nonexistent"))
