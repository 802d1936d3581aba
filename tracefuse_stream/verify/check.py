"""``tracefuse verify``: show that a merged trace will render right in Perfetto.

The merged file is read once, streaming (``ijson`` over ``traceEvents.item``, through
:func:`~tracefuse_stream.read.sources.open_trace`, so ``.json``, ``.json.gz`` and
``.json.zst`` all work). Memory stays bounded by the number of processes, threads
and flow keys, never by the number of events:

* strict JSON: the whole file goes through yajl (which rejects NaN/Infinity, raw
  control characters, invalid UTF-8, trailing garbage, truncation); the byte offset
  of the first error is found by re-feeding the failing chunk byte by byte; a gzip
  file must be ONE member (Perfetto inflates only the first);
* pids/tids inside Perfetto's uint32, no string pids, no pid 0 on real events;
* every output process named exactly once and carrying the events of one rank,
  sort indexes int32;
* flows: no ``(cat, name, id)`` key used by two ranks, no float ids, orphan ends
  counted (a warning: real traces have them);
* complete ("X") events that overlap without nesting on one thread (a warning: real
  single-rank traces have some). Events of a thread arrive in file order, so this is
  an external sort: one fixed-size record per X event is buffered, sorted and
  spilled to a temporary file every ``SORT_CHUNK_RECORDS`` records; the sorted runs
  are merged with ``heapq.merge`` and swept with one stack per thread;
* with ``against`` (the merge's inputs): every kept input event present exactly once
  with its mapped pid and its absolute time, via per-rank multiset digests (count and
  two sums of 64-bit hashes over 64 buckets) of ``(ph, cat, name, ts_ns, dur_ns,
  pid)``; on a mismatch, further passes restricted to the differing buckets name the
  missing and extra events. The per-rank ``header`` and pid map of the merged file's
  ``tracefuse`` header are checked against the inputs too.

The top-level keys other than ``traceEvents`` (the ``tracefuse`` header, which a
writer may put before or after the events) are recovered without a second parse:
the pass keeps the chunks before the first event and after the last one (the header
region plus one chunk) and parses those regions with orjson.
"""
from __future__ import annotations

import argparse
import heapq
import io
import os
import re
import shutil
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import ijson
import orjson

from tracefuse_stream.errors import EXIT_OK, EXIT_USAGE, EXIT_VERIFY, InputError, TraceFuseError
from tracefuse_stream.select.filters import EventFilter
from tracefuse_stream.read.sources import detect_compression, find_inputs, open_trace

__all__ = ["Finding", "VerifyReport", "verify", "main", "CODES"]

U32_MAX = 2**32 - 1
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
READ_CHUNK = 1 << 18
#: X-event records buffered before a sorted run is spilled to disk (32 bytes each).
SORT_CHUNK_RECORDS = 1 << 18
#: sorted runs merged at once; more runs are merged in several levels.
SORT_FAN_IN = 64
#: head/tail bytes kept to recover the top-level keys (header region + one chunk).
TOPLEVEL_CAP = 256 << 20
#: distinct event names remembered for the overlap examples.
NAME_CAP = 200_000
#: digest buckets per rank.
NBUCKETS = 64
#: at most this many input events are held (as hashes) when naming missing/extra events.
DETAIL_CAP = 1_000_000
_MASK64 = (1 << 64) - 1

#: Every finding code, its level and what it means.
CODES: Dict[str, Tuple[str, str]] = {
    "invalid_json": ("error", "the file is not strict JSON"),
    "no_trace_events": ("error", "no traceEvents array"),
    "event_not_object": ("error", "traceEvents item is not an object"),
    "pid_out_of_range": ("error", "pid outside Perfetto's uint32 range (becomes 0)"),
    "string_pid": ("error", "string pid (Perfetto merges equal strings across ranks)"),
    "pid_invalid": ("error", "pid missing or not an integer"),
    "zero_pid": ("error", "pid 0 on a non-metadata event"),
    "tid_out_of_range": ("error", "tid not an integer in 0..2^32-1 (Perfetto merges threads)"),
    "string_tid": ("warning", "string tid"),
    "tid_missing": ("warning", "non-metadata event without tid"),
    "rank_missing": ("warning", "event without an integer args.rank"),
    "pid_rank_mismatch": ("warning", "pid // 10000 - 1 differs from args.rank"),
    "process_unnamed": ("error", "process with events but no process_name"),
    "process_named_twice": ("error", "process_name set more than once (the last one wins)"),
    "process_multi_rank": ("error", "one process carries events of several ranks"),
    "sort_index_not_int32": ("error", "sort_index is not an int32"),
    "flow_key_shared": ("error", "flow (cat, name, id) used by several ranks: arrows cross ranks"),
    "flow_float_id": ("error", "float flow id (Perfetto rejects it)"),
    "flow_bad_id": ("error", "flow event without a usable id"),
    "flow_orphan_end": ("warning", "flow end without a start (Perfetto: flow_end_without_start)"),
    "flow_duplicate_start": ("warning", "flow key started twice (the second start is ignored)"),
    "overlap_x": ("warning", "complete events overlap without nesting on one thread"),
    "x_negative_dur": ("warning", "complete event with a negative or non-numeric dur"),
    "gzip_multi_member": ("error", "gzip file with several members: Perfetto reads only the first"),
    "header_missing": ("warning", "no tracefuse header"),
    "header_mismatch": ("error", "tracefuse header disagrees with the file or the inputs"),
    "event_count_mismatch": ("error", "events_out in the header differs from the events in the file"),
    "pid_map_mismatch": ("error", "pid map in the header is wrong or incomplete"),
    "missing_event": ("error", "input event missing from the merged file"),
    "extra_event": ("error", "merged event that no kept input event accounts for"),
    "wrong_time": ("error", "event present with a different time"),
    "against_unmatched": ("error", "--against input matches no rank of the merged file"),
    "against_input_invalid": ("error", "--against input is not valid JSON"),
    "against_skipped": ("warning", "event comparison skipped"),
    "time_shift": ("warning", "rank was shifted in time by an alignment"),
}


# ----------------------------------------------------------------------------- report


@dataclass
class Finding:
    """One problem: ``level`` is ``"error"`` or ``"warning"``, ``code`` a stable id."""

    level: str
    code: str
    message: str
    rank: Optional[int] = None
    count: int = 1
    examples: List[Any] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "level": self.level,
            "code": self.code,
            "message": self.message,
            "rank": self.rank,
            "count": self.count,
            "examples": self.examples,
        }


