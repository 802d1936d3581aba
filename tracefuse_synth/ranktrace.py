"""One rank's trace file: the top-level keys in one of Kineto's three orders, the
events of every step (rankgen.py) and Kineto's trailer of metadata and markers.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple

from tracefuse_synth.common import (
    _US,
    COMM_STREAM,
    COMPRESSIONS,
    COMPUTE_STREAM,
    DEFAULT_BASE_TIME_NS,
    GPU_SORT_BASE,
    KEY_ORDERS,
    MAX_TS_US,
    SPANS_SORT_INDEX,
    PathLike,
    _j,
    _t,
)
from tracefuse_synth.model import _Model
from tracefuse_synth.rankgen import _RankGen
from tracefuse_synth.schedule import START_LEAD_NS, WINDOW_SPREAD_NS, _StepPlan
from tracefuse_synth.sink import _device_properties, _Sink
from tracefuse_synth.templates import _K_ADD


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------
def _start_offset_ns(seed: int) -> int:
    """Seed-derived offset of the profiling window from the base (1e12..5e12 us)."""
    r = random.Random(f"{seed}:start")
    return r.randrange(1_000_000, 5_000_000) * 1_000_000_000 + r.randrange(1_000_000_000)


def write_rank_trace(
    path: PathLike,
    rank: int,
    world_size: int,
    *,
    target_bytes: Optional[int] = None,
    steps: Optional[int] = None,
    seed: int = 0,
    key_order: str = "base_first",
    base_time_ns: int = DEFAULT_BASE_TIME_NS,
    clock_offset_ns: int = 0,
    host_name: str = "node0",
    gpus_per_host: int = 8,
    compress: Optional[str] = None,
    kernel_jitter_ns: int = 0,
    first_step: int = 0,
    same_pid: bool = False,
    cpu_pid: Optional[int] = None,
    device: Optional[int] = None,
    start_ns: Optional[int] = None,
    layers: int = 4,
    trace_name: Optional[str] = None,
    compresslevel: Optional[int] = None,
    window_spread_ns: int = WINDOW_SPREAD_NS,
) -> Dict[str, Any]:
    """Stream one rank's Kineto-shaped trace to ``path`` and return a small summary.

    Give ``steps`` (number of training steps) or ``target_bytes`` (approximate
    uncompressed size: steps are added until it is reached). Same arguments give a
    byte-identical file, compressed ones included.

    ``start_ns`` is the absolute true (epoch ns) start of the profiling window shared
    by all ranks of a run; by default ``base_time_ns`` + a seed-derived offset, so pass
    it explicitly when ranks get different ``base_time_ns``. ``clock_offset_ns`` shifts
    every event of this rank (a host whose clock is off); ``kernel_jitter_ns`` moves the
    collective kernel ends by a seeded uniform amount in ``[-j, j]``. ``first_step``
    numbers ``ProfilerStep#N`` (profilers started at different times label the same
    training step differently). ``device`` defaults to ``rank % gpus_per_host``;
    ``same_pid`` gives every rank the CPU pid 542 (containers). ``window_spread_ns``:
    the profilers of a run start up to this long apart (a 300 us spread gives ~2 ranks
    of 1,024 the same start nanosecond, which the run check takes for one recording
    under two ranks: thousands of ranks need a wider one); the first step comes the
    same lead after the latest start.

    The summary has ``path``, ``rank``, ``n_steps``, ``n_collectives``, ``bytes``
    (uncompressed), ``file_bytes``, ``events`` and counts ``by_ph`` / ``by_cat`` /
    ``by_ph_cat`` (key "ph/cat"; metadata has cat "").
    """
    _check_args(
        rank, world_size, target_bytes, steps, key_order, compress, layers, gpus_per_host, kernel_jitter_ns
    )
    path = Path(path)
    ids = _process_ids(rank, gpus_per_host, same_pid, cpu_pid, device)
    if start_ns is None:
        start_ns = base_time_ns + _start_offset_ns(seed)
    shift = clock_offset_ns - base_time_ns
    if trace_name is None:
        trace_name = f"/tmp/tmp{random.Random(f'{seed}:name:{rank}').getrandbits(40):010x}.json"

    model = _Model(layers)
    win_start = _window_start(seed, rank, world_size, start_ns, shift, window_spread_ns)

    tmp = path.with_name(path.name + ".tracefuse-tmp")
    sink = _Sink(tmp, compress, compresslevel)
    try:
        head, tail = _top_level(
            rank, world_size, seed, key_order, gpus_per_host, host_name, base_time_ns, trace_name
        )
        sink.write(head + '  "traceEvents": [\n')
        g = _RankGen(sink, rank, seed, model, ids, shift, kernel_jitter_ns, world_size)
        _kernel_before_window(g, win_start, ids[3])
        first_ns = start_ns + START_LEAD_NS + max(0, window_spread_ns - WINDOW_SPREAD_NS)
        n, true_t = _steps(g, seed, model, first_step, first_ns, steps, target_bytes)
        end = true_t + shift
        if end // 1000 >= MAX_TS_US:
            raise ValueError("ts would exceed 2**43 us; use fewer steps or an earlier start_ns")
        _trailer_events(g, win_start, end, gpus_per_host, ids)
        g.flush()
        sink.write("".join(tail))
    except BaseException:
        sink.close()
        tmp.unlink()
        raise
    sink.close()
    os.replace(tmp, path)
    return _summary(g, path, rank, n)


def _window_offsets(seed: int, world_size: int, spread_ns: int) -> List[int]:
    """Every rank's window offset (ns after the run's common start, under ``spread_ns``),
    each distinct: separate processes never start their profilers at the same
    nanosecond, and the run check (tracefuse_stream/plan/runcheck.py) takes two ranks
    that do, with the same events, for one recording copied under two rank numbers. A
    rank drawing a lower rank's offset moves on by 1 ns (the draws of a 1,024-rank world
    in 300 us collide by chance); the others keep their draws."""
    cached = _OFFSETS.get((seed, world_size, spread_ns))
    if cached is not None:
        return cached
    taken: Set[int] = set()
    out = []
    for r in range(world_size):
        off = int(spread_ns * random.Random(f"{seed}:window:{r}").random())
        while off in taken:
            off += 1
        taken.add(off)
        out.append(off)
    _OFFSETS.clear()  # one world at a time per process: bounded
    _OFFSETS[(seed, world_size, spread_ns)] = out
    return out


_OFFSETS: Dict[Tuple[int, int, int], List[int]] = {}


def _window_start(
    seed: int, rank: int, world_size: int, start_ns: int, shift: int, spread_ns: int = WINDOW_SPREAD_NS
) -> int:
    """Where this rank's profiling window starts (rank ts ns): up to ``spread_ns`` after
    the run's common start, as profilers on different processes start apart."""
    if 0 <= rank < world_size:
        off = _window_offsets(seed, world_size, spread_ns)[rank]
    else:
        off = int(spread_ns * random.Random(f"{seed}:window:{rank}").random())
    win_start = start_ns + off + shift
    if win_start < 0:
        raise ValueError("events would have a negative ts: start_ns is before base_time_ns")
    return win_start


