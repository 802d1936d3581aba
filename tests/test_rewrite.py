"""Unit tests of the merge's pieces, without running a merge: the rewrite rules
(pid, tid, ids, timestamps, args), the generated labels, the trailer finder, the
spliced compressed writer and the atomic output. Expected values come from the
rules in docs/OUTPUT_FORMAT.md (and, where a real trace is fed, from that trace).
"""

from __future__ import annotations

import copy
import gzip
import io
import os
import random
import stat
import zlib
from decimal import Decimal
from pathlib import Path

import pytest

from tracefuse_stream.errors import InputError, OutputError, TerminateSignal
from tracefuse_stream.exactjson import dumps_exact
from tracefuse_stream.read.toplevel import find_trailer
from tracefuse_stream.rewrite.labels import rank_metadata
from tracefuse_stream.rewrite.rules import (
    RankRewriter,
    TimeShifter,
    original_id,
    output_pid,
    rank_of_pid,
)
from tracefuse_stream.select.filters import EventFilter
from tracefuse_stream.timeunits import us_to_ns
from tracefuse_stream.write.writer import (
    AtomicOutput,
    PieceWriter,
    Splicer,
    _py_crc32_combine,
    check_output_path,
    codec_for,
    piece_of,
)

PERIOD_NS = 7_889_238 * 10**9


def frag_text(v) -> str:
    """The JSON text a rewritten value serialises to, the same with both encoders
    (orjson's exact path and the batched path's msgspec)."""
    import msgspec

    text = dumps_exact(v).decode()
    assert msgspec.json.Encoder(decimal_format="number").encode(v).decode() == text
    return text


def rw(rank=0, shift_ns=0, flt=None, base=0) -> RankRewriter:
    return RankRewriter(rank, shift_ns, flt or EventFilter(), base, "test.json")


# ------------------------------------------------------------------ pid / tid / id
@pytest.mark.parametrize("rank", [0, 1, 7, 63, 1023, 214746])
def test_pid_formula_round_trips(rank):
    for slot in (0, 1, 7, 4999, 5000, 5001, 9999):
        p = output_pid(rank, slot)
        assert p == (rank + 1) * 10000 + slot
        assert 1 <= p <= 2**31 - 1
        assert rank_of_pid(p) == rank


def test_map_pid_device_pids_keep_their_number_others_by_first_appearance():
    r = rw(rank=3)
    base = 4 * 10000
    assert r.map_pid(0) == base + 0
    assert r.map_pid(7) == base + 7
    assert r.map_pid(542) == base + 542  # small container pid: < 5000
    assert r.map_pid(4999) == base + 4999
    # OS pids, -1 and strings: 5000 + order of first appearance
    assert r.map_pid(2910249) == base + 5000
    assert r.map_pid("Spans") == base + 5001
    assert r.map_pid(-1) == base + 5002
    assert r.map_pid("") == base + 5000  # Kineto's pid "": the CPU process (first OS pid here)
    assert r.map_pid(5000) == base + 5003
    assert r.map_pid("6583") == base + 5004  # a numeric string is not the number
    assert r.map_pid(6583) == base + 5005
    # stable
    assert r.map_pid("Spans") == base + 5001
    assert r.map_pid(2910249) == base + 5000
    assert r.pid_map() == [
        [0, base],
        [7, base + 7],
        [542, base + 542],
        [4999, base + 4999],
        [2910249, base + 5000],
        ["Spans", base + 5001],
        [-1, base + 5002],
        ["", base + 5000],
        [5000, base + 5003],
        ["6583", base + 5004],
        [6583, base + 5005],
    ]


def test_map_pid_two_ranks_never_share():
    a, b = rw(rank=0), rw(rank=1)
    pids = [0, 1, 11777, "Spans", "Traces", "", -1]
    out_a = {a.map_pid(p) for p in pids}
    out_b = {b.map_pid(p) for p in pids}
    assert not out_a & out_b
    assert {rank_of_pid(p) for p in out_a} == {0}
    assert {rank_of_pid(p) for p in out_b} == {1}


