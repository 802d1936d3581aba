"""The compression of the blocks the analysis holds between a file's pass and the
reduce (analyze/unit_pack.py: the why's rows; analyze/step_pack.py: the step figures).

Why zstd at level 1, not zlib: the blocks are int64 rows and marshalled tuples that
are made once and read a few times each; on the 8 x 20 MB benchmark's blocks
(``info --collectives``, 3.3 MB in 128 blocks) zlib level 1 took 22 ms to compress and
8 ms to read back, zstd level 1 6 ms and 3 ms, and came out smaller (0.79 vs 0.85 MB).
``zstandard`` is already a core dependency (the ``.zst`` inputs).

One compressor and decompressor per thread: a ``zstandard`` context must not be used
by two threads at once, and a Dask worker runs its tasks in threads (``--dask``).
"""

from __future__ import annotations

import threading

import zstandard

_LEVEL = 1
_LOCAL = threading.local()


def pack_block(raw: bytes) -> bytes:
    """``raw`` compressed (a frame that records its size: :func:`unpack_block` needs no hint)."""
    c = getattr(_LOCAL, "c", None)
    if c is None:
        c = _LOCAL.c = zstandard.ZstdCompressor(level=_LEVEL)
    return c.compress(raw)


def unpack_block(packed: bytes) -> bytes:
    """What :func:`pack_block` was given."""
    d = getattr(_LOCAL, "d", None)
    if d is None:
        d = _LOCAL.d = zstandard.ZstdDecompressor()
    return d.decompress(packed)


__all__ = ["pack_block", "unpack_block"]
