"""Issue 35 on real traces: GPU cases built from the real A100 NCCL fixture (a rank that
enters each step late; a host stall before a launch) and the gloo jobs recorded for the
root cause (tools/record_traces.py; the cause is in the script and the recordings'
README, never in a label of the trace).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest

import tracefuse_stream
from tracefuse_stream.cli.app import main

RECORDED = Path(__file__).resolve().parent / "data" / "recorded"


def _info(capsys: pytest.CaptureFixture, *args: str) -> Dict[str, Any]:
    assert main(["info", "--collectives", "--json", "-j", "1", *args]) == 0
    return json.loads(capsys.readouterr().out)["collectives"]


@pytest.fixture
def gpu_cases() -> Any:
    from conftest import require_shared

    require_shared("real", "a100_nccl_rank0.json.gz")
    import gpu_cases as cases

    return cases


def test_gpu_rank_entering_each_step_late_is_named_with_the_skew(gpu_cases: Any, tmp_path: Path) -> None:
    """Rank 1 of 2 copies of the real A100 trace starts each step 30 ms late and then
    works as the others (every CPU event and kernel of the step moved, the peers' first
    NCCL kernel waiting for it): its step-relative lateness is 0, which used to hide it.
    It is named, its why is the late entry, and fixing it saves about the 30 ms."""
    truth = gpu_cases.build_late_launches(
        tmp_path / "run", world_size=2, rank=1, added_us=30000.0, stall_at="step_start"
    )
    assert [x["start_delay_ns"] for x in truth["instances"]] == [30_000_000] * 3
    report = tracefuse_stream.stragglers(str(tmp_path / "run"))
    assert [s["rank"] for s in report["stragglers"]] == [1]
    for b in report["by_step"]:
        assert b["lateness_us"]["1"] == 0.0  # from its own step start it is on time
        assert b["own_lateness_us"]["1"] == b["held_us"]["1"] == 30000.0
    skews = [(k["step"], k["counted_us"]) for k in report["step_skew"] if k["rank"] == 1]
    assert skews == [(4, 30000.0), (5, 30000.0), (6, 30000.0)]
    assert all(k["counted_us"] == 0.0 for k in report["step_skew"] if k["rank"] != 1)
    names = [w["contributors"][0]["name"] for w in report["why"]]
    # the stall sits between the steps (the copies' step 4 and 5 end on time): never a profiled step's tail
    assert names == ["before the profiled window"] + [
        f"between steps (its step {s} ended on time: not in a profiled step)" for s in (4, 5)
    ]
    assert all(w["contributors"][0]["kind"] == "entered_late" and w["share"] == 1.0 for w in report["why"])
    for w in report["what_if"]:
        assert w["rank"] == 1 and 29_000.0 <= w["saves_us"] <= 30_000.0, w
    assert report["delayed"] == []


def test_gpu_host_stall_why_is_gpu_then_cpu_and_saves_the_stall(gpu_cases: Any, tmp_path: Path) -> None:
    """The host of rank 1 stalls 30 ms before a launch: the GPU view lists the idle GPU
    first, the CPU side apart lists the stall; fixing rank 1 saves about the stall."""
    truth = gpu_cases.build_late_launches(tmp_path / "run", world_size=2, rank=1, added_us=30000.0)
    report = tracefuse_stream.stragglers(str(tmp_path / "run"))
    assert report["straggler"] == truth["rank"]
    for w in report["why"]:
        assert w["view"] == "gpu" and w["contributors"][0]["kind"] == "gpu_idle"
        assert w["cpu_side"][0]["extra_us"] == pytest.approx(30000.0, rel=0.02)
        assert 0.8 <= w["share"] <= 1.2
    assert [w["saves_us"] for w in report["what_if"]] == [pytest.approx(30000.0, rel=0.05)] * 3


# ------------------------------------------------------- the gloo jobs recorded for issue 35
# (tests/data/recorded/README.md: what each rank does; nothing in the traces names it)


def test_pairs_then_world_names_the_stalled_rank_and_its_partner_as_delayed(
    capsys: pytest.CaptureFixture,
) -> None:
    """mg4_pairs_a: pair groups [0,1] and [2,3] all-reduce inside a custom autograd op in
    forward, then DDP over the world; rank 3 sleeps 0.1 s before the pair all-reduce.
    Rank 2 waits for it there and reaches the world all-reduce late: delayed, not named."""
    coll = _info(capsys, str(RECORDED / "mg4_pairs_a"))
    assert [s["rank"] for s in coll["stragglers"]] == [3]
    assert sorted((d["rank"], d["step"], d["by_rank"], d["origin"]) for d in coll["delayed"]) == [
        (2, s, 3, 3) for s in (2, 3, 4)
    ]
    for d in coll["delayed"]:
        assert d["group_ranks"] == [2, 3] and d["late_group_ranks"] == [0, 1, 2, 3]
        assert 95_000 <= d["wait_us"] <= 110_000  # the 0.1 s sleep, as waited at the pair all-reduce
    for w in coll["why"]:
        top = w["contributors"][0]
        assert w["rank"] == 3 and w["reference_rank"] not in (2, 3)  # never the delayed rank
        assert top["kind"] == "outside_ops" and 95_000 <= top["extra_us"] <= 105_000
        assert 0.8 <= w["share"] <= 1.2
    assert [(x["rank"], x["step"]) for x in coll["what_if"]] == [(3, 2), (3, 3), (3, 4)]
    assert all(95_000 <= x["saves_us"] <= 105_000 for x in coll["what_if"])  # fixing it saves the sleep
    for c in coll[
        "critical_path"
    ]:  # the path starts on rank 3 (entering the step after the first rank), its own work
        segs = [g for g in c["segments"] if g["dur_us"] > 0]
        k = 1 if segs[0]["kind"] == "entered_late" else 0
        assert segs[0]["rank"] == 3 and segs[0]["start_us"] == 0.0
        assert segs[k]["rank"] == 3 and segs[k]["kind"] == "own" and segs[k]["dur_us"] >= 95_000


def test_a_cascade_through_three_groups_names_its_origin(capsys: pytest.CaptureFixture) -> None:
    """mg6_three_groups_a: all-reduces on [0,1], [1,2], [2,3] in turn, then the world;
    rank 0 sleeps 0.1 s before the first: ranks 1 and 2 (and rank 3 where it arrives late
    at the world) are delayed, the cascade's origin rank 0."""
    coll = _info(capsys, str(RECORDED / "mg6_three_groups_a"))
    assert [s["rank"] for s in coll["stragglers"]] == [0]
    delayed = {(d["rank"], d["step"]): d for d in coll["delayed"]}
    assert {(1, s) for s in (2, 3, 4)} | {(2, s) for s in (2, 3, 4)} <= set(delayed)
    assert all(d["origin"] == 0 for d in delayed.values()) and {r for r, _ in delayed} <= {1, 2, 3}
    assert all(delayed[(1, s)]["by_rank"] == 0 and delayed[(2, s)]["by_rank"] == 1 for s in (2, 3, 4))
    assert all(95_000 <= x["saves_us"] <= 105_000 for x in coll["what_if"]) and len(coll["what_if"]) == 3
    assert all(
        w["contributors"][0]["kind"] == "outside_ops" and 0.8 <= w["share"] <= 1.2 for w in coll["why"]
    )


