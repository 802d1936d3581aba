"""Splicing compressed pieces, in order, into the one output stream.

See ``codecs`` for why the pieces of every codec concatenate into a valid stream; the
splicer adds the gzip header and trailer (CRC-32 combined from the pieces') and copies
fragment files in the kernel where it can.

A reader that closes the pipe (``-o - | head``) surfaces as ``BrokenPipeError``, not
as an :class:`OutputError`: the command line ends quietly then (``write.pipes``).
"""

from __future__ import annotations

import errno
import io
import os
import stat
import struct
import zlib
from typing import BinaryIO, Optional

from tracefuse_stream.errors import OutputError
from tracefuse_stream.write.codecs import GZIP_LEVEL, Piece, _crc32_combine, _zlib


class Splicer:
    """Writes pieces, in order, as one valid output stream of ``codec``."""

    def __init__(self, out: Optional[BinaryIO], codec: str, name: str = "output") -> None:
        self.out = out  # None: only count (dry runs)
        self.codec = codec
        self.name = name
        self.crc = 0
        self.length = 0
        self.size = 0
        if codec == "gzip":
            # magic, deflate, no flags, mtime 0, xfl 0, OS unknown: deterministic bytes
            self._w(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")

    def _w(self, data: bytes) -> None:
        if self.out is None:
            self.size += len(data)
            return
        try:
            self.out.write(data)
        except BrokenPipeError:
            raise  # the reader went away (``| head``): not a write error, see ``pipes``
        except OSError as e:
            raise OutputError(f"{self.name}: cannot write output: {e.strerror or e}") from None
        self.size += len(data)

    def add(self, piece: Piece) -> None:
        if piece.empty:
            return
        if self.out is None:
            self.size += piece.size
        elif piece.data is not None:
            self._w(piece.data)
        else:
            assert piece.path
            if not self._copy_in_kernel(piece):
                try:
                    with open(piece.path, "rb") as f:
                        while True:
                            chunk = f.read(1 << 20)
                            if not chunk:
                                break
                            self._w(chunk)
                except BrokenPipeError:
                    raise
                except OSError as e:
                    raise OutputError(
                        f"{self.name}: cannot read back fragment {piece.path}: {e.strerror or e}"
                    ) from None
        if self.codec == "gzip":
            self.crc = _crc32_combine(self.crc, piece.crc, piece.length)
        self.length += piece.length

    def _copy_in_kernel(self, piece: Piece) -> bool:
        """Splice a fragment file with ``copy_file_range`` (no copy through Python;
        a reflink on filesystems that have them). False: use the portable path.

        ``copy_file_range`` may fail after some calls already copied part of the
        fragment (EINVAL/EXDEV on a later range, a filesystem that gives up midway). The
        portable path then copies the WHOLE fragment, so the output is first cut back
        to where this fragment began: no byte is ever written twice."""
        copy = getattr(os, "copy_file_range", None)
        out = self.out
        if (
            copy is None
            or piece.path is None
            or out is None
            or type(out) not in (io.BufferedWriter, io.FileIO)
        ):
            return False  # only a real file we opened (not stdout, not a wrapper)
        try:
            dst = out.fileno()
            if not stat.S_ISREG(os.fstat(dst).st_mode):
                return False  # a FIFO or device written in place: plain writes
        except (AttributeError, OSError, ValueError):
            return False
        try:
            out.flush()
            start = os.lseek(dst, 0, os.SEEK_CUR)  # where this fragment begins in the output
        except OSError as e:
            raise OutputError(f"{self.name}: cannot write output: {e.strerror or e}") from None
        try:
            with open(piece.path, "rb") as f:
                src = f.fileno()
                left = piece.size
                while left > 0:
                    n = copy(src, dst, min(left, 1 << 30))
                    if n == 0:
                        break
                    left -= n
                done = piece.size - left
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG):
                raise OutputError(f"{self.name}: cannot write output: {e.strerror or e}") from None
            self._rewind(out, dst, start)
            return False  # EXDEV, EINVAL, ENOSYS...: fall back from the fragment's start
        if done != piece.size:
            raise OutputError(f"{self.name}: fragment {piece.path} is shorter than written")
        self.size += done
        return True

    def _rewind(self, out: BinaryIO, dst: int, start: int) -> None:
        """Cut the output back to ``start`` (drop a partly copied fragment) and write
        on from there: through ``out.seek`` so the buffered writer knows its position."""
        try:
            if os.lseek(dst, 0, os.SEEK_CUR) != start:
                os.ftruncate(dst, start)
            out.seek(start)
        except OSError as e:
            raise OutputError(f"{self.name}: cannot write output: {e.strerror or e}") from None

    def finish(self) -> None:
        if self.codec == "gzip":
            c = _zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -15)
            self._w(c.flush(zlib.Z_FINISH))  # a final, empty block
            self._w(struct.pack("<II", self.crc & 0xFFFFFFFF, self.length & 0xFFFFFFFF))
        if self.out is None:
            return
        try:
            self.out.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            raise OutputError(f"{self.name}: cannot write output: {e.strerror or e}") from None
