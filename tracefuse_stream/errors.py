"""The project's own error types and the exit codes the command line maps them to.

Every failure a user can cause (bad input, bad arguments, an unwritable output)
surfaces as a :class:`TraceFuseError` subclass whose message is one line that names
the file and, where it helps, the byte offset or event index. The CLI prints that
line and exits with the class's ``exit_code``; nothing else ever reaches the user
as a traceback.
"""

from __future__ import annotations

import contextvars
import enum
import re
from contextlib import contextmanager
from typing import Any, Iterator, Optional

EXIT_OK = 0
EXIT_INPUT = 1
EXIT_USAGE = 2
EXIT_OUTPUT = 3
EXIT_SALVAGED = 4
EXIT_VERIFY = 5
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130


class ErrorKind(enum.Enum):
    """What went wrong, for code that must decide (salvage or not, fall back or not).

    Decisions read the kind, never the message text: messages are for people and may
    be reworded; third-party messages (ijson, msgspec, zlib) are mapped to a kind at
    one boundary, :mod:`tracefuse_stream.read.jsonerrors`.
    """

    MISSING = "missing"  # no such file or directory
    UNREADABLE = "unreadable"  # exists but cannot be opened or read (permissions, I/O)
    EMPTY = "empty"  # zero bytes or only white space
    NOT_A_TRACE = "not_a_trace"  # valid JSON that is no trace, or not JSON at all
    INVALID_JSON = "invalid_json"  # a syntax error inside the document
    TRUNCATED = "truncated"  # the document (or its compressed stream) ends early
    CORRUPT_STREAM = "corrupt_stream"  # gzip/zstd data that cannot be decompressed
    INVALID_UTF8 = "invalid_utf8"
    BAD_EVENT = "bad_event"  # a well-formed event the rules cannot merge (flow without id, bad id, ...)
    BAD_VALUE = "bad_value"  # valid JSON, a header value the merge cannot use (baseTimeNanoseconds, rank)
    CONFLICT = "conflict"  # inputs that contradict each other (duplicate ranks, ...)
    USAGE = "usage"
    OUTPUT = "output"
    INTERRUPTED = "interrupted"
    VERIFY = "verify"
    CLUSTER = "cluster"  # the Dask cluster of --dask cannot be reached or lost the work


#: Messages are written with the command line's flags; raised to Python code they say
#: the keyword instead (``force=True``, not ``--force``): each speaks its caller's language.
_PYTHON_WORDS = (
    ("--rank-from order", 'rank_from="order"'),
    ("--cycle N", "cycle=N"),
    ("--cycle latest", 'cycle="latest"'),
    ("--cycle all", 'cycle="all"'),
    ("--args slim", 'args="slim"'),
    ("--align collectives", 'align="collectives"'),
    ("--split-ranks K", "split_ranks=K"),
    ("--max-clock-offset SECONDS", "max_clock_offset_s=SECONDS"),
    ("--steps A:B", "steps=(A, B)"),
    ("--window START_MS:END_MS", "window_ms=(START, END)"),
    ("--force", "force=True"),
    ("--salvage", "salvage=True"),
    ("--include-pyfunc", "include_pyfunc=True"),
    ("--link-collectives", "link_collectives=True"),
    ("--align-steps position", 'align_steps="position"'),
    ("--align-steps", "align_steps"),
    ("--base-steps", "base_steps"),
    ("--base-cycle", "base_cycle"),
    ("--new-cycle", "new_cycle"),
    ("--new-steps", "new_steps"),
    ("--rank-from", "rank_from"),
    ("--cycle", "cycle"),
    ("--ranks", "ranks"),
    ("--max-clock-offset", "max_clock_offset_s"),
    ("--steps", "steps"),
    ("--step-rank", "step_rank"),
    ("--window", "window_ms"),
    ("--split-ranks", "split_ranks"),
    ("--keep-cat", "keep_cat"),
    ("--drop-cat", "drop_cat"),
    ("--clock-offsets", "clock_offsets"),
    ("--jobs", "jobs"),
    ("--dask", "dask"),
    ("--name", "name_regex"),
    ("--args", "args"),
    ("--align", "align"),
)
_FLAG = re.compile("|".join(re.escape(f) + r"(?![\w-])" for f, _ in _PYTHON_WORDS))
_WORD = dict(_PYTHON_WORDS)
_SPEAK_CLI: contextvars.ContextVar[bool] = contextvars.ContextVar("tracefuse_speak_cli", default=False)


