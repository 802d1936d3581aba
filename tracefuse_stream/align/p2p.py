"""Point-to-point pairs: which gloo send met which recv, across ranks.

Why: a pipeline's stages wait for each other in send/recv, not in collectives. To
follow a delay from stage to stage (and re-time the step without it) each send has to
be linked to the recv that received it. Kineto writes no peer on gloo's ``gloo:send`` /
``gloo:recv`` annotations; with ``record_shapes=True`` the ``c10d::send`` /
``c10d::recv_`` op around each of them (on the calling thread) has its arguments as
``Concrete Inputs``: ``['', '', '<peer>', '<tag>']`` (tensors, process group, peer,
tag). Without shapes there is no peer, nothing is linked and the ops' time stays
plain waiting (align/collectives.py ``p2p_spans``), as before.

What is linked, and how (docs/collectives.md, "Point-to-point pairs"):

* each ``gloo:send`` / ``gloo:recv`` takes the peer and tag of the ``c10d::send`` /
  ``c10d::recv_`` of the same rank whose span holds its start;
* the peer is a rank of the op's process group (torch passes the group rank), and the
  op does not say which group: it is mapped to a global rank through
  ``distributedInfo.pg_config`` (the group's ranks in order). When the rank's groups
  give several global peers, only those with a matching op the other way (a recv from
  this rank with the same tag, on a group holding both) are kept; still several: the
  op is not linked (reason ``peer ambiguous``), never guessed;
* per step (each rank's own ``ProfilerStep#N``), the i-th send of rank a to b with tag
  t is linked to the i-th recv on b from a with tag t; where the counts differ, none
  of that (step, a, b, t) is linked. On one host a recv never ends before its send
  started: such a pair is refused (the order is off).
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple, Union

from tracefuse_stream.align.coalesced import attribute
from tracefuse_stream.read.events import decode_args
from tracefuse_stream.timeunits import analysable, us_to_ns_or_none

#: the c10d ops that carry the peer and tag (cpu_op on the calling thread) -> direction
P2P_CALLS = {"c10d::send": "send", "c10d::recv_": "recv"}
#: gloo's point-to-point annotations that can be linked -> direction
GLOO_P2P = {"gloo:send": "send", "gloo:recv": "recv"}
#: gloo's recv from any source: a point-to-point op without a peer
ANY_SOURCE = frozenset({"gloo:recvAnysource", "gloo:recv_anysource"})
SHAPES_HINT = "record with record_shapes=True to link send/recv"
NO_PEER = f"no peer recorded ({SHAPES_HINT})"
NO_KERNEL_PEER = "no peer recorded (the NCCL kernel has no Dst Rank / Src Rank / Rank)"
PgConfig = List[Tuple[str, Optional[Tuple[int, ...]]]]


class P2pCall(NamedTuple):
    """One ``c10d::send`` / ``c10d::recv_`` op (file-relative ns)."""

    op: str  # "send" | "recv"
    ts_ns: int
    end_ns: int
    peer: Optional[int]  # the peer's rank in the op's process group; None: not recorded
    tag: Optional[int]
    global_peer: bool = False  # ``peer`` is already a global rank (a NCCL kernel's own args)


def _int(v: Any) -> Optional[int]:
    if type(v) is int:
        return v
    if type(v) is str and v.strip().lstrip("-").isdigit() and len(v) < 20:
        return int(v)
    return None


def p2p_call(event: Dict[str, Any], base_ns: int = 0) -> Optional[P2pCall]:
    """The call of a ``c10d::send`` / ``c10d::recv_`` X event (None: not one, or no time)."""
    op = P2P_CALLS.get(event.get("name"))  # type: ignore[arg-type]
    ts, dur = us_to_ns_or_none(event.get("ts")), us_to_ns_or_none(event.get("dur"))
    if op is None or event.get("ph") != "X" or ts is None or dur is None or dur < 0:
        return None
    if not analysable(base_ns, ts, dur):
        return None
    args = decode_args(event)
    ci = args.get("Concrete Inputs") if isinstance(args, dict) else None
    peer = tag = None
    if isinstance(ci, list) and len(ci) >= 4:
        peer, tag = _int(ci[2]), _int(ci[3])
        if peer is None or tag is None or peer < 0:
            peer = tag = None
    return P2pCall(op, ts, ts + dur, peer, tag)


class Side(NamedTuple):
    """One rank's gloo send or recv, its times absolute and aligned."""

    rank: int
    op: str
    event: Any  # its align/collective_event.CollectiveEvent
    start_ns: int
    end_ns: int
    step: Optional[int]


