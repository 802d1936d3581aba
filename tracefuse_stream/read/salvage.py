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
from tracefuse_stream.read.sources import READ_SIZE, TraceReader
from tracefuse_stream.rewrite.rules import FLOAT_EXACT_LIMIT

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
        changed = attempt > 0 or "\ufffd" in text and b"\xef\xbf\xbd" not in data or nonfinite[0] > 0
        if changed:
            report.repaired += 1
            report.nonfinite_to_null += nonfinite[0]
        return True, value
    report.skipped += 1
    if len(report.examples) < 5:
        report.examples.append(data[:120].decode("utf-8", errors="replace"))
    return False, None


class Framer:
    """Splits a (possibly broken) trace into header values and event slices."""

    def __init__(self, chunks: Iterator[bytes], report: SalvageReport, exact: bool) -> None:
        self.chunks = chunks
        self.report = report
        self.exact = exact
        self.header: Dict[str, Any] = {}
        self.offset = 0  # decompressed bytes consumed before buf
        self.layout: Optional[str] = None
        self.saw_events = False

    def events(self) -> Iterator[Any]:
        """Yield parsed events; ``self.header`` fills as top-level keys are seen."""
        buf = b""
        pos = 0
        depth = 0
        in_str = False
        key: Optional[bytes] = None
        last_str: Optional[bytes] = None
        str_start = -1
        in_events = False
        events_depth = -1
        elem_start = -1
        val_start = -1  # header value start (depth 1, after ':')
        more = True
        it = iter(self.chunks)
        while True:
            m = (_INSIDE if in_str else _OUTSIDE).search(buf, pos)
            need_more = m is None or (
                in_str
                and (
                    (m.group() == b"\\" and m.end() >= len(buf))
                    or (m.group() == b'"' and _NON_WS.search(buf, m.end()) is None)
                )
            )
            if need_more and more:
                chunk = next(it, None)
                if chunk is None:
                    more = False
                else:
                    if m is None:
                        pos = len(buf)
                    keep = min(x for x in (elem_start, val_start, str_start if in_str else -1, pos) if x >= 0)
                    buf = buf[keep:] + chunk
                    self.offset += keep
                    pos -= keep
                    elem_start = elem_start - keep if elem_start >= 0 else -1
                    val_start = val_start - keep if val_start >= 0 else -1
                    str_start = str_start - keep if str_start >= 0 else -1
                    continue
            if m is None:
                break
            c = m.group()
            p = m.start()
            pos = p + 1
            if in_str:
                if c == b"\\":
                    pos = p + 2
                    continue
                # A quote ends a string only where JSON can continue after one;
                # otherwise it is an unescaped quote inside the string.
                rest = buf[p + 1 : p + 65].lstrip()
                if rest and rest[:1] not in b",:}]":
                    continue
                in_str = False
                last_str = buf[str_start + 1 : p]
                continue
            if c == b'"':
                in_str = True
                str_start = p
            elif c in (b"{", b"["):
                if depth == 0:
                    self.layout = "object" if c == b"{" else "array"
                    if c == b"[":
                        in_events, events_depth = True, 1
                        self.saw_events = True
                elif depth == 1 and self.layout == "object" and c == b"[" and key == b"traceEvents":
                    in_events, events_depth = True, 2
                    self.saw_events = True
                    val_start = -1
                elif in_events and depth == events_depth and c == b"{":
                    elem_start = p
                depth += 1
            elif c in (b"}", b"]"):
                depth -= 1
                if in_events and depth == events_depth and elem_start >= 0 and c == b"}":
                    ok, ev = parse_slice(buf[elem_start : p + 1], self.exact, self.report)
                    elem_start = -1
                    if ok:
                        yield ev
                elif in_events and depth == events_depth - 1:
                    in_events = False
                elif depth == 0 and self.layout == "object" and val_start >= 0:
                    self._header_value(key, buf[val_start:p])
                    val_start = -1
                if depth < 0:
                    depth = 0
            elif c == b":" and depth == 1 and self.layout == "object":
                key = last_str
                val_start = p + 1
            elif c == b"," and depth == 1 and self.layout == "object":
                if val_start >= 0:
                    self._header_value(key, buf[val_start:p])
                val_start = -1
        # end of data
        end = self.offset + len(buf)
        if depth > 0 or in_str or self.layout is None:
            self.report.truncated_at = end
            if elem_start >= 0 and len(self.report.examples) < 5:
                self.report.examples.append(
                    "partial last event: " + buf[elem_start : elem_start + 80].decode("utf-8", "replace")
                )
            if self.layout == "object" and (in_events or val_start >= 0 or depth > 0):
                self.report.header_complete = False

    def _header_value(self, key: Optional[bytes], data: bytes) -> None:
        if key is None or key == b"traceEvents":
            return
        ok, v = parse_slice(data.strip(), True, SalvageReport())
        try:
            name = key.decode("utf-8", errors="replace")
        except Exception:  # pragma: no cover
            return
        if ok:
            self.header[name] = v
        else:
            self.report.header_complete = False
