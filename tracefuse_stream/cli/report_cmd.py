"""The ``report`` subcommand: one self-contained HTML page of the straggler report.

The page (report/page.py) is a view of the ``info --collectives --json`` object, made
by the same single pass over the inputs (report/page_data.py). It is written
atomically (write/atomic.py: a temporary file renamed into place) and, as ``merge``,
never over an existing file without ``--force``, never over an input.

Its own module, imported by cli/app.py when ``report`` runs: only the argument
definitions below are needed for ``--help``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict

from tracefuse_stream.cli.argtypes import (
    JOBS_HELP,
    add_dask_arg,
    add_max_clock_offset_arg,
    add_max_steps_arg,
    add_name_cap_arg,
    jobs_count,
)

DEFAULT_OUTPUT = "report.html"


def add_report_arguments(p: argparse.ArgumentParser) -> None:
    """``report``'s options besides the inputs, ``--rank-from`` and ``--ranks``."""
    p.add_argument(
        "-o",
        "--output",
        default=DEFAULT_OUTPUT,
        help="the HTML file to write; '-' for stdout (default: %(default)s)",
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing output (never an input)")
    p.add_argument(
        "--cycle",
        metavar="N|latest",
        help="profiling cycle to show when a directory holds several (default: the latest, as info --json)",
    )
    p.add_argument(
        "--steps", metavar="A:B", help="report on ProfilerStep#A..#B only (N alone: that one step)"
    )
    add_name_cap_arg(p)
    add_max_steps_arg(p)
    add_max_clock_offset_arg(p)
    p.add_argument("-j", "--jobs", type=jobs_count, default=0, help=JOBS_HELP)
    add_dask_arg(p, "the page is written here")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary line; warnings still go to stderr")
    p.add_argument(
        "--against",
        nargs="+",
        metavar="BASE",
        help="a base run (directories or files): the page gets a diff section, this run against it "
        "(tracefuse diff BASE INPUTS: the ranked changes, the step-time change per rank and step)",
    )


def _diff_section(a: argparse.Namespace, data: Any) -> Dict[str, Any]:
    """The diff BASE -> this run, exactly ``tracefuse diff``'s object, with this run's
    figures taken from the page's own pass (each file read once, not twice)."""
    from tracefuse_stream.report.diff_api import run_diff, run_from_pass  # lazy: see above
    from tracefuse_stream.report.diff_json import to_json  # lazy: see above

    plans, scans = data.read
    data.read = None  # the scans hold the run's timelines: gone once the figures are made
    limit = a.max_clock_offset
    new = run_from_pass(
        a.inputs, plans, scans, cycle=a.cycle, jobs=a.jobs, label="NEW", max_clock_offset_s=limit
    )
    del plans, scans
    d, b, n = run_diff(
        a.against, new, ranks=a.ranks, rank_from=a.rank_from, cycle=a.cycle, steps=a.steps, jobs=a.jobs,
        max_clock_offset_s=limit, max_steps=a.max_steps,
    )  # fmt: skip
    return to_json(d, b.paths, n.paths, b.warnings, n.warnings)


def _count(items: Any, what: str) -> str:
    n = len(items or [])
    return f"{n} {what}" + ("" if n == 1 else "s")


def cmd_report(a: argparse.Namespace) -> int:
    # lazy on purpose: the parser imports this module for its arguments; the page and the
    # pass load only when the command runs (cli/app.py: a command imports its own modules)
    from tracefuse_stream.cluster import dask_backend  # lazy: see above
    from tracefuse_stream.errors import EXIT_INPUT, EXIT_OK  # lazy: see above
    from tracefuse_stream.rankset import parse_rank_spec, parse_steps  # lazy: see above
    from tracefuse_stream.report.page import render_page  # lazy: see above
    from tracefuse_stream.report.page_data import command_line, report_data  # lazy: see above
    from tracefuse_stream.textout import printable  # lazy: see above
    from tracefuse_stream.write.atomic import AtomicOutput, check_output_path  # lazy: see above

    steps = parse_steps(a.steps) if a.steps else None
    if a.output != "-":  # fail before the pass, not after it
        check_output_path(Path(a.output), force=a.force, inputs=[])
    with dask_backend(a.dask, a.inputs):  # the per-rank pass on a cluster (--dask), if given
        data = report_data(
            a.inputs,
            rank_from=a.rank_from,
            ranks=parse_rank_spec(a.ranks) if a.ranks is not None else None,
            cycle=a.cycle,
            steps=steps,
            jobs=a.jobs,
            command=command_line(
                a.inputs, a.output, ranks=a.ranks, cycle=a.cycle, steps=a.steps, against=a.against
            ),
            keep_pass=bool(a.against),
            name_cap=a.name_cap,
            max_clock_offset_s=a.max_clock_offset,
            max_steps=a.max_steps,
        )
        if a.against:  # the diff BASE -> these inputs, as tracefuse diff gives it (docs/diff.md)
            data.document["diff"] = _diff_section(a, data)
    html = render_page(data.document).encode("utf-8")
    out = AtomicOutput(a.output, force=a.force, inputs=data.input_paths)
    try:
        assert out.file is not None
        out.file.write(html)
        out.commit()
    except BaseException:
        out.abort()
        raise
    c = data.document["collectives"]
    if not a.quiet:  # on stderr, also with -o - (stdout holds only the page)
        verdict = (c.get("verdict") or {}).get("text") or (
            f"straggler: rank {c['straggler']}" if c.get("straggler") is not None else "straggler: none"
        )
        if c.get("not_assessed"):  # said first, as on the page (once: not the verdict's same words)
            same = not c.get("instances") and verdict == "no collective instance matched across ranks"
            verdict = c["not_assessed"] if same else f"{c['not_assessed']}; {verdict}"
        print(
            f"{'stdout' if a.output == '-' else printable(a.output)}: {_count(c.get('ranks'), 'rank')} x {_count(c.get('by_step'), 'step')}, "
            f"{verdict} ({len(html) / 1e6:.2f} MB)",
            file=sys.stderr,
        )
    if a.against and not a.quiet:
        d = data.document["diff"]
        print(f"against the base run: {d['summary']}, {len(d['changes'])} change(s) listed", file=sys.stderr)
    for w in c.get("warnings") or []:  # the input warnings every command prints
        print(f"warning: {w}", file=sys.stderr)
    for path, why in data.broken:
        print(f"BROKEN {printable(path)}: {printable(why)}", file=sys.stderr)
    return EXIT_INPUT if data.broken else EXIT_OK


__all__ = ["DEFAULT_OUTPUT", "add_report_arguments", "cmd_report"]
