"""A guard between a trace's bytes and ijson: no text deeper than ijson can afford.

ijson keeps the prefix of every open container (``traceEvents.item.args.x.item...``),
one segment longer per level, so a value nesting d levels holds memory ~ d^2: a 200 KB
file of 100,000 nested ``[`` took 23 GB and the kernel's OOM killer (issue 28). The
readers' rule (read/textcheck.py: an event nests at most ``MAX_DEPTH`` levels) is
judged after ijson has built an event, too late for such a file. :class:`DepthGate`
reads the bytes ijson reads first and stops at :data:`GATE_LEVELS` levels of the
document with :class:`TooDeepText`, having counted the offending value to its end
(bounded by ``MAX_EVENT_BYTES``) so the error can name its depth.

It counts brackets outside strings with one regular expression (a whole string, or one
bracket, per match), carrying the state of a string cut by a chunk's end, so it costs
one match per string of the text: it guards the ijson paths (the exact reader, the
planner's peek at a first event, verify), not the fast batch reader, which decodes
with msgspec and judges depth on the decoded batch.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Tuple

from tracefuse_stream.read.textcheck import MAX_DEPTH

#: document levels the gate lets through: an event of MAX_DEPTH levels sits two levels
#: down (the top-level object, the event array), a top-level key's value one
GATE_LEVELS = MAX_DEPTH + 2
#: how far past the limit the gate reads to count the offending value's depth
COUNT_LIMIT = 64 << 20

_OUTSIDE = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]|"')
_STRING_REST = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b'[]{}"')
_HANDOFF = -2
#: hand-offs to the fast scan a window at most (a failed one costs a pass over the rest)
_HANDOFFS = 8
#: bytes judged at a time: the exact scan takes only the windows at the top level
WINDOW = 64 << 10
_RESIDUE = re.compile(rb"[\]}]*[\[{]*")


def brackets_between_strings(text: bytes) -> Tuple[bytes, bool]:
    """The brackets of JSON text that starts outside a string, and whether the text ends
    inside one: escapes removed (every backslash pair, then every escaped quote), every
    byte but quotes and brackets, then every other piece between quotes (the strings).
    A few C-speed passes over the text."""
    if b"\\" in text:
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    pieces = text.translate(None, _NOT_BRACKETS).split(b'"')
    return b"".join(pieces[0::2]), len(pieces) % 2 == 0


def matched_pairs_removed(brackets: bytes, room: int) -> Tuple[bytes, int]:
    """``brackets`` without its matched pairs, and how deep they nested at most: each
    ``replace`` that removes ``[]`` (or ``{}``) takes one level off every chain of
    them, so the count of those that remove something bounds the depth from above.
    ``-1``: more than ``room`` levels."""
    nesting = 0
    while True:
        before = len(brackets)
        for pair in (b"[]", b"{}"):
            less = brackets.replace(pair, b"")
            if len(less) != len(brackets):
                brackets = less
                nesting += 1
                if nesting > room:
                    return brackets, -1
        if len(brackets) == before:
            return brackets, nesting


def text_deeper_than(text: bytes, limit: int) -> bool:
    """Whether complete JSON text may nest more than ``limit`` levels (an upper bound:
    False is certain; True sends the text to a reader that counts exactly). About
    350 MB/s: the batch readers ask it of every batch they decode, projected ones too
    (their decoder skips the fields it does not keep without looking at their depth)."""
    brackets, _cut = brackets_between_strings(text)
    if len(brackets) <= 2 * limit:
        return False  # too few brackets to nest that deep
    brackets, nesting = matched_pairs_removed(brackets, limit)
    return nesting < 0 or bool(brackets)


class TooDeepText(ValueError):
    """The text nests deeper than :data:`GATE_LEVELS` document levels, in the value of
    the top-level ``key`` (``traceEvents``: in an event; None: an event of the array
    form). ``depth``: that event's or value's depth as read/textcheck.py counts it (the
    event, or the key's value, is level 1); None when the text ended first or the count
    went past :data:`COUNT_LIMIT`."""

    def __init__(self, key: Optional[str], depth: Optional[int]) -> None:
        super().__init__(key, depth)
        self.key = key
        self.depth = depth

    @property
    def in_event(self) -> bool:
        return self.key is None or self.key == "traceEvents"


class DepthGate:
    """A file for ijson that counts the levels of what it hands over (see the module)."""

    def __init__(self, f: Any, limit: int = GATE_LEVELS) -> None:
        self._f = f
        self._limit = limit
        self.level = 0
        self._in_string = False
        self._escape = False  # the last chunk ended on a backslash inside a string
        self._object = False  # the top level is an object (its strings are keys and values)
        self._key: Optional[str] = None  # the last string of the top level
        self._top_key: Optional[str] = None  # the key whose value is open
        self._partial = b""  # the text so far of a top-level string a chunk cut
        self._error: Optional[TooDeepText] = None
        self._handoff = 0
        self._counting = False
        self._deepest = 0
        self._floor = 0

    def read(self, n: int = -1) -> bytes:
        if self._error is not None:
            raise self._error
        data = self._f.read(n)
        at = self._advance(data)
        if at >= 0:
            # the text before the crossing goes to ijson first, so the events before
            # the deep one are delivered and the error comes at the deep one's index
            self._error = self._count_on(data, at)
            if at == 0:  # nothing before it to hand over (an empty read would be the end)
                raise self._error
            return data[:at]
        return data

    def _advance(self, data: bytes) -> int:
        """Advance over ``data`` a window at a time: at C speed where :meth:`_fast` can,
        by the exact scan where the text is at the top level (the start of the file and
        its end: a window or two) until it is below it again. The index where the level
        passes the limit, or -1."""
        pos = 0
        n = len(data)
        while pos < n:
            end = min(n, pos + WINDOW)
            window = data[pos:end] if pos or end < n else data
            if self._fast(window, 0):
                pos = end
                continue
            at = self._scan(window, 0, handoff=True)
            tries = 0
            while at == _HANDOFF:
                # the rest of the window at C speed from where the text went below the
                # top level; when it comes back up there (the next key's value: the
                # header's keys before the events, the trailer's after), the exact scan
                # takes it to the next value that opens, a few times a window at most
                start = self._handoff
                if self._fast(window, start):
                    break
                tries += 1
                at = self._scan(window, start, handoff=tries < _HANDOFFS, reopen=True)
            if at >= 0:
                return pos + at
            pos = end
        return -1

    def _fast(self, data: bytes, start: int) -> bool:
        """Advance over ``data`` at C speed when it provably stays within the limit and
        off the top level (where the keys are read): escapes removed, every byte but
        quotes and brackets, the strings (every other piece between quotes), then
        matched bracket pairs, one level a pass; what is left closes outer levels and
        opens new ones (about 350 MB/s). False (the state untouched): the exact scan must look."""
        top = 2 if self._object else 1  # the level where keys are read, or the array form's
        if self.level < top:
            return False
        pos = start + 1 if self._escape else start
        if self._in_string:
            m = _STRING_REST.match(data, pos)
            if m is None:
                self._string_cut(data, pos)
                return True  # all of it inside the string
            pos = m.end()
        brackets, cut = brackets_between_strings(data[pos:] if pos else data)
        brackets, nesting = matched_pairs_removed(brackets, self._limit - self.level)
        if nesting < 0:
            return False
        if _RESIDUE.fullmatch(brackets) is None:
            return False
        closers = len(brackets) - len(brackets.lstrip(b"]}"))
        low = self.level - closers
        end = low + len(brackets) - closers
        if low < top or max(self.level, end) + nesting > self._limit:
            return False
        self.level = end
        self._in_string = cut
        if cut:
            self._string_cut(data, pos)
        else:
            self._escape = False
        return True

    def _scan(self, data: bytes, pos: int, handoff: bool = False, reopen: bool = False) -> int:
        """Advance the state over ``data[pos:]``: the index where the level passes the
        limit, or (counting) where the offending value ends; -1 when neither.
        ``handoff``: stop with :data:`_HANDOFF` (``self._handoff``: where) once inside
        the top level's values, where :meth:`_fast` can take the rest; with ``reopen``
        only where a value of the top level opens (the text before was judged deep by
        :meth:`_fast` already and came back to the top level)."""
        if self._escape:
            self._escape = False
            pos += 1
        if self._in_string:
            m = _STRING_REST.match(data, pos)
            if m is None:
                self._string_cut(data, pos)
                return -1
            if self.level == 1 and self._object:
                self._key = (self._partial + data[pos : m.end() - 1]).decode("utf-8", "replace")
            self._partial = b""
            pos = m.end()
            self._in_string = False
        for m in _OUTSIDE.finditer(data, pos):
            c = data[m.start()]
            if c == 0x22:  # '"'
                if m.end() - m.start() == 1:  # a string the chunk cuts
                    self._in_string = True
                    self._partial = b""
                    self._string_cut(data, m.end())
                    return -1
                if self.level == 1 and self._object:
                    self._key = m.group()[1:-1].decode("utf-8", "replace")
                continue
            if c == 0x5B or c == 0x7B:  # '[' '{'
                self.level += 1
                if self.level == 1:
                    self._object = c == 0x7B
                elif self.level == 2:
                    self._top_key = self._key if self._object else None
                top = 2 if self._object else 1
                if (
                    handoff
                    and (self.level == top if reopen else self.level >= top)
                    and self.level <= self._limit
                ):
                    self._handoff = m.end()
                    return _HANDOFF
                if self._counting:
                    self._deepest = max(self._deepest, self.level)
                elif self.level > self._limit:
                    return m.start()
            else:
                self.level -= 1
                if self._counting and self.level <= self._floor:
                    return m.start()
        return -1

    def _string_cut(self, data: bytes, pos: int) -> None:
        """The chunk ends inside a string whose unread text starts at ``data[pos]``: an
        odd run of backslashes at its end escapes the next chunk's first byte. At the
        top level the string may be a key: its text is kept (the first 256 bytes)."""
        rest = data[pos:]
        run = len(rest) - len(rest.rstrip(b"\\"))
        self._escape = run % 2 == 1
        if self.level == 1 and self._object and len(self._partial) < 256:
            self._partial += rest

    def _count_on(self, data: bytes, at: int) -> TooDeepText:
        """The error for the value that crossed the limit at ``data[at]``, its depth
        counted to its end (reading on, at most :data:`COUNT_LIMIT` bytes)."""
        key = self._top_key
        # an event of the object form opens at level 3, of the array form at 2; a key's value at 2
        first = 3 if self._object and key == "traceEvents" else 2
        self._counting, self._deepest, self._floor = True, self.level, first - 1
        chunk, pos, read = data, at + 1, 0
        while True:
            if self._scan(chunk, pos) >= 0:
                return TooDeepText(key, self._deepest - first + 1)
            read += len(chunk)
            chunk, pos = (self._f.read(1 << 20) if read <= COUNT_LIMIT else b""), 0
            if not chunk:
                return TooDeepText(key, None)


def key_depth_in_file(reader: Any, key: str, limit: int) -> Optional[int]:
    """How deep the top-level ``key`` of the file ``reader`` reads nests, counted by a
    gate stopping at ``limit`` levels of a key's value (the keys before the events come
    first); None when the gate meets no such key that deep."""
    gate = DepthGate(reader, limit=limit + 1)  # a key's value opens at level 2
    try:
        while gate.read(1 << 20):
            pass
    except TooDeepText as deep:
        if deep.key == key:
            return deep.depth
    return None


__all__ = [
    "COUNT_LIMIT",
    "key_depth_in_file",
    "DepthGate",
    "GATE_LEVELS",
    "TooDeepText",
    "brackets_between_strings",
    "matched_pairs_removed",
    "text_deeper_than",
]
