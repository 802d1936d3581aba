"""The ``info`` subcommand's action: one pass per file (analyze/onepass.py) answers the
per-rank table and every asked-for section (``--steps``, ``--align``,
``--collectives``); text or one JSON shape (report/info.py ``INFO_JSON_KEYS``).

Its own module so that ``info`` never imports the merge pipeline (cli/app.py imports
a command's module when that command runs).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List, Optional, Tuple

from tracefuse_stream.align.clock import estimate_offsets, format_alignment_table
from tracefuse_stream.analyze import kernel_categories
from tracefuse_stream.analyze.onepass import collective_ends
from tracefuse_stream.cluster import dask_backend
from tracefuse_stream.errors import EXIT_INPUT, EXIT_OK, UsageError
from tracefuse_stream.listing import inline
from tracefuse_stream.plan.runcheck import merge_inputs, require_one_run
from tracefuse_stream.rankset import compress_ranges, parse_rank_spec, parse_steps
from tracefuse_stream.report.collectives import info_collectives
from tracefuse_stream.report.info import collect_info
from tracefuse_stream.report.json_stream import write_json
from tracefuse_stream.report.page_data import check_steps
from tracefuse_stream.textout import terminal


def _window(spec: Optional[str]) -> Optional[Tuple[int, int]]:
    """``--step-window A:B`` read as ``--steps A:B`` is (rankset.py), its errors naming it."""
    try:
        return parse_steps(spec) if spec else None
    except UsageError as e:
        raise UsageError(str(e).replace("--steps", "--step-window")) from None


def cmd_info(a: argparse.Namespace) -> int:
    with dask_backend(a.dask, a.inputs):  # the per-rank passes on a cluster (--dask), if given
        return _info(a)


def _info(a: argparse.Namespace) -> int:
    sections = [s for s in ("steps", "collectives", "align") if getattr(a, s)]
    for flag, v in (("--max-steps", a.max_steps), ("--step-window", a.step_window)):
        if v is not None and not a.collectives:
            raise UsageError(f"{flag} chooses the steps --collectives analyses: give --collectives too")
    window = _window(a.step_window)
    scans: List[Any] = []  # one pass per file answers every section (analyze/onepass.py)
    # read before the pass: a bad file is a usage error naming it, before any input is read
    categories = kernel_categories.load(a.kernel_categories).spec() if a.kernel_categories else None
    plans, rows, out, text = collect_info(
        a.inputs,
        rank_from=a.rank_from,
        ranks=parse_rank_spec(a.ranks) if a.ranks is not None else None,
        jobs=a.jobs,
        sections=sections,
        scans_out=scans,
        kernel_categories=categories,
        name_cap=a.name_cap,
        max_steps=a.max_steps,
        step_window=window,
    )
    sections_from = len(text)  # with --collectives, only the sections follow its report
    if a.steps:
        steps: Dict[int, set] = plans.steps or {}  # every step recorded, not only those the cap kept
        out["steps"] = {str(r): sorted(v) for r, v in steps.items()}
        for r, v in steps.items():
            text.append(f"rank {r}: ProfilerSteps {compress_ranges(sorted(v)) or 'none'}")
    if a.align:
        hosts = {p.rank: p.host_name for p in plans}
        coll = {p.rank: collective_ends(sc) for p, sc in zip(plans, scans)}
        al = estimate_offsets(coll, hosts)
        out["align"] = {str(r): a_.to_header() for r, a_ in al.items()}
        text.append("clock alignment from collectives (not applied; merge --align collectives does):")
        text.append(format_alignment_table(al))
    if a.collectives:
        checks = plans.run_checks()
        require_one_run(checks)  # mixed runs, one recording under several ranks: a wrong answer
        if window is not None:  # both ends recorded, as report --steps and merge --steps ask
            check_steps(set().union(*plans.cycle_steps.values()), window, f"in {inline(a.inputs, limit=3)}")
        return info_collectives(
            plans,
            a.json,
            into=out,
            inputs=merge_inputs(plans, a.inputs),
            scans=scans,
            jobs=a.jobs,
            extra=text[sections_from:],
            warnings=out["warnings"],
            checks=checks,
            max_clock_offset_s=a.max_clock_offset,
            step_window=window,
        )
    if a.json:
        write_json(out, sys.stdout)  # one shape: report/info.py INFO_JSON_KEYS
    else:
        print(terminal("\n".join(text)))
    return EXIT_INPUT if plans.broken else EXIT_OK


__all__ = ["cmd_info"]
