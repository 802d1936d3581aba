"""The one reader of a trace file's top level: the keys around the event array.

A Kineto trace is an object, ``{..., "traceEvents": [...], ...}``, or (Chrome's array
form) a bare ``[...]`` of events without any other key. The object's other keys
(``schemaVersion``, ``distributedInfo``, ``baseTimeNanoseconds``, ``deviceProperties``,
a merged file's ``tracefuse``) sit before the event array in current Kineto and after
it in Kineto from May 2024 to March 2025 and in on-demand traces. Every stage that
needs them reads them here, never by parsing the events:

* **the start of the file** (:class:`StartReader`): empty, white space only, a
  byte-order mark, a single value, not JSON -- each with its exact message;
* **the keys before the array** (:func:`walk_keys` over ijson's events, shared by
  discovery's one parse of a file's start, ``read/head.py``, and the planner's strict
  :func:`read_header`; :func:`keys_before` / :func:`keys_before_at` over bytes already
  read, for the batched reader and verify);
* **the keys after it** (:func:`find_trailer`, a backward scan of the file's last bytes,
  for the planner and the exact reader; :func:`trailer_of_file` reads those bytes;
  :func:`keys_after`, forward from the end of the last event, for verify);
* **their values' decoding**: exact (:func:`decode_value`: integers of any size, every
  other number a ``Decimal`` with its digits, what ijson's ``use_float=False`` gives --
  the merge writes them back unchanged), or plain for verify (:func:`to_plain` of the
  exact values: other numbers as floats, what a plain JSON reader sees). Salvage
  decodes each header value with :func:`decode_value` before it tries its repairs.
"""

from __future__ import annotations

import collections
import os
import re
from decimal import Decimal
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import ijson
from ijson.common import ObjectBuilder

from tracefuse_stream.errors import ErrorKind, InputError
from tracefuse_stream.exactjson import DecodeError, loads_exact
from tracefuse_stream.read.depthgate import DepthGate, TooDeepText, key_depth_in_file
from tracefuse_stream.read.sources import READ_SIZE, TraceReader
from tracefuse_stream.read.textcheck import (
    MAX_KEY_DEPTH,
    NestedTooDeep,
    deep_key,
    deep_key_in_text,
)

PathLike = Union[str, "os.PathLike[str]"]
Events = Iterator[Tuple[str, str, Any]]

#: The two forms of a trace (``RankPlan.layout``).
OBJECT, ARRAY = "object", "array"
EVENTS_KEY = "traceEvents"
EVENTS_KEY_BYTES = b'"traceEvents"'
_BOM = b"\xef\xbb\xbf"
_WHITE = b" \t\r\n"

# Tail windows tried in turn for the keys after the events: Kineto's trailer is a few
# KB, so the first (small, cheap on memory) window nearly always suffices.
TAIL_WINDOWS = (1 << 20, 16 << 20)
TAIL_WINDOW = TAIL_WINDOWS[0]


# --------------------------------------------------------------------------- values

#: The buffer ijson (yajl) parses in. yajl lexes a token that spans two buffers again
#: from its start with every new buffer (lloyd/yajl#202), so a long string costs
#: time ~ length^2 / buffer: with 64 KiB, one 100 MB ``args`` string took ~25 s per
#: pass (merge and info each made two such passes); with 1 MiB ~1.5 s. Reading a trace's
#: start with 1 MiB costs no more than with 64 KiB (measured: 1.4 ms vs 3.4 ms, plain
#: JSON; 2.1 vs 2.5 ms, gzip). Every ijson parse of a trace uses it.
IJSON_BUF = 1 << 20

#: The largest event any reader holds: a profiler's events are KiBs, and one that does
#: not end within this many bytes is a damaged file (a brace never closed) or a hostile
#: one. The batch readers hand a longer one over; the exact reader stops with an error
#: and salvage keeps the events before it, so memory stays bounded whatever the input
#: (an unclosed brace at 10% of a 76 MB file held the rest of it, 509 MB; salvage took
#: 18 s, quadratic). 64 MiB: on a 400 MB file whose brace never closes, 0.75 GB peak and
#: 2.9 s to the error (256 MiB: 2.85 GB, 14 s: ijson builds ~11x the text).
MAX_EVENT_BYTES = 64 << 20


