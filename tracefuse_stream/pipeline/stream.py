"""The streaming pass of one rank: read -> rewrite -> write a fragment.

Two readers feed the same ``RankRewriter``:

* the batched reader (``batches``): the event array cut into validated ~1 MB
  batches, each decoded by one msgspec call, events encoded by msgspec — the normal
  path, about 3x faster than ijson at parsing;
* the exact reader: ijson parses the file incrementally, orjson writes each event.
  It takes over whenever the batched reader hands a rank back (``NotBatchable``:
  invalid or truncated JSON, the open-ended array form, an event array it cannot
  locate), because its errors name the exact offset or event index and salvage
  starts from them.

Both parse numbers exactly — integers of any size, every other number a Decimal
with its original digits — and write them back unchanged: epoch-microsecond
timestamps (PyTorch <= 2.3) keep their nanoseconds, integers beyond int64/uint64
(2026 Kineto's ``Comms Id``) go through as written. Memory per rank is one read
buffer, one batch, one output buffer (~1 MB each) and the rewriter's small tables,
however large the file.
"""
from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import ijson
import orjson

from tracefuse_stream.errors import InputError
from tracefuse_stream.exactjson import dumps_fast, encode_lines
from tracefuse_stream.select.filters import EventFilter
from tracefuse_stream.rewrite.labels import rank_metadata
from tracefuse_stream.plan.planner import TAIL_WINDOW, RankPlan, complete_trailer, trailer_of_file
from tracefuse_stream.rewrite.rules import RankRewriter, dumps_exact
from tracefuse_stream.read.batches import EventBatches, NotBatchable
from tracefuse_stream.read.salvage import Framer, SalvageReport, tolerant_chunks
from tracefuse_stream.read.sources import TraceReader
from tracefuse_stream.read.trailer import find_trailer
from tracefuse_stream.write.writer import FLUSH_BYTES, Piece, PieceWriter

PARSE_BUF = 1 << 18
PROGRESS_EVERY = 1 << 22


@dataclass
class RankTask:
    """What a worker needs to stream one rank (picklable)."""

    plan: RankPlan
    flt: EventFilter
    codec: str
    fragment_path: Optional[str]  # None: compress and count only (dry run)
    salvage: bool = False


@dataclass
class RankResult:
    """Small per-rank outcome returned to the parent (never events)."""

    rank: int
    path: str
    piece: Piece
    events_in: int
    events_out: int
    dropped: int
    metadata_out: int
    header: Dict[str, Any]
    pid_map: List[List[Any]]
    bytes_in: int
    seconds: float
    salvage: Optional[Dict[str, Any]] = None
    warnings: List[str] = field(default_factory=list)


def _json_problem(e: Exception) -> str:
    text = e.args[0] if e.args else str(e)
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    lines = [ln for ln in str(text).splitlines() if ln.strip()]
    msg = lines[0] if lines else type(e).__name__
    if "premature EOF" in msg or "Incomplete JSON" in msg:
        return "file ends in the middle of the events (truncated)"
    return f"invalid JSON: {msg.strip()}"


def stream_rank(task: RankTask, progress: Optional[Callable[[int], None]] = None) -> RankResult:
    """Stream one rank into a fragment; with the salvage reader when the file is
    broken and ``task.salvage``."""
    with _no_cyclic_gc():
        if task.plan.needs_salvage:
            return _stream_salvage(task, progress)
        try:
            return _stream_once(task, progress)
        except InputError as e:
            if not task.salvage:
                raise
            task.plan.problems.append(f"strict read failed: {e}")
            return _stream_salvage(task, progress)


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while a rank streams.

    A decoded batch is thousands of live dicts and lists, so the collector's
    generation-0 trigger fires again and again and walks them all (~12% of the
    pass, measured with benchmarks/stages.py). The pass creates no reference cycles
    (events are freed by reference counting as soon as they are written), so memory
    stays bounded; the previous state is restored afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _rewriter(task: RankTask) -> RankRewriter:
    plan = task.plan
    return RankRewriter(
        plan.rank, plan.shift_ns, task.flt, (plan.base_time_ns or 0) + plan.align_offset_ns, plan.path
    )


class _ProgressAt:
    """Reports compressed bytes consumed to ``progress`` every few MB, the rest on
    ``close`` (which also closes the reader)."""

    def __init__(self, reader: TraceReader, progress: Optional[Callable[[int], None]]) -> None:
        self.reader = reader
        self.progress = progress
        self.reported = 0

    def update(self) -> None:
        if self.progress is not None:
            raw = self.reader.tell_raw()
            if raw - self.reported >= PROGRESS_EVERY:
                self.progress(raw - self.reported)
                self.reported = raw

    def close(self) -> None:
        raw = self.reader.tell_raw()
        self.reader.close()
        if self.progress is not None and raw > self.reported:
            self.progress(raw - self.reported)
            self.reported = raw