def test_map_tid_rules():
    r = rw(rank=2)
    pid = r.map_pid(11777)
    assert r.map_tid(pid, 0) == 0
    assert r.map_tid(pid, 11804) == 11804
    assert r.map_tid(pid, 2**32 - 1) == 2**32 - 1
    assert r.map_tid(pid, -247463936) == 247463936  # old PyTorch's negative tid
    s1 = r.map_tid(pid, "PyTorch Profiler")
    s2 = r.map_tid(pid, "")
    s3 = r.map_tid(pid, 2**32)  # out of uint32
    s4 = r.map_tid(pid, 1.5)
    assert [s1, s2, s3, s4] == [1_000_000_000, 1_000_000_001, 1_000_000_002, 1_000_000_003]
    assert r.map_tid(pid, "PyTorch Profiler") == s1
    assert all(0 <= t < 2**32 for t in (s1, s2, s3, s4))


@pytest.mark.parametrize("rank", [0, 1, 5, 214746])
def test_map_id_is_rank_times_2_32_plus_id(rank):
    r = rw(rank=rank)
    for v in (0, 1, 8198, 2**32 - 1):
        out = r.map_id(v, "flow id")
        assert out == rank * 2**32 + v
        assert out % 2**32 == v and out >> 32 == rank
        assert original_id(out) == (rank, v)
        assert out < 2**53  # exact in a double (Perfetto, JS)
    assert r.map_id("1f", "flow id") == rank * 2**32 + 31  # hex string, as Perfetto reads it
    assert r.map_id(12.0, "flow id") == rank * 2**32 + 12
    assert r.map_id(Decimal("12"), "flow id") == rank * 2**32 + 12


@pytest.mark.parametrize("bad", [-1, 2**32, 1.5, True, "xyz", None, [1], float("nan")])
def test_map_id_rejects_ids_that_cannot_be_made_unique(bad):
    with pytest.raises(InputError) as ei:
        rw(rank=1).map_id(bad, "flow id")
    assert "test.json" in str(ei.value)


def _accepts(rank: int) -> bool:
    try:
        rw(rank=rank)
    except InputError:
        return False
    return True


def test_rank_limits():
    """Every rank the rewriter accepts must give pids in 1..2**31-1 for every slot
    (device pids 0..4999 and the 5000 other slots); the docs promise ranks up to
    214,746."""
    assert not _accepts(-1)
    assert _accepts(214746)
    top = max(r for r in range(214740, 214760) if _accepts(r))
    r = rw(rank=top)
    pids = [r.map_pid(p) for p in (0, 3647, 3648, 4999, 11777, "Spans")]
    assert max(pids) <= 2**31 - 1, f"rank {top} is accepted but gives pid {max(pids)} > 2**31-1"


# ------------------------------------------------------------------ time
def test_time_shifter_exact_decimal_arithmetic():
    assert TimeShifter(0)(1419247333072.495) == 1419247333072.495  # untouched
    s = TimeShifter(PERIOD_NS)
    assert frag_text(s(1419247333072.495)) == "9308485333072.495"
    assert frag_text(s(-2807321895411.187)) == "5081916104588.813"
    assert frag_text(s(Decimal("0.001"))) == "7889238000000.001"
    assert s(5) == 5 + PERIOD_NS // 1000 and type(s(5)) is int  # whole us shift keeps ints
    one_ns = TimeShifter(1)
    assert frag_text(one_ns(5)) == "5.001"
    assert frag_text(one_ns(1.5)) == "1.501"
    assert frag_text(TimeShifter(-1500)(1.5)) == "0.0"
    assert frag_text(TimeShifter(-2500)(1.5)) == "-1.0"
    assert frag_text(TimeShifter(1)(Decimal("12.500"))) == "12.501"  # digits kept
    assert frag_text(TimeShifter(1000)(Decimal("12.500"))) == "13.500"
    # epoch microseconds of an old trace moved by a base of 1.79e18 ns: 22 digits exact
    big = TimeShifter(1790857026000000000)
    assert frag_text(big(Decimal("5081916104588.813"))) == "1795938942104588.813"
    for bad in (float("nan"), float("inf"), "12", None):
        with pytest.raises(ValueError):
            s(bad)


