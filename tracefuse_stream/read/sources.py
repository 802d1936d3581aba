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
from typing import Any, BinaryIO, List, Optional, Union

from tracefuse_stream.errors import ErrorKind, InputError
from tracefuse_stream.read.zstdblocks import ZstdBudget


def _inflate_module() -> Any:
    """ISA-L's zlib (it inflates 2-3x faster than zlib; optional at run time), imported
    on the first compressed input: a run of plain files does not load it (start-up)."""
    try:
        from isal import isal_zlib

        return isal_zlib
    except ImportError:  # pragma: no cover - exercised only without isal
        return zlib


def _zstd_decompressobj() -> Any:
    import zstandard  # loaded on the first .zst input (start-up: plain files do not need it)

    return zstandard.ZstdDecompressor().decompressobj()


GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
TRACE_SUFFIXES = (".json", ".json.gz", ".json.zst", ".json.zstd")
READ_SIZE = 1 << 18
#: the most one decompression step hands out (see _Inflater): bounded memory for any ratio
MAX_OUT = 1 << 20

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


class RawCounter(io.RawIOBase):
    """A pass-through reader that counts bytes read from the underlying file."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self._f.readinto(b)  # type: ignore[attr-defined]  # an open binary file has it
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


SALVAGE_HINT = "use --salvage to merge the complete events before the damage"


class _Inflater:
    """Streaming gzip (multi-member) or zstd (multi-frame) decompression over a raw
    reader, delivering everything decodable before damage and THEN raising.

    Each :meth:`read` returns at most about :data:`MAX_OUT` bytes, whatever the
    compression ratio (a tiny file of repetitive JSON -- a "bomb" -- must not expand
    into hundreds of MB at once): zlib gets ``max_length`` (the rest of the input waits
    in ``unconsumed_tail``), zstd gets the input cut before the block that would pass
    the bound (:class:`~tracefuse_stream.read.zstdblocks.ZstdBudget`), and the
    tolerant byte-at-a-time feeding stops at the bound too. Raw input not yet fed
    waits in ``_pending``.
    """

    def __init__(self, raw: RawCounter, compression: str, tolerant: bool = False) -> None:
        self.raw = raw
        self.compression = compression
        # tolerant (salvage): stdlib zlib, whose state can be copied, so the bytes
        # just before damage can be recovered; zstd is fed in small pieces.
        self.tolerant = tolerant
        self._d = self._new()
        self._pending = b""  # raw bytes read but not yet fed to the decompressor
        self._bytewise = False  # tolerant: feeding ``_pending`` a byte at a time
        self._budget = ZstdBudget() if compression == "zstd" else None
        self._error: Optional[str] = None
        self.error_kind = ErrorKind.CORRUPT_STREAM  # until a clean end proves otherwise
        self._eof = False
        self.started = False  # at least one member/frame begun

    def _new(self) -> Any:
        if self.compression == "gzip":
            return (zlib if self.tolerant else _inflate_module()).decompressobj(31)
        return _zstd_decompressobj()

    def _member_end(self) -> None:
        """The current member/frame ended: what follows starts the next one."""
        data = self._d.unused_data
        self._d = self._new()
        self.started = False
        if data and self._budget is not None:
            self._budget = ZstdBudget()  # the walker stops at frame ends: resynchronise
        if data and self.compression == "gzip" and not data.strip(b"\x00"):
            data = b""  # zero padding after the last member
        self._pending = data + self._pending

    def _step(self, data: bytes) -> bytes:
        """Feed the start of ``data`` (the rest goes back to ``_pending``): at most
        ``MAX_OUT`` bytes of output (plus one zstd block)."""
        self.started = True
        if self.compression == "gzip":
            out = self._d.decompress(data, MAX_OUT)
            self._pending = self._d.unconsumed_tail
        else:
            n = len(data) if self._budget is None else self._budget.take(data, MAX_OUT)
            out = self._d.decompress(data[:n])
            self._pending = data[n:]
        if self._d.eof:
            if self.compression == "gzip":
                self._pending = b""  # all of it is in unused_data (zlib may repeat it in the tail)
            self._member_end()
        return out

    def _drain(self) -> bytes:
        """Output zlib still holds after its input ran out (bounded, like any step)."""
        if self.compression != "gzip" or self._d.eof:
            return b""
        try:
            out = self._d.decompress(b"", MAX_OUT)
        except Exception:
            return b""
        if self._d.eof:
            self._member_end()
        return out

    def read(self) -> bytes:
        """Next decompressed bytes (at most about ``MAX_OUT``); b"" at a clean end;
        raises ValueError(problem) once the data before a problem has been delivered."""
        while True:
            if self._error is not None:
                raise ValueError(self._error)
            if not self._pending:
                if self._eof:
                    return b""
                raw = self.raw.read(READ_SIZE)
                if not raw:
                    rest = self._drain() if self.started else b""
                    if rest:
                        return rest
                    self._eof = True
                    if self.started:
                        self._error = f"{self.compression} stream ends early (truncated file)"
                        self.error_kind = ErrorKind.TRUNCATED
                    continue
                self._pending = raw
            data, self._pending = self._pending, b""
            if not self.tolerant:
                try:
                    out = self._step(data)
                except Exception as e:  # zlib.error, IsalError, ZstdError, ...
                    self._error = f"{self.compression} stream is corrupt: {e}"
                    self._pending = b""
                    continue
            else:
                out = self._step_tolerant(data)
            if out:
                return out

    def _step_tolerant(self, data: bytes) -> bytes:
        """Feed ``data``; on damage keep every byte decodable before it, then fail."""
        if self.compression == "gzip" and not self._bytewise:
            saved, started = self._d.copy(), self.started
            try:
                return self._step(data)
            except Exception:
                self._d, self.started = saved, started
            # redo these bytes one at a time up to the damage
        self._bytewise = True
        out: List[bytes] = []
        size = 0
        i = 0
        while i < len(data) and size < MAX_OUT:
            try:
                chunk = self._step(data[i : i + 1])
            except Exception as e:
                self._error = f"{self.compression} stream is corrupt: {e}"
                self._pending = b""
                return b"".join(out)
            i += 1
            if self._pending:  # a member/frame ended inside this byte, or zlib held it back
                data = data[:i] + self._pending + data[i:]
                self._pending = b""
            out.append(chunk)
            size += len(chunk)
        self._pending = data[i:]
        if not self._pending and self.compression == "gzip":
            self._bytewise = False
        return b"".join(out)


def _zlib_decodable_length(path: str) -> int:
    """How many bytes a damaged gzip file decodes to before the damage (error path
    only: gives the exact position for the message)."""
    n = 0
    d = zlib.decompressobj(31)
    with open(path, "rb") as f:
        while True:
            raw = f.read(READ_SIZE)
            if not raw:
                return n
            try:
                while raw:
                    n += len(d.decompress(raw))
                    raw = d.unused_data if d.eof else b""
                    if d.eof:
                        d = zlib.decompressobj(31)
            except zlib.error:
                return n


class TraceReader(io.RawIOBase):
    """Decompressed bytes of one trace file, with errors that name the file.

    ``tell_raw()`` reports compressed bytes consumed (for progress); ``offset``
    reports decompressed bytes delivered (for error positions). A truncated or
    corrupt stream first delivers everything decodable, then raises InputError.
    """

    def __init__(
        self,
        path: PathLike,
        compression: Optional[str] = None,
        keep_tail: int = 0,
        tolerant: bool = False,
    ) -> None:
        self.path = str(path)
        self.keep_tail = keep_tail
        self._tail: List[bytes] = []
        self._tail_len = 0
        try:
            self._file = open(path, "rb")
        except OSError as e:
            kind = ErrorKind.MISSING if isinstance(e, FileNotFoundError) else ErrorKind.UNREADABLE
            raise InputError(self.path, f"cannot open: {e.strerror or e}", kind=kind) from None
        self.compression = compression or detect_compression(path)
        self._raw = RawCounter(self._file)
        self.offset = 0
        self._buf = b""
        self._inflater = (
            _Inflater(self._raw, self.compression, tolerant) if self.compression != "plain" else None
        )
        self._started = False
        self._held_nuls = b""  # NUL bytes at the end of the data so far: padding, if nothing follows
        self._pending: Optional[InputError] = None  # a problem met after bytes not yet delivered
        self.bom = False  # a UTF-8 byte order mark was skipped
        self.padding_nuls = 0  # NUL bytes after the JSON, dropped at the end

    def _clean(self, want: int = READ_SIZE) -> bytes:
        """Decompressed bytes without what strict JSON readers refuse but no data is in:
        a UTF-8 byte order mark (editors on Windows write one) and NUL padding at the
        end (files preallocated or zero-filled by a crash). NULs are held back until
        the next non-empty chunk shows they were not at the end; elsewhere they stay,
        and the JSON readers report them."""
        data = self._more(want)
        if not self._started and data:
            self._started = True
            if data.startswith(b"\xef\xbb\xbf"):
                data = data[3:]
                self.bom = True
                self.offset = 3  # offsets stay positions in the file's text
        if self._held_nuls:
            if not data:
                self.padding_nuls = len(self._held_nuls)
                self._held_nuls = b""
                return b""
            data, self._held_nuls = self._held_nuls + data, b""
        if data.endswith(b"\x00"):
            body = data.rstrip(b"\x00")
            self._held_nuls = data[len(body) :]
            data = body
            if not data:
                return self._clean(want)
        return data

    def readable(self) -> bool:
        return True

    def tell_raw(self) -> int:
        return self._raw.count

    def _more(self, want: int = READ_SIZE) -> bytes:
        if self._inflater is None:
            try:  # a plain file: what the caller wants in one read (no join of small reads)
                return self._raw.read(max(READ_SIZE, want))
            except OSError as e:
                raise InputError(
                    self.path, f"read error: {e.strerror or e}", offset=self.offset, kind=ErrorKind.UNREADABLE
                ) from None
        try:
            return self._inflater.read()
        except ValueError as e:
            offset = self.offset + len(self._buf)
            if self.compression == "gzip" and not self._inflater.tolerant:
                offset = _zlib_decodable_length(self.path)  # ISA-L may hold back a byte
            raise InputError(
                self.path, str(e), offset=offset, hint=SALVAGE_HINT, kind=self._inflater.error_kind
            ) from None
        except OSError as e:
            raise InputError(
                self.path, f"read error: {e.strerror or e}", offset=self.offset, kind=ErrorKind.UNREADABLE
            ) from None

    def read(self, n: int = -1) -> bytes:
        if self._pending is not None and not self._buf:
            error, self._pending = self._pending, None
            raise error
        if n is None or n < 0:
            parts = [self._buf]
            self._buf = b""
            while self._pending is None:
                more = self._clean()
                if not more:
                    break
                parts.append(more)
            data = b"".join(parts)
        else:
            # up to n bytes, not one decompressed block: ijson hands yajl what read returns,
            # and yajl's cost for a string spanning blocks grows with their count
            # (read/toplevel.py IJSON_BUF)
            parts, have = ([self._buf] if self._buf else []), len(self._buf)
            while have < n and self._pending is None:
                try:
                    more = self._clean(n - have)
                except InputError as e:
                    if not have:
                        raise
                    self._pending = e  # the bytes before the problem first, as one block did
                    break
                if not more:
                    break
                parts.append(more)
                have += len(more)
            buf = parts[0] if len(parts) == 1 else b"".join(parts)  # one join (or none): linear in n
            data, self._buf = (buf, b"") if len(buf) <= n else (buf[:n], buf[n:])
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

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        n = len(data)
        b[:n] = data
        return n

    def close(self) -> None:
        try:
            self._file.close()
        finally:
            super().close()


def open_trace(path: PathLike) -> TraceReader:
    """Open ``path`` for reading as decompressed JSON bytes."""
    return TraceReader(path)


def input_size(path: PathLike) -> int:
    """Size on disk in bytes (compressed size for compressed inputs)."""
    return os.path.getsize(path)


__all__ = [
    "detect_compression",
    "open_trace",
    "TraceReader",
    "input_size",
]
