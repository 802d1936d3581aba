"""Multi-rank GPU runs with a KNOWN slow rank, built by a script from one real trace.

The source is ``../shared/fixtures/real/a100_nccl_rank0.json.gz`` (see that folder's
README.md): rank 0 of a 2-rank NCCL DDP job on A100s, 3 profiled steps
(``ProfilerStep#4``, ``#5``, ``#6``), compute kernels on stream 7, NCCL kernels on
stream 40 (per step 2 ``ncclKernel_Broadcast_*`` at its start and 5
``ncclKernel_AllReduce_*`` in backward; their args carry ``Collective name``, ``In msg
nelems``, ``Process Group Name``..., no ``Seq``), launched by ``cudaLaunchKernel`` /
``cudaLaunchKernelExC`` on the main thread (forward, optimizer) and the autograd thread
(backward, the all_reduces), linked by ``ac2g`` flows and ``correlation``.

Every builder writes ``world_size`` copies of that file into a folder, one per rank:
their ``distributedInfo.rank`` differ (and ``world_size``, ``pg_config`` and the
``Group size`` / ``Process Group Ranks`` args of the comms events follow the run's size),
each gets its own ``trace_id``, and ONE rank is made slower by a known amount:

* :func:`build_longer_kernels`: in every chosen step, the compute kernels (``cat:
  kernel``, not NCCL) between the previous NCCL kernel and the chosen NCCL kernel
  last longer, ``added_us`` in total (each by the same factor);
* :func:`build_late_launches`: in every chosen step, the host stalls ``added_us``
  before a chosen CPU launch call: that launch and every later CPU event start later,
  the CPU ops open at that moment last longer, and every kernel/memcpy/memset launched
  at or after it (by ``correlation``) starts later, so the GPU idles; work launched
  before it keeps its time.

In both, every later event of the slow rank moves by the added time, so the trace stays
consistent (order on each thread and stream, launch before kernel, flows with their
slices). With ``peers_wait`` (the default) the other ranks wait for it as NCCL would:
their copy of the chosen NCCL kernel lasts ``added_us`` longer and everything after its
end moves by that much, so the kernel ends together on every rank and the slow rank's
starts ``added_us`` after the others' in every chosen step.

Everything is rewritten in the text (only the ``"ts"`` / ``"dur"`` numbers and the
header), in whole nanoseconds, so the copies keep the source's layout and exactly three
decimals; no ``torch``, stdlib only. The builders return the ground truth (see
:func:`build_longer_kernels`); the source is read once per process (~0.6 s), a build
then takes ~0.2-0.4 s.
"""

from __future__ import annotations

import bisect
import gzip
import hashlib
import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

#: the source, inside the shared fixtures folder
FIXTURE_PARTS = ("real", "a100_nccl_rank0.json.gz")
#: CPU calls that put work on a GPU stream (their ``correlation`` is the work's)
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")
_TS = re.compile(r'"ts": (\d+)\.(\d{3})(, "dur": (\d+)\.(\d{3}))?')


def default_fixture() -> Path:
    """``$TRACEFUSE_SHARED_FIXTURES`` (else ``../shared/fixtures`` next to the repository)
    joined with FIXTURE_PARTS: the same folder tests/conftest.py uses."""
    env = os.environ.get("TRACEFUSE_SHARED_FIXTURES")
    base = Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"
    return base.joinpath(*FIXTURE_PARTS)


# --------------------------------------------------------------------------- source
@dataclass(frozen=True)
class Source:
    path: str
    text: str
    events: List[Dict[str, Any]]
    ts: List[int]  # ns, exactly as written, in document order (every event has a ts)
    dur: List[Optional[int]]  # ns or None
    gpu_pids: frozenset
    launch_ts: Dict[int, int]  # correlation -> ts (ns) of the CPU call that has it
    steps: List[Tuple[str, int, int]]  # (name, start ns, end ns) in time order
    spans: List[Tuple[int, int]]  # where each event's "ts"[, "dur"] text is
    cut: int  # offset of "traceEvents"
    kernels: List[int]  # indices of cat == "kernel" events
    nccl: List[int]  # the NCCL ones among them


