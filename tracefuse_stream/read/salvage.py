"""``--salvage``: read what can be read from a broken trace.

Strict parsing (ijson) cannot resume after an error, so salvage frames the file
itself: a string-aware scanner finds the top-level keys and each element of the
event array as a byte slice, and every slice is parsed on its own. A slice that
does not parse is repaired where that is lossless — invalid UTF-8 bytes replaced
by U+FFFD, raw control characters in strings escaped, stray backslashes escaped,
quotes inside strings that cannot end the string escaped, NaN/Infinity written as
null — and skipped (and counted) otherwise. A truncated file (or a truncated or
corrupt gzip/zstd stream) keeps every complete event before the cut.

Framing works on bytes with regular-expression jumps between the few characters
that matter, and holds at most one event plus one read chunk in memory.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Dict, Iterator, List, Optional, Tuple

import orjson

from tracefuse_stream.errors import InputError
from tracefuse_stream.exactjson import FLOAT_EXACT_LIMIT, DecodeError
from tracefuse_stream.read.sources import READ_SIZE, TraceReader
from tracefuse_stream.read.textcheck import MAX_DEPTH, deep_key, deep_key_in_text, depth, surrogate_field
from tracefuse_stream.read.toplevel import EVENTS_KEY_BYTES, MAX_EVENT_BYTES, decode_value

_OUTSIDE = re.compile(rb'["{}\[\],:]')
_INSIDE = re.compile(rb'["\\]')
_NON_WS = re.compile(rb"[^ \t\r\n]")
_VALID_ESC = frozenset('"\\/bfnrt')
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")


@dataclass
class SalvageReport:
    """What salvage did to one file; recorded in the rank's header."""

    truncated_at: Optional[int] = None  # decompressed byte offset where data ended early
    stream_error: Optional[str] = None  # decompression problem, if any
    skipped: int = 0
    repaired: int = 0
    nonfinite_to_null: int = 0
    examples: List[str] = field(default_factory=list)
    header_complete: bool = True

    @property
    def anything(self) -> bool:
        return bool(
            self.truncated_at is not None
            or self.stream_error
            or self.skipped
            or self.repaired
            or not self.header_complete
        )

    def to_dict(self) -> Dict[str, Any]:
        return {
            "truncated_at_byte": self.truncated_at,
            "stream_error": self.stream_error,
            "events_skipped": self.skipped,
            "events_repaired": self.repaired,
            "nonfinite_numbers_nulled": self.nonfinite_to_null,
            "header_complete": self.header_complete,
            "examples": self.examples[:5],
        }

    def summary(self) -> str:
        parts = []
        if self.stream_error:
            parts.append(self.stream_error)
        if self.truncated_at is not None:
            parts.append(f"truncated at byte {self.truncated_at}")
        if self.skipped:
            parts.append(f"{self.skipped} event(s) skipped")
        if self.repaired:
            parts.append(f"{self.repaired} event(s) repaired")
        if not self.header_complete:
            parts.append("header incomplete")
        return ", ".join(parts) or "nothing to salvage"


def tolerant_chunks(path: str, report: SalvageReport) -> Iterator[bytes]:
    """Decompressed chunks of ``path``; a truncated or corrupt stream just ends
    (after every byte decodable before the damage), noted in ``report``."""
    reader = TraceReader(path, tolerant=True)
    try:
        while True:
            try:
                chunk = reader.read(READ_SIZE)
            except InputError as e:
                report.stream_error = e.problem
                return
            if not chunk:
                return
            yield chunk
    finally:
        reader.close()


def repair_text(text: str) -> str:
    """Fix, inside JSON strings: raw control characters, invalid escapes, and quotes
    that cannot end the string (not followed by , : } ] or the end). Outside strings,
    NaN / Infinity / -Infinity become null."""
    out: List[str] = []
    i = 0
    n = len(text)
    in_str = False
    while i < n:
        c = text[i]
        if in_str:
            if c == "\\":
                nxt = text[i + 1] if i + 1 < n else ""
                if nxt in _VALID_ESC and nxt:
                    out.append(text[i : i + 2])
                    i += 2
                    continue
                if nxt == "u" and _HEX4.match(text, i + 2):
                    out.append(text[i : i + 6])
                    i += 6
                    continue
                out.append("\\\\")
                i += 1
                continue
            if c == '"':
                j = i + 1
                while j < n and text[j] in " \t\r\n":
                    j += 1
                if j >= n or text[j] in ",:}]":
                    in_str = False
                    out.append(c)
                else:
                    out.append('\\"')
                i += 1
                continue
            if c < " ":
                out.append("\\u%04x" % ord(c))
                i += 1
                continue
            out.append(c)
            i += 1
        else:
            if c == '"':
                in_str = True
                out.append(c)
            elif text.startswith("NaN", i):
                out.append("null")
                i += 3
                continue
            elif text.startswith("Infinity", i):
                out.append("null")
                i += 8
                continue
            elif text.startswith("-Infinity", i):
                out.append("null")
                i += 9
                continue
            else:
                out.append(c)
            i += 1
    return "".join(out)


