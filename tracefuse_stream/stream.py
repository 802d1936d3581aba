"""The streaming pass of one rank: read -> rewrite -> write a fragment.

ijson parses the rank's file incrementally into events; ``RankRewriter`` rewrites
each in place; orjson serialises it straight into a compressed fragment. Memory per
rank is the parser buffer, one output buffer (~1 MB) and the rewriter's small
tables, however large the file.

Numbers are parsed exactly (``use_float=False``: integers of any size, Decimals for
the rest) and written back with their original digits. Measured, this costs about
the same as binary floats with ijson's C backend, and it needs no special cases:
epoch-microsecond timestamps (PyTorch <= 2.3) keep their nanoseconds, and integers
beyond int64 (2026 Kineto's uint64 ``Comms Id``) — on which yajl's float path stops
with "integer overflow" — go through unchanged.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import ijson
import orjson

from .errors import InputError
from .filters import EventFilter
from .labels import rank_metadata
from .plan import TAIL_WINDOW, RankPlan, complete_trailer
from .rewrite import RankRewriter, dumps_exact
from .salvage import Framer, SalvageReport, tolerant_chunks
from .sources import TraceReader
from .trailer import find_trailer
from .writer import FLUSH_BYTES, Piece, PieceWriter

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
    if task.plan.needs_salvage:
        return _stream_salvage(task, progress)
    try:
        return _stream_once(task, progress)
    except InputError as e:
        if not task.salvage:
            raise
        task.plan.problems.append(f"strict read failed: {e}")
        return _stream_salvage(task, progress)


def _rewriter(task: RankTask) -> RankRewriter:
    plan = task.plan
    return RankRewriter(
        plan.rank, plan.shift_ns, task.flt, (plan.base_time_ns or 0) + plan.align_offset_ns, plan.path
    )


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
    t0 = time.perf_counter()
    plan = task.plan
    need_tail = not plan.trailer_known
    keep = TAIL_WINDOW if need_tail else (4096 if plan.layout == "array" else 0)
    reader = TraceReader(plan.path, plan.compression, keep_tail=keep)
    notes: List[str] = []
    rw = _rewriter(task)
    w = PieceWriter(task.codec, task.fragment_path, discard=task.fragment_path is None)
    prefix = "traceEvents.item" if plan.layout == "object" else "item"
    buf = bytearray()
    sep = b",\n"
    first = True
    last_report = 0
    ok = False
    try:
        try:
            for ev in ijson.items(reader, prefix, use_float=False, buf_size=PARSE_BUF):
                out = rw.feed(ev)
                if out is None:
                    continue
                if first:
                    first = False
                else:
                    buf += sep
                buf += dumps_exact(out)
                if len(buf) >= FLUSH_BYTES:
                    w.write(buf)
                    buf.clear()
                    if progress is not None:
                        raw = reader.tell_raw()
                        if raw - last_report >= PROGRESS_EVERY:
                            progress(raw - last_report)
                            last_report = raw
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
        except orjson.JSONEncodeError as e:
            raise InputError(plan.path, f"event cannot be written as strict JSON: {e}", event_index=rw.index) from None
        piece, meta_out = _finish_piece(rw, w, buf, first, dumps_exact)
        if need_tail:
            complete_trailer(plan, find_trailer(reader.tail()))
        ok = True
    finally:
        raw_total = reader.tell_raw()
        reader.close()
        if not ok:
            w.abort()
    if progress is not None and raw_total > last_report:
        progress(raw_total - last_report)
    res = _result(task, rw, piece, meta_out, t0)
    res.warnings.extend(notes)
    return res


def _open_array_end(layout: str, problem: str, tail: bytes) -> bool:
    """True when a bare ``[...]`` trace simply ends after a complete event: Chrome's
    array form may omit the closing bracket, and ijson has yielded every event."""
    if layout != "array" or "truncated" not in problem:
        return False
    return tail.rstrip().rstrip(b",").rstrip().endswith(b"}")
