#!/usr/bin/env python3
"""Where the time of one rank goes: per-event cost of each stage of the streaming pass.

    python benchmarks/stages.py RANK_FILE_OR_RUN_DIR [--reps 5] [--numbers exact|float]
                                [--mask-uint64] [--prototypes]

Rebuilds ``tracefuse_stream.stream._stream_once`` stage by stage from the package's own
pieces (``ijson.items`` -> ``RankRewriter.feed`` -> ``dumps_exact`` -> 1 MB
``bytearray`` -> ``PieceWriter``), each stage cumulative, on the decompressed file held
in memory (no disk noise), and reports CPU microseconds per event
(``time.process_time``; the minimum and the median of ``--reps`` interleaved
repetitions) and the share of the full pipeline.

``--numbers exact`` (default) is what the package does since be86e46: ijson
``use_float=False`` (Decimals) and ``dumps_exact``. ``--numbers float`` measures yajl's
float path with ``orjson.dumps`` instead (the package's earlier fast path); it stops
with "integer overflow" on integers beyond int64, so use it with ``--mask-uint64``,
which rewrites such integers to ``value % 2**63`` in memory first.

``--prototypes`` also times candidate changes (benchmark-side re-implementations,
NOT the package's code): ``feed-fast`` (a RankRewriter subclass with the common path
inlined), ``dumps-batch`` (one ``orjson.dumps`` per ~1 MB list of events instead of
one per event), and ``orjson-framed`` (split the event array into ~1 MB batches at
``},`` boundaries and parse each batch with one ``orjson.loads``, validated by orjson
itself, instead of ijson).
"""
from __future__ import annotations

import argparse
import io
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import ijson
import orjson

from tracefuse_stream.filters import EventFilter
from tracefuse_stream.rewrite import GPU_CATS, ID_LIMIT, UINT32, RankRewriter, dumps_exact
from tracefuse_stream.sources import find_inputs, open_trace
from tracefuse_stream.writer import FLUSH_BYTES, PieceWriter

PARSE_BUF = 1 << 18
_BIG_INT = re.compile(rb"(?<![\w.\"])(\d{19,})(?![\w.])")


def mask_big_ints(data: bytes) -> bytes:
    def sub(m: "re.Match[bytes]") -> bytes:
        v = int(m.group(1))
        return m.group(1) if v < 2**63 else str(v % 2**63).encode()

    return _BIG_INT.sub(sub, data)


def needs_exact(data: bytes) -> bool:
    try:
        for _ in ijson.items(io.BytesIO(data), "traceEvents.item", use_float=True, buf_size=PARSE_BUF):
            pass
    except ijson.JSONError as e:
        if "integer overflow" in str(e):
            return True
        raise
    return False


class FastRewriter(RankRewriter):
    """PROTOTYPE of a cheaper ``feed``: same output, fewer calls and lookups on the
    common path (no filter/window/odd values). Falls back to ``RankRewriter.feed``."""

    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        self._drop = self.filter._drop
        self._simple = self.filter._trivial and not self._window

    def feed(self, ev):  # type: ignore[override]
        if type(ev) is not dict or not self._simple:
            return RankRewriter.feed(self, ev)
        self.index += 1
        self.events_in += 1
        if ev.get("ph") == "M":
            self.metadata.append(ev)
            return None
        cat = ev.get("cat")
        if cat in self._drop:
            self.dropped += 1
            return None
        pid_in = ev.get("pid")
        pid = self.pids.get(pid_in)
        if pid is None:
            pid = self.map_pid(pid_in)
        ev["pid"] = pid
        tid = ev.get("tid")
        if type(tid) is not int or not 0 <= tid < UINT32:
            ev["tid"] = self.map_tid(pid, tid)
        if not self.shift.identity:
            ts = ev.get("ts")
            if ts is not None:
                ev["ts"] = self.shift(ts)
        if pid not in self.pid_first_ts:
            self.pid_first_ts[pid] = ev.get("ts", 0)
        off = self.id_off
        i = ev.get("id")
        if i is not None:
            ev["id"] = off + i if type(i) is int and 0 <= i < ID_LIMIT else self.map_id(i, "flow id")
        if "bind_id" in ev:
            ev["bind_id"] = self.map_id(ev["bind_id"], "bind_id")
        args = ev.get("args")
        if type(args) is dict:
            v = args.get("correlation")
            if v is not None:
                args["correlation"] = (off + v if type(v) is int and 0 <= v < ID_LIMIT
                                       else self.map_id(v, "args['correlation']"))
            v = args.get("External id")
            if v is not None:
                args["External id"] = (off + v if type(v) is int and 0 <= v < ID_LIMIT
                                       else self.map_id(v, "args['External id']"))
            args["rank"] = self.rank
        elif args is None:
            ev["args"] = {"rank": self.rank}
        else:
            return RankRewriter.feed(self, ev)  # raises the proper error
        if cat in GPU_CATS:
            self.pid_gpu_like.add(pid)
        self.events_out += 1
        return ev