@pytest.mark.parametrize(
    "value, ns",
    [
        (0, 0),
        (1661203462598738, 1661203462598738000),
        (1419247333072.495, 1419247333072495),
        (Decimal("5081916104588.813"), 5081916104588813),
        (Decimal("9308485333072.495"), 9308485333072495),
        (5081916104588.813, 5081916104588813),  # between 2**42 and 2**43
        (8796093022207.999, 8796093022207999),  # just below 2**43 us (~102 days)
        (-2807321895411.187, -2807321895411187),
        (0.001, 1),
    ],
)
def test_us_to_ns_exact(value, ns):
    assert us_to_ns(value) == ns


# ------------------------------------------------------------------ feed
KINETO_EVENTS = [
    {
        "ph": "X",
        "cat": "python_function",
        "name": "<module>",
        "pid": 19392,
        "tid": 19392,
        "ts": 10.5,
        "dur": 3.0,
        "args": {"Python id": 1, "Ev Idx": 0},
    },
    {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 19392,
        "tid": 19392,
        "ts": 11.25,
        "dur": 1.125,
        "args": {"External id": 2, "correlation": 8198, "cbid": 211},
    },
    {"ph": "s", "id": 8198, "pid": 19392, "tid": 19392, "ts": 11.25, "cat": "ac2g", "name": "ac2g"},
    {
        "ph": "X",
        "cat": "kernel",
        "name": "gemm",
        "pid": 0,
        "tid": 7,
        "ts": 20.0,
        "dur": 5.0,
        "args": {"External id": 2, "correlation": 8198, "device": 0, "stream": 7},
    },
    {"ph": "f", "id": 8198, "pid": 0, "tid": 7, "ts": 20.0, "cat": "ac2g", "name": "ac2g", "bp": "e"},
    {
        "ph": "X",
        "cat": "Trace",
        "name": "PyTorch Profiler (0)",
        "pid": "Spans",
        "tid": "PyTorch Profiler",
        "ts": 1.0,
        "dur": 40.0,
        "args": {"Op count": 0},
    },
    {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 41.0},
    {"ph": "M", "name": "process_name", "pid": 19392, "tid": 0, "ts": 1.0, "args": {"name": "python3"}},
    {"ph": "M", "name": "process_labels", "pid": 19392, "tid": 0, "ts": 1.0, "args": {"labels": "CPU"}},
    {
        "ph": "M",
        "name": "process_sort_index",
        "pid": 19392,
        "tid": 0,
        "ts": 1.0,
        "args": {"sort_index": 19392},
    },
    {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "ts": 1.0, "args": {"name": "python3"}},
    {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "ts": 1.0, "args": {"labels": "GPU 0"}},
    {
        "ph": "M",
        "name": "process_sort_index",
        "pid": 0,
        "tid": 0,
        "ts": 1.0,
        "args": {"sort_index": 16777216},
    },
    {"ph": "M", "name": "process_name", "pid": 3, "tid": 0, "ts": 1.0, "args": {"name": "python3"}},
    {"ph": "M", "name": "process_labels", "pid": 3, "tid": 0, "ts": 1.0, "args": {"labels": "GPU 3"}},
    {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "ts": 1.0, "args": {"name": "stream 7"}},
    {
        "ph": "M",
        "name": "thread_name",
        "pid": 19392,
        "tid": 19392,
        "ts": 1.0,
        "args": {"name": "thread 19392 (python3)"},
    },
    {
        "ph": "M",
        "name": "thread_sort_index",
        "pid": 19392,
        "tid": 19392,
        "ts": 1.0,
        "args": {"sort_index": 19392},
    },
    {
        "ph": "M",
        "name": "process_sort_index",
        "pid": "Spans",
        "tid": 0,
        "ts": 1.0,
        "args": {"sort_index": 536870912},
    },
]


