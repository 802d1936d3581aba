"""Compatibility re-export: the output stage lives in ``codecs`` (spliceable
compressed pieces, name -> codec), ``splice`` (pieces -> one stream), ``atomic``
(temporary file + rename, devices and FIFOs in place, stdout) and ``pipes``
(ending quietly on a closed pipe). Existing imports of ``write.writer`` keep working.
"""

from __future__ import annotations

import os  # noqa: F401  (tests patch ``writer.os.fsync``/``replace``: the os module itself)

from tracefuse_stream.write.atomic import AtomicOutput, FragmentDir, check_output_path, temp_prefix
from tracefuse_stream.write.codecs import (
    ACCEPTED_EXTENSIONS,
    FLUSH_BYTES,
    GZIP_LEVEL,
    ZSTD_LEVEL,
    ZSTD_THREADS,
    Piece,
    PieceWriter,
    _py_crc32_combine,  # noqa: F401  (tests import it from here)
    codec_for,
    is_special_file,
    piece_of,
)
from tracefuse_stream.write.splice import Splicer

__all__ = [
    "ACCEPTED_EXTENSIONS",
    "AtomicOutput",
    "FLUSH_BYTES",
    "FragmentDir",
    "GZIP_LEVEL",
    "Piece",
    "PieceWriter",
    "_py_crc32_combine",
    "Splicer",
    "ZSTD_LEVEL",
    "ZSTD_THREADS",
    "check_output_path",
    "codec_for",
    "is_special_file",
    "piece_of",
    "temp_prefix",
]
