"""The fast reading stage: a rank's event array as validated ~1 MB batches.

ijson tokenises in C but builds every value through Python callbacks, and that was
70% of a merge's time (issue 3's profile). This stage reads the decompressed bytes
in large chunks, cuts them after the last event that ends in the buffer, and decodes
each batch with ONE msgspec call. Numbers come out exactly as ijson's
``use_float=False`` gives them — integers of any size, every other number a
``Decimal`` with its original digits — so the rewrite rules and the exactness
promises do not change. Memory is one chunk, one batch and its decoded events.

Why a cut is safe: a batch always starts at a true event boundary, so decoding
``[`` + batch + ``]`` replays the real parse from there. A candidate cut is a ``}``,
``,``, ``{`` sequence (white space allowed between); if that comma lies inside a
string, the string is unterminated at the cut, and if it lies inside an event, the
closing ``]`` meets an open object: neither decodes, and an earlier candidate is
tried. Only a comma between two events of the array decodes. A candidate that lies
after the end of the array (a list of objects among the keys after ``traceEvents``)
does not decode either; when several in a row fail, :func:`_array_end` looks for the
array's end in the text itself (a ``]`` after an event, followed by ``,"key"``, whose
prefix decodes as a list) before giving up.

Decisions never read the decoder's error message: *whether* a candidate decodes is
all this stage asks. (It used to parse msgspec's "(byte N)" out of the message; a
reworded message would have silently sent every rank to the slow path.)

Anything this stage does not handle raises :class:`NotBatchable` before the caller
has committed anything, and the caller re-reads the rank with the exact ijson reader,
which reports the precise problem (truncation offset, invalid JSON at event N) or
accepts the odd form (an array without its closing bracket). Valid traces never take
that path; broken ones pay one extra partial read, on the error path only.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import msgspec

from tracefuse_stream.exactjson import DecodeError, loads_exact
from tracefuse_stream.read.depthgate import text_deeper_than
from tracefuse_stream.read.sources import TraceReader
from tracefuse_stream.read.textcheck import MAX_DEPTH, lone_surrogate
from tracefuse_stream.read.toplevel import EVENTS_KEY_BYTES, MAX_EVENT_BYTES, keys_before_at

CHUNK_BYTES = 1 << 20  # read size; a batch is about this large
#: An event may be this large (its bytes are held whole to decode it); beyond, the exact
#: reader takes over (and stops: read/toplevel.py MAX_EVENT_BYTES). Reads grow with the
#: buffer (``_more``), so an event of N bytes costs O(N) reads and scans, not
#: N / CHUNK_BYTES rescans of it (benchmarks/giant_event.py).
MAX_BUFFER = MAX_EVENT_BYTES
HEADER_LIMIT = 16 << 20  # "traceEvents" must start within this many bytes (real headers: KBs)
_CUT_ATTEMPTS = 3  # candidates that fail to decode before giving up on this stage
_END_ATTEMPTS = 3  # possible ends of the array tried (from the last) after those failures

_WS = frozenset(b" \t\r\n")
_COMMA, _CLOSE = ord(","), ord("}")
_KEY = EVENTS_KEY_BYTES
# the end of a non-empty (``}]``) or empty (``[]``) event array with a key after it
_ARRAY_END = re.compile(rb'[}\[][ \t\r\n]*\][ \t\r\n]*,[ \t\r\n]*"')


#: ``rewrite_raw(buf, pos, need_sep, at_start) -> (encoded, pos, status, skip_to,
#: need_sep)``: a raw-text rewriter such as the C kernel (rewrite/kernel.py), driven by
#: :meth:`EventBatches.mixed`. ``status`` is ``"more"``, ``"end"`` or ``"fallback"``.
RawRewrite = Callable[[bytearray, int, bool, bool], Tuple[bytes, int, str, int, bool]]


class NotBatchable(Exception):
    """This rank must be read by the exact ijson reader instead (why in args[0])."""


def _decode(data: Any) -> Any:
    """One exact decode of a batch (or of the document's end). Deeper than an event may
    nest (read/textcheck.py; the list is one level more, the document's end two, so
    this errs towards handing over), the exact reader takes the rank and names the
    event and its depth: the one rule of every reader, projected reads (info) too."""
    try:
        value = loads_exact(data)
    except RecursionError:  # nested beyond msgspec's reach
        raise DecodeError("nested too deep") from None
    _depth_check(data)
    return value


def _depth_check(data: Any) -> None:
    """Decoded text that may nest deeper than an event may (read/depthgate.py's bound;
    the batch's list is one level more) goes to the exact reader."""
    if text_deeper_than(data if type(data) is bytes else bytes(data), MAX_DEPTH + 1):
        raise DecodeError("nested too deep")


def _projected(decode: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A projected decoder (``fields``) skips the values it does not keep without
    judging their text: invalid UTF-8 and lone surrogate escapes there would pass,
    while the merge of the same file refuses them. Such text fails here too, and the
    exact reader names the problem (read/textcheck.py)."""

    def run(data: Any) -> Any:
        raw = bytes(data)
        if not raw.isascii():
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                raise DecodeError("invalid UTF-8") from None
        if b"\\u" in raw and lone_surrogate(raw) is not None:
            raise DecodeError("lone surrogate escape")
        try:
            value = decode(data)
        except RecursionError:
            raise DecodeError("nested too deep") from None
        _depth_check(raw)  # the skipped fields nest as deep as the kept ones may
        return value

    return run


def _array_end(buf: bytearray, hi: int) -> int:
    """Index just past the ``]`` that closes the event array, if the array ends in
    ``buf`` before ``hi`` and a key follows it (-1: it does not).

    Only the last few places that look like an array end followed by a key are
    tried, from the last: the true end is the last such place before a trailer that
    holds no ``}],"`` of its own (Kineto's keys after the events: deviceProperties,
    traceName, baseTimeNanoseconds). A place inside an event (an args list of objects
    followed by another key) leaves an object open, so its prefix does not decode."""
    ends = [m.start() + m.group().index(b"]") + 1 for m in _ARRAY_END.finditer(buf, 0, hi)]
    for end in reversed(ends[-_END_ATTEMPTS:]):
        try:
            if isinstance(_decode(bytes(buf[:end])), list):
                return end
        except DecodeError:
            continue
    return -1


def _last_boundary(buf: bytearray, hi: int) -> int:
    """Index of the comma of the last ``}`` ``,`` ``{`` before ``hi`` (-1: none)."""
    while True:
        j = buf.rfind(b"{", 1, hi)
        if j < 0:
            return -1
        k = j - 1
        while k > 0 and buf[k] in _WS:
            k -= 1
        if buf[k] == _COMMA:
            m = k - 1
            while m > 0 and buf[m] in _WS:
                m -= 1
            if buf[m] == _CLOSE:
                return k
        hi = j


def _more(reader: TraceReader, buf: bytearray) -> bytes:
    """The next read: CHUNK_BYTES, or as much as ``buf`` already holds when that is more.
    ``buf`` is large only while one event does not end in it; reading as much again
    each time makes that event cost a few reads and scans, not one per CHUNK_BYTES."""
    return reader.read(max(CHUNK_BYTES, len(buf)))


def _skip_ws(buf: bytearray, j: int) -> int:
    while j < len(buf) and buf[j] in _WS:
        j += 1
    return j


def _events_start(reader: TraceReader, layout: str) -> bytearray:
    """Read up to the event array; return ``[`` + the bytes after its opening bracket.

    For the object form, an occurrence of ``"traceEvents"`` counts only if it is a
    top-level key (:func:`~tracefuse_stream.read.toplevel.keys_before_at`: the text
    before it, closed as ``"traceEvents":[]}``, must decode to an object).
    """
    head = bytearray()
    search_from = 0
    while True:
        more = reader.read(CHUNK_BYTES)
        if not more:
            raise NotBatchable("no event array found")
        head += more
        if layout == "array":
            i = 0
            while i < len(head) and head[i] in _WS:
                i += 1
            if i == len(head):
                continue
            if head[i] != ord("["):
                raise NotBatchable("array form does not start with '['")
            del head[:i]
            return head
        while True:
            i = head.find(_KEY, search_from)
            if i < 0:
                search_from = max(0, len(head) - len(_KEY))
                break
            j = _skip_ws(head, i + len(_KEY))
            if j < len(head) and head[j] == ord(":"):
                j = _skip_ws(head, j + 1)
                if j >= len(head):
                    search_from = i  # the value starts in the next chunk
                    break
                if head[j] == ord("[") and keys_before_at(head, i) is not None:
                    del head[:j]  # in place: a bytearray drops its start without a copy
                    return head
            elif j >= len(head):
                search_from = i
                break
            search_from = i + 1
        if len(head) > HEADER_LIMIT:
            raise NotBatchable(f"event array does not start in the first {HEADER_LIMIT >> 20} MB")


class EventBatches:
    """Iterate over lists of events of one rank; ``trailer`` holds the top-level keys
    after the array once iteration has finished (``{}`` for the array form).

    ``fields``: a ``TypedDict`` of the keys a side pass needs (e.g. ``ph``, ``name``,
    ``ts``, ``dur``). Each event is then decoded as a dict of only those keys (values
    exact as always), several times faster than building every event whole; an event
    that is not an object hands over to the exact reader like any other surprise.
    A projected read keeps no trailer (``{}``): side passes do not need one.

    Raises :class:`NotBatchable` for anything but a complete, valid trace; never
    an error about the input itself (the exact reader owns those messages).
    """

    def __init__(self, reader: TraceReader, layout: str, fields: Optional[type] = None) -> None:
        self.reader = reader
        self.layout = layout
        self.trailer: Optional[Dict[str, Any]] = None
        self._decode: Callable[[Any], Any] = _decode
        self._decode_doc: Callable[[Any], Any] = _decode
        # the events a raw rewriter hands over (mixed's decode_out): the kernel's
        # validating scan took their every byte (csrc/scan.c scan_event: ASCII, no \u or
        # \/ escape, at most MAX_DEPTH levels), so the text checks of _decode and
        # _projected could not fail on them (they were ~3% of info --collectives)
        self._decode_scanned: Callable[[Any], Any] = loads_exact
        if fields is not None:
            events_type: Any = List[fields]  # type: ignore[valid-type]
            # the document's other keys (the trailer) are skipped, not decoded
            doc = msgspec.defstruct("_Doc", [("traceEvents", events_type)])
            self._decode_scanned = msgspec.json.Decoder(events_type, float_hook=Decimal).decode
            self._decode = _projected(self._decode_scanned)
            decode_doc = _projected(msgspec.json.Decoder(doc, float_hook=Decimal).decode)
            self._decode_doc = lambda data: {"traceEvents": getattr(decode_doc(data), "traceEvents")}  # noqa: B009

    def __iter__(self) -> Iterator[List[Any]]:
        buf = _events_start(self.reader, self.layout)  # buf[0] == '['
        while True:
            more = _more(self.reader, buf)
            if not more:
                break
            buf += more
            cut = _last_boundary(buf, len(buf))
            for _ in range(_CUT_ATTEMPTS):
                if cut < 0:
                    break  # no boundary yet: read more
                batch = self._try_cut(buf, cut)
                if batch is not None:
                    del buf[1 : cut + 1]
                    yield batch
                    break
                cut = _last_boundary(buf, cut)  # that comma was inside a string or event
            else:
                # several candidates in a row that do not decode: the keys after the
                # array (lists of objects), or content this decoder refuses
                if _array_end(buf, len(buf)) > 0:
                    yield self._rest_of_file(buf)
                    return
                raise NotBatchable(f"no decodable event boundary among {_CUT_ATTEMPTS} candidates")
            if len(buf) > MAX_BUFFER:
                raise NotBatchable(f"no event boundary in {len(buf)} bytes")
        yield self._last(buf)

    def mixed(self, rewrite_raw: RawRewrite, decode_out: bool = False) -> Iterator[Union[bytes, List[Any]]]:
        """The events as ``rewrite_raw`` rewrites them (``bytes``: encoded events,
        ``,\n``-separated, ready for the output) and, for each event it hands back,
        that event decoded like any batch (a one-event list, for ``feed_batch``).
        With ``decode_out`` (the side passes' scan, read/scan.py) the raw rewriter's
        output is a list of events to decode, and comes decoded.

        The raw rewriter finds the event boundaries itself, so this loop only keeps the
        buffer: it drops what was consumed, reads more when an event is incomplete, and
        decodes a handed-back event alone. Anything it cannot take further (no
        separator between events, an event that does not decode, end of file inside
        the array) raises :class:`NotBatchable` or ends in :meth:`_last`, exactly as
        the plain batches do, so the exact reader still owns every error message.
        """
        buf = _events_start(self.reader, self.layout)  # buf[0] == '['
        pos, need_sep, started = 1, False, False
        while True:
            out, pos, status, skip_to, need_sep = rewrite_raw(buf, pos, need_sep, not started)
            started = started or need_sep or pos > 1
            if out:
                yield self._decode_scanned(b"[" + out + b"]") if decode_out else out
            if status == "end":
                yield self._rest_of_file(bytearray(b"[") + buf[pos:])
                return
            if status == "fallback":
                if skip_to == -2:
                    raise NotBatchable(f"no separator between events near byte {pos} of the buffer")
                if skip_to >= 0:
                    try:
                        events = self._decode(b"[" + buf[pos:skip_to] + b"]")
                    except DecodeError as e:
                        raise NotBatchable(f"an event does not decode: {e}") from None
                    yield events
                    pos, need_sep, started = skip_to, True, True
                    continue
            # "more", or a handed-back event not complete in the buffer yet: read on
            if pos > 1:
                del buf[1:pos]
                pos = 1
            more = _more(self.reader, buf)
            if not more:
                if need_sep:
                    del buf[1:]  # what is left is white space (the kernel consumed the rest)
                yield self._last(buf)
                return
            buf += more
            if len(buf) > MAX_BUFFER:
                raise NotBatchable(f"no event boundary in {len(buf)} bytes")

    def _rest_of_file(self, buf: bytearray) -> List[Any]:
        """The array has ended in ``buf``: read the (small) trailer to the end of the
        file and decode events and trailer together, as at a normal end."""
        while True:
            more = self.reader.read(CHUNK_BYTES)
            if not more:
                return self._last(buf)
            buf += more
            if len(buf) > MAX_BUFFER:
                raise NotBatchable(f"keys after the event array exceed {MAX_BUFFER >> 20} MB")

    def _try_cut(self, buf: bytearray, cut: int) -> Optional[List[Any]]:
        """Decode ``buf[:cut]`` + ``]``; None when that is not a list of events (the
        candidate comma lay inside a string or an event, after the array's end, or
        the text before it is something this decoder refuses). Which of these it was
        is not read from the error: the caller tries earlier candidates, then
        :func:`_array_end`, then hands over."""
        try:
            batch = self._decode(buf[:cut] + b"]")
        except DecodeError:
            return None
        return batch if isinstance(batch, list) else None

    def _last(self, buf: bytearray) -> List[Any]:
        """The remaining events, the closing bracket and (object form) the trailer, in
        one exact decode (the same values as read/toplevel.py's ``find_trailer``)."""
        try:
            if self.layout == "array":
                events = self._decode(buf)
                trailer: Dict[str, Any] = {}
            else:
                doc = self._decode_doc(b'{"traceEvents":' + bytes(buf))
                if not isinstance(doc, dict):
                    raise NotBatchable("end of file is not the end of a trace object")
                events = doc.pop("traceEvents")
                trailer = doc
        except DecodeError as e:
            raise NotBatchable(f"end of the event array: {e}") from None
        if not isinstance(events, list):
            raise NotBatchable("traceEvents is not an array")
        self.trailer = trailer
        return events


__all__ = ["EventBatches", "NotBatchable", "CHUNK_BYTES"]
