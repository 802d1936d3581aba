"""File-level checks that no event pass can see: gzip members and an oversized header.

Perfetto's importer inflates only the FIRST member of a gzip file (it reports the
JSON as incomplete: google/perfetto#872), while Python's readers -- and so the
event passes -- read all members; so the members are counted separately. A
``tracefuse`` header too big for the head/tail regions the main pass keeps is read
by a separate exact parse of just that key.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from tracefuse_stream.read.sources import PathLike
from tracefuse_stream.read.toplevel import to_plain
from tracefuse_stream.verify.passes import run_exact_pass


def gzip_members(path: PathLike) -> Tuple[int, Optional[int], int]:
    """(number of gzip members, decompressed bytes of the first member, total).

    Inflating again costs a few percent of the parse."""
    try:
        from isal import isal_zlib as zl
    except ImportError:  # pragma: no cover - without isal
        import zlib as zl  # type: ignore[no-redef]
    members, first_end, out = 1, None, 0
    d = zl.decompressobj(31)
    with open(path, "rb") as f:
        while True:
            data = f.read(1 << 20)
            if not data:
                break
            while data:
                if d.eof:
                    if first_end is None:
                        first_end = out
                    members += 1
                    d = zl.decompressobj(31)
                try:  # at most 1 MB at a time: a tiny file may expand a thousandfold
                    out += len(d.decompress(data, 1 << 20))
                except Exception:  # corrupt data: the parse pass reports it
                    return members, first_end, out
                data = d.unused_data if d.eof else d.unconsumed_tail
    return members, first_end, out


def header_pass(path: PathLike) -> Optional[Dict[str, Any]]:
    """Fallback: a separate parse for a ``tracefuse`` header too big for the head/tail buffers."""
    found: List[Any] = []
    res = run_exact_pass(path, found.extend, capture=False, prefix="tracefuse")
    if res.error is None and found and isinstance(found[0], dict):
        return to_plain(found[0])
    return None


__all__ = ["gzip_members", "header_pass"]
