"""TraceReader.read(n): up to n bytes whatever the codec's block size, and the bytes
before a damaged spot always delivered before its error.

Why it matters: ijson hands yajl exactly what ``read`` returns, and yajl lexes a string
that spans two reads again from its start with every read (lloyd/yajl#202). When
``read`` returned one decompressed block (256 KiB) whatever was asked, one 100 MB
``args`` string took ~25 s per pass (merge and info made two): read(n) now fills n
(read/toplevel.py ``IJSON_BUF``; the rest of the giant-event path: tests/test_giant_event.py,
benchmarks/giant_event.py). Filling n must not change
what a damaged file yields: salvage keeps every byte before the damage.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path
from typing import List, Tuple

import pytest

from tracefuse_stream.errors import InputError
from tracefuse_stream.read.sources import TraceReader


def _read_all(path: Path, n: int) -> Tuple[bytes, str]:
    """Every byte ``read(n)`` delivers, and the error that ends it ("" at a clean end)."""
    r = TraceReader(path)
    parts: List[bytes] = []
    try:
        while True:
            data = r.read(n)
            assert len(data) <= n
            if not data:
                return b"".join(parts), ""
            parts.append(data)
    except InputError as e:
        return b"".join(parts), str(e)
    finally:
        r.close()


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_read_fills_what_is_asked(tmp_path: Path, suffix: str) -> None:
    text = b'{"traceEvents": [' + b",".join(b'{"ph":"X","ts":%d}' % i for i in range(200_000)) + b"]}"
    p = tmp_path / ("t" + suffix)
    p.write_bytes(gzip.compress(text) if suffix.endswith(".gz") else text)
    r = TraceReader(p)
    try:
        sizes = []
        while True:
            data = r.read(1 << 20)
            if not data:
                break
            sizes.append(len(data))
    finally:
        r.close()
    assert sum(sizes) == len(text) and all(s == 1 << 20 for s in sizes[:-1])


def test_damage_yields_the_same_bytes_and_error_whatever_the_read_size(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    text = (
        b'{"traceEvents": ['
        + b",".join(b'{"ph":"X","ts":%d}' % rng.randrange(10**9) for _ in range(300_000))
        + b"]}"
    )
    raw = bytearray(gzip.compress(text, mtime=0))
    at = rng.randrange(len(raw) // 4, 3 * len(raw) // 4)
    raw[at : at + 64] = bytes(rng.randrange(256) for _ in range(64))  # damage mid-stream
    p = tmp_path / "t.json.gz"
    p.write_bytes(bytes(raw))
    small = _read_all(p, 1000)
    assert small[1], "the damage must be an error"
    # (deflate may turn the damaged bytes into some wrong text before it notices: the
    # bytes delivered are what the codec gave, the same for every read size)
    assert 0 < len(small[0]) < len(text) and small[0][:1000] == text[:1000]
    for n in (1 << 16, 1 << 20, 1 << 24):
        assert _read_all(p, n) == small
