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
from tracefuse_stream.textout import printable, terminal
from tracefuse_stream.timeunits import iso_utc

SIZE_WARN_BYTES = 1 << 30
#: per-rank rows of the text summary (more: the first ones and "... and N more ranks")
TABLE_ROWS = 32


@dataclass
class RankSummary:
    """Per-rank numbers reported after a merge. They add up (issue 28, item 6):
    ``events_in = events_kept + dropped + metadata_in + skipped`` and
    ``events_out = events_kept + flows_added + counters_added + metadata_out``. The input's process and
    thread metadata is not "kept": the labels are written anew for each rank
    (``rewrite/labels.py``), so they are counted on each side as what they are."""

    rank: int
    path: str
    events_in: int  # every event read
    events_out: int  # every event written: kept + flows_added + counters_added + metadata_out
    dropped: int  # left out by the selection (categories, --name, --window, ...)
    shift_ns: int  # what was added to every ts (exact; the header's shift_ns)
    seconds: float
    salvage: Optional[Dict[str, Any]] = None
    metadata_out: int = 0  # process/thread metadata written for this rank (regenerated labels)
    json_bytes_in: int = 0  # decompressed JSON bytes read
    cycle: Optional[int] = None  # --cycle all: the profiling cycle (1-based) this rank's file is of
    metadata_in: int = 0  # process/thread metadata read (replaced by the labels written)
    skipped: int = 0  # --salvage: events read but not writable (bad values), left out
    flows_added: int = 0  # --link-collectives: flow events the merge made
    counters_added: int = 0  # --link-collectives: step counter events made (report/step_counters.py)

    @property
    def events_kept(self) -> int:
        """Input events written (rewritten): neither dropped, metadata nor skipped."""
        return self.events_out - self.metadata_out - self.flows_added - self.counters_added


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
    cycles: int = (
        1  # the profiling cycles merged: 1, or with --cycle all each (ranks holds every cycle's ranks)
    )
    #: --link-collectives: the events of the "Collectives" process the merge wrote (no
    #: rank's: its slices, labels and why tracks), in ``events_out`` as verify counts them
    collectives_events: int = 0

    @property
    def events_in(self) -> int:
        return sum(r.events_in for r in self.ranks)

    @property
    def events_out(self) -> int:
        """Every event written: the ranks' and the Collectives process's."""
        return sum(r.events_out for r in self.ranks) + self.collectives_events

    @property
    def json_bytes_in(self) -> int:
        """Decompressed JSON bytes read: the work done (compressed sizes understate it)."""
        return sum(r.json_bytes_in for r in self.ranks)

    @property
    def metadata_out(self) -> int:
        return sum(r.metadata_out for r in self.ranks)

    @property
    def metadata_in(self) -> int:
        return sum(r.metadata_in for r in self.ranks)

    @property
    def events_kept(self) -> int:
        return sum(r.events_kept for r in self.ranks)

    @property
    def dropped(self) -> int:
        return sum(r.dropped for r in self.ranks)

    @property
    def skipped(self) -> int:
        return sum(r.skipped for r in self.ranks)

    @property
    def flows_added(self) -> int:
        return sum(r.flows_added for r in self.ranks)

    @property
    def counters_added(self) -> int:
        return sum(r.counters_added for r in self.ranks)

    def moved_ns(self) -> List[int]:
        """Per rank (in ``ranks`` order), how far its events moved against the ranks of
        its output: ``shift_ns`` minus the least ``shift_ns`` of its cycle. Every rank's
        ts move by ``shift_ns`` (re-based onto the output base, which can be months);
        what tells ranks apart is the difference: base differences, clock corrections.
        The table's "moved us" column and ``--json-summary``'s ``moved_ns`` are this."""
        least: Dict[Optional[int], int] = {}
        for r in self.ranks:
            least[r.cycle] = min(least.get(r.cycle, r.shift_ns), r.shift_ns)
        return [r.shift_ns - least[r.cycle] for r in self.ranks]

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
        for row, r, moved in zip(d["ranks"], self.ranks, self.moved_ns()):
            row["events_kept"] = r.events_kept
            row["moved_ns"] = moved
        for key in COUNTS:
            d[key] = getattr(self, key)
        d["json_bytes_in"] = self.json_bytes_in
        d["mb_per_s"] = self.mb_per_s
        return d

    def format_text(self) -> str:
        # --cycle all lists each rank once per cycle: a cycle column tells the rows apart
        cyc = any(r.cycle is not None for r in self.ranks)
        cols = _columns(self.ranks)
        lines = [
            ("cycle " if cyc else "")
            + f"{'rank':>6} "
            + " ".join(f"{title:>{w}}" for title, _, w in cols)
            + f" {'moved us':>14}  file",
        ]
        moved = self.moved_ns()
        n_shown = len(self.ranks) if len(self.ranks) <= TABLE_ROWS + 1 else TABLE_ROWS
        for r, m in zip(self.ranks[:n_shown], moved):
            extra = f"  [salvaged: {r.salvage.get('summary')}]" if r.salvage else ""
            lines.append(
                (f"{r.cycle if r.cycle is not None else '-':>5} " if cyc else "")
                + f"{r.rank:>6} "
                + " ".join(f"{get(r):>{w},}" for _, get, w in cols)
                + f" {m / 1000:>14,.3f}  {printable(r.path)}{extra}"
            )
        if n_shown < len(self.ranks):
            salvaged = [r.rank for r in self.ranks[n_shown:] if r.salvage]
            lines.append(
                f"{'...':>6} and {len(self.ranks) - n_shown:,} more ranks (--json-summary lists every rank)"
                + (f"; salvaged among them: {compress_ranges(salvaged)}" if salvaged else "")
            )
        verb = "dry run over" if self.dry_run else "merged"
        if self.window_ns:
            lines.append(f"time window: {window_text(self.window_ns)}")
        lines.append(f"{verb} {self.ranks_text()}: {self.counts_text()}")
        lines.append(
            f"{self.bytes_in / 1e6:,.1f} MB in ({self.json_bytes_in / 1e6:,.1f} MB of JSON) -> {printable(self.output)} "
            f"{self.bytes_out / 1e6:,.1f} MB ({self.json_bytes / 1e6:,.1f} MB JSON"
            f"{' estimated' if self.dry_run else ''}) in {self.seconds:.1f} s, "
            f"{self.mb_per_s:,.1f} MB/s of input JSON, {workers_text(self.jobs)}"
        )
        if self.viewer_memory_bytes:
            lines.append(
                f"viewer memory: ~{self.viewer_memory_bytes / 1e6:,.0f} MB in Perfetto (trace_processor, "
                f"estimated{', largest file' if len(self.outputs) > 1 else ''}; a browser holds 4 GB)"
            )
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"warning: {w}" for w in self.warnings]
        # no note on the shift every rank shares (re-basing onto the output base: months
        # of us on every merge, noise): --json-summary has it as shift_ns - moved_ns
        return terminal("\n".join(lines))

    def counts_text(self) -> str:
        """The totals as two sums that add up: what was read, what was written."""
        read = [f"{self.events_kept:,} kept", f"{self.dropped:,} dropped", f"{self.metadata_in:,} labels"]
        if self.skipped:
            read.append(f"{self.skipped:,} skipped")
        written = [f"{self.events_kept:,} kept", f"{self.metadata_out:,} labels"]
        if self.flows_added:
            written.append(f"{self.flows_added:,} flow events")
        if self.counters_added:
            written.append(f"{self.counters_added:,} step counter events")
        if self.collectives_events:
            written.append(f"{self.collectives_events:,} in the Collectives process")
        return (
            f"{self.events_in:,} events in = {' + '.join(read)}; {self.events_out:,} out = {' + '.join(written)} "
            "(labels: process/thread metadata; the input's are replaced by labels written anew for each rank)"
        )

    def ranks_text(self) -> str:
        """``8 ranks``, or ``8 ranks × 2 cycles`` for ``--cycle all``."""
        if self.cycles > 1:
            per = len({r.rank for r in self.ranks})
            return f"{per} rank{'s' if per != 1 else ''} × {self.cycles} cycles"
        n = len(self.ranks)
        return f"{n} rank{'s' if n != 1 else ''}"


