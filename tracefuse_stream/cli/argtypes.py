"""Argument types and options shared by the commands' parsers (``-j``, ``--dask``)."""

from __future__ import annotations

import argparse

from tracefuse_stream.errors import UsageError


def jobs_count(text: str) -> int:
    """``-j N``: a worker count, 1 or more (leaving ``-j`` out means the usable cores).
    ``-j 0`` or ``-j -1`` is a usage error (exit 2), never silently the default. A
    :class:`UsageError`, not argparse's error: one line, as every other usage error of
    the options (argparse lets it through its type call)."""
    try:
        n = int(text)
    except ValueError:
        n = None
    if n is None or n < 1:
        raise UsageError(
            f"--jobs must be 1 or more workers (leave -j out for the usable cores), not {text!r}"
        )
    return n


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


__all__ = ["DASK_HELP", "JOBS_HELP", "add_dask_arg", "jobs_count"]
