"""How a rank's partitions (analyze/timeline.py ``Segments``) are held between the
pass and the reduce: each unit's (thread's or GPU's) rows, a flat array of int64s,
in compressed blocks of :data:`BLOCK_ROWS` rows, and read back a stretch at a time.

Why its own module: the partitioning builds rows, this only stores and reads them;
why blocks: the ``--json`` breakdown reads every rank's stretches step by step, and
one block for the whole unit made each read decompress every step's rows, a cost
quadratic in the steps (8 ranks x 400 steps: 26.1 s CPU; in blocks: 5.3 s). Why 64
rows: the breakdown reads one step of a rank, then every other rank's, so a block
is decompressed again for each step it holds; at 256 rows a synthetic rank's step
(~37 rows of its thread, ~22 of its GPU) read ~7x the rows it needed, 0.50 s of
``--json``'s 6.8 s at 1,024 ranks, at 64 rows 0.26 s (the rows are on disk in the
reduce: smaller blocks cost a few more bytes of offsets, not memory).

In the reduce the blocks move to a temporary file (:class:`Spill`), read back with one
``pread`` per block: ~14 KB a rank held in memory was most of what the why kept per
rank between the pass and the reduce (issue 38: 16,384 ranks in under 1 GB).
"""

from __future__ import annotations

import itertools
import os
import tempfile
from array import array
from typing import Any, Iterator, List, Sequence, Tuple, Union

from tracefuse_stream.analyze.block_codec import pack_block, unpack_block
from tracefuse_stream.errors import OutputError

#: int64s a segment row holds (analyze/timeline.py ``Row``; analyze/step_time.py reads by it)
ROW_FIELDS = 14
BLOCK_ROWS = 64  # rows a packed block holds (7 KB raw): see the module docstring
_KEEP = 4
#: (block or its spilled key, its rows): the last _KEEP decompressed
_UNPACKED: List[Tuple[Any, array[int]]] = []
_SERIALS = itertools.count(1)


class Spill:
    """A temporary file (in ``tempfile.gettempdir()``, deleted when closed, on Linux at
    once; made at the first block) that packed blocks are moved to, appended with
    ``pwrite`` and read with ``pread``; closed when the last :class:`SpilledBlocks` that
    refers to it is gone. Disk use: the blocks' size, never more (nothing is
    rewritten). A file that cannot be made or written is an :class:`OutputError` naming
    the directory (``TMPDIR`` chooses another)."""

    def __init__(self) -> None:
        self._file: Any = None
        self.fd = -1
        self.end = 0
        self.serial = next(_SERIALS)  # with an offset: a block's key in the decompressed cache

    def _fail(self, what: str, e: OSError) -> OutputError:
        return OutputError(
            f"{tempfile.gettempdir()}: cannot {what} the temporary file of the why's rows "
            f"(set TMPDIR to a directory with room): {e.strerror or e}"
        )

    def put(self, blocks: Sequence[bytes]) -> SpilledBlocks:
        """``blocks`` written at the end of the file, as a sequence that reads them back."""
        offs = array("q", [self.end])
        for b in blocks:
            offs.append(offs[-1] + len(b))
        data = b"".join(blocks)
        try:
            if self._file is None:
                self._file = tempfile.TemporaryFile(prefix="tracefuse-spill-")
                self.fd = self._file.fileno()
            done = 0
            while done < len(data):  # pwrite may write less than asked
                done += os.pwrite(self.fd, data[done:], self.end + done)
        except OSError as e:
            raise self._fail("create or write", e) from None
        self.end += len(data)
        return SpilledBlocks(self, offs)

    def read(self, off: int, size: int) -> bytes:
        try:
            out = os.pread(self.fd, size, off)
            while len(out) < size:  # pread may read less than asked
                more = os.pread(self.fd, size - len(out), off + len(out))
                if not more:
                    raise OSError(f"{size} bytes at {off} are not there")
                out += more
        except OSError as e:
            raise self._fail("read", e) from None
        return out


class SpilledBlocks(Sequence[bytes]):
    """A unit's blocks in a :class:`Spill` (pickled as the blocks themselves)."""

    __slots__ = ("_spill", "_offs")

    def __init__(self, spill: Spill, offs: array[int]) -> None:
        self._spill, self._offs = spill, offs

    def __len__(self) -> int:
        return len(self._offs) - 1

    def __getitem__(self, b: Any) -> Any:
        if isinstance(b, slice):
            return [self[k] for k in range(*b.indices(len(self)))]
        offs = self._offs
        return self._spill.read(offs[b], offs[b + 1] - offs[b])

    def __iter__(self) -> Iterator[bytes]:
        return (self[k] for k in range(len(self)))

    def key(self, b: int) -> Tuple[int, int]:
        """Block ``b``'s key in the decompressed cache: unique while the process lives."""
        return (self._spill.serial, self._offs[b])

    def __reduce__(self) -> Any:
        return (tuple, (tuple(self),))


