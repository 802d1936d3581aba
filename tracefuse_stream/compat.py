"""``TraceFuse``: a drop-in for TraceLens' class of the same name, streaming inside.

TraceLens loads every event of every rank into memory, derives pid/id offsets from
the first file only (a later rank with larger ids or pids collides) and writes
indented JSON through gzip level 9. This class keeps its call shape and rank
semantics — list position or dict key is the rank — and runs the streaming merge.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Union

from tracefuse_stream.pipeline.orchestrate import MergeSummary, merge

PathLike = Union[str, "os.PathLike[str]"]
COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd")


def tracelens_output_name(output_file: str) -> str:
    """TraceLens writes gzip and appends ``.gz``; do so only when the name has no
    compression suffix already (never ``.gz.gz``)."""
    if output_file == "-" or output_file.lower().endswith(COMPRESSED_SUFFIXES):
        return output_file
    return output_file + ".gz"


class TraceFuse:
    """Merge per-rank traces like TraceLens' ``TraceFuse``, in bounded memory.

    ``profile_filepaths``: a list (rank = position) or a ``{rank: path}`` dict.
    ``use_multiprocessing``/``max_workers``: run ranks in worker processes.
    """

    def __init__(
        self,
        profile_filepaths: Union[Sequence[PathLike], Mapping[int, PathLike]],
        use_multiprocessing: bool = False,
        max_workers: Optional[int] = None,
    ) -> None:
        if isinstance(profile_filepaths, Mapping):
            self.rank2filepath: Dict[int, PathLike] = dict(profile_filepaths)
        else:
            self.rank2filepath = {i: p for i, p in enumerate(profile_filepaths)}
        self.use_multiprocessing = use_multiprocessing
        self.max_workers = max_workers
        self.last_summary: Optional[MergeSummary] = None

    def merge_and_save(
        self,
        output_file: str = "merged_trace.json",
        filter_fn: Optional[Callable[[Dict[str, Any]], bool]] = None,
        include_pyfunc: bool = False,
        force: bool = True,
    ) -> str:
        """Merge and write; returns the path written (``.gz`` appended as TraceLens does).

        ``filter_fn(event) -> bool`` keeps an event when True (it sees the original
        event). ``force`` defaults to True because TraceLens overwrites.
        """
        out = tracelens_output_name(str(output_file))
        jobs = (self.max_workers or None) if self.use_multiprocessing else 1
        self.last_summary = merge(
            self.rank2filepath,
            out,
            include_pyfunc=include_pyfunc,
            filter_fn=filter_fn,
            jobs=jobs,
            force=force,
        )
        return out
