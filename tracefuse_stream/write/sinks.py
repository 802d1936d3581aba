"""Where a merge's ranks go: one :class:`MergeSink` per output file.

The orchestration streams every rank into a compressed fragment and hands the
fragments, strictly in rank order, to a sink; the sink decides what file they become.
:class:`JsonSink` writes today's merged JSON trace (head, the ranks' events joined by
commas, the ``tracefuse`` header as the tail) through an atomic output; another
format (a Perfetto archive with one member per rank) is another sink behind the same
three calls, chosen by :func:`sink_for` from the output name.

Every sink is all-or-nothing: :meth:`MergeSink.commit` makes the file appear under
its name, :meth:`MergeSink.abort` removes every trace of it.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional

from tracefuse_stream.write.archive import ArchiveSink
from tracefuse_stream.write.atomic import AtomicOutput
from tracefuse_stream.write.codecs import ARCHIVE_CODECS, Piece, piece_of
from tracefuse_stream.write.sinkbase import AtomicSink, HeadFn, MergeSink, TailFn
from tracefuse_stream.write.splice import Splicer


class JsonSink(AtomicSink):
    """The merged JSON trace (plain, gzip as ONE member, or zstd frames).

    ``dry_run``: nothing is opened; pieces are only counted and sized.
    """

    def __init__(
        self,
        target: str,
        codec: str,
        *,
        head: HeadFn,
        tail: TailFn,
        force: bool = False,
        inputs: Iterable[str] = (),
        dry_run: bool = False,
    ) -> None:
        self.target = target
        self.fragment_codec = codec
        self._head, self._tail = head, tail
        self._out: Optional[AtomicOutput] = (
            None if dry_run else AtomicOutput(target, force=force, inputs=inputs)
        )
        self.fragment_dir = None if self._out is None else self._out.frag_parent
        try:
            self._splicer = Splicer(None if self._out is None else self._out.file, codec, target)
            self._sep = piece_of(codec, b",\n")
        except BaseException:
            self.abort()  # not yet in the caller's list of sinks to abort
            raise
        self._wrote_any = False

    def begin(self, base_ns: int) -> None:
        self._splicer.add(piece_of(self.fragment_codec, self._head(base_ns)))

    def add_rank(self, rank: int, piece: Piece, meta: Optional[Dict[str, Any]] = None) -> None:
        if piece.empty:
            return
        if self._wrote_any:
            self._splicer.add(self._sep)
        self._splicer.add(piece)
        self._wrote_any = True

    def end(self, meta: Dict[str, Any]) -> None:
        self._splicer.add(piece_of(self.fragment_codec, self._tail(meta)))
        self._splicer.finish()

    @property
    def json_bytes(self) -> int:
        return self._splicer.length

    @property
    def bytes_written(self) -> int:
        return self._splicer.size


SinkFactory = Callable[..., MergeSink]


def sink_for(target: str, codec: str, **kwargs: Any) -> MergeSink:
    """The sink that writes ``target`` (by its name; ``codec`` from ``codec_for``).
    ``plans`` (the file's ranks) is used by the Perfetto archive only."""
    if codec in ARCHIVE_CODECS:
        return ArchiveSink(target, codec, **kwargs)
    kwargs.pop("plans", None)
    return JsonSink(target, codec, **kwargs)


def abort_all(sinks: List[MergeSink]) -> None:
    for s in sinks:
        s.abort()


__all__ = ["AtomicSink", "JsonSink", "MergeSink", "abort_all", "sink_for"]
