"""The report page's arrays of every rank and step (``breakdown``, ``step_time``) kept
as their JSON, zlib-packed, while the page decides what fits its budget (report/page.py).

Why: the page embeds at most ``EMBED_BUDGET`` bytes of JSON; past it, it leaves parts
out or cuts them item by item (``breakdown``'s contributors, ``step_time``'s CPU side)
until one candidate fits. Made as Python objects, those two arrays were ~90% of the
document and the report's peak grew with the steps (8 ranks x 1,600 steps: ~370 MiB,
~4x ``info --collectives --json``, which writes them one item at a time). Here each
item is made once (from the ``LazyArray`` report/page_data.py hands over), written by
orjson and packed in chunks of :data:`CHUNK_ITEMS`; a candidate's size is measured by
reading the items back one at a time through its cuts (:meth:`PackedItems.then`), and
only the chosen candidate's text is made. The items read back are the ones written
(orjson's floats read back exactly; keys are strings either way), so the page's bytes
are those of the lists.
"""

from __future__ import annotations

import zlib
from array import array
from typing import Any, Callable, Iterable, Iterator, List, Optional, Tuple

import orjson

from tracefuse_stream.report.json_stream import LazyArray

#: items packed together (a few hundred KB of JSON at most: one chunk is unpacked at a time)
CHUNK_ITEMS = 256
#: ... or fewer, once their JSON reaches this many bytes: an instance of 2,048 ranks is
#: ~100 KB of JSON (its per-rank arrivals, ends and waits), 256 of them 25 MB at once
CHUNK_BYTES = 1 << 20
#: what a cut returns for an item it leaves out
SKIP = object()

Cut = Callable[[Any], Any]


def _exact(obj: Any) -> Any:
    """``obj`` with every integer orjson cannot write (beyond -2**63..2**64-1: a step
    number or ``distributedInfo.rank`` of 2**64) as its exact digits, and such dict keys
    as strings: the page's JSON says every number as ``info --collectives --json``
    (the json module) does."""
    if type(obj) is int:
        return obj if -(2**63) <= obj < 2**64 else orjson.Fragment(str(obj))
    if isinstance(obj, dict):
        return {
            (str(k) if type(k) is int and not -(2**63) <= k < 2**64 else k): _exact(v) for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return [_exact(v) for v in obj]
    return obj


def raw_json(obj: Any) -> bytes:
    """``obj``'s JSON as orjson writes it for the page, before the escapes report/page.py adds."""
    try:
        return orjson.dumps(obj, default=str, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # an integer beyond 64 bits: written exactly (the rare case)
        return orjson.dumps(_exact(obj), default=str, option=orjson.OPT_NON_STR_KEYS)


def escapes(raw: bytes) -> int:
    """The ``<``, ``>`` and ``&`` the page escapes (5 more bytes each)."""
    return raw.count(b"<") + raw.count(b">") + raw.count(b"&")


def embedded_size(raw: bytes) -> int:
    """The UTF-8 size of ``raw`` once the page has escaped it (report/page.py
    ``_escaped``: each ``<``, ``>``, ``&`` a 6-byte ``\\u00XX``), without making it."""
    return len(raw) + 5 * escapes(raw)


class PackedItems:
    """One array of the page's document, its items packed as JSON (see the module
    docstring); :meth:`then` gives the same items through one more cut."""

    def __init__(self, items: Iterable[Any], has_long: Callable[[Any], bool]) -> None:
        self._chunks: List[Tuple[bytes, array]] = []  # (zlib of the items' JSON, their lengths)
        self._cuts: Tuple[Cut, ...] = ()
        self.count = 0
        self.long = False  # any string :func:`has_long` finds (the names cut past the budget)
        size = 0  # the items' embedded bytes
        buf: List[bytes] = []
        held = 0  # bytes in buf
        for item in items:
            raw = raw_json(item)
            _check_reads_back(raw, item)
            self.long = self.long or has_long(item)
            size += embedded_size(raw)
            buf.append(raw)
            held += len(raw)
            self.count += 1
            if len(buf) == CHUNK_ITEMS or held >= CHUNK_BYTES:
                self._pack(buf)
                buf, held = [], 0
        if buf:
            self._pack(buf)
        self._plain_size = size + max(self.count - 1, 0) + 2  # with the brackets and commas

    def _pack(self, raws: List[bytes]) -> None:
        self._chunks.append((zlib.compress(b"".join(raws), 1), array("q", map(len, raws))))

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Any]:
        """The items as the page reads them (its JSON read back: tuples as lists, keys
        as strings), decoded one chunk at a time."""
        return (orjson.loads(raw) for raw in self._raws())

    def then(self, cut: Cut) -> PackedItems:
        """The same items through ``cut`` too (an item to an item, or :data:`SKIP`)."""
        out = object.__new__(PackedItems)
        out._chunks, out.count, out.long = self._chunks, self.count, self.long
        out._cuts = self._cuts + (cut,)
        out._plain_size = self._plain_size
        return out

    def _raws(self) -> Iterator[bytes]:
        """Each item's JSON through the cuts, one at a time."""
        for packed, lengths in self._chunks:
            text = zlib.decompress(packed)
            at = 0
            for n in lengths:
                raw = text[at : at + n]
                at += n
                if not self._cuts:
                    yield raw
                    continue
                item: Any = orjson.loads(raw)
                for cut in self._cuts:
                    item = cut(item)
                    if item is SKIP:
                        break
                if item is not SKIP:
                    yield raw_json(item)

    def embedded_size(self) -> int:
        """The bytes this array takes in the page (escapes counted)."""
        if not self._cuts:
            return self._plain_size
        size, n = 2, 0
        for raw in self._raws():
            size += embedded_size(raw)
            n += 1
        return size + max(n - 1, 0)

    def fragment(self) -> Any:
        """The array's JSON, for orjson to write in place (``orjson.Fragment``)."""
        # into one growing buffer, each item's bytes freed as copied: joined from a list,
        # the 20,480 small items of a 2,048-rank step_time each pinned a 4 KB pool of the
        # allocator among the transient objects its decoding made (+72 MB of RSS)
        buf = bytearray(b"[")
        for raw in self._raws():
            if len(buf) > 1:
                buf += b","
            buf += raw
        buf += b"]"
        return orjson.Fragment(bytes(buf))


class NotPackable(Exception):
    """An item that would not read back as the same text (an integer past 64 bits)."""


def _check_reads_back(raw: bytes, item: Any) -> None:
    """Raise :class:`NotPackable` unless ``item`` read back from ``raw`` writes the same
    bytes (equality is not needed: tuples read back as lists, int keys as strings)."""
    try:
        back = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise NotPackable from None
    if back != item and raw_json(back) != raw:
        raise NotPackable


def packed_or_none(v: Any, has_long: Callable[[Any], bool]) -> Optional[PackedItems]:
    """``v`` packed when it is a ``LazyArray`` (report/json_stream.py) whose items read
    back as written, else None (the caller keeps ``v`` as a list)."""
    if not isinstance(v, LazyArray):
        return None
    try:
        return PackedItems(v, has_long)
    except NotPackable:
        return None


__all__ = [
    "CHUNK_BYTES",
    "CHUNK_ITEMS",
    "SKIP",
    "NotPackable",
    "PackedItems",
    "embedded_size",
    "escapes",
    "packed_or_none",
    "raw_json",
]