def feed_all(r: RankRewriter, events):
    return [o for o in (r.feed(copy.deepcopy(e)) for e in events) if o is not None]


def test_feed_rewrites_every_rule_on_kineto_shaped_events():
    rank = 2
    r = rw(rank=rank, shift_ns=1500)
    out = feed_all(r, KINETO_EVENTS)
    n_meta = sum(e["ph"] == "M" for e in KINETO_EVENTS)
    n_pyfunc = sum(e.get("cat") == "python_function" for e in KINETO_EVENTS)
    assert len(out) == len(KINETO_EVENTS) - n_meta - n_pyfunc
    assert r.events_in == len(KINETO_EVENTS) and r.dropped == n_pyfunc and r.events_out == len(out)
    assert len(r.metadata) == n_meta
    launch, s, kernel, f, span, rec = out
    off = rank << 32
    assert launch["args"] == {"External id": off + 2, "correlation": off + 8198, "cbid": 211, "rank": rank}
    assert kernel["args"]["correlation"] == s["id"] == f["id"] == off + 8198
    assert kernel["args"]["External id"] == off + 2 and kernel["args"]["stream"] == 7
    assert span["args"] == {"Op count": 0, "rank": rank}
    assert rec["args"] == {"rank": rank}  # args created where there were none
    base = (rank + 1) * 10000
    assert launch["pid"] == base + 5000 and kernel["pid"] == base + 0
    assert span["pid"] == base + 5001 and rec["pid"] == base + 5000  # pid "": the CPU process
    assert kernel["tid"] == 7 and launch["tid"] == 19392
    assert span["tid"] == 1_000_000_000 and rec["tid"] == 1_000_000_001
    assert frag_text(launch["ts"]) == "12.75"  # 11.25 us + 1500 ns
    assert frag_text(kernel["ts"]) == "21.5" and frag_text(f["ts"]) == "21.5"
    assert frag_text(span["ts"]) == "2.5"
    assert kernel["dur"] == 5.0 and f["bp"] == "e" and rec["s"] == "g"


