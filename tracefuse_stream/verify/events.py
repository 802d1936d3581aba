"""Per-event checks of the merged file: pids, tids, process names, sort indexes, flows.

One :class:`MergedChecker` consumes the merged file's events in file order (batch by
batch, from :func:`tracefuse_stream.verify.passes.run_pass`) and keeps only small
tables: per process, per thread, per flow key and per name, never per event. X
events become fixed-size records for the overlap sort; with ``--against`` every
non-metadata event also goes into its rank's digest.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Dict, Iterable, List, Optional, Sequence

from tracefuse_stream.align.links import is_collective_link
from tracefuse_stream.report.step_counters import is_step_counter
from tracefuse_stream.report.summary_track import is_summary_event
from tracefuse_stream.rewrite.rules import FLOW_PHASES, PID_STRIDE, rank_of_pid
from tracefuse_stream.timeunits import us_to_ns_or_none
from tracefuse_stream.verify.digest import MASK64, Digest, hashable, tuple_hashes
from tracefuse_stream.verify.overlap import OverlapSorter, Slice, sweep
from tracefuse_stream.verify.report import Findings, short_json

U32_MAX = 2**32 - 1
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
#: distinct event names remembered for the overlap examples.
NAME_CAP = 200_000
_NO_NAME = 0xFFFFFFFF


def new_rank_stats() -> Dict[str, Any]:
    return {
        "events": 0, "metadata": 0, "complete": 0, "instants": 0, "counters": 0,
        "flow_starts": 0, "flow_steps": 0, "flow_ends": 0, "flow_orphan_ends": 0,
        "overlaps": 0, "processes": 0, "threads": 0,
        "ts_min_ns": None, "ts_max_ns": None, "against": None,
    }  # fmt: skip


def rank_of_event(ev: dict) -> Optional[int]:
    """``args.rank``, else the rank the pid rule gives, else None."""
    args: Any = ev.get("args")
    r: Any = args.get("rank") if type(args) is dict else None
    if type(r) is int:
        return r
    pid: Any = ev.get("pid")
    return rank_of_pid(pid) if type(pid) is int and pid >= PID_STRIDE else None


class MergedChecker:
    """State of the main pass over the merged file (see module docstring)."""

    def __init__(
        self, path: str, against: Sequence[str], max_examples: int, sort_chunk_records: Optional[int]
    ) -> None:
        self.path = path
        self.against = list(against)
        self.want_digest = bool(self.against)
        self.max_examples = max_examples
        self.F = Findings(max_examples)
        self.ranks: Dict[Any, Dict[str, Any]] = {}
        self.pids: Dict[Any, list] = {}  # pid -> [first rank, names, real events, other ranks]
        self.threads: Dict[tuple, list] = {}  # (pid, tid) -> [index, rank, pid, tid, events, overlaps]
        self.thread_list: List[list] = []
        self.flows: Dict[Any, int] = {}  # key -> (rank+1) << 4 | flags
        self.flow_names: Dict[tuple, int] = {}
        self.flow_name_list: List[tuple] = []
        self.names: Dict[Any, int] = {}
        self.name_list: List[Any] = []
        self.sorter = OverlapSorter(sort_chunk_records)
        self.digests: Dict[Any, Digest] = {}
        self.idx = -1
        self.summary_events = 0  # events of --link-collectives' "Collectives" process

    def rank_stats(self, r: Any) -> Dict[str, Any]:
        st = self.ranks.get(r)
        if st is None:
            st = self.ranks[r] = new_rank_stats()
        return st

    def _name_id(self, name: Any) -> int:
        try:
            i = self.names.get(name)
        except TypeError:
            name = repr(name)
            i = self.names.get(name)
        if i is None:
            if len(self.name_list) >= NAME_CAP:
                return _NO_NAME
            i = len(self.name_list)
            self.names[name] = i
            self.name_list.append(name)
        return i

    def handle(self, batch: Iterable[Any]) -> None:
        """Check one batch of events. The hot loop: the common case (an int pid and
        tid of a known process and thread) stays inline with the state bound to locals
        once per batch; every problem and every first sighting goes to a helper."""
        F = self.F
        pids = self.pids
        threads = self.threads
        ranks = self.ranks
        want_digest = self.want_digest
        to_ns = us_to_ns_or_none
        idx = self.idx
        try:
            for ev in batch:
                idx += 1
                if type(ev) is not dict:
                    F.add("event_not_object", None, {"event": idx, "value": short_json(ev, 80)})
                    continue
                ph = ev.get("ph")
                pid: Any = ev.get("pid")
                args: Any = ev.get("args")
                rank: Any = args.get("rank") if type(args) is dict else None
                if type(rank) is not int:
                    if is_summary_event(ev):  # "Collectives" belongs to no rank: counted apart
                        self.summary_events += 1
                    elif is_step_counter(ev):  # a rank's step counter (no rank arg: args are values)
                        rank = rank_of_pid(pid)
                    else:
                        rank = self._rank_missing(ev, ph, pid, idx)
                st = ranks.get(rank) or self.rank_stats(rank)
                st["events"] += 1
                meta = ph == "M"
                tp = type(pid)
                if tp is not int or pid <= 0 or pid > U32_MAX:
                    pid = self._odd_pid(ev, ph, pid, rank, meta, idx)
                pinfo = pids.get(pid)
                if pinfo is None or pinfo[0] != rank:
                    pinfo = self._process_seen(ev, pid, tp is int, rank, pinfo, idx)
                if meta:
                    self._metadata(ev, args, pid, pinfo, rank, st, idx)
                    continue
                pinfo[2] += 1
                tid: Any = ev.get("tid")
                if type(tid) is not int or tid <= 0 or tid > U32_MAX:
                    tid = self._odd_tid(ev, pid, tid, tp is int, rank, idx)
                tinfo = threads.get((pid, tid))
                if tinfo is None:
                    tinfo = threads[(pid, tid)] = [len(self.thread_list), rank, pid, tid, 0, 0]
                    self.thread_list.append(tinfo)
                tinfo[4] += 1
                ts: Any = ev.get("ts")
                ts_ns = ts * 1000 if type(ts) is int else to_ns(ts)
                if ts_ns is not None:
                    lo, hi = st["ts_min_ns"], st["ts_max_ns"]
                    if lo is None or ts_ns < lo:
                        st["ts_min_ns"] = ts_ns
                    if hi is None or ts_ns > hi:
                        st["ts_max_ns"] = ts_ns
                dur_ns = None
                if ph == "X":
                    dur_ns = self._complete(ev, rank, st, tinfo[0], ts_ns, idx)
                elif type(ph) is str and ph in FLOW_PHASES:  # a ph that is a list or object: no flow
                    self._flow(ev, ph, rank, st, idx)
                    if want_digest and is_collective_link(ev.get("cat"), ev.get("name"), ev.get("id"), rank):
                        continue  # --link-collectives adds these: they are in no input
                elif ph == "i" or ph == "I":
                    st["instants"] += 1
                elif ph == "C":
                    st["counters"] += 1
                    if want_digest and is_step_counter(ev):
                        continue  # --link-collectives adds these: they are in no input
                if want_digest:
                    self._digest(ev, ph, rank, ts_ns, dur_ns, pid)
        finally:
            self.idx = idx

    def _rank_missing(self, ev: dict, ph: Any, pid: Any, idx: int) -> Optional[int]:
        """An event without ``args.rank``: reported; the pid rule's rank, if any."""
        self.F.add("rank_missing", None, {"event": idx, "ph": ph, "name": ev.get("name"), "pid": pid})
        return rank_of_pid(pid) if type(pid) is int and pid >= PID_STRIDE else None

    def _odd_pid(self, ev: dict, ph: Any, pid: Any, rank: Any, meta: bool, idx: int) -> Any:
        """A pid that is not a positive uint32: reported (pid 0 only on a non-metadata
        event); returns the key the process tables use."""
        F = self.F
        tp = type(pid)
        if tp is int:
            if pid < 0 or pid > U32_MAX:
                F.add("pid_out_of_range", rank, {"event": idx, "pid": pid, "name": ev.get("name")})
            elif pid == 0 and not meta:
                F.add("zero_pid", rank, {"event": idx, "name": ev.get("name"), "ph": ph})
        elif tp is str:
            F.add("string_pid", rank, {"event": idx, "pid": pid, "name": ev.get("name")})
        else:
            F.add("pid_invalid", rank, {"event": idx, "pid": short_json(pid, 60), "name": ev.get("name")})
            pid = hashable(pid)
        return pid

    def _process_seen(
        self, ev: dict, pid: Any, int_pid: bool, rank: Any, pinfo: Optional[list], idx: int
    ) -> list:
        """A process's first event (its pid must carry its rank), or an event of
        another rank in a process already seen (reported once per rank)."""
        if pinfo is None:
            pinfo = self.pids[pid] = [rank, 0, 0, None]
            if int_pid and rank is not None and rank_of_pid(pid) != rank:
                self.F.add("pid_rank_mismatch", rank, {"pid": pid, "rank": rank})
            return pinfo
        if pinfo[3] is None:
            pinfo[3] = set()
        if rank not in pinfo[3]:
            pinfo[3].add(rank)
            self.F.add("process_multi_rank", pinfo[0],
                       {"pid": pid, "ranks": [pinfo[0], rank], "event": idx, "name": ev.get("name")})  # fmt: skip
        return pinfo

    def _metadata(self, ev: dict, args: Any, pid: Any, pinfo: list, rank: Any, st: dict, idx: int) -> None:
        """A metadata event: process names counted, sort indexes must be int32."""
        st["metadata"] += 1
        name = ev.get("name")
        if name == "process_name":
            pinfo[1] += 1
        elif name == "process_sort_index" or name == "thread_sort_index":
            si = args.get("sort_index") if type(args) is dict else None
            if type(si) is not int or not I32_MIN <= si <= I32_MAX:
                self.F.add(
                    "sort_index_not_int32", rank, {"event": idx, "name": name, "pid": pid, "sort_index": si}
                )

    def _odd_tid(self, ev: dict, pid: Any, tid: Any, int_pid: bool, rank: Any, idx: int) -> Any:
        """A tid that is not a positive uint32: tid 0 of an int pid is the pid (what
        Perfetto does), anything else is reported; returns the key the thread table uses."""
        F = self.F
        tt = type(tid)
        if tt is int:
            if tid < 0 or tid > U32_MAX:
                F.add(
                    "tid_out_of_range", rank, {"event": idx, "pid": pid, "tid": tid, "name": ev.get("name")}
                )
            elif tid == 0 and int_pid:
                tid = pid
        elif tt is str:
            F.add("string_tid", rank, {"event": idx, "pid": pid, "tid": tid})
        elif tid is None:
            F.add("tid_missing", rank, {"event": idx, "pid": pid, "name": ev.get("name")})
        else:
            F.add("tid_out_of_range", rank, {"event": idx, "pid": pid, "tid": short_json(tid, 60)})
            tid = hashable(tid)
        return tid

    def _complete(
        self, ev: dict, rank: Any, st: dict, thread: int, ts_ns: Optional[int], idx: int
    ) -> Optional[int]:
        """An X event: its duration must not be negative; a record for the overlap sort
        (thread, start, end, index, name). Returns the duration in ns (None: unusable)."""
        st["complete"] += 1
        dur: Any = ev.get("dur")
        dur_ns = dur * 1000 if type(dur) is int else us_to_ns_or_none(dur)
        if dur_ns is None or dur_ns < 0:
            self.F.add(
                "x_negative_dur", rank, {"event": idx, "name": ev.get("name"), "dur": short_json(dur, 40)}
            )
            return dur_ns
        sorter = self.sorter
        off = sorter.OFF
        if ts_ns is not None and -off <= ts_ns and ts_ns + dur_ns < off:
            name = ev.get("name")
            try:
                nid = self.names.get(name)
            except TypeError:
                nid = None
            if nid is None:
                nid = self._name_id(name)
            sorter.buf.append(sorter.REC.pack(thread, ts_ns + off, MASK64 - (ts_ns + dur_ns + off), idx, nid))
            if len(sorter.buf) >= sorter.chunk:
                sorter.spill()
        return dur_ns

    def _digest(
        self, ev: dict, ph: Any, rank: Any, ts_ns: Optional[int], dur_ns: Optional[int], pid: Any
    ) -> None:
        """The event's identity (ph, cat, name, ts, dur, pid) into its rank's digest."""
        if ph != "X":
            dur = ev.get("dur")
            dur_ns = us_to_ns_or_none(dur) if dur is not None else None
        d = self.digests.get(rank)
        if d is None:
            d = self.digests[rank] = Digest()
        d.add(*tuple_hashes((ph, ev.get("cat"), ev.get("name"), ts_ns, dur_ns, pid)))

    def _flow(self, ev: dict, ph: str, rank: Any, st: dict, idx: int) -> None:
        fid: Any = ev.get("id")
        t = type(fid)
        if t is int:
            val = fid
        elif t is str:
            try:
                val = int(fid, 16)
            except ValueError:
                self.F.add("flow_bad_id", rank, {"event": idx, "ph": ph, "id": fid})
                return
        elif t is Decimal or t is float:
            self.F.add("flow_float_id", rank, {"event": idx, "ph": ph, "cat": ev.get("cat"), "id": fid})
            return
        else:
            self.F.add("flow_bad_id", rank, {"event": idx, "ph": ph, "id": short_json(fid, 40)})
            return
        cn_key = (hashable(ev.get("cat")), hashable(ev.get("name")))
        cn: Any = self.flow_names.get(cn_key)
        if cn is None:
            cn = self.flow_names[cn_key] = len(self.flow_name_list)
            self.flow_name_list.append(cn_key)
        key: Any = (val << 20) | cn if cn < (1 << 20) and val >= 0 else (cn, val)
        rr = (rank + 1) if type(rank) is int and rank >= 0 else 0
        cur = self.flows.get(key)
        flag = 1 if ph == "s" else 2 if ph == "f" else 0
        if ph == "s":
            st["flow_starts"] += 1
        elif ph == "f":
            st["flow_ends"] += 1
        else:
            st["flow_steps"] += 1
        if cur is None:
            self.flows[key] = (rr << 4) | flag
            return
        if cur >> 4 != rr and not cur & 8 and not is_collective_link(cn_key[0], cn_key[1], val, rank):
            self.F.add("flow_key_shared", rank,
                       {"cat": cn_key[0], "name": cn_key[1], "id": val,
                        "ranks": [(cur >> 4) - 1, rank], "event": idx})  # fmt: skip
            cur |= 8
        if flag == 1 and cur & 1:
            self.F.add(
                "flow_duplicate_start", rank, {"cat": cn_key[0], "name": cn_key[1], "id": val, "event": idx}
            )
        self.flows[key] = cur | flag

    def finish_structure(self) -> None:
        """After the pass: process names, per-rank process/thread counts, orphan flow ends."""
        F = self.F
        for pid, (rank, names, real, _others) in self.pids.items():
            if names == 0 and real > 0:
                F.add("process_unnamed", rank, {"pid": pid, "events": real})
            elif names > 1:
                F.add("process_named_twice", rank, {"pid": pid, "process_name_events": names})
            if real > 0:
                self.rank_stats(rank)["processes"] += 1
        for tinfo in self.thread_list:
            self.rank_stats(tinfo[1])["threads"] += 1
        orphans: Dict[Any, int] = {}
        for key, v in self.flows.items():
            if v & 2 and not v & 1:
                r = (v >> 4) - 1 if v >> 4 else None
                orphans[r] = orphans.get(r, 0) + 1
                if isinstance(key, tuple):
                    cn, val = key
                else:
                    cn, val = key & ((1 << 20) - 1), key >> 20
                cat, name = self.flow_name_list[cn]
                F.add("flow_orphan_end", r, {"cat": cat, "name": name, "id": val})
        for r, n in orphans.items():
            self.rank_stats(r)["flow_orphan_ends"] = n
        self.flows = {}

    def finish_overlaps(self) -> None:
        """Sort and sweep the X-event records; per-thread overlap counts into the rank stats."""
        F = self.F
        names = self.name_list
        threads = self.thread_list

        def nm(i: int) -> Any:
            return names[i] if i < len(names) else "<name not kept>"

        def on_overlap(th: int, ev: Slice, parent: Slice) -> None:
            tinfo = threads[th]
            tinfo[5] += 1
            rank = tinfo[1]
            self.rank_stats(rank)["overlaps"] += 1
            F.add("overlap_x", rank, {
                "pid": tinfo[2], "tid": tinfo[3],
                "event": {"name": nm(ev[2]), "ts_ns": ev[3], "end_ns": ev[0], "index": ev[1]},
                "overlaps": {"name": nm(parent[2]), "ts_ns": parent[3], "end_ns": parent[0], "index": parent[1]},
            })  # fmt: skip

        try:
            sweep(self.sorter, on_overlap)
        finally:
            self.sorter.close()
        for r in self.ranks:
            per = [{"pid": t[2], "tid": t[3], "overlaps": t[5]} for t in threads if t[1] == r and t[5]]
            if per:
                per.sort(key=lambda x: -x["overlaps"])
                self.ranks[r]["overlaps_by_thread"] = per[:20]


__all__ = ["MergedChecker", "new_rank_stats", "rank_of_event"]