def test_two_stragglers_of_different_causes_and_what_each_saves(capsys: pytest.CaptureFixture) -> None:
    """ddp4_two_b: rank 1 sleeps 0.12 s, rank 3 runs 90 QRs (~39 ms) every step: both named,
    each with its own cause; fixing rank 1 saves its lead over rank 3 (~80 ms), rank 3 alone
    nothing (rank 1 still holds the all-reduce), both together rank 1's whole ~120 ms."""
    coll = _info(capsys, str(RECORDED / "ddp4_two_b"))
    assert [(s["rank"], s["on_critical_path"]) for s in coll["stragglers"]] == [(1, True), (3, False)]
    assert coll["delayed"] == []
    tops = {(w["rank"], w["step"]): w["contributors"][0] for w in coll["why"]}
    for s in (2, 3, 4):
        assert tops[(1, s)]["kind"] == "outside_ops" and 115_000 <= tops[(1, s)]["extra_us"] <= 125_000
        assert (tops[(3, s)]["kind"], tops[(3, s)]["name"]) == ("op", "aten::linalg_qr")
    saves = {(x["rank"], x["step"]): x["saves_us"] for x in coll["what_if"]}
    assert all(70_000 <= saves[(1, s)] <= 90_000 and saves[(3, s)] == 0.0 for s in (2, 3, 4))
    assert [x["ranks"] for x in coll["what_if_together"]] == [[1, 3]] * 3
    assert all(110_000 <= x["saves_us"] <= 125_000 for x in coll["what_if_together"])


