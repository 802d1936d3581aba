"""Command line: ``python -m tracefuse_stream {merge,info,verify,report,diff,open} ...`` (also ``tracefuse``).

Every error is one line on stderr naming the file, and an exit code from
``errors`` (0 ok, 1 input error, 2 usage, 3 output error, 4 merged with salvage,
5 verify found errors, 130 interrupted) — never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional, Sequence

from tracefuse_stream._version import __version__
from tracefuse_stream.cli.argtypes import (
    JOBS_HELP,
    add_dask_arg,
    add_max_clock_offset_arg,
    add_max_steps_arg,
    add_name_cap_arg,
    jobs_count,
)
from tracefuse_stream.cli.diff_cmd import add_diff_arguments
from tracefuse_stream.cli.report_cmd import add_report_arguments
from tracefuse_stream.cli.signals import forget_caught_interrupt, terminate_raises
from tracefuse_stream.cli.verify_cmd import add_verify_arguments
from tracefuse_stream.errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    TerminateSignal,
    TraceFuseError,
    cli_wording,
)
from tracefuse_stream.serve.command import add_open_arguments
from tracefuse_stream.textout import terminal
from tracefuse_stream.write.pipes import quiet_broken_pipe


def _csv(s: str) -> List[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def _add_input_args(p: argparse.ArgumentParser, verb: str = "merge") -> None:
    p.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="trace files and/or directories of *.json[.gz|.zst]"
    )
    p.add_argument(
        "--rank-from",
        choices=["auto", "order"],
        default="auto",
        help="auto (default): distributedInfo.rank, else a rank_N / worker N in the file name, "
        "else the position (directories in natural order); order: always the position",
    )
    p.add_argument("--ranks", metavar="SPEC", help=f"{verb} only these ranks, e.g. 0,8,16-23,32-63:8")


def _add_output_args(p: argparse.ArgumentParser) -> None:
    """merge: where the output goes and what kind of file it is."""
    p.add_argument(
        "-o",
        "--output",
        default="merged_trace.json.gz",
        help="output file, compressed by its extension: .json, .json.gz, .json.zst, or a Perfetto "
        "v58+ archive .perfetto.tar / .perfetto.tar.gz; '-' for JSON on stdout (default: %(default)s)",
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing output (never an input)")


def _add_filter_args(p: argparse.ArgumentParser) -> None:
    """merge: which events are kept, and how many of their args."""
    p.add_argument(
        "--include-pyfunc", action="store_true", help="keep python_function events (dropped by default)"
    )
    p.add_argument(
        "--keep-cat", type=_csv, metavar="CATS", help="keep only these categories (comma separated)"
    )
    p.add_argument(
        "--drop-cat",
        type=_csv,
        metavar="CATS",
        help="drop these categories (comma separated). The command line keeps Kineto's 'Trace' span "
        "(the whole-recording 'PyTorch Profiler (0)' slice); TraceLens' TraceFuse and this package's "
        "TraceFuse API drop it: --drop-cat Trace does the same",
    )
    p.add_argument("--name", metavar="REGEX", help="keep only events whose name matches REGEX")
    p.add_argument(
        "--args",
        choices=["all", "slim", "none"],
        default="all",
        help="event args kept: all (default); slim: links, rank and small readable args "
        "(no shape/stride/input lists; about half the viewer memory); none: links and rank",
    )


def _add_run_args(p: argparse.ArgumentParser) -> None:
    """merge: how the merge runs (workers, broken inputs)."""
    p.add_argument("-j", "--jobs", type=jobs_count, default=0, help=JOBS_HELP)
    add_dask_arg(
        p,
        "merge: its side passes (--align collectives, --link-collectives and its why tracks, --window) "
        "run there; the per-rank stream writes fragments to this machine's disk, so it stays on the "
        "-j local workers",
    )
    p.add_argument(
        "--salvage", action="store_true", help="merge what can be read from broken inputs instead of failing"
    )


def _add_time_args(p: argparse.ArgumentParser) -> None:
    """merge: clocks and time selection (alignment, steps, windows)."""
    p.add_argument(
        "--align",
        choices=["base", "collectives"],
        default="base",
        help="base: exact baseTimeNanoseconds alignment (default); collectives: also "
        "correct per-host clock skew from GPU collective end times",
    )
    p.add_argument(
        "--clock-offsets",
        metavar="FILE",
        help='JSON {"host or rank": microseconds} of known clock offsets to add',
    )
    p.add_argument(
        "--steps",
        metavar="A:B",
        help="keep only ProfilerStep#A..#B (N alone: that one step), as timed on the reference rank; "
        "Kineto's profiler-span slice, which covers the whole recording, is dropped",
    )
    p.add_argument(
        "--step-rank", type=int, metavar="R", help="reference rank for --steps (default: lowest merged rank)"
    )
    p.add_argument(
        "--window",
        metavar="START_MS:END_MS",
        help="keep only this window, in ms from the merged trace's first event",
    )


def _add_split_and_report_args(p: argparse.ArgumentParser) -> None:
    """merge: several outputs, dry runs, verification, links and the summary."""
    p.add_argument(
        "--split-ranks",
        type=int,
        metavar="K",
        help="write one file per K consecutive merged ranks (names derived from -o)",
    )
    p.add_argument(
        "--cycle",
        metavar="N|latest|all",
        help="profiling cycle to merge when a directory holds several (1-based); "
        "all: one file per cycle (merged.cycle1.json.gz, ...)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="apply all filters and report counts and estimated sizes; write nothing",
    )
    p.add_argument("--verify", action="store_true", help="verify the merged output against the inputs")
    p.add_argument(
        "--link-collectives",
        action="store_true",
        help="flow arrows joining each collective instance across ranks in order of arrival, "
        "with each slice's wait and the last rank in its args",
    )
    p.add_argument(
        "--against",
        nargs="+",
        metavar="BASE",
        help="a base run (directories or files): its --steps N step merged beside this run's, BASE's rank r "
        "as rank OFFSET+r (OFFSET: 10, 100, ... above every rank), its clock shifted so both steps start together",
    )
    p.add_argument(
        "--base-step",
        type=int,
        metavar="M",
        help="with --against: BASE's step to show (default: the --steps N)",
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress bar and no summary; warnings still go to stderr",
    )
    p.add_argument("--json-summary", action="store_true", help="summary as JSON on stdout (stderr with -o -)")


def _add_info_args(p: argparse.ArgumentParser) -> None:
    """info: what to report besides the per-rank facts."""
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--align",
        action="store_true",
        help="also estimate per-host clock offsets from collectives (no merge)",
    )
    p.add_argument("--steps", action="store_true", help="also list the ProfilerStep numbers of each rank")
    p.add_argument(
        "--collectives",
        action="store_true",
        help="collective instances matched across ranks: waits per rank and step, the straggler(s)",
    )
    p.add_argument(
        "--kernel-categories",
        metavar="FILE",
        help="with --collectives: extra GPU kernel categories (JSON or .toml: "
        '{"categories": [{"name", "pattern", "class"}]}), tried before the built-in table',
    )
    add_name_cap_arg(p)
    add_max_steps_arg(p, "with --collectives: ")
    p.add_argument(
        "--step-window",
        metavar="A:B",
        help="with --collectives: analyse ProfilerStep#A..#B only (N alone: that step; "
        "--steps lists the step numbers)",
    )
    add_max_clock_offset_arg(p, "with --collectives: ")
    p.add_argument("-j", "--jobs", type=jobs_count, default=0, help=JOBS_HELP)
    add_dask_arg(p)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="tracefuse",
        description="Merge per-rank PyTorch profiler traces into one Perfetto trace, streaming.",
    )
    ap.add_argument("--version", action="version", version=f"tracefuse-stream {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")

    m = sub.add_parser("merge", help="merge rank traces into one file")
    _add_input_args(m)
    for add in (
        _add_output_args,
        _add_filter_args,
        _add_run_args,
        _add_time_args,
        _add_split_and_report_args,
    ):
        add(m)

    i = sub.add_parser(
        "info",
        help="per-rank facts about the inputs (streams them, writes nothing)",
        description="Per-rank facts about the inputs (streams them, writes nothing). With a broken "
        "input file the readable files are shown, one 'BROKEN file: problem' line per broken file, "
        "and the exit status is 1.",
    )
    _add_input_args(i, verb="show")
    _add_info_args(i)

    v = sub.add_parser(
        "verify",
        help="check that a merged trace will render right in Perfetto",
        description="Check that a merged trace renders right in Perfetto (and, with --against, "
        "that it holds exactly the kept input events). Exit 5 on error-level findings.",
    )
    add_verify_arguments(v)

    r = sub.add_parser(
        "report",
        help="one self-contained HTML page: ranks x steps heatmap, straggler, why",
        description="Write the straggler report as one self-contained HTML page. With a broken input "
        "file (as info) the page of the readable files is still written, one 'BROKEN file: problem' "
        "line per broken file goes to stderr, and the exit status is 1.",
    )
    _add_input_args(r, verb="report on")
    add_report_arguments(r)

    add_diff_arguments(
        sub.add_parser(
            "diff",
            help="run vs run: what got slower, on which ranks, and is it real",
            description="Compare two runs rank by rank and step by step: the changes above the runs' "
            "own step-to-step noise, most time first, each with its ranks and class; the step-time "
            "change explained; each run's straggler verdict. The test: docs/diff.md.",
        )
    )

    add_open_arguments(
        sub.add_parser("open", help="serve a trace once on 127.0.0.1 and print its Perfetto link")
    )
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; errors speak flags (``--force``), not keywords."""
    with cli_wording():
        code = _main(argv)
    if code == EXIT_INTERRUPTED:
        forget_caught_interrupt()
    return code