#: totals in ``--json-summary`` (each the sum of the per-rank field of the same name;
#: ``events_out`` also holds ``collectives_events``, the Collectives process's)
COUNTS = (
    "events_in",
    "events_out",
    "events_kept",
    "dropped",
    "metadata_in",
    "metadata_out",
    "skipped",
    "flows_added",
    "counters_added",
    "json_bytes_in",
    "mb_per_s",
)


def _columns(ranks: List[RankSummary]) -> List[Tuple[str, Any, int]]:
    """The count columns (title, value of a row, width): ``events in`` is the sum of
    the next four, ``kept`` plus ``labels out`` (plus ``flows`` and ``counters``) what the file holds;
    ``skipped``, ``flows`` and ``counters`` only where a rank has some."""
    cols: List[Tuple[str, Any, int]] = [
        ("events in", lambda r: r.events_in, 12),
        ("kept", lambda r: r.events_kept, 10),
        ("dropped", lambda r: r.dropped, 10),
        ("labels in", lambda r: r.metadata_in, 10),
    ]
    if any(r.skipped for r in ranks):
        cols.append(("skipped", lambda r: r.skipped, 10))
    cols.append(("labels out", lambda r: r.metadata_out, 11))
    if any(r.flows_added for r in ranks):
        cols.append(("flow events", lambda r: r.flows_added, 12))
    if any(r.counters_added for r in ranks):
        cols.append(("counters", lambda r: r.counters_added, 9))
    return cols


def workers_text(jobs: int) -> str:
    """``2 workers``, or ``no workers`` when the ranks ran in this process (``-j 1``)."""
    return "no workers (in this process)" if jobs <= 1 else f"{jobs} workers"


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