def decode_value(data: Any) -> Any:
    """One JSON value, exactly (raises :class:`DecodeError`)."""
    return loads_exact(data)


def loads_dict(data: Any, exact: bool = False) -> Optional[Dict[str, Any]]:
    """``data`` parsed as a JSON object (exact values, or plain: :func:`to_plain` of
    them), or None. Plain values come from the exact ones, so a value reads the same
    wherever it sits (orjson would turn an integer beyond 64 bits into a float)."""
    try:
        d = loads_exact(data)
    except (DecodeError, RecursionError):  # nested beyond msgspec's reach: not a value here
        return None
    if not isinstance(d, dict):
        return None
    return d if exact else to_plain(d)


def to_plain(o: Any) -> Any:
    """Exact Decimals -> what orjson would have produced (float)."""
    if isinstance(o, dict):
        return {k: to_plain(v) for k, v in o.items()}
    if isinstance(o, list):
        return [to_plain(v) for v in o]
    if isinstance(o, Decimal):
        return float(o)
    return o


def build_value(events: Events, prefix: str, ev: str, val: Any) -> Any:
    """The JSON value whose first ijson parse event is ``(prefix, ev, val)``, built whole
    from ``events`` (which it consumes to the value's end).

    A value nesting deeper than :data:`MAX_KEY_DEPTH` stops the build with
    :class:`NestedTooDeep` (key ``prefix``) at that level: ijson gives every level a
    prefix one segment longer, so reading a 100,000-deep value to its end costs time
    and memory quadratic in its depth (23 GB for a 200 KB file)."""
    builder = ObjectBuilder()
    builder.event(ev, val)
    if ev not in ("start_map", "start_array"):
        return builder.value
    depth = 1
    for _p, e, v in events:
        builder.event(e, v)
        if e in ("start_map", "start_array"):
            depth += 1
            if depth > MAX_KEY_DEPTH:
                raise NestedTooDeep(prefix, None)
        elif e in ("end_map", "end_array"):
            depth -= 1
            if depth == 0:
                break
    return builder.value


# --------------------------------------------------------------------------- the start
class StartReader:
    """A trace reader after a look at its first text: leading white space is skipped
    (it means nothing), and :meth:`problem` names a start no trace can have. Hand it
    to ijson as the file."""

    def __init__(self, reader: TraceReader) -> None:
        self._reader = reader
        self.skipped = 0  # bytes of the chunks that held only white space
        while True:
            chunk = reader.read(1 << 16)
            first = chunk.lstrip(_WHITE)
            if first or not chunk:
                break
            self.skipped += len(chunk)
        self._first = first  # the first chunk from its first non-white byte
        self.at = self.skipped + len(chunk) - len(first)  # offset of that byte
        self.looks_like_json = first[:1] in (b"{", b"[")
        self.starts_object = first[:1] == b"{"

    def problem(self, path: PathLike) -> Optional[InputError]:
        """The exact error for an empty file, a byte-order mark or a start that is not
        an object or array; None when the text starts with ``{`` or ``[``."""
        first, at = self._first, self.at
        if not first:
            what = "file is empty" if not self.skipped else "file contains only whitespace"
            return InputError(str(path), what, kind=ErrorKind.EMPTY)
        if first[:3] == _BOM:
            return InputError(
                str(path), "starts with a UTF-8 byte-order mark, which JSON does not allow", offset=at
            )
        if first[:1] in b'"-0123456789tfn':
            return InputError(
                str(path),
                "not a trace: the top level is a single JSON value, not an object or array",
                offset=at,
                kind=ErrorKind.NOT_A_TRACE,
            )
        if not self.looks_like_json:
            return InputError(
                str(path),
                f"not JSON: starts with {first[:12]!r}, not '{{' or '['",
                offset=at,
                kind=ErrorKind.NOT_A_TRACE,
            )
        return None

    def read(self, n: int = -1) -> bytes:
        if n == 0:
            return b""  # ijson's probe for bytes or text
        if self._first:
            data, self._first = self._first, b""
            return data
        return self._reader.read(n)


