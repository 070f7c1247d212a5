"""The package's shape, from its import graph: no import circles anywhere in `pipeline/` and
`transforms/`, the rooms of `pipeline/` importing only the rooms below them (pipeline/__init__.py),
and small packages.

The graph is read from the source with `ast`: every `import` and `from ... import`, at module
level, inside functions and under `if TYPE_CHECKING:` alike (a lazy import is still a
dependency). A package's `__init__` counts as a module of its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pipeline", "transforms")

# room -> the rooms it may import (besides itself and transforms/); pipeline/__init__.py says why
ROOMS: dict[str, set[str]] = {
    "output": set(),
    "job": {"output"},
    "reader": {"output"},
    "engines": {"job", "output"},
    "report": {"output"},
    "verify": {"job", "output", "reader"},
    "cli": {"job", "output", "reader", "engines", "report", "verify"},
}
MAX_MODULES = 12  # modules directly in one package


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module `name` is, or is in (an attribute's module); None outside."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*parts, *([base] if base else [])])
                # `from a.b import c`: c may be a module of a.b, or a name defined in a.b
                names = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    for a in node.names
                ]
            for name in names:
                target = _resolve(name, modules)
                if target is not None and target != module:
                    graph[module].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "pipeline" and len(parts) > 1 and parts[1] in ROOMS else None


def test_the_graph_is_read():
    """The reader of the graph sees what it must (else the tests below prove nothing)."""
    graph = import_graph()
    assert "pipeline.engines.inprocess" in graph["pipeline.cli.convert"]  # a lazy import
    assert "pipeline.output.manifest" in graph["pipeline.reader.spec"]
    assert "transforms.fs" in graph["pipeline.output.lease"]


def test_the_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]


def test_no_import_circles():
    found = circles(import_graph())
    assert found == [], f"import circles: {found}"


def test_transforms_import_nothing_from_pipeline():
    wrong = [
        (m, t)
        for m, targets in import_graph().items()
        if m.startswith("transforms")
        for t in targets
        if t.startswith("pipeline")
    ]
    assert wrong == []


def test_each_room_imports_only_the_rooms_below_it():
    wrong = []
    for module, targets in import_graph().items():
        room = _room(module)
        if room is None:
            continue
        for target in targets:
            other = _room(target)
            if target.startswith("pipeline") and other is None and target not in ("pipeline",):
                wrong.append((module, target))  # a module outside the rooms
            elif other is not None and other != room and other not in ROOMS[room]:
                wrong.append((module, target))
    assert wrong == [], f"imports against the rooms' order: {wrong}"


def test_every_module_of_pipeline_is_in_a_room():
    loose = [
        m
        for m in import_graph()
        if m.startswith("pipeline.") and _room(m) is None and m != "pipeline.__main__"
    ]
    assert loose == []


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_are_small(package):
    for directory in [ROOT / package, *(p for p in (ROOT / package).rglob("*") if p.is_dir())]:
        if not (directory / "__init__.py").is_file():
            continue
        modules = [p for p in directory.glob("*.py") if p.name != "__init__.py"]
        assert len(modules) <= MAX_MODULES, f"{directory.relative_to(ROOT)}: {len(modules)}"


def test_each_room_says_what_it_owns_and_may_import():
    for room in ROOMS:
        doc = ast.get_docstring(ast.parse((ROOT / "pipeline" / room / "__init__.py").read_text()))
        assert doc and "May import" in doc, room
