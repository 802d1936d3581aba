"""The streaming pass of one rank: a reader -> the rank's rewriter -> its fragment.

One driver (:func:`_drive`) runs every reader of :mod:`tracefuse_stream.read.readers`:
the batched msgspec reader first; the exact ijson reader when the batched one hands
the rank back (invalid or truncated JSON, the open-ended array form, an event it
cannot encode), because its errors name the exact offset or event index; the salvage
reader when the strict readers fail and ``--salvage`` is on. Whatever the reader,
the same rewriter applies the same rules and the same piece writer compresses the
result; a rank that fails leaves no fragment behind.

Nothing here changes the rank's plan: what the pass learns (keys after the event
array, salvage notes) comes back in the :class:`RankResult`. Memory per rank is one
read buffer, one batch, one output buffer (~1 MB each) and the rewriter's small tables,
however large the file.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import orjson

from tracefuse_stream.align.links import CollectiveLinker
from tracefuse_stream.errors import InputError
from tracefuse_stream.exactjson import dumps_exact
from tracefuse_stream.gcpause import cyclic_gc_paused
from tracefuse_stream.plan.rankplan import RankPlan
from tracefuse_stream.read.readers import BatchedReader, EventReader, ExactReader, Handover, SalvageReader
from tracefuse_stream.report.step_counters import RankCounters, counter_events
from tracefuse_stream.rewrite.kernel import kernel_for
from tracefuse_stream.rewrite.labels import rank_metadata
from tracefuse_stream.rewrite.rules import RankRewriter
from tracefuse_stream.select.filters import EventFilter
from tracefuse_stream.select.spans import SPAN_DROPPED_NOTE
from tracefuse_stream.timeunits import us_to_ns
from tracefuse_stream.write.writer import FLUSH_BYTES, Piece, PieceWriter

PROGRESS_EVERY = 1 << 22
Progress = Optional[Callable[[int], None]]


@dataclass(frozen=True)
class RankTask:
    """What a worker needs to stream one rank."""

    plan: RankPlan
    flt: EventFilter
    codec: str
    fragment_path: Optional[str]  # None: compress and count only (dry run)
    salvage: bool = False
    links: Optional[Tuple[Any, ...]] = None  # --link-collectives: this rank's LinkSpecs (align/links.py)
    title: Optional[Tuple[str, int]] = None  # (title, sort place) for RANK r: rewrite/labels.py
    counters: Optional[RankCounters] = None  # --link-collectives: its step counters (report/step_counters.py)


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
    header: Dict[str, Any]  # the input's top-level keys, before and after the events
    pid_map: List[List[Any]]
    bytes_in: int  # file bytes (compressed)
    json_bytes_in: int  # decompressed JSON bytes read: the work done
    seconds: float
    salvage: Optional[Dict[str, Any]] = None
    warnings: List[str] = field(default_factory=list)
    early_ts: Any = None  # the earliest written ts below 0 (us; see plan/starts.output_base)
    notes: List[str] = field(default_factory=list)  # facts, not problems (summary "note:" lines)
    # events_in = kept + dropped + metadata_in + skipped;
    # events_out = kept + flows_added + counters_added + metadata_out
    metadata_in: int = 0  # the input's process/thread metadata (replaced by the labels written)
    skipped: int = 0  # salvage: events read but left out because they could not be written
    flows_added: int = 0  # --link-collectives: flow events made by the merge
    counters_added: int = 0  # --link-collectives: step counter events made by the merge
    # the run check after writing (plan/runcheck.check_written): the events written, first
    # and last (ts + dur) in absolute ns, and their ProfilerStep numbers
    first_ns: Optional[int] = None
    last_ns: Optional[int] = None
    steps: Set[int] = field(default_factory=set)


def stream_rank(task: RankTask, progress: Progress = None) -> RankResult:
    """Stream one rank into a fragment; with the salvage reader when the file is
    broken and ``task.salvage``."""
    with cyclic_gc_paused():  # restored afterwards, main thread only: gcpause.py
        if task.plan.needs_salvage:
            return _drive(task, _salvage_reader(task.plan), progress)
        try:
            return _stream_strict(task, progress)
        except InputError as e:
            if not task.salvage or not e.salvageable:
                raise
            return _drive(task, _salvage_reader(task.plan), progress, strict_error=str(e))


def _salvage_reader(plan: RankPlan) -> SalvageReader:
    return SalvageReader(plan.path, plan.size_bytes, exact=plan.base_time_ns is None)


def _stream_strict(task: RankTask, progress: Progress) -> RankResult:
    """Batched (fast) reading, or the exact reader for anything the batched reader
    hands back; the progress bar counts the bytes of the first attempt only once."""
    plan = task.plan
    reported = 0

    def counted(n: int) -> None:
        nonlocal reported
        reported += n
        progress(n)  # type: ignore[misc]

    try:
        return _drive(
            task,
            BatchedReader(plan.path, plan.compression, plan.layout),
            counted if progress is not None else None,
        )
    except Handover:
        pass
    already = reported

    def after_restart(n: int) -> None:  # the bar already shows the first attempt
        nonlocal already
        skip = min(n, already)
        already -= skip
        if n > skip:
            progress(n - skip)  # type: ignore[misc]

    reader = ExactReader(plan.path, plan.compression, plan.layout, need_trailer=not plan.trailer_known)
    return _drive(task, reader, after_restart if progress is not None else None)


def _rewriter(task: RankTask) -> RankRewriter:
    plan = task.plan
    return RankRewriter(
        plan.rank,
        plan.shift_ns,
        task.flt,
        (plan.base_time_ns or 0) + plan.align_offset_ns,
        plan.path,
    )


class _ProgressAt:
    """Reports compressed bytes consumed to ``progress`` every few MB, the rest on
    ``close`` (which also closes the reader)."""

    def __init__(self, reader: EventReader, progress: Optional[Callable[[int], None]]) -> None:
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
    """One rank's rewritten events, encoded, separated and flushed into its piece."""

    def __init__(
        self, rw: RankRewriter, w: PieceWriter, reader: EventReader, progress_at: _ProgressAt
    ) -> None:
        self.rw = rw
        self.feed_batch: Callable[[Sequence[Any]], List[Any]] = rw.feed_batch  # or a CollectiveLinker's
        self.w = w
        self.reader = reader
        self.progress_at = progress_at
        self.buf = bytearray()
        self.first = True
        self.skipped = 0  # batches skipped (one event each: the salvage reader's batches)
        self.events_skipped = 0
        self.skip_examples: List[str] = []

    def pump(self, batches: Iterable[List[Any]]) -> None:
        """Rewrite, encode and buffer every batch; flush about every MB."""
        feed_batch, encode_batch, buf, w = self.feed_batch, self.reader.encode_batch, self.buf, self.w
        skip_bad = self.reader.skips_bad_events
        first = self.first
        try:
            for batch in batches:
                if type(batch) is bytes:  # the C kernel's output: rewritten and encoded
                    data = batch
                elif skip_bad:
                    n_pids, n_out, n_dropped = len(self.rw.pid_first_ts), self.rw.events_out, self.rw.dropped
                    n_meta = len(self.rw.metadata)
                    try:
                        kept = feed_batch(batch)
                        data = encode_batch(kept) if kept else b""
                    except (InputError, orjson.JSONEncodeError, TypeError, ValueError) as e:
                        self._forget_new_processes(n_pids)
                        # nothing of a skipped batch is written: counted as skipped only
                        self.rw.events_out, self.rw.dropped = n_out, n_dropped
                        del self.rw.metadata[n_meta:]
                        self._skip(e, len(batch))
                        continue
                    if not kept:
                        continue
                else:
                    kept = feed_batch(batch)
                    if not kept:
                        continue
                    data = encode_batch(kept)
                if not data:
                    continue
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

    def _forget_new_processes(self, n_pids: int) -> None:
        """A skipped batch wrote no event: the processes it was the first to reach
        (the last entries of the insertion-ordered ``pid_first_ts``) have none yet, so
        they get no metadata (``labels``) — no empty named track — unless a later kept
        event reaches them."""
        first_ts = self.rw.pid_first_ts
        for pid in list(first_ts)[n_pids:]:
            del first_ts[pid]

    def _skip(self, e: Exception, n: int) -> None:
        self.skipped += 1
        self.events_skipped += n
        if len(self.skip_examples) < 5:
            self.skip_examples.append(f"event #{self.rw.index}: {e}")

    def add(self, events: Sequence[Dict[str, Any]]) -> None:
        """Events the merge made, after the rank's own (before its labels)."""
        for ev in events:
            if not self.first:
                self.buf += b",\n"
            self.first = False
            self.buf += dumps_exact(ev)
        self.rw.events_out += len(events)

    def finish(
        self, host: Optional[str] = None, title: Optional[Tuple[str, int]] = None
    ) -> Tuple[Piece, int]:
        """Append the rank's metadata (``labels``) after its events and close the piece."""
        meta_out = 0
        buf, first = self.buf, self.first
        for m in rank_metadata(self.rw, host, title):
            if not first:
                buf += b",\n"
            first = False
            buf += self.reader.encode_one(m)
            meta_out += 1
        self.w.write(buf)
        buf.clear()
        return self.w.finish(), meta_out


