"""The shape of the tree: no import cycles (counting what importing a submodule runs:
its packages' ``__init__``; and imports made for type checking only, which are design
dependencies too), targets never reach back into the lifecycle, the scheduler package
stands alone, test modules do not import each other."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import require

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "cli"
SCHEDULER = ROOT / "scheduler"
KUBE = ROOT / "kube"


def _module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, *, runtime_only: bool) -> Iterator[tuple[str, list[str]]]:
    """(module, names) of every import, skipping ``if TYPE_CHECKING:`` blocks if asked."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if runtime_only and isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, [alias.name for alias in node.names]
        stack.extend(ast.iter_child_nodes(node))


def _graph(base: Path, package: str, *, runtime_only: bool = True) -> dict[str, set[str]]:
    files = {_module_name(p, base): p for p in (base / package).rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for module, names in _imports(tree, runtime_only=runtime_only):
            if module not in files:
                continue
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in files]
            if len(targets) < len(names) or not names:
                targets.append(module)  # a name from the module itself (or `import m`)
            graph[name].update(t for t in targets if t != name)
    for name in graph:  # importing a.b.c runs a/__init__ and a/b/__init__ first
        for dep in list(graph[name]):
            parts = dep.split(".")
            for i in range(1, len(parts)):
                parent = ".".join(parts[:i])
                if parent in files and parent != name and not name.startswith(parent + "."):
                    graph[name].add(parent)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_counts_package_inits_and_type_only_imports(tmp_path: Path) -> None:
    """The two ways the spec -> targets -> kubespray -> targets cycle hid (#28)."""
    pkg = tmp_path / "p"
    (pkg / "t").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "t" / "__init__.py").write_text("from p.t import hosts\n")
    (pkg / "t" / "base.py").write_text("")
    (pkg / "t" / "hosts.py").write_text("def f():\n    from p import k\n")
    (pkg / "k.py").write_text("from p.t.base import X\n")
    assert _cycles(_graph(tmp_path, "p")) == [["p.k", "p.t", "p.t.hosts"]]
    (pkg / "t" / "__init__.py").write_text("")
    (pkg / "k.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.t import hosts\n"
    )
    (pkg / "t" / "base.py").write_text("from p import k\n")
    (pkg / "t" / "hosts.py").write_text("from p.t import base\n")
    assert _cycles(_graph(tmp_path, "p")) == []
    assert _cycles(_graph(tmp_path, "p", runtime_only=False)) == [["p.k", "p.t.base", "p.t.hosts"]]


def test_no_import_cycle_among_cli_modules() -> None:
    assert _cycles(_graph(CLI, "decice")) == []


def test_no_cycle_even_through_type_only_imports() -> None:
    assert _cycles(_graph(CLI, "decice", runtime_only=False)) == []
    assert _cycles(_graph(SCHEDULER, "decice_scheduler", runtime_only=False)) == []


def test_no_import_cycle_in_the_scheduler_package() -> None:
    assert _cycles(_graph(SCHEDULER, "decice_scheduler")) == []


def test_the_kubernetes_library_stands_alone() -> None:
    """decice_kube (#28) is what the CLI, the scheduler and the interLink plugin share: it
    has no cycle and imports nothing of theirs, only the standard library, httpx, PyYAML
    (kubeconfigs) and orjson (reading JSON); its quantity grammar and pod-request rule
    import the standard library only (the plugin runs on login hosts without
    dependencies)."""
    assert _cycles(_graph(KUBE, "decice_kube", runtime_only=False)) == []
    stdlib = set(sys.stdlib_module_names) | {"__future__", "decice_kube"}
    for path in (KUBE / "decice_kube").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        tops = {m.split(".")[0] for m, _ in _imports(tree, runtime_only=False)}
        allowed = (
            stdlib if path.stem in ("quantity", "pods") else stdlib | {"httpx", "yaml", "orjson"}
        )
        assert tops <= allowed, f"{path.relative_to(ROOT)} imports {sorted(tops - allowed)}"


def test_one_quantity_grammar_and_one_pod_request_rule() -> None:
    """Nothing outside decice_kube parses a quantity or sums a pod's containers: no second
    quantity regex (a suffix alternation such as Ki|Mi) and no other loop over
    initContainers that adds requests (#28 found two of each)."""
    offenders = []
    sources = [
        *(CLI / "decice").rglob("*.py"),
        *(SCHEDULER / "decice_scheduler").rglob("*.py"),
        *(ROOT / "ansible_collections/decice/hybrid").rglob("*.py"),
    ]
    for path in sources:
        text = path.read_text(encoding="utf-8")
        if "Ki|Mi" in text:
            offenders.append(f"{path.relative_to(ROOT)}: a quantity grammar")
        for func in ast.walk(ast.parse(text)):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            read = {
                node.args[0].value
                for node in ast.walk(func)
                if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            }
            if {"initContainers", "overhead"} <= read:
                offenders.append(f"{path.relative_to(ROOT)}:{func.name}: a pod-request rule")
    assert offenders == []