@dataclass
class VerifyReport:
    path: str
    ok: bool
    errors: List[Finding]
    warnings: List[Finding]
    ranks: Dict[int, Dict[str, Any]]
    totals: Dict[str, Any]
    against: List[str] = field(default_factory=list)

    def codes(self) -> List[str]:
        return [f.code for f in self.errors + self.warnings]

    def find(self, code: str) -> List[Finding]:
        return [f for f in self.errors + self.warnings if f.code == code]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "path": self.path,
            "ok": self.ok,
            "errors": [f.to_dict() for f in self.errors],
            "warnings": [f.to_dict() for f in self.warnings],
            "ranks": {str(k): v for k, v in sorted(self.ranks.items(), key=_rank_sort)},
            "totals": self.totals,
            "against": self.against,
        }

    def to_json(self, indent: bool = True) -> str:
        opt = orjson.OPT_INDENT_2 if indent else 0
        return orjson.dumps(self.to_dict(), option=opt | orjson.OPT_NON_STR_KEYS, default=_json_default).decode()

    def format_text(self) -> str:
        t = self.totals
        out = io.StringIO()
        mb = t.get("bytes", 0) / 1e6
        out.write(
            f"tracefuse verify: {self.path}\n"
            f"  {mb:.1f} MB decompressed, {t.get('events', 0):,} events, "
            f"{len(self.ranks)} rank(s), {t.get('seconds', 0):.2f} s "
            f"({t.get('mb_per_s', 0):.1f} MB/s)\n"
        )
        if self.against:
            out.write(f"  checked against {len(self.against)} input(s)\n")
        cols = ["rank", "events", "X", "flow s/f", "orphan f", "overlaps", "procs", "threads", "span ms", "against"]
        rows = []
        for r, st in sorted(self.ranks.items(), key=_rank_sort):
            span = ""
            if st.get("ts_min_ns") is not None and st.get("ts_max_ns") is not None:
                span = f"{(st['ts_max_ns'] - st['ts_min_ns']) / 1e6:.1f}"
            rows.append([
                str(r), f"{st['events']:,}", f"{st['complete']:,}",
                f"{st['flow_starts']}/{st['flow_ends']}", str(st["flow_orphan_ends"]),
                str(st["overlaps"]), str(st["processes"]), str(st["threads"]), span,
                st.get("against") or "-",
            ])
        rows.append([
            "total", f"{t.get('events', 0):,}", f"{t.get('complete', 0):,}",
            f"{t.get('flow_starts', 0)}/{t.get('flow_ends', 0)}", str(t.get("flow_orphan_ends", 0)),
            str(t.get("overlaps", 0)), str(t.get("processes", 0)), str(t.get("threads", 0)), "", "",
        ])
        widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
        out.write("\n  " + "  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip() + "\n")
        for row in rows:
            out.write("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() + "\n")
        for title, items in (("errors", self.errors), ("warnings", self.warnings)):
            if not items:
                continue
            out.write(f"\n{title.upper()} ({len(items)}):\n")
            for f in items:
                where = f" rank {f.rank}" if f.rank is not None else ""
                out.write(f"  [{f.code}]{where}: {f.message}\n")
                for ex in f.examples:
                    out.write(f"      e.g. {_short(_trim(ex))}\n")
        if self.ok:
            out.write("\nOK: no error-level findings" + (f" ({len(self.warnings)} warning(s))" if self.warnings else "") + "\n")
        else:
            out.write(f"\nFAILED: {len(self.errors)} error-level finding(s)\n")
        return out.getvalue()


def _rank_sort(item):
    k = item[0]
    return (0, k, "") if isinstance(k, int) else (1, 0, str(k))


def _json_default(o):
    if isinstance(o, Decimal):
        return float(o) if o.is_finite() else str(o)
    if isinstance(o, (set, frozenset)):
        return sorted(o, key=repr)
    if isinstance(o, bytes):
        return o.decode("utf-8", "replace")
    return repr(o)


def _trim(o: Any, limit: int = 60) -> Any:
    """Long strings (kernel names) shortened for the text report."""
    if isinstance(o, str):
        return o if len(o) <= limit else o[: limit - 3] + "..."
    if isinstance(o, dict):
        return {k: _trim(v, limit) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_trim(v, limit) for v in o]
    return o


def _short(ex: Any, limit: int = 240) -> str:
    try:
        s = orjson.dumps(ex, default=_json_default, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        s = repr(ex)
    return s if len(s) <= limit else s[: limit - 3] + "..."


class _Findings:
    """Aggregates findings by (code, rank): a count and the first few examples."""

    def __init__(self, max_examples: int) -> None:
        self.max_examples = max_examples
        self._items: Dict[Tuple[str, Any], Finding] = {}

    def add(self, code: str, rank: Optional[int] = None, example: Any = None,
            message: Optional[str] = None, count: int = 1, level: Optional[str] = None) -> None:
        key = (code, rank)
        f = self._items.get(key)
        if f is None:
            lvl, desc = CODES.get(code, ("error", code))
            f = Finding(level or lvl, code, message or desc, rank, 0, [])
            self._items[key] = f
        f.count += count
        if example is not None and len(f.examples) < self.max_examples:
            f.examples.append(example)

    def get(self, code: str, rank: Optional[int] = None) -> Optional[Finding]:
        return self._items.get((code, rank))

    def finish(self) -> Tuple[List[Finding], List[Finding]]:
        errs, warns = [], []
        for f in self._items.values():
            if f.count > 1 and "occurrence" not in f.message:
                f.message = f"{f.message} ({f.count:,} occurrences)"
            (errs if f.level == "error" else warns).append(f)
        key = lambda f: (f.code, -1 if f.rank is None else f.rank if isinstance(f.rank, int) else 1 << 40)
        return sorted(errs, key=key), sorted(warns, key=key)


# ----------------------------------------------------------------------------- numbers


def _ns(v: Any) -> Optional[int]:
    """Microseconds (int, Decimal or float) -> integer nanoseconds, exactly."""
    t = type(v)
    if t is int:
        return v * 1000
    if t is Decimal:
        try:
            return int(v * 1000)
        except (ValueError, OverflowError, InvalidOperation):
            return None
    if t is float:
        if v != v or v in (float("inf"), float("-inf")):
            return None
        if abs(v) < 2.0**43:
            return round(v * 1000)
        return int(Decimal(repr(v)) * 1000)
    return None


def _hashable(v: Any) -> Any:
    try:
        hash(v)
        return v
    except TypeError:
        return repr(v)


def _tuple_hashes(t: tuple) -> Tuple[int, int]:
    try:
        h1 = hash(t)
    except TypeError:
        t = tuple(_hashable(x) for x in t)
        h1 = hash(t)
    h2 = hash((t[5], t[3], t[2], t[4], t[1], t[0], 0x5BD1E995))
    return h1, h2


class _Digest:
    """Multiset digest per rank: per bucket a count and two hash sums."""

    __slots__ = ("n", "s1", "s2")

    def __init__(self) -> None:
        self.n = [0] * NBUCKETS
        self.s1 = [0] * NBUCKETS
        self.s2 = [0] * NBUCKETS

    def add(self, h1: int, h2: int) -> None:
        b = h1 % NBUCKETS
        self.n[b] += 1
        self.s1[b] += h1
        self.s2[b] += h2

    def total(self) -> int:
        return sum(self.n)

    def diff_buckets(self, other: "_Digest") -> List[int]:
        return [
            b for b in range(NBUCKETS)
            if self.n[b] != other.n[b]
            or (self.s1[b] - other.s1[b]) & _MASK64
            or (self.s2[b] - other.s2[b]) & _MASK64
        ]


# ----------------------------------------------------------------------------- streaming pass


@dataclass
class _PassResult:
    bytes: int = 0
    items: int = 0
    error: Optional[Tuple[int, str]] = None  # (offset, message)
    head: Optional[bytes] = None
    tail: Optional[bytes] = None
    seen_items: bool = False

    def top_level(self) -> Tuple[Dict[str, Any], bool, bool]:
        """(top-level keys except traceEvents, complete?, has traceEvents?)."""
        return _top_level(self.head, self.tail, self.seen_items)


def _json_error_text(e: Exception) -> str:
    msg = e.args[0] if e.args else str(e)
    if isinstance(msg, bytes):
        msg = msg.decode("utf-8", "replace")
    return str(msg).strip().split("\n")[0].strip()


class _Tap:
    """File-like wrapper handed to ijson: records chunk boundaries, the byte offset of
    the chunk being parsed, and the chunks before the first and after the last item
    (the regions that hold the top-level keys other than traceEvents).

    ijson's C generator reads one chunk, parses it, yields its items, then reads the
    next: so at each ``read`` every item of the previous chunk has been consumed and
    ``items`` tells whether that chunk completed any item."""

    def __init__(self, reader, capture: bool) -> None:
        self.reader = reader
        self.capture = capture
        self.items = 0
        self._items_at_read = 0
        self.offset = 0          # bytes before ``cur``
        self.cur: Optional[bytes] = None
        self.head: List[bytes] = []
        self.head_len = 0
        self.head_open = True
        self.tail: List[bytes] = []
        self.tail_len = 0
        self.overflow_head = False
        self.overflow_tail = False

    def read(self, n: int = -1) -> bytes:
        self._retire()
        data = self.reader.read(n)
        self.cur = data
        return data

    def _retire(self) -> None:
        chunk = self.cur
        if chunk is None:
            return
        n = self.items - self._items_at_read
        self._items_at_read = self.items
        self.offset += len(chunk)
        self.cur = None
        if not self.capture or not chunk:
            return
        if self.head_open:
            if self.head_len + len(chunk) <= TOPLEVEL_CAP:
                self.head.append(chunk)
                self.head_len += len(chunk)
            else:
                self.overflow_head = True
            if n:
                self.head_open = False
        if n:
            self.tail, self.tail_len, self.overflow_tail = [chunk], len(chunk), False
        elif not self.overflow_tail:
            self.tail.append(chunk)
            self.tail_len += len(chunk)
            if self.tail_len > TOPLEVEL_CAP:
                self.tail, self.tail_len, self.overflow_tail = [], 0, True


def _counted(gen: Iterator[Any], tap: _Tap) -> Iterator[Any]:
    for item in gen:
        tap.items += 1
        yield item


def _run_pass(path: str, consume: Callable[[Iterator[Any]], None], *, capture: bool = True,
              prefix: str = "traceEvents.item") -> _PassResult:
    """Stream ``path``'s ``prefix`` items into ``consume`` (which iterates them all)."""
    res = _PassResult()
    reader = open_trace(path)
    tap = _Tap(reader, capture)
    err_chunk: Optional[bytes] = None
    err_exc: Optional[Exception] = None
    try:
        try:
            consume(_counted(ijson.items(tap, prefix, buf_size=READ_CHUNK), tap))
        except InputError as e:
            res.error = (e.offset if e.offset is not None else tap.offset, e.problem)
        except (ijson.JSONError, UnicodeDecodeError) as e:
            if tap.cur:  # the error lies in the chunk being parsed
                err_chunk, err_exc = tap.cur, e
            else:        # at the end of the stream
                res.error = (tap.offset, _eof_message(e))
        else:
            tap._retire()
    finally:
        reader.close()
    res.items = tap.items
    res.seen_items = tap.items > 0
    res.bytes = tap.offset + len(tap.cur or b"")
    if err_exc is not None:
        res.error = _locate_error(path, tap.offset, err_chunk or b"", err_exc)
    if capture and res.error is None:
        res.head = None if tap.overflow_head else b"".join(tap.head)
        res.tail = None if tap.overflow_tail else b"".join(tap.tail)
    return res


def _eof_message(e: Exception) -> str:
    text = _json_error_text(e)
    if "premature EOF" in text:
        return "file ends early: truncated JSON (" + text + ")"
    return text


def _locate_error(path: str, chunk_start: int, chunk: bytes, exc: Exception) -> Tuple[int, str]:
    """Byte offset of a JSON error known to lie in ``chunk`` (which starts at ``chunk_start``):
    parse the file again up to the chunk, then feed the chunk one byte at a time."""
    text = _json_error_text(exc)
    pos = chunk_start
    try:
        sink = ijson.sendable_list()
        coro = ijson.items_coro(sink, "\x00never\x00")
        reader = open_trace(path)
        try:
            done = 0
            while done < chunk_start:
                data = reader.read(min(READ_CHUNK, chunk_start - done))
                if not data:
                    break
                coro.send(data)
                done += len(data)
        finally:
            reader.close()
        for i in range(len(chunk)):
            try:
                coro.send(chunk[i:i + 1])
            except (ijson.JSONError, UnicodeDecodeError):
                pos = chunk_start + i
                break
    except (ijson.JSONError, UnicodeDecodeError, InputError, OSError):
        pass
    i = pos - chunk_start
    ctx = chunk[max(0, i - 24): i + 24]
    near = chunk[max(0, i - 9): i + 9]
    msg = text
    if re.search(rb"NaN|Infinity", near):
        msg = "NaN/Infinity is not valid JSON (" + text + ")"
    return pos, f"{msg}; near {ctx!r}"


_TE_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_ARRAY_END = re.compile(rb"\}\s*\]\s*([,}])")


def _loads_dict(data: bytes) -> Optional[Dict[str, Any]]:
    try:
        d = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return d if isinstance(d, dict) else None


def _top_level(head: Optional[bytes], tail: Optional[bytes], seen_items: bool) -> Tuple[Dict[str, Any], bool, bool]:
    """Recover the top-level keys except traceEvents from the head and tail regions."""
    if not seen_items:
        d = _loads_dict(head) if head is not None else None
        if d is None:
            return {}, False, False
        has = isinstance(d.get("traceEvents"), list)
        return {k: v for k, v in d.items() if k != "traceEvents"}, True, has
    out: Dict[str, Any] = {}
    complete = True
    pre = None
    if head is not None:
        for m in _TE_KEY.finditer(head):
            pre = _loads_dict(head[: m.start()] + b'"traceEvents":[]}')
            if pre is not None:
                break
    if pre is None:
        complete = False
    else:
        out.update((k, v) for k, v in pre.items() if k != "traceEvents")
    post = None
    if tail is not None:
        for m in _ARRAY_END.finditer(tail):
            if m.group(1) == b"}":
                if not tail[m.end():].strip():
                    post = {}
                    break
                continue
            post = _loads_dict(b"{" + tail[m.end():])
            if post is not None:
                break
    if post is None:
        complete = False
    else:
        out.update(post)
    return out, complete, True


def _gzip_members(path: str) -> Tuple[int, Optional[int], int]:
    """(number of gzip members, decompressed bytes of the first member, total).

    Perfetto's importer inflates only the FIRST member of a gzip file (it reports the
    JSON as incomplete: google/perfetto#872), while Python's readers -- and so the
    parse pass -- read all members. Inflating again costs a few percent of the parse."""
    try:
        from isal import isal_zlib as zl  # type: ignore[import-not-found]
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
                try:
                    out += len(d.decompress(data))
                except Exception:  # corrupt data: the parse pass reports it
                    return members, first_end, out
                data = d.unused_data if d.eof else b""
    return members, first_end, out


# ----------------------------------------------------------------------------- overlap sort


class _OverlapSorter:
    """External sort of X-event records ``(thread, ts, -end, index, name)``."""

    REC = struct.Struct(">IQQQI")
    OFF = 1 << 62

    def __init__(self, chunk_records: Optional[int] = None) -> None:
        self.chunk = chunk_records or SORT_CHUNK_RECORDS
        self.buf: List[bytes] = []
        self.runs: List[str] = []
        self.records = 0
        self._tmp: Optional[str] = None

    def add(self, thread: int, ts: int, end: int, idx: int, name_id: int) -> bool:
        o = self.OFF
        if not (-o <= ts < o and -o <= end < o):
            return False
        self.buf.append(self.REC.pack(thread, ts + o, _MASK64 - (end + o), idx, name_id))
        if len(self.buf) >= self.chunk:
            self.spill()
        return True

    def spill(self) -> None:
        """Sort the buffered records into a run file; ``buf`` becomes a new empty list."""
        if not self.buf:
            return
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="tracefuse-verify-")
        self.buf.sort()
        p = os.path.join(self._tmp, f"run{len(self.runs)}")
        with open(p, "wb") as f:
            f.write(b"".join(self.buf))
        self.records += len(self.buf)
        self.buf = []
        self.runs.append(p)

    def _read_run(self, p: str) -> Iterator[bytes]:
        size = self.REC.size
        block = size * 8192
        with open(p, "rb") as f:
            while True:
                data = f.read(block)
                if not data:
                    return
                for i in range(0, len(data), size):
                    yield data[i:i + size]

    def sorted_records(self) -> Iterator[bytes]:
        if not self.runs:
            self.records += len(self.buf)
            self.buf.sort()
            yield from self.buf
            self.buf = []
            return
        self.spill()
        runs = self.runs
        level = 0
        while len(runs) > SORT_FAN_IN:
            merged = []
            for g in range(0, len(runs), SORT_FAN_IN):
                group = runs[g:g + SORT_FAN_IN]
                p = os.path.join(self._tmp, f"l{level}m{g}")  # type: ignore[arg-type]
                with open(p, "wb") as f:
                    out: List[bytes] = []
                    for rec in heapq.merge(*(self._read_run(x) for x in group)):
                        out.append(rec)
                        if len(out) >= 8192:
                            f.write(b"".join(out))
                            out = []
                    f.write(b"".join(out))
                for x in group:
                    os.unlink(x)
                merged.append(p)
            runs = merged
            level += 1
        self.runs = runs
        yield from heapq.merge(*(self._read_run(x) for x in runs))

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        self.buf = []


def _sweep(sorter: _OverlapSorter, on_overlap: Callable[[int, tuple, tuple], None]) -> None:
    """Stack sweep over records sorted by (thread, ts, end desc): an event that starts
    inside the innermost open slice but ends after it cannot nest."""
    unpack = sorter.REC.unpack
    off = sorter.OFF
    cur = -1
    stack: List[tuple] = []
    for rec in sorter.sorted_records():
        th, ts, ne, idx, nm = unpack(rec)
        ts -= off
        end = _MASK64 - ne - off
        if th != cur:
            cur = th
            stack = []
        while stack and stack[-1][0] <= ts:
            stack.pop()
        if stack and end > stack[-1][0]:
            on_overlap(th, (end, idx, nm, ts), stack[-1])
            continue
        stack.append((end, idx, nm, ts))


# ----------------------------------------------------------------------------- verify


_FLOW_PH = frozenset(("s", "t", "f"))


class _Verifier:
    def __init__(self, path: str, against: Sequence[str], max_examples: int,
                 sort_chunk_records: Optional[int]) -> None:
        self.path = path
        self.against = list(against)
        self.want_digest = bool(self.against)
        self.max_examples = max_examples
        self.F = _Findings(max_examples)
        self.ranks: Dict[Any, Dict[str, Any]] = {}
        self.pids: Dict[Any, list] = {}       # pid -> [first rank, names, real events, other ranks]
        self.threads: Dict[tuple, list] = {}  # (pid, tid) -> [index, rank, pid, tid, events]
        self.thread_list: List[list] = []
        self.flows: Dict[Any, int] = {}       # key -> (rank+1) << 4 | flags
        self.flow_names: Dict[tuple, int] = {}
        self.flow_name_list: List[tuple] = []
        self.names: Dict[Any, int] = {}
        self.name_list: List[Any] = []
        self.sorter = _OverlapSorter(sort_chunk_records)
        self.digests: Dict[Any, _Digest] = {}
        self.idx = -1

    # -- per-rank stats
    def _rank(self, r: Any) -> Dict[str, Any]:
        st = self.ranks.get(r)
        if st is None:
            st = self.ranks[r] = {
                "events": 0, "metadata": 0, "complete": 0, "instants": 0, "counters": 0,
                "flow_starts": 0, "flow_steps": 0, "flow_ends": 0, "flow_orphan_ends": 0,
                "overlaps": 0, "processes": 0, "threads": 0,
                "ts_min_ns": None, "ts_max_ns": None, "against": None,
            }
        return st

    def _name_id(self, name: Any) -> int:
        try:
            i = self.names.get(name)
        except TypeError:
            name = repr(name)
            i = self.names.get(name)
        if i is None:
            if len(self.name_list) >= NAME_CAP:
                return 0xFFFFFFFF
            i = len(self.name_list)
            self.names[name] = i
            self.name_list.append(name)
        return i

    # -- the main pass over the merged file
    def handle(self, batch: Iterable[Any]) -> None:
        F = self.F
        pids = self.pids
        threads = self.threads
        ranks = self.ranks
        want_digest = self.want_digest
        sorter = self.sorter
        sbuf = sorter.buf
        schunk = sorter.chunk
        pack = sorter.REC.pack
        OFF = sorter.OFF
        MASK = _MASK64
        names_get = self.names.get
        idx = self.idx
        try:
            for ev in batch:
                idx += 1
                if type(ev) is not dict:
                    F.add("event_not_object", None, {"event": idx, "value": _short(ev, 80)})
                    continue
                ph = ev.get("ph")
                pid = ev.get("pid")
                args = ev.get("args")
                rank = args.get("rank") if type(args) is dict else None
                if type(rank) is not int:
                    F.add("rank_missing", None, {"event": idx, "ph": ph, "name": ev.get("name"), "pid": pid})
                    rank = pid // 10000 - 1 if type(pid) is int and pid >= 10000 else None
                st = ranks.get(rank) or self._rank(rank)
                st["events"] += 1
                meta = ph == "M"
                # pid
                tp = type(pid)
                if tp is int:
                    if pid < 0 or pid > U32_MAX:
                        F.add("pid_out_of_range", rank, {"event": idx, "pid": pid, "name": ev.get("name")})
                    elif pid == 0 and not meta:
                        F.add("zero_pid", rank, {"event": idx, "name": ev.get("name"), "ph": ph})
                elif tp is str:
                    F.add("string_pid", rank, {"event": idx, "pid": pid, "name": ev.get("name")})
                else:
                    F.add("pid_invalid", rank, {"event": idx, "pid": _short(pid, 60), "name": ev.get("name")})
                    pid = _hashable(pid)
                pinfo = pids.get(pid)
                if pinfo is None:
                    pinfo = pids[pid] = [rank, 0, 0, None]
                    if tp is int and rank is not None and pid // 10000 - 1 != rank:
                        F.add("pid_rank_mismatch", rank, {"pid": pid, "rank": rank})
                elif pinfo[0] != rank:
                    if pinfo[3] is None:
                        pinfo[3] = set()
                    if rank not in pinfo[3]:
                        pinfo[3].add(rank)
                        F.add("process_multi_rank", pinfo[0],
                              {"pid": pid, "ranks": [pinfo[0], rank], "event": idx, "name": ev.get("name")})
                if meta:
                    st["metadata"] += 1
                    name = ev.get("name")
                    if name == "process_name":
                        pinfo[1] += 1
                    elif name == "process_sort_index" or name == "thread_sort_index":
                        si = args.get("sort_index") if type(args) is dict else None
                        if type(si) is not int or not I32_MIN <= si <= I32_MAX:
                            F.add("sort_index_not_int32", rank,
                                  {"event": idx, "name": name, "pid": pid, "sort_index": si})
                    continue
                pinfo[2] += 1
                # tid
                tid = ev.get("tid")
                tt = type(tid)
                if tt is int:
                    if tid < 0 or tid > U32_MAX:
                        F.add("tid_out_of_range", rank, {"event": idx, "pid": pid, "tid": tid, "name": ev.get("name")})
                    elif tid == 0 and tp is int:
                        tid = pid  # what Perfetto does with tid 0
                elif tt is str:
                    F.add("string_tid", rank, {"event": idx, "pid": pid, "tid": tid})
                elif tid is None:
                    F.add("tid_missing", rank, {"event": idx, "pid": pid, "name": ev.get("name")})
                else:
                    F.add("tid_out_of_range", rank, {"event": idx, "pid": pid, "tid": _short(tid, 60)})
                    tid = _hashable(tid)
                tkey = (pid, tid)
                tinfo = threads.get(tkey)
                if tinfo is None:
                    tinfo = threads[tkey] = [len(self.thread_list), rank, pid, tid, 0, 0]
                    self.thread_list.append(tinfo)
                tinfo[4] += 1
                ts = ev.get("ts")
                ts_ns = int(ts * 1000) if type(ts) is Decimal and ts.is_finite() else _ns(ts)
                if ts_ns is not None:
                    lo = st["ts_min_ns"]
                    if lo is None or ts_ns < lo:
                        st["ts_min_ns"] = ts_ns
                    hi = st["ts_max_ns"]
                    if hi is None or ts_ns > hi:
                        st["ts_max_ns"] = ts_ns
                dur_ns = None
                if ph == "X":
                    st["complete"] += 1
                    dur = ev.get("dur")
                    dur_ns = int(dur * 1000) if type(dur) is Decimal and dur.is_finite() else _ns(dur)
                    if dur_ns is None or dur_ns < 0:
                        F.add("x_negative_dur", rank, {"event": idx, "name": ev.get("name"), "dur": _short(dur, 40)})
                    elif ts_ns is not None and -OFF <= ts_ns and ts_ns + dur_ns < OFF:
                        name = ev.get("name")
                        try:
                            nid = names_get(name)
                        except TypeError:
                            nid = None
                        if nid is None:
                            nid = self._name_id(name)
                        sbuf.append(pack(tinfo[0], ts_ns + OFF, MASK - (ts_ns + dur_ns + OFF), idx, nid))
                        if len(sbuf) >= schunk:
                            sorter.spill()
                            sbuf = sorter.buf
                elif ph in _FLOW_PH:
                    self._flow(ev, ph, rank, st, idx)
                elif ph == "i" or ph == "I":
                    st["instants"] += 1
                elif ph == "C":
                    st["counters"] += 1
                if want_digest:
                    if ph != "X":
                        dur = ev.get("dur")
                        dur_ns = _ns(dur) if dur is not None else None
                    d = self.digests.get(rank)
                    if d is None:
                        d = self.digests[rank] = _Digest()
                    d.add(*_tuple_hashes((ph, ev.get("cat"), ev.get("name"), ts_ns, dur_ns, pid)))
        finally:
            self.idx = idx

    def _flow(self, ev: dict, ph: str, rank: Any, st: dict, idx: int) -> None:
        fid = ev.get("id")
        t = type(fid)
        if t is int:
            val = fid
        elif t is str:
            try:
                val = int(fid, 16)
            except ValueError:
                self.F.add("flow_bad_id", rank, {"event": idx, "ph": ph, "id": fid})
                return
        elif t is Decimal or t is float:
            self.F.add("flow_float_id", rank, {"event": idx, "ph": ph, "cat": ev.get("cat"), "id": fid})
            return
        else:
            self.F.add("flow_bad_id", rank, {"event": idx, "ph": ph, "id": _short(fid, 40)})
            return
        cn_key = (_hashable(ev.get("cat")), _hashable(ev.get("name")))
        cn = self.flow_names.get(cn_key)
        if cn is None:
            cn = self.flow_names[cn_key] = len(self.flow_name_list)
            self.flow_name_list.append(cn_key)
        key = (val << 20) | cn if cn < (1 << 20) and val >= 0 else (cn, val)
        rr = (rank + 1) if type(rank) is int and rank >= 0 else 0
        cur = self.flows.get(key)
        flag = 1 if ph == "s" else 2 if ph == "f" else 0
        if ph == "s":
            st["flow_starts"] += 1
        elif ph == "f":
            st["flow_ends"] += 1
        else:
            st["flow_steps"] += 1
        if cur is None:
            self.flows[key] = (rr << 4) | flag
            return
        if cur >> 4 != rr and not cur & 8:
            self.F.add("flow_key_shared", rank,
                       {"cat": cn_key[0], "name": cn_key[1], "id": val,
                        "ranks": [(cur >> 4) - 1, rank], "event": idx})
            cur |= 8
        if flag == 1 and cur & 1:
            self.F.add("flow_duplicate_start", rank, {"cat": cn_key[0], "name": cn_key[1], "id": val, "event": idx})
        self.flows[key] = cur | flag

    # -- after the pass
    def finish_structure(self) -> None:
        F = self.F
        for pid, (rank, names, real, others) in self.pids.items():
            if names == 0 and real > 0:
                F.add("process_unnamed", rank, {"pid": pid, "events": real})
            elif names > 1:
                F.add("process_named_twice", rank, {"pid": pid, "process_name_events": names})
            if real > 0:
                self._rank(rank)["processes"] += 1
        for tinfo in self.thread_list:
            self._rank(tinfo[1])["threads"] += 1
        rank_of = {}
        orphans: Dict[Any, int] = {}
        for key, v in self.flows.items():
            if v & 2 and not v & 1:
                r = (v >> 4) - 1 if v >> 4 else None
                orphans[r] = orphans.get(r, 0) + 1
                if isinstance(key, tuple):
                    cn, val = key
                else:
                    cn, val = key & ((1 << 20) - 1), key >> 20
                cat, name = self.flow_name_list[cn]
                F.add("flow_orphan_end", r, {"cat": cat, "name": name, "id": val})
                rank_of[r] = True
        for r, n in orphans.items():
            self._rank(r)["flow_orphan_ends"] = n
        self.flows = {}

    def finish_overlaps(self) -> None:
        F = self.F
        names = self.name_list
        threads = self.thread_list

        def nm(i: int) -> Any:
            return names[i] if i < len(names) else "<name not kept>"

        def on_overlap(th: int, ev: tuple, parent: tuple) -> None:
            tinfo = threads[th]
            tinfo[5] += 1
            rank = tinfo[1]
            self._rank(rank)["overlaps"] += 1
            F.add("overlap_x", rank, {
                "pid": tinfo[2], "tid": tinfo[3],
                "event": {"name": nm(ev[2]), "ts_ns": ev[3], "end_ns": ev[0], "index": ev[1]},
                "overlaps": {"name": nm(parent[2]), "ts_ns": parent[3], "end_ns": parent[0], "index": parent[1]},
            })

        try:
            _sweep(self.sorter, on_overlap)
        finally:
            self.sorter.close()
        for r in self.ranks:
            per = [
                {"pid": t[2], "tid": t[3], "overlaps": t[5]}
                for t in threads if t[1] == r and t[5]
            ]
            if per:
                per.sort(key=lambda x: -x["overlaps"])
                self.ranks[r]["overlaps_by_thread"] = per[:20]


def verify(path, against: Optional[Sequence] = None, max_examples: int = 5,
           *, sort_chunk_records: Optional[int] = None) -> VerifyReport:
    """Check that the merged trace ``path`` renders right in Perfetto.

    ``against``: the merge's input files (or directories); every kept input event must
    be present exactly once with its mapped pid and its time. Raises
    :class:`~tracefuse_stream.errors.InputError` when a file cannot be opened.
    """
    t0 = time.perf_counter()
    path = str(path)
    against_paths = [str(p) for p in find_inputs([Path(p) for p in against])] if against else []
    if not os.path.isfile(path):
        raise InputError(path, "no such file" if not os.path.exists(path) else "not a regular file")
    v = _Verifier(path, against_paths, max_examples, sort_chunk_records)
    F = v.F
    res = _run_pass(path, v.handle)
    if res.error is not None:
        off, msg = res.error
        F.add("invalid_json", None, {"offset": off}, message=f"not strict JSON at byte {off}: {msg}")
    v.finish_structure()
    v.finish_overlaps()
    if detect_compression(path) == "gzip":
        members, first_end, total = _gzip_members(path)
        if members > 1:
            F.add("gzip_multi_member", None, {"members": members, "first_member_bytes": first_end, "total_bytes": total},
                  message=f"{members} gzip members: Perfetto inflates only the first ({first_end:,} of {total:,} "
                          "decompressed bytes) and reports the JSON as incomplete")

    top: Dict[str, Any] = {}
    has_events = res.seen_items
    complete = False
    if res.error is None:
        top, complete, has_events = res.top_level()
        if not has_events and not res.seen_items:
            F.add("no_trace_events", None, message="the top level has no traceEvents array")
    tf = top.get("tracefuse") if isinstance(top.get("tracefuse"), dict) else None
    if tf is None and res.error is None and has_events and not complete:
        tf = _header_pass(path)
    if tf is not None:
        _check_header(v, top, tf)
    elif res.error is None:
        F.add("header_missing", None, level="error" if v.against else "warning",
              message="no tracefuse header in the merged file" + ("; cannot check --against" if v.against else ""))

    if v.against:
        if res.error is not None:
            F.add("against_skipped", None, message="merged file is not valid JSON; --against comparison skipped")
        elif tf is not None:
            _check_against(v, tf)

    errors, warnings = F.finish()
    totals = _totals(v, res, time.perf_counter() - t0)
    ranks = {}
    for r, st in v.ranks.items():
        ranks[r if r is not None else "unknown"] = st
    return VerifyReport(path, not errors, errors, warnings, ranks, totals, against_paths)


def _totals(v: _Verifier, res: _PassResult, seconds: float) -> Dict[str, Any]:
    keys = ("events", "metadata", "complete", "instants", "counters", "flow_starts", "flow_steps",
            "flow_ends", "flow_orphan_ends", "overlaps", "processes", "threads")
    t: Dict[str, Any] = {k: sum(st[k] for st in v.ranks.values()) for k in keys}
    t["ranks"] = len([r for r in v.ranks if r is not None])
    t["bytes"] = res.bytes
    t["file_bytes"] = os.path.getsize(v.path)
    t["compression"] = detect_compression(v.path)
    t["seconds"] = round(seconds, 3)
    t["mb_per_s"] = round(res.bytes / 1e6 / seconds, 2) if seconds > 0 else None
    t["overlap_records_spilled"] = bool(v.sorter.runs)
    return t


def _header_pass(path: str) -> Optional[Dict[str, Any]]:
    """Fallback: a separate parse for a ``tracefuse`` header too big for the head/tail buffers."""
    found: List[Any] = []
    res = _run_pass(path, found.extend, capture=False, prefix="tracefuse")
    if res.error is None and found and isinstance(found[0], dict):
        return _to_plain(found[0])
    return None


def _to_plain(o: Any) -> Any:
    """ijson Decimals -> what orjson would have produced (float)."""
    if isinstance(o, dict):
        return {k: _to_plain(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_to_plain(v) for v in o]
    if isinstance(o, Decimal):
        return float(o)
    return o


def _check_header(v: _Verifier, top: Dict[str, Any], tf: Dict[str, Any]) -> None:
    F = v.F
    base = tf.get("base_time_ns")
    top_base = top.get("baseTimeNanoseconds")
    if "baseTimeNanoseconds" in top and top_base != base:
        F.add("header_mismatch", None, {"baseTimeNanoseconds": top_base, "tracefuse.base_time_ns": base},
              message="top-level baseTimeNanoseconds differs from tracefuse.base_time_ns")
    merged = tf.get("ranks_merged")
    if isinstance(merged, list):
        extra = sorted(r for r in v.ranks if isinstance(r, int) and r not in merged)
        if extra:
            F.add("header_mismatch", None, {"ranks_in_events": extra, "ranks_merged": merged},
                  message="events carry ranks that the header's ranks_merged does not list")
    seen_out: Dict[Any, Any] = {}
    for r, info in _header_ranks(tf):
        pairs = info.get("pids") or []
        for pair in pairs:
            if not (isinstance(pair, list) and len(pair) == 2):
                F.add("pid_map_mismatch", r, {"pair": pair}, message="malformed pid map entry")
                continue
            orig, out = pair
            if type(out) is not int:
                F.add("pid_map_mismatch", r, {"pair": pair}, message="pid map entry with a non-integer output pid")
                continue
            lo = (r + 1) * 10000
            if type(orig) is int and 0 <= orig < 5000:
                ok = out == lo + orig
            else:
                ok = type(out) is int and lo + 5000 <= out < lo + 10000
            if not ok:
                F.add("pid_map_mismatch", r, {"orig": orig, "out": out},
                      message="pid map entry breaks the contract's pid rule")
            if out in seen_out and seen_out[out] != (r, orig):
                F.add("pid_map_mismatch", r, {"out": out, "orig": [seen_out[out], (r, orig)]},
                      message="two original pids map to the same output pid")
            seen_out[out] = (r, orig)
        st = v.ranks.get(r)
        eo = info.get("events_out")
        if st is not None and type(eo) is int and eo not in (st["events"], st["events"] - st["metadata"]):
            F.add("event_count_mismatch", r, {"events_out": eo, "events_in_file": st["events"],
                                              "non_metadata_in_file": st["events"] - st["metadata"]},
                  message="header events_out differs from the events of this rank in the file")
        shift = info.get("shift_ns")
        rbase = info.get("base_time_ns")
        if type(shift) is int and type(base) is int:
            expect = (rbase or 0) - base
            if shift != expect:
                al = info.get("align")
                moved = shift - expect
                off = al.get("offset_ns") if isinstance(al, dict) else None
                applied = bool(al.get("applied", True)) if isinstance(al, dict) else False
                if not applied or (type(off) is int and off != moved):
                    F.add("header_mismatch", r,
                          {"shift_ns": shift, "base_time_ns": rbase, "output_base": base, "moved_ns": moved,
                           "align_offset_ns": off if applied else None},
                          message="shift_ns is not base_r - B plus the recorded alignment: times moved")
                else:
                    F.add("time_shift", r, {"moved_ns": moved, "align": al},
                          message=f"rank {r} moved by {moved:+,} ns by the requested clock alignment")


# ----------------------------------------------------------------------------- --against


@dataclass
class _RankCtx:
    rank: int
    path: str
    info: Dict[str, Any]
    shift_ns: int
    base_ns: int
    pidmap: Dict[Any, int]
    filt: EventFilter
    digest: _Digest = field(default_factory=_Digest)
    unmapped: int = 0
    events_in: int = 0


def _input_tuples(ctx: _RankCtx, batch: Iterable[Any], F: Optional[_Findings]) -> Iterator[tuple]:
    """Canonical tuples of the kept non-metadata events of one input batch."""
    keep = ctx.filt.keep
    in_window = ctx.filt.in_window
    windowed = ctx.filt.window_ns is not None
    shift = ctx.shift_ns
    base = ctx.base_ns
    pidmap = ctx.pidmap
    count = F is not None
    for ev in batch:
        if count:
            ctx.events_in += 1
        if type(ev) is not dict:
            continue
        ph = ev.get("ph")
        if ph == "M":
            continue
        if not keep(ev):
            continue
        ts_ns = _ns(ev.get("ts"))
        dur = ev.get("dur")
        dur_ns = _ns(dur) if dur is not None else None
        if windowed:
            # as the merge does: absolute start = the rank's base (+ alignment) + ts,
            # extent only for complete events, events without ts dropped
            if ts_ns is None or not in_window(base + ts_ns, (dur_ns or 0) if ph == "X" else 0):
                continue
        pid = _hashable(ev.get("pid"))
        out_pid = pidmap.get(pid)
        if out_pid is None and F is not None:
            ctx.unmapped += 1
            F.add("pid_map_mismatch", ctx.rank, {"pid": pid, "name": ev.get("name")},
                  message="input pid of a kept event is missing from the header's pid map")
        yield (ph, ev.get("cat"), ev.get("name"),
               ts_ns + shift if ts_ns is not None else None, dur_ns, out_pid)


def _header_ranks(tf: Dict[str, Any]) -> Iterator[Tuple[int, Dict[str, Any]]]:
    """``(rank, info)`` for each well-formed entry of the header's ``ranks`` table."""
    rinfo = tf.get("ranks") if isinstance(tf.get("ranks"), dict) else {}
    for key, info in rinfo.items():
        if not isinstance(info, dict):
            continue
        try:
            yield int(info.get("rank", key)), info
        except (TypeError, ValueError):
            continue


def _match_inputs(v: _Verifier, tf: Dict[str, Any]) -> List[_RankCtx]:
    F = v.F
    by_path: Dict[str, List[int]] = {}
    by_base: Dict[str, List[int]] = {}
    infos: Dict[int, Dict[str, Any]] = {}
    for r, info in _header_ranks(tf):
        infos[r] = info
        src = info.get("source")
        if isinstance(src, str):
            by_path.setdefault(os.path.realpath(src), []).append(r)
            by_base.setdefault(os.path.basename(src), []).append(r)
    fh = tf.get("filters")
    filt = EventFilter.from_header(fh) if isinstance(fh, dict) else EventFilter()
    if isinstance(fh, dict) and fh.get("custom_filter_fn"):
        F.add("against_skipped", None, message="the merge used a custom filter function; kept events cannot be recomputed")
        return []
    base = tf.get("base_time_ns") or 0
    ctxs: List[_RankCtx] = []
    used: Dict[int, str] = {}
    for p in v.against:
        # one file may be the source of several ranks (e.g. --rank-from order over
        # the same file twice): take its ranks in order
        cand = [x for x in by_path.get(os.path.realpath(p), []) if x not in used]
        if not cand:
            same_name = by_base.get(os.path.basename(p), [])
            cand = same_name if len(same_name) == 1 else []
        r = cand[0] if cand else None
        if r is None:
            F.add("against_unmatched", None, {"input": p},
                  message="--against input is not the source of any rank in the header")
            continue
        if r in used:
            F.add("against_unmatched", r, {"input": p, "already": used[r]},
                  message="two --against inputs match the same rank")
            continue
        used[r] = p
        info = infos[r]
        pidmap: Dict[Any, int] = {}
        for pair in info.get("pids") or []:
            if isinstance(pair, list) and len(pair) == 2:
                pidmap[_hashable(pair[0])] = pair[1]
        shift = info.get("shift_ns")
        if type(shift) is not int:
            shift = (info.get("base_time_ns") or 0) - base
        # the rank's absolute base including any alignment: B + shift_ns
        ctxs.append(_RankCtx(r, p, info, shift, base + shift, pidmap, filt))
    return ctxs


def _check_against(v: _Verifier, tf: Dict[str, Any]) -> None:
    F = v.F
    ctxs = _match_inputs(v, tf)
    bad: Dict[int, List[int]] = {}
    for ctx in ctxs:
        st = v._rank(ctx.rank)

        def handle(batch: Iterable[Any], ctx: _RankCtx = ctx) -> None:
            d = ctx.digest
            for t in _input_tuples(ctx, batch, F):
                d.add(*_tuple_hashes(t))

        array = ctx.info.get("layout") == "array"
        res = _run_pass(ctx.path, handle, prefix="item" if array else "traceEvents.item")
        if res.error is not None and array:
            msg = str(res.error[1]).lower()
            if "truncated" in msg or "premature eof" in msg:
                res.error = None  # Chrome's array form may end without its closing bracket
        if res.error is not None:
            salv = ctx.info.get("salvage")
            F.add("against_input_invalid", ctx.rank, {"input": ctx.path, "offset": res.error[0]},
                  level="warning" if salv else "error",
                  message=f"{ctx.path}: not valid JSON at byte {res.error[0]} ({res.error[1]})"
                  + ("; the merge salvaged it, events not compared" if salv else "; events not compared"))
            st["against"] = "input invalid"
            continue
        # per-rank header: the input's top-level keys except traceEvents
        top, complete, _ = res.top_level()
        hdr = ctx.info.get("header")
        if isinstance(hdr, dict):
            _compare_header(F, ctx, top, complete, hdr)
        ib = top.get("baseTimeNanoseconds")
        if (ctx.info.get("base_time_ns") or 0) != (ib or 0) and (complete or "baseTimeNanoseconds" in top):
            F.add("header_mismatch", ctx.rank, {"input_base": ib, "header_base_time_ns": ctx.info.get("base_time_ns")},
                  message="the rank's base_time_ns differs from the input's baseTimeNanoseconds: absolute times moved")
        ein = ctx.info.get("events_in")
        if type(ein) is int and ein != ctx.events_in:
            F.add("header_mismatch", ctx.rank, {"events_in": ein, "input_events": ctx.events_in},
                  message="header events_in differs from the input's event count")
        out_d = v.digests.get(ctx.rank) or _Digest()
        diff = out_d.diff_buckets(ctx.digest)
        if not diff:
            st["against"] = f"ok ({ctx.digest.total():,})"
            continue
        bad[ctx.rank] = diff
        st["against"] = "MISMATCH"
    if bad:
        _explain_mismatch(v, [c for c in ctxs if c.rank in bad], bad)


def _compare_header(F: _Findings, ctx: _RankCtx, top: Dict[str, Any], complete: bool, hdr: Dict[str, Any]) -> None:
    diffs = []
    for k in sorted(set(hdr) | set(top)):
        if k == "traceEvents":
            continue
        if k not in top:
            if complete:
                diffs.append({"key": k, "problem": "in header, not in input"})
        elif k not in hdr:
            diffs.append({"key": k, "problem": "in input, not in header"})
        elif not _same(top[k], hdr[k]):
            diffs.append({"key": k, "problem": "values differ", "input": _short(top[k], 80), "header": _short(hdr[k], 80)})
    for d in diffs:
        F.add("header_mismatch", ctx.rank, d, message="the rank's recorded header differs from the input's top-level keys")
    if not complete:
        F.add("against_skipped", ctx.rank, {"input": ctx.path},
              message="could not recover all top-level keys of the input; header compared partially")


def _same(a: Any, b: Any) -> bool:
    if type(a) is float or type(b) is float:
        try:
            return float(a) == float(b)
        except (TypeError, ValueError):
            return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _explain_mismatch(v: _Verifier, ctxs: List[_RankCtx], bad: Dict[int, List[int]]) -> None:
    """Name the missing and extra events of the differing buckets.

    Pass 1 (inputs): count the hashes of the input tuples in the chosen buckets.
    Pass 2 (merged file): consume them; output tuples left over are extra events.
    Pass 3 (inputs): hashes still counted are missing events.
    Memory: at most ``DETAIL_CAP`` hashes; buckets beyond it are reported by count only.
    """
    F = v.F
    chosen: Dict[int, set] = {}
    for ctx in ctxs:
        out_d = v.digests.get(ctx.rank) or _Digest()
        buckets = sorted(bad[ctx.rank], key=lambda b: ctx.digest.n[b])
        take, total = set(), 0
        for b in buckets:
            if take and total + ctx.digest.n[b] > DETAIL_CAP // max(1, len(ctxs)):
                break
            take.add(b)
            total += ctx.digest.n[b]
        chosen[ctx.rank] = take
        missing = extra = 0
        for b in bad[ctx.rank]:
            if b in take:
                continue
            dn = out_d.n[b] - ctx.digest.n[b]
            if dn > 0:
                extra += dn
            elif dn < 0:
                missing -= dn
            else:
                missing += 1
                extra += 1
        if missing:
            F.add("missing_event", ctx.rank, count=missing, message="kept input events missing from the merged file")
        if extra:
            F.add("extra_event", ctx.rank, count=extra, message="merged events that no kept input event accounts for")

    counts: Dict[int, Dict[int, int]] = {c.rank: {} for c in ctxs}
    for ctx in ctxs:
        cnt = counts[ctx.rank]
        take = chosen[ctx.rank]

        def h1(batch, ctx=ctx, cnt=cnt, take=take):
            for t in _input_tuples(ctx, batch, None):
                h = _tuple_hashes(t)[0]
                if h % NBUCKETS in take:
                    cnt[h] = cnt.get(h, 0) + 1

        _run_pass(ctx.path, h1, capture=False)

    extras: Dict[int, List[tuple]] = {c.rank: [] for c in ctxs}

    def h2(batch):
        for ev in batch:
            if type(ev) is not dict or ev.get("ph") == "M":
                continue
            args = ev.get("args")
            r = args.get("rank") if type(args) is dict else None
            if type(r) is not int:
                pid = ev.get("pid")
                r = pid // 10000 - 1 if type(pid) is int and pid >= 10000 else None
            cnt = counts.get(r)
            if cnt is None:
                continue
            dur = ev.get("dur")
            t = (ev.get("ph"), ev.get("cat"), ev.get("name"), _ns(ev.get("ts")),
                 _ns(dur) if dur is not None else None, _hashable(ev.get("pid")))
            h = _tuple_hashes(t)[0]
            if h % NBUCKETS not in chosen[r]:
                continue
            c = cnt.get(h, 0)
            if c > 0:
                cnt[h] = c - 1
            else:
                extras[r].append(t) if len(extras[r]) < 10_000 else None
                F.add("extra_event", r, _tuple_example(t), message="merged events that no kept input event accounts for")

    _run_pass(v.path, h2, capture=False)

    for ctx in ctxs:
        cnt = counts[ctx.rank]
        if not any(c > 0 for c in cnt.values()):
            continue
        missing: List[tuple] = []

        def h3(batch, ctx=ctx, cnt=cnt, missing=missing):
            for t in _input_tuples(ctx, batch, None):
                h = _tuple_hashes(t)[0]
                c = cnt.get(h, 0)
                if c > 0:
                    cnt[h] = c - 1
                    if len(missing) < 10_000:
                        missing.append(t)
                    F.add("missing_event", ctx.rank, _tuple_example(t), message="kept input events missing from the merged file")

        _run_pass(ctx.path, h3, capture=False)
        # the same event with another time or pid
        by_key: Dict[tuple, tuple] = {}
        for t in extras[ctx.rank]:
            by_key.setdefault((t[0], t[1], _hashable(t[2]), t[4], t[5]), t)
            by_key.setdefault(("pid", t[0], t[1], _hashable(t[2]), t[3], t[4]), t)
        for t in missing:
            e = by_key.get((t[0], t[1], _hashable(t[2]), t[4], t[5]))
            if e is not None:
                F.add("wrong_time", ctx.rank, {"ph": t[0], "cat": t[1], "name": t[2], "pid": t[5],
                                               "expected_ts_ns": t[3], "found_ts_ns": e[3],
                                               "off_by_ns": (e[3] - t[3]) if e[3] is not None and t[3] is not None else None},
                      message="event present with a different time")
                continue
            e = by_key.get(("pid", t[0], t[1], _hashable(t[2]), t[3], t[4]))
            if e is not None:
                F.add("pid_map_mismatch", ctx.rank, {"name": t[2], "ts_ns": t[3], "expected_pid": t[5], "found_pid": e[5]},
                      message="event present with a pid other than the header's pid map gives")


def _tuple_example(t: tuple) -> Dict[str, Any]:
    return {"ph": t[0], "cat": t[1], "name": t[2], "ts_ns": t[3], "dur_ns": t[4], "pid": t[5]}


# ----------------------------------------------------------------------------- CLI


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``verify MERGED [--against INPUT...] [--json]``: exit 0 when no error-level
    finding, 5 otherwise, 1 when a file cannot be read, 2 on bad arguments."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in and args_in[0] == "verify" and not os.path.exists("verify"):
        args_in = args_in[1:]
    ap = argparse.ArgumentParser(
        prog="tracefuse verify",
        description="Check that a merged trace renders right in Perfetto (and, with --against, "
                    "that it holds exactly the kept input events).",
    )
    ap.add_argument("merged", help="merged trace (.json, .json.gz, .json.zst)")
    ap.add_argument("--against", nargs="+", metavar="INPUT", default=None,
                    help="the merge's input files or directories")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--max-examples", type=int, default=5, metavar="N")
    try:
        ns = ap.parse_args(args_in)
    except SystemExit as e:
        return EXIT_USAGE if e.code else EXIT_OK
    try:
        report = verify(ns.merged, against=ns.against, max_examples=ns.max_examples)
    except TraceFuseError as e:
        print(f"tracefuse verify: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("tracefuse verify: interrupted", file=sys.stderr)
        return 130
    if ns.json:
        sys.stdout.write(report.to_json() + "\n")
    else:
        sys.stdout.write(report.format_text())
    sys.stdout.flush()
    return EXIT_OK if report.ok else EXIT_VERIFY


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
