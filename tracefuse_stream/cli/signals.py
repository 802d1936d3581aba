"""How the command line meets SIGINT and SIGTERM outside a merge's own handling.

A merge turns both into :class:`~tracefuse_stream.errors.Interrupted` after its cleanup
(``pipeline/orchestrate.py``); this module covers the rest of a command's life, so that
a signal at any moment ends it the way the README's exit codes say (130, one line, no
traceback): while the command's modules are still being imported, during ``info`` or
``verify``, and before the merge has installed its handler (a SIGTERM there used to end
the process by the signal, status -15).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator

from tracefuse_stream.errors import TerminateSignal


def _raise_terminate(signum: int, frame: Any) -> None:
    raise TerminateSignal()


@contextlib.contextmanager
def terminate_raises() -> Iterator[None]:
    """SIGTERM raises :class:`TerminateSignal` in the main thread while the command runs
    (the previous handler is restored after: ``main(argv)`` is also called in-process,
    by tests and scripts). Off the main thread signals cannot be handled: no change."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    prev = signal.signal(signal.SIGTERM, _raise_terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, prev)


def forget_caught_interrupt() -> None:
    """Clear CPython's "unhandled KeyboardInterrupt" flag after the CLI has handled one.

    CPython (3.10-3.12) sets a C global when a KeyboardInterrupt leaves code run by
    ``exec`` of a string, and at exit kills the process with SIGINT if the flag is set,
    even though the exception was caught further up. Ctrl-C during a lazy import lands
    in ``dataclasses``' generated ``__init__``/``__repr__`` (an ``exec``) often enough:
    1 of 20 runs interrupted at 0.3-0.5 s exited with -2 instead of 130 after printing
    the right message. Every ``exec`` of a string resets the flag when it starts, and a
    trivial one does not set it again.
    """
    exec("None")  # noqa: S102 - a constant: the reset described above


def ignore_from_now_on() -> None:
    """The process's command is over (its output complete, or its error printed): a
    SIGINT or SIGTERM from here on would end only the interpreter's exit (~20 ms of
    module teardown), by the signal: status -2 or -15 and no message, for a command
    that had done its work. Its own status stands. For the process entry points only
    (``python -m tracefuse_stream``, the ``tracefuse`` script): ``main(argv)`` called
    in-process leaves the handlers as it found them."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
