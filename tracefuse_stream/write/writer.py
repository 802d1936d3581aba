"""Incremental, compressed, atomic output built from per-rank fragments.

Each rank is streamed into its own *fragment* file, already compressed with the
output's codec, so ranks can be produced by parallel workers and a failed rank can
be redone without touching the rest. The final file is then spliced together in
rank order: a head piece, the fragments with ``,`` pieces between them, and a tail.

Concatenation must give one valid stream for every codec:

* plain JSON: bytes concatenate.
* zstd: a file of several frames is a valid zstd stream (RFC 8878).
* gzip: Perfetto's loader reads only the first member of a multi-member gzip file,
  so fragments are raw DEFLATE ended with a sync flush (byte aligned, not final);
  the splicer writes one gzip header, the raw pieces, a final empty block, and the
  CRC-32 combined from the pieces' CRCs (as pigz does). The result is ONE member.

The output is written to a temporary file beside the target and renamed into place
only when complete, so an interrupted merge never leaves a file under the output
name.
"""
from __future__ import annotations

import errno
import io
import os
import shutil
import struct
import sys
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, List, Optional

import zstandard

from tracefuse_stream.errors import OutputError

try:  # ISA-L deflate is several times faster than zlib at similar ratios.
    from isal import isal_zlib as _zlib  # type: ignore

    _HAVE_ISAL = True
except ImportError:  # pragma: no cover
    _zlib = zlib  # type: ignore
    _HAVE_ISAL = False

GZIP_LEVEL = 1 if _HAVE_ISAL else 6  # isal level 1 ~ zlib level 6 in ratio
ZSTD_LEVEL = 3
# One zstd worker thread per piece: compression runs beside the (single-threaded)
# parse/rewrite loop instead of inside it (main-thread CPU for 200 MB of JSON: 0.71 s
# -> 0.07 s). The frames are ordinary zstd frames and stay spliceable.
ZSTD_THREADS = 1
# 1 MB jobs (zstd's default is several times the window): the worker's buffers stay small
_ZSTD_PARAMS = zstandard.ZstdCompressionParameters.from_level(
    ZSTD_LEVEL, threads=ZSTD_THREADS, job_size=1 << 20
)
FLUSH_BYTES = 1 << 20


def codec_for(path: str) -> str:
    """Output codec from the file name: ``.gz`` gzip, ``.zst``/``.zstd`` zstd, else plain."""
    name = path.lower()
    if name.endswith(".gz"):
        return "gzip"
    if name.endswith((".zst", ".zstd")):
        return "zstd"
    return "plain"


def _crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    if _HAVE_ISAL:
        return _zlib.crc32_combine(crc1, crc2, len2)
    return _py_crc32_combine(crc1, crc2, len2)  # pragma: no cover


def _gf2_times(mat: List[int], vec: int) -> int:
    s = 0
    i = 0
    while vec:
        if vec & 1:
            s ^= mat[i]
        vec >>= 1
        i += 1
    return s


def _gf2_square(mat: List[int]) -> List[int]:
    return [_gf2_times(mat, mat[n]) for n in range(32)]


def _py_crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """zlib's crc32_combine (GF(2) matrix method), for when isal is missing."""
    if len2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << n for n in range(31)]
    even = _gf2_square(odd)
    odd = _gf2_square(even)
    while True:
        even = _gf2_square(odd)
        if len2 & 1:
            crc1 = _gf2_times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = _gf2_square(even)
        if len2 & 1:
            crc1 = _gf2_times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return crc1 ^ crc2


@dataclass
class Piece:
    """A finished compressed unit: where it is and what the splicer needs."""

    path: Optional[str]
    data: Optional[bytes]
    crc: int
    length: int  # uncompressed bytes
    size: int  # compressed bytes

    @property
    def empty(self) -> bool:
        return self.length == 0