# --------------------------------------------------------------------------- keys before
def walk_keys(events: Events, header: Dict[str, Any], keys: Optional[List[str]] = None) -> str:
    """Read an object's keys from ijson's ``events`` (just after its ``start_map``) up
    to the event array, into ``header`` (exact values; ``keys``: every key in order).

    Returns ``"events"`` (``traceEvents`` opens an array; ``events`` is left at its
    first element), ``"not_array"`` (``traceEvents`` is something else), ``"end"`` (the
    object ends without it) or ``"truncated"`` (the text ends first). JSON errors
    propagate: the caller words them."""
    for _prefix, ev, val in events:
        if ev == "map_key":
            if val == EVENTS_KEY:
                _p, nxt, _v = next(events)
                return "events" if nxt == "start_array" else "not_array"
            if keys is not None:
                keys.append(val)
            try:
                header[val] = build_value(events, *next(events))
            except NestedTooDeep as e:
                raise NestedTooDeep(val, e.depth) from None
        elif ev == "end_map":
            return "end"
    return "truncated"


def read_header(path: PathLike) -> Tuple[str, Dict[str, Any], bool]:
    """The planner's strict read of the top-level keys before ``traceEvents``.

    Returns ``(layout, header, saw_events)``. ``saw_events`` is False when the object
    ended without a ``traceEvents`` key (not a trace). Anything else unusual is an
    :class:`InputError` with its exact message and offset.
    """
    reader = TraceReader(path)
    header: Dict[str, Any] = {}
    try:
        start = StartReader(reader)
        problem = start.problem(path)
        if problem is not None:
            raise problem
        events = ijson.parse(DepthGate(start), use_float=False, buf_size=IJSON_BUF)
        first = next(events)
        if first[1] == "start_array":
            return ARRAY, header, True
        if first[1] != "start_map":
            raise InputError(
                str(path), "not a trace: top level is not a JSON object or array", kind=ErrorKind.NOT_A_TRACE
            )
        found = walk_keys(events, header)
        if found == "not_array":
            raise InputError(
                str(path), "traceEvents is not an array", offset=reader.offset, kind=ErrorKind.NOT_A_TRACE
            )
        if found == "truncated":
            raise InputError(
                str(path),
                "file ends inside the header (truncated)",
                offset=reader.offset,
                kind=ErrorKind.TRUNCATED,
            )
        return OBJECT, header, found == "events"
    except NestedTooDeep as e:
        # ijson stopped at the limit: the depth, counted as salvage and the trailer count it
        again = TraceReader(path)
        try:
            deep = key_depth_in_file(again, e.key, MAX_KEY_DEPTH)
        finally:
            again.close()
        raise InputError(str(path), NestedTooDeep(e.key, deep or e.depth).message()) from None
    except TooDeepText as e:  # deeper than ijson can afford: the header is read (its keys come first)
        raise InputError(str(path), NestedTooDeep(e.key or "", e.depth).message()) from None
    except (ijson.JSONError, UnicodeDecodeError) as e:
        text = e.args[0] if e.args else type(e).__name__
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        msg = (str(text).splitlines() or [type(e).__name__])[0].strip()
        raise InputError(
            str(path),
            f"invalid JSON in the header: {msg}",
            offset=reader.offset,
            hint="use --salvage to merge what can be read",
        ) from None
    finally:
        reader.close()


EVENTS_OPEN = re.compile(rb'"traceEvents"\s*:\s*\[')


