"""The C rewrite kernel's Python side: when it may run, and the rank context it reads.

The kernel (``tracefuse_stream/_kernel.c``, see :mod:`tracefuse_stream.native`) applies
:class:`~tracefuse_stream.rewrite.rules.RankRewriter`'s straight line to the JSON text
itself, so a merge builds no Python object per event. It is a backend in the sense of
ijson's: the same output, byte for byte, or a hand-back. Every event it cannot write
exactly as the Python path would (metadata, a new pid, odd tids or ids, escapes, exotic
numbers, ...) comes back to the reader as decoded events for ``feed_batch``; the header
of ``_kernel.c`` has the list.

It runs only where the Python rules are the straight line: filters that only drop
categories (and the ``--window``/``--steps`` window), no collective links (they read
events), the strict batched reader (salvage and the exact reader keep their own loops).
``TRACEFUSE_KERNEL=0`` turns it off (the tests compare both paths).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, FrozenSet, Optional, Tuple

from tracefuse_stream import native
from tracefuse_stream.rewrite.rules import RankRewriter

#: the reader's names for the kernel's stops (see read/batches.EventBatches.mixed)
_STATUS = {0: "more", 1: "end", 2: "fallback"}
_NANO = Decimal(10) ** -9


class _Context:
    """What ``_kernel.c`` reads of a rank (attribute names are its interface)."""

    def __init__(self, rw: RankRewriter) -> None:
        self.rank = rw.rank
        self.id_off = rw.id_off
        self.shifting = rw._shifting
        self.shift_ns = rw.shift.shift_ns
        # the shift in microseconds as coefficient * 10**exponent, the exponent being
        # the one Decimal gives shift_ns / 1000 (so sums get Decimal's exponent)
        exp = int(rw.shift._dshift.as_tuple().exponent) if self.shifting else 0
        self.shift_exp = exp
        self.shift_coef = self.shift_ns // 10 ** (3 + exp) if self.shifting else 0
        self.pids = rw.pids
        self.first_ts = rw.pid_first_ts
        self.gpu_like = rw.pid_gpu_like
        self.tids_seen = rw.tids_seen  # threads written (the kernel adds its own)
        self.neg_tids = rw.neg_tids  # threads made from negative tids (Python's)
        flt = rw.filter  # the merge's one selection object, read as it is
        self.drop_cats: FrozenSet[Any] = frozenset(flt.dropped_categories())
        self.keep_args: Optional[FrozenSet[str]] = rw.keep_args
        self.decimal = Decimal
        # --window/--steps: the filter's absolute ns window, on the unshifted ts
        self.window = flt.window_ns is not None
        self.abs_base_ns = rw.abs_base_ns  # the window, and ts beyond any clock once based
        lo, hi = flt.window_ns if flt.window_ns is not None else (0, 0)
        self.win_lo, self.win_hi = lo, hi


class KernelRewriter:
    """``rewrite_raw`` for :meth:`EventBatches.mixed`: one kernel call, and the rank's
    counters kept as ``feed_batch`` keeps them."""

    def __init__(self, rw: RankRewriter) -> None:
        self.rw = rw
        self.ctx = _Context(rw)

    def __call__(
        self, buf: bytearray, pos: int, need_sep: bool, at_start: bool
    ) -> Tuple[bytes, int, str, int, bool]:
        out, pos, status, skip_to, need_sep, n_in, n_drop, n_out, lo, hi = native.kernel.rewrite(  # type: ignore[union-attr]
            self.ctx, buf, pos, need_sep, at_start
        )
        rw = self.rw
        rw.index += n_in
        rw.dropped += n_drop
        rw.events_out += n_out
        if lo is not None:  # the span of the events it wrote, in 1e-9 us (rules.RankRewriter.span_lo)
            lo, hi = Decimal(lo) * _NANO, Decimal(hi) * _NANO
            if rw.span_lo is None or lo < rw.span_lo:
                rw.span_lo = lo
            if rw.span_hi is None or hi > rw.span_hi:
                rw.span_hi = hi
        return out, pos, _STATUS[status], skip_to, bool(need_sep)


def kernel_for(rw: RankRewriter) -> Optional[KernelRewriter]:
    """The kernel for this rank's rules, or ``None`` where the Python path must run."""
    if not native.available():
        return None
    if not rw.filter.only_drops_categories():
        return None
    int64 = 2**63
    if not -int64 < rw.abs_base_ns < int64:
        return None
    if rw.filter.window_ns is not None:
        lo, hi = rw.filter.window_ns
        if not all(-int64 < v < int64 for v in (lo, hi)):
            return None
    if not all(type(c) is str for c in rw.filter.dropped_categories()):
        return None
    if not -(10**18) < rw.shift.shift_ns < 10**18:
        return None  # beyond the margin of the kernel's exact 128-bit arithmetic
    return KernelRewriter(rw)


__all__ = ["KernelRewriter", "kernel_for"]