def _nonfinite(_name: str) -> None:
    return None


def parse_slice(data: bytes, exact: bool, report: SalvageReport) -> Tuple[bool, Any]:
    """Parse one framed value: strictly first, then repaired. ``(ok, value)``."""
    if not exact:
        try:
            value = orjson.loads(data)
            ts = value.get("ts") if type(value) is dict else None
            if type(ts) is not float or -FLOAT_EXACT_LIMIT < ts < FLOAT_EXACT_LIMIT:
                return True, value
        except orjson.JSONDecodeError:
            pass
    text = data.decode("utf-8", errors="replace")
    nonfinite = [0]

    def const(name: str) -> None:
        nonfinite[0] += 1
        return None

    for attempt, candidate in enumerate((text, None)):
        if candidate is None:
            candidate = repair_text(text)
        try:
            value = json.loads(candidate, parse_float=Decimal, parse_constant=const)
        except (ValueError, RecursionError):
            continue
        if surrogate_field(value) is not None or depth(value) > MAX_DEPTH:
            break  # text no encoder can write as it is (read/textcheck.py): skipped
        changed = attempt > 0 or "\ufffd" in text and b"\xef\xbf\xbd" not in data or nonfinite[0] > 0
        if changed:
            report.repaired += 1
            report.nonfinite_to_null += nonfinite[0]
        return True, value
    report.skipped += 1
    if len(report.examples) < 5:
        report.examples.append(data[:120].decode("utf-8", errors="replace"))
    return False, None


@dataclass
class _ScanState:
    """Where :meth:`Framer.events` is in the text: the buffer and the open structures
    (positions are in ``buf``; -1 when none is open)."""

    buf: bytearray = field(default_factory=bytearray)  # appended to in place: linear
    pos: int = 0
    depth: int = 0
    in_str: bool = False
    key: Optional[bytes] = None
    last_str: Optional[bytes] = None
    str_start: int = -1
    in_events: bool = False
    events_depth: int = -1
    elem_start: int = -1
    val_start: int = -1  # header value start (depth 1, after ':')


def _needs_more(st: _ScanState, m: Optional[re.Match[bytes]]) -> bool:
    """Whether the next token can only be judged with more text: none found, or a
    backslash or quote at the buffer's end inside a string."""
    if m is None:
        return True
    if not st.in_str:
        return False
    return (m.group() == b"\\" and m.end() >= len(st.buf)) or (
        m.group() == b'"' and _NON_WS.search(st.buf, m.end()) is None
    )


def _in_string(st: _ScanState, c: bytes, p: int) -> None:
    if c == b"\\":
        st.pos = p + 2
        return
    # A quote ends a string only where JSON can continue after one;
    # otherwise it is an unescaped quote inside the string.
    rest = st.buf[p + 1 : p + 65].lstrip()
    if rest and rest[:1] not in b",:}]":
        return
    st.in_str = False
    st.last_str = bytes(st.buf[st.str_start + 1 : p])


