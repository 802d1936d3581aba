"""``--json`` written as it is encoded: the text of ``json.dumps(obj, indent=2,
default=str)``, never held whole, and lists that may be generators.

Why: ``info --collectives --json`` holds every rank and step (the breakdown, the step
skew, the ranks' rows): ~50 KB of JSON a rank, 830 MB at 16,384 ranks, which
``json.dumps`` builds as one string beside its pieces (issue 38: the reduce's memory
stays bounded). Here the pieces go to the output in batches of :data:`CHUNK`
characters, and a list given as an iterator is encoded item by item as it is produced,
so a producer can hand over one step's entries at a time.

The text is byte for byte what ``json.dumps(obj, indent=2, default=str)`` writes (a test
compares them), with two exceptions. A float that is not finite is written ``null``
(``json.dumps`` writes ``NaN``, which no JSON parser must accept; no figure of the
reports is meant to be one): the output is strict JSON. And the items of a
:class:`LazyArray` (the per-rank, per-step arrays: ~90% of the text at 1,024 ranks) are
encoded by orjson, ~20x faster than Python's encoder: the same JSON values, indented
the same, ASCII only, but a float below 1e-4 may be written ``0.00001`` where
``json.dumps`` writes ``1e-05`` (an item orjson cannot write, or whose text is not
ASCII, goes through the Python encoder).
"""

from __future__ import annotations

import math
from json.encoder import encode_basestring_ascii
from typing import Any, Callable, Iterable, Iterator, List, Optional, TextIO

import orjson

INDENT = "  "
CHUNK = 1 << 14  # pieces (of a few characters each) handed to the output at once
CHUNK_CHARS = 1 << 20  # ... or this many characters of whole array items


class LazyArray:
    """A JSON array whose items ``make()`` produces afresh each time it is written (one
    object can sit in two places of a document: ``collectives`` and its cycle in
    ``collectives_by_cycle``)."""

    def __init__(self, make: Callable[[], Iterable[Any]]) -> None:
        self.make = make

    def __iter__(self) -> Iterator[Any]:
        return iter(self.make())


class PlainLazyArray(LazyArray):
    """A :class:`LazyArray` whose items the Python encoder writes: exactly the text of
    the same items in a list (``json.dumps``' floats), made one at a time (the per-step
    and per-instance objects of every rank: never all at once; issue 38)."""


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


class _Encoder:
    """Appends the pieces of a value's text to ``parts`` by plain recursion (no
    generator per level: ~4x faster than yielding each piece up the nesting, which was
    most of ``--json``'s time at 1,024 ranks) and hands them to ``sink`` every
    :data:`CHUNK` pieces, between items, so a long array never sits whole as text."""

    def __init__(self, sink: Callable[[str], Any], default: Callable[[Any], Any]) -> None:
        self.sink = sink
        self.default = default
        self.parts: List[str] = []
        self.chars = 0  # of the whole items in ``parts`` (orjson's): flushed at CHUNK_CHARS

    def flush(self) -> None:
        if self.parts:
            self.sink("".join(self.parts))
            self.parts.clear()
        self.chars = 0

    def value(self, o: Any, level: int) -> None:
        t = type(o)
        add = self.parts.append
        if t is str:
            add(encode_basestring_ascii(o))
        elif o is None:
            add("null")
        elif o is True:
            add("true")
        elif o is False:
            add("false")
        elif t is int:
            add(int.__repr__(o))
        elif t is float:
            add(_float(o))
        elif t is dict:
            self.object(o, level)
        elif t is list or t is tuple:
            self.array(o, level)
        else:
            self.other(o, level)

    def other(self, o: Any, level: int) -> None:
        """Subclasses, lazy arrays, iterators and what ``default`` turns into something
        JSON can hold, in ``json.dumps``' order of checks."""
        add = self.parts.append
        if isinstance(o, str):
            add(encode_basestring_ascii(o))
        elif isinstance(o, int):
            add(int.__repr__(o))
        elif isinstance(o, float):
            add(_float(o))
        elif isinstance(o, dict):
            self.object(o, level)
        elif isinstance(o, (list, tuple, LazyArray)) or _is_iterator(o):
            self.array(o, level)
        else:
            self.value(self.default(o), level)

    def object(self, o: dict, level: int) -> None:
        add = self.parts.append
        if not o:
            add("{}")
            return
        inner = "\n" + INDENT * (level + 1)
        sep = "{" + inner
        for k, v in o.items():
            add(sep + _key(k) + ": ")
            sep = "," + inner
            self.value(v, level + 1)
        add("\n" + INDENT * level + "}")

    def array(self, o: Any, level: int) -> None:
        parts = self.parts
        inner = "\n" + INDENT * (level + 1)
        sep = "[" + inner
        fast = type(o) is LazyArray  # the long per-rank arrays: their items by orjson
        for v in o:
            parts.append(sep)
            sep = "," + inner
            text = self.compiled(v, inner) if fast else None
            if text is None:
                self.value(v, level + 1)
            else:
                parts.append(text)
                self.chars += len(text)
            if len(parts) >= CHUNK or self.chars >= CHUNK_CHARS:
                self.flush()
        parts.append("[]" if sep[0] == "[" else "\n" + INDENT * level + "]")

    def compiled(self, v: Any, inner: str) -> Optional[str]:
        """``v``'s text by orjson, indented to sit after ``inner``; None where the
        Python encoder must write it: a value orjson cannot (an integer beyond 64 bits,
        a list given as an iterator inside) or text that is not ASCII (written with
        ``\\u`` escapes, as everywhere else)."""
        try:
            b = orjson.dumps(v, default=self._plain_default, option=_ORJSON_OPTIONS)
        except (TypeError, orjson.JSONEncodeError):
            return None
        if not b.isascii():
            return None
        return b.decode("ascii").replace("\n", inner)

    def _plain_default(self, o: Any) -> Any:
        if isinstance(o, LazyArray) or _is_iterator(o):
            raise TypeError("an array given lazily: the Python encoder streams it")
        return self.default(o)


#: orjson as close to ``json.dumps(indent=2, default=str)`` as it goes: int keys as
#: strings, dataclasses and datetimes to ``default`` as json.dumps would hand them
_ORJSON_OPTIONS = (
    orjson.OPT_INDENT_2
    | orjson.OPT_NON_STR_KEYS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
)


def _is_iterator(o: Any) -> bool:
    return hasattr(o, "__next__") and hasattr(o, "__iter__")


def write_json(o: Any, out: TextIO, default: Callable[[Any], Any] = str) -> None:
    """Write ``o``'s text and a newline to ``out`` (what ``print(json.dumps(o,
    indent=2, default=default))`` prints), in batches of :data:`CHUNK` pieces."""
    enc = _Encoder(out.write, default)
    enc.value(o, 0)
    enc.parts.append("\n")
    enc.flush()


__all__ = ["LazyArray", "PlainLazyArray", "write_json"]
