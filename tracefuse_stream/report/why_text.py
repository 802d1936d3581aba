"""The why in words: one headline per contributor and the human report's why lines.

Why a module of its own: analyze/why.py computes the contributors; this only says
them (the text report and the merge's why track use the same words).
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

from tracefuse_stream.analyze.timeline import OUTSIDE_ALL
from tracefuse_stream.analyze.why import TOP
from tracefuse_stream.textout import printable


def headline(c: Dict[str, Any]) -> str:
    """``+120.3 ms outside any operator in train_step`` and the like (names escaped:
    textout.printable)."""
    ms = c["extra_us"] / 1000.0
    name = printable(c["name"])
    if c["kind"] == "outside_ops":
        if c["name"] == OUTSIDE_ALL:
            return f"+{ms:.1f} ms outside any operator and annotation"
        return f"+{ms:.1f} ms outside any operator in {name}"
    if c["kind"] == "entered_late":
        return f"+{ms:.1f} ms entered the step late ({name})"
    if c["kind"] == "gpu_idle":
        return f"+{ms:.1f} ms GPU idle on {printable(c['where'])} (waiting for launches)"
    what = "in kernel" if c["kind"] == "kernel" else "in"
    note = f" ({printable(c['note'])})" if c.get("note") else ""
    return f"+{ms:.1f} ms {what} {name}{note}"


def _counted(c: Dict[str, Any]) -> str:
    """What a contributor's count counts: calls of an op or kernel, stretches of a gap."""
    return "gaps" if c["kind"] in ("outside_ops", "gpu_idle") else "calls"


def why_lines(why: Sequence[Dict[str, Any]]) -> List[str]:
    """The human report's lines for ``why`` (:func:`compare`'s first list): per straggler
    and step, where its extra time went (the top contributors)."""
    lines = []
    for w in why:
        share = (
            ""
            if w["share"] is None
            else f", {100 * min(w['share'], 1.2):.0f}%{'+' if w['share'] > 1.2 else ''} explained"
        )
        own = w.get("explains") == "own_lateness"
        target = w["own_lateness_us"] if own else w["lateness_us"]
        if own and w["collective"].startswith("step end #"):  # a pipeline's step (analyze/p2p_steps.py)
            lines.append(f"why rank {w['rank']} is late in step {w['step']}: {target / 1000:.1f} ms more own time "
                         f"to its step end than the others' median, which reached them in send/recv (vs rank "
                         f"{w['reference_rank']}, the median rank){share}:")  # fmt: skip
        elif own:
            lines.append(f"why rank {w['rank']} is late in step {w['step']}: at most {max(w['lateness_us'], 0) / 1000:.1f} ms later than rank {w['reference_rank']} "
                         f"at {printable(w['collective'])}: its {target / 1000:.1f} ms of own extra time reached the "
                         f"others before that, in point-to-point ops (send/recv) or other groups{share}:")  # fmt: skip
        else:
            lines.append(f"why rank {w['rank']} is late in step {w['step']}: {w['lateness_us'] / 1000:.1f} ms later "
                         f"than rank {w['reference_rank']} (the median rank) at {printable(w['collective'])}{share}:")  # fmt: skip
        floor = max(50.0, 0.01 * target)  # below it: noise, not listed
        shown = [c for c in w["contributors"] if c["extra_us"] >= floor]
        for c in shown[:5]:
            lines.append(
                f"  {headline(c)}  [{c['kind']}, {printable(c['where'])}; {_counted(c)} {c['count']} vs {c['others_count']}]"
            )
            lines += _tail_lines(c.get("tail"))
        # the listed parts not printed count in the share: said when they matter, so the lines add up
        rest = w["contributors"][len(shown[:5]) :]
        if sum(c["extra_us"] for c in rest) >= max(floor, 0.05 * target):
            lines.append(f"  +{sum(c['extra_us'] for c in rest) / 1000:.1f} ms in {len(rest)} more part(s), each "
                         f"+{rest[0]['extra_us'] / 1000:.1f} ms or less (--json: contributors)")  # fmt: skip
        un = w.get("unexplained_us")
        if un is not None and (w["share"] is None or not 0.8 <= w["share"] <= 1.2):
            what = "less elsewhere" if un < 0 else "not in any part above the noise"
            gap = w.get("own_lateness_us", 0.0) - w["lateness_us"]
            if un < 0 and not own and gap >= max(floor, -0.5 * un):  # the reference's stretch held waiting
                what = (f"less elsewhere: rank {w['reference_rank']}, the reference, also waited for other ranks "
                        f"before that; rank {w['rank']}'s own extra time is {w['own_lateness_us'] / 1000:.1f} ms")  # fmt: skip
            past = w.get("past_top_us") or 0.0
            if un >= 0 and past >= floor:  # some of it in smaller parts, not listed
                what = (f"{past / 1000:.1f} ms of it in parts past the {TOP} largest, each smaller"
                        + ("; the rest not in any part above the noise" if un - past >= floor else ""))  # fmt: skip
            if un >= 0 and own:
                what += "; or, its own extra time reaching the others in send/recv, the reference rank spent it waiting in send/recv"
            lines.append(f"  {un / 1000:+.1f} ms unexplained ({what}: the parts add up to "
                         f"{w['explained_us'] / 1000:.1f} of {target / 1000:.1f} ms)")  # fmt: skip
        cpu = [c for c in w.get("cpu_side") or [] if c["extra_us"] >= floor][:3]
        if cpu:  # a GPU view: the CPU side that launched its work, apart (its own list)
            lines.append(f"  CPU side (launching the GPU's work): {'; '.join(headline(c) for c in cpu)}  "
                         f"[{printable(cpu[0]['where'])}]")  # fmt: skip
    return lines


def _tail_lines(tail: Any) -> List[str]:
    """Under a late entry explained by the previous step's tail: what the rank did there
    beyond the reference rank's tail (analyze/why.py ``_EnteredWhere.tail``)."""
    if not tail:
        return []
    out = [f"    step {tail['step']}'s tail (after the last collective): {tail['rank_us'] / 1000:.1f} ms vs "
           f"{tail['reference_us'] / 1000:.1f} ms on rank {tail['reference_rank']}:"]  # fmt: skip
    extra = max(tail["rank_us"] - tail["reference_us"], 0.0)
    for c in [c for c in tail["contributors"] if c["extra_us"] >= max(50.0, 0.01 * extra)][:3]:
        out.append(f"      {headline(c)}  [{c['kind']}, {printable(c['where'])}; {_counted(c)} {c['count']} vs {c['others_count']}]")  # fmt: skip
    return out


__all__ = ["headline", "why_lines"]
