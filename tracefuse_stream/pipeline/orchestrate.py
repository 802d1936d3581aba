"""Orchestration of one merge: plan every rank, run the side passes, stream ranks
(serially or in worker processes) into fragments, splice them in rank order into one
atomic output per file, then (optionally) verify what was written.

Each stage hands the next a value: the planner's plans, alignment's corrected plans,
the window, the per-rank results; nothing reaches back into another stage's object.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from typing import Any, Callable, Dict, List, Optional, ParamSpec

from tracefuse_stream.align.links import LinkPlan, plan_links
from tracefuse_stream.cluster import dask_backend
from tracefuse_stream.errors import Interrupted, TerminateSignal, VerifyFailed
from tracefuse_stream.listing import by_ranks
from tracefuse_stream.options import MergeOptions
from tracefuse_stream.pipeline.each_cycle import merge_each_cycle
from tracefuse_stream.pipeline.interrupts import SignalsRaise, raise_if_signalled
from tracefuse_stream.pipeline.outputs import file_meta, head_bytes, output_names, rank_groups, tail_bytes
from tracefuse_stream.pipeline.progress import Progress
from tracefuse_stream.pipeline.sidepasses import apply_alignment, resolve_window, step_figures
from tracefuse_stream.pipeline.stream import RankResult, RankTask, stream_rank
from tracefuse_stream.pipeline.summary import MergeSummary, RankSummary, size_warning
from tracefuse_stream.plan.planner import (
    InputSpec,
    PlanList,
    RankPlan,
    input_notes,
    input_warnings,
    plan_inputs,
)
from tracefuse_stream.plan.runcheck import written_findings
from tracefuse_stream.plan.starts import EarlyEvents, check_early, output_base
from tracefuse_stream.rankset import compress_ranges
from tracefuse_stream.report.step_counters import plan_counters
from tracefuse_stream.report.summary_track import link_analysis, write_summaries
from tracefuse_stream.report.viewer import ViewerCounts, estimate_viewer_bytes, largest
from tracefuse_stream.select.filters import EventFilter
from tracefuse_stream.verify.archive import verify_archive
from tracefuse_stream.verify.check import verify as verify_file
from tracefuse_stream.workers import resolve_jobs, run_in_order, usable_cores
from tracefuse_stream.write.codecs import is_archive_name
from tracefuse_stream.write.sinks import MergeSink, abort_all, sink_for
from tracefuse_stream.write.writer import FragmentDir, codec_for, is_special_file

_P = ParamSpec("_P")


def _interruptible(fn: Callable[_P, MergeSummary]) -> Callable[_P, MergeSummary]:
    """SIGTERM and SIGINT anywhere in a merge (planning, scans, writing) become
    :class:`Interrupted`, after the merge's own cleanup has run. Keeps the wrapped
    function's signature for type checkers (``ParamSpec``)."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> MergeSummary:
        with SignalsRaise():
            try:
                return fn(*args, **kwargs)
            except KeyboardInterrupt:
                raise Interrupted("interrupted (SIGINT); no output written") from None
            except TerminateSignal:
                raise Interrupted("terminated (SIGTERM); no output written") from None

    return wrapper


@_interruptible
def merge(
    inputs: InputSpec,
    output: str = "merged_trace.json.gz",
    options: Optional[MergeOptions] = None,
    **overrides: Any,
) -> MergeSummary:
    """Merge per-rank traces into ``output`` and return what was done.

    ``inputs``: files and/or directories (rank = ``distributedInfo.rank``, else from
    the file name, else position; ``rank_from="order"`` forces position) or a
    ``{rank: path}`` mapping. ``output``: ``.json``, ``.json.gz`` or ``.json.zst``
    (by extension), ``.perfetto.tar[.gz]`` (a Perfetto v58 archive), or ``"-"`` for stdout.

    ``options``: a :class:`~tracefuse_stream.options.MergeOptions`; the keyword
    arguments of the flat API (``rank_from``, ``ranks``, ``cycle``, ``include_pyfunc``,
    ``keep_cat``, ``drop_cat``, ``name_regex``, ``filter_fn``, ``args``, ``steps``,
    ``step_rank``, ``window_ms``, ``align``, ``clock_offsets``, ``force``,
    ``split_ranks``, ``dry_run``, ``verify``, ``link_collectives``, ``jobs``,
    ``progress``, ``salvage``, ``dask``: a Dask scheduler address or file, where the side
    passes run (cluster.py); see :data:`tracefuse_stream.options.KEYWORDS`) are
    ``overrides``: they set the same fields, on top of ``options`` when both are given.
    ``verify=True`` checks every written file against the inputs (default: not
    verified; no environment variable changes that); an error-level finding raises
    :class:`VerifyFailed`
    (the output stays, for inspection). Raises
    :class:`~tracefuse_stream.errors.TraceFuseError` subclasses on bad input or output;
    no file is left under ``output`` then.
    """
    opts = MergeOptions.from_kwargs(options, **overrides)
    with dask_backend(opts.execution.dask, inputs):  # the side passes on a cluster (dask=), if given
        return _merge_cycles(inputs, output, opts)


