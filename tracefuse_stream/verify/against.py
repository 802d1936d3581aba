"""``verify --against``: the merged file holds exactly the kept events of its inputs.

Each input is matched to its rank through the header (``source``), read once with
the fast reader (:func:`tracefuse_stream.verify.passes.run_pass`) and reduced to a
per-rank multiset digest of ``(ph, cat, name, ts_ns, dur_ns, pid)`` after the merge's
own filter and window, with its mapped pid and its absolute time. Equal digests
prove the set; on a mismatch, further passes restricted to the differing buckets
name the missing and extra events (:func:`explain_mismatch`). The per-rank
``header`` and base time the merge recorded are compared with the input's
top-level keys too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Optional, Set

from tracefuse_stream.errors import ErrorKind, TraceFuseError
from tracefuse_stream.plan.planner import plan_file
from tracefuse_stream.plan.ranks import rank_from_name
from tracefuse_stream.rankset import compress_ranges
from tracefuse_stream.select.filters import EventFilter
from tracefuse_stream.select.spans import PROFILER_SPAN_CAT, is_profiler_span, span_fits
from tracefuse_stream.timeunits import us_to_ns_or_none
from tracefuse_stream.verify.digest import (
    NBUCKETS,
    Digest,
    EventTuple,
    event_tuple,
    hashable,
    pid_hashable,
    tuple_example,
    tuple_hashes,
)
from tracefuse_stream.verify.events import MergedChecker, rank_of_event
from tracefuse_stream.verify.header import header_ranks
from tracefuse_stream.verify.pairing import by_trailing_path, merged_from
from tracefuse_stream.verify.passes import run_pass
from tracefuse_stream.verify.report import Findings, short_json

#: at most this many input events are held (as hashes) when naming missing/extra events.
DETAIL_CAP = 1_000_000
#: at most this many missing/extra tuples are kept to pair them up as wrong time/pid.
PAIR_CAP = 10_000


@dataclass
class RankInput:
    """One ``--against`` input and what the header says the merge did with it."""

    rank: int
    path: str
    info: Dict[str, Any]
    shift_ns: int
    base_ns: int
    pidmap: Dict[Any, int]
    filt: EventFilter
    digest: Digest = field(default_factory=Digest)
    unmapped: int = 0
    events_in: int = 0

    @property
    def prefix(self) -> str:
        return "item" if self.info.get("layout") == "array" else "traceEvents.item"


def input_tuples(ctx: RankInput, batch: Iterable[Any], F: Optional[Findings]) -> Iterator[EventTuple]:
    """Canonical tuples of the kept non-metadata events of one input batch (with
    ``F``: also count the input's events and report pids missing from the pid map)."""
    keep = ctx.filt.keep
    in_window = ctx.filt.in_window
    windowed = ctx.filt.window_ns is not None
    window = ctx.filt.window_ns
    shift = ctx.shift_ns
    base = ctx.base_ns
    pidmap = ctx.pidmap
    count = F is not None
    to_ns = us_to_ns_or_none
    for ev in batch:
        if count:
            ctx.events_in += 1
        if type(ev) is not dict:
            continue
        ph = ev.get("ph")
        if ph == "M":
            continue
        if not keep(ev):
            continue
        ts: Any = ev.get("ts")
        ts_ns = ts * 1000 if type(ts) is int else to_ns(ts)
        dur: Any = ev.get("dur")
        dur_ns = None if dur is None else dur * 1000 if type(dur) is int else to_ns(dur)
        if windowed:
            # as the merge does: absolute start = the rank's base (+ alignment) + ts,
            # extent only for complete events, events without ts dropped, and Kineto's
            # profiler span dropped when it reaches outside the window (select/spans.py)
            if ts_ns is None or not in_window(base + ts_ns, (dur_ns or 0) if ph == "X" else 0):
                continue
            if (
                ev.get("cat") == PROFILER_SPAN_CAT
                and is_profiler_span(ph, "Trace", ev.get("name"), ev.get("pid"))
                and window is not None
                and not span_fits(base + ts_ns, dur_ns or 0, window)
            ):
                continue
        pid = pid_hashable(ev.get("pid"))
        out_pid = pidmap.get(pid)
        if out_pid is None and F is not None:
            ctx.unmapped += 1
            F.add("pid_map_mismatch", ctx.rank, {"pid": pid, "name": ev.get("name")},
                  message="input pid of a kept event is missing from the header's pid map")  # fmt: skip
        yield (
            ph,
            ev.get("cat"),
            ev.get("name"),
            ts_ns + shift if ts_ns is not None else None,
            dur_ns,
            out_pid,
        )


def match_inputs(v: MergedChecker, tf: Dict[str, Any]) -> List[RankInput]:
    """The ``--against`` inputs paired with their ranks as the merge identified them: by
    the ``source`` its header records for each rank (whatever numbered the rank:
    distributedInfo, the name, the position, ``--ranks``), else -- copies elsewhere --
    by the longest trailing part of that path the input shares, when one rank's source
    alone shares it (``rank3/trace.json``, or just the name). Unmatched inputs are
    findings that name what the merge read."""
    F = v.F
    by_path: Dict[str, List[int]] = {}
    sources: Dict[int, str] = {}
    infos: Dict[int, Dict[str, Any]] = {}
    for rank, info in header_ranks(tf):
        infos[rank] = info
        src = info.get("source")
        if isinstance(src, str):
            by_path.setdefault(os.path.realpath(src), []).append(rank)
            sources[rank] = src
    fh = tf.get("filters")
    filt = EventFilter.from_header(fh) if isinstance(fh, dict) else EventFilter()
    if isinstance(fh, dict) and fh.get("custom_filter_fn"):
        F.add(
            "against_skipped",
            None,
            message="the merge used a custom filter function; kept events cannot be recomputed",
        )
        return []
    base = tf.get("base_time_ns") or 0
    ctxs: List[RankInput] = []
    used: Dict[int, str] = {}
    unmatched: List[str] = []
    for p in v.against:
        # one file may be the source of several ranks (e.g. --rank-from order over
        # the same file twice): take its ranks in order
        cand = [x for x in by_path.get(os.path.realpath(p), []) if x not in used]
        if not cand:
            cand = by_trailing_path(p, sources)
        r = cand[0] if cand else None
        if r is None:
            unmatched.append(p)
            continue
        if r in used:
            F.add("against_unmatched", r, {"input": p, "already": used[r]},
                  message="two --against inputs match the same rank")  # fmt: skip
            continue
        used[r] = p
        info = infos[r]
        pidmap: Dict[Any, int] = {}
        for pair in info.get("pids") or []:
            if isinstance(pair, list) and len(pair) == 2:
                pidmap[pid_hashable(pair[0])] = pair[1]
        shift: Any = info.get("shift_ns")
        if type(shift) is not int:
            shift = (info.get("base_time_ns") or 0) - base
        # the rank's absolute base including any alignment: B + shift_ns
        ctxs.append(RankInput(r, p, info, shift, base + shift, pidmap, filt))
    by_order = bool(infos) and all(i.get("rank_from") == "order" for i in infos.values())
    if by_order and unmatched and any(v.against.index(c.path) != c.rank for c in ctxs):
        # a rank is a position in the merge's inputs: this order tells no left-out file's rank
        F.add("against_order", None, {"inputs": unmatched[:4], "merged_from": merged_from(sources)},
              message="the merge numbered its inputs by position (--rank-from order) and --against lists them in another order: pass its inputs in the merge's order, or only the merged ranks' files (merged_from)")  # fmt: skip
        unmatched = []
    for p in unmatched:
        why = left_out_by_selection(p, v.against, tf, infos, [c.path for c in ctxs])
        if why is None:
            F.add("against_unmatched", None, {"input": p, "merged_from": merged_from(sources)},
                  message="--against input is not the source of any rank in the header: pass the files the merge read (merged_from), or copies under the same names")  # fmt: skip
        else:
            F.add("against_left_out", None, {"input": p, "why": why},
                  message="--against inputs the merge left out by its selection (--ranks, --split-ranks, --cycle): not compared")  # fmt: skip
    return ctxs


def left_out_by_selection(
    path: str, inputs: List[str], tf: Dict[str, Any], infos: Dict[int, Dict[str, Any]], matched: List[str]
) -> Optional[str]:
    """Why the merge left ``path`` out, by the selection its header records, or None
    (then ``path`` is simply not an input of this merge: an error).

    Only files beside a matched input count (another folder is another run), with a
    rank the planner's own rules give (``distributedInfo``, file name, or the position
    when the merge numbered by position): a rank outside ``ranks_merged`` was left out
    by ``--ranks`` (or is in another part of ``--split-ranks``); a merged rank whose
    recorded source is another file of its ``cycle`` is another profiling cycle.
    """
    folders = {os.path.dirname(os.path.realpath(m)) for m in matched}
    if os.path.dirname(os.path.realpath(path)) not in folders:
        return None
    rank = input_rank(path, inputs, infos)
    merged = tf.get("ranks_merged")
    if rank is None or not isinstance(merged, list):
        return None
    if rank not in merged:
        split = " (or in another file of --split-ranks)" if tf.get("split") else ""
        return f"rank {rank}: not among the merged ranks {compress_ranges(merged)}{split}"
    info = infos.get(rank) or {}
    src, cycle = info.get("source"), info.get("cycle")
    if cycle is not None and isinstance(src, str) and os.path.realpath(src) != os.path.realpath(path):
        return f"rank {rank}: another profiling cycle (the merge took cycle {cycle}: {src})"
    return None


def input_rank(path: str, inputs: List[str], infos: Dict[int, Dict[str, Any]]) -> Optional[int]:
    """The rank the merge's planner would give ``path`` (None when it cannot tell)."""

    if infos and all(i.get("rank_from") == "order" for i in infos.values()):
        return inputs.index(path)  # numbered by position: the same inputs, the same order
    try:
        plan = plan_file(path, 0)
    except TraceFuseError:
        return None
    r = plan.dist_rank
    return r if r is not None else rank_from_name(path)


def check_against(v: MergedChecker, tf: Dict[str, Any]) -> None:
    F = v.F
    ctxs = match_inputs(v, tf)
    bad: Dict[int, List[int]] = {}
    for ctx in ctxs:
        st = v.rank_stats(ctx.rank)
        st["against_input"] = ctx.path  # which input this rank was compared with

        def handle(batch: Iterable[Any], ctx: RankInput = ctx) -> None:
            d = ctx.digest
            for t in input_tuples(ctx, batch, F):
                d.add(*tuple_hashes(t))

        array = ctx.prefix == "item"
        res = run_pass(ctx.path, handle, prefix=ctx.prefix)
        if res.error is not None and array and res.error_kind is ErrorKind.TRUNCATED:
            res.error = None  # Chrome's array form may end without its closing bracket
        if res.error is not None:
            salv = ctx.info.get("salvage")
            off, problem = res.error
            note = "; the merge salvaged it, events not compared" if salv else "; events not compared"
            F.add("against_input_invalid", ctx.rank, {"input": ctx.path, "offset": off},
                  level="warning" if salv else "error",
                  message=f"{ctx.path}: not valid JSON at byte {off} ({problem}){note}")  # fmt: skip
            st["against"] = "input invalid"
            continue
        # per-rank header: the input's top-level keys except traceEvents
        top, complete, _ = res.top_level()
        hdr = ctx.info.get("header")
        if isinstance(hdr, dict):
            compare_header(F, ctx, top, complete, hdr)
        ib = top.get("baseTimeNanoseconds")
        if (ctx.info.get("base_time_ns") or 0) != (ib or 0) and (complete or "baseTimeNanoseconds" in top):
            F.add("header_mismatch", ctx.rank, {"input_base": ib, "header_base_time_ns": ctx.info.get("base_time_ns")},
                  message="the rank's base_time_ns differs from the input's baseTimeNanoseconds: absolute times moved")  # fmt: skip
        ein = ctx.info.get("events_in")
        if type(ein) is int and ein != ctx.events_in:
            F.add("header_mismatch", ctx.rank, {"events_in": ein, "input_events": ctx.events_in},
                  message="header events_in differs from the input's event count")  # fmt: skip
        out_d = v.digests.get(ctx.rank) or Digest()
        diff = out_d.diff_buckets(ctx.digest)
        if not diff:
            st["against"] = f"ok ({ctx.digest.total():,})"
            continue
        bad[ctx.rank] = diff
        st["against"] = "MISMATCH"
    if bad:
        explain_mismatch(v, [c for c in ctxs if c.rank in bad], bad)


def compare_header(
    F: Findings, ctx: RankInput, top: Dict[str, Any], complete: bool, hdr: Dict[str, Any]
) -> None:
    diffs = []
    for k in sorted(set(hdr) | set(top)):
        if k == "traceEvents":
            continue
        if k not in top:
            if complete:
                diffs.append({"key": k, "problem": "in header, not in input"})
        elif k not in hdr:
            diffs.append({"key": k, "problem": "in input, not in header"})
        elif not same_value(top[k], hdr[k]):
            diffs.append({"key": k, "problem": "values differ", "input": short_json(top[k], 80),
                          "header": short_json(hdr[k], 80)})  # fmt: skip
    for d in diffs:
        F.add(
            "header_mismatch",
            ctx.rank,
            d,
            message="the rank's recorded header differs from the input's top-level keys",
        )
    if not complete:
        F.add("against_skipped", ctx.rank, {"input": ctx.path},
              message="could not recover all top-level keys of the input; header compared partially")  # fmt: skip


def same_value(a: Any, b: Any) -> bool:
    """JSON equality where a float equals the same number in another type."""
    if type(a) is float or type(b) is float:
        try:
            return float(a) == float(b)
        except (TypeError, ValueError):
            return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _choose_buckets(
    v: MergedChecker, ctxs: List[RankInput], bad: Dict[int, List[int]]
) -> Dict[int, Set[int]]:
    """Per rank, the differing buckets small enough to examine event by event; the
    others are reported by count only."""
    F = v.F
    chosen: Dict[int, Set[int]] = {}
    for ctx in ctxs:
        out_d = v.digests.get(ctx.rank) or Digest()
        buckets = sorted(bad[ctx.rank], key=lambda b: ctx.digest.n[b])
        take: Set[int] = set()
        total = 0
        for b in buckets:
            if take and total + ctx.digest.n[b] > DETAIL_CAP // max(1, len(ctxs)):
                break
            take.add(b)
            total += ctx.digest.n[b]
        chosen[ctx.rank] = take
        missing = extra = 0
        for b in bad[ctx.rank]:
            if b in take:
                continue
            dn = out_d.n[b] - ctx.digest.n[b]
            if dn > 0:
                extra += dn
            elif dn < 0:
                missing -= dn
            else:
                missing += 1
                extra += 1
        if missing:
            F.add(
                "missing_event",
                ctx.rank,
                count=missing,
                message="kept input events missing from the merged file",
            )
        if extra:
            F.add(
                "extra_event",
                ctx.rank,
                count=extra,
                message="merged events that no kept input event accounts for",
            )
    return chosen


def explain_mismatch(v: MergedChecker, ctxs: List[RankInput], bad: Dict[int, List[int]]) -> None:
    """Name the missing and extra events of the differing buckets.

    Pass 1 (inputs): count the hashes of the input tuples in the chosen buckets.
    Pass 2 (merged file): consume them; output tuples left over are extra events.
    Pass 3 (inputs): hashes still counted are missing events.
    Memory: at most ``DETAIL_CAP`` hashes; buckets beyond it are reported by count only.
    """
    F = v.F
    chosen = _choose_buckets(v, ctxs, bad)
    counts: Dict[int, Dict[int, int]] = {c.rank: {} for c in ctxs}
    for ctx in ctxs:

        def count_inputs(batch: Iterable[Any], ctx: RankInput = ctx) -> None:
            cnt, take = counts[ctx.rank], chosen[ctx.rank]
            for t in input_tuples(ctx, batch, None):
                h = tuple_hashes(t)[0]
                if h % NBUCKETS in take:
                    cnt[h] = cnt.get(h, 0) + 1

        run_pass(ctx.path, count_inputs, capture=False, prefix=ctx.prefix)

    extras: Dict[int, List[EventTuple]] = {c.rank: [] for c in ctxs}

    def consume_merged(batch: Iterable[Any]) -> None:
        for ev in batch:
            if type(ev) is not dict or ev.get("ph") == "M":
                continue
            r = rank_of_event(ev)
            cnt = counts.get(r) if r is not None else None
            if cnt is None or r is None:
                continue
            t = event_tuple(ev, hashable(ev.get("pid")))
            h = tuple_hashes(t)[0]
            if h % NBUCKETS not in chosen[r]:
                continue
            c = cnt.get(h, 0)
            if c > 0:
                cnt[h] = c - 1
            else:
                if len(extras[r]) < PAIR_CAP:
                    extras[r].append(t)
                F.add(
                    "extra_event",
                    r,
                    tuple_example(t),
                    message="merged events that no kept input event accounts for",
                )

    run_pass(v.path, consume_merged, capture=False)

    for ctx in ctxs:
        cnt = counts[ctx.rank]
        if not any(c > 0 for c in cnt.values()):
            continue
        missing: List[EventTuple] = []

        def find_missing(
            batch: Iterable[Any],
            ctx: RankInput = ctx,
            cnt: Dict[int, int] = cnt,
            missing: List[EventTuple] = missing,
        ) -> None:
            for t in input_tuples(ctx, batch, None):
                h = tuple_hashes(t)[0]
                c = cnt.get(h, 0)
                if c > 0:
                    cnt[h] = c - 1
                    if len(missing) < PAIR_CAP:
                        missing.append(t)
                    F.add(
                        "missing_event",
                        ctx.rank,
                        tuple_example(t),
                        message="kept input events missing from the merged file",
                    )

        run_pass(ctx.path, find_missing, capture=False, prefix=ctx.prefix)
        _pair_up(F, ctx.rank, missing, extras[ctx.rank])


def _pair_up(F: Findings, rank: int, missing: List[EventTuple], extras: List[EventTuple]) -> None:
    """A missing event that matches an extra one but for its time (or pid) is the same
    event moved (or given another pid)."""
    by_key: Dict[tuple, EventTuple] = {}
    for t in extras:
        by_key.setdefault((t[0], t[1], hashable(t[2]), t[4], t[5]), t)
        by_key.setdefault(("pid", t[0], t[1], hashable(t[2]), t[3], t[4]), t)
    for t in missing:
        e = by_key.get((t[0], t[1], hashable(t[2]), t[4], t[5]))
        if e is not None:
            off = (e[3] - t[3]) if e[3] is not None and t[3] is not None else None
            F.add("wrong_time", rank, {"ph": t[0], "cat": t[1], "name": t[2], "pid": t[5],
                                       "expected_ts_ns": t[3], "found_ts_ns": e[3], "off_by_ns": off},
                  message="event present with a different time")  # fmt: skip
            continue
        e = by_key.get(("pid", t[0], t[1], hashable(t[2]), t[3], t[4]))
        if e is not None:
            F.add("pid_map_mismatch", rank, {"name": t[2], "ts_ns": t[3], "expected_pid": t[5], "found_pid": e[5]},
                  message="event present with a pid other than the header's pid map gives")  # fmt: skip


__all__ = [
    "RankInput",
    "check_against",
    "left_out_by_selection",
    "compare_header",
    "explain_mismatch",
    "input_tuples",
    "match_inputs",
]
