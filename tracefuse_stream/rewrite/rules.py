"""The per-event rewrite rules: pids, tids, flow/link ids, timestamps, rank tag.

Pure and per rank: a :class:`RankRewriter` holds only small tables (pids, odd tids)
and constants, never events. The rules, and why (see docs/OUTPUT_FORMAT.md):

* **pid** — Perfetto keeps pids as uint32 and merges equal *string* pids across
  files, and every rank of a container job can have the same OS pid. So every
  (rank, original pid) gets its own integer: ``(r+1)*10000 + p`` for small integer
  pids ``0 <= p < 5000`` (GPU device indices keep their number in the last digits),
  ``(r+1)*10000 + 5000 + i`` for all others in order of first appearance.
  ``rank = pid // 10000 - 1``; valid for ranks up to 214,746.
* **tid** — a thread is (pid, tid) in Perfetto, so tids need no rank part; only
  values Perfetto would turn into 0 are changed: negative ints become their absolute
  value (what newer PyTorch writes), strings/floats/out-of-range become
  ``1_000_000_000 + i`` and keep their original text as the thread name.
* **flow ids and link args** — Perfetto binds flows by (cat, name, id) across the
  whole file, and every rank counts ids from 1. ``id`` and every arg of
  :data:`LINK_ID_ARGS` (``correlation``, ``External id``, ...) become
  ``r * 2**32 + id`` (exact integers < 2**53 for ids < 2**32 and ranks < 2**21),
  which keeps ``ac2g id == correlation`` and keeps tools that join on those args
  inside one rank. Original: ``id % 2**32``.
* **ts** — shifted by exactly ``shift_ns`` nanoseconds with decimal arithmetic, so
  no precision is lost; unshifted ranks keep the parsed value untouched.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from tracefuse_stream.errors import ErrorKind, InputError
from tracefuse_stream.rewrite.args import kept_keys

# the contract's constants, re-exported for the modules that import them from here
from tracefuse_stream.rewrite.blankpid import cpu_process
from tracefuse_stream.rewrite.contract import (  # noqa: F401
    _RARE_LINK_KEYS,
    ARG_IDS,
    COMMON_LINK_ARGS,
    FLOW_PHASES,
    GPU_CATS,
    ID_BITS,
    ID_LIMIT,
    LINK_ARGS,
    LINK_ID_ARGS,
    MAX_ID_RANK,
    MAX_RANK,
    PID_DEVICE_LIMIT,
    PID_STRIDE,
    STRICT_LINK_ARGS,
    SYNTH_TID_BASE,
    UINT32,
    original_id,
    output_pid,
    rank_of_pid,
)
from tracefuse_stream.rewrite.shift import TimeShifter
from tracefuse_stream.rewrite.values import _beyond_ids, _is_id, pid_key, short_text  # noqa: F401
from tracefuse_stream.select.filters import EventFilter
from tracefuse_stream.select.spans import PROFILER_SPAN_CAT, is_profiler_span, span_fits
from tracefuse_stream.select.window import step_number
from tracefuse_stream.timeunits import TimeCheck, us_to_ns

Event = Dict[str, Any]


BAD_TIME_HINT = "use --salvage to drop such events"
_STEP_PREFIX = "ProfilerStep#"  # a step's name (select/window.step_number reads its N)


class RankRewriter:
    """Rewrites the events of one rank in place, keeping small per-rank tables.

    ``feed(event)`` returns the rewritten event, or ``None`` when the event is
    dropped by the filter or is metadata (metadata is buffered for ``labels``).
    """

    def __init__(
        self,
        rank: int,
        shift_ns: int,
        flt: EventFilter,
        base_time_ns: int = 0,
        path: str = "",
    ) -> None:
        if rank < 0 or rank > MAX_RANK:
            raise InputError(
                path,
                f"rank {rank} is outside 0..{MAX_RANK}, the range the pid rule supports",
                kind=ErrorKind.BAD_VALUE,
            )
        if rank > MAX_ID_RANK:
            raise InputError(
                path,
                f"rank {rank} is above {MAX_ID_RANK}: rewritten flow ids would exceed 2**53",
                kind=ErrorKind.BAD_VALUE,
            )
        self.rank = rank
        self.path = path
        self.filter = flt
        self.shift = TimeShifter(shift_ns)
        self._shifting = not self.shift.identity
        self._add, self._dshift = self.shift._add, self.shift._dshift
        self.abs_base_ns = base_time_ns
        self.early_ts: Any = None  # the earliest written ts below 0 (before the output base)
        # the span of the events written, on their own ts (exact us; ``ts + dur`` with dur
        # counted when positive, as plan/extent.scan_rank times a file) and the
        # ProfilerStep numbers written: the run check after a merge (plan/runcheck.py)
        self.span_lo: Any = None
        self.span_hi: Any = None
        self.steps: Set[int] = set()
        self.time_problem = TimeCheck(base_time_ns)  # malformed ts/dur: one rule (timeunits)
        self.pid_base = (rank + 1) * PID_STRIDE
        self.id_off = rank << ID_BITS
        self.pids: Dict[Any, int] = {}
        self.pid_order: List[Any] = []
        self.next_slot = PID_DEVICE_LIMIT
        self.tids: Dict[Any, int] = {}
        self.synth_tids: Dict[Tuple[int, int], Any] = {}  # (out pid, out tid) -> original
        # threads as ``out pid << 32 | tid``: written as they are (the kernel adds to it
        # too), and made from a negative tid; one in both would be two threads as one
        self.tids_seen: Set[int] = set()
        self.neg_tids: Set[int] = set()
        self.pid_first_ts: Dict[int, Any] = {}
        self.pid_gpu_like: Set[int] = set()
        # --args slim/none: the arg keys kept (rewrite/args.py); None: all. The filter is
        # the one selection object of the merge: the rank's rules and the kernel's
        # context read it as it is (no copies of its fields under other names).
        self.keep_args = kept_keys(flt.args)
        self.metadata: List[Event] = []
        self.events_out = 0
        self.dropped = 0
        self.spans_dropped = 0  # profiler spans dropped by the window (select/spans.py)
        self.index = -1

    @property
    def events_in(self) -> int:
        """Events fed so far (metadata and dropped ones included)."""
        return self.index + 1

    # -- tables ---------------------------------------------------------------
    def map_pid(self, pid: Any) -> int:
        """The output pid of original ``pid`` (allocating a slot on first sight)."""
        try:
            key = pid_key(pid)
        except TypeError as e:
            raise InputError(self.path, str(e), event_index=self.index, hint=BAD_TIME_HINT) from None
        out = self.pids.get(key)
        if out is not None:
            return out
        if type(pid) is str and not pid.strip():
            host = cpu_process(self)
            if host is not None:  # Kineto's pid "" (its "Record Window End"): no process of its own
                self.pids[key] = host
                self.pid_order.append(pid)
                return host
        if type(pid) is int and 0 <= pid < PID_DEVICE_LIMIT:
            out = self.pid_base + pid
        else:
            if self.next_slot >= PID_STRIDE:
                raise InputError(
                    self.path,
                    f"more than {PID_STRIDE - PID_DEVICE_LIMIT} distinct non-device pids in one rank",
                    event_index=self.index,
                )
            out = self.pid_base + self.next_slot
            self.next_slot += 1
        self.pids[key] = out
        self.pid_order.append(pid)
        return out

    def out_pid(self, pid: Any) -> Optional[int]:
        """The output pid of an original pid already seen (None: unseen, or no pid)."""
        try:
            return self.pids.get(pid_key(pid))
        except TypeError:
            return None

    def map_tid(self, out_pid: int, tid: Any) -> Any:
        """Valid uint32 tids stay; negatives -> abs; anything else -> synthetic."""
        if type(tid) is int:
            if 0 <= tid < UINT32:
                return tid
            if -UINT32 < tid < 0:
                thread = out_pid << 32 | -tid
                if thread in self.tids_seen:
                    raise self._one_thread(out_pid, -tid)
                self.neg_tids.add(thread)
                return -tid
        key = (type(tid).__name__, tid if not isinstance(tid, (dict, list)) else repr(tid))
        out = self.tids.get(key)
        if out is None:
            out = SYNTH_TID_BASE + len(self.tids)
            self.tids[key] = out
        self.synth_tids.setdefault((out_pid, out), tid)
        return out

    def _new_thread(self, key: int, index: int) -> None:
        """A (pid, tid) written as it is, seen for the first time."""
        if key in self.neg_tids:
            self.index = index
            raise self._one_thread(key >> 32, key & (UINT32 - 1))
        self.tids_seen.add(key)

    def _one_thread(self, out_pid: int, tid: int) -> InputError:
        orig = next((p for p in self.pid_order if self.out_pid(p) == out_pid), out_pid)
        return InputError(
            self.path,
            f"pid {short_text(orig)} has threads {tid} and -{tid}: negative tids become their "
            "absolute value (what newer PyTorch writes), so they would be one thread",
            event_index=self.index,
            hint=BAD_TIME_HINT,
        )

    def map_id(self, value: Any, what: str) -> int:
        """``rank * 2**32 + id`` for an integer id in 0..2**32-1 (hex strings allowed)."""
        v = value
        if type(v) is not int:
            if isinstance(v, bool):
                raise self._bad_id(value, what)
            if isinstance(v, str):
                try:
                    v = int(v, 16)
                except ValueError:
                    raise self._bad_id(value, what) from None
            elif isinstance(v, (float, Decimal)) and v == v and v == int(v):
                v = int(v)
            else:
                raise self._bad_id(value, what)
        if not 0 <= v < ID_LIMIT:
            raise self._bad_id(value, what)
        return self.id_off + v

    def _bad_id(self, value: Any, what: str) -> InputError:
        return InputError(
            self.path,
            f"{what} {value!r} is not an integer in 0..2**32-1, so it cannot be made unique across ranks",
            event_index=self.index,
            hint="use --salvage to drop such events",
        )

    # -- the hot path -----------------------------------------------------------
    def feed(self, ev: Event) -> Optional[Event]:
        """Rewrite one event in place; ``None`` when it is dropped or buffered."""
        kept = self.feed_batch((ev,))
        return kept[0] if kept else None

    def feed_batch(self, events: Sequence[Event]) -> List[Event]:
        """Rewrite ``events`` in place; return the kept ones, in order (metadata is
        buffered for ``labels``, filtered events are counted as dropped).

        The hot path of the whole tool. One call per batch, so the rewriter's state
        is bound to locals once per batch rather than looked up per event; rare cases
        (new pid, odd tid, non-Decimal ts, flow ids) call out of the straight line,
        after storing ``self.index`` for their error messages.
        """
        kept: List[Event] = []
        keep_event, buffer_meta = kept.append, self.metadata.append
        index, dropped, path = self.index, 0, self.path
        flt = self.filter  # categories dropped outright, checked inline; other rules: flt.keep()
        drop_cats, simple_filter = flt.dropped_categories(), flt.only_drops_categories()
        window = flt.window_ns is not None
        pids, first_ts, gpu_like = self.pids, self.pid_first_ts, self.pid_gpu_like
        shifting, add, dshift = self._shifting, self._add, self._dshift
        rewrite_args, time_problem = self._rewrite_args, self.time_problem
        tids_seen, lo, hi = self.tids_seen, self.span_lo, self.span_hi
        try:
            for ev in events:
                index += 1
                if type(ev) is not dict:
                    raise InputError(path, f"event is not a JSON object: {ev!r:.60}", event_index=index)
                get = ev.get
                bad_time = time_problem(ev)  # before any filter: the same answer for every option
                if bad_time is not None:
                    raise InputError(path, f"bad {bad_time}", event_index=index, hint=BAD_TIME_HINT)
                ph = get("ph")
                if ph == "M":
                    buffer_meta(self._check_meta_ts(ev, index) if shifting else ev)  # the labels shift it
                    continue
                cat = get("cat")
                if type(cat) is not str:
                    cat = None  # for the lookups below: a list or object is no category
                if cat in drop_cats or (not simple_filter and not flt.keep(ev)):
                    dropped += 1
                    continue
                ts = get("ts")
                if window and self._outside_window(ev, ph, ts, cat):
                    dropped += 1
                    continue
                p = get("pid")
                tp = type(p)  # 1, 1.0 and true are three pids: only ints and strings key as they are
                pid: Any = pids.get(p) if tp is int or tp is str else None
                new_pid = pid is None
                if new_pid:
                    self.index = index
                    pid = self.map_pid(p)
                ev["pid"] = pid
                tid = get("tid")
                if type(tid) is not int or not 0 <= tid < UINT32:
                    self.index = index
                    ev["tid"] = self.map_tid(pid, tid)
                elif pid << 32 | tid not in tids_seen:
                    self._new_thread(pid << 32 | tid, index)
                t = ts  # the event's own ts, for the span written (__init__)
                if ts is not None and shifting:
                    try:
                        if type(ts) is Decimal and ts.is_finite():
                            ts = ev["ts"] = add(ts, dshift)
                        else:
                            ts = ev["ts"] = self.shift(ts)
                    except (ValueError, TypeError, ArithmeticError) as e:
                        raise self._shift_error(ts, e, index) from None
                if ts is not None and ts < 0:
                    self._early(ts)  # before the output base: the merge places it again
                if new_pid or pid not in first_ts:
                    first_ts.setdefault(pid, 0 if ts is None else ts)
                if "id" in ev or "bind_id" in ev or "id2" in ev or (type(ph) is str and ph in FLOW_PHASES):
                    self._rewrite_ids(ev, ph, index)  # flows: rare next to slices
                rewrite_args(ev, get("args"), index)
                if cat in GPU_CATS:
                    gpu_like.add(pid)
                if t is not None:  # the span written (__init__): ts and dur are usable times (time_problem)
                    end = t + dur if (dur := get("dur")) else t
                    end = t if end < t else end  # a negative dur: the ts (plan/extent.scan_rank)
                    lo, hi = t if lo is None or t < lo else lo, end if hi is None or end > hi else hi
                if ph == "X" and type(name := get("name")) is str and name.startswith(_STEP_PREFIX):
                    self._step(name, t)
                keep_event(ev)
        finally:
            self.index, self.span_lo, self.span_hi = index, lo, hi
            self.dropped += dropped
            self.events_out += len(kept)
        return kept

    def _rewrite_args(self, ev: Event, args: Any, index: int) -> None:
        """An event's args: trimmed to ``--args``, link ids moved into the rank's range,
        the ``rank`` arg added (in place; ``ev["args"]`` replaced when trimmed); no args:
        ``{"rank": r}``; args that are not an object: an input error."""
        if type(args) is not dict:
            if args is not None:
                raise InputError(self.path, "event args is not an object", event_index=index)
            ev["args"] = {"rank": self.rank}
            return
        keep_args, id_off = self.keep_args, self.id_off
        if keep_args is not None and not keep_args.issuperset(args):
            args = ev["args"] = {k: v for k, v in args.items() if k in keep_args}
        # the two common links by lookup; the rarer ones only when one of them is
        # there (one C-level isdisjoint, no allocation)
        for key in COMMON_LINK_ARGS:
            v = args.get(key)
            if v is not None:
                if type(v) is int and 0 <= v < ID_LIMIT:
                    args[key] = v + id_off
                else:
                    self.index = index
                    args[key] = self.map_id(v, f"args[{key!r}]")
        if not _RARE_LINK_KEYS.isdisjoint(args):
            for key in _RARE_LINK_KEYS.intersection(args):
                v = args[key]
                if type(v) is int and 0 <= v < ID_LIMIT:
                    args[key] = v + id_off
                elif key in STRICT_LINK_ARGS or _is_id(v) or _beyond_ids(v):
                    self.index = index  # beyond 2**32: it could equal another rank's rewritten id
                    args[key] = self.map_id(v, f"args[{key!r}]")
        args["rank"] = self.rank

    def _outside_window(self, ev: Event, ph: Any, ts: Any, cat: Any) -> bool:
        """``--window``/``--steps``: the event misses the window, or is Kineto's
        profiler span reaching outside it (select/spans.py)."""
        return not self._in_window(ph, ts, ev.get("dur")) or (cat == PROFILER_SPAN_CAT and self._span_out(ev))

    def _rewrite_ids(self, ev: Event, ph: Any, index: int) -> None:
        """A flow's ``id`` and a ``bind_id`` into the rank's range; a flow without an id
        is an input error (its arrow could not be kept inside its rank)."""
        self.index = index
        if "id" in ev:
            ev["id"] = self.map_id(ev["id"], "flow id")
        elif type(ph) is str and ph in FLOW_PHASES:
            raise self._flow_without_id(ph, index)
        if "bind_id" in ev:
            ev["bind_id"] = self.map_id(ev["bind_id"], "bind_id")
        if "id2" in ev:
            ev["id2"] = self._rewrite_id2(ev["id2"])

    def _rewrite_id2(self, id2: Any) -> Dict[str, Any]:
        """An async event's ``id2`` ``{"global": id}`` / ``{"local": id}``: the id gets the
        flow-id rule (a global id binds across processes, so two ranks' b/e pairs
        would pair up; a local one is made unique the same way, for one rule)."""
        if type(id2) is not dict or not id2 or not set(id2) <= {"global", "local"}:
            raise InputError(
                self.path,
                f'id2 {short_text(id2)} is not {{"global": id}} or {{"local": id}}',
                event_index=self.index,
                hint=BAD_TIME_HINT,
            )
        return {k: self.map_id(v, f"id2.{k}") for k, v in id2.items()}

    def _shift_error(self, ts: Any, e: BaseException, index: int) -> InputError:
        why = e if isinstance(e, (ValueError, TypeError)) else f"{ts!r} cannot be shifted exactly"
        return InputError(self.path, f"bad ts: {why}", event_index=index)

    def _flow_without_id(self, ph: str, index: int) -> InputError:
        return InputError(
            self.path,
            f"flow event (ph {ph!r}) without an id: its arrow cannot be kept inside its rank",
            event_index=index,
            hint="use --salvage to drop such events",
        )

    def _early(self, ts: Any) -> None:
        """Note a written ts below 0: Perfetto drops it, so the merge moves its base
        (plan/starts.output_base) and writes again."""
        if self.early_ts is None or ts < self.early_ts:
            self.early_ts = ts

    def _check_meta_ts(self, ev: Event, index: int) -> Event:
        """A metadata event's ts must shift like any other (its error names the event)."""
        ts = ev.get("ts")
        if ts is None:
            return ev
        try:
            self.shift(ts)
        except (ValueError, TypeError, ArithmeticError) as e:
            why = e if isinstance(e, (ValueError, TypeError)) else f"{ts!r} cannot be shifted exactly"
            raise InputError(self.path, f"bad ts: {why}", event_index=index) from None
        return ev

    def _step(self, name: str, ts: Any) -> None:
        """A ``ProfilerStep#N`` X event written (the kernel hands every one back): N is
        one of the steps this rank wrote, when it is a step and has a time."""
        step = step_number(name)
        if step is not None and ts is not None:
            self.steps.add(step)

    def _span_out(self, ev: Event) -> bool:
        """Kineto's profiler span reaching outside the window: dropped (select/spans.py)."""
        get = ev.get
        if not is_profiler_span(get("ph"), get("cat"), get("name"), get("pid")):
            return False
        dur, ts = get("dur"), ev["ts"]
        start = self.abs_base_ns + us_to_ns(ts)  # ts is not None: _in_window kept the event
        if span_fits(start, us_to_ns(dur) if dur is not None else 0, self.filter.window_ns):  # type: ignore[arg-type]
            return False
        self.spans_dropped += 1
        return True

    def _in_window(self, ph: Any, ts: Any, dur: Any) -> bool:
        if ts is None:
            return False
        start = self.abs_base_ns + us_to_ns(ts)
        return self.filter.in_window(start, us_to_ns(dur) if ph == "X" and dur is not None else 0)

    def rewrite_metadata(self, ev: Event) -> Event:
        """Remap pid/tid/ts of a buffered metadata event (pid must be known)."""
        pid = self.pids[pid_key(ev.get("pid"))]
        out = dict(ev)
        out["pid"] = pid
        tid = ev.get("tid")
        if "tid" in ev and (type(tid) is not int or not 0 <= tid < UINT32):
            out["tid"] = self.map_tid(pid, tid)
        if ev.get("ts") is not None and not self.shift.identity:
            out["ts"] = self.shift(ev["ts"])
        if out.get("ts") is not None and out["ts"] < 0:
            # Metadata never moves the output base (the planner's rule, read/head.py
            # timed_ts): its ts means nothing to Perfetto, which would drop it below 0,
            # so it is placed where its process starts, like the regenerated labels.
            out["ts"] = self.pid_first_ts.get(pid, 0)
        args = ev.get("args")
        out["args"] = dict(args) if type(args) is dict else {}
        out["args"]["rank"] = self.rank
        return out

    def pid_map(self) -> List[List[Any]]:
        """``[[original pid, output pid], ...]`` in order of first appearance."""
        return [[p, self.pids[pid_key(p)]] for p in self.pid_order]