def _merge_cycles(inputs: InputSpec, output: str, opts: MergeOptions) -> MergeSummary:
    """One merge, or one per profiling cycle (``--cycle all``)."""
    if opts.selection.cycle == "all":  # one merge per profiling cycle: merged.cycle1.json.gz, ...
        import dataclasses

        def one_cycle(output: str, cycle: int, **_: Any) -> MergeSummary:
            sel = dataclasses.replace(opts.selection, cycle=cycle)
            return _merge(inputs, output, dataclasses.replace(opts, selection=sel))

        context = {"inputs": inputs, "rank_from": opts.selection.rank_from, "salvage": opts.execution.salvage}
        return merge_each_cycle(one_cycle, context, output)
    return _merge(inputs, output, opts)


def _merge(inputs: InputSpec, output: str, opts: MergeOptions) -> MergeSummary:
    t0 = time.perf_counter()
    sel, ex, out_opts = opts.selection, opts.execution, opts.output
    output = "" if output is None else str(output)
    if out_opts.dry_run and output in ("", "-"):
        codec = "gzip"  # a dry run without a file name estimates the default output
    else:
        codec = "plain" if output == "-" else codec_for(output)
    plans = plan_inputs(inputs, rank_from=sel.rank_from, ranks=sel.ranks, salvage=ex.salvage, cycle=sel.cycle)
    planned = plans  # the run check's, after writing (plans are rebuilt by the alignment below)
    warnings = input_warnings(plans)
    facts = input_notes(plans)  # (plans are rebuilt by the alignment below)
    for p in plans:
        warnings.extend(f"{p.path}: {note}" for note in p.problems)
    n_jobs = resolve_jobs(ex.jobs, len(plans))
    plans, notes = apply_alignment(plans, opts.alignment, n_jobs, salvage=ex.salvage)
    flt = _event_filter(opts, resolve_window(plans, opts.window, n_jobs, salvage=ex.salvage))
    plans, base_ns = output_base(plans)
    groups = rank_groups(plans, out_opts.split_ranks)
    split = bool(out_opts.split_ranks)
    names = output_names(output, groups, split)
    links = _links(plans, flt, groups, n_jobs, notes) if out_opts.link_collectives else None
    try:
        results, sinks = _write_files(plans, groups, names, split, codec, flt, base_ns, opts, n_jobs, links)
    except EarlyEvents as e:  # events before the chosen base: again, from the earliest one
        plans, base_ns = output_base(plans, earliest_ns=e.earliest_ns)
        groups = rank_groups(plans, out_opts.split_ranks)
        results, sinks = _write_files(plans, groups, names, split, codec, flt, base_ns, opts, n_jobs, links)
    for r in results:
        warnings.extend(r.warnings)
    notes.extend(by_ranks((r.rank, n) for r in results for n in r.notes))  # "ranks 0-7: ..." once
    warnings.extend(_result_warnings(results, flt, opts) + _written_warnings(planned, results, flt))
    viewer = [estimate_viewer_bytes(ViewerCounts(json_bytes=s.json_bytes)) for s in sinks]
    big = max(range(len(sinks)), key=viewer.__getitem__, default=0)
    too_big = size_warning(
        max((s.json_bytes for s in sinks), default=0),
        largest(viewer),
        len(groups[big]) if groups else 0,
        split,
    )
    warnings.extend([too_big] if too_big else [])
    summary = MergeSummary(
        output=", ".join(names) if not out_opts.dry_run else f"(dry run, {codec})",
        ranks=[
            RankSummary(
                rank=r.rank,
                path=r.path,
                events_in=r.events_in,
                events_out=r.events_out,
                dropped=r.dropped,
                shift_ns=p.shift_ns,
                seconds=r.seconds,
                salvage=r.salvage,
                metadata_out=r.metadata_out,
                metadata_in=r.metadata_in,
                skipped=r.skipped,
                flows_added=r.flows_added,
                counters_added=r.counters_added,
                json_bytes_in=r.json_bytes_in,
            )
            for p, r in zip(plans, results)
        ],
        base_time_ns=base_ns,
        bytes_in=sum(p.size_bytes for p in plans),
        bytes_out=sum(s.bytes_written for s in sinks),
        json_bytes=sum(s.json_bytes for s in sinks),
        seconds=time.perf_counter() - t0,
        jobs=n_jobs,
        warnings=warnings,
        notes=facts + notes,
        outputs=[] if out_opts.dry_run else names,
        dry_run=out_opts.dry_run,
        window_ns=flt.window_ns,
        viewer_memory_bytes=largest(viewer),
        collectives_events=0 if links is None else links.summary_events,
    )
    if out_opts.verify and not out_opts.dry_run and output != "-" and not is_special_file(output):
        _verify_outputs(summary, groups)
    return summary