def test_two_stragglers_in_two_groups_both_named_the_hidden_one_saving_nothing_alone(
    capsys: pytest.CaptureFixture,
) -> None:
    """mg4_pairs_c: pair groups [0,1] and [2,3], then DDP over the world; rank 0 sleeps
    0.1 s before the forward pair all-reduce, rank 3 runs 90 QRs (~25-35 ms here) before
    the backward one. Only rank 1 waits for rank 0 and only rank 2 for rank 3, so over
    the world's median neither looks waited for; each is held in its own pair. Rank 0
    sets the step: rank 3's extra time is off the critical path, so fixing it alone
    saves nothing, fixing rank 0 saves its lead over rank 3 at the world all-reduce, both
    together rank 0's whole ~100 ms. Rank 1 is delayed by rank 0. A why never compares
    with a straggler or a delayed rank: rank 0's reference is rank 2, which itself waited
    for rank 3, so rank 0 is less late than its own extra time, and the text says why."""
    coll = _info(capsys, str(RECORDED / "mg4_pairs_c"))
    assert [(s["rank"], s["on_critical_path"]) for s in coll["stragglers"]] == [(0, True), (3, False)]
    assert sorted((d["rank"], d["step"], d["by_rank"], d["origin"]) for d in coll["delayed"]) == [
        (1, s, 0, 0) for s in (2, 3, 4)
    ]
    assert all(d["group_ranks"] == [0, 1] and 95_000 <= d["wait_us"] <= 105_000 for d in coll["delayed"])
    rows = {b["step"]: b for b in coll["by_step"]}
    assert sorted((w["rank"], w["step"], w["reference_rank"]) for w in coll["why"]) == [
        (r, s, 2) for r in (0, 3) for s in (2, 3, 4)
    ]
    for w in coll["why"]:
        top = w["contributors"][0]
        if w["rank"] == 0:  # at the world all-reduce, against rank 2 (which waited ~25-35 ms for rank 3)
            assert top["kind"] == "outside_ops" and 95_000 <= top["extra_us"] <= 105_000
            assert (
                95_000 <= w["own_lateness_us"] <= 105_000 and w["lateness_us"] < w["own_lateness_us"] - 20_000
            )
            assert w["unexplained_us"] == pytest.approx(w["lateness_us"] - w["explained_us"], abs=0.01)
        else:  # at the backward pair all-reduce, where rank 2 waited for it
            assert (top["kind"], top["name"]) == ("op", "aten::linalg_qr") and 0.8 <= w["share"] <= 1.2
            assert 20_000 <= w["lateness_us"] <= rows[w["step"]]["held_us"]["3"] + 2_000
    saves = {(x["rank"], x["step"]): x["saves_us"] for x in coll["what_if"]}
    for s in (2, 3, 4):
        lead = rows[s]["held_us"]["0"] - rows[s]["held_us"]["3"]  # rank 0's lead over rank 3
        assert saves[(3, s)] == 0.0 and abs(saves[(0, s)] - lead) <= 5_000, (saves, lead)
    assert [x["ranks"] for x in coll["what_if_together"]] == [[0, 3]] * 3
    assert all(95_000 <= x["saves_us"] <= 105_000 for x in coll["what_if_together"])
    assert main(["info", "--collectives", "-j", "1", str(RECORDED / "mg4_pairs_c")]) == 0
    text = capsys.readouterr().out
    assert "what if: fixing rank 3 alone would save ~0.0 ms: rank(s) 0 would still hold up the step" in text
    (also,) = [line for line in text.splitlines() if line.startswith("also     : rank 3 ")]
    assert also.endswith("; off the critical path: another straggler sets the step (what if, below)")
    assert text.count("less elsewhere: rank 2, the reference, also waited for other ranks before that") == 3


def test_a_one_step_stall_in_a_cascade_is_named_in_its_step_only(capsys: pytest.CaptureFixture) -> None:
    """mg6_three_groups_b: the chain [0,1], [1,2], [2,3], then the world, 4 steps; rank 3
    sleeps 0.06 s before its first group all-reduce in ProfilerStep#3 only, that step
    ~1.8x the others. Rank 3 named for step 3 alone (its ~60 ms passes half a typical
    step), rank 2 delayed by it there; no other delay (a wait of a few ms in another step
    for a rank nobody names is noise, not a cascade)."""
    coll = _info(capsys, str(RECORDED / "mg6_three_groups_b"))
    assert [(s["rank"], s["steps"]) for s in coll["stragglers"]] == [(3, [3])]
    assert [(d["rank"], d["step"], d["by_rank"], d["origin"]) for d in coll["delayed"]] == [(2, 3, 3, 3)]
    assert 55_000 <= coll["delayed"][0]["wait_us"] <= 65_000 and coll["delayed"][0]["group_ranks"] == [2, 3]
    ((w,),) = [[w for w in coll["why"]]]
    assert (w["rank"], w["step"], w["contributors"][0]["kind"]) == (3, 3, "outside_ops")
    assert 55_000 <= w["contributors"][0]["extra_us"] <= 65_000 and 0.8 <= w["share"] <= 1.2
    ((x,),) = [[x for x in coll["what_if"]]]
    assert (x["rank"], x["step"]) == (3, 3) and 55_000 <= x["saves_us"] <= 65_000


