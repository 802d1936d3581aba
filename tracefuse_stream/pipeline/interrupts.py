"""SIGINT and SIGTERM during a merge: raised where the main thread is, and remembered.

A signal handler's exception is raised at whatever bytecode the main thread runs, and
some of those places lose it: Python code called from C that clears errors (a library
probing an attribute, a callback whose failure is ignored). A lost SIGTERM let one
interrupted -j2 merge in ~40 run on and exit 0 with the output written. So the
handlers also note the signal, and :func:`raise_if_signalled` — called just before
the outputs are committed — raises it again: a merge that was told to stop never
commits.
"""

from __future__ import annotations

import signal
from typing import Any, List, Optional

from tracefuse_stream.errors import TerminateSignal

_seen: List[int] = []  # signals received since the merge began (main thread only)


def _on_term(signum: int, frame: Any) -> None:
    _seen.append(signum)
    raise TerminateSignal()


def _on_int(signum: int, frame: Any) -> None:
    _seen.append(signum)
    raise KeyboardInterrupt


class SignalsRaise:
    """While a merge runs: SIGTERM raises :class:`TerminateSignal` and SIGINT (when
    its handler is Python's default) ``KeyboardInterrupt``, each noted; the previous
    handlers come back after. Off the main thread nothing changes (handlers cannot
    be set there)."""

    def __enter__(self) -> SignalsRaise:
        self.prev: List[tuple[int, Any]] = []
        try:
            self.prev.append((signal.SIGTERM, signal.signal(signal.SIGTERM, _on_term)))
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                self.prev.append((signal.SIGINT, signal.signal(signal.SIGINT, _on_int)))
        except ValueError:  # not the main thread
            pass
        self.mark = len(_seen)
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in reversed(self.prev):
            signal.signal(signum, handler)
        del _seen[self.mark :]


def raise_if_signalled() -> None:
    """Raise again a signal whose exception was lost on the way (module docstring)."""
    last: Optional[int] = _seen[-1] if _seen else None
    if last == signal.SIGTERM:
        raise TerminateSignal()
    if last == signal.SIGINT:
        raise KeyboardInterrupt
