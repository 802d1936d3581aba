"""``TraceFuse``: a drop-in for TraceLens' class of the same name, streaming inside.

TraceLens loads every event of every rank into memory, derives pid/id offsets from
the first file only (a later rank with larger ids or pids collides) and writes
indented JSON through gzip level 9. This class keeps its call shape and rank
semantics — list position or dict key is the rank — and runs the streaming merge.

As in TraceLens, the default selection drops Kineto's ``cat == "Trace"`` span (the
"PyTorch Profiler (0)" slice covering the whole recording) and, unless
``include_pyfunc``, the ``python_function`` events; a custom ``filter_fn``
*replaces* it: it alone decides, so both reach it and are kept unless it drops them.
The command line keeps its own default (python_function dropped unless
``--include-pyfunc``; the "Trace" span kept unless ``--drop-cat Trace``).

The attributes a TraceLens user reads exist with TraceLens' meaning:
``rank2filepath`` and ``linking_key`` (the arg that links a CPU launch to its GPU
work in the first file: ``"correlation"`` when its first runtime launch event carries
one, else ``"External id"``). The merge itself links by every id of every rank
(README, "Flow ids and links"); ``linking_key`` is informational.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from tracefuse_stream.options import Execution, Filters, MergeOptions, OutputOptions
from tracefuse_stream.pipeline.orchestrate import MergeSummary, merge
from tracefuse_stream.read.events import iter_events

PathLike = Union[str, "os.PathLike[str]"]
FilterFn = Callable[[Dict[str, Any]], bool]
COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd")
#: TraceLens' default filter drops this category (Kineto's whole-recording span).
TRACELENS_DROPPED_CAT = "Trace"
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")  # ROCm traces use the same categories


def default_filter_fn(event: Dict[str, Any], include_pyfunc: bool = False) -> bool:
    """TraceLens' default selection, for reference and for composing your own
    ``filter_fn``: not ``cat == "Trace"``, and not ``python_function`` unless asked."""
    cat = event.get("cat")
    return cat != TRACELENS_DROPPED_CAT and (include_pyfunc or cat != "python_function")


def find_linking_key(path: PathLike) -> str:
    """``"correlation"`` when the first runtime launch event of ``path`` (category
    cuda_runtime/cuda_driver, "launch" in its name) has a ``correlation`` arg, else
    ``"External id"`` (also when there is no launch event: a CPU-only trace). Reads
    events only up to that launch event, in bounded memory."""
    for ev in iter_events(path, strict=False, what="looking for a launch event"):
        if not isinstance(ev, dict) or ev.get("cat") not in LAUNCH_CATS:
            continue
        name = ev.get("name")
        if isinstance(name, str) and "launch" in name.lower():
            args = ev.get("args")
            return "correlation" if isinstance(args, dict) and "correlation" in args else "External id"
    return "External id"


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
        self._linking_key: Optional[str] = None

    @property
    def linking_key(self) -> str:
        """TraceLens' ``linking_key`` of the first file (see the module docstring);
        found on first use, reading that file up to its first launch event."""
        if self._linking_key is None:
            first = next(iter(self.rank2filepath.values()), None)
            self._linking_key = "External id" if first is None else find_linking_key(first)
        return self._linking_key

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
        event) and replaces the default selection (:func:`default_filter_fn`), as in
        TraceLens.
        ``force`` defaults to True because TraceLens overwrites.
        """
        out = tracelens_output_name(str(output_file))
        self._run(out, filter_fn, include_pyfunc, force=force)
        return out

    def _run(self, out: str, filter_fn: Optional[FilterFn], include_pyfunc: bool, *, force: bool) -> None:
        # a custom filter_fn alone decides, as in TraceLens (it replaces the default drops)
        custom = filter_fn is not None
        options = MergeOptions(
            filters=Filters(
                include_pyfunc=include_pyfunc or custom,
                drop_cat=frozenset() if custom else frozenset({TRACELENS_DROPPED_CAT}),
                filter_fn=filter_fn,
            ),
            output=OutputOptions(force=force),
            execution=Execution(jobs=(self.max_workers or None) if self.use_multiprocessing else 1),
        )
        self.last_summary = merge(self.rank2filepath, out, options)
