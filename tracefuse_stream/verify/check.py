"""``tracefuse verify``: show that a merged trace will render right in Perfetto.

The merged file is read once, streaming, by the fast batched reader with an exact
ijson fallback (:mod:`tracefuse_stream.verify.passes`), so ``.json``, ``.json.gz``
and ``.json.zst`` all work and memory stays bounded by the number of processes,
threads and flow keys, never by the number of events. The checks, by module:

* strict JSON, the byte offset of the first error, the top-level keys
  (:mod:`~tracefuse_stream.verify.passes`, :mod:`~tracefuse_stream.verify.toplevel`);
  a gzip file must be ONE member (:mod:`~tracefuse_stream.verify.structure`);
* pids/tids inside Perfetto's uint32, every process named once and carrying one
  rank, sort indexes int32, flow keys per rank (:mod:`~tracefuse_stream.verify.events`);
* complete events that overlap without nesting, by external sort
  (:mod:`~tracefuse_stream.verify.overlap`);
* the ``tracefuse`` header against the file (:mod:`~tracefuse_stream.verify.header`)
  and, with ``against``, every kept input event present exactly once with its mapped
  pid and absolute time (:mod:`~tracefuse_stream.verify.against`).

This module runs them in order and assembles the :class:`VerifyReport`.
"""

from __future__ import annotations

import os
import time
from typing import Optional, Sequence, Union

from tracefuse_stream.read.sources import PathLike
from tracefuse_stream.verify.archive import is_archive, verify_archive_file
from tracefuse_stream.verify.jsonfile import against_files, require_file, verify_json
from tracefuse_stream.verify.report import CODES, Finding, VerifyReport


def verify(
    path: PathLike,
    against: Optional[Sequence[Union[str, os.PathLike[str]]]] = None,
    max_examples: int = 5,
    *,
    sort_chunk_records: Optional[int] = None,
) -> VerifyReport:
    """Check that the merged trace ``path`` renders right in Perfetto.

    ``against``: the merge's input files (or directories); every kept input event must
    be present exactly once with its mapped pid and its time. Raises
    :class:`~tracefuse_stream.errors.InputError` when a file cannot be opened.
    """
    t0 = time.perf_counter()
    path = str(path)
    against_paths = against_files(against)
    require_file(path)
    if is_archive(path):  # a Perfetto archive (-o NAME.perfetto.tar): member by member
        return verify_archive_file(path, against_paths)
    return verify_json(path, against_paths, max_examples, sort_chunk_records=sort_chunk_records, started=t0)


__all__ = ["CODES", "Finding", "VerifyReport", "verify"]