class Pair(NamedTuple):
    src: int
    dst: int
    tag: int
    group: str  # the process group the peer was read in ("?": the rank's config unknown)
    send: Side
    recv: Side


@dataclass
class P2pResult:
    pairs: List[Pair] = field(default_factory=list)
    unlinked: Counter = field(default_factory=Counter)  # reason -> ops
    spans: Dict[int, List[Tuple[int, int]]] = field(default_factory=dict)  # rank -> unlinked spans


def _calls_for(scan: Any) -> List[Tuple[Side, Union[P2pCall, str, None], str]]:
    """Each point-to-point gloo op of ``scan`` with the call around it (None: no call;
    a recv from any source: op ``any``); each NCCL send/recv kernel with its peer, each
    op of a batched kernel (align/coalesced.py) timed as its kernel, or the batched
    kernel with why its ops are unknown (a str)."""
    calls: Dict[str, List[P2pCall]] = {"send": [], "recv": []}
    for c in sorted(scan.p2p_calls):
        calls[c.op].append(c)
    starts = {op: [c.ts_ns for c in cs] for op, cs in calls.items()}
    used: Set[Tuple[str, int]] = set()
    out: List[Tuple[Side, Union[P2pCall, str, None], str]] = []
    batched = [e for e in scan.events if e.nccl_p2p == "batched"]
    for e, ops in attribute(batched, scan.comms_calls, scan.coalesced, scan.plain_p2p_ids) if batched else ():
        end = e.ts_ns + e.dur_ns
        side = Side(scan.rank, "batched", e, e.ts_ns, end, _step_of(scan, e.ts_ns))
        if isinstance(ops, str):
            out.append((side, ops, "batched"))
            continue
        for way, peer, pg in ops:  # the batch's group, which its kernel does not name
            s = side._replace(op=way, event=e._replace(pg=pg))
            out.append((s, P2pCall(way, e.ts_ns, end, peer, 0, True), way))
    for e in scan.events:
        kernel_op = e.nccl_p2p
        if kernel_op == "batched":
            continue
        if kernel_op:  # a NCCL kernel: its own args name the peer
            end = e.ts_ns + e.dur_ns
            side = Side(scan.rank, kernel_op, e, e.ts_ns, end, _step_of(scan, e.ts_ns))
            out.append((side, P2pCall(kernel_op, e.ts_ns, end, e.key[3], 0, True), kernel_op))
            continue
        op = GLOO_P2P.get(e.name, "any" if e.name in ANY_SOURCE else None)
        if e.kind != "gloo" or op is None:
            continue
        k = bisect.bisect_right(starts[op], e.ts_ns) - 1 if op != "any" else -1
        call = calls[op][k] if k >= 0 and calls[op][k].end_ns >= e.ts_ns and (op, k) not in used else None
        if call is not None:
            used.add((op, k))
        out.append((Side(scan.rank, op, e, e.ts_ns, e.ts_ns + e.dur_ns, _step_of(scan, e.ts_ns)), call, op))
    return out


def _step_of(scan: Any, rel_ns: int) -> Optional[int]:
    for step, (lo, hi) in scan.steps.items():
        if lo <= rel_ns <= hi:
            return step
    return None


def _peers(rank: int, local: int, cfg: PgConfig) -> Dict[int, Tuple[str, ...]]:
    """global peer -> the groups (of ``rank``'s, in ``pg_config`` order) it is read in."""
    out: Dict[int, Tuple[str, ...]] = {}
    for name, ranks in cfg:
        if ranks is None:  # a group of every rank: its ranks are the global ones
            out[local] = out.get(local, ()) + (name,)
        elif rank in ranks and local < len(ranks):
            out[ranks[local]] = out.get(ranks[local], ()) + (name,)
    if not cfg:  # no pg_config: only the default group, whose ranks are the global ones
        out[local] = ("?",)
    out.pop(rank, None)
    return out


