"""Argument types and options shared by the commands' parsers (``-j``, ``--dask``, ``--name-cap``,
``--max-steps``, ``--max-clock-offset``)."""

from __future__ import annotations

import argparse

from tracefuse_stream.align.instance_ends import MAX_CLOCK_OFFSET_S, clock_offset_limit
from tracefuse_stream.analyze.name_cap import NAME_CAP
from tracefuse_stream.analyze.step_cap import MAX_STEPS, RANK_STEPS
from tracefuse_stream.errors import UsageError


def _positive(text: str, what: str) -> int:
    """``text`` as an int of 1 or more, else a :class:`UsageError` saying ``what``."""
    try:
        n = int(text)
    except ValueError:
        n = None
    if n is None or n < 1:
        raise UsageError(f"{what}, not {text!r}")
    return n


def jobs_count(text: str) -> int:
    """``-j N``: a worker count, 1 or more (leaving ``-j`` out means the usable cores).
    ``-j 0`` or ``-j -1`` is a usage error (exit 2), never silently the default. A
    :class:`UsageError`, not argparse's error: one line, as every other usage error of
    the options (argparse lets it through its type call)."""
    return _positive(text, "--jobs must be 1 or more workers (leave -j out for the usable cores)")


def name_cap_count(text: str) -> int:
    """``--name-cap N``: names kept per rank and step in the why, 1 or more (a usage
    error otherwise, never silently the default)."""
    return _positive(text, "--name-cap must be 1 or more names")


def add_name_cap_arg(p: argparse.ArgumentParser) -> None:
    """``--name-cap N`` on a command that reads the why's partitions (analyze/name_cap.py)."""
    p.add_argument(
        "--name-cap",
        type=name_cap_count,
        default=NAME_CAP,
        metavar="N",
        help=f"with the why: names kept per rank and step for each kind, thread and GPU (default {NAME_CAP}); "
        "the rest are summed into '(other names)', and a note says how many",
    )


def max_steps_count(text: str) -> int:
    """``--max-steps N``: steps kept per rank by the analysis, 1 or more (a usage error
    otherwise, never silently the automatic cap)."""
    return _positive(text, "--max-steps must be 1 or more steps per rank")


def add_max_steps_arg(p: argparse.ArgumentParser, when: str = "") -> None:
    """``--max-steps N`` on a command that analyses the collectives (analyze/step_cap.py)."""
    p.add_argument(
        "--max-steps",
        type=max_steps_count,
        default=None,
        metavar="N",
        help=f"{when}analyse at most N steps per rank, the first N step numbers (default: "
        f"min({MAX_STEPS:,}, {RANK_STEPS:,} / rank files), which bounds memory); when steps are "
        "left out a line and step_cap in the JSON say so",
    )


def add_max_clock_offset_arg(p: argparse.ArgumentParser, when: str = "") -> None:
    """``--max-clock-offset SECONDS`` on a command that matches collectives across hosts
    (analyze/analysis.require_near_clocks); ``when``: the help's opening words."""
    p.add_argument(
        "--max-clock-offset",
        type=lambda text: clock_offset_limit(text, "--max-clock-offset"),
        default=MAX_CLOCK_OFFSET_S,
        metavar="SECONDS",
        help=f"{when}accept host clocks this far apart (default {MAX_CLOCK_OFFSET_S:g}: synced hosts agree to "
        "milliseconds); an offset estimated beyond it is refused, since two runs of one job look the same",
    )


JOBS_HELP = "worker processes, 1 or more (default: usable cores; 1 = no workers)"

#: What runs on the cluster and what stays, said once for every command's help.
DASK_HELP = (
    "run the per-rank scans as tasks on the Dask cluster at ADDRESS (tcp://host:8786, or the "
    "scheduler file of 'dask scheduler --scheduler-file'); the workers read the inputs at the same "
    "paths (a shared file system); the report is made here, byte-identical to a local run. "
    "Needs pip install 'tracefuse-stream[dask]'"
)


def add_dask_arg(p: argparse.ArgumentParser, extra: str = "") -> None:
    """``--dask ADDRESS`` on a command whose per-rank passes go through
    ``workers.parallel_map`` (its action wraps them in ``cluster.dask_backend``);
    ``extra``: what of this command stays local."""
    p.add_argument("--dask", metavar="ADDRESS", help=DASK_HELP + (f"; {extra}" if extra else ""))


__all__ = [
    "DASK_HELP",
    "JOBS_HELP",
    "add_dask_arg",
    "add_max_clock_offset_arg",
    "add_max_steps_arg",
    "add_name_cap_arg",
    "jobs_count",
    "max_steps_count",
    "name_cap_count",
]