def test_feed_rejects_non_objects_and_bad_args():
    r = rw()
    with pytest.raises(InputError, match="not a JSON object"):
        r.feed([1, 2])
    with pytest.raises(InputError, match="args"):
        r.feed({"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1.0, "args": [1]})
    with pytest.raises(InputError, match="flow id"):
        r.feed({"ph": "s", "id": -5, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 1.0})


def test_filter_applies_before_rewrite_and_sees_the_original_event():
    seen = []

    def fn(ev):
        seen.append((ev["pid"], ev.get("args", {}).get("correlation")))
        return ev.get("cat") == "kernel"

    r = rw(rank=1, flt=EventFilter(fn=fn))
    out = feed_all(r, KINETO_EVENTS)
    assert [e["name"] for e in out] == ["gemm"]
    assert (0, 8198) in seen  # original pid and correlation
    assert all(p != "Spans" or c is None for p, c in seen)


# ------------------------------------------------------------------ labels
def labels_of(events, rank=1, flt=None):
    r = rw(rank=rank, flt=flt)
    feed_all(r, events)
    return r, list(rank_metadata(r))


def test_labels_one_name_per_kept_process_and_sort_order():
    rank = 1
    r, md = labels_of(KINETO_EVENTS, rank)
    base = (rank + 1) * 10000
    names = {m["pid"]: m["args"]["name"] for m in md if m["name"] == "process_name"}
    sorts = {m["pid"]: m["args"]["sort_index"] for m in md if m["name"] == "process_sort_index"}
    assert sorted(names) == sorted({base + 5000, base + 0, base + 5001})  # pid "" is in the CPU one
    assert base + 3 not in names  # GPU 3 had metadata only: no track
    # TraceLens' convention exactly; one GPU kept (GPU 3 is idle): no device index
    assert names[base + 5000] == "RANK 1 - CPU"
    assert names[base + 0] == "RANK 1 - GPU"
    assert names[base + 5001] == "RANK 1 - Spans"
    assert sorts[base + 5000] == rank * 1000 + 0
    assert sorts[base + 0] == rank * 1000 + 100
    assert rank * 1000 + 900 <= sorts[base + 5001] < (rank + 1) * 1000
    assert sum(m["name"] == "process_name" for m in md) == len(names)
    assert sum(m["name"] == "process_sort_index" for m in md) == len(sorts)
    # Kineto's own process_sort_index (19392, 16777216, 536870912) is not copied
    assert set(sorts.values()) < set(range(rank * 1000, (rank + 1) * 1000))
    labels = {m["pid"]: m["args"]["labels"] for m in md if m["name"] == "process_labels"}
    assert labels[base + 0] == "rank 1, pid 0, python3, GPU 0"  # Kineto names devices after the program
    assert labels[base + 5000] == "rank 1, pid 19392, python3, CPU"
    assert labels[base + 5001] == "rank 1, pid 'Spans'"
    # original thread names kept and remapped; synthetic tids named after the original
    threads = {(m["pid"], m["tid"]): m["args"]["name"] for m in md if m["name"] == "thread_name"}
    assert threads[(base + 0, 7)] == "stream 7"
    assert threads[(base + 5000, 19392)] == "thread 19392 (python3)"
    assert threads[(base + 5001, 1_000_000_000)] == "PyTorch Profiler"
    assert threads[(base + 5000, 1_000_000_001)] == "tid ''"  # never empty: Perfetto import error
    tsi = [(m["pid"], m["tid"], m["args"]["sort_index"]) for m in md if m["name"] == "thread_sort_index"]
    assert tsi == [(base + 5000, 19392, 19392)]
    assert all(m["args"]["rank"] == rank and m["ph"] == "M" for m in md)


def test_labels_after_keep_cat_kernel_only_the_gpu_is_named():
    rank = 0
    r, md = labels_of(KINETO_EVENTS, rank, EventFilter(keep_cat=frozenset({"kernel"})))
    pids = {m["pid"] for m in md}
    assert pids == {10000}  # GPU 0 of rank 0; the CPU process kept nothing
    names = [m["args"]["name"] for m in md if m["name"] == "process_name"]
    assert names == ["RANK 0 - GPU"]
    assert [m["args"]["name"] for m in md if m["name"] == "thread_name"] == ["stream 7"]


def test_labels_gpu_without_process_labels_is_recognised_by_its_events():
    evs = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 123456, "tid": 1, "ts": 1.0, "dur": 1.0},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 5, "tid": 7, "ts": 2.0, "dur": 1.0},
        {"ph": "X", "cat": "cpu_op", "name": "overhead", "pid": -1, "tid": 0, "ts": 2.0, "dur": 1.0},
    ]
    r, md = labels_of(evs, rank=4)
    names = {m["pid"]: m["args"]["name"] for m in md if m["name"] == "process_name"}
    sorts = {m["pid"]: m["args"]["sort_index"] for m in md if m["name"] == "process_sort_index"}
    base = 50000
    assert names[base + 5] == "RANK 4 - GPU" and sorts[base + 5] == 4105
    assert names[base + 5000] == "RANK 4 - CPU" and sorts[base + 5000] == 4000
    assert not names[base + 5001].startswith(("RANK 4 - CPU", "RANK 4 - GPU"))
    assert 4900 <= sorts[base + 5001] < 5000