Op = Tuple[Side, Optional[P2pCall], str]
Linked = Tuple[Side, Tuple[str, ...]]  # the op from its call's start, and its peer's groups


def match_pairs(
    scans: Mapping[int, Any],
    cfgs: Mapping[int, PgConfig],
    hosts: Mapping[int, Optional[str]],
    offsets: Mapping[int, int],
) -> P2pResult:
    """Link every rank's gloo sends to their recvs (see the module docstring)."""
    res = P2pResult()
    ops: List[Op] = []
    for r in sorted(scans):
        at = scans[r].base_ns + offsets.get(r, 0)
        res.spans[r] = []
        for side, call, op in _calls_for(scans[r]):
            side = side._replace(start_ns=side.start_ns + at, end_ns=side.end_ns + at)
            if isinstance(call, str):  # a batched kernel whose ops are not known
                _unlink(res, side, call)
            else:
                ops.append((side, call, op))
    sends, recvs = _keyed(ops, cfgs, scans, res, offsets)
    for key in sorted(set(sends) | set(recvs), key=lambda k: (k[0] is None, k[0] or 0) + k[1:]):
        ss, rs = sends.get(key, []), recvs.get(key, [])
        if len(ss) != len(rs):
            for side, _g in ss + rs:
                _unlink(res, side, "send and recv counts differ in the step")
            continue
        ss.sort(key=lambda x: x[0].start_ns)
        rs.sort(key=lambda x: x[0].start_ns)
        for (s, gs), (rv, gr) in zip(ss, rs):
            if _same_host(s.rank, rv.rank, hosts) and rv.end_ns < s.start_ns:
                _unlink(res, s, "recv ends before its send starts (order off)")
                _unlink(res, rv, "recv ends before its send starts (order off)")
                continue
            group = next((g for g in gs if g in gr), gs[0])
            res.pairs.append(Pair(key[1], key[2], key[3], group, s, rv))
    for r in res.spans:
        res.spans[r].sort()
    return res


def _keyed(
    ops: Sequence[Op],
    cfgs: Mapping[int, PgConfig],
    scans: Mapping[int, Any],
    res: P2pResult,
    offsets: Mapping[int, int],
) -> Tuple[Dict[Tuple[Any, ...], List[Linked]], Dict[Tuple[Any, ...], List[Linked]]]:
    """The ops whose peer is known, by (step, sender, receiver, tag), each timed from the
    start of its c10d call (the data may leave before gloo's annotation starts) to the
    later of the two ends; the others go to ``res.unlinked``."""
    cands: List[Optional[Dict[int, Tuple[str, ...]]]] = []
    offered: Set[Tuple[int, str, int, int]] = set()  # (rank, op, tag, candidate peer)
    for side, call, _op in ops:
        c: Optional[Dict[int, Tuple[str, ...]]]
        if call is None or call.peer is None:
            c = None
        elif call.global_peer:
            c = {call.peer: (str(side.event.pg or "?"),)} if call.peer != side.rank else {}
        else:
            c = _peers(side.rank, call.peer, cfgs.get(side.rank, []))
        cands.append(c)
        for p in c or {}:
            offered.add((side.rank, side.op, call.tag, p))  # type: ignore[union-attr, arg-type]
    sends: Dict[Tuple[Any, ...], List[Linked]] = {}
    recvs: Dict[Tuple[Any, ...], List[Linked]] = {}
    for (side, call, op), c in zip(ops, cands):
        why = _resolve(side, call, c, offered, scans)
        if isinstance(why, str):
            _unlink(res, side, why)
            continue
        assert call is not None
        peer, groups = why
        at = scans[side.rank].base_ns + offsets.get(side.rank, 0)
        wide = side._replace(
            start_ns=min(side.start_ns, call.ts_ns + at), end_ns=max(side.end_ns, call.end_ns + at)
        )
        # a kernel runs when the GPU gets to it, which may be after its step's span on the
        # CPU: NCCL pairs are counted over the recording, not per step (a rank that recorded
        # one more step than its peer then links none of that pair of ranks: counts differ)
        step = None if call.global_peer else side.step
        key = (step, side.rank, peer, call.tag) if op == "send" else (step, peer, side.rank, call.tag)
        (sends if op == "send" else recvs).setdefault(key, []).append((wide, groups))
    return sends, recvs