def _links(
    plans: List[RankPlan], flt: EventFilter, groups: List[List[RankPlan]], jobs: int, notes: List[str]
) -> LinkPlan:
    """``--link-collectives``: the links (one pass over collective events only:
    align/links.py) and every GPU rank's step counters (report/step_counters.py) in
    ``links.counters``, from the summary's analysis (made once, here: its pass per file
    gives every rank's step figures) and, for the ranks it did not read (no instance
    matched), info's pass over their files (sidepasses.step_figures); notes into ``notes``."""
    links = plan_links(plans, flt, groups, jobs)
    notes.extend(links.notes())
    link_analysis(links, plans, jobs)
    known = links.table.step_times if links.table is not None else {}
    rows, unread = step_figures(plans, known, jobs)
    links.counters, more = plan_counters(plans, rows, flt, unread)
    notes.extend(more)
    return links


def _result_warnings(results: List[RankResult], flt: EventFilter, opts: MergeOptions) -> List[str]:
    """A time selection that left some ranks without events."""
    if flt.window_ns is None:
        return []
    empty = [r.rank for r in results if r.events_out == r.metadata_out]
    if not empty:
        return []
    what = "--steps" if opts.window.steps is not None else "--window"
    return [
        f"{what} leaves rank(s) {compress_ranges(empty)} with no events (their profiles do not "
        "reach into the window; check the ranks' spans with `info`)"
    ]


def _written_warnings(planned: List[RankPlan], results: List[RankResult], flt: EventFilter) -> List[str]:
    """The run check's findings that need a pass over the files (plan/runcheck.py
    written_findings), from the events written: first and last time, steps. Not under
    ``--steps``/``--window``: what was written is the window's, not the recordings."""
    if flt.window_ns is not None or not isinstance(planned, PlanList):
        return []
    extents = {r.path: (r.first_ns, r.last_ns, r.events_in) for r in results}
    steps = {r.rank: r.steps for r in results}
    return written_findings(planned, extents, steps, selected=planned.selected)


def _event_filter(opts: MergeOptions, window_ns: Optional[tuple]) -> EventFilter:
    f = opts.filters
    return EventFilter(
        include_pyfunc=f.include_pyfunc,
        keep_cat=f.keep_cat,
        drop_cat=f.drop_cat,
        name_regex=f.name_regex,
        fn=f.filter_fn,
        window_ns=window_ns,
        args=f.args,
    )


