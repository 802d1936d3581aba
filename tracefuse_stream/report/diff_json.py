"""``tracefuse diff --json`` and ``tracefuse_stream.diff()``: the diff as one object.

Why: dashboards and CI gates compare runs without parsing text. The schema is in
docs/diff.md and only ever grows: ``steps``, ``ranks``, ``step_time``, ``changes`` (each
with ``kind``, ``name``, ``where``, ``ranks`` ("all" or a list), ``delta_us``,
``base_us``, ``new_us``, ``count_base``, ``count_new``, ``p_value``, ``class``), the
stragglers of both runs and the rule the test applied.
"""

from __future__ import annotations

from typing import Any, Dict, Sequence

from tracefuse_stream.analyze.diff import COUNTED_KINDS, MIN_CHANGE_NS, STEP_FRACTION, Change, Diff
from tracefuse_stream.analyze.diff_stats import ALPHA, ALPHA_ALL
from tracefuse_stream.textout import p_round, p_text

RULE = (
    f"a figure changed on every rank ('all') when Student's t of its per-step means over the ranks "
    f"(the steps the units) gives p < {ALPHA_ALL:g} and every rank's median changed the same way by at "
    f"least the floor, max({MIN_CHANGE_NS / 1000:g} us, {STEP_FRACTION:.0%} of BASE's median step time); "
    f"else on the ranks where Student's t of the rank's per-step means (on the step-to-step noise pooled "
    f"over every rank and both runs) gives p < {ALPHA:g} and its median changed by the floor"
)


def _us(ns: float) -> float:
    return round(ns / 1000.0, 3)


def _ratio(base: float, new: float) -> Any:
    return round(new / base, 3) if base else None


def change_json(c: Change, every: int) -> Dict[str, Any]:
    counted = c.kind in COUNTED_KINDS
    return {
        "kind": c.kind,
        "name": c.name,
        "where": c.where,
        "ranks": "all" if c.all_ranks and every > 1 else list(c.ranks),
        "delta_us": _us(c.delta_ns),
        "base_us": _us(c.base_ns),
        "new_us": _us(c.new_ns),
        "ratio": _ratio(c.base_ns, c.new_ns),
        "count_base": round(c.count_base, 3) if counted else None,
        "count_new": round(c.count_new, 3) if counted else None,
        "p_value": p_round(c.p_value),
        "p_value_text": p_text(c.p_value),
        "class": c.cls,
        "how": c.how,
        "waiting": c.waiting,
        "share": None if c.share is None else round(c.share, 4),
        "step_part_us": _us(c.step_part_ns),
        "per_rank_delta_us": {str(r): _us(v) for r, v in sorted(c.per_rank_ns.items())},
    }


def to_json(
    d: Diff,
    base_paths: Sequence[str],
    new_paths: Sequence[str],
    base_warnings: Sequence[str] = (),
    new_warnings: Sequence[str] = (),
) -> Dict[str, Any]:
    """The diff as the JSON object of docs/diff.md."""
    st = d.step_time
    every = len(d.matched.ranks)
    return {
        "base": {
            "inputs": list(base_paths),
            "world_size": d.base.world_size,
            "warnings": list(base_warnings),
        },
        "new": {"inputs": list(new_paths), "world_size": d.new.world_size, "warnings": list(new_warnings)},
        "ranks": list(d.matched.ranks),
        "steps": {"align": d.matched.align, "pairs": [list(p) for p in d.matched.pairs]},
        "significant": d.significant,
        "summary": "changed" if d.significant else "no significant change",
        "step_time": {
            "base_us": _us(st.base_ns),
            "new_us": _us(st.new_ns),
            "delta_us": _us(st.delta_ns),
            "ratio": _ratio(st.base_ns, st.new_ns),
            "p_value": p_round(st.p_value),
            "p_value_text": p_text(st.p_value),
            "significant": st.significant,
            "noise_us": _us(d.noise_ns),
            "explained_us": _us(st.explained_ns) if st.significant else None,
            "unexplained_us": _us(st.delta_ns - st.explained_ns) if st.significant else None,
            "per_rank": {
                str(r): {
                    "base_us": _us(v["base_ns"]),
                    "new_us": _us(v["new_ns"]),
                    "p_value": p_round(v["p_value"]),
                }
                for r, v in sorted(st.per_rank.items())
            },
            "delta_by_step_us": {str(r): [_us(x) for x in v] for r, v in sorted(st.heat_ns.items())},
        },
        "changes": [change_json(c, every) for c in d.changes],
        "stragglers": {
            "base": {"ranks": list(d.base.stragglers), "verdict": d.base.verdict},
            "new": {"ranks": list(d.new.stragglers), "verdict": d.new.verdict},
            "came": [r for r in d.new.stragglers if r not in d.base.stragglers],
            "went": [r for r in d.base.stragglers if r not in d.new.stragglers],
        },
        "test": {
            "rule": RULE,
            "alpha": ALPHA,
            "alpha_all": ALPHA_ALL,
            "floor_us": _us(d.floor_ns),
            "figures_tested": d.figures,
        },
        "notes": list(d.notes),
    }


__all__ = ["RULE", "change_json", "to_json"]
