#!/usr/bin/env python3
"""Where the time of one rank goes: per-event cost of each stage of the streaming pass.

    python benchmarks/stages.py RANK_FILE_OR_RUN_DIR [--reps 5] [--codec plain|gzip|zstd]

Rebuilds the two readers of ``tracefuse_stream.pipeline.stream`` stage by stage from the
package's own pieces, each stage cumulative, on the decompressed file held in memory
(no disk noise):

* ``batched`` (the normal path): ``EventBatches`` (validated ~1 MB batches, one msgspec
  decode each) -> ``RankRewriter.feed_batch`` -> one msgspec ``encode_lines`` per
  batch (``BatchedReader.encode_batch``) -> 1 MB buffer -> ``PieceWriter``;
* ``exact`` (the fallback for inputs the batch stage hands back): ``ijson.items``
  (``use_float=False``) -> ``feed_batch`` per event -> ``dumps_exact`` (orjson) ->
  buffer -> writer.

The cyclic GC is off during each measurement, as in ``stream_rank``.

It reports CPU microseconds per event (``time.process_time``; the minimum and the
median of ``--reps`` interleaved repetitions) and each stage's share of its pipeline.
"""

from __future__ import annotations

import argparse
import gc
import io
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List

import ijson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracefuse_stream.exactjson import dumps_exact, encode_lines  # noqa: E402
from tracefuse_stream.read.batches import EventBatches  # noqa: E402
from tracefuse_stream.read.discover import discover  # noqa: E402
from tracefuse_stream.read.sources import TraceReader  # noqa: E402
from tracefuse_stream.rewrite.rules import RankRewriter  # noqa: E402
from tracefuse_stream.select.filters import EventFilter  # noqa: E402
from tracefuse_stream.write.writer import FLUSH_BYTES, PieceWriter  # noqa: E402

LEVELS = ["parse", "+feed", "+encode", "+write"]


class _Mem(io.BytesIO):
    """The decompressed file in memory, with the reader methods the stage uses."""

    def tell_raw(self) -> int:
        return self.tell()


def _events(data: bytes, reader: str) -> Iterable[List]:
    if reader == "batched":
        return EventBatches(_Mem(data), "object")  # type: ignore[arg-type]
    items = ijson.items(io.BytesIO(data), "traceEvents.item", use_float=False, buf_size=1 << 18)
    return ([ev] for ev in items)


def _encode_batched(kept: List) -> bytes:
    """What ``BatchedReader.encode_batch`` does: one msgspec call, one event a line."""
    return encode_lines(kept)[:-1].replace(b"\n", b",\n")


def _encode_exact(kept: List) -> bytes:
    """What ``ExactReader.encode_batch`` does: orjson per event, exact numbers."""
    return b",\n".join(dumps_exact(ev) for ev in kept)


def run_stage(data: bytes, reader: str, level: int, codec: str) -> int:
    """Run ``reader`` up to ``level`` (0 parse .. 3 write); return the event count."""
    rw = RankRewriter(1, 1_200_000_123, EventFilter(include_pyfunc=True), 0)
    encode: Callable = _encode_batched if reader == "batched" else _encode_exact
    w = PieceWriter(codec, None, discard=True)
    buf = bytearray()
    n = 0
    first = True
    for batch in _events(data, reader):
        n += len(batch)
        if level == 0:
            continue
        kept = rw.feed_batch(batch)
        if not kept or level == 1:
            continue
        b = encode(kept)
        if level == 2:
            continue
        if first:
            first = False
        else:
            buf += b",\n"
        buf += b
        if len(buf) >= FLUSH_BYTES:
            w.write(buf)
            buf.clear()
    if level == 3:
        w.write(buf)
        w.finish()
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", help="one rank file, or a run directory (its first file is used)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--codec", choices=["plain", "gzip", "zstd"], default="plain")
    a = ap.parse_args(argv)
    path = discover([a.path]).candidates[0].path
    r = TraceReader(str(path))
    data = r.read()
    r.close()
    print(f"{path}: {len(data) / 1e6:.1f} MB decompressed; codec {a.codec}")
    times: Dict[tuple, List[float]] = {}
    counts: Dict[str, int] = {}
    for _ in range(a.reps):
        for reader in ("batched", "exact"):
            for level in range(len(LEVELS)):
                gc.disable()
                t0 = time.process_time()
                counts[reader] = run_stage(data, reader, level, a.codec)
                times.setdefault((reader, level), []).append(time.process_time() - t0)
                gc.enable()
    for reader in ("batched", "exact"):
        n = counts[reader]
        full = statistics.median(times[(reader, len(LEVELS) - 1)])
        print(f"\n{reader}: {n:,} events; CPU us/event (min / median), cumulative, and stage share")
        prev = 0.0
        for level, name in enumerate(LEVELS):
            ts = times[(reader, level)]
            med = statistics.median(ts)
            print(
                f"  {name:8s} {min(ts) / n * 1e6:6.2f} / {med / n * 1e6:6.2f}   "
                f"stage {(med - prev) / n * 1e6:5.2f} us  {100 * (med - prev) / full:4.0f}%"
            )
            prev = med
    b = statistics.median(times[("batched", 3)])
    e = statistics.median(times[("exact", 3)])
    print(f"\nbatched / exact pipeline CPU time: {b / e:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
