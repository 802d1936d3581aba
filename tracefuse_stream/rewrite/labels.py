"""Process names and sort order for the merged trace.

Perfetto ignores ``process_labels`` and orders processes by ``process_sort_index``
(int32), so a merged trace needs one ``process_name`` per output process that says
which rank and device it is, and sort indexes that put rank 0 first and each rank's
CPU before its GPUs. Kineto's own sort indexes (the OS pid, 16777216+device,
536870912 for "Spans") would interleave ranks.

The names are TraceLens' documented convention, exactly: ``RANK N - CPU`` and
``RANK N - GPU`` (``RANK N - GPU 3``, the device index, only where the rank kept
events on several GPUs; other accelerators by their own kind, ``RANK N - MTIA``),
so scripts and habits made for TraceLens' merges keep working. Processes that are
neither (Kineto's "Spans", "Traces", pid -1 overhead) are ``RANK N - Spans``,
``RANK N - -1``. The detail — original pid, original process name, host, Kineto's
own label — goes into ``process_labels``.

Metadata is emitted at the end of each rank's section, only for processes that kept
at least one event, so filtering never leaves empty named tracks behind.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, Iterator, Optional, Tuple

from tracefuse_stream.rewrite.rules import PID_DEVICE_LIMIT, RankRewriter, pid_key

Event = Dict[str, Any]

SORT_STRIDE = 1000
SORT_GPU = 100
SORT_OTHER = 900
PROCESS_META = frozenset({"process_name", "process_labels", "process_sort_index"})
_GPU_LABEL = re.compile(r"\bGPU\s*(\d+)\b")
# other accelerators as Kineto names their device processes: "MTIA 9", "XPU 0", "HPU 1"
_DEVICE_LABEL = re.compile(r"^\s*([A-Za-z][A-Za-z_]*)\s+(\d+)\s*$")


def device_of(text: Optional[str]) -> Optional[tuple]:
    """``("MTIA", 9)`` for a device process label/name other than CPU/GPU, else None."""
    m = _DEVICE_LABEL.match(text or "")
    if m and m.group(1).upper() not in ("CPU", "GPU", "PID", "RANK"):
        return m.group(1), int(m.group(2))
    return None


def _describe(pid: Any, labels: Optional[str], gpu_like: bool) -> tuple:
    """``(kind, device)``: kind is "CPU", "GPU" or "OTHER"."""
    if isinstance(pid, str):
        return "OTHER", None
    if labels:
        m = _GPU_LABEL.search(labels)
        if m and "Counters" not in labels:
            return "GPU", int(m.group(1))
        if "CPU" in labels:
            return "CPU", None
    if gpu_like and type(pid) is int and 0 <= pid < PID_DEVICE_LIMIT:
        return "GPU", pid
    if type(pid) is not int or pid < 0:
        return "OTHER", None  # -1 (overhead), and pids Kineto never writes (1.0, true, null)
    return "CPU", None


def pid_text(pid: Any) -> str:
    """An original pid as its JSON spelling (titles and labels: ``1.0``, ``true``, ``""``)."""
    if type(pid) is str:
        return pid if pid.strip() else json.dumps(pid)
    if type(pid) is bool or pid is None:
        return json.dumps(pid)
    return str(pid)


def _kinds(rw: RankRewriter, names: Dict[Any, str], labels: Dict[Any, str]) -> Dict[Any, tuple]:
    """``output pid -> (orig pid, kind, device, accelerator name)`` for the rank's kept processes,
    in first-appearance order; kind is "CPU", "GPU" (any accelerator) or "OTHER"."""
    kept = set(rw.pid_first_ts)
    out: Dict[Any, tuple] = {}
    for orig in rw.pid_order:
        pid = rw.pids[pid_key(orig)]
        if pid not in kept or pid in out:
            continue  # (pid "" shares the CPU process: rewrite/rules.py _cpu_process)
        kind, dev = _describe(orig, labels.get(pid), pid in rw.pid_gpu_like)
        lab = labels.get(pid) or ""
        accel = None if isinstance(orig, str) or "CPU" in lab else device_of(lab) or device_of(names.get(pid))
        if accel is not None:  # an accelerator Kineto names by its own kind (MTIA, XPU, ...)
            kind, dev = "GPU", accel[1]
        out[pid] = (orig, kind, dev, accel[0] if accel else "GPU")
    return out


def process_detail(
    r: int,
    orig: Any,
    name: Optional[str],
    label: Optional[str],
    host: Optional[str],
    who: Optional[str] = None,
) -> str:
    """The ``process_labels`` text: what the short name leaves out (``who``: the
    rank's own title where the merge gave one, ``BASE rank 0``)."""
    parts = [who or f"rank {r}"]
    if host:
        parts.append(f"host {host}")
    parts.append(f"pid {orig!r}" if isinstance(orig, str) else f"pid {orig}")
    if name and name != label:
        parts.append(name)
    if label:
        parts.append(label)
    return ", ".join(parts)


def rank_metadata(
    rw: RankRewriter, host: Optional[str] = None, title: Optional[Tuple[str, int]] = None
) -> Iterator[Event]:
    """Yield the metadata events of one finished rank (rewritten and generated);
    ``host``: the rank's host name, for ``process_labels``; ``title``: (the name its
    processes carry instead of ``RANK r``, its place in the sort order instead of r),
    ``merge --against``'s ``BASE rank 0`` under NEW's rank 0."""
    r = rw.rank
    who, place = title if title is not None else (f"RANK {r}", r)
    names: Dict[Any, str] = {}  # by output pid: 1, 1.0 and true are three processes
    labels: Dict[Any, str] = {}
    for ev in rw.metadata:
        n = ev.get("name")
        args = ev.get("args")
        a: Dict[str, Any] = args if isinstance(args, dict) else {}
        if n == "process_name" and isinstance(a.get("name"), str):
            names[rw.out_pid(ev.get("pid"))] = a["name"]
        elif n == "process_labels" and isinstance(a.get("labels"), str):
            labels[rw.out_pid(ev.get("pid"))] = a["labels"]
    kept = set(rw.pid_first_ts)
    kinds = _kinds(rw, names, labels)
    per_accel: Dict[str, int] = {}
    for _, kind, _, accel in kinds.values():
        if kind == "GPU":
            per_accel[accel] = per_accel.get(accel, 0) + 1
    cpu_order = 0
    other_order = 0
    for out, (orig, kind, dev, accel) in kinds.items():
        if kind == "GPU":
            # the device index only where the rank has several devices of that kind
            pname = f"{who} - {accel} {dev}" if per_accel[accel] > 1 else f"{who} - {accel}"
            sort = SORT_GPU + min(int(dev), SORT_OTHER - SORT_GPU - 1)
        elif kind == "CPU":
            pname = f"{who} - CPU"
            sort = min(cpu_order, SORT_GPU - 1)
            cpu_order += 1
        else:
            # Kineto's pid "" (its "Record Window End" instant): named as the pid it is,
            # not as an empty name (``RANK 0 - ''`` read as a process without a name)
            blank = type(orig) is str and not orig.strip()
            pname = f"{who} - pid {pid_text(orig)}" if blank else f"{who} - {pid_text(orig)}"
            sort = min(SORT_OTHER + other_order, SORT_STRIDE - 1)
            other_order += 1
        ts = rw.pid_first_ts[out]
        base = {"ph": "M", "ts": ts, "pid": out, "tid": 0}
        yield {**base, "name": "process_name", "args": {"name": pname, "rank": r}}
        detail = process_detail(
            r, orig, names.get(out), labels.get(out), host, None if title is None else who
        )
        yield {**base, "name": "process_labels", "args": {"labels": detail, "rank": r}}
        yield {
            **base,
            "name": "process_sort_index",
            "args": {"sort_index": place * SORT_STRIDE + sort, "rank": r},
        }
    named_threads = set()
    for ev in rw.metadata:
        name, pid = ev.get("name"), ev.get("pid")
        if type(name) is str and name in PROCESS_META:
            continue
        # a pid that is a list or object belongs to no process of the rank
        out_pid = rw.out_pid(pid)
        if out_pid is None or out_pid not in kept:
            continue
        if ev.get("name") == "thread_sort_index" and not _int32_sort_index(ev):
            continue  # nothing Perfetto can use (only damaged, salvaged input has it)
        m = rw.rewrite_metadata(ev)
        if m.get("name") == "thread_name":
            named_threads.add((m["pid"], m.get("tid")))
        yield m
    for (pid, tid), orig in rw.synth_tids.items():
        if pid in kept and (pid, tid) not in named_threads:
            yield {
                "ph": "M",
                "name": "thread_name",
                "pid": pid,
                "tid": tid,
                "ts": rw.pid_first_ts[pid],
                "args": {"name": synthetic_thread_name(orig), "rank": r},
            }


def _int32_sort_index(ev: Dict[str, Any]) -> bool:
    args = ev.get("args")
    v = args.get("sort_index") if isinstance(args, dict) else None
    return type(v) is int and -(2**31) <= v < 2**31


def synthetic_thread_name(orig: Any) -> str:
    """The ``thread_name`` of a synthetic tid: the original tid's text, or
    ``tid ''`` when that text is empty or blank (Kineto's ``""`` tid of "Record Window
    End"): Perfetto counts a thread_name with an empty name as an import error
    (``json_parser_failure``), which the input, having no thread_name there, lacks."""
    text = str(orig)
    return text if text.strip() else f"tid {orig!r}"
