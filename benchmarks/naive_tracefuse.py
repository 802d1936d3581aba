#!/usr/bin/env python3
"""A naive, load-everything merger: the baseline the streaming merger is measured against.

    python benchmarks/naive_tracefuse.py RUN_DIR -o merged.json.gz

It works the way TraceLens' ``TraceFuse`` is described to work (written from that
description, not from its code):

1. every rank file is read whole and parsed with ``orjson.loads``; all events of all
   ranks are appended to one Python list that lives until the end;
2. pid and id offsets are derived from the *first* file (largest integer pid and
   largest flow/correlation id seen there, rounded up), and every event of rank ``r``
   gets ``pid + r * pid_offset``, ``id + r * id_offset`` (also ``args.correlation`` and
   ``args["External id"]``) and ``args.rank = r``; ``python_function`` events are kept
   (pass ``--drop-pyfunc`` to drop them) so it does the same work as
   ``merge --include-pyfunc``;
3. the whole trace is written with ``json.dump(..., indent=4)`` through
   ``gzip.open(..., compresslevel=9)``.

It is deliberately simple (its memory grows with the input); it exists only to be timed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import orjson

from tracefuse_stream.read.discover import discover
from tracefuse_stream.read.sources import open_trace

LINK_ARGS = ("correlation", "External id")


def _round_up(n: int) -> int:
    p = 1
    while p <= n:
        p *= 10
    return p


def load(path: Path) -> dict:
    reader = open_trace(path)  # plain/gzip/zstd by magic bytes
    try:
        return orjson.loads(reader.read())
    finally:
        reader.close()


def offsets_from(events: list) -> tuple:
    max_pid = 0
    max_id = 0
    for ev in events:
        pid = ev.get("pid")
        if type(pid) is int and pid > max_pid:
            max_pid = pid
        i = ev.get("id")
        if type(i) is int and i > max_id:
            max_id = i
        args = ev.get("args")
        if type(args) is dict:
            for k in LINK_ARGS:
                v = args.get(k)
                if type(v) is int and v > max_id:
                    max_id = v
    return _round_up(max_pid), _round_up(max_id)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("-o", "--output", default="merged_naive.json.gz")
    ap.add_argument("--drop-pyfunc", action="store_true")
    ap.add_argument("--level", type=int, default=9, help="gzip level (default 9)")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    files = [c.path for c in discover(a.inputs).candidates]
    merged: list = []
    headers = {}
    pid_off = id_off = None
    for pos, path in enumerate(files):
        trace = load(path)
        events = trace.pop("traceEvents", [])
        di = trace.get("distributedInfo") or {}
        rank = di.get("rank", pos) if isinstance(di, dict) else pos
        headers[str(rank)] = trace
        if pid_off is None:
            pid_off, id_off = offsets_from(events)
        for ev in events:
            if a.drop_pyfunc and ev.get("cat") == "python_function":
                continue
            pid = ev.get("pid")
            if type(pid) is int:
                ev["pid"] = pid + rank * pid_off
            elif pid is not None:
                ev["pid"] = f"rank{rank} {pid}"
            if type(ev.get("id")) is int:
                ev["id"] += rank * id_off
            args = ev.get("args")
            if type(args) is not dict:
                args = ev["args"] = {}
            for k in LINK_ARGS:
                v = args.get(k)
                if type(v) is int:
                    args[k] = v + rank * id_off
            args["rank"] = rank
            merged.append(ev)
        del events, trace
    out = {"traceEvents": merged, "deviceProperties": [], "ranks": headers}
    opener = gzip.open if a.output.endswith(".gz") else open
    kw = {"compresslevel": a.level} if opener is gzip.open else {}
    with opener(a.output, "wt", encoding="utf-8", **kw) as f:
        json.dump(out, f, indent=4)
    print(
        json.dumps(
            {"events": len(merged), "ranks": len(files), "seconds": round(time.perf_counter() - t0, 3)}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
