"""What the start of a file says, from one parse: is it a trace, its header, its first ts.

Three stages read the start of every input: discovery (is this file a trace at all?),
the planner's header pass (the keys before ``traceEvents``) and the first-event peek
(when does the rank start, is it empty; see :mod:`tracefuse_stream.plan.starts`). Each
used to open, decompress and parse the file's start on its own: with thousands of
small ranks that was most of a merge's time (issue 14: ~1.4 ms a rank). Here one ijson
parse answers all three, and the planner takes the answers from the discovery's
:class:`Head`. The keys themselves are read by :mod:`tracefuse_stream.read.toplevel`
(its :class:`StartReader` and :func:`walk_keys`, the same walk as the planner's strict
``read_header``), so both see the same header.

The stages' own functions stay the judges of anything unusual: whatever this parse
does not see cleanly (damaged JSON, a byte-order mark, a ``traceEvents`` that is no
array, an error in the first events) leaves the answer unknown, and the stage reads
the file itself as before, with its exact error messages.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import ijson

from tracefuse_stream.errors import TraceFuseError
from tracefuse_stream.exactjson import dumps_fast
from tracefuse_stream.read.depthgate import DepthGate
from tracefuse_stream.read.sources import TraceReader
from tracefuse_stream.read.textcheck import MAX_KEY_DEPTH, depth
from tracefuse_stream.read.toplevel import (
    ARRAY,
    EVENTS_OPEN,
    IJSON_BUF,
    OBJECT,
    StartReader,
    build_value,
    keys_before_at,
    walk_keys,
)

PathLike = Union[str, "os.PathLike[str]"]
Events = Iterator[Tuple[str, str, Any]]


@dataclass
class Head:
    """The start of one file.

    ``why_not``: the file is cleanly not a trace, and why (discovery's verdict).
    ``ok``: ``layout``, ``header`` (top-level keys before the event array) and
    ``compression`` are what the planner's header pass would find. ``first_known``:
    ``first_ts`` (the first timed non-metadata event's ``ts``) and ``empty`` (no timed
    event at all) are what the first-event peek would find.
    """

    why_not: Optional[str] = None
    ok: bool = False
    layout: str = ""
    header: Dict[str, Any] = field(default_factory=dict)
    compression: str = ""
    first_known: bool = False
    first_ts: Any = None
    empty: bool = False


def timed_ts(item: Any) -> Any:
    """The ``ts`` the first-event peek takes from an event (a timed non-metadata one), or
    None; plan/starts.py's peek uses the same rule."""
    if type(item) is dict and item.get("ph") != "M":
        ts = item.get("ts")
        if isinstance(ts, (int, Decimal)) and not isinstance(ts, bool):
            return ts
    return None


def _first_timed(events: Events, head: Head, item: Any = None) -> None:
    """Go on through the event array (after ``item``, its first element, when given)
    to the first timed event; a problem there leaves it unknown."""
    try:
        ts = timed_ts(item)
        while ts is None:
            prefix, ev, val = next(events)
            if ev == "end_array":
                head.empty = True
                break
            ts = timed_ts(build_value(events, prefix, ev, val))
        head.first_ts = ts
        head.first_known = True
    except (ijson.JSONError, UnicodeDecodeError, StopIteration, TraceFuseError, OSError, ValueError):
        head.first_ts, head.empty = None, False


def _object_head(events: Events, compression: str) -> Head:
    header: Dict[str, Any] = {}
    keys: List[str] = []
    found = walk_keys(events, header, keys)
    if found == "events":
        head = Head(ok=True, layout=OBJECT, header=header, compression=compression)
        _first_timed(events, head)
        return head
    if found == "end":
        shown = ", ".join(keys[:5]) + (", ..." if len(keys) > 5 else "")
        return Head(why_not=f"a JSON object without traceEvents (keys: {shown or 'none'})")
    return Head()  # traceEvents is no array, or truncated: the header pass names it


def _array_head(events: Events, compression: str) -> Head:
    prefix, ev, val = next(events)
    if ev == "end_array":
        return Head(why_not="an empty JSON array")
    if ev != "start_map":
        return Head(why_not="a JSON array of non-objects")
    first = build_value(events, prefix, ev, val)
    if "ph" not in first:
        return Head(why_not="a JSON array whose first item is not a trace event (no 'ph')")
    head = Head(ok=True, layout=ARRAY, compression=compression)
    _first_timed(events, head, first)
    return head


#: Bytes of a file's start this parse reads at most. ijson (yajl) takes time ~ size^2 /
#: buffer for one long string (read/toplevel.py ``IJSON_BUF``): a giant first event is
#: left to the planner's peek (plan/starts.py), which reads events with msgspec in time
#: linear in their size. A real trace's header and first timed event take a few KiB.
HEAD_BUDGET = 4 << 20


class _OverBudget(ValueError):
    """The start is longer than :data:`HEAD_BUDGET`: what is not known yet stays unknown."""


#: the first piece ijson gets: a real header and first event fit (yajl parses a whole
#: piece before it yields a token: a 64 KiB first read cost ~2.5 ms a file)
FIRST_PIECE = 8 << 10


class _Budgeted:
    """A reader for ijson that stops with :class:`_OverBudget` past ``budget`` bytes,
    handing the text over in pieces that start at :data:`FIRST_PIECE` bytes and double
    (to ijson's buffer size): the parse stops at the first timed event, so it parses
    a few KiB, not the whole first read."""

    def __init__(self, reader: Any, budget: int) -> None:
        self._reader = reader
        self._left = budget
        self._piece = FIRST_PIECE
        self._rest = b""

    def read(self, n: int = -1) -> bytes:
        if n == 0:
            return self._reader.read(0)  # ijson's probe for bytes or text
        if not self._rest:
            if self._left <= 0:
                raise _OverBudget(f"the start of the file is over {HEAD_BUDGET >> 20} MB")
            self._rest = self._reader.read(n)
            self._left -= len(self._rest)
        size = self._piece if n < 0 else min(n, self._piece)
        self._piece *= 2
        data, self._rest = self._rest[:size], self._rest[size:]
        return data


#: the fast path's first read of a start, doubled up to :data:`FAST_LIMIT` until the
#: ``"traceEvents": [`` shows (a real header takes a few KiB; Kineto's 8-GPU
#: ``deviceProperties`` a few more)
FAST_PIECE = 64 << 10
FAST_LIMIT = 1 << 20


class _Replay:
    """A reader that gives ``data`` first, then the rest of ``reader``."""

    def __init__(self, data: bytes, reader: Any) -> None:
        self._data, self._reader = data, reader

    def read(self, n: int = -1) -> bytes:
        if n == 0:
            return b""  # ijson's probe for bytes or text
        if self._data:
            if n < 0 or n >= len(self._data):
                out, self._data = self._data, b""
            else:
                out, self._data = self._data[:n], self._data[n:]
            return out
        return self._reader.read(n)


def _too_deep(header: Dict[str, Any]) -> bool:
    """Whether a value nests deeper than the walk allows (``MAX_KEY_DEPTH``); a long
    value already kept (:func:`_share`) was checked when first met."""
    for v in header.values():
        if type(v) is not dict and type(v) is not list:
            continue
        try:
            text = dumps_fast(v)
        except (TypeError, ValueError, OverflowError):
            return True
        if text in _SHARED:
            continue
        if text.count(b"[") + text.count(b"{") > MAX_KEY_DEPTH and depth(v, MAX_KEY_DEPTH) > MAX_KEY_DEPTH:
            return True
    return False


def _fast_object_head(checked: StartReader, compression: str) -> Tuple[Optional[Head], bytes]:
    """The header of an object trace decoded whole by msgspec (``keys_before``): ijson
    builds a value event by event in Python, ~45 ms for a 190 KB ``deviceProperties``,
    most of ``info`` on a thousand small ranks. Returns (the head, or None when this
    path cannot judge the start: the ijson walk then reads it from the bytes read so
    far, given back)."""
    buf = b""
    want = FAST_PIECE
    while len(buf) < FAST_LIMIT:
        more = checked.read(want - len(buf))
        if not more:
            break
        buf += more
        for m in EVENTS_OPEN.finditer(buf):
            header = keys_before_at(buf, m.start(), exact=True)
            if header is not None and _too_deep(header):
                return None, buf  # the walk names the key nested too deep, as it always did
            if header is not None:
                head = Head(ok=True, layout=OBJECT, header=header, compression=compression)
                rest = _Replay(buf[m.end() - 1 :], checked)  # from the array's "["
                events: Events = ijson.parse(
                    DepthGate(_Budgeted(rest, HEAD_BUDGET - m.end())), use_float=False, buf_size=IJSON_BUF
                )
                next(events)  # the array's start
                _first_timed(events, head)
                return head, b""
        want *= 2
    return None, buf


#: a header value whose exact JSON is at least this long is kept once per distinct
#: value (:func:`_share`)
SHARE_BYTES = 1 << 10
SHARE_DEPTH = 3  # ... looked for down to this depth (distributedInfo.pg_config is at 2)
SHARE_MAX = 1024  # distinct long values kept at once (bounded: a run has a few)
_SHARED: Dict[bytes, Any] = {}


def _shared(v: Any, depth: int) -> Any:
    """``v``, or the one kept copy of an equal value; in a dict that differs (each rank's
    ``distributedInfo`` has its own ``rank``), its long values in turn."""
    if type(v) is not dict and type(v) is not list:
        return v
    try:
        text = dumps_fast(v)
    except (TypeError, ValueError, OverflowError):
        return v
    if len(text) < SHARE_BYTES:
        return v
    hit = _SHARED.get(text)
    if hit is not None:
        return hit
    if type(v) is dict and depth < SHARE_DEPTH:
        for k, x in v.items():
            v[k] = _shared(x, depth + 1)
    if len(_SHARED) >= SHARE_MAX:
        _SHARED.clear()
    _SHARED[text] = v
    return v


def _share(head: Head) -> Head:
    """The head with its long values (Kineto's ``deviceProperties``, the process
    groups' member lists in ``distributedInfo.pg_config``) replaced by the one copy of
    an equal value another file of the run already has: the planner keeps every rank's
    header for the whole command, and ~190 KB of ``deviceProperties`` decoded is ~400
    KB of Python objects a rank (200 MB at 512 ranks, the most of ``info``'s memory);
    every rank lists every group's members, O(ranks) a rank. Equal means the same exact
    JSON (msgspec's encoding of the exact values). The values are read, never changed."""
    for k, v in head.header.items():
        head.header[k] = _shared(v, 1)
    return head


def scan_head(path: PathLike) -> Head:
    """One parse of the start of ``path`` (see the module docstring); never raises for
    the file's content: what it cannot judge comes back unknown, also past
    :data:`HEAD_BUDGET` bytes (a header that long: all unknown; a first event that long:
    the first ts unknown)."""
    try:
        reader = TraceReader(path)
    except TraceFuseError:
        return Head()
    try:
        checked = StartReader(reader)
        start: Any = checked
        if checked.starts_object:
            head, seen = _fast_object_head(checked, reader.compression)
            if head is not None:
                return _share(head)
            start = _Replay(seen, checked)
        gated = DepthGate(_Budgeted(start, HEAD_BUDGET))
        events: Events = ijson.parse(gated, use_float=False, buf_size=IJSON_BUF)
        _prefix, first_ev, _value0 = next(events)
        if first_ev == "start_map" and checked.looks_like_json:
            return _share(_object_head(events, reader.compression))
        if first_ev == "start_array" and checked.looks_like_json:
            return _array_head(events, reader.compression)
        if first_ev in ("start_map", "start_array"):
            return Head()
        return Head(why_not="a single JSON value, not an object or array")
    except (ijson.JSONError, UnicodeDecodeError, StopIteration, TraceFuseError, OSError, ValueError):
        return Head()
    finally:
        reader.close()


__all__ = ["HEAD_BUDGET", "Head", "scan_head", "timed_ts"]
