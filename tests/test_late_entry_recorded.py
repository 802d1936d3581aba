"""A rank that enters a step late, explained from the previous step's tail with what it
did there (issue 35 item 4), on a real gloo job recorded for it (tools/record_traces.py,
tests/data/recorded/README.md: nothing in the traces names what was done):

* ``ddp4_tail_a``: rank 2 runs 2 x mm(640 x 640) at the very end of every step, after
  its last collective: it enters the next step late, the others wait for it there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest
from recorded_ops import mm_640_us

from tracefuse_stream.cli.app import main

RECORDED = Path(__file__).resolve().parent / "data" / "recorded"


def _coll(capsys: pytest.CaptureFixture) -> Dict[str, Any]:
    assert main(["info", "--collectives", "--json", "-j", "1", str(RECORDED / "ddp4_tail_a")]) == 0
    return json.loads(capsys.readouterr().out)["collectives"]


def _mm_us(rank: int) -> Dict[int, float]:
    """step -> rank's time in its 640 x 640 matmuls (the injected tail work), µs."""
    return mm_640_us("ddp4_tail_a", rank)


def test_a_late_entry_lists_what_the_previous_steps_tail_did(capsys: pytest.CaptureFixture) -> None:
    """Rank 2 is named; in steps 3 and 4 its why's top item is the late entry, and under
    it step 2's (3's) tail against the reference rank 0: the 2 matmuls only rank 2 ran,
    their self time within 0.1% of the matmuls' durations in the trace (an mm's child
    op, ~1 µs, is not its self time), most of the tail's extra. Step 2 is the first
    profiled step: its late entry is before the window, no tail to break down."""
    coll = _coll(capsys)
    assert [(s["rank"], s["steps"]) for s in coll["stragglers"]] == [(2, [2, 3, 4])]
    mm = _mm_us(2)
    why = {w["step"]: w for w in coll["why"] if w["rank"] == 2}
    assert sorted(why) == [2, 3, 4]
    first = why[2]["contributors"][0]
    assert (first["kind"], first["name"], first["tail"]) == (
        "entered_late",
        "before the profiled window",
        None,
    )
    for step in (3, 4):
        top = why[step]["contributors"][0]
        assert top["kind"] == "entered_late" and top["name"].startswith(
            f"before the step: after its last collective of step {step - 1}"
        )
        tail = top["tail"]
        assert (
            (tail["step"], tail["reference_rank"]) == (step - 1, why[step]["reference_rank"]) == (step - 1, 0)
        )
        head = tail["contributors"][0]
        assert (head["kind"], head["name"], head["count"], head["others_count"], head["note"]) == (
            "op", "aten::mm", 2, 0, "only on this rank"
        )  # fmt: skip
        assert abs(head["extra_us"] - mm[step - 1]) <= 0.001 * mm[step - 1]
        assert head["extra_us"] >= 0.95 * (tail["rank_us"] - tail["reference_us"])
        assert sorted((c["extra_us"] for c in tail["contributors"]), reverse=True) == [
            c["extra_us"] for c in tail["contributors"]
        ]
        assert all(set(c) == set(head) for c in tail["contributors"])  # no piece_ns / span_ns


def test_every_ranks_breakdown_carries_the_tail_and_the_text_says_it(capsys: pytest.CaptureFixture) -> None:
    """The same tail in every rank's breakdown (``breakdown``) and in the text report."""
    coll = _coll(capsys)
    mine = {b["step"]: b["contributors"][0] for b in coll["breakdown"] if b["rank"] == 2}
    assert [mine[s]["tail"]["contributors"][0]["name"] if mine[s]["tail"] else None for s in (2, 3, 4)] == [
        None, "aten::mm", "aten::mm"
    ]  # fmt: skip
    others = [b for b in coll["breakdown"] if b["rank"] != 2]
    assert all(c.get("tail") is None for b in others for c in b["contributors"])
    assert main(["info", "--collectives", "-j", "1", str(RECORDED / "ddp4_tail_a")]) == 0
    text = capsys.readouterr().out
    mm = _mm_us(2)
    for step in (2, 3):
        assert f"    step {step}'s tail (after the last collective): " in text
        assert f"      +{mm[step] / 1000:.1f} ms in aten::mm (only on this rank)  [op, " in text
