"""What a trace's text may not hold even where a JSON parser lets it through.

Two things, each with one rule for every field and every reader:

* **lone UTF-16 surrogate escapes** (``"\\ud800"`` without its pair): not Unicode text.
  msgspec and orjson refuse them, yajl (ijson's C backend) turns a lone high surrogate
  into ``"?"`` and a lone low one into invalid UTF-8, Python's ``json`` keeps a string
  no UTF-8 encoder can write. Written as ``"?"`` the text would be altered silently, so
  an event holding one is an input error naming the event and the field (``--salvage``
  drops the event);
* **nesting**: an event may nest :data:`MAX_DEPTH` levels (the event object is level 1;
  Kineto writes 4). orjson, which writes what the exact and salvage readers read, stops
  at 255; msgspec's decoder at Python's recursion limit (about 1,000). A deeper event is
  an input error that names its depth, never a ``RecursionError``.

The checks run where the text is read by the slow readers (the exact reader, salvage)
and on projected reads (which skip the fields they do not decode): the fast merge path
decodes every string with msgspec, which refuses lone surrogates itself.
"""

from __future__ import annotations

import re
from typing import Any, List, Optional, Tuple

#: the deepest nesting of an event any reader accepts (orjson writes at most 255 levels)
MAX_DEPTH = 254

# an escaped backslash (skipped, so "\\\\ud800" is no escape), a surrogate pair
# (skipped), or a surrogate escape on its own (group 1)
_SURROGATES = re.compile(
    rb"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|(\\u[dD][89a-fA-F][0-9a-fA-F]{2})"
)


def lone_surrogate(data: bytes) -> Optional[Tuple[int, str]]:
    """``(offset, escape)`` of the first lone surrogate escape in JSON text, or None."""
    if b"\\u" not in data and b"\\U" not in data:
        return None
    for m in _SURROGATES.finditer(data):
        if m.group(1) is not None:
            return m.start(1), m.group(1).decode("ascii")
    return None


_SUSPECT = re.compile(rb"\\u[dD][89a-fA-F]")


class SurrogateScan:
    """A cheap look at a stream of chunks: could it hold a surrogate escape? (Pairs,
    e.g. an escaped emoji, say yes too: :func:`find_lone_surrogate` then judges
    the events one by one.)"""

    def __init__(self) -> None:
        self._tail = b""

    def suspect(self, chunk: bytes) -> bool:
        data = self._tail + chunk
        self._tail = data[-5:]
        return b"\\" in data and _SUSPECT.search(data) is not None


def surrogate_field(value: Any, path: str = "") -> Optional[str]:
    """Where a decoded event (Python's ``json``, which keeps lone surrogates) holds one:
    ``name``, ``args['x']``, ``a key of args``; None when nowhere."""
    stack: List[Tuple[Any, str]] = [(value, path)]
    while stack:
        v, where = stack.pop()
        if type(v) is str:
            if _has_surrogate(v):
                return where or "a value"
        elif type(v) is dict:
            for k, x in reversed(list(v.items())):
                if _has_surrogate(k):
                    return f"a key of {where}" if where else f"the key {k!r}"
                stack.append((x, f"{where}[{k!r}]" if where else k))
        elif type(v) is list:
            for i in range(len(v) - 1, -1, -1):
                stack.append((v[i], f"{where}[{i}]"))
    return None


def _has_surrogate(s: str) -> bool:
    try:
        s.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """The nesting depth of a decoded value (an object or array is one level more than
    its deepest member), counted only up to ``limit + 1`` unless ``limit`` is -1."""
    deepest = 0
    stack: List[Tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if type(v) is dict:
            members: Any = v.values()
        elif type(v) is list:
            members = v
        else:
            continue
        if d > deepest:
            deepest = d
            if limit >= 0 and d > limit:
                return d
        for x in members:
            if type(x) is dict or type(x) is list:
                stack.append((x, d + 1))
    return deepest


def too_deep_message(d: int) -> str:
    return f"an event nests {d} levels deep (at most {MAX_DEPTH} are accepted)"


__all__ = ["MAX_DEPTH", "SurrogateScan", "depth", "lone_surrogate", "surrogate_field", "too_deep_message"]
