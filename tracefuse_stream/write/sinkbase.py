"""What every output file of a merge is: the :class:`MergeSink` protocol and the
all-or-nothing :class:`AtomicSink` every file sink builds on.

Kept apart from the sinks themselves so that each format (the JSON trace in
:mod:`.sinks`, the Perfetto archive in :mod:`.archive`) depends on this module only,
and :func:`.sinks.sink_for` can choose among them without an import circle.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Protocol

from tracefuse_stream.write.atomic import AtomicOutput
from tracefuse_stream.write.codecs import Piece

#: Builds the bytes before the events of a file from the output base time.
HeadFn = Callable[[int], bytes]
#: Builds the bytes after the events of a file from its ``tracefuse`` header.
TailFn = Callable[[Dict[str, Any]], bytes]


class MergeSink(Protocol):
    """One output file of a merge."""

    #: The codec rank fragments must be compressed with for this sink.
    fragment_codec: str
    #: Where rank fragments may be written (beside the target: same filesystem), or None.
    fragment_dir: Optional[str]
    target: str

    def begin(self, base_ns: int) -> None:
        """Start the file (called once, before any rank)."""

    def add_rank(self, rank: int, piece: Piece, meta: Optional[Dict[str, Any]] = None) -> None:
        """Append one rank's events (called in rank order; empty pieces included).
        ``meta``: the ``tracefuse`` header the rank has as a file of its own (archive members)."""

    def end(self, meta: Dict[str, Any]) -> None:
        """Finish the content with the file's ``tracefuse`` header."""

    def commit(self) -> None:
        """Make the finished file appear under its name."""

    def abort(self) -> None:
        """Remove everything written; nothing appears under the name."""

    @property
    def json_bytes(self) -> int:
        """Uncompressed bytes of JSON written (or counted, in a dry run)."""

    @property
    def bytes_written(self) -> int:
        """Bytes of the file as written (compressed)."""


class AtomicSink:
    """What every file sink shares: an atomic output (None in a dry run) that appears
    under its name on :meth:`commit` and leaves nothing behind on :meth:`abort`."""

    _out: Optional[AtomicOutput] = None

    def commit(self) -> None:
        if self._out is not None:
            self._out.commit()

    def abort(self) -> None:
        if self._out is not None:
            self._out.abort()


__all__ = ["AtomicSink", "HeadFn", "MergeSink", "TailFn"]
