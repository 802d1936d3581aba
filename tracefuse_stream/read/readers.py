"""The readers of one rank's events, behind one interface the stream driver uses.

Three readers exist, in the order a merge tries them:

* :class:`BatchedReader` — the event array cut into validated ~1 MB batches, each
  decoded by one msgspec call and encoded back by one (the normal path);
* :class:`ExactReader` — ijson's incremental parser, event by event; it takes over
  whenever the batched reader hands a rank back (:class:`Handover`), because its
  errors name the exact byte or event, and it accepts the open-ended array form;
* :class:`SalvageReader` — frames events itself and skips what cannot be parsed
  (``--salvage``).

A faster reader joins by implementing :class:`EventReader` and raising
:class:`Handover` for anything it does not handle. All readers parse numbers exactly
(integers of any size, other numbers as ``Decimal``) and write them back unchanged.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Protocol

import ijson

from tracefuse_stream.errors import ErrorKind, InputError
from tracefuse_stream.exactjson import dumps_exact, dumps_fast, encode_lines
from tracefuse_stream.read.batches import EventBatches, NotBatchable, RawRewrite
from tracefuse_stream.read.depthgate import DepthGate, TooDeepText
from tracefuse_stream.read.jsonerrors import describe_json_error
from tracefuse_stream.read.locate import find_lone_surrogate, json_error_offset
from tracefuse_stream.read.salvage import Framer, SalvageReport, tolerant_chunks
from tracefuse_stream.read.sources import TraceReader
from tracefuse_stream.read.textcheck import MAX_DEPTH, NestedTooDeep, SurrogateScan, depth, too_deep_message
from tracefuse_stream.read.toplevel import IJSON_BUF, MAX_EVENT_BYTES, find_trailer, trailer_of_file

PARSE_BUF = IJSON_BUF  # read/toplevel.py: why 1 MiB
Handover = NotBatchable  # "read this rank with the next reader instead"


class EventReader(Protocol):
    """What the stream driver needs from a reader of one rank."""

    #: True: an event that cannot be rewritten or encoded is skipped and counted
    #: (salvage) instead of failing the rank.
    skips_bad_events: bool
    #: Top-level keys found after the event array, once :meth:`batches` is exhausted.
    trailer: Optional[Dict[str, Any]]
    #: Things worth a warning line (e.g. an array without its closing bracket).
    notes: List[str]

    def batches(self) -> Iterator[List[Any]]: ...

    def encode_batch(self, kept: List[Any]) -> bytes: ...

    def encode_one(self, event: Any) -> bytes: ...

    def tell_raw(self) -> int: ...

    def json_bytes(self) -> int: ...

    def close(self) -> None: ...


class _FileReader:
    """Shared parts: the decompressing file reader and its positions."""

    skips_bad_events = False

    def __init__(self, path: str, compression: str, keep_tail: int = 0) -> None:
        self.path = path
        self.reader = TraceReader(path, compression, keep_tail=keep_tail)
        self.trailer: Optional[Dict[str, Any]] = None
        self.notes: List[str] = []

    def tell_raw(self) -> int:
        return self.reader.tell_raw()

    def json_bytes(self) -> int:
        return self.reader.offset

    def close(self) -> None:
        self.reader.close()


class BatchedReader(_FileReader):
    """msgspec batches; hands over (raises :class:`Handover`) for anything but a
    complete, valid trace, and for read or decompression problems, whose exact
    position the exact reader reports."""

    def __init__(self, path: str, compression: str, layout: str) -> None:
        super().__init__(path, compression)
        self._batches = EventBatches(self.reader, layout)
        self._raw: Optional[RawRewrite] = None

    def rewrite_raw_with(self, rewrite_raw: RawRewrite) -> None:
        """Let ``rewrite_raw`` (the C kernel) rewrite the events it can straight from
        the text: :meth:`batches` then also yields ``bytes``, already encoded."""
        self._raw = rewrite_raw

    def batches(self) -> Iterator[Any]:
        try:
            if self._raw is not None:
                yield from self._batches.mixed(self._raw)
            else:
                yield from self._batches
        except InputError as e:
            if e.path == self.path and e.event_index is None:
                raise Handover(str(e)) from None
            raise
        self.trailer = self._batches.trailer

    def encode_batch(self, kept: List[Any]) -> bytes:
        """One msgspec call per batch, one event per line: encoded JSON never holds a
        raw newline (strings escape it), so the line breaks are the event boundaries.
        An event msgspec cannot encode hands the rank to the exact reader, which names it."""
        try:
            return encode_lines(kept)[:-1].replace(b"\n", b",\n")
        except (TypeError, ValueError, OverflowError) as e:
            raise Handover(f"cannot encode an event: {e}") from None

    def encode_one(self, event: Any) -> bytes:
        return dumps_fast(event)


class _Capped:
    """The exact reader's file for ijson: stops with an error once MAX_EVENT_BYTES have
    been read without an event ending (ijson would build the rest of the file as one
    value: memory without bound; read/toplevel.py)."""

    def __init__(self, owner: ExactReader) -> None:
        self._owner = owner
        self.mark = 0  # the reader's offset when the last event was complete
        self.surrogates = SurrogateScan()
        self.suspect = False  # the text may hold a lone surrogate escape (yajl: "?")

    def read(self, n: int = -1) -> bytes:
        data = self._read(n)
        if not self.suspect and self.surrogates.suspect(data):
            self.suspect = True
            self._owner.locate_surrogates()
        return data

    def _read(self, n: int) -> bytes:
        o = self._owner
        if n != 0 and o.reader.offset - self.mark > MAX_EVENT_BYTES:
            raise InputError(
                o.path,
                f"an event does not end within {MAX_EVENT_BYTES >> 20} MB (a brace or bracket never closed?)",
                kind=ErrorKind.INVALID_JSON,
                hint="use --salvage to keep the complete events before it",
                event_index=o.index,
            )
        return o.reader.read(n)


class TooDeepError(InputError):
    """An event nests too deep: its own problem, worded the same by every pass that
    meets it (a side pass adds no "while counting events": a shallower event of the
    same kind is first met by the merge's pass, which does not)."""


class ExactReader(_FileReader):
    """ijson, event by event: errors carry the exact offset and event index."""

    def __init__(self, path: str, compression: str, layout: str, need_trailer: bool) -> None:
        keep = (1 << 20) if need_trailer else (4096 if layout == "array" else 0)
        super().__init__(path, compression, keep_tail=keep)
        self.layout = layout
        self.need_trailer = need_trailer
        self.index = 0  # events delivered
        self._lone: Optional[tuple] = None  # (event index, field, escape): read/locate.py

    def batches(self) -> Iterator[List[Any]]:
        prefix = "traceEvents.item" if self.layout == "object" else "item"
        capped = _Capped(self)
        try:
            for ev in ijson.items(DepthGate(capped), prefix, use_float=False, buf_size=PARSE_BUF):
                if self._lone is not None and self._lone[0] == self.index:
                    raise self._surrogate_error()
                self.index += 1
                capped.mark = self.reader.offset
                d = depth(ev)
                if d > MAX_DEPTH:
                    raise self._too_deep(depth(ev, -1), self.index - 1)
                yield [ev]
        except TooDeepText as e:  # deeper than ijson can afford to build (read/depthgate.py)
            if e.in_event:
                raise self._too_deep(e.depth, self.index) from None
            raise InputError(self.path, NestedTooDeep(e.key or "", e.depth).message()) from None
        except (ijson.JSONError, UnicodeDecodeError) as e:
            if self._lone is not None and self._lone[0] == self.index:
                raise self._surrogate_error() from None  # yajl: a lone low surrogate is invalid UTF-8
            kind, problem = describe_json_error(e)
            if self._open_array_end(kind):
                self.notes.append(
                    f"{self.path}: the event array has no closing ']' (the array form allows "
                    f"that); {self.index} complete events read"
                )
            else:
                hint = (
                    "use --salvage to repair it (invalid bytes become U+FFFD)"
                    if kind is ErrorKind.INVALID_UTF8
                    else "use --salvage to keep the complete events before it"
                )
                raise InputError(  # event_index is 0-based: the event after the last complete one
                    self.path,
                    problem,
                    kind=kind,
                    hint=hint,
                    event_index=self.index,
                    offset=self.reader.offset
                    if kind is ErrorKind.TRUNCATED
                    else json_error_offset(self.path),
                ) from None
        if self.need_trailer:
            try:
                trailer = find_trailer(self.reader.tail())
            except NestedTooDeep as e:
                raise InputError(self.path, e.message()) from None
            if trailer is None:  # longer than the kept tail: read it from the file
                trailer = trailer_of_file(self.path)[0]
            self.trailer = trailer

    def _too_deep(self, d: Optional[int], index: int) -> TooDeepError:
        return TooDeepError(
            self.path,
            too_deep_message(d),
            kind=ErrorKind.INVALID_JSON,
            hint="use --salvage to drop such events",
            event_index=index,
        )

    def locate_surrogates(self) -> None:
        """The text may hold a lone surrogate escape, which yajl would write as "?":
        the events are judged one by one (read/locate.py); the first such one stops the
        read when the read reaches it (a problem earlier in the file is named first)."""
        self._lone = find_lone_surrogate(self.path)

    def _surrogate_error(self) -> InputError:
        assert self._lone is not None
        index, where, escape = self._lone
        return InputError(
            self.path,
            f"lone UTF-16 surrogate escape {escape} in {where}: not Unicode text, it cannot be written as it is",
            kind=ErrorKind.INVALID_UTF8,
            hint="use --salvage to drop such events",
            event_index=index,
        )

    def _open_array_end(self, kind: ErrorKind) -> bool:
        """A bare ``[...]`` trace may end after a complete event without its closing
        bracket (Chrome's array form); ijson has then yielded every event."""
        if self.layout != "array" or kind is not ErrorKind.TRUNCATED:
            return False
        return self.reader.tail().rstrip().rstrip(b",").rstrip().endswith(b"}")

    def encode_batch(self, kept: List[Any]) -> bytes:
        parts = []
        for ev in kept:
            try:
                parts.append(dumps_exact(ev))
            except (TypeError, ValueError, OverflowError) as e:  # orjson's error is a TypeError
                raise InputError(
                    self.path,
                    f"event cannot be written as strict JSON: {e}",
                    event_index=self.index - 1,
                    kind=ErrorKind.BAD_EVENT,
                ) from None
        return b",\n".join(parts)

    def encode_one(self, event: Any) -> bytes:
        return dumps_exact(event)


class SalvageReader:
    """Frames events itself (string-aware), parses each on its own and repairs what
    can be repaired losslessly; the driver skips events that still fail."""

    skips_bad_events = True

    def __init__(self, path: str, size_bytes: int, exact: bool) -> None:
        self.path = path
        self.size_bytes = size_bytes
        self.report = SalvageReport()
        self.framer = Framer(tolerant_chunks(path, self.report), self.report, exact=exact, path=str(path))
        self.trailer: Optional[Dict[str, Any]] = None
        self.notes: List[str] = []
        self._done = False

    def batches(self) -> Iterator[List[Any]]:
        for ev in self.framer.events():
            yield [ev]
        self.trailer = dict(self.framer.header)
        self._done = True

    def encode_batch(self, kept: List[Any]) -> bytes:
        return b",\n".join(dumps_exact(ev) for ev in kept)

    def encode_one(self, event: Any) -> bytes:
        return dumps_exact(event)

    def tell_raw(self) -> int:
        return self.size_bytes if self._done else 0

    def json_bytes(self) -> int:
        return self.framer.offset

    def close(self) -> None:
        pass


__all__ = ["BatchedReader", "EventReader", "ExactReader", "Handover", "SalvageReader"]
