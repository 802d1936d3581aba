"""The project's own error types and the exit codes the command line maps them to.

Every failure a user can cause (bad input, bad arguments, an unwritable output)
surfaces as a :class:`TraceFuseError` subclass whose message is one line that names
the file and, where it helps, the byte offset or event index. The CLI prints that
line and exits with the class's ``exit_code``; nothing else ever reaches the user
as a traceback.
"""
from __future__ import annotations

from typing import Optional

EXIT_OK = 0
EXIT_INPUT = 1
EXIT_USAGE = 2
EXIT_OUTPUT = 3
EXIT_SALVAGED = 4
EXIT_VERIFY = 5
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130


class TraceFuseError(Exception):
    """Base class: a user-facing failure with a one-line message."""

    exit_code = EXIT_INPUT


class InputError(TraceFuseError):
    """An input file is missing, unreadable, not a trace, or broken.

    ``path`` names the file; ``offset`` is a byte offset in the (decompressed)
    stream and ``event_index`` the index of the event in ``traceEvents``, when known.
    """

    exit_code = EXIT_INPUT

    def __init__(
        self,
        path: str,
        problem: str,
        *,
        offset: Optional[int] = None,
        event_index: Optional[int] = None,
        hint: Optional[str] = None,
        salvageable: bool = True,
    ) -> None:
        self.path = str(path)
        self.salvageable = salvageable  # False: nothing a salvage pass could keep
        self.problem = problem
        self.offset = offset
        self.event_index = event_index
        self.hint = hint
        where = []
        if event_index is not None:
            where.append(f"event #{event_index}")
        if offset is not None:
            where.append(f"byte {offset}")
        msg = f"{self.path}: {problem}"
        if where:
            msg += f" (at {', '.join(where)})"
        if hint:
            msg += f"; {hint}"
        super().__init__(msg)

    def __reduce__(self):  # type: ignore[override]
        # Errors raised in worker processes travel back pickled: rebuild from fields.
        return (
            _rebuild_input_error,
            (self.path, self.problem, self.offset, self.event_index, self.hint, self.salvageable),
        )


def _rebuild_input_error(
    path: str, problem: str, offset: Optional[int], event_index: Optional[int],
    hint: Optional[str], salvageable: bool,
) -> "InputError":
    return InputError(
        path, problem, offset=offset, event_index=event_index, hint=hint, salvageable=salvageable
    )


class UsageError(TraceFuseError):
    """Arguments that cannot work together (bad rank spec, duplicate ranks, ...)."""

    exit_code = EXIT_USAGE


class OutputError(TraceFuseError):
    """The output cannot be written (exists, is an input, disk full, ...)."""

    exit_code = EXIT_OUTPUT


class Interrupted(TraceFuseError):
    """SIGINT/SIGTERM arrived; the temporary output was removed."""

    exit_code = EXIT_INTERRUPTED


class TerminateSignal(BaseException):
    """Raised by the merge's SIGTERM handler wherever the main thread is.

    A ``BaseException`` like ``KeyboardInterrupt`` so that no ``except Exception``
    on the way (a codec error handler, a per-event skip in salvage mode) can mistake
    it for bad data; the merge turns it into :class:`Interrupted` after cleanup.
    """