def _drive(
    task: RankTask, reader: EventReader, progress: Progress, strict_error: Optional[str] = None
) -> RankResult:
    """Run ``reader`` through the rank's rewriter into its piece; the piece is removed
    if anything fails (and a :class:`Handover` goes to the caller, for the next reader)."""
    t0 = time.perf_counter()
    plan = task.plan
    rw = _rewriter(task)
    w = PieceWriter(task.codec, task.fragment_path, discard=task.fragment_path is None)
    progress_at = _ProgressAt(reader, progress)
    sink = _Sink(rw, w, reader, progress_at)
    linker = None
    if task.links is not None:
        linker = CollectiveLinker(rw, task.links, plan.shift_ns)
        sink.feed_batch = linker.feed_batch
    else:
        # the batched reader's option (found by name: tests stand in for that reader)
        use_kernel: Optional[Callable[[Any], None]] = getattr(reader, "rewrite_raw_with", None)
        if use_kernel is not None:
            kernel = kernel_for(rw)
            if kernel is not None:
                use_kernel(kernel)
    try:
        sink.pump(reader.batches())
        counters, counter_notes = _counter_events(rw, task.counters, plan)
        sink.add(counters)
        piece, meta_out = sink.finish(task.plan.host_name, task.title)
    except BaseException:
        w.abort()
        progress_at.close()
        raise
    progress_at.close()
    header = dict(plan.header)
    for k, v in (reader.trailer or {}).items():
        header.setdefault(k, v)
    # salvage: events the reader could not parse count as read and skipped, as the
    # sink's unwritable ones do (the summary's sums: RankSummary)
    unreadable = reader.report.skipped if isinstance(reader, SalvageReader) else 0
    return RankResult(
        rank=plan.rank,
        path=plan.path,
        piece=piece,
        events_in=rw.events_in + unreadable,
        events_out=rw.events_out + meta_out,
        dropped=rw.dropped,
        metadata_out=meta_out,
        metadata_in=len(rw.metadata),
        skipped=unreadable + sink.events_skipped,
        flows_added=linker.flows_added if linker is not None else 0,
        counters_added=len(counters),
        header=header,
        pid_map=rw.pid_map(),
        bytes_in=plan.size_bytes,
        json_bytes_in=reader.json_bytes(),
        seconds=time.perf_counter() - t0,
        salvage=_salvage_record(plan, reader, sink, strict_error),
        early_ts=rw.early_ts,
        first_ns=_on_file_clock(plan, rw.span_lo),
        last_ns=_on_file_clock(plan, rw.span_hi),
        steps=set(rw.steps),
        warnings=list(reader.notes) + (linker.warnings(plan.path) if linker is not None else []),
        notes=([SPAN_DROPPED_NOTE] if rw.spans_dropped else []) + counter_notes,
    )