#: a unit's rows: compressed blocks of BLOCK_ROWS rows (pack_unit; in the reduce, spilled), or one raw block
Packed = Union[Tuple[bytes, ...], SpilledBlocks]
Unit = Tuple[Sequence[int], Packed]  # (where each segment's rows start, the rows)


def spill_unit(unit: Unit, spill: Spill) -> Unit:
    """``unit`` with its blocks in ``spill`` and its segment starts as one array."""
    starts, blocks = unit
    return array("q", starts), spill.put(blocks)


def pack_unit(flat: array[int]) -> Packed:
    """A unit's rows as ``Segments`` keeps them: blocks of :data:`BLOCK_ROWS` rows,
    each compressed (analyze/block_codec.py; row by row: packed column by column they took ~12 KB a rank,
    not 14, but every read of a unit, once per rank and step of the ``--json``
    breakdown, then paid a re-interleave: +20% CPU on 500 steps)."""
    raw = flat.tobytes()
    size = BLOCK_ROWS * ROW_FIELDS * flat.itemsize
    return tuple(pack_block(raw[k : k + size]) for k in range(0, len(raw), size))


def _block(blocks: Packed, b: int) -> array[int]:
    """Block ``b``'s rows, decompressed (the last :data:`_KEEP` kept, for the whole
    process: a rank's stretches are broken down one after another; a block in memory
    is known by identity, a spilled one by its key)."""
    if type(blocks) is SpilledBlocks:
        key: Any = blocks.key(b)
        hit = next((flat for k, flat in _UNPACKED if type(k) is tuple and k == key), None)
    else:
        key = blocks[b]
        hit = next((flat for k, flat in _UNPACKED if k is key), None)
    if hit is None:
        hit = array("q", unpack_block(blocks[b]))
        _UNPACKED[:] = [(key, hit)] + _UNPACKED[: _KEEP - 1]
    return hit


def packed_rows(rows: Sequence[Tuple[int, ...]]) -> bytes:
    """A unit's rows (tuples of :data:`ROW_FIELDS` ints) as the kernel packs them."""
    return array("q", itertools.chain.from_iterable(rows)).tobytes()


def unpack_rows(packed: bytes) -> List[Tuple[int, ...]]:
    """A unit's rows from ``PyTimeline.segments`` / the kernel's, as tuples."""
    flat = array("q")
    flat.frombytes(packed)
    return list(rows_between(flat, 0, len(flat) // ROW_FIELDS))


def rows_between(flat: array[int], first: int, stop: int) -> Any:
    """Rows ``first`` to ``stop`` of a unit's flat array, as tuples."""
    it = iter(flat[first * ROW_FIELDS : stop * ROW_FIELDS])
    return zip(*([it] * ROW_FIELDS))


def segment_starts(flat: array[int], n_cuts: int) -> List[int]:
    """Where each segment's rows start in a unit's rows (which come in segment order:
    segment k is rows ``starts[k]`` to ``starts[k + 1]``)."""
    starts = [0] * n_cuts
    for seg in flat[0::ROW_FIELDS]:
        starts[seg + 1] += 1
    for k in range(1, len(starts)):
        starts[k] += starts[k - 1]
    return starts


def unit_rows(unit: Unit, i: int, j: int) -> Any:
    """The rows of segments ``i`` to ``j`` of a packed ``unit``, as tuples,
    decompressing only the blocks that hold them."""
    starts, blocks = unit
    first, stop = starts[i], starts[j]
    if stop <= first:
        return iter(())
    b0, b1 = first // BLOCK_ROWS, (stop - 1) // BLOCK_ROWS
    flat = _block(blocks, b0)
    if b1 > b0:
        flat = array("q", flat)
        for b in range(b0 + 1, b1 + 1):
            flat.extend(_block(blocks, b))
    off = b0 * BLOCK_ROWS
    return rows_between(flat, first - off, stop - off)


__all__ = [
    "packed_rows",
    "unpack_rows",
    "BLOCK_ROWS",
    "Packed",
    "ROW_FIELDS",
    "Spill",
    "SpilledBlocks",
    "Unit",
    "pack_unit",
    "rows_between",
    "segment_starts",
    "spill_unit",
    "unit_rows",
]
