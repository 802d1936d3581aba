"""How much memory the viewer needs for a merged file: the ``viewer_memory_bytes`` estimate.

The Perfetto UI runs trace_processor in the browser (WebAssembly: 4 GB in 32-bit
browsers, up to 16 GB with memory64). JSON is fully buffered and sorted before it is
shown, so what limits a merge is trace_processor's peak memory while it imports the file.

The model is calibrated against Perfetto v58.2's ``trace_processor_shell``: its peak RSS
*above the empty trace's* (24 MB), measured by ``benchmarks/viewer.py`` on real merges
(copies of the shared GPU traces, the shared 4-rank job, the recorded jobs) at
``--args all``, ``slim`` and ``none``. Candidate counts were per event, per slice, per
flow, per arg row and per byte of JSON; the fit that held on the merges it was *not*
fitted on is one coefficient on the merged JSON's size (``python benchmarks/viewer.py
--fit``): within 19% on every held-out merge, all three args modes, 2 to 210 MB. Slices,
flows and arg rows add nothing once the bytes are known: the importer's peak is
dominated by the buffered event text and the tables built from it, both proportional
to the JSON. The merge already counts its JSON bytes (also in a dry run), so the
estimate costs nothing: no second pass, no per-event work. Refit check at f34c496
(slim without python ids): within -21%..+19% on every merge, kept.

The shell maps the whole file and its JSON tokenizer copies it, so ~1x the JSON's bytes
of its peak is the file's text; the UI passes files in 32 MB slices and holds at most
a slice of it (``benchmarks/viewer.py --no-mmap``: a100x8 136 MB instead of 206 MB). For the
browser's limit the estimate therefore errs on the safe side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

#: count name (a field of ViewerCounts) -> bytes of viewer memory per unit
COEFFICIENTS: Dict[str, float] = {
    "json_bytes": 2.95,  # fitted on mi300x4, ddp4_tb, ddp4_rec (benchmarks/viewer.py --fit)
}

GB = 1_000_000_000
#: what a 32-bit browser tab holds for trace_processor (WebAssembly without memory64)
BROWSER_LIMIT_BYTES = 4 * GB
MEMORY64_LIMIT_BYTES = 16 * GB


@dataclass(frozen=True)
class ViewerCounts:
    """What the estimate is computed from: counts one merged file already has."""

    json_bytes: int  # the file's uncompressed JSON size (the viewer decompresses)


def estimate_viewer_bytes(counts: ViewerCounts) -> int:
    """trace_processor's peak memory above the empty trace for one merged file."""
    return int(round(sum(getattr(counts, name) * c for name, c in COEFFICIENTS.items())))


def over_limit_warning(viewer_bytes: int, ranks: int, split: bool) -> Optional[str]:
    """The summary's warning when one file needs more than a browser holds (``None``
    otherwise): what would fit, and that the native trace_processor has no such limit."""
    if viewer_bytes <= BROWSER_LIMIT_BYTES:
        return None
    k = max(1, int(ranks * BROWSER_LIMIT_BYTES * 0.9 // viewer_bytes)) if ranks else 1
    what = "the largest file" if split else "the merged file"
    return (
        f"{what} needs ~{viewer_bytes / GB:.1f} GB in the Perfetto UI (estimate), more than the 4 GB a "
        f"32-bit browser holds ({MEMORY64_LIMIT_BYTES // GB} GB with memory64). What would fit: "
        f"--steps A:B or --window (fewer steps), --ranks (fewer ranks), --args slim (no shape/stride/"
        f"input lists), --split-ranks {k} (~{k} ranks per file); or open it with the native "
        "trace_processor (trace_processor --httpd FILE, no such limit) and connect the UI to it."
    )


def largest(estimates: List[int]) -> int:
    """The estimate that matters: the largest file's (each file is opened on its own)."""
    return max(estimates, default=0)


__all__ = [
    "BROWSER_LIMIT_BYTES",
    "COEFFICIENTS",
    "ViewerCounts",
    "estimate_viewer_bytes",
    "largest",
    "over_limit_warning",
]
