"""The why's one-pass timeline (analyze/timeline.py, csrc/timeline.c).

* the compiled ``Timeline`` and :class:`PyTimeline` give the same rows for the same
  events (random nested / overlapping / equal-span events, several threads and GPU
  streams; the seed is printed, ``TIMELINE_SEED`` replays one);
* a stretch summed from segments is the stretch partitioned directly (pieces that meet
  at a cut are one piece, gaps counted once);
* info's pass gives the same segments with the kernel's walk recording events and with
  Python decoding every event, on text full of what the walk hands over (escapes,
  non-ASCII names, odd pids and tids, exponents, missing or negative durations).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from tracefuse_stream import native
from tracefuse_stream.analyze.onepass import scan_file
from tracefuse_stream.analyze.stretch import breakdown
from tracefuse_stream.analyze.timeline import (
    PyTimeline,
    Segments,
    TimelineFeed,
    unpack_rows,
    value_key,
)
from tracefuse_stream.plan.planner import plan_file

needs_kernel = pytest.mark.skipif(native.kernel is None, reason="the compiled kernel is not built here")


def _seed() -> int:
    seed = int(os.environ.get("TIMELINE_SEED", random.SystemRandom().randrange(2**31)))
    print(f"TIMELINE_SEED={seed}")
    return seed


def _events(rnd: random.Random, n: int) -> List[Tuple[int, int, int, bytes, bytes, bytes]]:
    """(kind, a, b, name, thread, dev): nested calls, overlaps, equal spans, zero lengths."""
    out = []
    threads = [value_key(7) + value_key(7), value_key(7) + value_key("gloo")]
    devs = [value_key(0), value_key(1)]
    names = [
        b"aten::mm",
        b"aten::linear",
        b"train_step",
        b"ProfilerStep#3",
        b"gemm",
        "\u00e9t\u00e9".encode(),
    ]
    t = 0
    for _ in range(n):
        t += rnd.choice([0, 0, 1, 5, 50])
        kind = rnd.choice([0, 0, 1, 2])
        d = rnd.choice([0, 1, 10, 100, 1000])
        a = max(0, t - rnd.choice([0, 0, 3, 40]))
        out.append((kind, a, a + d, rnd.choice(names), rnd.choice(threads), rnd.choice(devs)))
        if rnd.random() < 0.1:
            out.append(out[-1])  # an exact duplicate
        if rnd.random() < 0.1:
            k, a2, b2, _nm, th, dv = out[-1]
            out.append((1 - k if k < 2 else 2, a2, b2, rnd.choice(names), th, dv))  # the same span
    return out


def _cuts(rnd: random.Random, hi: int) -> List[int]:
    return sorted(set([0, hi] + [rnd.randrange(hi) for _ in range(rnd.randrange(1, 12))]))


def _resolved(out: Any) -> Any:
    """Rows with their name ids replaced by the names (ids are in first-seen order)."""
    names, packed_t, packed_d = out
    rows_t, rows_d = [unpack_rows(p) for p in packed_t], [unpack_rows(p) for p in packed_d]
    res = [
        [r[:2] + ((names[r[2]] if r[2] >= 0 else None),) + tuple(r[3:]) for r in rows]
        for rows in rows_t + rows_d
    ]
    return [sorted(rows, key=repr) for rows in res]


@needs_kernel
def test_kernel_and_python_timelines_give_the_same_rows() -> None:
    rnd = random.Random(_seed())
    for case in range(60):
        evs = _events(rnd, rnd.randrange(1, 300))
        # the kernel puts a thread's events in order by moving the few out of place, and
        # sorts them when that takes too many moves: almost in order (as generated, as a
        # trace lists them), shuffled, and the two halves swapped (moved into place until
        # the moves run out, then sorted)
        if case % 3 == 1:
            rnd.shuffle(evs)
        elif case % 3 == 2:
            evs = evs[len(evs) // 2 :] + evs[: len(evs) // 2]
        c, p = native.kernel.Timeline(), PyTimeline()  # type: ignore[union-attr]
        for e in evs:
            c.add(*e)
            p.add(*e)
        assert len(c) == len(p) == len(evs)
        hi = max(e[2] for e in evs) + 1
        cuts = _cuts(rnd, hi)
        units = (
            [value_key(7) + value_key(7), value_key(7) + value_key("gloo")],
            [value_key(0), value_key(1)],
        )
        assert _resolved(c.segments(cuts, *units)) == _resolved(p.segments(cuts, *units))


def test_timeline_refuses_a_bad_kind_and_unordered_cuts() -> None:
    impls: List[Any] = [PyTimeline()] + ([native.kernel.Timeline()] if native.kernel is not None else [])
    for t in impls:
        with pytest.raises(ValueError, match="kind"):
            t.add(3, 0, 1, b"x", b"t", b"d")
        with pytest.raises(ValueError, match="increasing"):
            t.segments([5, 5], [], [])


def _feed(evs: List[Dict[str, Any]]) -> TimelineFeed:
    feed = TimelineFeed()
    for e in evs:
        feed.offer(e)
    return feed


def _random_trace(rnd: random.Random) -> Tuple[List[Dict[str, Any]], Dict[int, Tuple[int, int]], List[int]]:
    evs: List[Dict[str, Any]] = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0,
                                  "dur": 5000, "pid": 1, "tid": 1}]  # fmt: skip
    t = 0
    for _ in range(rnd.randrange(5, 200)):
        t += rnd.choice([0, 1, 7, 30])
        d = rnd.choice([0, 1, 3, 40, 300])
        cat = rnd.choice(["cpu_op", "cpu_op", "user_annotation", "kernel"])
        name = rnd.choice(["aten::mm", "aten::add", "fwd", "gemm", "relu"])
        evs.append({"ph": "X", "cat": cat, "name": name, "ts": t, "dur": d, "pid": 1 if cat != "kernel" else 0,
                    "tid": 1 if cat != "kernel" else rnd.choice([7, 8])})  # fmt: skip
    arrivals = sorted({rnd.randrange(1, 5000_000) for _ in range(rnd.randrange(1, 8))})
    for a in arrivals:
        evs.append({"ph": "X", "cat": "kernel", "name": "nccl", "ts": a / 1000, "dur": 1, "pid": 0, "tid": 7})
    return evs, {1: (0, 5000_000)}, arrivals


def test_a_stretch_summed_from_segments_is_the_stretch_partitioned_directly() -> None:
    """Cut at every arrival, then summed from the step start to one arrival: the same
    parts, counts, pieces and spans as a pass cut only there."""
    rnd = random.Random(_seed())
    for _ in range(30):
        evs, steps, arrivals = _random_trace(rnd)
        gpu = [(7, a) for a in arrivals]
        many = _feed(evs).finish(steps, arrivals, gpu)
        for hi in arrivals:
            one = _feed(evs).finish(steps, [hi], [(7, hi)])
            a, b = breakdown(many, 1, 0, hi, gpu_tid=7), breakdown(one, 1, 0, hi, gpu_tid=7)
            assert a is not None and b is not None
            assert a == b
            cpu = sum(p.ns for k, p in a.parts.items() if k[0] in ("op", "outside_ops"))
            gpu_ns = sum(p.ns for k, p in a.parts.items() if k[0] in ("kernel", "gpu_idle"))
            assert cpu == gpu_ns == a.stretch_ns == hi


def test_a_stretch_not_cut_by_the_pass_is_none() -> None:
    segs = _feed([]).finish({1: (0, 100)}, [50], [])
    assert breakdown(segs, 1, 0, 60) is None
    empty = breakdown(segs, 1, 0, -5)  # arrived before its step started: an empty stretch
    assert empty is not None and empty.stretch_ns == 0 and empty.parts == {}


ODD_EVENTS = [
    '{"ph": "X", "cat": "cpu_op", "name": "esc\\"aped", "pid": 1, "tid": 1, "ts": 10, "dur": 5}',
    '{"ph": "X", "cat": "cpu_op", "name": "\u00e9t\u00e9", "pid": 1, "tid": 1, "ts": 12, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "floatpid", "pid": 1.0, "tid": 1, "ts": 20, "dur": 5}',
    '{"ph": "X", "cat": "cpu_op", "name": "booltid", "pid": 1, "tid": true, "ts": 21, "dur": 5}',
    '{"ph": "X", "cat": "cpu_op", "name": "strtid", "pid": 1, "tid": "1", "ts": 22, "dur": 5}',
    '{"ph": "X", "cat": "cpu_op", "name": "expts", "pid": 1, "tid": 1, "ts": 2.5e1, "dur": 5}',
    '{"ph": "X", "cat": "cpu_op", "name": "nodur", "pid": 1, "tid": 1, "ts": 30}',
    '{"ph": "X", "cat": "cpu_op", "name": "negdur", "pid": 1, "tid": 1, "ts": 31, "dur": -2}',
    '{"ph": "X", "cat": "cpu_op", "name": "minus0", "pid": -0, "tid": 1, "ts": 32, "dur": 2}',
    '{"ph": "X", "cat": "cpu_op", "name": "fine", "pid": 1, "tid": 1, "ts": 33.0004, "dur": 2.0006}',
    '{"ph": "X", "cat": "cpu_op", "name": "manydec", "pid": 1, "tid": 1, "ts": 34.0000000001, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "nopid", "tid": 1, "ts": 35, "dur": 1}',
    '{"ph": "X", "cat": "cpu\\u005fop", "name": "esccat", "pid": 1, "tid": 1, "ts": 36, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "far", "pid": 1, "tid": 1, "ts": 9223372036854775807, "dur": 0}',
    '{"ph": "X", "cat": "cpu_op", "name": "nearfar", "pid": 1, "tid": 1, "ts": 4611686018427387.903, "dur": 0}',
    '{"ph": "X", "cat": "cpu_op", "name": "longdur", "pid": 1, "tid": 1, "ts": 38, "dur": 4611686018427387.904}',
    '{"ph": "X", "cat": "user_annotation", "name": "ann", "pid": 1, "tid": 1, "ts": 9, "dur": 40}',
    '{"ph": "X", "cat": "kernel", "name": "k\\u00e9", "pid": 0, "tid": 7, "ts": 15, "dur": 5}',
    '{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 8, "ts": 16, "dur": 20}',
]


def _with_and_without_kernel(path: Path, monkeypatch: pytest.MonkeyPatch) -> List[Dict[Any, Any]]:
    """info's pass over ``path``, with the kernel and without: the breakdown of thread 1
    from 0 to 40 us (GPU stream 7), part by part."""
    got = []
    for kernel in ("1", "0"):
        monkeypatch.setenv("TRACEFUSE_KERNEL", kernel)
        fs = scan_file(plan_file(str(path), 0), ("collectives",))
        assert fs.scan is not None and isinstance(fs.scan.timeline, Segments)
        bd = breakdown(fs.scan.timeline, 1, 0, 40_000, gpu_tid=7)
        assert bd is not None
        got.append({k: (p.ns, p.count, p.piece, p.span) for k, p in bd.parts.items()})
    return got


@needs_kernel
def test_info_pass_segments_are_the_same_with_and_without_the_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk records what it can and hands the rest over; Python alone decodes every
    event: the same segments, on text full of events the walk hands over."""
    rnd = random.Random(_seed())
    head = [
        '{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100}',
        '{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "pid": 0, "tid": 7, "ts": 40, "dur": 5,'
        ' "args": {"Collective name": "allreduce", "Seq": 0, "Process Group Name": "0"}}',
    ]
    for trial in range(5):
        body = ODD_EVENTS[:]
        rnd.shuffle(body)
        path = tmp_path / f"rank0_{trial}.json"
        path.write_text('{"traceEvents": [' + ",\n".join(head + body) + "]}")
        got = _with_and_without_kernel(path, monkeypatch)
        assert got[0] == got[1]
        assert ("op", 'esc"aped') in got[0] and ("op", "\u00e9t\u00e9") in got[0]
        assert ("op", "floatpid") not in got[0] and ("op", "nodur") not in got[0]
        assert ("kernel", "k\u00e9") in got[0] and ("kernel", "gemm") in got[0]
    json.dumps(ODD_EVENTS)  # the events are text the test writes as is