def _on_file_clock(plan: RankPlan, us: Any) -> Optional[int]:
    """A ts of the file (us) in absolute ns on its own clock (no --align correction:
    the run check compares the files as ``info`` reads them)."""
    return None if us is None else (plan.base_time_ns or 0) + us_to_ns(us)


def _counter_events(
    rw: RankRewriter, counters: Optional[RankCounters], plan: RankPlan
) -> Tuple[List[Dict[str, Any]], List[str]]:
    """The rank's step counters in its GPU process as the rewriter mapped it, shifted
    as its events; none (and a note) when that process kept no event (filters)."""
    if counters is None:
        return [], []
    pid = rw.out_pid(counters.device_pid)
    if pid is None or pid not in rw.pid_first_ts:
        return [], [f"step counters: none, its {counters.device} process has no event in the merge"]
    events = counter_events(counters, pid, plan.shift_ns)
    for ev in events:
        if ev["ts"] < 0:
            rw._early(ev["ts"])  # before the output base: the merge places it again
    return events, []


def _salvage_record(
    plan: RankPlan, reader: EventReader, sink: _Sink, strict_error: Optional[str]
) -> Optional[Dict[str, Any]]:
    """What salvage did to this rank (None when the rank was read strictly, or when
    salvage found nothing to do)."""
    if not isinstance(reader, SalvageReader):
        return None
    report = reader.report
    report.skipped += sink.skipped
    report.examples.extend(sink.skip_examples[: max(0, 5 - len(report.examples))])
    # the order of these notes is the order in which they were learnt
    notes = [f"strict read failed: {plan.strict_error}"] if plan.strict_error is not None else []
    notes += plan.problems
    if strict_error is not None:
        notes.append(f"strict read failed: {strict_error}")
    if not (report.anything or notes):
        return None
    record = report.to_dict()
    record["summary"] = report.summary()
    record["plan_notes"] = notes
    return record