@lru_cache(maxsize=4)
def load_source(path: str) -> Source:
    """The fixture parsed once: events (json) and their ts/dur in ns (from the text)."""
    text = gzip.decompress(Path(path).read_bytes()).decode("utf-8")
    doc = json.loads(text)
    events = doc["traceEvents"]
    ts: List[int] = []
    dur: List[Optional[int]] = []
    spans: List[Tuple[int, int]] = []
    for m in _TS.finditer(text):
        ts.append(int(m.group(1)) * 1000 + int(m.group(2)))
        dur.append(int(m.group(4)) * 1000 + int(m.group(5)) if m.group(3) else None)
        spans.append(m.span())
    cut = text.index('"traceEvents"')
    if spans and spans[0][0] < cut:
        raise ValueError(f'{path}: a "ts" before "traceEvents"')
    if len(ts) != len(events) or any("ts" not in e for e in events):
        raise ValueError(f"{path}: {len(ts)} ts numbers in the text for {len(events)} events")
    for e, d in zip(events, dur):
        if (d is None) != ("dur" not in e):
            raise ValueError(f"{path}: a ts/dur pair of the text does not match its event")
    gpu = frozenset(
        e["pid"]
        for e in events
        if e.get("ph") == "M"
        and e.get("name") == "process_labels"
        and str(e.get("args", {}).get("labels", "")).startswith("GPU")
    )
    launch = {
        e["args"]["correlation"]: t
        for e, t in zip(events, ts)
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    steps = sorted(
        (e["name"], t, t + (d or 0))
        for e, t, d in zip(events, ts, dur)
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    )
    steps.sort(key=lambda s: s[1])
    kernels = [i for i, e in enumerate(events) if e.get("cat") == "kernel"]
    nccl = [i for i in kernels if str(events[i].get("name", "")).lower().startswith("nccl")]
    return Source(path, text, events, ts, dur, gpu, launch, steps, spans, cut, kernels, nccl)


def _is_nccl(e: Dict[str, Any]) -> bool:
    return e.get("cat") == "kernel" and str(e.get("name", "")).lower().startswith("nccl")


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _chosen_nccl(src: Source, steps: Optional[Sequence[str]], collective: str, index: int) -> List[dict]:
    """Per chosen step, the index-th NCCL kernel of `collective` launched inside it."""
    names = [s[0] for s in src.steps]
    if steps is not None:
        missing = sorted(set(steps) - set(names))
        if missing:
            raise ValueError(f"no such step {missing}; the source has {names}")
    spans = [s for s in src.steps if steps is None or s[0] in steps]
    if not spans:  # no ProfilerStep at all: the whole profiled stretch is one step
        spans = [("(whole trace)", min(src.ts), max(src.ts))]
    out = []
    for name, a, b in spans:
        cands = []
        for i in src.nccl:
            e = src.events[i]
            if e["args"].get("Collective name") == collective:
                lt = src.launch_ts.get(e["args"].get("correlation"), src.ts[i])
                if a <= lt <= b:
                    cands.append(i)
        cands.sort(key=lambda i: src.ts[i])
        if index >= len(cands):
            raise ValueError(f"{name}: only {len(cands)} {collective} NCCL kernels, index {index}")
        i = cands[index]
        out.append(dict(step=name, step_start=a, step_end=b, i=i))
    return out


def _nccl_facts(src: Source, i: int) -> Dict[str, Any]:
    e = src.events[i]
    a = e["args"]
    return {
        "kernel": e["name"],
        "collective": a.get("Collective name"),
        "External id": a.get("External id"),
        "correlation": a.get("correlation"),
        "In msg nelems": a.get("In msg nelems"),
        "stream": e.get("tid"),
        "ts_ns_in": src.ts[i],
        "dur_ns_in": src.dur[i],
    }


# --------------------------------------------------------------------------- time maps
class _Warp:
    """t -> t + the sum of the insertions (point p, amount d) with p <= t."""

    def __init__(self, inserts: Sequence[Tuple[int, int]]) -> None:
        ins = sorted(inserts)
        self.points = [p for p, _ in ins]
        self.cum = [0]
        for _, d in ins:
            self.cum.append(self.cum[-1] + d)

    def __call__(self, t: int) -> int:
        return t + self.cum[bisect.bisect_right(self.points, t)]


def _warped(src: Source, warp: _Warp) -> Tuple[List[int], List[Optional[int]]]:
    ts = [warp(t) for t in src.ts]
    dur = [None if d is None else warp(t + d) - nt for t, d, nt in zip(src.ts, src.dur, ts)]
    return ts, dur


# --------------------------------------------------------------------------- writing
def _header(src: Source, rank: int, world_size: int, tag: str) -> Tuple[str, int]:
    """The text before "traceEvents" with this rank's distributedInfo and trace_id."""
    text = src.text
    cut = text.index('"traceEvents"')
    head = text[:cut]
    k = head.index('"distributedInfo"')
    start = head.index("{", k)
    info, end = json.JSONDecoder().raw_decode(head, start)
    info = dict(info)
    info["rank"] = rank
    info["world_size"] = world_size
    cfg = []
    for g in info.get("pg_config") or []:
        g = dict(g)
        if g.get("pg_desc") == "default_pg":
            g["pg_size"] = world_size
            g["ranks"] = list(range(world_size))
        cfg.append(g)
    if cfg:
        info["pg_config"] = cfg
    trace_id = hashlib.md5(f"{tag}/{rank}".encode()).hexdigest().upper()
    new = head[:k] + f'"trace_id": "{trace_id}",\n  ' + head[k:start] + json.dumps(info) + head[end:]
    return new, cut


def _render(src: Source, ts: List[int], dur: List[Optional[int]], world_size: int) -> str:
    """The text from "traceEvents" on with the given numbers (and the run's group size):
    only the numbers that changed are written again, the rest is the source's text."""
    text = src.text
    out = []
    pos = src.cut
    for i, (a, b) in enumerate(src.spans):
        t, d = ts[i], dur[i]
        if t == src.ts[i] and d == src.dur[i]:
            continue
        out.append(text[pos:a])
        out.append(f'"ts": {_us(t)}' if d is None else f'"ts": {_us(t)}, "dur": {_us(d)}')
        pos = b
    out.append(text[pos:])
    body = "".join(out)
    if world_size != 2:
        ranks = json.dumps(list(range(world_size)))
        body = body.replace('"Group size": 2', f'"Group size": {world_size}')
        body = body.replace('"Process Group Ranks": "[0, 1]"', f'"Process Group Ranks": "{ranks}"')
    return body


def _write(
    out_dir: Path,
    src: Source,
    bodies: Dict[int, str],
    world_size: int,
    tag: str,
    gz: bool,
) -> Dict[int, str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    files: Dict[int, str] = {}
    for rank in range(world_size):
        head, _ = _header(src, rank, world_size, tag)
        data = (head + bodies[rank]).encode("utf-8")
        name = f"{tag}_r{rank}.pt.trace.json" + (".gz" if gz else "")
        path = out_dir / name
        path.write_bytes(gzip.compress(data, compresslevel=1, mtime=0) if gz else data)
        files[rank] = str(path)
    return files


def _finish(
    src: Source,
    out_dir: Path,
    tag: str,
    world_size: int,
    rank: int,
    slow: Tuple[List[int], List[Optional[int]]],
    peer_inserts: List[Tuple[int, int]],
    gz: bool,
) -> Tuple[Dict[int, str], Tuple[List[int], List[Optional[int]]]]:
    if not 0 <= rank < world_size or world_size < 2:
        raise ValueError(f"rank {rank} of world_size {world_size}")
    peer = _warped(src, _Warp(peer_inserts))
    peer_body = _render(src, *peer, world_size)
    slow_body = _render(src, *slow, world_size)
    bodies = {r: (slow_body if r == rank else peer_body) for r in range(world_size)}
    return _write(Path(out_dir), src, bodies, world_size, tag, gz), peer


# --------------------------------------------------------------------------- builders
def build_longer_kernels(
    out_dir: Any,
    *,
    world_size: int = 2,
    rank: int = 1,
    added_us: float = 30000.0,
    collective: str = "allreduce",
    index: int = 0,
    steps: Optional[Sequence[str]] = None,
    peers_wait: bool = True,
    gz: bool = False,
    fixture: Any = None,
    tag: str = "a100_run_k",
) -> Dict[str, Any]:
    """Write ``world_size`` ranks into out_dir; on ``rank``, in each step of ``steps``
    (ProfilerStep names; None = all three), the compute kernels between the end of the
    last NCCL kernel before the chosen one (or the step's start, if later) and the
    start of the chosen NCCL kernel (the ``index``-th ``collective`` NCCL kernel
    launched in the step) together last ``added_us`` longer, each by the same factor;
    every later event of the rank moves by the time added before it.

    Returns the ground truth::

        {"case": "longer_kernels", "source": path, "files": {rank: path},
         "world_size": n, "rank": slow rank, "added_us": per step,
         "total_added_us": sum, "peers_wait": bool,
         "instances": [  # one per chosen step, in time order
            {"step": "ProfilerStep#4", "kernel": NCCL kernel name, "collective",
             "External id", "correlation", "In msg nelems", "stream", "ts_ns_in",
             "dur_ns_in",  # the chosen NCCL kernel in the source
             "ts_ns_slow", "ts_ns_peers",  # its start on the slow rank / the others
             "dur_ns_slow", "dur_ns_peers",
             "start_delay_ns": ts_ns_slow - ts_ns_peers,
             "added_ns": this step's added time,
             "stretch_ns": [start, end] (source times),
             "lengthened": {kernel name: count}, "n_lengthened": N,
             "busy_ns_in": their total duration in the source, "factor": new / old}, ...]}

    ``ts`` values are the files' own (relative to ``baseTimeNanoseconds``, which all
    copies share). ``start_delay_ns`` equals ``added_ns`` with ``peers_wait``; without
    it the slow rank's lead grows step by step (the sum of the added times so far)."""
    src = load_source(str(fixture or default_fixture()))
    add = round(added_us * 1000)
    inserts: List[Tuple[int, int]] = []
    peer_inserts: List[Tuple[int, int]] = []
    inst = []
    nccl_ends = sorted(src.ts[i] + (src.dur[i] or 0) for i in src.nccl)
    nccl = set(src.nccl)
    for c in _chosen_nccl(src, steps, collective, index):
        i = c["i"]
        t_nccl = src.ts[i]
        prev = [t for t in nccl_ends if t <= t_nccl]
        lo = max([c["step_start"]] + prev[-1:])
        ks = [
            j
            for j in src.kernels
            if j not in nccl
            and (src.dur[j] or 0) > 0
            and src.ts[j] >= lo
            and src.ts[j] + (src.dur[j] or 0) <= t_nccl
        ]
        if not ks:
            raise ValueError(f"{c['step']}: no compute kernel between {_us(lo)} and {_us(t_nccl)}")
        busy = sum(src.dur[j] or 0 for j in ks)
        # each kernel by the same factor, to the ns: floors, then the ns left over go to
        # the kernels with the largest remainders
        exact = [(add * (src.dur[j] or 0), j) for j in ks]
        parts = [a // busy for a, _ in exact]
        for n in sorted(range(len(ks)), key=lambda n: -(exact[n][0] % busy))[: add - sum(parts)]:
            parts[n] += 1
        inserts += [(src.ts[j] + (src.dur[j] or 0), d) for j, d in zip(ks, parts) if d]
        peer_inserts.append((t_nccl + (src.dur[i] or 0), add))
        inst.append(
            dict(
                step=c["step"],
                **_nccl_facts(src, i),
                added_ns=add,
                stretch_ns=[lo, t_nccl],
                lengthened=dict(Counter(src.events[j]["name"] for j in ks)),
                n_lengthened=len(ks),
                busy_ns_in=busy,
                factor=(busy + add) / busy,
                _i=i,
            )
        )
    slow = _warped(src, _Warp(inserts))
    files, peer = _finish(
        src, Path(out_dir), tag, world_size, rank, slow, peer_inserts if peers_wait else [], gz
    )
    return _truth("longer_kernels", src, files, world_size, rank, add, peers_wait, inst, slow, peer)


def build_late_launches(
    out_dir: Any,
    *,
    world_size: int = 2,
    rank: int = 1,
    added_us: float = 30000.0,
    launches_before: int = 20,
    collective: str = "allreduce",
    index: int = 0,
    steps: Optional[Sequence[str]] = None,
    peers_wait: bool = True,
    gz: bool = False,
    fixture: Any = None,
    tag: str = "a100_run_l",
    stall_at: str = "launch",
) -> Dict[str, Any]:
    """Write ``world_size`` ranks into out_dir; on ``rank``, in each step of ``steps``,
    the host stalls ``added_us`` just before a CPU launch call (``stall_at="step_start"``:
    just before the step itself starts, so the rank enters each chosen step that much
    late and works as the others inside it): the
    ``launches_before``-th launch (one of LAUNCHES, any CPU thread) before the launch of
    the chosen NCCL kernel (0: that launch itself). CPU events from there on start
    ``added_us`` later (CPU events open at that moment last that much longer); GPU work
    (kernels, memcpy, memset, their ac2g flow ends) launched at or after that moment
    starts that much later, work launched before keeps its time (GPU annotations follow
    the work they hold), so the GPU idles ``added_us`` more before the first delayed
    kernel.

    Returns the ground truth as :func:`build_longer_kernels` (``"case":
    "late_launches"``), each instance with, instead of the kernel fields::

        "stall_at_ns": the moment (source time) = ts of the first delayed launch,
        "stall_before": {"name", "tid"} of that launch call,
        "delayed_launches": launch calls from it to the NCCL launch (inclusive),
        "delayed_kernels": {name: count} of the kernels they launched (NCCL included),
        "idle_stream": the compute stream of the first delayed kernel,
        "idle_ns_in" / "idle_ns_slow": the gap on that stream before that kernel."""
    src = load_source(str(fixture or default_fixture()))
    add = round(added_us * 1000)
    launches = sorted(
        (t, j)
        for j, (e, t) in enumerate(zip(src.events, src.ts))
        if e.get("cat") == "cuda_runtime" and e.get("name") in LAUNCHES
    )
    by_corr = {
        e["args"]["correlation"]: j
        for j, e in enumerate(src.events)
        if e.get("ph") == "X" and e.get("pid") in src.gpu_pids and "correlation" in e.get("args", {})
    }
    points: List[int] = []
    inst = []
    for c in _chosen_nccl(src, steps, collective, index):
        i = c["i"]
        lt = src.launch_ts[src.events[i]["args"]["correlation"]]
        before = [(t, j) for t, j in launches if c["step_start"] <= t <= lt]
        k = max(0, len(before) - 1 - launches_before)
        if stall_at == "step_start":
            k = 0
        p, pj = before[k]
        if stall_at == "step_start":
            p = c["step_start"]
        points.append(p)
        delayed = before[k:]
        kernels = [by_corr.get(src.events[j]["args"].get("correlation")) for _, j in delayed]
        kernels_j = [j for j in kernels if j is not None]
        inst.append(
            dict(
                step=c["step"],
                **_nccl_facts(src, i),
                added_ns=add,
                stall_at_ns=p,
                stall_before={"name": src.events[pj]["name"], "tid": src.events[pj]["tid"]},
                delayed_launches=len(delayed),
                delayed_kernels=dict(Counter(src.events[j]["name"] for j in kernels_j)),
                _i=i,
                _first=min(
                    (j for j in kernels_j if not _is_nccl(src.events[j])), key=lambda j: src.ts[j], default=i
                ),
            )
        )
    cpu = _Warp([(p, add) for p in points])
    shifts = sorted(points)

    def gpu_shift(launch_t: int) -> int:
        return add * bisect.bisect_right(shifts, launch_t)

    ts: List[int] = []
    dur: List[Optional[int]] = []
    gpu_of: Dict[Tuple[Any, Any], List[int]] = {}  # GPU work with a launch, per stream
    shift_of: Dict[int, int] = {}
    pending = []
    for j, (e, t, d) in enumerate(zip(src.events, src.ts, src.dur)):
        if e.get("pid") in src.gpu_pids and e.get("ph") != "M":
            corr = e.get("args", {}).get("correlation") if e.get("ph") == "X" else e.get("id")
            if corr in src.launch_ts:
                s = gpu_shift(src.launch_ts[corr])
                ts.append(t + s)
                dur.append(d)
                if e.get("ph") == "X":
                    gpu_of.setdefault((e["pid"], e["tid"]), []).append(j)
                    shift_of[j] = s
                continue
            if e.get("ph") == "X":
                pending.append(j)  # an annotation: follows the work it holds
                ts.append(t)
                dur.append(d)
                continue
        ts.append(cpu(t))
        dur.append(None if d is None else cpu(t + d) - ts[-1])
    for j in pending:
        e, t, d = src.events[j], src.ts[j], src.dur[j] or 0
        held = [
            w
            for w in gpu_of.get((e["pid"], e["tid"]), [])
            if t <= src.ts[w] and src.ts[w] + (src.dur[w] or 0) <= t + d
        ]
        if held:
            s0 = shift_of[min(held, key=lambda w: src.ts[w])]
            s1 = shift_of[max(held, key=lambda w: src.ts[w] + (src.dur[w] or 0))]
        else:
            s0 = s1 = gpu_shift(t)
        ts[j] = t + s0
        dur[j] = d + s1 - s0
    for x in inst:
        f = x.pop("_first")
        prev = [
            j for j in gpu_of.get((src.events[f]["pid"], src.events[f]["tid"]), []) if src.ts[j] < src.ts[f]
        ]
        x["idle_stream"] = src.events[f]["tid"]
        if prev:
            q = max(prev, key=lambda j: src.ts[j] + (src.dur[j] or 0))
            x["idle_ns_in"] = src.ts[f] - (src.ts[q] + (src.dur[q] or 0))
            x["idle_ns_slow"] = ts[f] - (ts[q] + (dur[q] or 0))
        else:
            x["idle_ns_in"] = x["idle_ns_slow"] = None
    peer_inserts = [(src.ts[x["_i"]] + (src.dur[x["_i"]] or 0), add) for x in inst] if peers_wait else []
    files, peer = _finish(src, Path(out_dir), tag, world_size, rank, (ts, dur), peer_inserts, gz)
    return _truth("late_launches", src, files, world_size, rank, add, peers_wait, inst, (ts, dur), peer)


def _truth(
    case: str,
    src: Source,
    files: Dict[int, str],
    world_size: int,
    rank: int,
    add: int,
    peers_wait: bool,
    inst: List[Dict[str, Any]],
    slow: Tuple[List[int], List[Optional[int]]],
    peer: Tuple[List[int], List[Optional[int]]],
) -> Dict[str, Any]:
    for x in inst:
        i = x.pop("_i")
        x["ts_ns_slow"], x["ts_ns_peers"] = slow[0][i], peer[0][i]
        x["dur_ns_slow"], x["dur_ns_peers"] = slow[1][i], peer[1][i]
        x["start_delay_ns"] = slow[0][i] - peer[0][i]
    return {
        "case": case,
        "source": src.path,
        "files": files,
        "world_size": world_size,
        "rank": rank,
        "added_us": add / 1000,
        "total_added_us": add * len(inst) / 1000,
        "peers_wait": peers_wait,
        "instances": inst,
    }