def _main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        with terminate_raises():
            ap = build_parser()
            a = ap.parse_args(argv)
            if a.command is None:
                ap.print_help(sys.stderr)
                return EXIT_USAGE
            return _run(a)
    except TraceFuseError as e:
        print(f"tracefuse: error: {terminal(str(e))}", file=sys.stderr)  # no ESC/CR from a file name
        return e.exit_code
    except KeyboardInterrupt:
        print("tracefuse: error: interrupted (SIGINT); no output written", file=sys.stderr)
        return EXIT_INTERRUPTED
    except TerminateSignal:
        print("tracefuse: error: terminated (SIGTERM); no output written", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # stdout closed (e.g. piped into head): quiet, 141 like cat
        return quiet_broken_pipe()
    except Exception as e:  # a bug of ours: still one line, traceback on request
        if os.environ.get("TRACEFUSE_DEBUG"):
            raise
        print(
            f"tracefuse: internal error: {type(e).__name__}: {e} "
            "(set TRACEFUSE_DEBUG=1 for a traceback, and please report it)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def _run(a: argparse.Namespace) -> int:
    """The command's action. Each command's module is imported here, when it runs: start-up
    is part of every command's time, and ``merge``'s pipeline alone was most of it (an
    ``info`` or ``--help`` does not need it)."""
    if a.command == "merge":
        from tracefuse_stream.cli.merge_cmd import cmd_merge  # lazy: per command (docstring)

        return cmd_merge(a)
    if a.command == "info":
        from tracefuse_stream.cli.info_cmd import cmd_info  # lazy: per command (docstring)

        return cmd_info(a)
    if a.command == "verify":
        from tracefuse_stream.cli.verify_cmd import cmd_verify  # lazy: per command (docstring)

        return cmd_verify(a)
    if a.command == "diff":
        from tracefuse_stream.cli.diff_cmd import cmd_diff  # lazy: per command (docstring)

        return cmd_diff(a)
    if a.command == "report":
        from tracefuse_stream.cli.report_cmd import cmd_report  # lazy: per command (docstring)

        return cmd_report(a)
    from tracefuse_stream.serve.command import cmd_open  # lazy: per command (docstring)

    return cmd_open(a)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