def test_a_slow_pipeline_stage_is_named_not_the_stages_blocked_in_recv(capsys: pytest.CaptureFixture) -> None:
    """pp4_stages_a: 4 stages with send/recv, stage 2 works 20 ms more per micro-batch (4
    a step); the others sit in their send/recv for it and all meet at one all-reduce. The
    time in send/recv is waiting: stage 2 alone is named, with ~80 ms of own lateness."""
    coll = _info(capsys, str(RECORDED / "pp4_stages_a"))
    assert [s["rank"] for s in coll["stragglers"]] == [2]
    for b in coll["by_step"]:
        assert 75_000 <= b["own_lateness_us"]["2"] <= 85_000
        assert all(b["own_lateness_us"][r] < 5_000 for r in ("0", "1", "3"))


def test_the_balanced_multi_group_control_names_nobody(capsys: pytest.CaptureFixture) -> None:
    """mg4_pairs_b: the pairs-then-world job with nobody slower (pinned cores)."""
    coll = _info(capsys, str(RECORDED / "mg4_pairs_b"))
    assert coll["stragglers"] == [] and coll["delayed"] == [] and coll["what_if"] == []
    assert all(k["counted_us"] == 0.0 for k in coll["step_skew"])


def test_gpu_slower_kernels_why_lines_add_up_to_the_lateness(
    gpu_cases: Any, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Rank 1's compute kernels before an all-reduce last 30 ms longer in all, spread over
    many kernels: the 8 largest explain 77%, the rest is in smaller kernels. The JSON says
    how much is past the listed ones (``past_top_us``: all of the unexplained here), and
    the text's lines add up to the lateness: the top 5, the listed parts not printed, the
    unexplained remainder said to be in smaller parts (not "not above the noise")."""
    gpu_cases.build_longer_kernels(tmp_path / "run", world_size=2, rank=1, added_us=30000.0)
    report = tracefuse_stream.stragglers(str(tmp_path / "run"))
    assert [s["rank"] for s in report["stragglers"]] == [1]
    for w in report["why"]:
        assert w["lateness_us"] == pytest.approx(30000.0, abs=1.0) and w["share"] < 0.8
        assert len(w["contributors"]) == 8 and all(c["kind"] == "kernel" for c in w["contributors"])
        assert w["past_top_us"] == pytest.approx(w["unexplained_us"], abs=1.0)
    assert main(["info", "--collectives", "-j", "1", str(tmp_path / "run")]) == 0
    text = capsys.readouterr().out.splitlines()
    heads = [k for k, line in enumerate(text) if line.startswith("why rank 1 is late in step ")]
    assert len(heads) == 3
    for k in heads:
        body = []
        for line in text[k + 1 :]:
            if not line.startswith("  +"):
                break
            body.append(line)
        assert len(body) == 7 and "more part(s)" in body[5] and "in parts past the 8 largest" in body[6]
        total = sum(float(line.split()[0]) for line in body)
        assert total == pytest.approx(30.0, abs=0.05 * len(body))


def test_gpu_host_stall_text_names_the_cpu_side_apart(
    gpu_cases: Any, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The host of rank 1 stalls 30 ms before a launch: the text's why says the GPU sat
    idle and, on a line of its own after the GPU view, the CPU side that launched its
    work, where the 30 ms went (the JSON's ``cpu_side`` top item), not only "GPU idle"."""
    gpu_cases.build_late_launches(tmp_path / "run", world_size=2, rank=1, added_us=30000.0)
    report = tracefuse_stream.stragglers(str(tmp_path / "run"))
    (name,) = {w["cpu_side"][0]["name"] for w in report["why"]}
    assert all(w["cpu_side"][0]["extra_us"] == pytest.approx(30000.0, rel=0.02) for w in report["why"])
    assert main(["info", "--collectives", "-j", "1", str(tmp_path / "run")]) == 0
    text = capsys.readouterr().out.splitlines()
    heads = [k for k, line in enumerate(text) if line.startswith("why rank 1 is late in step ")]
    assert len(heads) == 3
    for k in heads:
        assert text[k + 1].startswith("  +30.0 ms GPU idle on GPU ")
        assert text[k + 2].startswith(f"  CPU side (launching the GPU's work): +30.0 ms in {name} ")