class _Sink:
    """One rank's rewritten events, encoded, separated and flushed into its piece.

    State lives here (not in locals) so that a reader that stops early (the open
    array form) can still finish the piece with what was written.
    ``encode_batch`` turns a list of kept events into their ``,\n``-separated JSON;
    ``encode_one`` (for metadata) one event.
    """

    def __init__(
        self,
        rw: RankRewriter,
        w: PieceWriter,
        encode_batch: Callable[[List[Any]], bytes],
        encode_one: Callable[[Any], bytes],
        progress_at: _ProgressAt,
    ) -> None:
        self.rw = rw
        self.w = w
        self.encode_batch = encode_batch
        self.encode_one = encode_one
        self.progress_at = progress_at
        self.buf = bytearray()
        self.first = True

    def pump(self, batches: Iterable[List[Any]]) -> None:
        """Rewrite, encode and buffer every batch; flush about every MB."""
        feed_batch, encode_batch, buf, w = self.rw.feed_batch, self.encode_batch, self.buf, self.w
        first = self.first
        try:
            for batch in batches:
                kept = feed_batch(batch)
                if not kept:
                    continue
                data = encode_batch(kept)
                if first:
                    first = False
                else:
                    buf += b",\n"
                buf += data
                if len(buf) >= FLUSH_BYTES:
                    w.write(buf)
                    buf.clear()
                    self.progress_at.update()
        finally:
            self.first = first

    def finish(self) -> Tuple[Piece, int]:
        return _finish_piece(self.rw, self.w, self.buf, self.first, self.encode_one)


def _encode_lines(kept: List[Any]) -> bytes:
    """The batched path's encoder: one msgspec call per batch, one event per line.

    Encoded JSON never holds a raw newline (strings escape it), so the line breaks
    msgspec puts between items are exactly the event boundaries. An event it cannot
    encode hands the rank to the exact reader, which names that event.
    """
    try:
        return encode_lines(kept)[:-1].replace(b"\n", b",\n")
    except (TypeError, ValueError, OverflowError) as e:
        raise NotBatchable(f"cannot encode an event: {e}") from None


def _exact_encoder(rw: RankRewriter) -> Callable[[List[Any]], bytes]:
    """The exact path's encoder (orjson, per event): errors name the event."""

    def encode(kept: List[Any]) -> bytes:
        parts = []
        for ev in kept:
            try:
                parts.append(dumps_exact(ev))
            except (TypeError, ValueError, OverflowError) as e:  # orjson's error is a TypeError
                raise InputError(
                    rw.path, f"event cannot be written as strict JSON: {e}", event_index=rw.index
                ) from None
        return b",\n".join(parts)

    return encode


def _finish_piece(
    rw: RankRewriter, w: PieceWriter, buf: bytearray, first: bool, dumps: Callable[[Any], bytes]
) -> Tuple[Piece, int]:
    """Append the rank's metadata (``labels``) after its events and close the piece."""
    meta_out = 0
    for m in rank_metadata(rw):
        if not first:
            buf += b",\n"
        first = False
        buf += dumps(m)
        meta_out += 1
    w.write(buf)
    buf.clear()
    return w.finish(), meta_out


def _result(
    task: RankTask, rw: RankRewriter, piece: Piece, meta_out: int, t0: float,
    salvage: Optional[Dict[str, Any]] = None,
) -> RankResult:
    plan = task.plan
    return RankResult(
        rank=plan.rank,
        path=plan.path,
        piece=piece,
        events_in=rw.events_in,
        events_out=rw.events_out + meta_out,
        dropped=rw.dropped,
        metadata_out=meta_out,
        header=plan.header,
        pid_map=rw.pid_map(),
        bytes_in=plan.size_bytes,
        seconds=time.perf_counter() - t0,
        salvage=salvage,
    )


def _stream_salvage(
    task: RankTask, progress: Optional[Callable[[int], None]]
) -> RankResult:
    """The salvage pass: frame events ourselves, skip what cannot be parsed."""
    t0 = time.perf_counter()
    plan = task.plan
    report = SalvageReport()
    framer = Framer(tolerant_chunks(plan.path, report), report, exact=plan.base_time_ns is None)
    rw = _rewriter(task)
    w = PieceWriter(task.codec, task.fragment_path, discard=task.fragment_path is None)
    buf = bytearray()
    first = True
    ok = False
    try:
        for ev in framer.events():
            try:
                out = rw.feed(ev)
                if out is None:
                    continue
                data = dumps_exact(out)
            except (InputError, orjson.JSONEncodeError, TypeError, ValueError) as e:
                report.skipped += 1
                if len(report.examples) < 5:
                    report.examples.append(f"event #{rw.index}: {e}")
                continue
            if not first:
                buf += b",\n"
            first = False
            buf += data
            if len(buf) >= FLUSH_BYTES:
                w.write(buf)
                buf.clear()
        piece, meta_out = _finish_piece(rw, w, buf, first, dumps_exact)
        for k, v in framer.header.items():
            plan.header.setdefault(k, v)
        ok = True
    finally:
        if not ok:
            w.abort()
    if progress is not None:
        progress(plan.size_bytes)
    salvage = report.to_dict()
    salvage["summary"] = report.summary()
    salvage["plan_notes"] = list(plan.problems)
    return _result(
        task, rw, piece, meta_out, t0,
        salvage=salvage if (report.anything or plan.problems) else None,
    )


