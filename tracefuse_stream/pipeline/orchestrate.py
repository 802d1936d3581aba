"""Orchestration: plan every rank, stream ranks (serially or in worker processes)
into fragments, splice them in rank order into one atomic output.

Workers never send events to the parent: each writes its rank's compressed fragment
to disk and returns a small :class:`~tracefuse_stream.pipeline.stream.RankResult`. The
parent splices fragments strictly in rank order, so ``jobs=N`` output is byte-for-
byte the ``jobs=1`` output whatever order workers finish in.
"""
from __future__ import annotations

import functools
import json
import multiprocessing
import os
import signal
import sys
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from tracefuse_stream._version import __version__
from tracefuse_stream.errors import EXIT_VERIFY, Interrupted, TerminateSignal, TraceFuseError, UsageError
from tracefuse_stream.select.filters import EventFilter
from tracefuse_stream.plan.planner import InputSpec, RankPlan, plan_inputs, world_size_warnings
from tracefuse_stream.rewrite.rules import dumps_exact
from tracefuse_stream.pipeline.stream import RankResult, RankTask, stream_rank
from tracefuse_stream.pipeline import testhooks
from tracefuse_stream.write.writer import AtomicOutput, FragmentDir, Splicer, codec_for, piece_of

Event = Dict[str, Any]
SIZE_WARN_BYTES = 1 << 30


@dataclass
class RankSummary:
    """Per-rank numbers reported after a merge."""

    rank: int
    path: str
    events_in: int
    events_out: int
    dropped: int
    shift_ns: int
    seconds: float
    salvage: Optional[Dict[str, Any]] = None


@dataclass
class MergeSummary:
    """What a merge did: per-rank counts, sizes, speed and warnings."""

    output: str
    ranks: List[RankSummary]
    base_time_ns: int
    bytes_in: int
    bytes_out: int
    json_bytes: int
    seconds: float
    jobs: int
    warnings: List[str] = field(default_factory=list)
    outputs: List[str] = field(default_factory=list)
    dry_run: bool = False
    window_ns: Optional[Tuple[int, int]] = None
    verify_reports: List[Any] = field(default_factory=list)

    @property
    def events_in(self) -> int:
        return sum(r.events_in for r in self.ranks)

    @property
    def events_out(self) -> int:
        return sum(r.events_out for r in self.ranks)

    @property
    def mb_per_s(self) -> float:
        return self.bytes_in / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> Dict[str, Any]:
        reports, self.verify_reports = self.verify_reports, []
        try:
            d = asdict(self)
        finally:
            self.verify_reports = reports
        d.pop("verify_reports", None)
        d["verify"] = [json.loads(r.to_json()) for r in reports]
        d["events_in"] = self.events_in
        d["events_out"] = self.events_out
        d["mb_per_s"] = self.mb_per_s
        return d

    def format_text(self) -> str:
        lines = [
            f"{'rank':>6} {'events in':>12} {'events out':>12} {'dropped':>10} {'shift us':>14}  file",
        ]
        for r in self.ranks:
            extra = f"  [salvaged: {r.salvage.get('summary')}]" if r.salvage else ""
            lines.append(
                f"{r.rank:>6} {r.events_in:>12,} {r.events_out:>12,} {r.dropped:>10,} "
                f"{r.shift_ns / 1000:>14,.3f}  {r.path}{extra}"
            )
        verb = "dry run over" if self.dry_run else "merged"
        if self.window_ns:
            lines.append(
                f"time window: {self.window_ns[0]} .. {self.window_ns[1]} ns "
                f"({(self.window_ns[1] - self.window_ns[0]) / 1e6:,.3f} ms)"
            )
        lines.append(
            f"{verb} {len(self.ranks)} rank(s): {self.events_in:,} events in, {self.events_out:,} out; "
            f"{self.bytes_in / 1e6:,.1f} MB in -> {self.output} {self.bytes_out / 1e6:,.1f} MB "
            f"({self.json_bytes / 1e6:,.1f} MB JSON{' estimated' if self.dry_run else ''}) in {self.seconds:.1f} s, {self.mb_per_s:,.1f} MB/s, "
            f"{self.jobs} job(s)"
        )
        for w in self.warnings:
            lines.append(f"warning: {w}")
        return "\n".join(lines)