class PieceWriter:
    """Compresses a stream of bytes into one spliceable piece (file or memory)."""

    def __init__(self, codec: str, path: Optional[str] = None, discard: bool = False) -> None:
        self.codec = codec
        self.path = path
        self.discard = discard  # count and compress, keep nothing (dry runs)
        try:
            self._f: Optional[BinaryIO] = open(path, "wb") if path else None
        except OSError as e:
            raise OutputError(f"{path}: cannot create a temporary fragment: {e.strerror or e}") from None
        self._mem: List[bytes] = []
        self.crc = 0
        self.length = 0
        self.size = 0
        if codec == "gzip":
            self._c = _zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -15)
        elif codec == "zstd":
            self._c = zstandard.ZstdCompressor(compression_params=_ZSTD_PARAMS).compressobj()
        else:
            self._c = None

    def _out(self, data: bytes) -> None:
        if not data:
            return
        self.size += len(data)
        if self._f is not None:
            try:
                self._f.write(data)
            except OSError as e:
                raise OutputError(
                    f"{self.path}: cannot write a temporary fragment: {e.strerror or e}"
                ) from None
        elif not self.discard:
            self._mem.append(data)

    def write(self, data: bytes) -> None:
        if not data:
            return
        self.length += len(data)
        if self.codec == "gzip":
            self.crc = zlib.crc32(data, self.crc)
            self._out(self._c.compress(data))
        elif self.codec == "zstd":
            self._out(self._c.compress(data))
        else:
            self._out(data)

    def finish(self) -> Piece:
        if self.length:
            if self.codec == "gzip":
                self._out(self._c.flush(zlib.Z_SYNC_FLUSH))
            elif self.codec == "zstd":
                self._out(self._c.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH))
        if self._f is not None:
            try:
                self._f.close()
            except OSError as e:
                raise OutputError(
                    f"{self.path}: cannot write a temporary fragment: {e.strerror or e}"
                ) from None
            self._f = None
        return Piece(
            path=self.path,
            data=None if self.path else b"".join(self._mem),
            crc=self.crc,
            length=self.length,
            size=self.size,
        )

    def abort(self) -> None:
        if self._f is not None:
            try:
                self._f.close()
            except OSError:
                pass
            self._f = None
        if self.path:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def piece_of(codec: str, data: bytes) -> Piece:
    """A small in-memory piece (head, separators, tail)."""
    w = PieceWriter(codec)
    w.write(data)
    return w.finish()


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
                except OSError as e:
                    raise OutputError(
                        f"{self.name}: cannot read back fragment {piece.path}: {e.strerror or e}"
                    ) from None
        if self.codec == "gzip":
            self.crc = _crc32_combine(self.crc, piece.crc, piece.length)
        self.length += piece.length

    def _copy_in_kernel(self, piece: Piece) -> bool:
        """Splice a fragment file with ``copy_file_range`` (no copy through Python;
        a reflink on filesystems that have them). False: use the portable path."""
        copy = getattr(os, "copy_file_range", None)
        if copy is None or piece.path is None or type(self.out) not in (io.BufferedWriter, io.FileIO):
            return False  # only a real file we opened (not stdout, not a wrapper)
        try:
            dst = self.out.fileno()
        except (AttributeError, OSError, ValueError):
            return False
        try:
            self.out.flush()
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
            return False  # EXDEV, EINVAL, ENOSYS...: fall back (nothing copied yet)
        if done != piece.size:
            raise OutputError(f"{self.name}: fragment {piece.path} is shorter than written")
        self.size += done
        return True

    def finish(self) -> None:
        if self.codec == "gzip":
            c = _zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -15)
            self._w(c.flush(zlib.Z_FINISH))  # a final, empty block
            self._w(struct.pack("<II", self.crc & 0xFFFFFFFF, self.length & 0xFFFFFFFF))
        if self.out is None:
            return
        try:
            self.out.flush()
        except OSError as e:
            raise OutputError(f"{self.name}: cannot write output: {e.strerror or e}") from None


class AtomicOutput:
    """A temporary file beside ``target`` that becomes ``target`` only on commit.

    ``target == "-"`` streams to stdout instead (nothing to rename).
    """

    def __init__(self, target: str, *, force: bool = False, inputs: Iterable[str] = ()) -> None:
        self.target = target
        self.stdout = target == "-"
        self.tmp_path: Optional[str] = None
        self.file: Optional[BinaryIO] = None
        if self.stdout:
            self.file = sys.stdout.buffer
            self.frag_parent = None
            return
        tpath = Path(target)
        check_output_path(tpath, force=force, inputs=inputs)
        parent = tpath.parent if str(tpath.parent) else Path(".")
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{tpath.name}.", suffix=".tracefuse-tmp", dir=parent)
        except OSError as e:
            raise OutputError(f"{target}: cannot create a file in {parent}: {e.strerror or e}") from None
        self.tmp_path = tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a normal file is wanted
        self.file = os.fdopen(fd, "wb", buffering=1 << 20)
        self.frag_parent = str(parent)

    def commit(self) -> None:
        if self.stdout:
            return
        assert self.file is not None and self.tmp_path is not None
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            os.replace(self.tmp_path, self.target)
        except OSError as e:
            self.abort()
            raise OutputError(f"{self.target}: cannot finish writing: {e.strerror or e}") from None
        self.tmp_path = None

    def abort(self) -> None:
        if self.stdout:
            return
        if self.file is not None:
            try:
                self.file.close()
            except OSError:
                pass
        if self.tmp_path:
            try:
                os.unlink(self.tmp_path)
            except OSError:
                pass
            self.tmp_path = None


def check_output_path(target: Path, *, force: bool, inputs: Iterable[str]) -> None:
    """Refuse to overwrite an input (ever) or an existing output (without ``force``)."""
    for inp in inputs:
        try:
            if target.exists() and os.path.samefile(target, inp):
                raise OutputError(f"{target}: refusing to write over an input file")
        except OSError:
            pass
        if os.path.abspath(target) == os.path.abspath(inp):
            raise OutputError(f"{target}: refusing to write over an input file")
    if target.exists() and not force:
        raise OutputError(f"{target}: already exists (use --force to overwrite)")
    if target.exists() and target.is_dir():
        raise OutputError(f"{target}: is a directory")


class FragmentDir:
    """A private temporary directory for rank fragments, removed on close."""

    def __init__(self, parent: Optional[str]) -> None:
        try:
            self.path = tempfile.mkdtemp(prefix=".tracefuse-frag-", dir=parent)
        except OSError as e:
            raise OutputError(f"cannot create a temporary directory in {parent or tempfile.gettempdir()}: {e}") from None

    def file_for(self, rank: int, attempt: int = 0) -> str:
        return os.path.join(self.path, f"rank{rank}.{attempt}.part")

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
