#!/usr/bin/env python3
"""The tokenize-and-copy floor: the least work any exact JSON merger can do (issue 14).

    python benchmarks/tokenize_floor.py RUN_DIR [--out FILE]

Per rank file (found and ordered as ``merge`` finds them, decompressed by the package's
own reader): msgspec decodes the whole document with ``traceEvents`` typed as
``list[msgspec.Raw]`` (every byte validated as JSON, no event converted to Python
objects) and re-encodes that list one event per line. No rewrite, no output unless
``--out`` (then the encoded events are written, unjoined, to FILE). Holds one rank in
memory at a time: a floor, not a design.

Prints one JSON line: events, ranks, input bytes (decompressed), seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import List, Optional

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracefuse_stream.read.discover import discover  # noqa: E402
from tracefuse_stream.read.sources import TraceReader  # noqa: E402


class _Doc(msgspec.Struct):
    traceEvents: List[msgspec.Raw]


_decode_object = msgspec.json.Decoder(_Doc).decode
_decode_array = msgspec.json.Decoder(List[msgspec.Raw]).decode
_encoder = msgspec.json.Encoder()


def copy_rank(path: str) -> tuple:
    """(events, decompressed bytes, encoded bytes) of one rank file."""
    reader = TraceReader(path)
    try:
        data = reader.read()
    finally:
        reader.close()
    body = data.lstrip()
    events = _decode_array(body) if body[:1] == b"[" else _decode_object(body).traceEvents
    out = _encoder.encode_lines(events)
    return len(events), len(data), out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--out", help="write the re-encoded events here (default: discard)")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    files = [c.path for c in discover(a.inputs).candidates]
    events = nbytes = 0
    sink = open(a.out, "wb") if a.out else None
    try:
        for path in files:
            n, size, out = copy_rank(str(path))
            events += n
            nbytes += size
            if sink is not None:
                sink.write(out)
    finally:
        if sink is not None:
            sink.close()
    print(
        json.dumps(
            {
                "events": events,
                "ranks": len(files),
                "json_bytes": nbytes,
                "seconds": round(time.perf_counter() - t0, 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
