#!/usr/bin/env python3
"""The parse floor: only iterate the input events with ijson; no rewrite, no output.

    python benchmarks/parse_floor.py RUN_DIR [--mode auto|float|exact]

Per rank file (found and ordered as ``merge`` finds them) this runs exactly
``ijson.items(open_trace(path), "traceEvents.item", use_float=True)`` and counts the
events. ``--mode auto`` (default) does what the merger itself does when yajl's float
path stops with "integer overflow" (integers beyond int64, e.g. 2026 Kineto's uint64
``Comms Id``, which every synthetic input has): it redoes that rank with
``use_float=False`` (exact Decimals). ``float`` fails instead; ``exact`` parses every
rank with ``use_float=False`` from the start.

Prints one JSON line: events, ranks, ranks that needed the exact re-parse, seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import ijson

from tracefuse_stream.read.discover import discover
from tracefuse_stream.read.sources import open_trace


def count_events(path: str, use_float: bool) -> int:
    reader = open_trace(path)
    try:
        n = 0
        for _ev in ijson.items(reader, "traceEvents.item", use_float=use_float):
            n += 1
        return n
    finally:
        reader.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--mode", choices=["auto", "float", "exact"], default="auto")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    events = 0
    fallbacks = 0
    files = [c.path for c in discover(a.inputs).candidates]
    for path in files:
        if a.mode == "exact":
            events += count_events(str(path), False)
            continue
        try:
            events += count_events(str(path), True)
        except ijson.JSONError as e:
            if a.mode == "float" or "integer overflow" not in str(e):
                raise
            fallbacks += 1
            events += count_events(str(path), False)
    print(
        json.dumps(
            {
                "events": events,
                "ranks": len(files),
                "exact_reparse_ranks": fallbacks,
                "mode": a.mode,
                "seconds": round(time.perf_counter() - t0, 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
