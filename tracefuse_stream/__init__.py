"""tracefuse-stream: merge per-rank PyTorch profiler traces into one Perfetto trace,
streaming, with bounded memory.

Pipeline (one module per stage):
``sources`` (find/open inputs) -> ``plan`` (cheap per-rank header pass, ``trailer``
for keys after the events) -> ``stream`` (ijson events of one rank) -> ``rewrite``
(pid/tid/id/ts rules) -> ``labels`` (process names and sort order) -> ``writer``
(compressed fragments spliced into one atomic output), orchestrated by ``merge``;
``cli`` and ``compat`` (TraceLens-compatible ``TraceFuse``) are the front doors,
``verify`` checks a merged file.
"""

from tracefuse_stream._version import __version__
from tracefuse_stream.compat import TraceFuse
from tracefuse_stream.errors import InputError, OutputError, TraceFuseError, UsageError
from tracefuse_stream.pipeline.orchestrate import MergeSummary, RankSummary, merge

__all__ = [
    "TraceFuse",
    "merge",
    "MergeSummary",
    "RankSummary",
    "TraceFuseError",
    "InputError",
    "OutputError",
    "UsageError",
    "__version__",
]