def test_labels_on_a_real_trace_skip_idle_devices(shared_fixtures, h):
    """h100_bert_small has metadata for 16 GPUs and events on GPU 0 only."""
    trace = h.cached_input(shared_fixtures / "real" / "h100_bert_small.json.gz")
    evs = trace["traceEvents"]
    rank = 3
    r, md = labels_of(evs, rank)
    event_pids = {e["pid"] for e in evs if e["ph"] != "M" and e.get("cat") != "python_function"}
    meta_pids = {e["pid"] for e in evs if e["ph"] == "M"}
    idle = {p for p in meta_pids - event_pids if isinstance(p, int)}
    assert len(idle) == 15  # precondition: the fixture really has idle devices
    names = {m["pid"]: m["args"]["name"] for m in md if m["name"] == "process_name"}
    assert len(names) == len(event_pids - {""})  # Kineto's pid "" is in the CPU process
    assert not {(rank + 1) * 10000 + p for p in idle} & {m["pid"] for m in md}
    assert names[(rank + 1) * 10000 + 0] == "RANK 3 - GPU"  # 16 GPUs listed, 1 with events
    cpu = [p for p in event_pids if isinstance(p, int) and p >= 5000]
    assert len(cpu) == 1
    assert names[r.pids[cpu[0]]] == "RANK 3 - CPU"
    labels = {m["pid"]: m["args"]["labels"] for m in md if m["name"] == "process_labels"}
    assert labels[r.pids[cpu[0]]] == f"rank 3, pid {cpu[0]}, python3, CPU"


def test_labels_device_index_only_where_a_rank_has_several_gpus():
    """TraceLens' names; the index tells the devices apart where a rank kept several."""
    evs = [dict(e) for e in KINETO_EVENTS]
    evs.append({"ph": "X", "cat": "kernel", "name": "k3", "pid": 3, "tid": 7, "ts": 5.0, "dur": 1.0})
    r, md = labels_of(evs, rank=2)
    names = {m["pid"]: m["args"]["name"] for m in md if m["name"] == "process_name"}
    assert names[30000] == "RANK 2 - GPU 0" and names[30003] == "RANK 2 - GPU 3"
    assert names[30000 + 5000] == "RANK 2 - CPU"
    r, md = labels_of(evs, rank=2, flt=EventFilter(name_regex="^k3$"))
    names = {m["pid"]: m["args"]["name"] for m in md if m["name"] == "process_name"}
    assert names == {30003: "RANK 2 - GPU"}  # one GPU kept after the filter


# ------------------------------------------------------------------ filter rule
@pytest.mark.parametrize(
    "flt",
    [
        {},
        {"include_pyfunc": True},
        {"keep_cat": ["kernel", "ac2g"]},
        {"drop_cat": ["cpu_op"]},
        {"name_regex": r"^aten::"},
        {"include_pyfunc": True, "drop_cat": ["cpu_instant_event"], "name_regex": "a"},
    ],
)
def test_event_filter_matches_the_documented_rule(flt, shared_fixtures, h):
    evs = h.cached_input(shared_fixtures / "real" / "h100_bert_small.json.gz")["traceEvents"]
    ef = EventFilter(
        include_pyfunc=flt.get("include_pyfunc", False),
        keep_cat=frozenset(flt["keep_cat"]) if "keep_cat" in flt else None,
        drop_cat=frozenset(flt.get("drop_cat", ())),
        name_regex=flt.get("name_regex"),
    )
    got = [i for i, e in enumerate(evs) if e["ph"] != "M" and ef.keep(e)]
    want = [i for i, e in enumerate(evs) if e["ph"] != "M" and h.kept(e, **flt)]
    assert got == want and 0 < len(want)
    assert EventFilter.from_header(ef.to_header()).to_header() == ef.to_header()


# ------------------------------------------------------------------ trailer
def _after_events(obj):
    keys = list(obj)
    return {k: obj[k] for k in keys[keys.index("traceEvents") + 1 :]}


@pytest.mark.parametrize(
    "name",
    [
        "mi300_resnet_rank0.json.gz",
        "a100_nccl_rank0.json.gz",
        "h100_bert_small.json.gz",
        "mi250_minitoy.json.gz",
        "a100_no_distinfo_epoch_ts.json.gz",
    ],
)
@pytest.mark.parametrize("window", [1 << 16, 3000])
def test_trailer_of_real_traces(name, window, shared_fixtures, h):
    path = shared_fixtures / "real" / name
    raw = gzip.decompress(path.read_bytes())
    obj = h.cached_input(path)
    want = _after_events(obj)
    got = find_trailer(raw[-window:])
    assert got == want
    if "baseTimeNanoseconds" in want:
        assert got["baseTimeNanoseconds"] == obj["baseTimeNanoseconds"]


