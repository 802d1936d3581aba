"""The ``merge`` subcommand's action: the parsed arguments as one validated
:class:`~tracefuse_stream.options.MergeOptions`, the merge, its summary and exit code.

Its own module so that only ``merge`` imports the merge pipeline (cli/app.py imports
a command's module when that command runs).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional

from tracefuse_stream.errors import EXIT_OK, EXIT_SALVAGED, UsageError
from tracefuse_stream.options import (
    Alignment,
    Execution,
    Filters,
    MergeOptions,
    OutputOptions,
    Selection,
    TimeWindow,
)
from tracefuse_stream.pipeline.against import merge_against
from tracefuse_stream.pipeline.orchestrate import merge
from tracefuse_stream.rankset import parse_rank_spec, parse_steps, parse_window_ms
from tracefuse_stream.textout import terminal


def rank_list(spec: Optional[str]) -> Optional[List[int]]:
    """``--ranks SPEC`` as a list (``None``: every rank)."""
    return None if spec is None else parse_rank_spec(spec)


def merge_options(a: argparse.Namespace) -> MergeOptions:
    """The command line's merge arguments as one validated :class:`MergeOptions`."""
    ranks = rank_list(a.ranks)
    return MergeOptions(
        selection=Selection(rank_from=a.rank_from, ranks=tuple(ranks) if ranks else None, cycle=a.cycle),
        filters=Filters(
            include_pyfunc=a.include_pyfunc,
            keep_cat=frozenset(a.keep_cat) if a.keep_cat else None,
            drop_cat=frozenset(a.drop_cat or ()),
            name_regex=a.name,
            args=a.args,
        ),
        window=TimeWindow(
            steps=parse_steps(a.steps) if a.steps else None,
            step_rank=a.step_rank,
            window_ms=parse_window_ms(a.window) if a.window else None,
        ),
        alignment=Alignment(mode=a.align, clock_offsets=a.clock_offsets),
        output=OutputOptions(
            force=a.force,
            split_ranks=a.split_ranks,
            dry_run=a.dry_run,
            verify=True if a.verify else None,
            link_collectives=a.link_collectives,
        ),
        execution=Execution(
            jobs=a.jobs, progress=not a.quiet and sys.stderr.isatty(), salvage=a.salvage, dask=a.dask
        ),
    )


def cmd_merge(a: argparse.Namespace) -> int:
    if a.against:  # one step of each run side by side (pipeline/against.py)
        summary, off = merge_against(a.inputs, a.against, a.output, merge_options(a), a.base_step)
        if not a.quiet:
            print(
                f"BASE ({' '.join(a.against)}): its processes are 'BASE RANK r', each under 'NEW RANK r' "
                f"(pid and flow-id rules: merged as rank {off}+r)",
                file=sys.stderr,
            )
    else:
        if a.base_step is not None:
            raise UsageError("--base-step goes with --against BASE")
        summary = merge(a.inputs, a.output, merge_options(a))
    if a.json_summary:  # stdout holds only the trace with -o -
        to = sys.stderr if a.output == "-" else sys.stdout
        print(json.dumps(summary.to_dict(), indent=2, default=str), file=to)
    elif not a.quiet:
        print(summary.format_text(), file=sys.stderr if a.output == "-" else sys.stdout)
    elif summary.warnings:  # -q drops the summary, not what may make the result wrong (as report -q)
        print(terminal("\n".join(f"warning: {w}" for w in summary.warnings)), file=sys.stderr)
    if a.verify and not a.quiet:
        for report in summary.verify_reports:
            print(report.format_text(), file=sys.stderr)
    if any(r.salvage for r in summary.ranks):
        return EXIT_SALVAGED
    return EXIT_OK


__all__ = ["cmd_merge", "merge_options", "rank_list"]
