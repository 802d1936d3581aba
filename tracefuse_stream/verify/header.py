"""The merged file's ``tracefuse`` header against the file itself.

The header records, per rank, the pid map, ``events_out``, ``shift_ns`` and any
clock alignment. Each must agree with the events just read and with the pid rule
of :mod:`tracefuse_stream.rewrite.rules` (imported, never restated).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Tuple

from tracefuse_stream.rewrite.rules import PID_DEVICE_LIMIT, PID_STRIDE, output_pid
from tracefuse_stream.verify.events import MergedChecker


def header_ranks(tf: Dict[str, Any]) -> Iterator[Tuple[int, Dict[str, Any]]]:
    """``(rank, info)`` for each well-formed entry of the header's ``ranks`` table."""
    ranks = tf.get("ranks")
    rinfo: Dict[Any, Any] = ranks if isinstance(ranks, dict) else {}
    for key, info in rinfo.items():
        if not isinstance(info, dict):
            continue
        try:
            yield int(info.get("rank", key)), info
        except (TypeError, ValueError):
            continue


def pid_follows_rule(rank: int, orig: Any, out: int) -> bool:
    """Whether ``orig -> out`` is what the pid rule gives for ``rank``: small integer
    pids keep their number in the rank's block, all others take a slot above it."""
    lo = output_pid(rank, 0)
    if type(orig) is int and 0 <= orig < PID_DEVICE_LIMIT:
        return out == output_pid(rank, orig)
    return output_pid(rank, PID_DEVICE_LIMIT) <= out < lo + PID_STRIDE


def is_blank_pid(orig: Any) -> bool:
    """Kineto's pid ``""``, which the merge puts in the rank's CPU process
    (rewrite/rules.py ``_cpu_process``; docs/OUTPUT_FORMAT.md)."""
    return type(orig) is str and not orig.strip()


def check_header(v: MergedChecker, top: Dict[str, Any], tf: Dict[str, Any]) -> None:
    F = v.F
    base = tf.get("base_time_ns")
    top_base = top.get("baseTimeNanoseconds")
    if "baseTimeNanoseconds" in top and top_base != base:
        F.add("header_mismatch", None, {"baseTimeNanoseconds": top_base, "tracefuse.base_time_ns": base},
              message="top-level baseTimeNanoseconds differs from tracefuse.base_time_ns")  # fmt: skip
    merged = tf.get("ranks_merged")
    if isinstance(merged, list):
        extra = sorted(r for r in v.ranks if isinstance(r, int) and r not in merged)
        if extra:
            F.add("header_mismatch", None, {"ranks_in_events": extra, "ranks_merged": merged},
                  message="events carry ranks that the header's ranks_merged does not list")  # fmt: skip
    seen_out: Dict[Any, Any] = {}
    for r, info in header_ranks(tf):
        for pair in info.get("pids") or []:
            if not (isinstance(pair, list) and len(pair) == 2):
                F.add("pid_map_mismatch", r, {"pair": pair}, message="malformed pid map entry")
                continue
            orig, out = pair
            if type(out) is not int:
                F.add(
                    "pid_map_mismatch",
                    r,
                    {"pair": pair},
                    message="pid map entry with a non-integer output pid",
                )
                continue
            if not pid_follows_rule(r, orig, out) and not is_blank_pid(orig):
                F.add("pid_map_mismatch", r, {"orig": orig, "out": out},
                      message="pid map entry breaks the contract's pid rule")  # fmt: skip
            shared = seen_out.get(out)
            folded = shared is not None and shared[0] == r and is_blank_pid(orig)  # into the CPU process
            if shared is not None and shared != (r, orig) and not folded:
                F.add("pid_map_mismatch", r, {"out": out, "orig": [seen_out[out], (r, orig)]},
                      message="two original pids map to the same output pid")  # fmt: skip
            if not folded:
                seen_out[out] = (r, orig)
        st = v.ranks.get(r)
        eo = info.get("events_out")
        if st is not None and type(eo) is int and eo not in (st["events"], st["events"] - st["metadata"]):
            F.add("event_count_mismatch", r,
                  {"events_out": eo, "events_in_file": st["events"], "non_metadata_in_file": st["events"] - st["metadata"]},
                  message="header events_out differs from the events of this rank in the file")  # fmt: skip
        _check_shift(v, r, info, base)


def _check_shift(v: MergedChecker, r: int, info: Dict[str, Any], base: Any) -> None:
    """``shift_ns`` must be ``base_r - B``, plus exactly the recorded, applied alignment."""
    shift = info.get("shift_ns")
    rbase = info.get("base_time_ns")
    if not (type(shift) is int and type(base) is int):
        return
    expect = (rbase or 0) - base
    if shift == expect:
        return
    al = info.get("align")
    moved = shift - expect
    off = al.get("offset_ns") if isinstance(al, dict) else None
    applied = bool(al.get("applied", True)) if isinstance(al, dict) else False
    if not applied or (type(off) is int and off != moved):
        v.F.add("header_mismatch", r,
                {"shift_ns": shift, "base_time_ns": rbase, "output_base": base, "moved_ns": moved,
                 "align_offset_ns": off if applied else None},
                message="shift_ns is not base_r - B plus the recorded alignment: times moved")  # fmt: skip
    else:
        v.F.add("time_shift", r, {"moved_ns": moved, "align": al},
                message=f"rank {r} moved by {moved:+,} ns by the requested clock alignment")  # fmt: skip


__all__ = ["check_header", "header_ranks", "pid_follows_rule"]