def _kineto(ph: str, cat: str, name: str, pid: int, tid: int, ts: int, dur: int, args: str = "") -> str:
    """An event as Kineto lays it out (csrc/walk.c compares its separators and keys whole)."""
    text = f'{{\n    "ph": "{ph}", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid},\n    "ts": {ts}, "dur": {dur}'
    return text + (f',\n    "args": {{\n      {args}\n    }}' if args else "") + "\n  }"


@needs_kernel
def test_info_pass_segments_on_kinetos_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = [
        _kineto("X", "user_annotation", "ProfilerStep#1", 1, 1, 0, 100),
        _kineto("X", "cpu_op", "aten::linear", 1, 1, 2, 28, '"External id": 1, "Ev Idx": 0'),
        _kineto("X", "cpu_op", "aten::mm", 1, 1, 5, 10, '"External id": 2,"Record function id": 2'),
        _kineto("X", "user_annotation", "train_step", 1, 1, 1, 60),
        _kineto("X", "kernel", "gemm", 0, 7, 12, 20, '"stream": 7, "correlation": 5'),
        _kineto(
            "X",
            "kernel",
            "ncclDevKernel_AllReduce",
            0,
            7,
            40,
            5,
            '"Collective name": "allreduce", "Seq": 0, "Process Group Name": "0"',
        ),  # fmt: skip
    ]
    path = tmp_path / "rank0.json"
    path.write_text('{"traceEvents": [\n  ' + ",\n  ".join(events) + "\n]}")
    got = _with_and_without_kernel(path, monkeypatch)
    assert got[0] == got[1]
    assert ("op", "aten::mm") in got[0] and ("kernel", "gemm") in got[0]
    assert got[0][("op", "aten::mm")][0] == 10_000  # 10 us of self time, its child none
