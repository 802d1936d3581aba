"""Side passes on the compiled kernel: every event counted and timed in C, only the
events a pass asks for decoded in Python.

``--window`` (the merged trace's first event), ``info``, ``--steps`` (the
``ProfilerStep#N`` table) and ``--align collectives`` (the NCCL kernels) each read every
event of a rank but use few: their Python loops decoded and looked at every event, which
cost as much as the merge itself. With a :class:`ScanSelection`, the kernel's ``scan`` reads
the text, hands the selected events (and any it cannot judge: escapes, odd numbers,
duplicate keys, non-objects) to the pass as usual, and keeps a :class:`Tally` of the
others: how many, and the first ``ts`` and last ``ts + dur`` of the timed ones among
them, exactly. A pass adds the tally to what its own loop found; without the kernel the
tally stays empty and the loop sees every event, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Optional, Tuple, Union

from tracefuse_stream import native

_STATUS = {0: "more", 1: "end", 2: "fallback"}
_NANO = Decimal(10) ** -9


@dataclass(frozen=True)
class ScanSelection:
    """Which events a pass needs as events: those with all of the given ``ph``, ``cat``
    and ``name`` prefix (none given: no event), and, when ``name_contains`` or
    ``text_contains`` is given, a name holding one of ``name_contains`` or an event
    text holding ``text_contains``. A superset is fine (the pass checks again), a miss
    is not: anything the kernel cannot judge exactly (escapes) is selected.
    ``extremes``: time the others. ``validate=False``: the pass's input is validated
    by the merge right after (a strict merge fails on invalid JSON whatever the pass
    found), or the pass reports facts, not a file's validity (``info``), so the kernel
    only delimits the events (the skim in ``_kernel.c``), several times faster; with
    ``extremes``, the walk: each event's top level read token by token (``ts`` and
    ``dur`` exactly), what is nested only delimited.

    ``name_contains_cats``: for each of ``name_contains``, the category of the events
    whose names it is looked for in (None: any); ``text_contains_cat``: the same for
    ``text_contains``. info's pass names its needles' categories (a NCCL kernel, a gloo
    annotation) so that the events around them it has no use for (the profiler's
    ``nccl:*`` annotations, ``record_param_comms``) stay in the kernel."""

    ph: Optional[str] = None
    cat: Union[None, str, Tuple[str, ...]] = None  # a tuple: any of these categories
    name_prefix: Optional[str] = None
    name_contains: Tuple[str, ...] = ()
    text_contains: Optional[str] = None
    extremes: bool = False
    validate: bool = True
    name_contains_cats: Tuple[Optional[str], ...] = ()  # () or one for each of name_contains
    text_contains_cat: Optional[str] = None

    def __post_init__(self) -> None:
        if self.name_contains_cats and len(self.name_contains_cats) != len(self.name_contains):
            raise ValueError("ScanSelection: name_contains_cats has one category (or None) per name_contains")


class Tally:
    """The events the kernel judged without handing them over (see module docstring).
    Times are exact microsecond values (ints or Decimals, as the readers give them).
    ``timeline``: a compiled ``Timeline`` (analyze/timeline.py) the walk records the
    operator, annotation and kernel events it judges into (only with the walk:
    ``extremes`` and not ``validate``); every event it cannot record is handed over."""

    def __init__(self, timeline: Any = None) -> None:
        self.timeline = timeline
        self.events = 0
        self._lo: Optional[int] = None  # in 1e-9 us
        self._hi: Optional[int] = None

    def add(self, events: int, lo: Optional[int], hi: Optional[int]) -> None:
        self.events += events
        if lo is not None and (self._lo is None or lo < self._lo):
            self._lo = lo
        if hi is not None and (self._hi is None or hi > self._hi):
            self._hi = hi

    @staticmethod
    def _us(v: Optional[int]) -> Optional[Decimal]:
        return None if v is None else Decimal(v) * _NANO

    @property
    def first_us(self) -> Optional[Decimal]:
        """The smallest ``ts`` of the timed events (``None``: none)."""
        return self._us(self._lo)

    @property
    def last_us(self) -> Optional[Decimal]:
        """The largest ``ts + dur`` (``dur`` counted when positive)."""
        return self._us(self._hi)


class _Args:
    """What ``_kernel.scan`` reads (bytes, the text as written in the file)."""

    def __init__(self, sel: ScanSelection) -> None:
        self.ph = None if sel.ph is None else sel.ph.encode()
        self.cat: Any = (
            None
            if sel.cat is None
            else tuple(c.encode() for c in sel.cat)
            if isinstance(sel.cat, tuple)
            else sel.cat.encode()
        )
        self.name_prefix = None if sel.name_prefix is None else sel.name_prefix.encode()
        self.name_contains = tuple(n.encode() for n in sel.name_contains) if sel.name_contains else None
        self.text_contains = None if sel.text_contains is None else sel.text_contains.encode()
        self.name_cats = (
            tuple(None if c is None else c.encode() for c in sel.name_contains_cats)
            if sel.name_contains_cats
            else None
        )
        self.text_cat = None if sel.text_contains_cat is None else sel.text_contains_cat.encode()
        self.extremes = sel.extremes
        self.validate = sel.validate


class KernelScan:
    """The raw rewriter for :meth:`EventBatches.mixed` with ``decode_out``."""

    def __init__(self, selection: ScanSelection, tally: Tally) -> None:
        self._args = _Args(selection)
        self.tally = tally

    def __call__(
        self, buf: bytearray, pos: int, need_sep: bool, at_start: bool
    ) -> Tuple[bytes, int, str, int, bool]:
        out, pos, status, skip_to, need_sep, n, lo, hi = native.kernel.scan(  # type: ignore[union-attr]
            self._args, buf, pos, need_sep, at_start, self.tally.timeline
        )
        self.tally.add(n, lo, hi)
        return out, pos, _STATUS[status], skip_to, bool(need_sep)


def kernel_scan(selection: Optional[ScanSelection], tally: Optional[Tally]) -> Optional[KernelScan]:
    """The kernel scan for a pass, or ``None`` (no selection, or no kernel here)."""
    if selection is None or tally is None or not native.available():
        return None
    if tally.timeline is not None and (
        not isinstance(tally.timeline, native.kernel.Timeline)  # type: ignore[union-attr]
        or not selection.extremes
        or selection.validate
    ):
        return None  # a Python timeline, or a scan that does not walk: every event goes through Python
    return KernelScan(selection, tally)


__all__ = ["KernelScan", "ScanSelection", "Tally", "kernel_scan"]
