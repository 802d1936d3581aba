"""One collective event of one rank, as the collective scan keeps it (align/collectives.py).

Why apart: what an event *is* (kind, match key, participants, sizes, its step) is read
here once per event; matching events across ranks is align/collectives.py's job.
"""

from __future__ import annotations

from typing import Any, Dict, Hashable, NamedTuple, Optional, Tuple

from tracefuse_stream.align.clock import _seq_value, _stream_of
from tracefuse_stream.align.ends import p2p_kernel_op
from tracefuse_stream.align.pg_config import ranks_arg
from tracefuse_stream.select.window import step_number
from tracefuse_stream.timeunits import analysable, us_to_ns_or_none

STEP_PREFIX = "ProfilerStep#"
Key = Tuple[Hashable, ...]


class CollectiveEvent(NamedTuple):
    """One collective event of one rank (file-relative ns; absolute = base + these)."""

    pos: int  # position in the file's event array: how the merge finds it again (-1: unknown)
    kind: str  # "gpu" or "gloo"
    name: str
    ts_ns: int  # the event's own ts in ns (relative to the file's base)
    dur_ns: int
    tid: Any
    key: Key  # match key without the occurrence index (seq keys are complete)
    pg: Optional[str]
    ranks: Optional[Tuple[int, ...]]  # participants named by the event itself
    signature: Optional[str]  # gloo: shapes, when recorded
    kept: bool  # survives the merge's filters and window
    size: Optional[Tuple[Any, Any, Any, Any]] = None  # (In msg nelems, Out msg nelems, dtype, Group size)

    @property
    def nccl_p2p(self) -> Optional[str]:
        """``"send"`` / ``"recv"`` for a NCCL point-to-point kernel (keyed ``("p2p", group,
        op, peer)``: linked as a pair, align/p2p.py), ``"batched"`` for a batch's one
        SendRecv kernel (its ops: align/coalesced.py), else None."""
        return self.key[2] if self.kind == "gpu" and self.key[0] == "p2p" else None  # type: ignore[return-value]


class Entry(NamedTuple):
    """One rank's part of a collective instance (absolute, aligned ns)."""

    event: CollectiveEvent
    start_ns: int  # absolute, aligned
    end_ns: int
    participants: Optional[Tuple[int, ...]]


def _plain(v: Any) -> Any:
    """A size arg as a plain value (an int, a short string) or None."""
    if type(v) is int or (type(v) is str and len(v) <= 32):
        return v
    return None


def _describe(event: Dict[str, Any], index: int, kept: bool, base_ns: int = 0) -> Optional[CollectiveEvent]:
    ts, dur = us_to_ns_or_none(event.get("ts")), us_to_ns_or_none(event.get("dur"))
    if ts is None or dur is None or dur < 0 or event.get("ph") != "X" or not analysable(base_ns, ts, dur):
        return None
    args = event.get("args")
    args = args if isinstance(args, dict) else {}
    name = str(event.get("name"))
    if event.get("cat") == "kernel":
        pg = args.get("Process Group Name")
        pg_s = None if pg is None else str(pg)
        seq = _seq_value(args)
        coll = args.get("Collective name")
        op = p2p_kernel_op(event)
        if op == "batched":  # a batch_isend_irecv's one kernel: its ops found by align/coalesced.py
            key: Key = ("p2p", pg_s or "", op, None)
        elif op is not None:  # a NCCL send/recv: linked by its peer, never matched as a collective
            key = ("p2p", pg_s or "", op, p2p_peer(args, op))
        elif seq is not None:
            key = ("seq", pg_s or "", str(coll) if coll is not None else name, seq)
        else:
            key = ("order", pg_s or "", name, _stream_of(event, args))
        ranks = ranks_arg(args.get("Process Group Ranks"))
        size = tuple(_plain(args.get(k)) for k in ("In msg nelems", "Out msg nelems", "dtype", "Group size"))
        return CollectiveEvent(
            index, "gpu", name, ts, dur, event.get("tid"), key, pg_s, ranks, None, kept,
            size if any(v is not None for v in size) else None,
        )  # fmt: skip
    shapes = [args.get(k) for k in ("Input Dims", "Input type") if k in args]
    sig = repr(shapes) if shapes else None
    return CollectiveEvent(index, "gloo", name, ts, dur, event.get("tid"), (), None, None, sig, kept)


def _rank_value(v: Any) -> Optional[int]:
    if type(v) is int and v >= 0:
        return v
    if type(v) is str and 0 < len(v) < 20 and v.isascii() and v.isdigit():
        return int(v)
    return None


def p2p_peer(args: Dict[str, Any], op: str) -> Optional[int]:
    """The global rank a NCCL send goes to / a recv comes from: ``Dst Rank`` / ``Src
    Rank`` (PyTorch writes the global rank there), else ``Rank`` -- for a send/recv the
    *peer's* rank in the group -- through the group's ``Process Group Ranks`` (torch
    orders a group's ranks as it numbers them); None when neither is written."""
    peer = _rank_value(args.get("Dst Rank" if op == "send" else "Src Rank"))
    if peer is not None:
        return peer
    local, ranks = _rank_value(args.get("Rank")), ranks_arg(args.get("Process Group Ranks"))
    if local is None or ranks is None or local >= len(ranks):
        return None
    return ranks[local]


def _step_of(event: Dict[str, Any], base_ns: int = 0) -> Optional[Tuple[int, int, int]]:
    """(step, ts_ns, end_ns) of a ``ProfilerStep#N`` X event, else None."""
    name = event.get("name")
    if event.get("ph") != "X" or not isinstance(name, str) or not name.startswith(STEP_PREFIX):
        return None
    step = step_number(name)
    raw_dur = event.get("dur")
    ts, dur = us_to_ns_or_none(event.get("ts")), 0 if raw_dur is None else us_to_ns_or_none(raw_dur)
    if step is None or ts is None or dur is None or not analysable(base_ns, ts, dur):
        return None  # beyond any clock (1e400): the merge refuses such a time (timeunits)
    return step, ts, ts + max(dur, 0)


__all__ = ["CollectiveEvent", "Entry", "Key", "STEP_PREFIX"]
