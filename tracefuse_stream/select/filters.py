"""Which events a merge keeps.

Filters apply to every non-metadata event (``ph != "M"``); metadata is handled by
``labels`` (kept for processes that keep at least one event). The default drops
``python_function`` events, as TraceLens does, because with ``with_stack`` they are
often most of the file and rarely what a multi-rank view is for.

A filter's settings are recorded in the merged file's header (``to_header``) so that
``verify --against`` can re-apply exactly the same selection (``from_header``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Optional, Tuple

Event = Dict[str, Any]

PYFUNC_CAT = "python_function"


@dataclass
class EventFilter:
    """Selection of events by category, name, a user callback and a time window.

    ``window_ns`` is ``(start, end)`` in absolute epoch nanoseconds: an event is
    kept when ``[ts, ts + dur]`` intersects it (instants and flows: when ts is
    inside). ``fn`` (API only) sees the *original* event, before any rewrite.
    """

    include_pyfunc: bool = False
    keep_cat: Optional[FrozenSet[str]] = None
    drop_cat: FrozenSet[str] = field(default_factory=frozenset)
    name_regex: Optional[str] = None
    window_ns: Optional[Tuple[int, int]] = None
    fn: Optional[Callable[[Event], bool]] = None
    args: str = "all"  # --args all|slim|none: which event args are kept (rewrite/args.py)

    def __post_init__(self) -> None:
        if self.keep_cat is not None:
            self.keep_cat = frozenset(self.keep_cat)
        self.drop_cat = frozenset(self.drop_cat or ())
        self._name_re = re.compile(self.name_regex) if self.name_regex else None
        drop = set(self.drop_cat)
        if not self.include_pyfunc:
            drop.add(PYFUNC_CAT)
        self._drop = frozenset(drop)
        self._trivial = self.keep_cat is None and self._name_re is None and self.fn is None

    def keep(self, event: Event) -> bool:
        """True when ``event`` (a non-metadata event) passes the category, name and
        callback rules. The time window is checked separately (``in_window``)
        because it needs the rank's time shift."""
        cat = event.get("cat")
        if type(cat) is not str:
            cat = None  # a list or object is no category (and is unhashable)
        if cat in self._drop:
            return False
        if self._trivial:
            return True
        if self.keep_cat is not None and cat not in self.keep_cat:
            return False
        if self._name_re is not None:
            name = event.get("name")
            if not isinstance(name, str) or not self._name_re.search(name):
                return False
        if self.fn is not None and not self.fn(event):
            return False
        return True

    def dropped_categories(self) -> FrozenSet[str]:
        """Categories always dropped (python_function unless included, --drop-cat)."""
        return self._drop

    def only_drops_categories(self) -> bool:
        """True when ``keep`` reduces to "category not dropped" (the common case)."""
        return self._trivial

    def in_window(self, start_ns: int, dur_ns: int) -> bool:
        """True when the event ``[start, start + dur]`` (absolute ns) intersects the window."""
        if self.window_ns is None:
            return True
        lo, hi = self.window_ns
        return start_ns <= hi and start_ns + max(dur_ns, 0) >= lo

    def to_header(self) -> Dict[str, Any]:
        """JSON-safe description recorded in the merged trace's header."""
        out: Dict[str, Any] = {
            "include_pyfunc": self.include_pyfunc,
            "keep_cat": sorted(self.keep_cat) if self.keep_cat is not None else None,
            "drop_cat": sorted(self.drop_cat),
            "name_regex": self.name_regex,
            "window_ns": list(self.window_ns) if self.window_ns else None,
            "custom_filter_fn": self.fn is not None,
        }
        if self.args != "all":  # absent means all: headers of earlier merges (and golden bytes) stay
            out["args"] = self.args
        return out

    @classmethod
    def from_header(cls, h: Dict[str, Any]) -> EventFilter:
        """Rebuild the filter a merge used (a custom ``fn`` cannot be rebuilt)."""
        win = h.get("window_ns")
        keep = h.get("keep_cat")
        return cls(
            include_pyfunc=bool(h.get("include_pyfunc", False)),
            keep_cat=frozenset(keep) if keep is not None else None,
            drop_cat=frozenset(h.get("drop_cat") or ()),
            name_regex=h.get("name_regex"),
            window_ns=(int(win[0]), int(win[1])) if win else None,
            args=str(h["args"]) if h.get("args") in ("slim", "none") else "all",
        )