def keys_before_at(text: Any, at: int, exact: bool = True) -> Optional[Dict[str, Any]]:
    """The keys before the ``"traceEvents"`` that starts at ``text[at]``, when it is a
    key of the top-level object (a key of a nested object, or the same word as a value,
    leaves the text before it unable to close as one object): None otherwise."""
    pre = loads_dict(bytes(text[:at]) + b'"traceEvents":[]}', exact)
    if pre is None:
        return None
    pre.pop(EVENTS_KEY, None)
    return pre


def keys_before(head: Optional[bytes], exact: bool = False) -> Optional[Dict[str, Any]]:
    """The keys before ``"traceEvents": [`` in ``head`` (a file's first bytes, past the
    array's opening bracket); None when they cannot be parsed."""
    if head is None:
        return None
    for m in EVENTS_OPEN.finditer(head):
        pre = keys_before_at(head, m.start(), exact)
        if pre is not None:
            return pre
    return None


# --------------------------------------------------------------------------- keys after
_ARRAY_CLOSE = re.compile(rb"\}\s*\]\s*([,}])")


def keys_after(tail: Optional[bytes], exact: bool = False) -> Optional[Dict[str, Any]]:
    """The keys after the event array's closing ``]`` in ``tail``, bytes that start at
    or before the end of the last event (verify keeps those); None when unparsable.

    Verify knows where its last event ended, so it reads forward from there: the first
    ``}]`` followed by a key whose rest parses as the object's end is the array's end.
    :func:`find_trailer` answers the harder question (any window of the file's end,
    where that is unknown) and is what planning and the readers use."""
    if tail is None:
        return None
    for m in _ARRAY_CLOSE.finditer(tail):
        if m.group(1) == b"}":
            if not tail[m.end() :].strip():
                return {}
            continue
        post = loads_dict(b"{" + tail[m.end() :], exact)
        if post is not None:
            return post
    return None


# In REVERSED bytes: a whole JSON string, or one structural character.
_REV_TOKEN = re.compile(rb'"(?:[^"]|"(?=\\(?:\\\\)*(?!\\)))*"|[\[\]{}]')
_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*$')


def _parse_after(tail: bytes, pos: int) -> Union[None, Dict[str, Any], NestedTooDeep]:
    """Parse the text after the ``]`` at ``pos`` as the rest of the top-level object;
    a key whose value nests too deep comes back as the :class:`NestedTooDeep` to raise
    should this ``]`` turn out to close the event array."""
    text = b'{"traceEvents":[' + tail[pos:]
    try:
        obj = loads_exact(text)
    except DecodeError:
        return None
    except RecursionError:
        return deep_key_in_text(text)
    if not isinstance(obj, dict):
        return None
    obj.pop(EVENTS_KEY, None)
    return deep_key(obj) or obj


def _found(trailer: Union[None, Dict[str, Any], NestedTooDeep]) -> Optional[Dict[str, Any]]:
    if isinstance(trailer, NestedTooDeep):
        raise trailer
    return trailer