def _grimp_edges(*packages: str) -> dict[str, set[str]]:
    try:
        import grimp
    except ImportError:
        require(False, "grimp is not installed (the test extra: WITH_TEST=1 scripts/bootstrap.sh)")
    graph = grimp.build_graph(*packages, cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def test_an_independent_import_graph_has_no_cycle(tmp_path: Path, monkeypatch) -> None:
    """A second opinion on the cycles (#28): grimp (import-linter's graph builder, its own
    parser) reads every import of the three packages, lazy and type-only ones included,
    and no module takes part in a cycle (the components of _cycles over grimp's graph). A
    planted cycle is found, so the check can fail."""
    assert _cycles(_grimp_edges("decice", "decice_kube", "decice_scheduler")) == []
    (tmp_path / "planted").mkdir()
    (tmp_path / "planted" / "__init__.py").write_text("")
    (tmp_path / "planted" / "a.py").write_text("def f():\n    from planted import b\n")
    (tmp_path / "planted" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from planted import a\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cycles(_grimp_edges("planted")) == [["planted.a", "planted.b"]]


def test_nothing_below_the_lifecycle_imports_it() -> None:
    graph = _graph(CLI, "decice", runtime_only=False)
    below = [m for m in graph if m.startswith(("decice.targets", "decice.sim", "decice.kubespray"))]
    assert below
    assert [m for m in below if "decice.lifecycle" in graph[m]] == []


def test_targets_and_kubespray_meet_only_in_the_phase_contract() -> None:
    """decice.phases is the contract both sides use (#28): Kubespray's phases never import a
    target, and the contract itself imports neither side nor the lifecycle (counting lazy
    and type-only imports)."""
    graph = _graph(CLI, "decice", runtime_only=False)
    kubespray = [m for m in graph if m.startswith("decice.kubespray")]
    assert "decice.phases" in graph["decice.kubespray.phases"]
    assert {
        m: sorted(d for d in graph[m] if d.startswith("decice.targets")) for m in kubespray
    } == {m: [] for m in kubespray}
    sides = ("decice.targets", "decice.kubespray", "decice.lifecycle", "decice.sim")
    assert [d for d in graph["decice.phases"] if d.startswith(sides)] == []


def test_scheduler_package_never_imports_the_cli() -> None:
    for path in (SCHEDULER / "decice_scheduler").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bad = [m for m, _ in _imports(tree, runtime_only=False) if m.split(".")[0] == "decice"]
        assert bad == [], f"{path} imports {bad}"


def test_test_modules_do_not_import_each_other() -> None:
    offenders = []
    for path in (ROOT / "tests").rglob("test_*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for module, names in _imports(tree, runtime_only=False):
            leaf = module.rsplit(".", 1)[-1]
            if module.startswith("tests") and (
                leaf.startswith(("test_", "conftest")) or any(n.startswith("test_") for n in names)
            ):
                offenders.append(f"{path.relative_to(ROOT)} imports {module}")
    assert offenders == []


# HTTP client libraries: httpx is the one stack (inside decice_kube); the others are
# second stacks (the interLink plugin's http.server is a server, not a client)
_HTTP_CLIENTS = ("httpx", "urllib.request", "urllib.error", "http.client", "requests", "aiohttp")


def _product_modules() -> list[Path]:
    return [
        *(CLI / "decice").rglob("*.py"),
        *(KUBE / "decice_kube").rglob("*.py"),
        *(SCHEDULER / "decice_scheduler").rglob("*.py"),
        *(ROOT / "ansible_collections" / "decice" / "hybrid" / "roles").rglob("*.py"),
    ]


def test_one_http_stack() -> None:
    """One HTTP stack (#28): only decice_kube imports an HTTP client library (httpx: the
    Kubernetes client, its HTTP/1.1 path on plain sockets, and ``web`` for probes, mirror
    files, downloads and the interLink plugin API); everything else goes through it."""
    offenders = []
    for path in _product_modules():
        if path.is_relative_to(KUBE):
            continue
        for module, _names in _imports(
            ast.parse(path.read_text(encoding="utf-8")), runtime_only=False
        ):
            if any(module == c or module.startswith(f"{c}.") for c in _HTTP_CLIENTS):
                offenders.append(f"{path.relative_to(ROOT)} imports {module}")
    assert offenders == []


def test_only_the_http_layer_names_httpx_errors() -> None:
    """One client layer (#28): decice_kube.client turns every transport failure into its
    ApiError and decice_kube.web into its WebError; no other module catches an httpx
    error."""
    allowed = {KUBE / "decice_kube" / "client.py", KUBE / "decice_kube" / "web.py"}
    offenders = []
    for path in _product_modules():
        if path in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ExceptHandler) and node.type is not None:
                names = ast.unparse(node.type)
                if "httpx." in names:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} catches {names}")
    assert offenders == []
