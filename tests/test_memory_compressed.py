"""Bounded memory for compressed inputs of any ratio ("bombs").

A trace of one event repeated ~1.1 million times (~120 MB of JSON) compresses to
~400 KB with gzip and ~10 KB with zstd. Decompressing a whole read at once turned
each 256 KB read into hundreds of MB (measured before the fix: 195 MB peak RSS for
the gzip file, 318 MB for the zstd one, 36 MB for the same JSON uncompressed). Each
test here merges such a file in a fresh subprocess and compares its peak RSS with
the same process merging a tiny trace: decompression may add a few MB, not the
expansion of a read. The event counts the merge reports are checked too (a bounded
reader that lost data would also be "small").

Peak RSS: the wrapper process below runs the CLI and reports
``getrusage(RUSAGE_CHILDREN).ru_maxrss`` -- the largest RSS of its (only) child, so
nothing else of the pytest process counts.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import zstandard

EVENT = b'{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":1.5,"dur":2.25,"args":{"External id":7}}'
HEAD = b'{"baseTimeNanoseconds":1700000000000000000,"traceEvents":[\n'
TAIL = b"\n]}\n"
N_EVENTS = 1_100_000  # ~120 MB of JSON
#: what decompressing may add to the peak RSS of a tiny merge. Unbounded reads added
#: 160-280 MB here (60 MB for the smaller salvage case); bounded ones (1 MB per step) 4-15 MB.
EXTRA_MB = 32
SALVAGE_EVENTS = 200_000  # the salvage reader frames events in Python: ~10 s for these

_WRAPPER = """
import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], capture_output=True)
sys.stderr.buffer.write(p.stderr)
sys.stdout.buffer.write(p.stdout)
print("\\nPEAK_KB", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "RC", p.returncode)
"""


def _write_bomb(path: Path, compression: str, n_events: int = N_EVENTS, truncate: int = 0) -> None:
    """Write the repeated-event trace, streaming (never the whole JSON in memory)."""
    with open(path, "wb") as raw:
        if compression == "gzip":
            f: Any = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0)
        else:
            f = zstandard.ZstdCompressor(level=3).stream_writer(raw, closefd=False)
        f.write(HEAD)
        block = b",\n".join([EVENT] * 10_000)
        for i in range(n_events // 10_000):
            f.write((b",\n" if i else b"") + block)
        f.write(TAIL)
        f.close()
    if truncate:
        with open(path, "r+b") as raw:
            raw.truncate(os.path.getsize(path) - truncate)


def _merge_peak(args: List[str], tmp: Path, rc: int = 0) -> Tuple[int, Dict[str, Any]]:
    """(peak RSS in KB, the JSON summary) of one CLI merge in a fresh process."""
    env = dict(os.environ)
    env.pop("TRACEFUSE_VERIFY", None)  # a memory measurement of the merge alone
    cmd = [sys.executable, "-c", _WRAPPER, sys.executable, "-m", "tracefuse_stream", "merge", *args]
    cmd += ["-o", str(tmp / "out.json.gz"), "--force", "-q", "-j", "1", "--json-summary"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    body, _, last = p.stdout.rpartition("PEAK_KB")
    peak, _, code = last.split()
    assert code == str(rc), p.stderr
    return int(peak), json.loads(body)


@pytest.fixture(scope="module")
def baseline_kb(tmp_path_factory: pytest.TempPathFactory) -> int:
    """Peak RSS of merging a tiny trace: the interpreter, the package, the codecs."""
    tmp = tmp_path_factory.mktemp("tiny")
    tiny = tmp / "tiny.json"
    tiny.write_bytes(HEAD + EVENT + TAIL)
    return _merge_peak([str(tiny)], tmp)[0]


@pytest.mark.parametrize("compression", ["gzip", "zstd"])
def test_compressed_bomb_merges_in_bounded_memory(tmp_path: Path, baseline_kb: int, compression: str) -> None:
    path = tmp_path / f"bomb.json.{'gz' if compression == 'gzip' else 'zst'}"
    _write_bomb(path, compression)
    assert path.stat().st_size < 1_000_000  # a real bomb: > 100x smaller than its JSON
    peak, summary = _merge_peak([str(path)], tmp_path)
    (rank,) = summary["ranks"]
    assert rank["events_in"] == N_EVENTS and rank["dropped"] == 0
    assert rank["json_bytes_in"] == len(HEAD) + len(TAIL) + N_EVENTS * len(EVENT) + (N_EVENTS - 1) * 2
    extra_mb = (peak - baseline_kb) / 1024
    assert extra_mb < EXTRA_MB, (
        f"{compression} bomb: peak {peak / 1024:.0f} MB, {extra_mb:.0f} MB over a tiny merge"
    )


def test_truncated_zstd_bomb_salvaged_in_bounded_memory(tmp_path: Path, baseline_kb: int) -> None:
    """--salvage reads a damaged stream with the tolerant inflater (byte at a time):
    bounded too, and every event before the cut is merged."""
    path = tmp_path / "bomb.json.zst"
    _write_bomb(path, "zstd", n_events=SALVAGE_EVENTS, truncate=3)
    peak, summary = _merge_peak([str(path), "--salvage"], tmp_path, rc=4)  # 4: salvaged
    (rank,) = summary["ranks"]
    assert rank["salvage"] is not None and "truncated" in json.dumps(rank["salvage"])
    # the cut loses the last (partial) block: at most 128 KB of JSON, ~1200 events
    assert SALVAGE_EVENTS - 1300 < rank["events_in"] < SALVAGE_EVENTS
    extra_mb = (peak - baseline_kb) / 1024
    assert extra_mb < EXTRA_MB, (
        f"salvaged zstd bomb: peak {peak / 1024:.0f} MB, {extra_mb:.0f} MB over a tiny merge"
    )


def _inflate_all(data: bytes, compression: str, tolerant: bool) -> Tuple[bytes, int, str]:
    """(everything a TraceReader's inflater delivers, its largest single read, the error)."""
    import io

    from tracefuse_stream.read.sources import RawCounter, _Inflater

    inf = _Inflater(RawCounter(io.BytesIO(data)), compression, tolerant)
    parts: List[bytes] = []
    try:
        while True:
            b = inf.read()
            if not b:
                return b"".join(parts), max(map(len, parts), default=0), ""
            parts.append(b)
    except ValueError as e:
        return b"".join(parts), max(map(len, parts), default=0), str(e)


def _zstd_streams() -> List[Tuple[str, bytes, bytes]]:
    import random
    import struct

    rnd = random.Random(7).randbytes(300_000)  # incompressible: raw blocks
    big = b"[" + b" " * 10_000_000 + b"]"  # a bomb: RLE / tiny compressed blocks
    plain = zstandard.ZstdCompressor(level=19).compress(big)
    checked = zstandard.ZstdCompressor(level=3, write_checksum=True, write_content_size=False).compress(rnd)
    skippable = struct.pack("<II", 0x184D2A5A, 5) + b"hello" + struct.pack("<II", 0x184D2A50, 0)
    return [
        ("one frame", plain, big),
        ("frames, checksums, skippable frames", plain + checked + skippable + plain, big + rnd + big),
        ("skippable first", skippable + checked, rnd),
    ]


@pytest.mark.parametrize("tolerant", [False, True], ids=["strict", "salvage"])
def test_zstd_reads_are_bounded_and_exact(tolerant: bool) -> None:
    """Every read is at most 1 MB plus one block; frames of every kind arrive whole."""
    from tracefuse_stream.read.sources import MAX_OUT
    from tracefuse_stream.read.zstdblocks import BLOCK_MAX

    for what, data, want in _zstd_streams():
        out, largest, err = _inflate_all(data, "zstd", tolerant)
        assert (out == want, err) == (True, ""), what
        assert largest <= MAX_OUT + BLOCK_MAX, what
    out, largest, err = _inflate_all(_zstd_streams()[0][1][:-3], "zstd", tolerant)
    assert err == "zstd stream ends early (truncated file)" and 0 < len(out) < 10_000_002


@pytest.mark.parametrize("tolerant", [False, True], ids=["strict", "salvage"])
def test_gzip_reads_are_bounded_and_exact(tolerant: bool) -> None:
    import random

    from tracefuse_stream.read.sources import MAX_OUT

    big = b"[" + b" " * 10_000_000 + b"]"
    rnd = random.Random(7).randbytes(300_000)
    g1, g2 = gzip.compress(big, mtime=0), gzip.compress(rnd, mtime=0)
    out, largest, err = _inflate_all(g1 + g2 + g1 + b"\0" * 100, "gzip", tolerant)
    assert (out == big + rnd + big, err) == (True, "")
    assert largest <= MAX_OUT
    out, largest, err = _inflate_all((g1 + g2)[:-1000], "gzip", tolerant)
    assert err == "gzip stream ends early (truncated file)" and len(big) < len(out) < len(big) + len(rnd)
