"""A pure pipeline (no collective in the step) judged from its send/recv pairs (issue 35),
on real gloo pipelines recorded with ``record_shapes=True`` (tools/record_traces.py;
tests/data/recorded/README.md says what each rank does, nothing in the traces names it):

* ``pp4_pure_a``: 4 stages, 4 micro-batches per step, send/recv only (no all_reduce of
  the loss); rank 2 runs 2 x mm(640 x 640) more in each micro-batch's forward;
* ``pp4_pure_b``: the same job, nobody slower.

The step end stands in for the collective every rank meets (analyze/p2p_steps.py): own
time is compared there, waits and holds are the pairs'.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest
from recorded_ops import mm_640_us

from tracefuse_stream.cli.app import main

RECORDED = Path(__file__).resolve().parent / "data" / "recorded"
STEPS = [2, 3, 4]


def _info(capsys: pytest.CaptureFixture, name: str) -> Dict[str, Any]:
    assert main(["info", "--collectives", "--json", "-j", "1", str(RECORDED / name)]) == 0
    return json.loads(capsys.readouterr().out)["collectives"]


def _text(capsys: pytest.CaptureFixture, name: str) -> str:
    assert main(["info", "--collectives", "-j", "1", str(RECORDED / name)]) == 0
    return capsys.readouterr().out


def test_the_slow_stage_is_named_and_the_stages_it_held_are_delayed(capsys: pytest.CaptureFixture) -> None:
    """No collective is matched, yet rank 2 is named in every step from the pairs: the
    others waited for it in send/recv. Rank 3 waited for it (its activations), rank 1
    too (its sends held until rank 2 posted its recvs, its grads late), rank 0 for rank
    1, whose delay started at rank 2: every delayed rank's cascade has origin 2."""
    coll = _info(capsys, "pp4_pure_a")
    assert coll["instances"] == [] and coll["not_assessed"] is None
    p2p = coll["point_to_point"]
    assert (p2p["total"], p2p["linked"], p2p["not_linked"]["total"]) == (144, 72, 0)
    assert coll["straggler"] == 2 and [s["rank"] for s in coll["stragglers"]] == [2]
    assert coll["candidates"] == []
    (s,) = coll["stragglers"]
    assert s["steps"] == STEPS and s["evidence"] in ("moderate", "strong") and s["p_chance"] <= 0.05
    assert (
        s["instances"] == 48
    )  # its send/recv pairs: 4 micro-batches x (recv + send) x 2 directions x 3 steps
    assert [b["stragglers"] for b in coll["by_step"]] == [[2], [2], [2]]
    for b in coll["by_step"]:  # held is the others' wait, capped by its own extra time
        assert b["instances"] == 0 and b["held_us"]["2"] == b["own_lateness_us"]["2"] > b["threshold_us"]["2"]
        assert all(b["held_us"][q] <= b["threshold_us"][q] for q in ("0", "1", "3"))
    assert sorted((d["rank"], d["step"], d["by_rank"], d["origin"]) for d in coll["delayed"]) == sorted(
        (r, st, by, 2) for st in STEPS for r, by in ((0, 1), (1, 2), (3, 2))
    )
    for d in coll["delayed"]:  # waited at send/recv pairs with the rank it names, several times
        assert d["collective"].startswith("send/recv ") and d["waits"] > 1 and d["wait_us"] > 0
        assert d["group_ranks"] == sorted({d["rank"], d["by_rank"]})
        assert d["late_at"].startswith("send/recv ")
    text = _text(capsys, "pp4_pure_a")
    assert "\nstraggler: rank 2 -- the others waited " in text
    assert "; last to arrive in 40 of 48 send/recv pairs, waited " in text
    assert "delayed: rank 3 is late at send/recv " in text and "delayed: rank 1 is late at send/recv " in text
    assert (
        "because it waited " in text and "for rank 1 in " in text and "the cascade starts at rank 2" in text
    )
    assert "wait in send/recv pairs per step (ms;" in text and "figures: no collective in the steps" in text
    assert "not assessed" not in text


def test_the_why_names_the_extra_matmuls_by_about_what_they_took(capsys: pytest.CaptureFixture) -> None:
    """The why of each step is rank 2's whole step (to its end) against the median
    rank's, measured against its own extra time (``explains: own_lateness``): the top
    part is the injected aten::mm, 80-120% of that extra time and of the matmuls' time
    read from the trace; the parts explain it all (80-120%)."""
    coll = _info(capsys, "pp4_pure_a")
    mm = mm_640_us("pp4_pure_a", 2)
    assert sorted(mm) == STEPS
    ids = {p["id"] for p in coll["point_to_point"]["pairs"]}
    whys = [w for w in coll["why"] if w["rank"] == 2]
    assert [w["step"] for w in whys] == STEPS and len(coll["why"]) == 3
    for w in whys:
        assert w["explains"] == "own_lateness" and w["view"] == "cpu"
        assert w["collective"] == f"step end #{w['instance']}" and w["instance"] > max(ids)
        assert w["reference_rank"] in (0, 1, 3)
        assert 0.8 <= w["share"] <= 1.2, w
        top = w["contributors"][0]
        assert (top["kind"], top["name"]) == ("op", "aten::mm"), top
        assert 0.8 <= top["extra_us"] / w["own_lateness_us"] <= 1.2, (top, w["own_lateness_us"])
        assert 0.8 <= top["extra_us"] / mm[w["step"]] <= 1.2, (top, mm)
        assert top["count"] > top["others_count"]
    text = _text(capsys, "pp4_pure_a")
    for st in STEPS:
        line = next(x for x in text.splitlines() if x.startswith(f"why rank 2 is late in step {st}: "))
        assert (
            "more own time to its step end than the others' median, which reached them in send/recv" in line
        )
        after = text.split(line + "\n", 1)[1].splitlines()[0]
        assert after.startswith("  +") and " ms in aten::mm (" in after


