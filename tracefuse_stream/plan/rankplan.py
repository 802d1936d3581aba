"""What planning decides for one rank: :class:`RankPlan`, the record every later stage
reads (align, select, rewrite, the pipeline, verify, report).

Kept in a module of its own, below the planner, so that the modules the planner uses
(ranks, cycles, starts) and every stage above can name it without importing the
planning pass itself.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class RankPlan:
    """Everything the streaming pass of one rank needs to know up front.

    The planner builds plans step by step (ranks, cycles, shifts) and seals them before
    handing them out: a sealed plan refuses attribute assignment, so no later stage can
    change another stage's facts; a stage that must differ (clock alignment) makes a
    new plan with :meth:`replaced`.
    """

    path: str
    position: int
    compression: str
    size_bytes: int
    layout: str  # "object" ({"traceEvents": [...]}) or "array" (bare [...])
    header: Dict[str, Any]  # top-level keys before traceEvents (+ trailer once known)
    trailer_known: bool
    rank: int = -1
    rank_source: str = "order"  # "distributedInfo", "filename", "order", "explicit" (see ranks)
    base_time_ns: Optional[int] = None
    shift_ns: int = 0
    align_offset_ns: int = 0  # clock correction folded into shift_ns
    align: Optional[Dict[str, Any]] = None
    problems: List[str] = field(default_factory=list)  # notes worth a warning line
    strict_error: Optional[str] = None  # why strict reading failed (salvage plans)
    needs_salvage: bool = False  # strict reading failed; stream with the salvage reader
    first_ts: Any = None  # ts of the first timed event (see starts.peek_first_ts)
    empty: bool = False  # no timed event at all: does not decide the output base
    start_ns: Optional[int] = None  # absolute epoch ns of the first timed event

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("_sealed"):
            raise dataclasses.FrozenInstanceError(
                f"a planned RankPlan is immutable (setting {name!r}); use plan.replaced(...)"
            )
        object.__setattr__(self, name, value)

    def seal(self) -> RankPlan:
        """Make this plan immutable (its notes become a tuple)."""
        object.__setattr__(self, "problems", tuple(self.problems))
        object.__setattr__(self, "_sealed", True)
        return self

    def replaced(self, **changes: Any) -> RankPlan:
        """A sealed copy with ``changes`` applied."""
        fresh = dataclasses.replace(self, **changes)
        object.__setattr__(fresh, "problems", list(fresh.problems))
        return fresh.seal()

    cycle: Optional[int] = None  # 1-based profiling cycle, when the inputs hold several
    from_dir: bool = False  # found by listing a directory (not given by path)

    @property
    def world_size(self) -> Optional[int]:
        di = self.header.get("distributedInfo")
        if isinstance(di, dict) and isinstance(di.get("world_size"), int):
            return di["world_size"]
        return None

    @property
    def host_name(self) -> Optional[str]:
        h = self.header.get("host_name")
        return h if isinstance(h, str) else None

    @property
    def dist_rank(self) -> Optional[int]:
        di = self.header.get("distributedInfo")
        if isinstance(di, dict):
            r = di.get("rank")
            if isinstance(r, int) and not isinstance(r, bool) and r >= 0:
                return r
        return None


__all__ = ["RankPlan"]
