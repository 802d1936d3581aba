"""The raw reads of the planning pass: the keys before ``traceEvents`` and the tail.

A rank's header keys (``baseTimeNanoseconds``, ``distributedInfo``, ...) sit before the
event array in current Kineto and after it in older layouts; the head is read with
ijson up to the array, the tail from a bounded window of the decompressed end, so
planning never holds events.
"""

from __future__ import annotations

import collections
import os
from typing import Any, Dict, Optional, Tuple, Union

import ijson

from tracefuse_stream.errors import ErrorKind, InputError
from tracefuse_stream.read.head import build_value
from tracefuse_stream.read.sources import READ_SIZE, TraceReader
from tracefuse_stream.read.trailer import find_trailer

# Tail windows tried in turn for the keys after the events: Kineto's trailer is a few
# KB, so the first (small, cheap on memory) window nearly always suffices.
TAIL_WINDOWS = (1 << 20, 16 << 20)
TAIL_WINDOW = TAIL_WINDOWS[0]

PathLike = Union[str, "os.PathLike[str]"]


def read_header(path: PathLike) -> Tuple[str, Dict[str, Any], bool]:
    """Parse the top-level keys before ``traceEvents``.

    Returns ``(layout, header, saw_events)``. ``saw_events`` is False when the object
    ended without a ``traceEvents`` key (not a trace).
    """
    _check_starts_like_json(path)
    reader = TraceReader(path)
    header: Dict[str, Any] = {}
    try:
        events = ijson.parse(reader, use_float=False, buf_size=1 << 16)
        first = next(events)
        if first[1] == "start_array":
            return "array", header, True
        if first[1] != "start_map":
            raise InputError(
                str(path), "not a trace: top level is not a JSON object or array", kind=ErrorKind.NOT_A_TRACE
            )
        for _prefix, ev, val in events:
            if ev == "map_key":
                if val == "traceEvents":
                    nxt = next(events)
                    if nxt[1] != "start_array":
                        raise InputError(
                            str(path),
                            "traceEvents is not an array",
                            offset=reader.offset,
                            kind=ErrorKind.NOT_A_TRACE,
                        )
                    return "object", header, True
                header[val] = build_value(events, *next(events))
            elif ev == "end_map":
                return "object", header, False
        raise InputError(
            str(path),
            "file ends inside the header (truncated)",
            offset=reader.offset,
            kind=ErrorKind.TRUNCATED,
        )
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


def _check_starts_like_json(path: PathLike) -> None:
    """Empty files and non-JSON files get their own, exact message."""
    reader = TraceReader(path)
    try:
        skipped = 0
        while True:
            chunk = reader.read(1 << 16)
            if not chunk:
                raise InputError(
                    str(path),
                    "file is empty" if not skipped else "file contains only whitespace",
                    kind=ErrorKind.EMPTY,
                )
            stripped = chunk.lstrip(b" \t\r\n")
            if stripped:
                break
            skipped += len(chunk)
        at = skipped + len(chunk) - len(stripped)
        if stripped[:3] == b"\xef\xbb\xbf":
            raise InputError(
                str(path), "starts with a UTF-8 byte-order mark, which JSON does not allow", offset=at
            )
        first = stripped[:1]
        if first in b'"-0123456789tfn' and first:
            raise InputError(
                str(path),
                "not a trace: the top level is a single JSON value, not an object or array",
                offset=at,
                kind=ErrorKind.NOT_A_TRACE,
            )
        if first not in (b"{", b"["):
            raise InputError(
                str(path),
                f"not JSON: starts with {stripped[:12]!r}, not '{{' or '['",
                offset=at,
                kind=ErrorKind.NOT_A_TRACE,
            )
    finally:
        reader.close()


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
        trailer = find_trailer(tail, whole=size <= len(tail))
        if trailer is not None or size <= len(tail):
            break
    return trailer, size
