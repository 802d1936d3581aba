"""Find the input trace files and open them as decompressed byte streams.

Compression is detected from the first bytes (gzip ``1f 8b``, zstd ``28 b5 2f fd``),
never from the file name: tensorboard_trace_handler writes ``.pt.trace.json.gz``,
users rename files, and a ``.json`` that is really gzip must still work.

Readers count the *compressed* bytes they consumed (``RawCounter``), which is what a
progress bar over input sizes needs, and they turn decompression failures into
:class:`~tracefuse_stream.errors.InputError` naming the file.
"""
from __future__ import annotations

import io
import os
import zlib
from pathlib import Path
from typing import BinaryIO, Iterable, List, Optional, Sequence, Union

import zstandard

from .errors import InputError

try:  # ISA-L inflates 2-3x faster than zlib; optional at run time.
    from isal import igzip as _gzip_impl
except ImportError:  # pragma: no cover - exercised only without isal
    import gzip as _gzip_impl

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
TRACE_SUFFIXES = (".json", ".json.gz", ".json.zst", ".json.zstd")
READ_SIZE = 1 << 18

PathLike = Union[str, "os.PathLike[str]"]


def detect_compression(path: PathLike) -> str:
    """Return ``"gzip"``, ``"zstd"`` or ``"plain"`` from the file's first bytes."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head[:2] == GZIP_MAGIC:
        return "gzip"
    if head[:4] == ZSTD_MAGIC:
        return "zstd"
    return "plain"


def _is_trace_name(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES)


def find_inputs(paths: Sequence[PathLike]) -> List[Path]:
    """Expand files and directories into the ordered list of trace files.

    A directory contributes its ``*.json``, ``*.json.gz`` and ``*.json.zst`` files
    (not recursively), sorted by name; files given explicitly are taken as they
    are, whatever their name. Order matters: it is the rank fallback.
    """
    out: List[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted(
                c for c in path.iterdir() if c.is_file() and _is_trace_name(c.name)
            )
            if not found:
                raise InputError(
                    str(path), "directory contains no *.json, *.json.gz or *.json.zst trace files"
                )
            out.extend(found)
        elif path.exists():
            if not path.is_file():
                raise InputError(str(path), "not a regular file")
            out.append(path)
        else:
            raise InputError(str(path), "no such file or directory")
    return out


class RawCounter(io.RawIOBase):
    """A pass-through reader that counts bytes read from the underlying file."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        n = self._f.readinto(b)
        if n:
            self.count += n
        return n or 0

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.count += len(data)
        return data

    def close(self) -> None:
        self._f.close()
        super().close()


class TraceReader(io.RawIOBase):
    """Decompressed bytes of one trace file, with errors that name the file.

    ``tell_raw()`` reports compressed bytes consumed (for progress);
    ``offset`` reports decompressed bytes delivered (for error positions).
    """

    def __init__(
        self, path: PathLike, compression: Optional[str] = None, keep_tail: int = 0
    ) -> None:
        self.path = str(path)
        self.keep_tail = keep_tail
        self._tail: List[bytes] = []
        self._tail_len = 0
        try:
            self._file = open(path, "rb")
        except OSError as e:
            raise InputError(self.path, f"cannot open: {e.strerror or e}") from None
        self.compression = compression or detect_compression(path)
        self._raw = RawCounter(self._file)
        self.offset = 0
        if self.compression == "gzip":
            self._stream: BinaryIO = _gzip_impl.GzipFile(fileobj=self._raw, mode="rb")  # type: ignore[assignment]
        elif self.compression == "zstd":
            self._stream = zstandard.ZstdDecompressor().stream_reader(
                self._raw, read_size=READ_SIZE, read_across_frames=True
            )
        else:
            self._stream = self._raw  # type: ignore[assignment]

    def readable(self) -> bool:
        return True

    def tell_raw(self) -> int:
        return self._raw.count

    def read(self, n: int = -1) -> bytes:
        try:
            data = self._stream.read(n if n is not None and n >= 0 else -1)
        except (OSError, EOFError, zlib.error, zstandard.ZstdError, ValueError) as e:
            kind = {"gzip": "gzip", "zstd": "zstd"}.get(self.compression, "read")
            problem = f"{kind} stream is corrupt or truncated: {e}"
            if isinstance(e, EOFError):
                problem = f"{kind} stream ends early (truncated file)"
            raise InputError(self.path, problem, offset=self.offset) from None
        self.offset += len(data)
        if self.keep_tail and data:
            self._tail.append(data)
            self._tail_len += len(data)
            while len(self._tail) > 1 and self._tail_len - len(self._tail[0]) >= self.keep_tail:
                self._tail_len -= len(self._tail.pop(0))
        return data

    def tail(self) -> bytes:
        """The last ``keep_tail`` bytes delivered so far (for the trailer keys)."""
        return b"".join(self._tail)[-self.keep_tail :] if self.keep_tail else b""

    def readinto(self, b) -> int:  # type: ignore[override]
        data = self.read(len(b))
        n = len(data)
        b[:n] = data
        return n

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            self._file.close()
            super().close()


def open_trace(path: PathLike) -> TraceReader:
    """Open ``path`` for reading as decompressed JSON bytes."""
    return TraceReader(path)


def input_size(path: PathLike) -> int:
    """Size on disk in bytes (compressed size for compressed inputs)."""
    return os.path.getsize(path)


def iter_chunks(reader: BinaryIO, size: int = READ_SIZE) -> Iterable[bytes]:
    """Yield successive chunks until EOF."""
    while True:
        chunk = reader.read(size)
        if not chunk:
            return
        yield chunk


__all__ = [
    "detect_compression",
    "find_inputs",
    "open_trace",
    "TraceReader",
    "input_size",
    "iter_chunks",
]
