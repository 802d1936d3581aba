"""Where a rank trace's text goes: a byte counter in front of a plain, gzip or zstd file.

Why: ``target_bytes`` is a size of uncompressed JSON, and compressed output must be
deterministic (no mtime or name in the gzip header) so that the same arguments give
byte-identical files.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any, BinaryIO, List, Optional

try:  # optional fast deflate (a project dependency on the usual platforms)
    from isal import igzip as _igzip
except ImportError:  # pragma: no cover - exercised only without isal
    _igzip = None  # type: ignore[assignment]

# --------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------
_H100 = (
    '"name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936,\n'
    '      "computeMajor": 9, "computeMinor": 0,\n'
    '      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,\n'
    '      "regsPerBlock": 65536, "warpSize": 32,\n'
    '      "sharedMemPerBlock": 49152, "numSms": 132\n'
    '    , "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448, '
    '"sharedMemPerMultiprocessor": 233472'
)


def _device_properties(n: int) -> str:
    items = [f'    {{\n      "id": {i}, {_H100}\n    }}' for i in range(n)]
    return "[\n" + ",\n".join(items) + "\n  ]"


class _Sink:
    """Uncompressed byte counter in front of a plain/gzip/zstd file (deterministic)."""

    def __init__(self, path: Path, compress: Optional[str], level: Optional[int]) -> None:
        self.raw: BinaryIO = open(path, "wb")
        self.bytes = 0
        self._closers: List[Any] = []
        if compress is None:
            self.f: Any = self.raw
        elif compress == "gzip":
            # mtime=0 and an empty name: the header carries nothing time- or path-dependent.
            # ISA-L (level 2) deflates ~5x faster than zlib -6, which matters for GB-sized
            # benchmark inputs; an explicit ``level`` means zlib's 1..9 scale.
            if level is None and _igzip is not None:
                self.f = _igzip.IGzipFile(filename="", mode="wb", fileobj=self.raw, mtime=0, compresslevel=2)
            else:
                self.f = gzip.GzipFile(
                    filename="",
                    mode="wb",
                    fileobj=self.raw,
                    mtime=0,
                    compresslevel=6 if level is None else level,
                )
            self._closers.append(self.f)
        elif compress == "zstd":
            import zstandard

            cctx = zstandard.ZstdCompressor(level=3 if level is None else level)
            self.f = cctx.stream_writer(self.raw, closefd=False)
            self._closers.append(self.f)
        else:
            raise ValueError(f"compress must be None, 'gzip' or 'zstd', not {compress!r}")

    def write(self, s: str) -> None:
        b = s.encode()
        self.bytes += len(b)
        self.f.write(b)

    def close(self) -> None:
        for c in self._closers:
            c.close()
        self.raw.close()
