"""``tracefuse_stream.stragglers()``: the straggler report as a Python object.

Why: the report ``info --collectives --json`` prints is what notebooks and dashboards
want, without a subprocess and a JSON parse. This is that same object (the same
planning, the same single pass per file, the same judgement and why; schema in
docs/collectives.md), for the latest profiling cycle or the one asked for.
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, TypedDict, Union

from tracefuse_stream.align.collectives import CollectiveTable
from tracefuse_stream.align.instance_ends import MAX_CLOCK_OFFSET_S, clock_offset_limit
from tracefuse_stream.analyze.assessment import not_assessed
from tracefuse_stream.cluster import dask_backend
from tracefuse_stream.errors import InputError
from tracefuse_stream.listing import inline
from tracefuse_stream.plan.runcheck import require_one_run
from tracefuse_stream.report.collectives import collect_analyses, to_json
from tracefuse_stream.report.info import collect_info, input_list, rank_list_arg
from tracefuse_stream.report.page_data import choose_shown_cycle, select_cycle
from tracefuse_stream.workers import check_jobs


class InputWarning(UserWarning):
    """What every command warns about the inputs (plan/planner.py ``PlanList.warnings``:
    world sizes that disagree, files left out, ranks missing from the world, ...), raised
    by :func:`stragglers` as a Python warning; the report's ``warnings`` holds the same."""


class StragglerReport(TypedDict, total=False):
    """``info --collectives --json``'s ``collectives`` object (docs/collectives.md)."""

    ranks: List[Dict[str, Any]]
    instances: List[Dict[str, Any]]
    straggler: Optional[int]
    stragglers: List[Dict[str, Any]]
    candidates: List[Dict[str, Any]]
    verdict: Dict[str, Any]
    definitions: str
    by_step: List[Dict[str, Any]]
    threshold: Dict[str, Any]
    why: List[Dict[str, Any]]
    breakdown: List[Dict[str, Any]]
    per_collective: List[Dict[str, Any]]
    hosts: Dict[str, Optional[str]]
    unmatched: Dict[str, Any]
    point_to_point: Dict[str, Any]
    notes: List[str]
    warnings: List[str]
    not_assessed: Optional[str]


def stragglers(
    inputs: Union[str, os.PathLike[str], Sequence[Union[str, os.PathLike[str]]]],
    *,
    ranks: Union[None, str, Sequence[int]] = None,
    rank_from: str = "auto",
    cycle: Optional[int] = None,
    jobs: int = 1,
    dask: Optional[str] = None,
    max_clock_offset_s: float = MAX_CLOCK_OFFSET_S,
    max_steps: Optional[int] = None,
) -> StragglerReport:
    """Who holds the others back, per step, and why (see :mod:`tracefuse_stream.analyze.stragglers`
    and :mod:`tracefuse_stream.analyze.why`).

    ``inputs``: files and run directories as ``merge`` takes them (a path, ``str`` or
    ``pathlib.Path``, or a list of them); ``ranks``: a subset
    (``"0,4"``, ``"0-7"`` or a list); ``cycle``: the profiling cycle (1-based; default the
    latest, as ``info --collectives``); ``jobs``: worker processes; ``dask``: a Dask
    scheduler address (``tcp://host:8786``) or scheduler file: the per-rank scans run
    on that cluster's workers instead (cluster.py; a ClusterError if it cannot);
    ``max_clock_offset_s``: host clocks estimated further apart (seconds) raise a
    :class:`~tracefuse_stream.errors.UsageError` naming them (two runs look the same; synced
    hosts agree to milliseconds): a larger value accepts the offset; ``max_steps``: the
    steps analysed per rank at most (None: min(1,000, 163,840 / rank files); when steps
    are left out, ``step_cap`` says so: docs/collectives.md, *The cap on steps*). A file that cannot be
    read raises :class:`~tracefuse_stream.errors.InputError` naming it. The input warnings
    every command prints are ``warnings`` (each also an :class:`InputWarning`); mixed runs,
    one recording under several ranks, a ``cycle`` or ``ranks`` that select nothing raise
    :class:`~tracefuse_stream.errors.UsageError`, worded as ``merge`` words them.
    """
    check_jobs(jobs)  # as merge() checks it: -1 is an error, not one worker
    paths = input_list(inputs)  # a Path is one input; anything else but paths a UsageError
    limit = clock_offset_limit(max_clock_offset_s)
    with dask_backend(dask, paths):  # the per-rank passes on a cluster, if given
        return _stragglers(paths, ranks, rank_from, cycle, jobs, limit, max_steps)


def _stragglers(
    paths: List[Any],
    ranks: Union[None, str, Sequence[int]],
    rank_from: str,
    cycle: Optional[int],
    jobs: int,
    max_clock_offset_s: float,
    max_steps: Optional[int] = None,
) -> StragglerReport:
    wanted = rank_list_arg(ranks)
    scans: List[Any] = []
    plans, _rows, _out, _text = collect_info(
        paths, rank_from=rank_from, ranks=wanted, jobs=jobs, sections=["collectives"], scans_out=scans,
        max_steps=max_steps,
    )  # fmt: skip
    if plans.broken:
        path, why = plans.broken[0]
        raise InputError(path, str(why))
    key = choose_shown_cycle(plans, cycle, inline([str(p) for p in paths], limit=3))
    checks = select_cycle(plans.run_checks(), key)
    require_one_run(checks, "stragglers()")  # mixed runs, one recording under several ranks
    analyses = collect_analyses(
        [p for p in plans if p.cycle == key],
        [s for p, s in zip(plans, scans) if p.cycle == key],
        jobs,
        max_clock_offset_s=max_clock_offset_s,
        step_caps=plans.step_caps,
    )
    analysis = analyses.get(key)
    report: Dict[str, Any] = to_json(analysis if analysis is not None else _empty())["collectives"]
    report["warnings"] = plans.warnings()  # the input warnings every command prints
    report["not_assessed"] = not_assessed(analysis.table if analysis is not None else _empty(), checks)
    for w in report["warnings"]:
        warnings.warn(w, InputWarning, stacklevel=3)  # the caller of stragglers()
    return report  # type: ignore[return-value]


def _empty() -> Any:
    return CollectiveTable([], [], Counter(), [])


__all__ = ["InputWarning", "StragglerReport", "stragglers"]