def _process_ids(
    rank: int, gpus_per_host: int, same_pid: bool, cpu_pid: Optional[int], device: Optional[int]
) -> Tuple[int, int, int, int]:
    """``(cpu_pid, main_tid, bwd_tid, device)`` of a rank: distinct per rank, or the
    same pid in every rank's container (``same_pid``)."""
    if device is None:
        device = rank % gpus_per_host
    if cpu_pid is None:
        cpu_pid = 542 if same_pid else 11777 + rank
    return cpu_pid, cpu_pid, 639 if same_pid else cpu_pid + 9503, device


def _check_args(
    rank: int,
    world_size: int,
    target_bytes: Optional[int],
    steps: Optional[int],
    key_order: str,
    compress: Optional[str],
    layers: int,
    gpus_per_host: int,
    kernel_jitter_ns: int,
) -> None:
    if (target_bytes is None) == (steps is None):
        raise ValueError("give exactly one of target_bytes and steps")
    if steps is not None and steps < 1:
        raise ValueError("steps must be >= 1")
    if target_bytes is not None and target_bytes < 1:
        raise ValueError("target_bytes must be >= 1")
    if key_order not in KEY_ORDERS:
        raise ValueError(f"key_order must be one of {KEY_ORDERS}, not {key_order!r}")
    if compress not in COMPRESSIONS:
        raise ValueError(f"compress must be None, 'gzip' or 'zstd', not {compress!r}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
    if layers < 1 or gpus_per_host < 1 or kernel_jitter_ns < 0:
        raise ValueError("layers and gpus_per_host must be >= 1, kernel_jitter_ns >= 0")


def _top_level(
    rank: int,
    world_size: int,
    seed: int,
    key_order: str,
    gpus_per_host: int,
    host_name: str,
    base_time_ns: int,
    trace_name: str,
) -> Tuple[str, List[str]]:
    """The text before ``"traceEvents": [`` and the pieces after the events, in
    ``key_order`` (Kineto writes all three orders)."""
    dist = {
        "backend": "nccl",
        "rank": rank,
        "world_size": world_size,
        "pg_count": 1,
        "pg_config": [
            {
                "pg_name": "0",
                "pg_desc": "default_pg",
                "backend_config": "cuda:nccl",
                "pg_size": world_size,
                "ranks": list(range(world_size)),
            }
        ],
        "nccl_version": "2.21.5",
    }
    ident = random.Random(f"{seed}:trace_id:{rank}").getrandbits(128)
    head = [
        '{\n  "schemaVersion": 1,\n',
        f'  "deviceProperties": {_device_properties(gpus_per_host)},\n',
        f'  "trace_id": "{ident:032X}",\n  "with_stack": 1,\n  "profile_memory": 1,\n  "record_shapes": 1,\n',
    ]
    dist_s = f'  "distributedInfo": {json.dumps(dist)},\n'
    host_s = f'  "host_name": {_j(host_name)},\n'
    time_s = f'  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": {base_time_ns},\n'
    name_s = f'  "traceName": {_j(trace_name)}'
    if key_order == "base_first":
        head += [dist_s, host_s, time_s]
        tail = ["\n  ],\n", name_s, "\n}\n"]
    elif key_order == "base_after":
        head += [dist_s, host_s]
        tail = ["\n  ],\n", name_s, ",\n", time_s.rstrip(",\n"), "\n}\n"]
    else:  # distinfo_after: on-demand traces
        head += [host_s]
        tail = ["\n  ],\n", dist_s, name_s, ",\n", time_s.rstrip(",\n"), "\n}\n"]
    return "".join(head), tail


def _kernel_before_window(g: _RankGen, win_start: int, device: int) -> None:
    """A kernel whose launch predates the window: an "f" with no "s" (as in real traces)."""
    g.corr += 1
    k0 = win_start + 20 * _US
    g.buf.append(
        f'  {{\n    "ph": "X", "cat": "kernel", "name": {_K_ADD[1]}, "pid": {device}, '
        f'"tid": {COMPUTE_STREAM},\n    "ts": {_t(k0)}, "dur": {_t(7808)},\n    "args": {{\n'
        f'      "External id": 0,      "queued": 0, "device": {device}, "context": 1,'
        f'      "stream": {COMPUTE_STREAM}, "correlation": 1,      {_K_ADD[2]}\n    }}\n  }}'
    )
    g.buf.append(
        f'  {{\n    "ph": "f", "id": 1, "pid": {device}, "tid": {COMPUTE_STREAM}, '
        f'"ts": {_t(k0)},\n    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }}'
    )
    g.count("X", "kernel")
    g.count("f", "ac2g")
    g.free[COMPUTE_STREAM] = k0 + 7808 + 1000


def _steps(
    g: _RankGen,
    seed: int,
    model: _Model,
    first_step: int,
    true_t: int,
    steps: Optional[int],
    target_bytes: Optional[int],
) -> Tuple[int, int]:
    """Render ``steps`` training steps, or steps until ``target_bytes`` are written,
    from the true time ``true_t``; returns (steps rendered, true end time)."""
    n = 0
    while True:
        plan = _StepPlan(seed, n, model)
        g.step(n, first_step + n, true_t, plan)
        true_t += plan.length
        n += 1
        if steps is not None:
            if n >= steps:
                break
        elif g.sink.bytes >= target_bytes:  # type: ignore[operator]
            break
    return n, true_t


def _trailer_events(
    g: _RankGen, win_start: int, end: int, gpus_per_host: int, ids: Tuple[int, int, int, int]
) -> None:
    """Top-level python frames (ids 1 and 2), then Kineto's trailer: metadata for the
    CPU process and for every visible GPU, the profiler span and window markers."""
    mth = g.main_th
    for pid_, parent, name, a in (
        (1, "null", "train.py(212): <module>", 30),
        (2, 1, "train.py(188): main", 35),
    ):
        g.x_cpu(
            "python_function",
            _j(name),
            mth,
            win_start + a * _US,
            end + (100 - a) * _US - win_start - a * _US,
            f'"Python parent id": {parent}, "Python id": {pid_}, "Ev Idx": {g.ev}',
        )
        g.ev += 1
    _metadata(g, _t(win_start + 150 * _US), gpus_per_host, ids)
    _spans(g, win_start, end)


def _metadata(g: _RankGen, mts: str, gpus_per_host: int, ids: Tuple[int, int, int, int]) -> None:
    """Process and thread names and sort indices, as Kineto writes them."""
    cpu_pid, main_tid, bwd_tid, device = ids

    def meta(name: str, pid: Any, tid: Any, args: str) -> None:
        g.buf.append(
            f'  {{\n    "name": "{name}", "ph": "M", "ts": {mts}, "pid": {pid}, '
            f'"tid": {tid},\n    "args": {{\n      {args}\n    }}\n  }}'
        )
        g.count("M", "")

    meta("process_name", cpu_pid, 0, '"name": "python3"')
    meta("process_labels", cpu_pid, 0, '"labels": "CPU"')
    meta("process_sort_index", cpu_pid, 0, f'"sort_index": {cpu_pid}')
    for dv in range(gpus_per_host):
        meta("process_name", dv, 0, '"name": "python3"')
        meta("process_labels", dv, 0, f'"labels": "GPU {dv}"')
        meta("process_sort_index", dv, 0, f'"sort_index": {GPU_SORT_BASE + dv}')
    for stream in (COMPUTE_STREAM, COMM_STREAM):
        meta("thread_name", device, stream, f'"name": "stream {stream} "')
        meta("thread_sort_index", device, stream, f'"sort_index": {stream}')
    for tid, tname in ((main_tid, "python3"), (bwd_tid, "python3"), (bwd_tid, "pt_autograd_0")):
        meta("thread_name", cpu_pid, tid, f'"name": "thread {tid} ({tname})"')
        meta("thread_sort_index", cpu_pid, tid, f'"sort_index": {tid}')


def _spans(g: _RankGen, win_start: int, end: int) -> None:
    """The profiler's span ("Spans" process) and the window's start/end markers."""
    ws = _t(win_start)
    g.buf.append(
        f'  {{\n    "ph": "X", "cat": "Trace", "ts": {ws}, "dur": {_t(end - win_start)},\n'
        f'    "pid": "Spans", "tid": "PyTorch Profiler",\n'
        f'    "name": "PyTorch Profiler (0)",\n    "args": {{\n      "Op count": 0\n    }}\n  }}'
    )
    g.count("X", "Trace")
    g.buf.append(
        f'  {{\n    "name": "process_sort_index", "ph": "M", "ts": {ws},\n'
        f'    "pid": "Spans", "tid": 0,\n    "args": {{\n      "sort_index": '
        f"{SPANS_SORT_INDEX}\n    }}\n  }}"
    )
    g.count("M", "")
    g.buf.append(
        f'  {{\n    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",\n'
        f'    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": {ws}\n  }}'
    )
    g.buf.append(
        f'  {{\n    "name": "Record Window End", "ph": "i", "s": "g",\n'
        f'    "pid": "", "tid": "", "ts": {_t(end + 300 * _US)}\n  }}'
    )
    g.count("i", "", 2)


def _summary(g: _RankGen, path: Path, rank: int, n: int) -> Dict[str, Any]:
    by_ph: Dict[str, int] = {}
    by_cat: Dict[str, int] = {}
    by_ph_cat: Dict[str, int] = {}
    for (ph, cat), c in sorted(g.counts.items()):
        by_ph[ph] = by_ph.get(ph, 0) + c
        by_cat[cat] = by_cat.get(cat, 0) + c
        by_ph_cat[f"{ph}/{cat}"] = c
    return {
        "path": str(path),
        "rank": rank,
        "n_steps": n,
        "n_collectives": g.n_coll,
        "bytes": g.sink.bytes,
        "file_bytes": path.stat().st_size,
        "events": g.n_events,
        "by_ph": by_ph,
        "by_cat": by_cat,
        "by_ph_cat": by_ph_cat,
    }
