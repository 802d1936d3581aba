"""The per-collective table of the human report (analyze/per_collective.py has the rows)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from tracefuse_stream.textout import printable


def table_lines(rows_: List[Dict[str, Any]], limit: int = 8) -> List[str]:
    """The short table of the report."""
    if not rows_:
        return []
    lines = ["per collective (shortest duration across ranks = communication without skew; medians):"]
    lines.append(f"  {'collective':<22} {'ranks':>5} {'size':>12} {'count':>6} {'comm ms':>9} "
                 f"{'start skew':>10} {'end skew':>9} {'busbw GB/s':>10}  most often first")  # fmt: skip
    for r in rows_[:limit]:
        size = "-" if r["bytes"] is None else _size(r["bytes"])
        bw = "-" if r["busbw_gbps"] is None else f"{r['busbw_gbps']:.2f}"
        fa = r["first_arrivals"]
        top: Optional[str] = max(fa, key=lambda k: (fa[k], -int(k))) if fa else None
        first = "-" if top is None else f"rank {top} ({fa[top]}x)"
        lines.append(f"  {printable(r['name'])[:22]:<22} {r['group_size']:>5} {size:>12} {r['count']:>6} "
                     f"{r['min_duration_us'] / 1000:>9.3f} {r['start_skew_us'] / 1000:>10.3f} "
                     f"{r['end_skew_us'] / 1000:>9.3f} {bw:>10}  {first}")  # fmt: skip
    if len(rows_) > limit:
        lines.append(f"  ({len(rows_) - limit} more in --json)")
    return lines


def _size(n: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"


__all__ = ["table_lines"]
