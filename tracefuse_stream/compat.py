"""``TraceFuse``: a drop-in for TraceLens' class of the same name, streaming inside.

TraceLens loads every event of every rank into memory, derives pid/id offsets from
the first file only (a later rank with larger ids or pids collides) and writes
indented JSON through gzip level 9. This class keeps its call shape and rank
semantics — list position or dict key is the rank — and runs the streaming merge.

As in TraceLens, a custom ``filter_fn`` *replaces* the default selection: it alone
decides, so ``python_function`` events reach it and are kept unless it drops them
(``include_pyfunc`` only matters without a ``filter_fn``). The command line keeps
its own default (python_function dropped unless ``--include-pyfunc``).
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from tracefuse_stream.options import Execution, Filters, MergeOptions, OutputOptions
from tracefuse_stream.pipeline.orchestrate import MergeSummary, merge

PathLike = Union[str, "os.PathLike[str]"]
FilterFn = Callable[[Dict[str, Any]], bool]
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

    def merge(
        self, filter_fn: Optional[FilterFn] = None, include_pyfunc: bool = False
    ) -> List[Dict[str, Any]]:
        """The merged events IN MEMORY, as TraceLens' ``merge`` returns them: a list of
        event dicts (rewritten exactly as in the file merge, metadata included).

        Memory: this holds every event as Python objects (several times the JSON
        size), which is what the streaming merge avoids; for big runs use
        :meth:`merge_and_save` or :func:`tracefuse_stream.merge`. Timestamps are
        relative to the merged base (``merge_trace()["baseTimeNanoseconds"]``);
        numbers are parsed by ``json`` (floats), as TraceLens does.
        """
        return self.merge_trace(filter_fn, include_pyfunc)["traceEvents"]

    def merge_trace(
        self, filter_fn: Optional[FilterFn] = None, include_pyfunc: bool = False
    ) -> Dict[str, Any]:
        """The whole merged trace in memory as a dict (``traceEvents``,
        ``baseTimeNanoseconds``, the ``tracefuse`` header); same memory warning as
        :meth:`merge`. Built by a file merge into a private temporary directory."""
        with tempfile.TemporaryDirectory(prefix="tracefuse-inmem-") as d:
            path = os.path.join(d, "merged.json")
            self._run(path, filter_fn, include_pyfunc, force=True)
            with open(path, "rb") as f:
                trace: Dict[str, Any] = json.load(f)
        return trace

    def merge_and_save(
        self,
        output_file: str = "merged_trace.json",
        filter_fn: Optional[FilterFn] = None,
        include_pyfunc: bool = False,
        force: bool = True,
    ) -> str:
        """Merge and write; returns the path written (``.gz`` appended as TraceLens does).

        ``filter_fn(event) -> bool`` keeps an event when True (it sees the original
        event) and replaces the default python_function drop, as in TraceLens.
        ``force`` defaults to True because TraceLens overwrites.
        """
        out = tracelens_output_name(str(output_file))
        self._run(out, filter_fn, include_pyfunc, force=force)
        return out

    def _run(self, out: str, filter_fn: Optional[FilterFn], include_pyfunc: bool, *, force: bool) -> None:
        options = MergeOptions(
            # a custom filter_fn alone decides, as in TraceLens (it replaces the python_function drop)
            filters=Filters(include_pyfunc=include_pyfunc or filter_fn is not None, filter_fn=filter_fn),
            output=OutputOptions(force=force),
            execution=Execution(jobs=(self.max_workers or None) if self.use_multiprocessing else 1),
        )
        self.last_summary = merge(self.rank2filepath, out, options)
