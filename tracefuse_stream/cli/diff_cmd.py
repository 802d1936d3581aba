"""The ``diff`` subcommand: two runs compared (report/diff_api.py), as text or ``--json``.

Its own module, imported by cli/app.py when ``diff`` runs: only the argument
definitions below are needed for ``--help``.
"""

from __future__ import annotations

import argparse
import sys

from tracefuse_stream.cli.argtypes import (
    JOBS_HELP,
    add_dask_arg,
    add_max_clock_offset_arg,
    add_max_steps_arg,
    jobs_count,
)

ALIGN_STEPS = ("number", "position")


def add_diff_arguments(p: argparse.ArgumentParser) -> None:
    """``diff BASE_RUN NEW_RUN`` and its options."""
    p.add_argument(
        "base", metavar="BASE_RUN", help="the run compared against: a run directory or a trace file"
    )
    p.add_argument("new", metavar="NEW_RUN", help="the run to explain: a run directory or a trace file")
    p.add_argument(
        "--base-files", nargs="+", metavar="FILE", default=[],
        help="more inputs of BASE_RUN (files or directories), as info takes them",
    )  # fmt: skip
    p.add_argument(
        "--new-files", nargs="+", metavar="FILE", default=[], help="more inputs of NEW_RUN, as --base-files"
    )
    p.add_argument(
        "--rank-from", choices=["auto", "order"], default="auto",
        help="how each file's rank is found, as merge (default: auto)",
    )  # fmt: skip
    p.add_argument("--ranks", metavar="SPEC", help="compare only these ranks of both runs, e.g. 0-3")
    p.add_argument(
        "--steps", metavar="A:B", help="compare ProfilerStep#A..#B of both runs (N alone: that step)"
    )
    p.add_argument("--base-steps", metavar="A:B", help="the steps of BASE_RUN (instead of --steps)")
    p.add_argument("--new-steps", metavar="A:B", help="the steps of NEW_RUN (instead of --steps)")
    p.add_argument(
        "--align-steps", choices=ALIGN_STEPS, default="number",
        help="match steps by ProfilerStep number (default) or by position (the first of each, ...)",
    )  # fmt: skip
    p.add_argument(
        "--cycle",
        metavar="N|latest",
        help="profiling cycle of each run when a directory holds several (default: latest)",
    )
    p.add_argument(
        "--base-cycle", metavar="N|latest", help="the profiling cycle of BASE_RUN (instead of --cycle)"
    )
    p.add_argument(
        "--new-cycle", metavar="N|latest", help="the profiling cycle of NEW_RUN (instead of --cycle)"
    )
    add_max_steps_arg(p)
    add_max_clock_offset_arg(p)
    p.add_argument("-j", "--jobs", type=jobs_count, default=0, help=JOBS_HELP)
    add_dask_arg(p, "the two runs are compared here")
    p.add_argument("--json", action="store_true", help="the diff as JSON (schema: docs/diff.md)")


def cmd_diff(a: argparse.Namespace) -> int:
    # lazy on purpose: the parser imports this module for its arguments; the analysis
    # loads only when the command runs (cli/app.py: a command imports its own modules)
    from tracefuse_stream.cluster import dask_backend  # lazy: see above
    from tracefuse_stream.errors import EXIT_OK  # lazy: see above
    from tracefuse_stream.report.diff_api import diff  # lazy: see above
    from tracefuse_stream.report.diff_text import render  # lazy: see above
    from tracefuse_stream.report.json_stream import write_json  # lazy: see above
    from tracefuse_stream.textout import terminal  # lazy: see above

    base, new = [a.base, *a.base_files], [a.new, *a.new_files]
    with dask_backend(a.dask, base + new):  # the per-rank passes on a cluster (--dask), if given
        report = diff(
            base,
            new,
            ranks=a.ranks,
            rank_from=a.rank_from,
            steps=a.steps,
            base_steps=a.base_steps,
            new_steps=a.new_steps,
            align_steps=a.align_steps,
            cycle=a.cycle,
            jobs=a.jobs,
            base_cycle=a.base_cycle,
            new_cycle=a.new_cycle,
            max_clock_offset_s=a.max_clock_offset,
            max_steps=a.max_steps,
        )
    if a.json:
        write_json(report, sys.stdout)  # json.dumps(indent=2)'s text, strict (no NaN)
    else:
        print(terminal(render(report)))
    return EXIT_OK


__all__ = ["add_diff_arguments", "cmd_diff"]
