"""``-o NAME.perfetto.tar`` / ``.perfetto.tar.gz``: a Perfetto v58 archive of the merge.

The archive holds ``perfetto_manifest.json`` (first) and one member per rank,
``NAME.rank<R>.json``: a complete plain-JSON trace of its own, i.e. exactly what
``--split-ranks 1`` would write for that rank (the merged head with the merged
``baseTimeNanoseconds``, the rank's rewritten events, a tail with that rank's
``tracefuse`` header). Perfetto opens it as one merged trace with one machine per rank
(see :mod:`tracefuse_stream.write.manifest`). Members must be plain JSON: Perfetto
treats a ``.json.gz`` member as an archive and refuses manifest overrides for it.
``.perfetto.tar.gz`` compresses the whole TAR instead (one gzip member).

Streaming with bounded memory: a TAR member's size precedes its data, and is known
once the rank is done (head + fragment + tail), so each rank is written as header,
head, the fragment spliced as it is (in the kernel for ``.tar``; raw DEFLATE pieces
compressed by the workers for ``.tar.gz``, spliced into ONE gzip member with combined
CRCs, as the JSON merge does), tail and padding. Atomic like every output: a temporary
file beside the target, renamed on commit, removed on failure.
"""

from __future__ import annotations

import os
import tarfile
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from tracefuse_stream.errors import OutputError
from tracefuse_stream.write.atomic import AtomicOutput
from tracefuse_stream.write.codecs import ARCHIVE_CODECS, Piece, piece_of
from tracefuse_stream.write.manifest import MANIFEST_NAME, Member, archive_stem, manifest_bytes, members_for
from tracefuse_stream.write.sinkbase import AtomicSink
from tracefuse_stream.write.splice import Splicer

BLOCK = 512
END_OF_ARCHIVE = b"\0" * (2 * BLOCK)  # two zero blocks end a TAR


def tar_header(name: str, size: int, mtime: int) -> bytes:
    """The header block(s) of a regular member: GNU format, which Perfetto's reader
    and every tar read (base-256 sizes beyond 8 GiB, long names as 'L' records);
    mode 0644, root-less numeric owner 0, deterministic for given arguments."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = mtime
    info.mode = 0o644
    info.uname = info.gname = ""
    return info.tobuf(format=tarfile.GNU_FORMAT, encoding="utf-8", errors="strict")


def padding(size: int) -> bytes:
    return b"\0" * (-size % BLOCK)


class ArchiveSink(AtomicSink):
    """One ``.perfetto.tar[.gz]`` output: a :class:`~tracefuse_stream.write.sinks.MergeSink`.

    ``plans``: the ranks of this file, in rank order (their rank and host name the
    members and machines). ``dry_run``: nothing is opened; sizes are counted.
    """

    def __init__(
        self,
        target: str,
        codec: str,
        *,
        head: Callable[[int], bytes],
        tail: Callable[[Dict[str, Any]], bytes],
        plans: Sequence[Any],
        force: bool = False,
        inputs: Iterable[str] = (),
        dry_run: bool = False,
    ) -> None:
        if codec not in ARCHIVE_CODECS:
            raise ValueError(f"not an archive codec: {codec}")
        self.target = target
        self.container = ARCHIVE_CODECS[codec]  # the codec of the whole TAR stream
        self.fragment_codec = self.container  # gzip pieces splice into the one gzip member
        self._head, self._tail = head, tail
        self._stem = archive_stem(target)
        self.members: List[Member] = members_for(self._stem, [(p.rank, p.host_name) for p in plans])
        self._by_rank = {m.rank: m for m in self.members}
        self._out: Optional[AtomicOutput] = (
            None if dry_run else AtomicOutput(target, force=force, inputs=inputs)
        )
        self.fragment_dir = None if self._out is None else self._out.frag_parent
        try:
            self._splicer = Splicer(None if self._out is None else self._out.file, self.container, target)
        except BaseException:
            self.abort()
            raise
        self._base_ns = 0
        self._mtime = 0
        self._json_bytes = 0
        self._written: List[int] = []

    def _piece(self, data: bytes) -> Piece:
        return piece_of(self.container, data)

    def _add_member(self, name: str, size: int, parts: Sequence[Piece]) -> None:
        self._splicer.add(self._piece(tar_header(name, size, self._mtime)))
        for p in parts:
            self._splicer.add(p)
        self._splicer.add(self._piece(padding(size)))

    def begin(self, base_ns: int) -> None:
        """Write the manifest first (Perfetto reads it before any trace either way)."""
        self._base_ns = base_ns
        self._mtime = max(0, base_ns // 1_000_000_000)  # the profile's time: same bytes for any -j
        about = {"tool": "tracefuse-stream", "base_time_ns": base_ns, "ranks": [m.rank for m in self.members]}
        data = manifest_bytes(self.members, about)
        self._add_member(MANIFEST_NAME, len(data), [self._piece(data)])

    def add_rank(self, rank: int, piece: Piece, meta: Optional[Dict[str, Any]] = None) -> None:
        """Write rank ``rank``'s member: header, head, the fragment, the tail with
        ``meta`` (the ``tracefuse`` header this rank has as a file of its own)."""
        member = self._by_rank.get(rank)
        if member is None:
            raise OutputError(f"{self.target}: rank {rank} is not one of this archive's ranks")  # a bug
        own = dict(meta or {})
        own["archive"] = {
            "file": os.path.basename(self.target),
            "member": member.path,
            "machine": member.machine,
            "members": [m.path for m in self.members],
        }
        head = self._piece(self._head(self._base_ns))
        tail = self._piece(self._tail(own))
        size = head.length + piece.length + tail.length
        self._add_member(member.path, size, [head, piece, tail])
        self._json_bytes += size
        self._written.append(rank)

    def end(self, meta: Dict[str, Any]) -> None:
        missing = [m.rank for m in self.members if m.rank not in self._written]
        if missing:
            raise OutputError(f"{self.target}: ranks {missing} were never written")  # a bug
        self._splicer.add(self._piece(END_OF_ARCHIVE))
        self._splicer.finish()

    @property
    def json_bytes(self) -> int:
        """Bytes of the rank members' JSON (what the viewer parses)."""
        return self._json_bytes

    @property
    def bytes_written(self) -> int:
        return self._splicer.size


def is_archive_codec(codec: str) -> bool:
    return codec in ARCHIVE_CODECS


__all__ = ["ArchiveSink", "END_OF_ARCHIVE", "is_archive_codec", "padding", "tar_header"]