def python_wording(text: str) -> str:
    """``text`` with the command line's flags written as ``merge()`` keywords."""
    return _FLAG.sub(lambda m: _WORD[m.group(0)], text)


@contextmanager
def cli_wording() -> Iterator[None]:
    """Within this block errors print with flags (``--force``): the command line."""
    token = _SPEAK_CLI.set(True)
    try:
        yield
    finally:
        _SPEAK_CLI.reset(token)


class TraceFuseError(Exception):
    """Base class: a user-facing failure with a one-line message and a kind.

    Messages are written in flags; ``str()`` gives them in Python keywords unless the
    command line asked for flags (:func:`cli_wording`), so a Python caller reads
    ``use force=True`` and a shell user ``use --force``.
    """

    exit_code = EXIT_INPUT
    kind: ErrorKind = ErrorKind.INVALID_JSON

    def __str__(self) -> str:
        text = super().__str__()
        return text if _SPEAK_CLI.get() else python_wording(text)

    @property
    def salvageable(self) -> bool:
        """Whether ``--salvage`` can do anything about this kind of problem (a missing,
        empty or non-trace file has nothing a salvage pass could keep)."""
        return self.kind in _SALVAGEABLE


class InputError(TraceFuseError):
    """An input file is missing, unreadable, not a trace, or broken.

    ``path`` names the file; ``offset`` is a byte offset in the (decompressed)
    stream and ``event_index`` the index of the event in ``traceEvents``, when known.

    ``kind`` left out: :attr:`ErrorKind.BAD_EVENT` for a problem with one event
    (``event_index`` given: the JSON was read, the event cannot be merged — a bad id,
    a bad ts), else :attr:`ErrorKind.INVALID_JSON`. Say the kind wherever it is
    neither (a missing file, a header value).
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
        kind: Optional[ErrorKind] = None,
    ) -> None:
        if kind is None:
            kind = ErrorKind.BAD_EVENT if event_index is not None else ErrorKind.INVALID_JSON
        self.kind = kind
        self.path = str(path)
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

    def __reduce__(self) -> Any:
        # Errors raised in worker processes travel back pickled: rebuild from fields.
        return (
            _rebuild_input_error,
            (self.path, self.problem, self.offset, self.event_index, self.hint, self.kind.value),
        )


def _rebuild_input_error(
    path: str,
    problem: str,
    offset: Optional[int],
    event_index: Optional[int],
    hint: Optional[str],
    kind: str,
) -> InputError:
    return InputError(path, problem, offset=offset, event_index=event_index, hint=hint, kind=ErrorKind(kind))


class UsageError(TraceFuseError):
    """Arguments that cannot work together (bad rank spec, duplicate ranks, ...)."""

    exit_code = EXIT_USAGE
    kind = ErrorKind.USAGE


class OutputError(TraceFuseError):
    """The output cannot be written (exists, is an input, disk full, ...)."""

    exit_code = EXIT_OUTPUT
    kind = ErrorKind.OUTPUT


class Interrupted(TraceFuseError):
    """SIGINT/SIGTERM arrived; the temporary output was removed."""

    exit_code = EXIT_INTERRUPTED
    kind = ErrorKind.INTERRUPTED


class VerifyFailed(TraceFuseError):
    """``merge(verify=True)`` (``merge --verify``) found an error-level problem in a
    merged file; the file stays, for inspection."""

    exit_code = EXIT_VERIFY
    kind = ErrorKind.VERIFY


class ClusterError(TraceFuseError):
    """``--dask``: the scheduler cannot be reached, ``distributed`` is not installed,
    the workers cannot see the inputs or import this package, or the cluster lost a
    task's workers more often than Dask retries (``allowed-failures``). Nothing is
    written then."""

    exit_code = EXIT_INPUT
    kind = ErrorKind.CLUSTER


class TerminateSignal(BaseException):
    """Raised by the merge's SIGTERM handler wherever the main thread is.

    A ``BaseException`` like ``KeyboardInterrupt`` so that no ``except Exception``
    on the way (a codec error handler, a per-event skip in salvage mode) can mistake
    it for bad data; the merge turns it into :class:`Interrupted` after cleanup.
    """


_SALVAGEABLE = frozenset(
    {
        ErrorKind.INVALID_JSON,
        ErrorKind.TRUNCATED,
        ErrorKind.CORRUPT_STREAM,
        ErrorKind.INVALID_UTF8,
        ErrorKind.BAD_EVENT,
    }
)
