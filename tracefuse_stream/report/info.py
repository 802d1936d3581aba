"""``info``: what each input holds, streamed, without writing anything.

Per rank: file, rank (and where it came from), world size, host, bytes, events,
base time and the absolute time span (first ts to last ts+dur). The span makes
clock and base problems visible before a merge ("rank 5 starts 91 days later").
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional

from tracefuse_stream.plan.planner import RankPlan
from tracefuse_stream.timeunits import us_to_ns_or_none
from tracefuse_stream.read.events import iter_event_batches


@dataclass
class RankInfo:
    rank: int
    rank_from: str
    path: str
    compression: str
    bytes: int
    world_size: Optional[int]
    host_name: Optional[str]
    base_time_ns: Optional[int]
    events: int
    first_ns: Optional[int]  # absolute epoch ns
    last_ns: Optional[int]

    @property
    def span_ms(self) -> Optional[float]:
        if self.first_ns is None or self.last_ns is None:
            return None
        return (self.last_ns - self.first_ns) / 1e6

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["span_ms"] = self.span_ms
        return d


def scan_rank(plan: RankPlan) -> RankInfo:
    """Count events and find the absolute time span of one rank (one streaming pass,
    numbers parsed exactly)."""
    base = plan.base_time_ns or 0
    n = 0
    lo: Optional[int] = None
    hi: Optional[int] = None
    for batch in iter_event_batches(
        plan.path, compression=plan.compression, layout=plan.layout, what="counting events"
    ):
        n += len(batch)
        for ev in batch:
            if type(ev) is not dict or ev.get("ph") == "M":
                continue
            start = us_to_ns_or_none(ev.get("ts"))
            if start is None:
                continue
            dur = us_to_ns_or_none(ev.get("dur")) or 0
            end = start + max(dur, 0)
            if lo is None or start < lo:
                lo = start
            if hi is None or end > hi:
                hi = end
    return RankInfo(
        rank=plan.rank,
        rank_from=plan.rank_source,
        path=plan.path,
        compression=plan.compression,
        bytes=plan.size_bytes,
        world_size=plan.world_size,
        host_name=plan.host_name,
        base_time_ns=plan.base_time_ns,
        events=n,
        first_ns=None if lo is None else base + lo,
        last_ns=None if hi is None else base + hi,
    )


def _iso(ns: Optional[int]) -> str:
    if ns is None:
        return "-"
    dt = datetime.fromtimestamp(ns / 1e9, tz=timezone.utc)
    return dt.strftime("%Y-%m-%d %H:%M:%S.") + f"{(ns // 1000) % 1_000_000:06d}Z"


def format_info(rows: List[RankInfo]) -> str:
    """A readable per-rank table."""
    lines = [
        f"{'rank':>5} {'from':<15} {'world':>5} {'host':<12} {'MB':>9} {'events':>11} "
        f"{'base time (ns)':>20} {'first event (UTC)':<28} {'span ms':>10}  file"
    ]
    for r in rows:
        span = "-" if r.span_ms is None else f"{r.span_ms:,.3f}"
        lines.append(
            f"{r.rank:>5} {r.rank_from:<15} {r.world_size if r.world_size is not None else '-':>5} "
            f"{(r.host_name or '-')[:12]:<12} {r.bytes / 1e6:>9.2f} {r.events:>11,} "
            f"{r.base_time_ns if r.base_time_ns is not None else '(none: epoch ts)':>20} "
            f"{_iso(r.first_ns):<28} {span:>10}  {r.path}"
        )
    if rows:
        firsts = [r.first_ns for r in rows if r.first_ns is not None]
        if len(firsts) > 1:
            lines.append(f"ranks start within {(max(firsts) - min(firsts)) / 1e6:,.3f} ms of each other")
    return "\n".join(lines)
