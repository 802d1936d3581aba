"""Kernel categories by name: what kind of work each GPU kernel is.

Why by name: a Kineto trace says only ``cat: kernel`` (or ``gpu_memcpy`` /
``gpu_memset``); whether a kernel is a GEMM, an attention kernel or an NCCL all-reduce
is in its name alone. The step-time figures (analyze/step_time.py) need two answers
per name: its **category** (what the report sums per step: "rank 12 has 31% more
GEMM time") and its **class** (what the GPU union ranks: ``compute`` >
``communication`` > ``memory``; docs/collectives.md *Where every rank's step goes*).

:data:`BUILTIN` is the table, first match wins (regular expressions searched in the
name, case-insensitive). A user's file (``--kernel-categories FILE``, JSON or TOML)
adds rules tried before it::

    {"categories": [{"name": "my fused MLP", "pattern": "fused_mlp", "class": "compute"}]}

A kernel no rule matches is ``other`` (class ``compute``: a kernel that is neither
communication nor a copy is work) and the report lists the most time-consuming such
names, so a missing rule is visible.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tracefuse_stream.errors import UsageError

COMPUTE, COMMUNICATION, MEMORY = "compute", "communication", "memory"
CLASSES = (COMPUTE, COMMUNICATION, MEMORY)
_CODES = {COMPUTE: 0, COMMUNICATION: 1, MEMORY: 2}  # the compiled kernel's classes (csrc/timeline_steps.c)
OTHER = "other"
_COMM = r"(?:nccl|rccl|multimem)"
CategorySpec = Sequence[Tuple[str, str, str]]  # (category, class, pattern), as KernelCategories.spec

#: (category, class, pattern): first match wins; the order matters (an NCCL
#: all-reduce is communication, not a reduction; an implicit-GEMM convolution a
#: convolution)
BUILTIN: Tuple[Tuple[str, str, str], ...] = (
    ("memory", MEMORY, r"^\s*(?:memcpy|memset)\b"),
    ("communication: AllReduce", COMMUNICATION, _COMM + r".*all_?reduce"),
    ("communication: AllGather", COMMUNICATION, _COMM + r".*all_?gather"),
    ("communication: ReduceScatter", COMMUNICATION, _COMM + r".*reduce_?scatter"),
    ("communication: AllToAll", COMMUNICATION, _COMM + r".*all_?to_?all"),
    ("communication: SendRecv", COMMUNICATION, _COMM + r".*(?:sendrecv|send|recv)"),
    ("communication: Broadcast", COMMUNICATION, _COMM + r".*broadcast"),
    ("communication: Reduce", COMMUNICATION, _COMM + r".*reduce"),
    ("communication: other", COMMUNICATION, _COMM),
    ("attention", COMPUTE, r"flash|fmha|attention|_attn|sdpa|mha_"),
    ("convolution", COMPUTE, r"conv|winograd|dgrad|wgrad|fprop"),
    ("GEMM", COMPUTE, r"gemm|cutlass|cublas|Cijk_|xmma|nvjet|matmul|s884|s1688|s16816|wgmma|hipblaslt"),
    (
        "elementwise/reduction",
        COMPUTE,
        r"elementwise|vectorized|unrolled|reduce|reduction|at::native|triton|cub::|multi_tensor|"
        r"norm|softmax|dropout|relu|gelu|silu|fill|copy|index|scatter|gather|adam|sgd|cat_|"
        r"\bbn_|transpose|nchwtonhwc|nhwctonchw|permute|tensorop",
    ),
)


@dataclass(frozen=True)
class Rule:
    category: str
    klass: str
    regex: re.Pattern[str]


@dataclass
class KernelCategories:
    """The rules in order (a user's first, then :data:`BUILTIN`); :meth:`of` caches
    per name (a file has hundreds of distinct kernel names, millions of kernels)."""

    rules: List[Rule]
    source: Optional[str] = None  # the user's file, if any

    def __post_init__(self) -> None:
        self._cache: Dict[str, Tuple[str, str]] = {}
        self._codes: Dict[str, int] = {}
        # any rule of another class than compute: a name none of them holds is compute
        # whatever else it matches (one search for most names, CPU operators included)
        self._not_compute = re.compile(
            "|".join(f"(?:{r.regex.pattern})" for r in self.rules if r.klass != COMPUTE) or "(?!)",
            re.IGNORECASE,
        )

    def class_codes(self, names: Sequence[str]) -> bytes:
        """One byte per name: 0 compute, 1 communication, 2 memory (the compiled
        kernel's ``gpu_windows`` classes)."""
        got = self._codes
        for n in names:
            if n not in got:
                got[n] = _CODES[self.of(n)[1]] if self._not_compute.search(n) else 0
        return bytes(got[n] for n in names)

    def of(self, name: str) -> Tuple[str, str]:
        """(category, class) of a kernel name."""
        got = self._cache.get(name)
        if got is None:
            got = next(((r.category, r.klass) for r in self.rules if r.regex.search(name)), (OTHER, COMPUTE))
            self._cache[name] = got
        return got

    def spec(self) -> List[Tuple[str, str, str]]:
        """The rules as plain data (what a worker process is handed: picklable, small)."""
        return [(r.category, r.klass, r.regex.pattern) for r in self.rules]


def _rules(spec: Sequence[Tuple[str, str, str]]) -> List[Rule]:
    return [Rule(c, k, re.compile(p, re.IGNORECASE)) for c, k, p in spec]


def builtin() -> KernelCategories:
    """The package's table alone."""
    return KernelCategories(_rules(BUILTIN))


def from_spec(spec: Optional[CategorySpec]) -> KernelCategories:
    """Rebuild :meth:`KernelCategories.spec` (None: the built-in table); one object
    per table in a process, so its per-name cache serves every file a worker reads."""
    return _cached(None if spec is None else tuple(tuple(x) for x in spec))


@functools.lru_cache(maxsize=4)
def _cached(spec: Optional[Tuple[Tuple[str, str, str], ...]]) -> KernelCategories:
    return builtin() if spec is None else KernelCategories(_rules(spec))


def _bad(path: str, where: str, problem: str) -> UsageError:
    return UsageError(f"--kernel-categories {path}: {where}: {problem}")


def _parse(path: str, text: str) -> Any:
    if path.lower().endswith(".toml"):
        try:  # the standard library's from Python 3.11 (3.10: tomli where installed)
            toml: Any = importlib.import_module("tomllib")
        except ImportError:
            try:
                toml = importlib.import_module("tomli")
            except ImportError:
                raise _bad(path, "TOML", "needs Python 3.11+ (or tomli): write the file as JSON") from None
        try:
            return toml.loads(text)
        except toml.TOMLDecodeError as err:
            raise _bad(path, "not valid TOML", str(err)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise _bad(path, f"line {err.lineno}, column {err.colno}", f"not valid JSON ({err.msg})") from None


def load(path: str) -> KernelCategories:
    """The user's rules from ``path`` (JSON, or TOML by its ``.toml`` suffix), before
    the built-in ones. Any problem is a usage error naming the file and where in it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise _bad(path, "cannot be read", str(err)) from None
    doc = _parse(path, text)
    entries = doc.get("categories") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise _bad(path, "top level", 'expected {"categories": [{"name", "pattern", "class"}, ...]}')
    spec: List[Tuple[str, str, str]] = []
    for i, e in enumerate(entries):
        where = f"categories[{i}]"
        if (
            not isinstance(e, dict)
            or not isinstance(e.get("name"), str)
            or not isinstance(e.get("pattern"), str)
        ):
            raise _bad(path, where, 'expected an object with string "name" and "pattern"')
        klass = e.get("class", COMPUTE)
        if klass not in CLASSES:
            raise _bad(path, where, f"class {klass!r} is not one of {', '.join(CLASSES)}")
        try:
            re.compile(e["pattern"], re.IGNORECASE)
        except re.error as err:
            raise _bad(path, where, f"pattern {e['pattern']!r}: {err}") from None
        spec.append((e["name"], klass, e["pattern"]))
    return KernelCategories(_rules(spec + list(BUILTIN)), source=path)


__all__ = [
    "BUILTIN",
    "CLASSES",
    "CategorySpec",
    "COMMUNICATION",
    "COMPUTE",
    "KernelCategories",
    "MEMORY",
    "OTHER",
    "builtin",
    "from_spec",
    "load",
]
