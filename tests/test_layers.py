"""Issue 22, item 1 (first step): the import graph of ``tracefuse_stream``, counted the
way it really ties modules together, and a check that it does not get worse.

Every ``import`` / ``from ... import`` of every module counts, also the ones inside
functions (they hide an edge from a reader and from tools, but the modules are still
tied); only imports under ``if TYPE_CHECKING:`` are left out (never run). An import
of a package's submodule is an edge to that submodule; the implicit import of the
parent packages (``tracefuse_stream/__init__.py`` runs first) is not counted, as in
import-linter.

What is checked now, with the current state recorded as data below so that the lead
can tighten it as modules move:

* **module cycles**: every strongly connected component of the module graph must lie
  inside one of :data:`ALLOWED_CYCLES` (no new cycle, no cycle growing);
* **stage order**: :data:`LAYERS` lists the stages from the bottom up (a module may
  import its own layer and the layers below); every upward edge must be in
  :data:`ALLOWED_UPWARD` (no new one);
* nothing inside the package imports the top-level facade (``tracefuse_stream``);
* the report names allowed entries that no longer exist (to be removed by hand: the
  lists only shrink; not a failure while several people move modules at once).

``python tests/test_layers.py`` prints the report: the cycles, the stage graph and its
cycles, the upward edges and the imports inside functions.
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
            }
        ),
    ),
    ("read", frozenset({"read"})),
    ("plan", frozenset({"plan"})),
    ("select/rewrite", frozenset({"select", "rewrite"})),
    ("write", frozenset({"write", "options"})),
    ("align/report/verify/serve", frozenset({"align", "report", "verify", "serve"})),
    ("pipeline", frozenset({"pipeline"})),
    ("front doors", frozenset({"cli", "compat", "__main__", ""})),
]

#: Module cycles as they are (issue 22 names the first); each current cycle must lie
#: inside one of these.
ALLOWED_CYCLES: List[FrozenSet[str]] = [
    # plan.starts -> report.info (698a0ad, after this list was first recorded) joined
    # report.info <-> report.onepass to the first cycle
    frozenset(
        {
            "align.links",
            "pipeline.outputs",
            "pipeline.stream",
            "plan.cycles",
            "plan.planner",
            "plan.starts",
            "report.info",
            "report.onepass",
        }
    ),
]

#: Edges from a lower stage to a higher one, as they are: (importer, imported).
ALLOWED_UPWARD: FrozenSet[Tuple[str, str]] = frozenset(
    {
        ("plan.cycles", "pipeline.outputs"),
        ("plan.starts", "report.info"),  # 698a0ad, after this list was recorded
        ("read.readers", "rewrite.rules"),
        ("read.salvage", "rewrite.rules"),
    }
)


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
    stale = [sorted(a) for a in ALLOWED_CYCLES if not any(len(c & a) > 1 for c in cycles)]
    stale_up = sorted(ALLOWED_UPWARD - set(up))
    lines.append(f"allowed but gone (remove from tests/test_layers.py): {stale} {stale_up}")
    lines.append(f"imports inside functions ({len(g.in_functions)}):")
    lines += [f"  {m}:{line} -> {t}" for m, line, t in sorted(g.in_functions)]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the tests
def test_the_graph_sees_real_imports():
    """Sanity: known edges of each kind are found (module level, inside a function,
    relative or absolute), so an empty graph cannot pass the checks below."""
    g = build_graph()
    assert len(g.modules) > 60
    assert "read.sources" in g.edges["read.batches"]  # module level
    assert "_kernel" in g.edges["native"]  # the compiled kernel, imported in a try
    inside = {(m, t) for m, _, t in g.in_functions}
    assert ("pipeline.orchestrate", "verify.check") in inside or any(
        m == "pipeline.orchestrate" for m, _ in inside
    )
    assert len(g.in_functions) > 10


def test_no_new_module_cycles():
    g = build_graph()
    cycles = strongly_connected(g.modules, g.edges)
    print("\n" + report(g))
    new = [sorted(c) for c in cycles if not any(c <= allowed for allowed in ALLOWED_CYCLES)]
    assert not new, f"new import cycle(s), counting imports inside functions: {new}"


def test_no_new_upward_stage_edges():
    g = build_graph()
    new = sorted(upward_edges(g) - ALLOWED_UPWARD)
    assert not new, "a lower stage imports a higher one (LAYERS in tests/test_layers.py): " + ", ".join(
        f"{a} -> {b}" for a, b in new
    )


def test_nothing_imports_the_facade():
    """``tracefuse_stream/__init__.py`` is the public front door; a module inside the
    package that imported it would tie itself to every stage."""
    g = build_graph()
    assert sorted(m for m, bs in g.edges.items() if "" in bs and m not in ("", "__main__")) == []


def test_every_stage_has_a_layer():
    for m in _module_names():
        layer_of(m)


if __name__ == "__main__":
    print(report())


def test_the_checks_catch_a_new_cycle_and_an_upward_edge():
    """The same checks on the real graph plus one added import each: read.sources
    importing pipeline.orchestrate is both a new cycle and an upward edge."""
    g = build_graph()
    g.edges.setdefault("read.sources", set()).add("pipeline.orchestrate")
    cycles = strongly_connected(g.modules, g.edges)
    assert any("read.sources" in c and not any(c <= a for a in ALLOWED_CYCLES) for c in cycles)
    assert ("read.sources", "pipeline.orchestrate") in upward_edges(g) - ALLOWED_UPWARD
    assert strongly_connected("abc", {"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [frozenset("abc")]
    assert strongly_connected("abc", {"a": {"b"}, "b": {"c"}}) == []