def _size_warning(json_bytes: int) -> Optional[str]:
    if json_bytes <= SIZE_WARN_BYTES:
        return None
    return (
        f"the merged JSON is {json_bytes / 1e9:.1f} GB uncompressed: the Perfetto UI in a browser "
        "struggles beyond ~1-2 GB. Smaller: drop python_function (the default; check "
        "--include-pyfunc), --steps A:B, --ranks, --keep-cat/--drop-cat; or open it with the "
        "native trace_processor (trace_processor --httpd FILE) and connect the UI to it."
    )


def _make_filter(
    include_pyfunc: bool,
    keep_cat: Optional[Sequence[str]],
    drop_cat: Optional[Sequence[str]],
    name_regex: Optional[str],
    filter_fn: Optional[Callable[[Event], bool]],
) -> EventFilter:
    import re

    if name_regex is not None:
        try:
            re.compile(name_regex)
        except re.error as e:
            raise UsageError(f"--name {name_regex!r} is not a valid regular expression: {e}") from None
    return EventFilter(
        include_pyfunc=include_pyfunc,
        keep_cat=frozenset(keep_cat) if keep_cat else None,
        drop_cat=frozenset(drop_cat or ()),
        name_regex=name_regex,
        fn=filter_fn,
    )


class _Progress:
    """Bytes-read progress bar on stderr (tqdm), only for a terminal and not --quiet."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(
                    total=total, unit="B", unit_scale=True, unit_divisor=1024,
                    desc="merging", file=sys.stderr, leave=False, dynamic_ncols=True,
                )
            except Exception:  # pragma: no cover - progress is best effort
                self.bar = None

    def __call__(self, n: int) -> None:
        testhooks.bytes_read(self, n)  # a test's signal at N bytes (inactive unless its env var is set)
        if self.bar is not None and n > 0:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _head(base_ns: int) -> bytes:
    return (
        b'{"schemaVersion":1,"displayTimeUnit":"ms","baseTimeNanoseconds":%d,"traceEvents":[\n'
        % base_ns
    )


def _tail(meta: Dict[str, Any]) -> bytes:
    return b'\n],"tracefuse":' + dumps_exact(meta) + b"}\n"


def _rank_header(plan: RankPlan, res: RankResult) -> Dict[str, Any]:
    return {
        "rank": plan.rank,
        "rank_from": plan.rank_source,
        "source": os.path.abspath(plan.path),
        "compression": plan.compression,
        "layout": plan.layout,
        "base_time_ns": plan.base_time_ns,
        "shift_ns": plan.shift_ns,
        "shift_us": plan.shift_ns / 1000,
        "align": plan.align,
        "header": res.header,
        "pids": res.pid_map,
        "events_in": res.events_in,
        "events_out": res.events_out,
        "dropped": res.dropped,
        "salvage": res.salvage,
    }


_WORKER_COUNTER: Any = None
# Tasks reach forked workers by inheritance, not pickling, so an API ``filter_fn``
# lambda works with workers too.
_WORKER_TASKS: List[RankTask] = []


def _init_worker(counter: Any) -> None:
    """Worker set-up: the shared progress array, default SIGTERM, ignore SIGINT
    (the parent decides what an interrupt means and cleans up)."""
    global _WORKER_COUNTER
    _WORKER_COUNTER = counter
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _run_in_process(slot: int, task: Optional[RankTask] = None) -> RankResult:
    """Worker entry point: stream one rank, reporting bytes read in a shared array."""
    counter = _WORKER_COUNTER
    if task is None:
        task = _WORKER_TASKS[slot]

    def progress(n: int) -> None:
        with counter.get_lock():
            counter[slot] += n

    return stream_rank(task, progress)


def usable_cores() -> int:
    """Cores this process may run on (affinity-aware)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover
        return max(1, os.cpu_count() or 1)


