"""`upstream.rewrite`: the longest matching prefix wins (module_utils/upstream.py, used by
the engine's filter and `decice plan`), and the spec reaches the plays as variables."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.decice.hybrid.plugins.module_utils.upstream import rewritten

from decice import spec
from decice.targets import registry
from tests.support import sim_spec

pytestmark = pytest.mark.unit

TABLE = {
    "https://github.com/": "http://proxy.invalid/gh/",
    "https://github.com/kubeedge/": "http://edge.invalid/",
    "oci://ghcr.io/": "oci://127.0.0.1:5000/",
}


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("https://github.com/volcano-sh/x.tgz", "http://proxy.invalid/gh/volcano-sh/x.tgz"),
        ("https://github.com/kubeedge/sedna/v.tar.gz", "http://edge.invalid/sedna/v.tar.gz"),
        ("oci://ghcr.io/kubeflow/charts/t", "oci://127.0.0.1:5000/kubeflow/charts/t"),
        ("https://raw.githubusercontent.com/a", "https://raw.githubusercontent.com/a"),
        ("https://github.comevil/x", "https://github.comevil/x"),
    ],
)
def test_the_longest_prefix_wins_and_nothing_else_changes(url: str, want: str) -> None:
    assert rewritten(url, TABLE) == want
    assert rewritten(url, None) == url == rewritten(url, {})


def test_the_spec_section_reaches_the_plays(tmp_path: Path) -> None:
    path = tmp_path / "decice.yaml"
    path.write_text(sim_spec("u", ("n", 1, 'cpu: "4", memory: 8Gi')))
    loaded = spec.load(path)
    assert "decice_upstream_rewrite" not in registry.get("sim").ansible_vars(loaded)
    path.write_text(
        path.read_text()
        + "upstream:\n  plain_http: true\n  rewrite:\n"
        + '    "oci://ghcr.io/": "oci://127.0.0.1:5000/"\n'
    )
    got = registry.get("sim").ansible_vars(spec.load(path))
    assert got["decice_upstream_rewrite"] == {"oci://ghcr.io/": "oci://127.0.0.1:5000/"}
    assert got["decice_upstream_plain_http"] is True