def _stream_once(task: RankTask, progress: Optional[Callable[[int], None]]) -> RankResult:
    """The strict pass: batched (fast) reading, or the exact ijson reader for
    anything the batch stage hands back (its messages name the problem precisely)."""
    reported = 0

    def counted(n: int) -> None:
        nonlocal reported
        reported += n
        progress(n)  # type: ignore[misc]

    try:
        return _stream_batched(task, counted if progress is not None else None)
    except NotBatchable:
        pass
    already = reported

    def after_restart(n: int) -> None:  # the bar already shows the first pass
        nonlocal already
        skip = min(n, already)
        already -= skip
        if n > skip:
            progress(n - skip)  # type: ignore[misc]

    return _stream_exact(task, after_restart if progress is not None else None)


def _stream_batched(task: RankTask, progress: Optional[Callable[[int], None]]) -> RankResult:
    """Read the rank as validated ~1 MB batches (``batches``), rewrite, encode with
    msgspec. Raises :class:`NotBatchable` (having removed its partial fragment) when
    the exact reader must take over."""
    t0 = time.perf_counter()
    plan = task.plan
    reader = TraceReader(plan.path, plan.compression)
    rw = _rewriter(task)
    w = PieceWriter(task.codec, task.fragment_path, discard=task.fragment_path is None)
    batches = EventBatches(reader, plan.layout)
    progress_at = _ProgressAt(reader, progress)
    sink = _Sink(rw, w, _encode_lines, dumps_fast, progress_at)
    ok = False
    try:
        try:
            sink.pump(batches)
        except InputError as e:
            if e.path == plan.path and e.event_index is None:
                # a read or decompression problem: the exact reader reports it
                # with its position (and salvage can take over from there)
                raise NotBatchable(str(e)) from None
            raise
        piece, meta_out = sink.finish()
        if not plan.trailer_known:
            complete_trailer(plan, batches.trailer)
        ok = True
    finally:
        progress_at.close()
        if not ok:
            w.abort()
    return _result(task, rw, piece, meta_out, t0)


def _stream_exact(task: RankTask, progress: Optional[Callable[[int], None]]) -> RankResult:
    """The exact ijson reader: every byte through the incremental parser, so errors
    carry the exact offset/event index and the open-ended array form is accepted."""
    t0 = time.perf_counter()
    plan = task.plan
    need_tail = not plan.trailer_known
    keep = TAIL_WINDOW if need_tail else (4096 if plan.layout == "array" else 0)
    reader = TraceReader(plan.path, plan.compression, keep_tail=keep)
    notes: List[str] = []
    rw = _rewriter(task)
    w = PieceWriter(task.codec, task.fragment_path, discard=task.fragment_path is None)
    prefix = "traceEvents.item" if plan.layout == "object" else "item"
    progress_at = _ProgressAt(reader, progress)
    sink = _Sink(rw, w, _exact_encoder(rw), dumps_exact, progress_at)
    ok = False
    try:
        try:
            events = ijson.items(reader, prefix, use_float=False, buf_size=PARSE_BUF)
            sink.pump([ev] for ev in events)
        except ijson.JSONError as e:
            problem = _json_problem(e)
            if not _open_array_end(plan.layout, problem, reader.tail()):
                raise InputError(
                    plan.path,
                    problem,
                    offset=reader.offset if "truncated" in problem else None,
                    event_index=rw.index + 1,
                    hint="use --salvage to keep the complete events before it",
                ) from None
            notes.append(
                f"{plan.path}: the event array has no closing ']' (the array form allows "
                f"that); {rw.events_in} complete events read"
            )
        except UnicodeDecodeError as e:
            raise InputError(
                plan.path, f"invalid UTF-8 in a string ({e.reason})", event_index=rw.index + 1,
                hint="use --salvage to repair it (invalid bytes become U+FFFD)",
            ) from None
        piece, meta_out = sink.finish()
        if need_tail:
            trailer = find_trailer(reader.tail())
            if trailer is None:  # longer than the kept tail: read it from the file
                trailer = trailer_of_file(plan.path)[0]
            complete_trailer(plan, trailer)
        ok = True
    finally:
        progress_at.close()
        if not ok:
            w.abort()
    res = _result(task, rw, piece, meta_out, t0)
    res.warnings.extend(notes)
    return res


def _open_array_end(layout: str, problem: str, tail: bytes) -> bool:
    """True when a bare ``[...]`` trace simply ends after a complete event: Chrome's
    array form may omit the closing bracket, and ijson has yielded every event."""
    if layout != "array" or "truncated" not in problem:
        return False
    return tail.rstrip().rstrip(b",").rstrip().endswith(b"}")
