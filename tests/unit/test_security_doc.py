"""docs/security.md names the tests that cover each class of input: each one exists."""

from __future__ import annotations

import re

import pytest

from tests.support import REPO

pytestmark = pytest.mark.unit


def test_every_test_the_security_doc_names_exists() -> None:
    text = (REPO / "docs" / "security.md").read_text()
    refs = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", text)
    assert len(refs) >= 20, refs
    missing = []
    for path, name in refs:
        file = REPO / path
        if not file.is_file():
            missing.append(path)
        elif name and not re.search(rf"^def {name}\(", file.read_text(), re.MULTILINE):
            missing.append(f"{path}::{name}")
    assert missing == [], missing
