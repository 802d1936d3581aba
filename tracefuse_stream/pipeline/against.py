"""``merge NEW --against BASE --steps N``: one step of each run side by side in one trace.

Why: after ``tracefuse diff`` says what changed, the user wants to *see* it: the same
step of both runs on one timeline, rank under rank. This is the ordinary merge (no
second writer) of both runs' files as one set of ranks: NEW's ranks keep their numbers,
BASE's rank r becomes rank ``OFFSET + r`` (``OFFSET``: the smallest power of ten above
every rank of both runs: pids and flow ids stay apart by the merge's own rules), and
its processes are titled ``BASE RANK r - CPU`` (NEW's ``NEW RANK r - CPU``), each
BASE rank sorted right under the same NEW rank so the two steps read rank under rank;
BASE's clock is shifted by one known offset (the ``--clock-offsets`` mechanism) so
that its step starts where NEW's step starts on their lowest ranks (BASE's own
rank-to-rank skew is kept). The window is the longer of the two steps (``--steps N``
timed on that run's lowest rank), so neither run's step is cut.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import replace
from typing import Dict, Optional, Sequence, Tuple

from tracefuse_stream.errors import UsageError
from tracefuse_stream.options import MergeOptions
from tracefuse_stream.pipeline.orchestrate import MergeSummary, merge
from tracefuse_stream.plan.planner import plan_all
from tracefuse_stream.plan.rankplan import RankPlan
from tracefuse_stream.select.window import find_step_window


def base_offset(ranks: Sequence[int]) -> int:
    """The smallest power of ten above every rank: BASE's rank r is merged as this + r."""
    top = max(ranks, default=0)
    off = 10
    while off <= top:
        off *= 10
    return off


def _plans(inputs: Sequence[str], opts: MergeOptions, label: str) -> Dict[int, RankPlan]:
    sel = opts.selection
    plans = plan_all(list(inputs), rank_from=sel.rank_from, ranks=sel.ranks, cycle=sel.cycle)
    if not plans:
        raise UsageError(f"{label}: no trace file in {', '.join(inputs)}")
    return {p.rank: p for p in plans}


def _step(p: RankPlan, step: int) -> Tuple[int, int]:
    """Absolute (start, end) ns of ``step`` on ``p``'s rank (the merge's own step lookup)."""
    return find_step_window(p.path, p.base_time_ns, step, step, rank=p.rank)


def side_by_side_inputs(
    new: Dict[int, RankPlan], base: Dict[int, RankPlan], step: int, base_step: int
) -> Tuple[Dict[int, str], int, int, int]:
    """``({rank: path}, BASE offset, shift ns of BASE, the rank whose step is the window)``."""
    off = base_offset(list(new) + list(base))
    ref_new, ref_base = new[min(new)], base[min(base)]
    n0, n1 = _step(ref_new, step)
    b0, b1 = _step(ref_base, base_step)
    shift = n0 - b0
    window_rank = ref_new.rank if n1 - n0 >= b1 - b0 else off + ref_base.rank
    mapping = {r: p.path for r, p in new.items()}
    mapping.update({off + r: p.path for r, p in base.items()})
    return mapping, off, shift, window_rank


def side_by_side_titles(
    new: Sequence[int], base: Sequence[int], off: int
) -> Tuple[Tuple[int, str, int], ...]:
    """``MergeOptions.output.rank_titles``: NEW's rank r is ``NEW RANK r``, BASE's
    (merged as ``off + r``) ``BASE RANK r``, sorted NEW 0, BASE 0, NEW 1, BASE 1, ...:
    a rank's two steps one under the other (a rank only one run has keeps its place)."""
    return tuple((r, f"NEW RANK {r}", 2 * r) for r in new) + tuple(
        (off + r, f"BASE RANK {r}", 2 * r + 1) for r in base
    )


def merge_against(
    new_inputs: Sequence[str],
    base_inputs: Sequence[str],
    output: str,
    options: MergeOptions,
    base_step: Optional[int] = None,
) -> Tuple[MergeSummary, int]:
    """Merge step N (``options.window.steps``, one step) of NEW and step ``base_step``
    (default N) of BASE side by side into ``output``; returns the summary and BASE's
    rank offset. ``--clock-offsets``, ``--align collectives`` and ``--window`` do not
    combine with it (BASE's shift is the one offset)."""
    w = options.window
    if w.steps is None or w.steps[0] != w.steps[1]:
        raise UsageError("--against shows one step of each run: give --steps N (one step)")
    if options.alignment.clock_offsets is not None or options.alignment.mode != "base":
        raise UsageError(
            "--against sets BASE's clock itself: leave out --clock-offsets and --align collectives"
        )
    if w.step_rank is not None:
        raise UsageError("--against times the step on each run's lowest rank: leave out --step-rank")
    step = w.steps[0]
    new, base = _plans(new_inputs, options, "NEW"), _plans(base_inputs, options, "BASE")
    mapping, off, shift, window_rank = side_by_side_inputs(
        new, base, step, step if base_step is None else base_step
    )
    base_window = base_step if base_step is not None else step
    fd, path = tempfile.mkstemp(prefix="tracefuse-against-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({str(off + r): shift / 1000.0 for r in base}, f)
        steps = (step, step) if window_rank < off else (base_window, base_window)
        opts = replace(
            options,
            selection=replace(options.selection, ranks=None, cycle=None),
            window=replace(w, steps=steps, step_rank=window_rank),
            alignment=replace(options.alignment, clock_offsets=path),
            output=replace(options.output, rank_titles=side_by_side_titles(list(new), list(base), off)),
        )
        return merge(mapping, output, opts), off
    finally:
        os.unlink(path)


__all__ = ["base_offset", "merge_against", "side_by_side_inputs", "side_by_side_titles"]
