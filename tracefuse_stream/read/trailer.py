"""Find the top-level keys written AFTER ``traceEvents`` from the last bytes of a file.

Kineto from May 2024 to March 2025 writes ``baseTimeNanoseconds`` after the event
array, and on-demand traces write ``distributedInfo`` there. The planning pass needs
both before it streams any event, but must not parse the events to get them. So we
look only at the tail: scan it *backwards*, string-aware, for the ``]`` that closes a
top-level array, and parse what follows it. An array counts as ``traceEvents`` when
its last element looks like a trace event (has ``"ph"``) or when it is longer than the
window; ``deviceProperties`` (also a top-level array) is skipped that way.

Backward scanning works on the reversed bytes: in reversed text a quote that was
escaped (``\\"``) is followed by an odd number of backslashes.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional

from tracefuse_stream.exactjson import DecodeError, loads_exact

# In REVERSED bytes: a whole JSON string, or one structural character.
_REV_TOKEN = re.compile(rb'"(?:[^"]|"(?=\\(?:\\\\)*(?!\\)))*"|[\[\]{}]')
_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*$')


def _parse_after(tail: bytes, pos: int) -> Optional[Dict[str, Any]]:
    """Parse the text after the ``]`` at ``pos`` as the rest of the top-level object."""
    try:
        obj = loads_exact(b'{"traceEvents":[' + tail[pos:])
    except DecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    obj.pop("traceEvents", None)
    return obj


def find_trailer(tail: bytes, whole: bool = False) -> Optional[Dict[str, Any]]:
    """Return the top-level keys after ``traceEvents`` (``{}`` when there are none).

    ``tail`` is the last bytes of the decompressed file; ``whole`` says it is all of
    it, so reaching its start without finding the event array means damage. Returns ``None`` when the tail does not end a complete trace object
    (truncated file, not JSON) or is the array form (no trailer possible, returns {}).
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
    candidate_trailer: Optional[Dict[str, Any]] = None
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
                try:
                    elem = loads_exact(tail[pos:elem_end])
                except DecodeError:
                    elem = None
                elem_end = None
                if isinstance(elem, dict) and "ph" in elem:
                    return candidate_trailer
            elif depth == 1 and candidate is not None and tok == b"[":
                if _TRACE_EVENTS_KEY.search(tail[max(0, pos - 64) : pos]):
                    return candidate_trailer
                candidate = None
                candidate_trailer = None
            elif depth == 0:
                # Reached the top-level '{': no event array closes in this object.
                return {}
    # Ran out of window inside an array: it is larger than the window, so it is the
    # event array (no other top-level array of a trace is that large).
    if candidate is not None and not whole:
        return candidate_trailer
    return None