def framed_events(data: bytes, chunk: int = FLUSH_BYTES):
    """PROTOTYPE parser: batches of events with one orjson.loads per ~1 MB.

    A batch ends at a ``},`` and is accepted only if ``[`` + batch + ``]`` is valid JSON:
    the batch starts at an event boundary, so a cut inside an event (unclosed ``{``)
    or inside a string (unterminated) can never parse. The end of the array and the
    keys after it go through ijson. (The start of the array is found naively here; a
    real version would take it from the planning pass.)
    """
    f = io.BytesIO(data)
    head = f.read(1 << 16)
    i = head.index(b"[", head.index(b'"traceEvents"')) + 1
    buf = head[i:]
    while True:
        more = f.read(chunk)
        if not more:
            break
        buf += more
        pos = buf.rfind(b"},")
        while pos > 0:
            try:
                batch = orjson.loads(b"[" + buf[: pos + 1] + b"]")
                break
            except orjson.JSONDecodeError:
                pos = buf.rfind(b"},", 0, pos)
        else:
            continue
        yield from batch
        buf = buf[pos + 2:]
    yield from ijson.items(io.BytesIO(b'{"traceEvents":[' + buf), "traceEvents.item", use_float=False)


def _stage(data: bytes, exact: bool, level: int, codec: str = "plain", fast_feed: bool = False,
           batch_dumps: bool = False, framed: bool = False, dumps_override=None) -> int:
    """Run the pipeline up to ``level`` (0 parse, 1 +feed, 2 +dumps, 3 +buffer+write)."""
    cls = FastRewriter if fast_feed else RankRewriter
    rw = cls(1, 0, EventFilter(include_pyfunc=True), 0)
    dumps: Callable = dumps_override or (dumps_exact if exact else orjson.dumps)
    w = PieceWriter(codec, None, discard=True)
    buf = bytearray()
    events = (framed_events(data) if framed else
              ijson.items(io.BytesIO(data), "traceEvents.item", use_float=not exact, buf_size=PARSE_BUF))
    n = 0
    first = True
    if batch_dumps:
        pending: List = []
        size = 0
        for ev in events:
            n += 1
            out = rw.feed(ev)
            if out is None:
                continue
            pending.append(out)
            if len(pending) >= 4096:
                data_ = dumps(pending)
                if not first:
                    w.write(b",")
                first = False
                w.write(data_[1:-1])
                pending.clear()
                size += len(data_)
        if pending:
            w.write(dumps(pending)[1:-1])
        w.finish()
        return n
    for ev in events:
        n += 1
        if level == 0:
            continue
        out = rw.feed(ev)
        if out is None or level == 1:
            continue
        b = dumps(out)
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
    w.write(buf)
    w.finish()
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", help="one rank file, or a run directory (its first file is used)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--numbers", choices=["exact", "float"], default="exact")
    ap.add_argument("--mask-uint64", action="store_true",
                    help="rewrite integers beyond int64 to value %% 2**63 (measures the float path)")
    ap.add_argument("--prototypes", action="store_true", help="also time the candidate changes")
    a = ap.parse_args(argv)
    path = Path(a.path)
    if path.is_dir():
        path = find_inputs([path])[0]
    r = open_trace(path)
    data = r.read()
    r.close()
    if a.mask_uint64:
        data = mask_big_ints(data)
    exact = a.numbers == "exact"
    if not exact and needs_exact(data):
        ap.error("--numbers float: the file has integers beyond int64 (add --mask-uint64)")
    stages: Dict[str, Callable[[], int]] = {
        "parse (ijson.items = the floor)": lambda: _stage(data, exact, 0),
        "+ RankRewriter.feed": lambda: _stage(data, exact, 1),
        f"+ {'dumps_exact' if exact else 'orjson.dumps'} per event": lambda: _stage(data, exact, 2),
        "+ bytearray + PieceWriter plain": lambda: _stage(data, exact, 3),
        "+ ... PieceWriter gzip (isal)": lambda: _stage(data, exact, 3, "gzip"),
        "+ ... PieceWriter zstd": lambda: _stage(data, exact, 3, "zstd"),
    }
    if a.prototypes:
        stages.update({
            "PROTO full plain, feed-fast": lambda: _stage(data, exact, 3, fast_feed=True),
            "PROTO full plain, dumps-batch": lambda: _stage(data, exact, 3, batch_dumps=True),
            "PROTO full plain, feed-fast + dumps-batch": lambda: _stage(
                data, exact, 3, fast_feed=True, batch_dumps=True),
            "PROTO parse only, orjson-framed": lambda: sum(1 for _ in framed_events(data)),
            "PROTO full plain, orjson-framed + feed-fast": lambda: _stage(
                data, False, 3, fast_feed=True, framed=True, dumps_override=dumps_exact),
        })
    times: Dict[str, List[float]] = {k: [] for k in stages}
    counts: Dict[str, int] = {}
    for _ in range(a.reps):
        for k, fn in stages.items():
            t = time.process_time()
            counts[k] = fn()
            times[k].append(time.process_time() - t)
    n = counts["parse (ijson.items = the floor)"]
    full = statistics.median(times["+ bytearray + PieceWriter plain"])
    floor = statistics.median(times["parse (ijson.items = the floor)"])
    print(f"{path.name}: {len(data) / 1e6:.1f} MB, {n:,} events, number mode "
          f"{'exact (ijson use_float=False, dumps_exact)' if exact else 'float (yajl doubles, orjson.dumps)'}"
          f"{' [uint64 masked]' if a.mask_uint64 else ''}; CPU us/event, {a.reps} reps")
    print(f"{'stage (cumulative)':<44} {'min':>7} {'median':>7} {'% of full':>9} {'floor/this':>10}")
    for k, v in times.items():
        if counts[k] != n:
            print(f"  !! {k}: {counts[k]} events, expected {n}")
        med = statistics.median(v)
        print(f"{k:<44} {min(v) / n * 1e6:7.2f} {med / n * 1e6:7.2f} {med / full * 100:8.0f}% "
              f"{floor / med:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
