"""``tracefuse diff``'s text report: the diff object (report/diff_json.py) in lines.

Why from the JSON object: the text, ``--json`` and ``diff()`` then cannot disagree.
One line per change, most time first, in words a user says: "aten::addmm +31.2
ms/step on all 8 ranks, 1.42x, same count", "rank 2 only: aten::linalg_svd +84.0
ms/step, new op"; then how much of the step-time change they explain, and each run's
straggler verdict side by side.
"""

from __future__ import annotations

from typing import Any, Dict, List

from tracefuse_stream.rankset import compress_ranges
from tracefuse_stream.textout import p_text, printable

KIND_WORDS = {
    "op": "op",
    "outside_ops": "outside ops",
    "kernel": "kernel",
    "kernel_category": "kernel category",
    "gpu_idle": "GPU idle",
    "gpu_step": "GPU step",
    "wait": "collective wait",
}


def _ms(us: float, sign: bool = False) -> str:
    return f"{us / 1000:+.1f}" if sign else f"{us / 1000:.1f}"


def _where(c: Dict[str, Any], every: int) -> str:
    if c["ranks"] == "all":
        return "on both ranks" if every == 2 else f"on all {every} ranks"
    ranks = c["ranks"]
    return f"rank {ranks[0]} only" if len(ranks) == 1 else f"ranks {compress_ranges(ranks)} only"


def _detail(c: Dict[str, Any]) -> str:
    """``1.42x, same count`` / ``new op`` / ``3 -> 6 calls (more calls)``."""
    if c["class"] == "new":
        return "new " + ("op" if c["kind"] == "op" else KIND_WORDS.get(c["kind"], c["kind"]))
    if c["class"] == "gone":
        return "gone"
    parts = [f"{c['ratio']:.2f}x" if c["ratio"] is not None else "from 0"]
    if c["how"] in ("longer calls", "shorter calls"):
        parts.append(f"same count ({c['how']})")
    elif c["how"] is not None:
        parts.append(f"{c['count_base']:g} -> {c['count_new']:g} calls ({c['how']})")
    return ", ".join(parts)


def change_line(c: Dict[str, Any], every: int) -> str:
    name = printable(c["name"])
    where = _where(c, every)
    size = f"{_ms(c['delta_us'], True)} ms/step"
    head = f"{where}: {name} {size}" if c["ranks"] != "all" else f"{name} {size} {where}"
    share = f", {c['share']:.0%} of the step-time change" if c["share"] is not None else ""
    if c["waiting"]:
        share += ", waiting for other ranks"
    return (
        f"  {head}, {_detail(c)}  [{KIND_WORDS.get(c['kind'], c['kind'])}, {c['class']}, "
        f"p {p_text(c['p_value'])}{share}]"
    )


def render(report: Dict[str, Any]) -> str:
    """The whole text report of a diff object."""
    st = report["step_time"]
    every = len(report["ranks"])
    pairs = report["steps"]["pairs"]
    if all(b == n for b, n in pairs):
        steps = compress_ranges([b for b, _n in pairs])
    else:
        steps = ", ".join(f"{b}->{n}" for b, n in pairs[:12]) + (
            f", ... ({len(pairs)} pairs)" if len(pairs) > 12 else ""
        )
    lines = [
        f"diff: ranks {compress_ranges(report['ranks'])}, steps {steps} "
        f"(matched by {report['steps']['align']}; medians over the steps)",
        f"step time: {_ms(st['base_us'])} -> {_ms(st['new_us'])} ms/step ({_ms(st['delta_us'], True)} ms, "
        f"{st['ratio'] or 0:.2f}x, p {p_text(st['p_value'])}, noise {_ms(st['noise_us'])} ms)",
    ]
    changes = report["changes"]
    if not report["significant"]:
        lines.append(
            f"no significant change: nothing above the noise ({report['test']['figures_tested']} figures "
            f"tested on {every} ranks; the rule: docs/diff.md)"
        )
    else:
        lines.append(
            f"changes above the noise (p < {report['test']['alpha_all']:g} on all ranks together, else "
            f"{report['test']['alpha']:g} on each rank listed; at least {_ms(report['test']['floor_us'])} "
            "ms/step on each), most time first:"
        )
        lines += [change_line(c, every) for c in changes] or ["  (no single figure; the step time only)"]
        if not st["significant"]:
            lines.append("the step time did not change significantly: nothing to explain")
        if st["significant"] and st["delta_us"]:
            share = st["explained_us"] / st["delta_us"]
            lines.append(
                f"explained: {share:.0%} of the step-time change ({_ms(st['explained_us'], True)} of "
                f"{_ms(st['delta_us'], True)} ms/step, mean over the ranks); unexplained "
                f"{_ms(st['unexplained_us'], True)} ms"
            )
    lines += [f"note: {printable(n)}" for n in report.get("notes") or []]
    lines += _straggler_lines(report["stragglers"])
    for label in ("base", "new"):
        lines += [f"warning ({label.upper()}): {printable(w)}" for w in report[label]["warnings"]]
    return "\n".join(lines)


def _straggler_lines(s: Dict[str, Any]) -> List[str]:
    out = [f"BASE {printable(s['base']['verdict'])}", f"NEW  {printable(s['new']['verdict'])}"]
    if s["came"]:
        out.append("new straggler: " + ", ".join(f"rank {r}" for r in s["came"]))
    if s["went"]:
        out.append("straggler gone: " + ", ".join(f"rank {r}" for r in s["went"]))
    return out


__all__ = ["change_line", "render"]
