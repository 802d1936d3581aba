"""``--json`` written as it is encoded: the text of ``json.dumps(obj, indent=2,
default=str)``, never held whole, and lists that may be generators.

Why: ``info --collectives --json`` holds every rank and step (the breakdown, the step
skew, the ranks' rows): ~50 KB of JSON a rank, 830 MB at 16,384 ranks, which
``json.dumps`` builds as one string beside its pieces (issue 38: the reduce's memory
stays bounded). Here the pieces go to the output in batches of :data:`CHUNK`
characters, and a list given as an iterator is encoded item by item as it is produced,
so a producer can hand over one step's entries at a time.

The text is byte for byte what ``json.dumps(obj, indent=2, default=str)`` writes (a test
compares them), with one exception that keeps the output strict JSON: a float that is
not finite is written ``null`` (``json.dumps`` writes ``NaN``, which no JSON parser
must accept); no figure of the reports is meant to be one.
"""

from __future__ import annotations

import math
from json.encoder import encode_basestring_ascii
from typing import Any, Callable, Iterable, Iterator, List, TextIO

INDENT = "  "
CHUNK = 1 << 16  # characters handed to the output at once


class LazyArray:
    """A JSON array whose items ``make()`` produces afresh each time it is written (one
    object can sit in two places of a document: ``collectives`` and its cycle in
    ``collectives_by_cycle``)."""

    def __init__(self, make: Callable[[], Iterable[Any]]) -> None:
        self.make = make

    def __iter__(self) -> Iterator[Any]:
        return iter(self.make())


def _float(x: float) -> str:
    return float.__repr__(x) if math.isfinite(x) else "null"


def _key(k: Any) -> str:
    """A dict key as ``json.dumps`` writes it (it applies no ``default`` to keys)."""
    if isinstance(k, str):
        return encode_basestring_ascii(k)
    if k is True:
        return '"true"'
    if k is False:
        return '"false"'
    if k is None:
        return '"null"'
    if isinstance(k, int):
        return '"' + int.__repr__(k) + '"'
    if isinstance(k, float):
        return '"' + _float(k) + '"'
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")


def iter_json(o: Any, level: int = 0, default: Callable[[Any], Any] = str) -> Iterator[str]:
    """The pieces of ``o``'s text at indent ``level`` (see the module docstring)."""
    if isinstance(o, str):
        yield encode_basestring_ascii(o)
    elif o is None:
        yield "null"
    elif o is True:
        yield "true"
    elif o is False:
        yield "false"
    elif isinstance(o, int):
        yield int.__repr__(o)
    elif isinstance(o, float):
        yield _float(o)
    elif isinstance(o, dict):
        yield from _object(o, level, default)
    elif isinstance(o, (list, tuple, LazyArray)) or _is_iterator(o):
        yield from _array(o, level, default)
    else:
        yield from iter_json(default(o), level, default)


def _is_iterator(o: Any) -> bool:
    return hasattr(o, "__next__") and hasattr(o, "__iter__")


def _object(o: dict, level: int, default: Callable[[Any], Any]) -> Iterator[str]:
    if not o:
        yield "{}"
        return
    inner = "\n" + INDENT * (level + 1)
    first = True
    for k, v in o.items():
        yield ("{" if first else ",") + inner + _key(k) + ": "
        first = False
        yield from iter_json(v, level + 1, default)
    yield "\n" + INDENT * level + "}"


def _array(o: Any, level: int, default: Callable[[Any], Any]) -> Iterator[str]:
    inner = "\n" + INDENT * (level + 1)
    first = True
    for v in o:
        yield ("[" if first else ",") + inner
        first = False
        yield from iter_json(v, level + 1, default)
    yield "[]" if first else "\n" + INDENT * level + "]"


def write_json(o: Any, out: TextIO, default: Callable[[Any], Any] = str) -> None:
    """Write ``o``'s text and a newline to ``out`` (what ``print(json.dumps(o,
    indent=2, default=default))`` prints), in batches of :data:`CHUNK` characters."""
    batch: List[str] = []
    size = 0
    for piece in iter_json(o, 0, default):
        batch.append(piece)
        size += len(piece)
        if size >= CHUNK:
            out.write("".join(batch))
            batch, size = [], 0
    batch.append("\n")
    out.write("".join(batch))


__all__ = ["LazyArray", "iter_json", "write_json"]
