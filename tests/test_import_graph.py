"""The package's import graph, computed from the source with ``ast``: no cycle, and the
core never imports the lab.

Every ``import`` and ``from ... import`` counts, wherever it is (module top, inside a
function, under ``if TYPE_CHECKING:``), relative ones resolved against the importing
module. ``from package import name`` is an edge to the submodule when ``name`` is one,
else to the package.

The two floors: the lab is ``ctxsim/lab/``; everything else in ``ctxsim/`` is the core,
except two files that belong to neither floor:

* ``ctxsim/__init__.py``, the front door: it re-exports lab names lazily (module
  ``__getattr__``) so that ``ctxsim.generate`` and ``ctxsim.load_scenarios`` keep
  working without importing the lab at ``import ctxsim``;
* ``ctxsim/__main__.py``, the script behind ``python -m ctxsim``: it runs the lab's
  command line and no module imports it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "ctxsim"
LAB = "ctxsim.lab"
NEITHER_FLOOR = ("ctxsim", "ctxsim.__main__")


def modules_of(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of ``root / package``."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def import_graph(root: Path, package: str) -> dict[str, dict[str, int]]:
    """Module -> {imported module of the package: line of the first such import}."""
    modules = modules_of(root, package)

    def known(name: str) -> str | None:  # the longest module of the package that ``name`` starts with
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        here = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in targets:
                if target.split(".")[0] == package and (resolved := known(target)) and resolved != module:
                    edges.setdefault(resolved, node.lineno)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) through each strongly connected group of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    found = []
    for group in groups:
        start = min(group)
        paths = {start: [start]}
        frontier = [start]
        while frontier and not any(start in graph[v] for v in frontier):  # breadth first: a shortest cycle
            nxt = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w in group and w not in paths:
                        paths[w] = paths[v] + [w]
                        nxt.append(w)
            frontier = nxt
        last = next(v for v in sorted(frontier) if start in graph[v])
        found.append(paths[last] + [start])
    return found


def floor_breaches(graph: dict[str, dict[str, int]], lab: str, neither: tuple[str, ...]) -> list[str]:
    """``core module:line -> lab module`` for every import of the lab by the core."""
    def in_lab(m: str) -> bool:
        return m == lab or m.startswith(lab + ".")

    return [f"{m}:{line} -> {t}" for m, edges in sorted(graph.items()) if not in_lab(m) and m not in neither
            for t, line in sorted(edges.items()) if in_lab(t)]


def describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"


def test_the_package_has_no_import_cycle():
    graph = import_graph(ROOT, PACKAGE)
    assert len(graph) > 100  # the whole package was read
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(describe(c, graph) for c in found)


def test_the_core_never_imports_the_lab():
    graph = import_graph(ROOT, PACKAGE)
    assert any(m.startswith(LAB + ".") for m in graph) and any(not m.startswith(LAB) for m in graph)
    breaches = floor_breaches(graph, LAB, NEITHER_FLOOR)
    assert not breaches, "core modules importing the lab:\n" + "\n".join(breaches)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_checks_see_function_level_relative_and_type_checking_imports(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "def f():\n    from .b import g\n    return g\n",
        "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub import c\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "from .. import a\n",
        "pkg/lab/__init__.py": "",
        "pkg/lab/tool.py": "from ..b import TYPE_CHECKING\n",
        "pkg/core.py": "import pkg.lab.tool\n",
    })
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.a"] == {"pkg.b": 2} and graph["pkg.b"] == {"pkg.sub.c": 3} and graph["pkg.sub.c"] == {"pkg.a": 1}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]]
    assert describe(cycles(graph)[0], graph) == "pkg.a (line 2) -> pkg.b (line 3) -> pkg.sub.c (line 1) -> pkg.a"
    assert floor_breaches(graph, "pkg.lab", ("pkg",)) == ["pkg.core:1 -> pkg.lab.tool"]
    assert floor_breaches(graph, "pkg.lab", ("pkg", "pkg.core")) == []


def test_a_package_importing_its_own_submodule_back_is_a_cycle(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "from .impl import thing\n",
        "pkg/impl.py": "from . import helper\nfrom pkg import other\n",
        "pkg/helper.py": "",
    })
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.impl"] == {"pkg.helper": 1, "pkg": 2}
    assert cycles(graph) == [["pkg", "pkg.impl", "pkg"]]
