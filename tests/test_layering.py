"""Imports point one way (docs/architecture.md): util -> rendering/diffusion -> models ->
encoding/data -> train/eval -> cli/app, with no import loops.

Read from the source with `ast`, so that imports inside functions count too; imports under
`if TYPE_CHECKING:` are annotations only and do not count.
"""
import ast
from pathlib import Path
from typing import Dict, List, Set

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "shap_e"

LAYERS = {
    "util": 0,
    "rendering": 1,
    "diffusion": 1,
    "models": 2,
    "encoding": 3,
    "data": 3,
    "train": 4,
    "eval": 4,
    "cli": 5,
    "app": 5,
}
# Same layer, but neither may import the other.
SEPARATE = [{"rendering", "diffusion"}]
# The official entry points users import from `shap_e.util`: facades over higher layers, which
# nothing inside the package may import. `shap_e` itself re-exports `shap_e.encode` lazily.
FACADES = {"shap_e", "shap_e.util.notebooks", "shap_e.util.data_util"}
CONFIG_FILES = {"shap_e.configs", "shap_e.weights"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_modules(tree: ast.AST, modules: Set[str]) -> Set[str]:
    """The package modules a source file imports (a `from package import name` names the submodule
    when `name` is one)."""
    found: Set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "shap_e")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "shap_e":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> Dict[str, Set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imported_modules(ast.parse(path.read_text()), set(paths)) - {name} for name, path in paths.items()}


def group(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def strongly_connected(graph: Dict[str, Set[str]]) -> List[Set[str]]:
    """Tarjan's algorithm; returns the components with more than one module."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    components: List[Set[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in graph:
        if v not in index:
            connect(v)
    return components


@pytest.fixture(scope="module")
def graph() -> Dict[str, Set[str]]:
    return import_graph()


def test_every_package_has_a_layer(graph):
    packages = {group(m) for m in graph if "." in m and not m.endswith("__main__")} - {""}
    packages = {p for p in packages if f"shap_e.{p}" not in CONFIG_FILES and not (PACKAGE / f"{p}.py").exists()}
    assert packages <= set(LAYERS), f"packages without a layer: {sorted(packages - set(LAYERS))}"


def test_no_module_imports_a_higher_layer(graph):
    upward = []
    for module, targets in graph.items():
        if module in FACADES or module.endswith("__main__") or group(module) not in LAYERS:
            continue
        for target in targets:
            if group(target) not in LAYERS:
                continue
            if LAYERS[group(target)] > LAYERS[group(module)]:
                upward.append(f"{module} -> {target}")
            elif {group(module), group(target)} in SEPARATE:
                upward.append(f"{module} -> {target} (separate packages of one layer)")
    assert not upward, "imports against the layering:\n" + "\n".join(sorted(upward))


def test_nothing_inside_the_package_imports_the_facades(graph):
    users = [f"{m} -> {t}" for m, targets in graph.items() for t in targets
             if t in FACADES - {"shap_e"} and not m.endswith("__main__")]
    assert not users, "\n".join(sorted(users))


def test_no_import_loops(graph):
    loops = strongly_connected(graph)
    assert not loops, "import loops:\n" + "\n".join(" <-> ".join(sorted(c)) for c in loops)