def find_trailer(tail: bytes, whole: bool = False) -> Optional[Dict[str, Any]]:
    """The top-level keys after ``traceEvents`` (``{}`` when there are none), from the
    last bytes of the decompressed file, without parsing the events.

    The tail is scanned *backwards*, string-aware (in reversed text a quote that was
    escaped is followed by an odd number of backslashes), for the ``]`` that closes a
    top-level array; what follows it is parsed. An array counts as ``traceEvents`` when
    its last element looks like a trace event (has ``"ph"``), when its key is seen, or
    when it is longer than the window (``deviceProperties``, also a top-level array, is
    skipped that way). ``whole``: ``tail`` is all of the file, so reaching its start
    without finding the event array means damage. None: the tail does not end a
    complete trace object (truncated, not JSON); the array form gives ``{}``.
    :class:`NestedTooDeep`: a key after the events nests deeper than :data:`MAX_KEY_DEPTH`.
    """
    end = len(tail.rstrip())
    if end == 0:
        return None
    last = tail[end - 1 : end]
    if last == b"]":
        return {}  # bare array form: nothing after the events
    if last != b"}":
        return None
    rev = tail[:end][::-1]
    n = end
    depth = 0
    candidate: Optional[int] = None  # orig position of a depth-1 ']'
    candidate_trailer: Union[None, Dict[str, Any], NestedTooDeep] = None
    elem_end: Optional[int] = None  # orig end of the element being scanned at depth 3
    for m in _REV_TOKEN.finditer(rev):
        tok = m.group()
        if tok[:1] == b'"':
            if depth == 2 and candidate is not None:
                # a bare string directly inside the candidate array: not an array of
                # events (or not an array at all: damaged text) -- drop it
                candidate = None
                candidate_trailer = None
            continue
        pos = n - 1 - m.start()  # position in the original bytes
        if tok in (b"}", b"]"):
            depth += 1
            if depth == 1 and tok != b"}":
                return None  # the object does not end with '}'
            if depth == 2 and tok == b"]":
                candidate = pos
                candidate_trailer = _parse_after(tail, pos)
            elif depth == 3 and candidate is not None and tok == b"}":
                elem_end = pos + 1
        else:
            depth -= 1
            if depth == 2 and candidate is not None and tok == b"{" and elem_end is not None:
                elem = loads_dict(tail[pos:elem_end], exact=True)
                elem_end = None
                if elem is not None and "ph" in elem:
                    return _found(candidate_trailer)
            elif depth == 1 and candidate is not None and tok == b"[":
                if _TRACE_EVENTS_KEY.search(tail[max(0, pos - 64) : pos]):
                    return _found(candidate_trailer)
                candidate = None
                candidate_trailer = None
            elif depth == 0:
                # Reached the top-level '{': no event array closes in this object.
                return {}
    # Ran out of window inside an array: it is larger than the window, so it is the
    # event array (no other top-level array of a trace is that large).
    if candidate is not None and not whole:
        return _found(candidate_trailer)
    return None


def read_tail(path: PathLike, window: int = TAIL_WINDOW) -> Tuple[bytes, int]:
    """The last ``window`` decompressed bytes of the file, and the decompressed size.

    Plain files are read by seeking; compressed ones are decompressed in a stream,
    keeping only the last ``window`` bytes (flat memory).
    """
    reader = TraceReader(path)
    try:
        if reader.compression == "plain":
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                f.seek(max(0, size - window))
                data = f.read()
            body = data.rstrip(b"\x00")  # NUL padding after the JSON (see TraceReader)
            return body, size - (len(data) - len(body))
        chunks: collections.deque[bytes] = collections.deque()
        kept = 0
        total = 0
        while True:
            chunk = reader.read(READ_SIZE)
            if not chunk:
                break
            chunks.append(chunk)
            kept += len(chunk)
            total += len(chunk)
            while chunks and kept - len(chunks[0]) >= window:
                kept -= len(chunks.popleft())
        data = b"".join(chunks)
        return data[-window:], total
    finally:
        reader.close()


def trailer_of_file(path: PathLike) -> Tuple[Optional[Dict[str, Any]], int]:
    """The keys after the events, from the smallest tail window that holds them
    (None: the file does not end like a complete trace), and the decompressed size."""
    trailer: Optional[Dict[str, Any]] = None
    size = 0
    for window in TAIL_WINDOWS:
        tail, size = read_tail(path, window)
        try:
            trailer = find_trailer(tail, whole=size <= len(tail))
        except NestedTooDeep as e:
            raise InputError(str(path), e.message()) from None
        if trailer is not None or size <= len(tail):
            break
    return trailer, size


__all__ = [
    "ARRAY",
    "EVENTS_KEY",
    "EVENTS_KEY_BYTES",
    "OBJECT",
    "StartReader",
    "TAIL_WINDOW",
    "TAIL_WINDOWS",
    "build_value",
    "decode_value",
    "find_trailer",
    "keys_after",
    "keys_before",
    "keys_before_at",
    "loads_dict",
    "read_header",
    "read_tail",
    "to_plain",
    "trailer_of_file",
    "walk_keys",
]
