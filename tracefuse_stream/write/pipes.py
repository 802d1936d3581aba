"""Ending quietly when the reader of the output closes the pipe (``-o - | head``).

Unix filters (``cat``, ``gzip -c``, ``grep``) are killed by SIGPIPE when their reader
goes away: no message, and the shell reports status 141 (128 + SIGPIPE). Python
ignores SIGPIPE, so a write raises ``BrokenPipeError`` instead; the command line
catches it, follows Python's documented recipe (point stdout at ``/dev/null`` so the
interpreter's final flush of buffered output cannot fail and print a traceback) and
exits with the same 141 the shell shows for ``cat``, in line with this tool's 130
for SIGINT. With ``set -o pipefail`` the pipeline then fails, as it does for ``cat``:
the merge did not complete. No temporary file is left (stdout and FIFOs have none;
fragments are removed by the merge's cleanup).
"""

from __future__ import annotations

import os
import signal
import sys

EXIT_BROKEN_PIPE = 128 + int(getattr(signal, "SIGPIPE", 13))


def quiet_broken_pipe() -> int:
    """Silence stdout after ``BrokenPipeError``; return the exit status to use."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # stdout already closed or replaced: nothing left to flush into it
    return EXIT_BROKEN_PIPE
