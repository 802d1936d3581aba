"""One streaming read of a trace's events, fast where the file is valid, exact where not.

A pass hands the events of ``traceEvents`` (or of a bare array) to a consumer in
file order, together with what the structure checks need: the decompressed size,
the top-level keys (see :mod:`tracefuse_stream.verify.toplevel`) and, for a broken
file, the exact byte offset and kind of the first problem.

Fast path: the merge's own batched reader (:mod:`tracefuse_stream.read.batches`,
msgspec, exact numbers). It only accepts complete, valid documents (msgspec is at
least as strict as yajl: NaN, control characters, bad UTF-8, trailing garbage are
all refused), so a file it reads to the end IS strict JSON. Anything else it hands
back before delivering the batch in question; the exact path then re-reads the file
with ijson (yajl), skips the events already delivered, continues with the rest and
locates the error: every event reaches the consumer once, whichever path read it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import ijson

from tracefuse_stream.errors import ErrorKind, InputError
from tracefuse_stream.read.batches import EventBatches, NotBatchable
from tracefuse_stream.read.depthgate import DepthGate, TooDeepText
from tracefuse_stream.read.jsonerrors import describe_json_error, first_line, is_truncation
from tracefuse_stream.read.sources import PathLike, TraceReader, open_trace
from tracefuse_stream.read.textcheck import NestedTooDeep, too_deep_message
from tracefuse_stream.read.toplevel import IJSON_BUF
from tracefuse_stream.verify.toplevel import TopLevel, top_level, top_level_with_trailer

#: ijson read size on the exact path.
READ_CHUNK = 1 << 18
#: head/tail bytes kept to recover the top-level keys (header region + one chunk).
TOPLEVEL_CAP = 256 << 20

Consume = Callable[[Iterable[Any]], None]


@dataclass
class PassResult:
    """What a pass saw besides the events; ``nbytes``: decompressed bytes read."""

    nbytes: int = 0
    items: int = 0
    error: Optional[Tuple[int, str]] = None  # (offset, message)
    error_kind: Optional[ErrorKind] = None
    head: Optional[bytes] = None
    tail: Optional[bytes] = None
    trailer: Optional[Dict[str, Any]] = None  # fast path: the keys after the events, decoded
    seen_items: bool = False

    def top_level(self) -> TopLevel:
        """(top-level keys except traceEvents, complete?, has traceEvents?)."""
        if self.trailer is not None:
            return top_level_with_trailer(self.head, self.trailer)
        return top_level(self.head, self.tail, self.seen_items)


def run_pass(
    path: PathLike, consume: Consume, *, capture: bool = True, prefix: str = "traceEvents.item"
) -> PassResult:
    """Stream ``path``'s events (``prefix`` ``"traceEvents.item"`` or ``"item"`` for a bare
    array) into ``consume``, which is called once per batch and iterates it all."""
    layout = "array" if prefix == "item" else "object"
    delivered = 0
    reader = _HeadReader(path, capture)
    try:
        batches = EventBatches(reader, layout)
        for batch in batches:
            reader.head_open = False
            consume(batch)
            delivered += len(batch)
        trailer = batches.trailer if batches.trailer is not None else {}
        head = None if (not capture or reader.head_overflow) else b"".join(reader.head)
        return PassResult(reader.offset, delivered, head=head, trailer=trailer, seen_items=delivered > 0)
    except (NotBatchable, InputError):
        pass  # not for the fast reader, or a damaged stream: the exact pass locates it
    finally:
        reader.close()
    return run_exact_pass(path, consume, capture=capture, prefix=prefix, skip=delivered)


class _HeadReader(TraceReader):
    """A trace reader that keeps the bytes read before the first batch (the header region)."""

    def __init__(self, path: PathLike, capture: bool) -> None:
        super().__init__(path)
        self.head: List[bytes] = []
        self.head_len = 0
        self.head_open = capture
        self.head_overflow = False

    def read(self, n: int = -1) -> bytes:
        data = super().read(n)
        if self.head_open and data:
            if self.head_len + len(data) <= TOPLEVEL_CAP:
                self.head.append(data)
                self.head_len += len(data)
            else:
                self.head_overflow = True
                self.head_open = False
                self.head = []
        return data


class _Tap:
    """File-like wrapper handed to ijson: records chunk boundaries, the byte offset of
    the chunk being parsed, and the chunks before the first and after the last item
    (the regions that hold the top-level keys other than traceEvents).

    ijson's C generator reads one chunk, parses it, yields its items, then reads the
    next: so at each ``read`` every item of the previous chunk has been consumed and
    ``items`` tells whether that chunk completed any item."""

    def __init__(self, reader: TraceReader, capture: bool) -> None:
        self.reader = reader
        self.capture = capture
        self.items = 0
        self._items_at_read = 0
        self.offset = 0  # bytes before ``cur``
        self.cur: Optional[bytes] = None
        self.head: List[bytes] = []
        self.head_len = 0
        self.head_open = True
        self.tail: List[bytes] = []
        self.tail_len = 0
        self.overflow_head = False
        self.overflow_tail = False

    def read(self, n: int = -1) -> bytes:
        self.retire()
        data = self.reader.read(n)
        self.cur = data
        return data

    def retire(self) -> None:
        chunk = self.cur
        if chunk is None:
            return
        n = self.items - self._items_at_read
        self._items_at_read = self.items
        self.offset += len(chunk)
        self.cur = None
        if not self.capture or not chunk:
            return
        if self.head_open:
            if self.head_len + len(chunk) <= TOPLEVEL_CAP:
                self.head.append(chunk)
                self.head_len += len(chunk)
            else:
                self.overflow_head = True
            if n:
                self.head_open = False
        if n:
            self.tail, self.tail_len, self.overflow_tail = [chunk], len(chunk), False
        elif not self.overflow_tail:
            self.tail.append(chunk)
            self.tail_len += len(chunk)
            if self.tail_len > TOPLEVEL_CAP:
                self.tail, self.tail_len, self.overflow_tail = [], 0, True


def _counted(gen: Iterator[Any], tap: _Tap, skip: int) -> Iterator[Any]:
    for item in gen:
        tap.items += 1
        if tap.items > skip:
            yield item


def run_exact_pass(
    path: PathLike, consume: Consume, *, capture: bool = True, prefix: str = "traceEvents.item", skip: int = 0
) -> PassResult:
    """The ijson pass: items after the first ``skip`` go to ``consume``; a JSON error is
    located to the byte."""
    res = PassResult()
    reader = open_trace(path)
    tap = _Tap(reader, capture)
    err_chunk: Optional[bytes] = None
    err_exc: Optional[Exception] = None
    try:
        try:
            consume(_counted(ijson.items(DepthGate(tap), prefix, buf_size=IJSON_BUF), tap, skip))
        except TooDeepText as e:  # deeper than ijson can afford to build (read/depthgate.py)
            problem = (
                too_deep_message(e.depth) if e.in_event else NestedTooDeep(e.key or "", e.depth).message()
            )
            res.error = (tap.offset, problem)
            res.error_kind = ErrorKind.INVALID_JSON
        except InputError as e:
            res.error = (e.offset if e.offset is not None else tap.offset, e.problem)
            res.error_kind = e.kind
        except (ijson.JSONError, UnicodeDecodeError) as e:
            res.error_kind = describe_json_error(e)[0]
            if tap.cur:  # the error lies in the chunk being parsed
                err_chunk, err_exc = tap.cur, e
            else:  # at the end of the stream
                res.error = (tap.offset, _eof_message(e))
        else:
            tap.retire()
    finally:
        reader.close()
    res.items = tap.items
    res.seen_items = tap.items > 0
    res.nbytes = tap.offset + len(tap.cur or b"")
    if err_exc is not None:
        res.error = locate_error(path, tap.offset, err_chunk or b"", err_exc)
    if capture and res.error is None:
        res.head = None if tap.overflow_head else b"".join(tap.head)
        res.tail = None if tap.overflow_tail else b"".join(tap.tail)
    return res


def _eof_message(e: Exception) -> str:
    text = first_line(e)
    if is_truncation(e):
        return "file ends early: truncated JSON (" + text + ")"
    return text


def locate_error(path: PathLike, chunk_start: int, chunk: bytes, exc: Exception) -> Tuple[int, str]:
    """Byte offset of a JSON error known to lie in ``chunk`` (which starts at ``chunk_start``):
    parse the file again up to the chunk, then feed the chunk one byte at a time."""
    text = first_line(exc)
    pos = chunk_start
    try:
        sink = ijson.sendable_list()
        coro = ijson.items_coro(sink, "\x00never\x00")
        reader = open_trace(path)
        try:
            done = 0
            while done < chunk_start:
                data = reader.read(min(READ_CHUNK, chunk_start - done))
                if not data:
                    break
                coro.send(data)
                done += len(data)
        finally:
            reader.close()
        for i in range(len(chunk)):
            try:
                coro.send(chunk[i : i + 1])
            except (ijson.JSONError, UnicodeDecodeError):
                pos = chunk_start + i
                break
    except (ijson.JSONError, UnicodeDecodeError, InputError, OSError):
        pass
    i = pos - chunk_start
    ctx = chunk[max(0, i - 24) : i + 24]
    near = chunk[max(0, i - 9) : i + 9]
    msg = text
    if re.search(rb"NaN|Infinity", near):
        msg = "NaN/Infinity is not valid JSON (" + text + ")"
    return pos, f"{msg}; near {ctx!r}"


__all__ = ["PassResult", "READ_CHUNK", "TOPLEVEL_CAP", "locate_error", "run_exact_pass", "run_pass"]
