"""What a merge reports: per-rank numbers, totals, speed and warnings.

``MergeSummary`` is the return value of :func:`tracefuse_stream.merge` and the source of
the CLI's summary (text or ``--json-summary``). MB/s is measured on the decompressed
JSON read, the work actually done, not on compressed file sizes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from tracefuse_stream.rankset import compress_ranges
from tracefuse_stream.report.viewer import over_limit_warning
from tracefuse_stream.timeunits import iso_utc

SIZE_WARN_BYTES = 1 << 30
#: per-rank rows of the text summary (more: the first ones and "... and N more ranks")
TABLE_ROWS = 32


@dataclass
class RankSummary:
    """Per-rank numbers reported after a merge."""

    rank: int
    path: str
    events_in: int
    events_out: int
    dropped: int
    shift_ns: int
    seconds: float
    salvage: Optional[Dict[str, Any]] = None
    metadata_out: int = 0  # process/thread metadata written for this rank (regenerated labels)
    json_bytes_in: int = 0  # decompressed JSON bytes read
    cycle: Optional[int] = None  # --cycle all: the profiling cycle (1-based) this rank's file is of


@dataclass
class MergeSummary:
    """What a merge did: per-rank counts, sizes, speed and warnings."""

    output: str
    ranks: List[RankSummary]
    base_time_ns: int
    bytes_in: int
    bytes_out: int
    json_bytes: int
    seconds: float
    jobs: int
    warnings: List[str] = field(default_factory=list)  # what may make the result wrong or unviewable
    outputs: List[str] = field(default_factory=list)
    dry_run: bool = False
    window_ns: Optional[Tuple[int, int]] = None
    verify_reports: List[Any] = field(default_factory=list)
    viewer_memory_bytes: int = 0  # the largest file's estimated trace_processor memory (report/viewer.py)
    notes: List[str] = field(default_factory=list)  # facts worth a line that are no problem
    cycles: int = 0  # --cycle all: the profiling cycles merged (ranks holds every cycle's ranks)

    @property
    def events_in(self) -> int:
        return sum(r.events_in for r in self.ranks)

    @property
    def events_out(self) -> int:
        return sum(r.events_out for r in self.ranks)

    @property
    def json_bytes_in(self) -> int:
        """Decompressed JSON bytes read: the work done (compressed sizes understate it)."""
        return sum(r.json_bytes_in for r in self.ranks)

    @property
    def metadata_out(self) -> int:
        return sum(r.metadata_out for r in self.ranks)

    @property
    def mb_per_s(self) -> float:
        """Throughput in MB/s of decompressed input JSON."""
        return self.json_bytes_in / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> Dict[str, Any]:
        reports, self.verify_reports = self.verify_reports, []
        try:
            d = asdict(self)
        finally:
            self.verify_reports = reports
        d.pop("verify_reports", None)
        d["verify"] = [json.loads(r.to_json()) for r in reports]
        d["events_in"] = self.events_in
        d["events_out"] = self.events_out
        d["metadata_out"] = self.metadata_out
        d["json_bytes_in"] = self.json_bytes_in
        d["mb_per_s"] = self.mb_per_s
        return d

    def format_text(self) -> str:
        # --cycle all lists each rank once per cycle: a cycle column tells the rows apart
        cyc = any(r.cycle is not None for r in self.ranks)
        lines = [
            ("cycle " if cyc else "")
            + f"{'rank':>6} {'events in':>12} {'events out':>12} {'dropped':>10} {'moved us':>14}  file",
        ]
        # every rank's ts move by its exact shift_ns (--json-summary, the header); the table
        # shows how far each moved against the others: base differences, clock corrections
        # (--cycle all: against the ranks of the same cycle, which share one output file)
        least: Dict[Optional[int], int] = {}
        for r in self.ranks:
            least[r.cycle] = min(least.get(r.cycle, r.shift_ns), r.shift_ns)
        shown = self.ranks if len(self.ranks) <= TABLE_ROWS + 1 else self.ranks[:TABLE_ROWS]
        for r in shown:
            extra = f"  [salvaged: {r.salvage.get('summary')}]" if r.salvage else ""
            lines.append(
                (f"{r.cycle if r.cycle is not None else '-':>5} " if cyc else "")
                + f"{r.rank:>6} {r.events_in:>12,} {r.events_out:>12,} {r.dropped:>10,} "
                f"{(r.shift_ns - least[r.cycle]) / 1000:>14,.3f}  {r.path}{extra}"
            )
        if len(shown) < len(self.ranks):
            salvaged = [r.rank for r in self.ranks[len(shown) :] if r.salvage]
            lines.append(
                f"{'...':>6} and {len(self.ranks) - len(shown):,} more ranks (--json-summary lists every rank)"
                + (f"; salvaged among them: {compress_ranges(salvaged)}" if salvaged else "")
            )
        verb = "dry run over" if self.dry_run else "merged"
        if self.window_ns:
            lines.append(f"time window: {window_text(self.window_ns)}")
        lines.append(
            f"{verb} {self.ranks_text()}: {self.events_in:,} events in, {self.events_out:,} out "
            f"(of which {self.metadata_out:,} process/thread labels, written anew for each rank); "
            f"{self.bytes_in / 1e6:,.1f} MB in ({self.json_bytes_in / 1e6:,.1f} MB of JSON) -> {self.output} "
            f"{self.bytes_out / 1e6:,.1f} MB ({self.json_bytes / 1e6:,.1f} MB JSON"
            f"{' estimated' if self.dry_run else ''}) in {self.seconds:.1f} s, "
            f"{self.mb_per_s:,.1f} MB/s of input JSON, {self.jobs} job(s)"
        )
        if self.viewer_memory_bytes:
            lines.append(
                f"viewer memory: ~{self.viewer_memory_bytes / 1e6:,.0f} MB in Perfetto (trace_processor, "
                f"estimated{', largest file' if len(self.outputs) > 1 else ''}; a browser holds 4 GB)"
            )
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def ranks_text(self) -> str:
        """``8 ranks``, or ``8 ranks × 2 cycles`` for ``--cycle all``."""
        if self.cycles > 1:
            per = len({r.rank for r in self.ranks})
            return f"{per} rank{'s' if per != 1 else ''} × {self.cycles} cycles"
        n = len(self.ranks)
        return f"{n} rank{'s' if n != 1 else ''}"


def window_text(window_ns: Tuple[int, int]) -> str:
    """A ``--steps``/``--window`` window as a person reads it: UTC and its length
    (never raw epoch ns)."""

    lo, hi = window_ns
    return f"{iso_utc(lo)} .. {iso_utc(hi)} ({(hi - lo) / 1e6:,.3f} ms)"


def size_warning(
    json_bytes: int, viewer_bytes: int = 0, ranks: int = 0, split: bool = False
) -> Optional[str]:
    """The summary's warning when a merged file is too big for the browser UI: by the
    viewer-memory estimate beyond 4 GB, else by JSON size beyond ~1 GB."""
    over = over_limit_warning(viewer_bytes, ranks, split)
    if over is not None:
        return over
    if json_bytes <= SIZE_WARN_BYTES:
        return None
    return (
        f"the merged JSON is {json_bytes / 1e9:.1f} GB uncompressed: the Perfetto UI in a browser "
        "struggles beyond ~1-2 GB. Smaller: drop python_function (the default; check "
        "--include-pyfunc), --steps A:B, --ranks, --keep-cat/--drop-cat; or open it with the "
        "native trace_processor (trace_processor --httpd FILE) and connect the UI to it."
    )