class Framer:
    """Splits a (possibly broken) trace into header values and event slices."""

    def __init__(
        self, chunks: Iterator[bytes], report: SalvageReport, exact: bool, raw: bool = False, path: str = ""
    ) -> None:
        self.path = path  # for the one error salvage cannot repair: a top-level key nested too deep
        self.chunks = chunks
        self.report = report
        self.exact = exact
        self.raw = raw  # yield each event's text, unparsed (read/locate.py)
        self.header: Dict[str, Any] = {}
        self.offset = 0  # decompressed bytes consumed before buf
        self.layout: Optional[str] = None
        self.saw_events = False

    def events(self) -> Iterator[Any]:
        """Yield parsed events; ``self.header`` fills as top-level keys are seen."""
        st = _ScanState()
        more = True
        it = iter(self.chunks)
        while True:
            m = (_INSIDE if st.in_str else _OUTSIDE).search(st.buf, st.pos)
            if more and _needs_more(st, m):
                chunk = next(it, None)
                if chunk is None:
                    more = False
                else:
                    self._refill(st, m, chunk)
                    if st.elem_start >= 0 and len(st.buf) - st.elem_start > MAX_EVENT_BYTES:
                        self._event_too_long(st)
                        return
                    continue
            if m is None:
                break
            c, p = m.group(), m.start()
            st.pos = p + 1
            if st.in_str:
                _in_string(st, c, p)
            elif c == b'"':
                st.in_str, st.str_start = True, p
            elif c in (b"{", b"["):
                self._open(st, c, p)
            elif c in (b"}", b"]"):
                event = self._close(st, c, p)
                if event is not None:
                    ok, ev = event
                    if ok:
                        yield ev
            elif st.depth == 1 and self.layout == "object":
                self._punctuation(st, c, p)
        self._finish(st)

    def _refill(self, st: _ScanState, m: Optional[re.Match[bytes]], chunk: bytes) -> None:
        """Append ``chunk``, dropping what no open element, value or string still needs."""
        if m is None:
            st.pos = len(st.buf)
        keep = min(
            x for x in (st.elem_start, st.val_start, st.str_start if st.in_str else -1, st.pos) if x >= 0
        )
        del st.buf[:keep]
        st.buf += chunk
        self.offset += keep
        st.pos -= keep
        st.elem_start = st.elem_start - keep if st.elem_start >= 0 else -1
        st.val_start = st.val_start - keep if st.val_start >= 0 else -1
        st.str_start = st.str_start - keep if st.str_start >= 0 else -1

    def _open(self, st: _ScanState, c: bytes, p: int) -> None:
        if st.depth == 0:
            self.layout = "object" if c == b"{" else "array"
            if c == b"[":
                st.in_events, st.events_depth = True, 1
                self.saw_events = True
        elif st.depth == 1 and self.layout == "object" and c == b"[" and st.key == b"traceEvents":
            st.in_events, st.events_depth = True, 2
            self.saw_events = True
            st.val_start = -1
        elif st.in_events and st.depth == st.events_depth and c == b"{":
            st.elem_start = p
        st.depth += 1

    def _close(self, st: _ScanState, c: bytes, p: int) -> Optional[Tuple[bool, Any]]:
        """A closer: the parsed event when it ends one (``(ok, event)``), else None."""
        st.depth -= 1
        event: Optional[Tuple[bool, Any]] = None
        if st.in_events and st.depth == st.events_depth and st.elem_start >= 0 and c == b"}":
            data = bytes(st.buf[st.elem_start : p + 1])
            event = (True, data) if self.raw else parse_slice(data, self.exact, self.report)
            st.elem_start = -1
        elif st.in_events and st.depth == st.events_depth - 1:
            st.in_events = False
        elif st.depth == 0 and self.layout == "object" and st.val_start >= 0:
            self._header_value(st.key, bytes(st.buf[st.val_start : p]))
            st.val_start = -1
        if st.depth < 0:
            st.depth = 0
        return event

    def _punctuation(self, st: _ScanState, c: bytes, p: int) -> None:
        """``:`` and ``,`` between the top-level keys of the object form."""
        if c == b":":
            st.key = st.last_str
            st.val_start = p + 1
        elif c == b",":
            if st.val_start >= 0:
                self._header_value(st.key, bytes(st.buf[st.val_start : p]))
            st.val_start = -1

    def _event_too_long(self, st: _ScanState) -> None:
        """An event that does not end within MAX_EVENT_BYTES (a brace never closed): keep
        the events before it and stop there, as at a truncation (memory stays bounded)."""
        self.report.truncated_at = self.offset + st.elem_start
        if len(self.report.examples) < 5:
            head = bytes(st.buf[st.elem_start : st.elem_start + 80]).decode("utf-8", "replace")
            self.report.examples.append(
                f"an event that does not end within {MAX_EVENT_BYTES >> 20} MB: {head}"
            )
        if self.layout == "object":
            self.report.header_complete = False

    def _finish(self, st: _ScanState) -> None:
        """At the end of the data: record a truncation and the partial last event."""
        end = self.offset + len(st.buf)
        if st.depth > 0 or st.in_str or self.layout is None:
            self.report.truncated_at = end
            if st.elem_start >= 0 and len(self.report.examples) < 5:
                self.report.examples.append(
                    "partial last event: "
                    + st.buf[st.elem_start : st.elem_start + 80].decode("utf-8", "replace")
                )
            if self.layout == "object" and (st.in_events or st.val_start >= 0 or st.depth > 0):
                self.report.header_complete = False

    def _header_value(self, key: Optional[bytes], data: bytes) -> None:
        """A top-level value: decoded exactly like every reader's (read/toplevel.py),
        repaired as an event would be only when that fails."""
        if key is None or key == EVENTS_KEY_BYTES[1:-1]:
            return
        data = data.strip()
        name = key.decode("utf-8", errors="replace")
        try:
            ok, v = True, decode_value(data)
        except DecodeError:
            ok, v = parse_slice(data, True, SalvageReport())
        except RecursionError:
            ok, v = False, None
        # no event to drop: a key nested too deep is the input error it is in a strict read
        deep = (
            deep_key({name: v})
            if ok
            else deep_key_in_text(b"{" + json.dumps(name).encode() + b":" + data + b"}")
        )
        if deep is not None:
            raise InputError(self.path, deep.message())
        if ok:
            self.header[name] = v
        else:
            self.report.header_complete = False
