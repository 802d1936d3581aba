"""Issue 22, item 1: the import graph of ``tracefuse_stream`` is a DAG of stages.

Every ``import`` / ``from ... import`` of every module counts, also the ones inside
functions (they hide an edge from a reader and from tools, but the modules are still
tied); only imports under ``if TYPE_CHECKING:`` are left out (never run). An import
of a package's submodule is an edge to that submodule; the implicit import of the
parent packages (``tracefuse_stream/__init__.py`` runs first) is not counted, as in
import-linter.

What is checked (the README's layout section, docs/layout.md, draws the same order):

* **no module cycle**, counting imports inside functions;
* **stage order**: :data:`LAYERS` lists the stages from the bottom up; a module may
  import its own stage and the layers below, never a higher one (import-linter's
  "layers" contract, without the dependency);
* **imports at module level**: an import of a package module inside a function is
  allowed only with a comment on its line (or the line above) saying why (an optional
  or heavy dependency; today: the start-up of each command, tests/test_startup.py);
* nothing inside the package imports the top-level facade (``tracefuse_stream``).

``python tests/test_layers.py`` prints the report: the stage graph, any cycle, upward
edge or import inside a function.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

PKG = "tracefuse_stream"
ROOT = Path(__file__).resolve().parents[1] / PKG

#: Stages from the bottom up; a module may import modules of its own layer or below.
#: Keys are the first name under ``tracefuse_stream`` (a sub-package or a top-level
#: module; ``""`` is ``tracefuse_stream/__init__.py``). The order is the issue's
#: (read < plan < select/rewrite < write < ... < cli) adjusted to what the code is:
#: the pipeline runs alignment, reports and verification, so those sit below it.
LAYERS: List[Tuple[str, FrozenSet[str]]] = [
    (
        "base",
        frozenset(
            {
                "errors",
                "timeunits",
                "exactjson",
                "native",
                "_kernel",
                "_version",
                "workers",
                "rankset",
                "listing",
                "textout",
                "gcpause",
                "cluster",
            }
        ),
    ),
    ("read", frozenset({"read"})),
    ("plan", frozenset({"plan"})),
    ("select", frozenset({"select"})),
    ("rewrite", frozenset({"rewrite", "options"})),
    ("write", frozenset({"write"})),
    ("align", frozenset({"align"})),
    ("analyze", frozenset({"analyze"})),
    ("report", frozenset({"report"})),
    ("verify", frozenset({"verify"})),
    ("pipeline", frozenset({"pipeline"})),
    ("serve", frozenset({"serve"})),
    ("front doors", frozenset({"cli", "compat", "__main__", ""})),
]


# --------------------------------------------------------------------------- the graph
@dataclass
class Graph:
    modules: Dict[str, Path]
    edges: Dict[str, Set[str]] = field(default_factory=dict)
    in_functions: List[Tuple[str, int, str]] = field(default_factory=list)  # (module, line, imported)
    type_only: List[Tuple[str, str]] = field(default_factory=list)


def _module_names() -> Dict[str, Path]:
    """``"read.batches"`` -> path, for every module of the package (``""``: its __init__)."""
    out: Dict[str, Path] = {}
    for p in sorted(ROOT.rglob("*.py")):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    # the compiled kernel: a leaf, whether or not it is built here (its source stands in)
    out["_kernel"] = next(ROOT.glob("_kernel*.so"), ROOT / "_kernel.c")
    return out


def _resolve(name: str, modules: Dict[str, Path]) -> str:
    """The module an imported dotted name (relative to the package) lands in."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """Imported dotted names of one module: (name, line, inside a function, type only)."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.module = module
        self.is_package = is_package
        self.depth = 0
        self.type_only = 0
        self.found: List[Tuple[str, int, bool, bool]] = []

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self.type_only += 1
            for n in node.body:
                self.visit(n)
            self.type_only -= 1
            for n in node.orelse:
                self.visit(n)
        else:
            self.generic_visit(node)

    def _add(self, name: str, line: int) -> None:
        self.found.append((name, line, self.depth > 0, self.type_only > 0))

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._add(a.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            pkg = PKG + ("." + self.module if self.module else "")
            if not self.is_package:
                pkg = pkg.rpartition(".")[0]
            for _ in range(node.level - 1):
                pkg = pkg.rpartition(".")[0]
            base = pkg + ("." + base if base else "")
        for a in node.names:
            self._add(f"{base}.{a.name}", node.lineno)


def build_graph() -> Graph:
    g = Graph(_module_names())
    for mod, path in g.modules.items():
        if path.suffix != ".py":
            continue
        v = _Imports(mod, path.name == "__init__.py")
        v.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        for name, line, in_function, type_only in v.found:
            if name != PKG and not name.startswith(PKG + "."):
                continue
            target = _resolve(name[len(PKG) + 1 :], g.modules)
            if target == mod:
                continue
            if type_only:
                g.type_only.append((mod, target))
                continue
            g.edges.setdefault(mod, set()).add(target)
            if in_function and (mod, line, target) not in g.in_functions:
                g.in_functions.append((mod, line, target))
    return g


def strongly_connected(nodes: Iterable[str], edges: Dict[str, Set[str]]) -> List[FrozenSet[str]]:
    """Tarjan's components with more than one member (the cycles), sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    out: List[FrozenSet[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for n in sorted(nodes):
        if n not in index:
            visit(n)
    return sorted(out, key=lambda c: sorted(c))


def stage_of(module: str) -> str:
    return module.split(".")[0]


def layer_of(module: str) -> int:
    st = stage_of(module)
    for i, (_, members) in enumerate(LAYERS):
        if st in members:
            return i
    raise AssertionError(f"module {module!r}: stage {st!r} is in no layer of LAYERS (add it)")


def stage_edges(g: Graph) -> Dict[str, Set[str]]:
    out: Dict[str, Set[str]] = {}
    for a, bs in g.edges.items():
        for b in bs:
            if stage_of(a) != stage_of(b):
                out.setdefault(stage_of(a), set()).add(stage_of(b))
    return out


def upward_edges(g: Graph) -> Set[Tuple[str, str]]:
    return {(a, b) for a, bs in g.edges.items() for b in bs if layer_of(b) > layer_of(a)}


def report(g: Optional[Graph] = None) -> str:
    g = g or build_graph()
    lines = [f"{len(g.modules)} modules, {sum(map(len, g.edges.values()))} import edges"]
    cycles = strongly_connected(g.modules, g.edges)
    lines.append(f"module cycles ({len(cycles)}):")
    lines += ["  " + " <-> ".join(sorted(c)) for c in cycles]
    se = stage_edges(g)
    stages = {stage_of(m) for m in g.modules}
    lines.append(f"stage cycles ({len(strongly_connected(stages, se))}):")
    lines += ["  " + " <-> ".join(sorted(c)) for c in strongly_connected(stages, se)]
    lines.append("stage edges:")
    lines += [
        f"  {a or '__init__'} -> {', '.join(sorted(b or '__init__' for b in bs))}"
        for a, bs in sorted(se.items())
    ]
    up = sorted(upward_edges(g))
    lines.append(f"upward edges ({len(up)}):")
    lines += [f"  {a} -> {b}" for a, b in up]
    lines.append(f"imports inside functions ({len(g.in_functions)}):")
    lines += [f"  {m}:{line} -> {t}" for m, line, t in sorted(g.in_functions)]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the tests
SNIPPET = """
from typing import TYPE_CHECKING
from tracefuse_stream.read import sources
from .batches import EventBatches
if TYPE_CHECKING:
    from tracefuse_stream.plan.rankplan import RankPlan
def f():
    from tracefuse_stream.pipeline.orchestrate import merge  # a reason
    return merge
"""


def test_the_visitor_sees_every_kind_of_import():
    """Sanity: module-level, relative, inside a function (with its line) and
    type-only imports are told apart, so an empty or blind graph cannot pass."""
    v = _Imports("read.readers", False)
    v.visit(ast.parse(SNIPPET))
    assert v.found == [
        ("typing.TYPE_CHECKING", 2, False, False),
        ("tracefuse_stream.read.sources", 3, False, False),
        ("tracefuse_stream.read.batches.EventBatches", 4, False, False),
        ("tracefuse_stream.plan.rankplan.RankPlan", 6, False, True),
        ("tracefuse_stream.pipeline.orchestrate.merge", 8, True, False),
    ]
    g = build_graph()
    assert len(g.modules) > 60 and sum(map(len, g.edges.values())) > 200
    assert "read.sources" in g.edges["read.batches"]
    assert "_kernel" in g.edges["native"]  # the compiled kernel, imported in a try


def test_no_module_cycle():
    g = build_graph()
    cycles = strongly_connected(g.modules, g.edges)
    assert not cycles, "import cycle(s), counting imports inside functions:\n" + report(g)


def test_no_stage_imports_a_higher_one():
    g = build_graph()
    up = sorted(upward_edges(g))
    assert not up, "a lower stage imports a higher one (LAYERS in tests/test_layers.py): " + ", ".join(
        f"{a} -> {b}" for a, b in up
    )


def test_imports_inside_functions_say_why():
    """A package import inside a function hides an edge from the reader: only for an
    optional or heavy dependency, with a comment on its line or the line above."""
    g = build_graph()
    silent = []
    for mod, line, target in g.in_functions:
        text = g.modules[mod].read_text(encoding="utf-8").splitlines()
        here, above = text[line - 1], text[line - 2] if line > 1 else ""
        if "#" not in here and not above.strip().startswith("#"):
            silent.append(f"{mod}:{line} -> {target}")
    assert not silent, "imports inside functions without a reason: " + ", ".join(silent)


def test_nothing_imports_the_facade():
    """``tracefuse_stream/__init__.py`` is the public front door; a module inside the
    package that imported it would tie itself to every stage."""
    g = build_graph()
    assert sorted(m for m, bs in g.edges.items() if "" in bs and m not in ("", "__main__")) == []


def test_every_stage_has_a_layer():
    for m in _module_names():
        layer_of(m)


def test_the_checks_catch_a_new_cycle_and_an_upward_edge():
    """The same checks on the real graph plus one added import: read.sources
    importing pipeline.orchestrate is both a cycle and an upward edge."""
    g = build_graph()
    g.edges.setdefault("read.sources", set()).add("pipeline.orchestrate")
    assert any("read.sources" in c for c in strongly_connected(g.modules, g.edges))
    assert ("read.sources", "pipeline.orchestrate") in upward_edges(g)
    assert strongly_connected("abc", {"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [frozenset("abc")]
    assert strongly_connected("abc", {"a": {"b"}, "b": {"c"}}) == []


if __name__ == "__main__":
    print(report())
