"""``tracefuse_stream.diff()`` and the runs behind ``tracefuse diff``: two runs compared.

Why here: each run is read exactly as ``info --collectives`` reads it (report/info.py's
single pass per file, with its timelines; the same run checks and cycle choice as
``stragglers()``), then reduced to per-rank, per-step figures (analyze/diff_figures.py)
and compared (analyze/diff.py). The command line and the Python API share this, so
``diff()`` returns exactly the object ``diff --json`` prints (docs/diff.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union

from tracefuse_stream.align.instance_ends import MAX_CLOCK_OFFSET_S, clock_offset_limit
from tracefuse_stream.analyze.analysis import collect_analyses
from tracefuse_stream.analyze.assessment import no_overlap_text
from tracefuse_stream.analyze.diff import Diff, compare
from tracefuse_stream.analyze.diff_figures import RunFigures, run_figures
from tracefuse_stream.analyze.diff_match import Matched, match_ranks, match_steps, run_steps
from tracefuse_stream.errors import InputError
from tracefuse_stream.listing import inline
from tracefuse_stream.plan.planner import PlanList
from tracefuse_stream.plan.runcheck import require_one_run
from tracefuse_stream.rankset import parse_steps
from tracefuse_stream.report.collectives import verdict_sentence
from tracefuse_stream.report.diff_json import to_json
from tracefuse_stream.report.info import collect_info, input_list, rank_list_arg
from tracefuse_stream.report.page_data import choose_shown_cycle, select_cycle
from tracefuse_stream.select.window import steps_not_found
from tracefuse_stream.workers import check_jobs

Inputs = Union[str, os.PathLike[str], Sequence[Union[str, os.PathLike[str]]]]
Ranks = Union[None, str, Sequence[int]]


@dataclass
class Run:
    """One run read for a diff: its figures, the files and the input warnings (and the
    step cap's line when it applied: analyze/step_cap.py); ``recorded``: every step
    number its ranks recorded, also those the cap left out (``--steps`` is checked on it)."""

    figures: RunFigures
    paths: List[str]
    warnings: List[str]
    recorded: Set[int] = field(default_factory=set)


def _paths(inputs: Inputs) -> List[str]:
    return input_list(inputs)


def _ranks(ranks: Ranks) -> Optional[List[int]]:
    return rank_list_arg(ranks)


def load_run(
    inputs: Inputs,
    *,
    ranks: Optional[List[int]],
    rank_from: str,
    cycle: Any,
    jobs: int,
    label: str,
    max_clock_offset_s: float = MAX_CLOCK_OFFSET_S,
    max_steps: Optional[int] = None,
    window: Optional[str] = None,
) -> Run:
    """Read one run (one pass per file, as ``info --collectives``) into its figures; a
    broken file is an :class:`InputError` naming it; mixed runs, one recording under
    several ranks, a ``cycle`` that is not there: the ``merge`` / ``stragglers()`` errors.
    ``max_steps`` (None: automatic) and ``window`` (its ``--steps``): the step cap
    (analyze/step_cap.py)."""
    paths = _paths(inputs)
    scans: List[Any] = []
    plans, _rows, _out, _text = collect_info(
        paths, rank_from=rank_from, ranks=ranks, jobs=jobs, sections=["collectives"], scans_out=scans,
        max_steps=max_steps, step_window=_window(window),
    )  # fmt: skip
    return run_from_pass(
        paths, plans, scans, cycle=cycle, jobs=jobs, label=label, max_clock_offset_s=max_clock_offset_s
    )


def run_from_pass(
    paths: Sequence[str],
    plans: PlanList,
    scans: Sequence[Any],
    *,
    cycle: Any,
    jobs: int,
    label: str,
    max_clock_offset_s: float = MAX_CLOCK_OFFSET_S,
) -> Run:
    """One run's figures from a pass already made (``collect_info``'s plans and scans):
    ``report --against`` reads its own run once, for the page and for the diff."""
    paths = list(paths)
    if plans.broken:
        path, why = plans.broken[0]
        raise InputError(path, f"{label}: {why}")
    key = choose_shown_cycle(plans, cycle, inline(paths, limit=3))
    require_one_run(select_cycle(plans.run_checks(), key), f"diff ({label})")
    mine = [(p, s) for p, s in zip(plans, scans) if p.cycle == key]
    analysis = collect_analyses(
        [p for p, _ in mine],
        [s for _, s in mine],
        jobs,
        every_rank=False,
        max_clock_offset_s=max_clock_offset_s,
        step_caps=plans.step_caps,
    ).get(key)
    verdict = (
        verdict_sentence(analysis.table, analysis.verdict, analysis.stats) if analysis is not None else ""
    )
    sizes = [p.world_size for p, _ in mine if p.world_size is not None]
    figures = run_figures(
        [p.rank for p, _ in mine],
        [s for _, s in mine],
        analysis,
        world_size=max(sizes) if sizes else None,
        verdict=f"straggler: {verdict}" if verdict else "straggler: not assessed (no collective matched)",
    )
    overlap = no_overlap_text(analysis.table) if analysis is not None else None
    cap = plans.step_caps.get(key)  # said with the run's warnings: never a silent cut
    said = [overlap] if overlap else []
    return Run(
        figures,
        paths,
        plans.warnings() + said + ([cap.text()] if cap else []),
        plans.cycle_steps.get(key, set()),
    )


def _window(spec: Optional[str]) -> Optional[Tuple[int, int]]:
    return parse_steps(spec) if spec else None


def check_window(run: Run, label: str, spec: Optional[str]) -> None:
    """``--steps A:B`` must name steps the run recorded (both ends), as ``merge`` and
    ``report`` ask: a step that is not there is the same error everywhere (issue 39)."""
    window = _window(spec)
    if window is None:
        return
    present = run.recorded or {s for per in run.figures.steps.values() for s in per}
    missing = [s for s in dict.fromkeys(window) if s not in present]
    if missing:
        raise steps_not_found(missing, f"in {label} ({inline(run.paths, limit=3)})", present)


def match(
    base: RunFigures,
    new: RunFigures,
    *,
    ranks_given: bool,
    steps: Optional[str] = None,
    base_steps: Optional[str] = None,
    new_steps: Optional[str] = None,
    align_steps: str = "number",
) -> Matched:
    """The ranks and step pairs to compare (analyze/diff_match.py; ``--steps`` for both
    runs, ``--base-steps`` / ``--new-steps`` for one)."""
    ranks = match_ranks(base.ranks, new.ranks, (base.world_size, new.world_size), ranks_given)
    b = run_steps(base.steps, ranks, _window(base_steps or steps))
    n = run_steps(new.steps, ranks, _window(new_steps or steps))
    recorded = (run_steps(base.steps, ranks, None), run_steps(new.steps, ranks, None))
    return Matched(ranks, match_steps(b, n, align_steps, recorded), align_steps)


def run_diff(
    base: Inputs,
    new: Union[Inputs, Run],
    *,
    ranks: Ranks = None,
    rank_from: str = "auto",
    steps: Optional[str] = None,
    base_steps: Optional[str] = None,
    new_steps: Optional[str] = None,
    align_steps: str = "number",
    cycle: Any = None,
    jobs: int = 1,
    base_cycle: Any = None,
    new_cycle: Any = None,
    max_clock_offset_s: float = MAX_CLOCK_OFFSET_S,
    max_steps: Optional[int] = None,
) -> Tuple[Diff, Run, Run]:
    """Both runs read and compared (the command line's and :func:`diff`'s work);
    ``new`` may be a :class:`Run` already read (:func:`run_from_pass`)."""
    check_jobs(jobs)  # as merge() checks it: -1 is an error, not one worker
    limit = clock_offset_limit(max_clock_offset_s)
    wanted = _ranks(ranks)
    bc = cycle if base_cycle is None else base_cycle
    nc = cycle if new_cycle is None else new_cycle
    b = load_run(
        base, ranks=wanted, rank_from=rank_from, cycle=bc, jobs=jobs, label="BASE", max_clock_offset_s=limit,
        max_steps=max_steps, window=base_steps or steps,
    )  # fmt: skip
    n = (
        new
        if isinstance(new, Run)
        else load_run(
            new,
            ranks=wanted,
            rank_from=rank_from,
            cycle=nc,
            jobs=jobs,
            label="NEW",
            max_clock_offset_s=limit,
            max_steps=max_steps,
            window=new_steps or steps,
        )  # fmt: skip
    )
    check_window(b, "BASE", base_steps or steps)
    check_window(n, "NEW", new_steps or steps)
    m = match(
        b.figures, n.figures, ranks_given=wanted is not None,
        steps=steps, base_steps=base_steps, new_steps=new_steps, align_steps=align_steps,
    )  # fmt: skip
    return compare(b.figures, n.figures, m), b, n


def diff(
    base: Inputs,
    new: Inputs,
    *,
    ranks: Ranks = None,
    rank_from: str = "auto",
    steps: Optional[str] = None,
    base_steps: Optional[str] = None,
    new_steps: Optional[str] = None,
    align_steps: str = "number",
    cycle: Any = None,
    jobs: int = 1,
    base_cycle: Any = None,
    new_cycle: Any = None,
    max_clock_offset_s: float = MAX_CLOCK_OFFSET_S,
    max_steps: Optional[int] = None,
) -> Dict[str, Any]:
    """What changed from run ``base`` to run ``new``, on which ranks, and whether it is
    real: the object ``tracefuse diff --json`` prints (schema: docs/diff.md).

    ``base`` / ``new``: files and run directories as ``merge`` takes them; ``ranks``: a
    subset of both (``"0-3"`` or a list; needed when the world sizes differ);
    ``steps`` (``"A:B"``) for both runs, ``base_steps`` / ``new_steps`` for one;
    ``align_steps``: ``"number"`` (the same ``ProfilerStep#N``) or ``"position"``;
    ``cycle``: the profiling cycle of each run (default: the latest; ``base_cycle`` /
    ``new_cycle``: of one run, e.g. two cycles of one folder); ``max_clock_offset_s``: host
    clocks further apart (seconds, estimated from the collectives) are a
    :class:`~tracefuse_stream.errors.UsageError` (two runs look the same); ``max_steps``:
    the steps analysed per rank at most (None: automatic, analyze/step_cap.py; when it
    leaves steps out, the run's warnings say so). Runs that cannot
    be matched raise :class:`~tracefuse_stream.errors.UsageError` naming what differs
    and the option that resolves it; an unreadable file an
    :class:`~tracefuse_stream.errors.InputError` naming it.
    """
    d, b, n = run_diff(
        base, new, ranks=ranks, rank_from=rank_from, steps=steps, base_steps=base_steps,
        new_steps=new_steps, align_steps=align_steps, cycle=cycle, jobs=jobs,
        base_cycle=base_cycle, new_cycle=new_cycle, max_clock_offset_s=max_clock_offset_s,
        max_steps=max_steps,
    )  # fmt: skip
    return to_json(d, b.paths, n.paths, b.warnings, n.warnings)


__all__ = ["Run", "diff", "load_run", "match", "run_diff", "run_from_pass"]
