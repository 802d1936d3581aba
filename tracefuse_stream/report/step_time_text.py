"""Where every rank's step goes, presented: the text summary and the JSON entries.

Why its own module: the figures are computed in analyze/step_time.py and
analyze/imbalance.py; this only prints them -- one line per step (the median over
the ranks and the worst rank of each figure), the imbalance verdicts, and the
``collectives.step_time`` / ``step_time_spread`` / ``step_time_verdicts`` JSON
(docs/collectives.md).
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

from tracefuse_stream.analyze import imbalance
from tracefuse_stream.analyze.step_time import StepTime, to_json
from tracefuse_stream.report.json_stream import LazyArray
from tracefuse_stream.textout import printable

STEPS_SHOWN = 12
#: (figure, column title) of the text summary
COLUMNS = (
    ("step", "step"),
    ("compute", "compute"),
    ("comm_exposed", "exposed comm"),
    ("memcpy", "memcpy"),
    ("idle", "GPU idle"),
)
#: the columns of a run without GPU events
CPU_COLUMNS = (("step", "step"), ("cpu_busy", "CPU busy"))


def json_entries(rows: Sequence[StepTime], stream: bool = False) -> Dict[str, Any]:
    """``step_time`` (every rank and step), ``step_time_spread`` and ``step_time_verdicts``;
    ``stream``: ``step_time`` made one entry at a time as it is written
    (report/json_stream.py ``LazyArray``), never as one list of every rank's dicts."""
    sp = imbalance.spreads(rows)
    return {
        "step_time": LazyArray(lambda: map(to_json, rows)) if stream else [to_json(st) for st in rows],
        "step_time_spread": [s.to_json() for s in sp],
        "step_time_verdicts": imbalance.verdicts(rows, sp),
    }


def _cell(s: imbalance.Spread) -> str:
    ratio = f" {s.ratio:.2f}x" if s.ratio is not None else ""
    return f"{s.median_ns / 1e6:.1f} (r{s.max_rank} {s.max_ns / 1e6:.1f}{ratio})"


def lines(rows: Sequence[StepTime]) -> List[str]:
    """The per-step summary and the verdict lines; none without step figures."""
    if not rows:
        return []
    sp = imbalance.spreads(rows)
    at = {(s.step, s.figure): s for s in sp}
    steps = sorted({s.step for s in sp})
    gpu = any(st.gpu is not None for st in rows)
    cols = COLUMNS if gpu else CPU_COLUMNS
    out = [
        "where the steps go (ms: median over the ranks (worst rank, its value, x the median)"
        + (
            "; GPU parts add up to the step: compute > comm > memcpy > idle"
            if gpu
            else "; no GPU events: CPU busy = the step less its time blocked in collectives"
        )
        + "):"
    ]
    table = [["step"] + [t for _f, t in cols] + (["overlap"] if gpu else [])]
    overlaps = _overlaps(rows, steps[:STEPS_SHOWN]) if gpu else {}
    for step in steps[:STEPS_SHOWN]:
        row = [str(step)] + [_cell(at[(step, f)]) if (step, f) in at else "-" for f, _t in cols]
        if gpu:
            row.append(overlaps[step])
        table.append(row)
    widths = [max(len(r[k]) for r in table) for k in range(len(table[0]))]
    out += ["  " + "  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in table]
    if len(steps) > STEPS_SHOWN:
        out.append(f"  ... {len(steps) - STEPS_SHOWN} more step(s) in --json (collectives.step_time)")
    verdicts = imbalance.verdicts(rows, sp)
    if gpu:
        none = (
            f"imbalance: none named (compute within {imbalance.SPREAD:.2f}x of the median rank, no part over "
            f"{100 * imbalance.BOUND_SHARE:.0f}% of the step on every rank)"
        )
    else:
        none = (
            f"imbalance: none named (CPU only: no rank busy over {imbalance.SPREAD:.2f}x the median rank and "
            f"by {100 * imbalance.CPU_MATERIAL:.0f}% of the step in every step, in one operator or annotation; "
            "the CPU side per step is in --json collectives.step_time)"
        )
    return out + ([f"imbalance: {printable(v)}" for v in verdicts] or [none])


def _overlaps(rows: Sequence[StepTime], steps: Sequence[int]) -> Dict[int, str]:
    """step -> the median rank's overlap of ``steps``, in one pass over ``rows`` (they
    may be decoded as they are read: analyze/step_pack.py)."""
    vals: Dict[int, List[float]] = {s: [] for s in steps}
    for st in rows:
        if st.step in vals and st.gpu is not None and (ov := st.gpu.overlap_pct) is not None:
            vals[st.step].append(ov)
    return {s: f"{v[len(v) // 2]:.0f}%" if v else "-" for s, v in ((s, sorted(v)) for s, v in vals.items())}


__all__ = ["json_entries", "lines"]
