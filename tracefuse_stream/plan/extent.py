"""What one rank's events span: counted and timed in one streaming pass.

``info`` prints it for every rank, and planning needs it where a file's first events
do not tell when the rank starts (:mod:`tracefuse_stream.plan.starts`): both call
:func:`scan_rank`, so it lives with the planning facts, below the reports.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any, Callable, Dict, List, Optional

from tracefuse_stream.plan.rankplan import RankPlan
from tracefuse_stream.read.events import KernelFields, TimedFields, iter_event_batches
from tracefuse_stream.read.scan import ScanSelection, Tally
from tracefuse_stream.timeunits import TimeCheck, us_to_ns

_EXACT_NUMBERS = (int, Decimal)  # what the readers give for numbers (never bool or float)


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
    cycle: Optional[int] = None  # 1-based profiling cycle when the inputs hold several

    @property
    def span_ms(self) -> Optional[float]:
        if self.first_ns is None or self.last_ns is None:
            return None
        return (self.last_ns - self.first_ns) / 1e6

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["span_ms"] = self.span_ms
        return d


def scan_rank(
    plan: RankPlan,
    select: Optional[ScanSelection] = None,
    visit: Optional[Callable[[List[Any]], None]] = None,
    timeline: Any = None,
) -> RankInfo:
    """Count events and find the absolute time span of one rank (one streaming pass,
    numbers parsed exactly). ``select``/``visit``: the same pass also hands the events
    ``select`` picks to ``visit`` (``info --collectives/--steps/--align``: analyze/onepass.py);
    ``timeline``: the kernel records the why's events into it (read/scan.py's Tally).

    Times are compared as the numbers the reader gives (ints and Decimals compare and
    add exactly) and converted to ns once, for the two extremes: converting every
    event's ``ts`` and ``dur`` cost more than reading them.
    """
    base = plan.base_time_ns or 0
    n = 0
    lo: Any = None
    hi: Any = None
    tally = Tally(timeline)  # the events the compiled kernel counted and timed itself
    check = TimeCheck(base)
    for batch in iter_event_batches(
        plan.path,
        compression=plan.compression,
        layout=plan.layout,
        what="counting events",
        fields=TimedFields if visit is None else KernelFields,
        select=ScanSelection(extremes=True, validate=False) if select is None else select,
        tally=tally,
    ):
        n += len(batch)
        if visit is not None:
            visit(batch)
        for ev in batch:
            if type(ev) is not dict or ev.get("ph") == "M":
                continue
            ts: Any = ev.get("ts")
            kind = type(ts)
            if kind is not int and (kind is not Decimal or not ts.is_finite()):
                continue  # no usable time
            if check(ev) is not None:
                continue  # malformed (timeunits.time_problem): the merge drops or refuses it
            dur: Any = ev.get("dur")
            end = ts + dur if type(dur) in _EXACT_NUMBERS and dur > 0 else ts
            if lo is None or ts < lo:
                lo = ts
            if hi is None or end > hi:
                hi = end
    n += tally.events
    if tally.first_us is not None and (lo is None or tally.first_us < lo):
        lo = tally.first_us
    if tally.last_us is not None and (hi is None or tally.last_us > hi):
        hi = tally.last_us
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
        first_ns=None if lo is None else base + us_to_ns(lo),
        last_ns=None if hi is None else base + us_to_ns(hi),
        cycle=plan.cycle,
    )


__all__ = ["RankInfo", "scan_rank"]
