"""Argument types shared by the commands' parsers (``-j``)."""

from __future__ import annotations

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

__all__ = ["JOBS_HELP", "jobs_count"]
