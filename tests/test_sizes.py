"""Issue 22, item 5: sizes a reader can hold, in the package and the generator.

No module over 500 lines (the compiled kernel's C parts included), no function over 80
lines of code (its signature and docstring not counted). A module or function that
grows past these is a sign it holds more than one job: split it, as _kernel.c
(tracefuse_stream/csrc/) and the generator (tracefuse_synth/) were.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import List

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("tracefuse_stream", "tracefuse_synth")
MODULE_LINES = 500
FUNCTION_LINES = 80


def _sources() -> List[Path]:
    out: List[Path] = []
    for pkg in PACKAGES:
        for pattern in ("*.py", "*.c", "*.h"):
            out.extend(sorted((REPO / pkg).rglob(pattern)))
    return out


def _code_lines(n: ast.AST) -> int:
    """Lines of a function's body, its docstring left out."""
    body = n.body  # type: ignore[attr-defined]
    first = body[0]
    has_doc = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant)
    start = body[1].lineno if has_doc and len(body) > 1 else first.lineno
    return n.end_lineno - start + 1  # type: ignore[attr-defined, no-any-return]


def test_no_module_over_500_lines() -> None:
    sources = _sources()
    assert len(sources) > 80
    long = [
        f"{p.relative_to(REPO)}: {n}"
        for p in sources
        if (n := len(p.read_text().splitlines())) > MODULE_LINES
    ]
    assert long == []


def test_no_function_over_80_lines_of_code() -> None:
    long = []
    for p in _sources():
        if p.suffix != ".py":
            continue
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and _code_lines(n) > FUNCTION_LINES:
                long.append(f"{p.relative_to(REPO)}:{n.lineno} {n.name}: {_code_lines(n)} lines")
    assert long == []


def test_the_measure_counts_code_not_docstrings() -> None:
    fn = ast.parse('def f():\n    """doc\n    more"""\n    a = 1\n    return a\n').body[0]
    assert _code_lines(fn) == 2
