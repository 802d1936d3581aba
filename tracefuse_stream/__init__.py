"""tracefuse-stream: merge per-rank PyTorch profiler traces into one Perfetto trace,
streaming, with bounded memory.

The public API, all importable from here and typed (``py.typed``)::

    from tracefuse_stream import merge, MergeOptions, TraceFuseError, VerifyFailed

    summary = merge(["run/"], "merged.json.gz", jobs=0, ranks=[0, 1])      # keywords
    summary = merge(["run/"], "merged.json.gz", MergeOptions.from_kwargs(jobs=0))
    summary = merge(["run/"], "m.json.gz", options=opts, verify=True)      # opts + overrides

* :func:`merge` ``(inputs, output, options=None, **overrides)`` returns a
  :class:`MergeSummary` (one :class:`RankSummary` per rank);
* :class:`MergeOptions` (tracefuse_stream/options.py, with its parts) holds every
  choice, validated once; the flat keywords of ``merge()`` override its fields;
* errors: every failure a user can cause is a :class:`TraceFuseError` with a one-line
  message and an ``exit_code`` / ``kind`` (:class:`ErrorKind`): :class:`InputError`
  (a file: missing, not a trace, broken; ``path``, ``offset``, ``event_index``),
  :class:`UsageError` (arguments), :class:`OutputError` (the output cannot be
  written), :class:`Interrupted` (SIGINT/SIGTERM; nothing written),
  :class:`VerifyFailed` (``verify=True`` found an error in the written file) and
  :class:`ClusterError` (``dask=``: the Dask cluster cannot be reached or lost the work);
* :func:`stragglers` ``(inputs, ranks=None, cycle=None, jobs=1, dask=None)``: the straggler report
  of ``info --collectives --json`` (who holds the others back, per step, and why) as a
  :class:`StragglerReport` dict (report/api.py; schema in docs/collectives.md);
* :func:`diff` ``(base, new, ranks=None, steps=None, ..., jobs=1)``: run vs run, what
  changed on which ranks and whether it is real, the object ``diff --json`` prints
  (report/diff_api.py; schema in docs/diff.md);
* :class:`TraceFuse`: the TraceLens-compatible class (compat.py).

Where the stages live (read -> plan -> select/rewrite -> write, run by pipeline; align,
report, verify, serve and cli around them): README.md, "Layout".
"""

from typing import TYPE_CHECKING, Any

from tracefuse_stream._version import __version__
from tracefuse_stream.errors import (
    ClusterError,
    ErrorKind,
    InputError,
    Interrupted,
    OutputError,
    TraceFuseError,
    UsageError,
    VerifyFailed,
)

if TYPE_CHECKING:  # loaded on first use: __getattr__ below
    from tracefuse_stream.compat import TraceFuse
    from tracefuse_stream.options import MergeOptions
    from tracefuse_stream.pipeline.orchestrate import MergeSummary, RankSummary, merge
    from tracefuse_stream.report.api import StragglerReport, stragglers
    from tracefuse_stream.report.diff_api import diff


def __getattr__(name: str) -> Any:
    """The merge API, imported on first use, not at ``import tracefuse_stream``: every
    command of ``python -m tracefuse_stream`` imports this package first, and the merge
    pipeline behind these names is most of the package's import time, which ``info``,
    ``verify``, ``open`` and ``--help`` do not need (PEP 562)."""
    module: Any
    if name == "TraceFuse":
        from tracefuse_stream import compat as module  # lazy on purpose: see the docstring
    elif name == "MergeOptions":
        from tracefuse_stream import options as module  # lazy on purpose: see the docstring
    elif name in ("MergeSummary", "RankSummary", "merge"):
        from tracefuse_stream.pipeline import orchestrate as module  # lazy on purpose: see the docstring
    elif name in ("StragglerReport", "stragglers"):
        from tracefuse_stream.report import api as module  # lazy on purpose: see the docstring
    elif name == "diff":
        from tracefuse_stream.report import diff_api as module  # lazy on purpose: see the docstring
    else:
        raise AttributeError(f"module 'tracefuse_stream' has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> Any:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "TraceFuse",
    "merge",
    "MergeOptions",
    "MergeSummary",
    "RankSummary",
    "stragglers",
    "StragglerReport",
    "diff",
    "TraceFuseError",
    "InputError",
    "OutputError",
    "UsageError",
    "Interrupted",
    "VerifyFailed",
    "ClusterError",
    "ErrorKind",
    "__version__",
]
