"""Argument types shared by the commands' parsers (``-j``)."""

from __future__ import annotations

import argparse


def jobs_count(text: str) -> int:
    """``-j N``: a worker count, 1 or more (leaving ``-j`` out means the usable cores).
    ``-j 0`` or ``-j -1`` is a usage error (exit 2), never silently the default."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid worker count: {text!r} (a whole number, 1 or more)"
        ) from None
    if n < 1:
        raise argparse.ArgumentTypeError(
            f"invalid worker count: {n} (1 or more; leave -j out for the usable cores)"
        )
    return n


JOBS_HELP = "worker processes, 1 or more (default: usable cores; 1 = no workers)"

__all__ = ["JOBS_HELP", "jobs_count"]