class _TermAsInterrupt:
    """Turn SIGTERM into an exception in the parent so the same cleanup runs."""

    def __enter__(self) -> "_TermAsInterrupt":
        self.prev = None
        try:
            self.prev = signal.signal(signal.SIGTERM, self._handler)
        except ValueError:  # not the main thread
            self.prev = None
        return self

    @staticmethod
    def _handler(signum: int, frame: Any) -> None:
        raise TerminateSignal()

    def __exit__(self, *exc: Any) -> None:
        if self.prev is not None:
            signal.signal(signal.SIGTERM, self.prev)


def _interruptible(fn: Callable[..., MergeSummary]) -> Callable[..., MergeSummary]:
    """SIGTERM and SIGINT anywhere in a merge (planning, scans, writing) become
    :class:`Interrupted`, after the merge's own cleanup has run."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> MergeSummary:
        with _TermAsInterrupt():
            try:
                return fn(*args, **kwargs)
            except KeyboardInterrupt:
                raise Interrupted("interrupted (SIGINT); no output written") from None
            except TerminateSignal:
                raise Interrupted("terminated (SIGTERM); no output written") from None

    return wrapper


def _apply_alignment(
    plans: List[RankPlan], align: str, clock_offsets: Optional[str], jobs: int
) -> List[str]:
    """Estimate (or load) per-host clock offsets and fold them into the rank shifts.

    Returns notes for the summary. Shifts are then renormalised so that no rank is
    shifted before the output base (no negative ts).
    """
    from tracefuse_stream.align.clock import estimate_offsets, load_clock_offsets, offsets_from_file

    hosts = {p.rank: p.host_name for p in plans}
    if clock_offsets is not None:
        alignments = offsets_from_file(load_clock_offsets(clock_offsets), hosts)
    elif align == "collectives":
        args = [(p.path, p.base_time_ns) for p in plans]
        collected = _map(_collect_ends, args, jobs)
        alignments = estimate_offsets({p.rank: c for p, c in zip(plans, collected)}, hosts)
    elif align == "base":
        return []
    else:
        raise UsageError(f"--align must be 'base' or 'collectives', not {align!r}")
    notes = []
    for p in plans:
        a = alignments.get(p.rank)
        if a is None:
            continue
        p.align = a.to_header()
        p.align_offset_ns = a.offset_ns if a.applied else 0
        p.shift_ns += p.align_offset_ns
    low = min(p.shift_ns for p in plans)
    if low < 0:
        for p in plans:
            p.shift_ns -= low
        notes.append(f"alignment moved a rank before the common base; output base lowered by {-low} ns")
    from tracefuse_stream.align.clock import format_alignment_table

    notes.append("clock alignment:\n" + format_alignment_table(alignments))
    return notes


def _collect_ends(path: str, base: Optional[int]) -> Any:
    from tracefuse_stream.align.clock import collect_collective_ends

    return collect_collective_ends(path, base)


def _map(fn: Callable[..., Any], arglist: List[tuple], jobs: int) -> List[Any]:
    """``[fn(*a) for a in arglist]``, in worker processes when ``jobs > 1``."""
    if jobs <= 1 or len(arglist) <= 1:
        return [fn(*a) for a in arglist]
    ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futs = [pool.submit(fn, *a) for a in arglist]
        return [f.result() for f in futs]


def _first_event_ns(plan: RankPlan) -> Optional[int]:
    from tracefuse_stream.report.info import scan_rank

    info = scan_rank(plan)
    return info.first_ns


def _resolve_window(
    plans: List[RankPlan],
    steps: Optional[Tuple[int, int]],
    step_rank: Optional[int],
    window_ms: Optional[Tuple[float, float]],
    jobs: int,
) -> Optional[Tuple[int, int]]:
    """The absolute (aligned) ns window to keep, from ``--steps`` or ``--window``."""
    if steps is not None and window_ms is not None:
        raise UsageError("use either --steps or --window, not both")
    if steps is not None:
        from tracefuse_stream.select.window import find_step_window

        ref_rank = plans[0].rank if step_rank is None else step_rank
        ref = next((p for p in plans if p.rank == ref_rank), None)
        if ref is None:
            raise UsageError(
                f"--step-rank {ref_rank} is not among the merged ranks "
                f"({', '.join(str(p.rank) for p in plans[:10])}{'...' if len(plans) > 10 else ''})"
            )
        lo, hi = find_step_window(ref.path, ref.base_time_ns, steps[0], steps[1], rank=ref.rank)
        off = ref.align_offset_ns
        return lo + off, hi + off
    if window_ms is not None:
        from tracefuse_stream.select.window import window_from_ms

        firsts = _map(_first_event_ns, [(p,) for p in plans], jobs)
        known = [f + p.align_offset_ns for f, p in zip(firsts, plans) if f is not None]
        if not known:
            raise UsageError("--window: the inputs have no timed events")
        return window_from_ms(min(known), window_ms[0], window_ms[1])
    return None


def split_names(output: str, groups: List[List[RankPlan]]) -> List[str]:
    """``merged.json.gz`` -> ``merged.ranks0-7.json.gz`` (one name per rank group)."""
    if output == "-":
        raise UsageError("--split-ranks needs a file name for -o, not stdout")
    path = Path(output)
    name = path.name
    lower = name.lower()
    for suf in (".json.gz", ".json.zst", ".json.zstd", ".json", ".gz", ".zst", ".zstd"):
        if lower.endswith(suf):
            stem, ext = name[: -len(suf)], name[-len(suf):]
            break
    else:
        stem, ext = name, ""
    out = []
    for g in groups:
        lo, hi = g[0].rank, g[-1].rank
        tag = f"ranks{lo}" if lo == hi else f"ranks{lo}-{hi}"
        out.append(str(path.with_name(f"{stem}.{tag}{ext}")))
    return out


@_interruptible
def merge(
    inputs: InputSpec,
    output: str = "merged_trace.json.gz",
    *,
    rank_from: str = "auto",
    ranks: Optional[Sequence[int]] = None,
    include_pyfunc: bool = False,
    keep_cat: Optional[Sequence[str]] = None,
    drop_cat: Optional[Sequence[str]] = None,
    name_regex: Optional[str] = None,
    filter_fn: Optional[Callable[[Event], bool]] = None,
    jobs: Optional[int] = 1,
    force: bool = False,
    progress: bool = False,
    salvage: bool = False,
    align: str = "base",
    clock_offsets: Optional[str] = None,
    steps: Optional[Tuple[int, int]] = None,
    step_rank: Optional[int] = None,
    window_ms: Optional[Tuple[float, float]] = None,
    split_ranks: Optional[int] = None,
    dry_run: bool = False,
    verify: Optional[bool] = None,
) -> MergeSummary:
    """Merge per-rank traces into ``output`` and return what was done.

    ``inputs``: files and/or directories (rank = ``distributedInfo.rank``, else list
    position; ``rank_from="order"`` forces position) or a ``{rank: path}`` mapping.
    ``output``: ``.json``, ``.json.gz`` or ``.json.zst`` (by extension), or ``"-"``
    for stdout. ``jobs``: worker processes (``None``/0 = usable cores; 1 = in process).
    ``align``: ``"base"`` (exact baseTimeNanoseconds alignment) or ``"collectives"``;
    ``clock_offsets``: a JSON file of known per-host/rank offsets (us) instead.
    ``steps``/``step_rank``/``window_ms``: keep only a time window. ``split_ranks``:
    one file per K consecutive merged ranks. ``dry_run``: count and size, write nothing.
    ``verify``: check every written file with :func:`tracefuse_stream.verify.verify`
    against the inputs (default: the ``TRACEFUSE_VERIFY=1`` environment variable);
    reports land in ``summary.verify_reports`` and an error-level finding raises
    :class:`VerifyFailed` (the output stays, for inspection).
    Raises :class:`~tracefuse_stream.errors.TraceFuseError` subclasses on bad input
    or output; no file is left under ``output`` then.
    """
    t0 = time.perf_counter()
    flt = _make_filter(include_pyfunc, keep_cat, drop_cat, name_regex, filter_fn)
    if split_ranks is not None and split_ranks < 1:
        raise UsageError("--split-ranks must be at least 1")
    plans = plan_inputs(inputs, rank_from=rank_from, ranks=ranks, salvage=salvage)
    warnings = world_size_warnings(plans)
    for p in plans:
        warnings.extend(f"{p.path}: {note}" for note in p.problems if not note.startswith("strict read failed"))
    n_jobs = usable_cores() if jobs is None or jobs <= 0 else int(jobs)
    n_jobs = max(1, min(n_jobs, len(plans)))
    notes = _apply_alignment(plans, align, clock_offsets, n_jobs)
    flt.window_ns = _resolve_window(plans, steps, step_rank, window_ms, n_jobs)
    flt.__post_init__()
    base_ns = min(((p.base_time_ns or 0) + p.align_offset_ns - p.shift_ns for p in plans), default=0)
    codec = "plain" if output == "-" else codec_for(str(output))
    if dry_run and output in (None, "", "-"):
        codec = "gzip"
    groups = (
        [plans[i : i + split_ranks] for i in range(0, len(plans), split_ranks)]
        if split_ranks
        else [plans]
    )
    names = split_names(str(output), groups) if split_ranks else [str(output)]
    inputs_paths = [p.path for p in plans]
    outs: List[Any] = []
    bar = _Progress(sum(p.size_bytes for p in plans), progress)
    frags: Optional[FragmentDir] = None
    results: List[RankResult] = []
    splicers: List[Splicer] = []
    try:
        for name in names:
            outs.append(None if dry_run else AtomicOutput(name, force=force, inputs=inputs_paths))
        if not dry_run:
            frags = FragmentDir(outs[0].frag_parent)
        for o in outs:
            splicers.append(Splicer(None if o is None else o.file, codec, o.target if o else "output"))
        for sp in splicers:
            sp.add(piece_of(codec, _head(base_ns)))
        sep = piece_of(codec, b",\n")
        group_of = {p.rank: gi for gi, g in enumerate(groups) for p in g}
        tasks = [
            RankTask(p, flt, codec, None if frags is None else frags.file_for(p.rank), salvage)
            for p in plans
        ]
        wrote_any = [False] * len(groups)
        for res in _results_in_order(tasks, n_jobs, bar):
            gi = group_of[res.rank]
            if not res.piece.empty:
                if wrote_any[gi]:
                    splicers[gi].add(sep)
                splicers[gi].add(res.piece)
                wrote_any[gi] = True
            if res.piece.path:
                try:
                    os.unlink(res.piece.path)
                except OSError:
                    pass
            results.append(res)
        by_rank = {r.rank: r for r in results}
        for gi, g in enumerate(groups):
            meta = {
                "tool": "tracefuse-stream",
                "version": __version__,
                "base_time_ns": base_ns,
                "ranks_merged": [p.rank for p in g],
                "split": {"part": gi, "parts": len(groups), "files": names} if split_ranks else None,
                "filters": flt.to_header(),
                "ranks": {str(p.rank): _rank_header(p, by_rank[p.rank]) for p in g},
            }
            splicers[gi].add(piece_of(codec, _tail(meta)))
            splicers[gi].finish()
        for o in outs:
            if o is not None:
                o.commit()
    except KeyboardInterrupt:
        for o in outs:
            if o is not None:
                o.abort()
        raise Interrupted("interrupted (SIGINT); no output written") from None
    except BaseException:
        for o in outs:
            if o is not None:
                o.abort()
        raise
    finally:
        bar.close()
        if frags is not None:
            frags.close()
    for r in results:
        warnings.extend(r.warnings)
    json_bytes = sum(sp.length for sp in splicers)
    largest = max((sp.length for sp in splicers), default=0)
    if largest > SIZE_WARN_BYTES:
        warnings.append(_size_warning(largest) or "")
    warnings.extend(notes)
    summary = MergeSummary(
        output=", ".join(names) if not dry_run else f"(dry run, {codec})",
        ranks=[
            RankSummary(
                rank=r.rank, path=r.path, events_in=r.events_in, events_out=r.events_out,
                dropped=r.dropped, shift_ns=p.shift_ns, seconds=r.seconds, salvage=r.salvage,
            )
            for p, r in zip(plans, results)
        ],
        base_time_ns=base_ns,
        bytes_in=sum(p.size_bytes for p in plans),
        bytes_out=sum(sp.size for sp in splicers),
        json_bytes=json_bytes,
        seconds=time.perf_counter() - t0,
        jobs=n_jobs,
        warnings=warnings,
        outputs=[] if dry_run else names,
        dry_run=dry_run,
        window_ns=flt.window_ns,
    )
    if verify is None:
        verify = os.environ.get("TRACEFUSE_VERIFY") == "1"
    if verify and not dry_run and output != "-":
        _verify_outputs(summary, groups)
    return summary


class VerifyFailed(TraceFuseError):
    """``verify`` found an error-level problem in a merged file."""

    exit_code = EXIT_VERIFY


def _verify_outputs(summary: MergeSummary, groups: List[List[RankPlan]]) -> None:
    """Run the verifier on every written file against the inputs of its ranks;
    salvaged merges are checked without ``--against`` (skipped events are known
    to be missing)."""
    from tracefuse_stream.verify.check import verify as verify_file

    salvaged = any(r.salvage for r in summary.ranks)
    for out, group in zip(summary.outputs, groups):
        report = verify_file(out, against=None if salvaged else [p.path for p in group])
        summary.verify_reports.append(report)
        if not report.ok:
            first = report.errors[0]
            raise VerifyFailed(
                f"{out}: verify found {len(report.errors)} error(s), first: {first.code}: {first.message}"
            )


def _results_in_order(tasks: List[RankTask], jobs: int, bar: _Progress):
    """Yield each task's result in task (rank) order, running up to ``jobs`` at once."""
    if jobs <= 1:
        for t in tasks:
            yield stream_rank(t, bar)
        return
    global _WORKER_TASKS
    fork = sys.platform.startswith("linux")
    ctx = multiprocessing.get_context("fork" if fork else "spawn")
    counter = ctx.Array("q", len(tasks))
    _WORKER_TASKS = tasks
    seen = [0] * len(tasks)
    pool = ProcessPoolExecutor(
        max_workers=jobs, mp_context=ctx, initializer=_init_worker, initargs=(counter,)
    )
    futures: List[Future] = []
    try:
        futures = [
            pool.submit(_run_in_process, i) if fork else pool.submit(_run_in_process, i, t)
            for i, t in enumerate(tasks)
        ]
        for fut in futures:
            while True:
                try:
                    res = fut.result(timeout=0.25)
                    break
                except FutureTimeout:
                    pass
                finally:
                    for i in range(len(tasks)):
                        v = counter[i]
                        if v != seen[i]:
                            bar(v - seen[i])
                            seen[i] = v
            yield res
    except BaseException:
        for f in futures:
            f.cancel()
        procs = list(getattr(pool, "_processes", {}).values())
        for p in procs:
            try:
                p.terminate()
            except Exception:
                pass
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        _WORKER_TASKS = []
    pool.shutdown(wait=True)