def _write_files(
    plans: List[RankPlan],
    groups: List[List[RankPlan]],
    names: List[str],
    split: bool,
    codec: str,
    flt: EventFilter,
    base_ns: int,
    opts: MergeOptions,
    n_jobs: int,
    links: Any = None,
) -> tuple[List[RankResult], List[MergeSink]]:
    """Stream every rank into a fragment and hand the fragments, in rank order, to
    one sink per rank group; on any failure or interruption every sink is aborted
    and every fragment removed, so nothing appears under the output names."""
    dry_run = opts.output.dry_run
    sinks: List[MergeSink] = []
    bar = Progress(sum(p.size_bytes for p in plans), opts.execution.progress)
    frags: Optional[FragmentDir] = None
    results: List[RankResult] = []
    inputs_paths = [p.path for p in plans]
    try:
        for name, group in zip(names, groups, strict=True):
            sinks.append(_sink(name, codec, opts, inputs_paths, group))
        if not dry_run:
            frags = FragmentDir(sinks[0].fragment_dir)
        for s in sinks:
            s.begin(base_ns)
        if links is not None:  # --link-collectives: the "Collectives" summary process first
            links.summary_notes = write_summaries(sinks, links, base_ns, plans, n_jobs)
        group_of = {p.rank: gi for gi, g in enumerate(groups) for p in g}
        titles = {r: (t, place) for r, t, place in opts.output.rank_titles or ()}
        tasks = [
            RankTask(
                p,
                flt,
                sinks[group_of[p.rank]].fragment_codec,
                None if frags is None else frags.file_for(p.rank),
                opts.execution.salvage,
                None if links is None else tuple(links.by_rank.get(p.rank, ())),
                title=titles.get(p.rank),
                counters=None if links is None else links.counters.get(p.rank),
            )
            for p in plans
        ]
        n_jobs = resolve_jobs(opts.execution.jobs, len(plans))
        plan_of = {p.rank: p for p in plans}
        # closed here, not by the garbage collector: a failed write (EPIPE of -o - | head)
        # stops the workers before the fragments are removed and the process exits
        ranks = run_in_order(stream_rank, tasks, n_jobs, bar, weights=[p.size_bytes for p in plans])
        with contextlib.closing(ranks):
            for res in ranks:
                gi = group_of[res.rank]  # meta: the rank's own header (a Perfetto archive's member needs it)
                own = file_meta(base_ns, [plan_of[res.rank]], gi, names, split, flt, {res.rank: res})
                sinks[gi].add_rank(res.rank, res.piece, own)
                _remove_fragment(res.piece.path)
                results.append(res)
        if not dry_run:
            check_early(results, base_ns, retry=names[0] != "-" and not is_special_file(names[0]))
        by_rank: Dict[int, RankResult] = {r.rank: r for r in results}
        for gi, g in enumerate(groups):
            sinks[gi].end(file_meta(base_ns, g, gi, names, split, flt, by_rank))
        raise_if_signalled()  # a signal whose exception was lost never lets the merge commit
        for s in sinks:
            s.commit()
    except KeyboardInterrupt:
        abort_all(sinks)
        raise Interrupted("interrupted (SIGINT); no output written") from None
    except BaseException:
        abort_all(sinks)
        raise
    finally:
        bar.close()
        if frags is not None:
            frags.close()
    return results, sinks


def _sink(name: str, codec: str, opts: MergeOptions, inputs: List[str], group: List[RankPlan]) -> MergeSink:
    """The sink of one output file (its rank group's plans: a Perfetto archive's members)."""
    return sink_for(
        name,
        codec,
        head=head_bytes,
        tail=tail_bytes,
        force=opts.output.force,
        inputs=inputs,
        dry_run=opts.output.dry_run,
        plans=group,
    )


def _remove_fragment(path: Optional[str]) -> None:
    """A rank's fragment, once spliced (a dry run has none)."""
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass


def _verify_outputs(summary: MergeSummary, groups: List[List[RankPlan]]) -> None:
    """Run the verifier on every written file against the inputs of its ranks;
    salvaged merges are checked without ``--against`` (skipped events are known
    to be missing)."""
    salvaged = any(r.salvage for r in summary.ranks)
    for out, group in zip(summary.outputs, groups):
        if is_archive_name(out):  # each member against its rank's input (verify/archive.py)
            reports = verify_archive(out, group, against=not salvaged)
        else:
            reports = [verify_file(out, against=None if salvaged else [p.path for p in group])]
        for report in reports:
            summary.verify_reports.append(report)
            if not report.ok:
                first = report.errors[0]
                raise VerifyFailed(
                    f"{report.path}: verify found {len(report.errors)} error(s), first: {first.code}: {first.message}"
                )


__all__ = ["merge", "MergeSummary", "RankSummary", "VerifyFailed", "usable_cores"]