def test_trailer_of_ddp4_has_only_trace_name(ddp4_files, h):
    raw = gzip.decompress(ddp4_files[0].read_bytes())
    got = find_trailer(raw[-20000:])
    assert got == {"traceName": h.cached_input(ddp4_files[0])["traceName"]}


def test_trailer_skips_device_properties_and_tricky_strings():
    ev = '{"ph": "X", "name": "a]\\"}], \\\\", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2}'
    tail = (
        '{"traceEvents": [' + ev + ",\n" + ev + "],\n"
        '"deviceProperties": [{"id": 0, "name": "GPU ]}\\" x"}, {"id": 1}],\n'
        '"distributedInfo": {"rank": 5, "world_size": 8, "pg_config": [{"ranks": [0, 1]}]},\n'
        '"traceName": "/tmp/a]b}\\"c.json", "baseTimeNanoseconds": 1790857026000000000}\n'
    ).encode()
    want = {
        "deviceProperties": [{"id": 0, "name": 'GPU ]}" x'}, {"id": 1}],
        "distributedInfo": {"rank": 5, "world_size": 8, "pg_config": [{"ranks": [0, 1]}]},
        "traceName": '/tmp/a]b}"c.json',
        "baseTimeNanoseconds": 1790857026000000000,
    }
    assert find_trailer(tail) == want
    # the window starts inside the events: still found
    assert find_trailer(tail[40:]) == want


def test_trailer_numbers_are_exact():
    """Keys after the events keep every digit (no float in between)."""
    tail = (
        b'{"traceEvents": [{"ph": "X", "ts": 1}], "baseTimeNanoseconds": 1790857026000000001, '
        b'"x": 0.12345678901234567890123, "big": 123456789012345678901234567890, "f": 1.50}'
    )
    got = find_trailer(tail)
    assert got["baseTimeNanoseconds"] == 1790857026000000001
    assert got["x"] == Decimal("0.12345678901234567890123") and str(got["x"]) == "0.12345678901234567890123"
    assert got["big"] == 123456789012345678901234567890
    assert str(got["f"]) == "1.50"


def test_trailer_none_for_truncated_and_empty_for_array_or_no_keys():
    full = b'{"traceEvents": [{"ph": "X", "ts": 1}], "baseTimeNanoseconds": 5}'
    assert find_trailer(full) == {"baseTimeNanoseconds": 5}
    assert find_trailer(full[:-1]) is None
    assert find_trailer(full[:-25]) is None
    assert find_trailer(b"") is None
    assert find_trailer(b'[{"ph": "X", "ts": 1}]\n') == {}
    assert find_trailer(b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "ts": 1}]}') == {}


# ------------------------------------------------------------------ writer
@pytest.mark.parametrize(
    "name, codec",
    [
        ("a.json", "plain"),
        ("a.json.gz", "gzip"),
        ("A.JSON.GZ", "gzip"),
        ("a.json.zst", "zstd"),
        ("a.json.zstd", "zstd"),
    ],
)
def test_codec_for(name, codec):
    assert codec_for(name) == codec


def _pieces_from(data: bytes, cuts):
    out, prev = [], 0
    for c in list(cuts) + [len(data)]:
        out.append(data[prev:c])
        prev = c
    return out


@pytest.mark.parametrize("codec", ["plain", "gzip", "zstd"])
@pytest.mark.parametrize("on_disk", [False, True])
def test_spliced_pieces_are_one_valid_stream(codec, on_disk, tmp_path, ddp4_files, h):
    data = gzip.decompress(ddp4_files[0].read_bytes())
    parts = _pieces_from(data, [5, 5, 100_000, 1_500_000])  # includes an empty piece
    assert b"" in parts
    buf = io.BytesIO()
    sp = Splicer(buf, codec)
    for i, part in enumerate(parts):
        w = PieceWriter(codec, str(tmp_path / f"p{i}") if on_disk else None)
        for j in range(0, len(part), 70_000):
            w.write(part[j : j + 70_000])
        piece = w.finish()
        assert piece.length == len(part)
        sp.add(piece)
    sp.add(piece_of(codec, b"\n"))
    sp.finish()
    raw = buf.getvalue()
    assert sp.length == len(data) + 1
    if codec == "gzip":
        assert raw[:2] == b"\x1f\x8b"
        assert h.gunzip_one_member(raw) == data + b"\n"
        assert gzip.decompress(raw) == data + b"\n"
    elif codec == "zstd":
        assert h.unzstd(raw) == data + b"\n"
    else:
        assert raw == data + b"\n"


