"""Name the event, and the field, of a problem the exact reader's parser hides; and
the byte of a JSON error (:func:`json_error_offset`).

yajl (ijson's C backend) writes a lone surrogate escape as ``"?"`` and the parse goes
on: the exact reader only sees, in its raw text, that the file *may* hold one
(read/textcheck.SurrogateScan). This pass frames the file's events itself (salvage's
framer, unparsed) and judges each one's text, so the error names the event's position
and the field; it runs on that error path only.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Optional, Tuple

import ijson

from tracefuse_stream.read.salvage import Framer, SalvageReport, tolerant_chunks
from tracefuse_stream.read.sources import open_trace
from tracefuse_stream.read.textcheck import lone_surrogate, surrogate_field


def find_lone_surrogate(path: str) -> Optional[Tuple[int, str, str]]:
    """``(event index, field, escape)`` of the first event holding a lone surrogate
    escape, or None (the raw text held only pairs)."""
    report = SalvageReport()
    framer = Framer(tolerant_chunks(path, report), report, exact=True, raw=True, path=str(path))
    for index, data in enumerate(framer.events()):
        found = lone_surrogate(data)
        if found is None:
            continue
        try:
            value = json.loads(data.decode("utf-8", "replace"), parse_float=Decimal)
            field = surrogate_field(value) or "a string"
        except (ValueError, RecursionError):
            field = "a string"
        return index, field, found[1]
    return None


LOCATE_CHUNK = 1 << 16


def _feed(path: str, upto: Optional[int], then_bytewise: bool) -> Tuple[Optional[int], int]:
    """Parse ``path``'s decompressed text with ijson (building nothing): ``(start of the
    chunk the parser failed in, or the failing byte when ``then_bytewise``, None when it
    did not fail; bytes fed)``. ``upto``: feed that many bytes in chunks, then one byte
    at a time."""
    coro = ijson.items_coro(ijson.sendable_list(), "\x00never\x00")
    reader = open_trace(path)
    done = 0
    try:
        while True:
            bytewise = then_bytewise and upto is not None and done >= upto
            n = 1 if bytewise else LOCATE_CHUNK if upto is None else min(LOCATE_CHUNK, max(upto - done, 1))
            data = reader.read(n)
            if not data:
                return None, done
            try:
                coro.send(data)
            except (ijson.JSONError, UnicodeDecodeError):
                return done, done
            done += len(data)
    finally:
        reader.close()


def json_error_offset(path: str) -> Optional[int]:
    """The decompressed byte offset where ``path`` stops being valid JSON (the byte the
    parser rejects), or None if it cannot be found (only on the error path: the file is
    parsed again up to the failing chunk, then that chunk one byte at a time)."""
    try:
        chunk_start, _ = _feed(path, None, False)
        if chunk_start is None:
            return None
        at, _ = _feed(path, chunk_start, True)
        return at
    except Exception:  # a damaged stream: no offset, never a new error on the error path
        return None


__all__ = ["find_lone_surrogate", "json_error_offset"]