def test_fixing_the_slow_stage_saves_about_its_matmuls(capsys: pytest.CaptureFixture) -> None:
    """what_if re-times the step through its pairs with rank 2's extra own time cut:
    the saving is its matmuls' time in the trace within 15% (the machine's load moves
    the other stages' gaps, the cut's reference, by a few ms: 1.00, 0.89, 0.98 of it as
    recorded); the critical path runs through rank
    2, whose own time on it is at least its matmuls'."""
    coll = _info(capsys, "pp4_pure_a")
    mm = mm_640_us("pp4_pure_a", 2)
    lengths = {c["step"]: c["step_us"] for c in coll["critical_path"]}
    assert [(w["rank"], w["step"]) for w in coll["what_if"]] == [(2, st) for st in STEPS]
    assert coll["what_if_together"] == []
    for w in coll["what_if"]:
        assert 0.85 * mm[w["step"]] <= w["saves_us"] <= 1.15 * mm[w["step"]], (w, mm)
        assert w["step_us"] == lengths[w["step"]]
    for c in coll["critical_path"]:
        segs = c["segments"]
        assert all(s["name"].startswith("send/recv ") or s["name"] == "step end" for s in segs[1:])
        assert segs[0]["kind"] != "entered_late" or segs[0]["name"] == "step start"
        mine: Dict[int, float] = {}
        for s in segs:
            mine[s["rank"]] = mine.get(s["rank"], 0.0) + (s["dur_us"] if s["kind"] == "own" else 0.0)
        assert max(mine, key=lambda r: mine[r]) == 2 and mine[2] > mm[c["step"]]
    text = _text(capsys, "pp4_pure_a")
    assert "what if: fixing rank 2 would save ~" in text and "re-timed through every send/recv pair)" in text


def test_the_pure_pipeline_control_names_nobody(capsys: pytest.CaptureFixture) -> None:
    """pp4_pure_b: the same pure pipeline, nobody slower: assessed (the pairs), nobody
    named, delayed or estimated (the fill and drain bubbles are no one's fault)."""
    coll = _info(capsys, "pp4_pure_b")
    assert coll["instances"] == [] and coll["not_assessed"] is None and coll["point_to_point"]["linked"] == 72
    assert coll["straggler"] is None and coll["stragglers"] == [] and coll["candidates"] == []
    assert coll["delayed"] == [] and coll["what_if"] == [] and coll["why"] == []
    assert coll["verdict"]["text"].startswith("no rank stands out (most waited for: rank ")
    assert [c["step"] for c in coll["critical_path"]] == STEPS
    assert "\nstraggler: none -- no rank stands out" in _text(capsys, "pp4_pure_b")


@pytest.mark.parametrize("name", ["pp4_pure_a", "pp4_pure_b"])
def test_the_python_path_gives_the_same_answer(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Without the compiled kernel every event goes through Python: one answer, the
    breakdown of every rank included."""
    with_kernel = _info(capsys, name)
    monkeypatch.setenv("TRACEFUSE_KERNEL", "0")
    assert _info(capsys, name) == with_kernel


def test_the_json_fields_are_the_documented_ones(capsys: pytest.CaptureFixture) -> None:
    """docs/collectives.md's schema: the same keys as for collectives, the step end's
    id in ``worst_instance`` and the why."""
    coll = _info(capsys, "pp4_pure_a")
    assert set(coll["stragglers"][0]) == {
        "rank", "held_us", "steps", "last_arrivals", "instances", "p_chance", "margin", "noise_margin",
        "evidence", "by_size_only", "on_critical_path", "held_all_steps_us",
    }  # fmt: skip
    assert coll["stragglers"][0]["by_size_only"] is (coll["stragglers"][0]["p_chance"] > 0.05)
    assert coll["stragglers"][0]["on_critical_path"] is True  # the only one: it sets the step
    for d in coll["delayed"]:
        assert set(d) == {
            "rank", "step", "by_rank", "origin", "collective", "group", "group_ranks", "wait_us", "waits",
            "late_at", "late_group", "late_group_ranks",
        }  # fmt: skip
    for w in coll["what_if"]:
        assert set(w) == {"rank", "step", "saves_us", "step_us", "estimated"} and w["estimated"] is True
    for c in coll["critical_path"]:
        assert set(c) == {"step", "step_us", "start_ns", "segments"}
        for k, s in enumerate(c["segments"]):
            assert set(s) == {"rank", "kind", "name", "start_us", "dur_us", "instance"}
            assert s["kind"] in ("own", "communication") or (k == 0 and s["kind"] == "entered_late")
    ends = [w["instance"] for w in coll["why"]]
    assert [b["worst_instance"] for b in coll["by_step"]] == ends == sorted(set(ends))
    assert coll["definitions"].startswith("no collective in the steps (a pipeline): wait = ")
    assert any(
        n.startswith("no collective in the steps: waits and holds read at the 72 ") for n in coll["notes"]
    )