def test_crc32_combine_matches_zlib():
    rnd = random.Random(7)
    for _ in range(30):
        a = rnd.randbytes(rnd.randrange(0, 3000))
        b = rnd.randbytes(rnd.choice([0, 1, 17, 1000, 70000]))
        assert _py_crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_check_output_path_refuses_inputs_and_existing(tmp_path):
    inp = tmp_path / "in.json"
    inp.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(inp)
    for target in (inp, link, tmp_path / "." / "in.json"):
        with pytest.raises(OutputError, match="input"):
            check_output_path(Path(target), force=True, inputs=[str(inp)])
    existing = tmp_path / "out.json"
    existing.write_text("x")
    with pytest.raises(OutputError, match="exists"):
        check_output_path(existing, force=False, inputs=[str(inp)])
    check_output_path(existing, force=True, inputs=[str(inp)])
    check_output_path(tmp_path / "new.json", force=False, inputs=[str(inp)])
    d = tmp_path / "dir.json"
    d.mkdir()
    with pytest.raises(OutputError):
        check_output_path(d, force=True, inputs=[])


def test_atomic_output_commit_and_abort(tmp_path):
    target = tmp_path / "out.json"
    a = AtomicOutput(str(target))
    a.file.write(b"hello")
    assert not target.exists()  # nothing under the name before commit
    assert len(list(tmp_path.iterdir())) == 1
    a.commit()
    assert target.read_bytes() == b"hello"
    assert list(tmp_path.iterdir()) == [target]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
    b = AtomicOutput(str(target), force=True)
    b.file.write(b"other")
    b.abort()
    assert target.read_bytes() == b"hello"
    assert list(tmp_path.iterdir()) == [target]
    with pytest.raises(OutputError):
        AtomicOutput(str(target))


# ------------------------------------------------------------------ exact numbers
def test_dumps_exact_keeps_every_digit():
    ev = {
        "ts": Decimal("1795938942104588.813"),
        "dur": Decimal("0.001"),
        "args": {"Comms Id": 2**64 + 5, "neg": -(2**63) - 1, "f": 1.5, "n": None},
    }
    text = dumps_exact(ev)
    assert b"1795938942104588.813" in text and b"0.001" in text
    import json

    parsed = json.loads(text, parse_float=Decimal)
    assert parsed["ts"] == Decimal("1795938942104588.813")
    assert parsed["args"]["Comms Id"] == 2**64 + 5
    assert parsed["args"]["neg"] == -(2**63) - 1
    assert parsed["args"]["f"] == Decimal("1.5") and parsed["args"]["n"] is None
    with pytest.raises(TypeError):
        dumps_exact({"ts": Decimal("NaN")})


@pytest.mark.parametrize("exc", [KeyboardInterrupt, TerminateSignal])
@pytest.mark.parametrize("ev", [{"ts": Decimal("1.5")}, {"ts": Decimal("1.5"), "id": 2**64 + 1}])
def test_dumps_exact_lets_an_interruption_through(monkeypatch, exc, ev):
    """Ctrl-C (or the SIGTERM handler) firing inside orjson's ``default=`` callback
    arrives wrapped in JSONEncodeError; it must not be swallowed by the retry for
    big integers (it was: CI saw a SIGINT'd merge finish with exit 0)."""
    import tracefuse_stream.exactjson as rewrite_mod

    def interrupted(obj):
        raise exc()

    monkeypatch.setattr(rewrite_mod, "default_number", interrupted)
    with pytest.raises(exc):
        dumps_exact(ev)
