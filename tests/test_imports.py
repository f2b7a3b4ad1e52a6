"""The package's import graph, read from the source with `ast` (nothing is imported).

Every `import` and `from ... import` of an `rlbm_jax` module in every file under
`rlbm_jax/` counts, at module level or inside a function (a deferred import that closes a
circle still ties the two modules together).  Nodes are modules; a package is its
`__init__.py`.  An import statement gives these edges:

  explicit  `import a.b.c` is an edge to `a.b.c`; `from a.b import n` is an edge to `a.b.n`
            when that is a module, else to `a.b` (the name comes from the package's
            `__init__`); relative imports are resolved against the importing file.
  implied   importing `a.b.c` first runs the packages above it, `a` and `a.b`, so the
            statement is an edge to each of them too, except to the packages above the
            importing module itself (and the module itself): Python has already started
            those before the importing module's body runs, so that import runs nothing.

So a package's `__init__` may import its own submodules (the edge down is kept, and no
implied edge comes back up), but a submodule that takes a name from its own package's
`__init__` (`from rlbm_jax.env import thesis_params` inside `rlbm_jax/env/`) has an
explicit edge up, and when that `__init__` imports the submodule the two form a circle:
the name exists only if the `__init__` bound it before it imported the submodule, which
depends on which module is imported first.  Such a circle is reported like any other.

Checked: (a) the graph has no cycle; (b) no module under `rlbm_jax/env/` has an explicit
import of a module outside `rlbm_jax/env/` (the simulator and the environment are the
core the rest of the package builds on).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "rlbm_jax"
CORE = "rlbm_jax.env"


def module_files() -> dict[str, Path]:
    """module name -> file, for every .py file of the package."""
    out = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _ancestors(name: str) -> list[str]:
    """The packages above module `name`, outermost first."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _in_package(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def _resolve_from(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` statement names."""
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    if node.level > 1:
        base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def explicit_imports(name: str, path: Path, modules: dict) -> list[tuple[str, int]]:
    """(target module, line) for every import of a package module in the file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if _in_package(a.name)]
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_from(name, _is_package(path), node)
            if not _in_package(source):
                continue
            for a in node.names:
                sub = f"{source}.{a.name}"
                out.append((sub if sub in modules else source, node.lineno))
    return sorted(out, key=lambda t: t[1])


def import_graph() -> tuple[dict, dict]:
    """(graph, explicit): graph[m] = {target: line} with the implied edges, explicit[m] =
    [(target, line)] as written."""
    modules = module_files()
    graph, explicit = {}, {}
    for name, path in modules.items():
        explicit[name] = explicit_imports(name, path, modules)
        running = set(_ancestors(name)) | {name}
        edges = {}
        for target, line in explicit[name]:
            implied = [p for p in _ancestors(target) if p not in running]
            for t in ([target] if target != name else []) + implied:
                if t in modules:
                    edges.setdefault(t, line)
        graph[name] = edges
    return graph, explicit


def cycles(graph: dict) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module
    (Tarjan's algorithm for the components, then a shortest path back for the cycle)."""
    index, low, stack, on_stack, comps = {}, {}, [], set(), []

    def visit(v):
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
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for comp in comps:
        members, start = set(comp), comp[0]
        prev, frontier = {start: None}, [start]
        while frontier and start not in [w for v in frontier for w in graph[v]]:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w in members and w not in prev:
                        prev[w] = v
                        nxt.append(w)
            frontier = nxt
        last = next(v for v in frontier if start in graph[v])
        path = [last]
        while prev[path[-1]] is not None:
            path.append(prev[path[-1]])
        out.append(path[::-1] + [start])
    return out


def _describe(cycle: list[str], graph: dict, modules: dict) -> str:
    steps = [f"  {a} -> {b}  ({modules[a].relative_to(ROOT)}:{graph[a][b]})" for a, b in zip(cycle, cycle[1:])]
    return " -> ".join(cycle) + "\n" + "\n".join(steps)


@pytest.mark.quick
def test_import_graph_has_no_cycle():
    graph, _ = import_graph()
    modules = module_files()
    found = cycles(graph)
    if found:
        pytest.fail(f"{len(found)} import cycle(s) in {PACKAGE} (one shown per strongly connected group):\n"
                    + "\n".join(_describe(c, graph, modules) for c in found), pytrace=False)


@pytest.mark.quick
def test_env_imports_nothing_above_it():
    _, explicit = import_graph()
    modules = module_files()
    inside = lambda m: m == CORE or m.startswith(CORE + ".")
    upward = sorted({(str(modules[m].relative_to(ROOT)), line, t)
                     for m in explicit if inside(m) for t, line in explicit[m] if not inside(t)})
    if upward:
        pytest.fail(f"{CORE} must not import the rest of {PACKAGE}:\n"
                    + "\n".join(f"  {f}:{line} imports {t}" for f, line, t in upward), pytrace=False)


@pytest.mark.quick
def test_the_library_imports_nothing_from_the_scripts():
    """`rlbm_jax.cli` holds the scripts' bodies; nothing else in the package imports it (a
    study, an evaluation or a backend is usable without the command line)."""
    _, explicit = import_graph()
    modules = module_files()
    cli = PACKAGE + ".cli"
    inside = lambda m: m == cli or m.startswith(cli + ".")
    upward = sorted({(str(modules[m].relative_to(ROOT)), line, t)
                     for m in explicit if not inside(m) for t, line in explicit[m] if inside(t)})
    if upward:
        pytest.fail(f"the library must not import {cli}:\n"
                    + "\n".join(f"  {f}:{line} imports {t}" for f, line, t in upward), pytrace=False)


@pytest.mark.quick
def test_the_reader_and_the_cycle_search(tmp_path):
    """The reader resolves relative imports, deferred imports and `from package import
    module`, and finds a circle of two files and one through a package `__init__`."""
    graph = {"p": {"p.a": 1}, "p.a": {"p.b": 2}, "p.b": {"p.a": 3}, "p.c": {"p": 4}}
    assert cycles(graph) == [["p.a", "p.b", "p.a"]]
    graph["p"]["p.c"] = 5
    assert sorted(map(tuple, cycles(graph))) == [("p", "p.c", "p"), ("p.a", "p.b", "p.a")]

    module = tmp_path / "rlbm_env.py"
    module.write_text("from . import sim, thesis_params\nfrom .. import devices\n\ndef f():\n"
                      "    from rlbm_jax.env.params import x\n    import rlbm_jax.scenarios\n")
    mods = {m: module for m in ("rlbm_jax.env.sim", "rlbm_jax.env.params", "rlbm_jax.devices")}
    assert explicit_imports("rlbm_jax.env.rlbm_env", module, mods) == [
        ("rlbm_jax.env.sim", 1), ("rlbm_jax.env", 1), ("rlbm_jax.devices", 2), ("rlbm_jax.env.params", 5),
        ("rlbm_jax.scenarios", 6)]
    package = tmp_path / "__init__.py"
    package.write_text("from .. import sim\nfrom . import build\n")
    assert explicit_imports("rlbm_jax.env.native", package, mods) == [("rlbm_jax.env.sim", 1),
                                                                      ("rlbm_jax.env.native", 2)]