def _resolve(
    side: Side,
    call: Optional[P2pCall],
    cands: Optional[Dict[int, Tuple[str, ...]]],
    offered: Set[Tuple[int, str, int, int]],
    scans: Mapping[int, Any],
) -> Any:
    """(global peer, its groups) of one op, or why it has none."""
    if side.op == "any":
        return "recv from any source (no peer)"
    if call is None:
        return "no c10d::send / c10d::recv_ op around it"
    if cands is None:
        return NO_KERNEL_PEER if call.global_peer else NO_PEER
    if not cands:
        return "peer not in any of the rank's process groups"
    other = "recv" if side.op == "send" else "send"
    if len(cands) > 1:  # keep the peers that have a matching op the other way
        cands = {p: g for p, g in cands.items() if (p, other, call.tag, side.rank) in offered}
        if len(cands) != 1:
            return "peer ambiguous (a group rank in several process groups)"
    peer, groups = next(iter(cands.items()))
    if peer not in scans:
        return "peer not among the merged ranks"
    return peer, groups


def link_notes(pairs: Sequence[Pair]) -> List[str]:
    """The report's notes on how the pairs were linked: gloo's by their c10d calls,
    NCCL's by their kernels' own args, batched ones through their nccl:coalesced."""
    n_batched = sum(1 for p in pairs if "batched" in (p.send.event.nccl_p2p, p.recv.event.nccl_p2p))
    n_gpu = sum(1 for p in pairs if p.send.event.kind == "gpu")
    notes = []
    if len(pairs) > n_gpu:
        notes.append(
            f"point-to-point: {len(pairs) - n_gpu} send/recv pair(s) linked by the peer and tag of their "
            "c10d::send / c10d::recv_ (recorded shapes): the i-th of each (step, sender, receiver, tag)"
        )
    if n_gpu > n_batched:
        notes.append(
            f"point-to-point: {n_gpu - n_batched} NCCL send/recv kernel pair(s) linked by the peer their args name "
            "(Dst Rank / Src Rank): the i-th send of a rank to another with the i-th recv there from it"
        )
    if n_batched:
        notes.append(
            f"point-to-point: {n_batched} batched NCCL send/recv pair(s) (batch_isend_irecv: one SendRecv "
            "kernel a batch) linked through the GPU nccl:coalesced annotation around the kernel, the CPU one "
            "with its External id and the send/recv record_param_comms before it on that thread"
        )
    return notes


def p2p_ops(scans: Mapping[int, Any]) -> Counter:
    """The point-to-point ops of every rank by name (gloo's annotations, NCCL's kernels by
    direction): not collectives, linked apart here."""
    out: Counter = Counter()
    for scan in scans.values():
        for e in scan.events:
            if e.kind == "gloo" and (e.name in GLOO_P2P or e.name in ANY_SOURCE):
                out[e.name] += 1
            elif e.nccl_p2p == "batched":
                out["NCCL batched send/recv kernel"] += 1
            elif e.nccl_p2p:
                out[f"NCCL {e.nccl_p2p} kernel"] += 1
    return out


def _unlink(res: P2pResult, side: Side, why: str) -> None:
    res.unlinked[why] += 1
    res.spans.setdefault(side.rank, []).append((side.start_ns, side.end_ns))


def _same_host(a: int, b: int, hosts: Mapping[int, Optional[str]]) -> bool:
    ha, hb = hosts.get(a), hosts.get(b)
    return ha is not None and ha == hb


__all__ = [
    "ANY_SOURCE",
    "GLOO_P2P",
    "NO_PEER",
    "SHAPES_HINT",
    "P2P_CALLS",
    "P2pCall",
    "P2pResult",
    "Pair",
    "Side",
    "link_notes",
    "match_pairs",
    "p2p_ops",
    "p2p_call",
]
