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
from typing import Any, Dict, List, Optional, Tuple

#: the deepest nesting of an event any reader accepts (orjson writes at most 255 levels)
MAX_DEPTH = 254
#: the deepest nesting of a top-level key's value (its value is level 1): the merge copies
#: the keys into its own header, ``tracefuse.ranks.<rank>.header.<key>``, five levels
#: down, and ``info --json`` a few more; 240 leaves orjson's 255 room to write them
MAX_KEY_DEPTH = MAX_DEPTH - 14

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


def too_deep_message(d: Optional[int]) -> str:
    """``d`` None: deeper than the limit, how much deeper not counted (beyond 64 MB)."""
    levels = f"{d}" if d is not None else f"more than {MAX_DEPTH}"
    return f"an event nests {levels} levels deep (at most {MAX_DEPTH} are accepted)"


class NestedTooDeep(ValueError):
    """A top-level key's value nests deeper than :data:`MAX_KEY_DEPTH` (its value is
    level 1, as an event is). Raised where the file's path is not known; the reader that knows
    it turns it into an :class:`~tracefuse_stream.errors.InputError` (:meth:`message`).
    ``depth`` None: deeper than the limit, how much deeper the reader did not read."""

    def __init__(self, key: str, depth: Optional[int]) -> None:
        super().__init__(key, depth)
        self.key = key
        self.depth = depth

    def message(self) -> str:
        d = f"{self.depth}" if self.depth is not None else f"more than {MAX_KEY_DEPTH}"
        return f"the top-level key {self.key!r} nests {d} levels deep (at most {MAX_KEY_DEPTH} are accepted)"


def deep_key(doc: Any) -> Optional[NestedTooDeep]:
    """The first key of a decoded top-level object whose value nests too deep, or None."""
    if type(doc) is dict:
        for k, v in doc.items():
            if (type(v) is dict or type(v) is list) and depth(v, MAX_KEY_DEPTH) > MAX_KEY_DEPTH:
                return NestedTooDeep(str(k), depth(v, -1))
    return None


# a whole JSON string (escapes skipped) or one bracket
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def deep_key_in_text(text: bytes) -> Optional[NestedTooDeep]:
    """:func:`deep_key` for the text of a top-level object that no decoder can build
    (msgspec stops at Python's recursion limit): a string-aware count of brackets,
    linear in the text. Used on the error path only."""
    for k, d in key_depths_in_text(text).items():
        if d > MAX_KEY_DEPTH:
            return NestedTooDeep(k, d)
    return None


def key_depths_in_text(text: bytes) -> Dict[str, int]:
    """How deep each top-level key's value nests in the text of an object (a key with
    a scalar value is left out; text cut short counts what it holds)."""
    level = 0
    key = ""
    deepest: Dict[str, int] = {}
    last_string = ""
    for m in _TOKEN.finditer(text):
        tok = m.group()
        if tok[:1] == b'"':
            if level == 1:
                last_string = tok[1:-1].decode("utf-8", "replace")
            continue
        if tok in (b"[", b"{"):
            level += 1
            if level == 2:
                key = last_string
            if level > 1 and level - 1 > deepest.get(key, 0):
                deepest[key] = level - 1
        else:
            level -= 1
    return deepest


__all__ = [
    "MAX_DEPTH",
    "MAX_KEY_DEPTH",
    "NestedTooDeep",
    "SurrogateScan",
    "deep_key",
    "deep_key_in_text",
    "depth",
    "key_depths_in_text",
    "lone_surrogate",
    "surrogate_field",
    "too_deep_message",
]
