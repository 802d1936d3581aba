"""tracefuse-stream: merge per-rank PyTorch profiler traces into one Perfetto trace,
streaming, with bounded memory.

Pipeline (one module per stage):
``sources`` (find/open inputs) -> ``plan`` (cheap per-rank header pass) ->
``reader`` (ijson event stream) -> ``rewrite`` (pid/tid/id/ts rules) ->
``labels`` (per-rank process names and sort order) -> ``writer`` (incremental,
compressed, atomic output) orchestrated by ``merge``; ``cli`` and ``compat``
(TraceLens-compatible ``TraceFuse``) are the front doors.
"""
__version__ = "0.1.0"
