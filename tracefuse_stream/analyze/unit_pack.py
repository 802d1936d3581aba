"""How a rank's partitions (analyze/timeline.py ``Segments``) are held between the
pass and the reduce: each unit's (thread's or GPU's) rows, a flat array of int64s,
in zlib blocks of :data:`BLOCK_ROWS` rows, and read back a stretch at a time.

Why its own module: the partitioning builds rows, this only stores and reads them;
why blocks: the ``--json`` breakdown reads every rank's stretches step by step, and
one block for the whole unit made each read decompress every step's rows, a cost
quadratic in the steps (8 ranks x 400 steps: 26.1 s CPU; in blocks: 5.3 s).
"""

from __future__ import annotations

import zlib
from array import array
from typing import Any, List, Tuple

#: int64s a segment row holds (analyze/timeline.py ``Row``; analyze/step_time.py reads by it)
ROW_FIELDS = 14
BLOCK_ROWS = 256  # rows a packed block holds (28 KB raw): about a step's rows of one unit
Packed = Tuple[bytes, ...]  # a unit's rows: zlib blocks of BLOCK_ROWS rows (pack_unit), or one raw block
Unit = Tuple[List[int], Packed]  # (where each segment's rows start, the rows)
_KEEP = 4
_UNPACKED: List[Tuple[bytes, array[int]]] = []  # (block, its rows): the last _KEEP decompressed


def pack_unit(flat: array[int]) -> Packed:
    """A unit's rows as ``Segments`` keeps them: blocks of :data:`BLOCK_ROWS` rows,
    each zlib level 1 (row by row: packed column by column they took ~12 KB a rank,
    not 14, but every read of a unit, once per rank and step of the ``--json``
    breakdown, then paid a re-interleave: +20% CPU on 500 steps)."""
    raw = flat.tobytes()
    size = BLOCK_ROWS * ROW_FIELDS * flat.itemsize
    return tuple(zlib.compress(raw[k : k + size], 1) for k in range(0, len(raw), size))


def _block(block: bytes) -> array[int]:
    """One block's rows, decompressed (the last :data:`_KEEP` kept, for the whole
    process: a rank's stretches are broken down one after another)."""
    hit = next((flat for k, flat in _UNPACKED if k is block), None)
    if hit is None:
        hit = array("q", zlib.decompress(block))
        _UNPACKED[:] = [(block, hit)] + _UNPACKED[: _KEEP - 1]
    return hit


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
    flat = _block(blocks[b0])
    if b1 > b0:
        flat = array("q", flat)
        for b in range(b0 + 1, b1 + 1):
            flat.extend(_block(blocks[b]))
    off = b0 * BLOCK_ROWS
    return rows_between(flat, first - off, stop - off)


__all__ = [
    "BLOCK_ROWS",
    "Packed",
    "ROW_FIELDS",
    "Unit",
    "pack_unit",
    "rows_between",
    "segment_starts",
    "unit_rows",
]
