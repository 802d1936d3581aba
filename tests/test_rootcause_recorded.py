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
    """Rank 2 of 4 copies of the real A100 trace starts each step 30 ms late and then
    works as the others (every CPU event and kernel of the step moved, the peers' first
    NCCL kernel waiting for it): its step-relative lateness is 0, which used to hide it.
    It is named, its why is the late entry, and fixing it saves about the 30 ms."""
    truth = gpu_cases.build_late_launches(
        tmp_path / "run", world_size=4, rank=2, added_us=30000.0, stall_at="step_start"
    )
    assert [x["start_delay_ns"] for x in truth["instances"]] == [30_000_000] * 3
    report = tracefuse_stream.stragglers(str(tmp_path / "run"))
    assert [s["rank"] for s in report["stragglers"]] == [2]
    for b in report["by_step"]:
        assert b["lateness_us"]["2"] == 0.0  # from its own step start it is on time
        assert b["own_lateness_us"]["2"] == b["held_us"]["2"] == 30000.0
    skews = [(k["step"], k["counted_us"]) for k in report["step_skew"] if k["rank"] == 2]
    assert skews == [(4, 30000.0), (5, 30000.0), (6, 30000.0)]
    assert all(k["counted_us"] == 0.0 for k in report["step_skew"] if k["rank"] != 2)
    names = [w["contributors"][0]["name"] for w in report["why"]]
    # the stall sits between the steps (the copies' step 4 and 5 end on time): never a profiled step's tail
    assert names == ["before the profiled window"] + [
        f"between steps (its step {s} ended on time: not in a profiled step)" for s in (4, 5)
    ]
    assert all(w["contributors"][0]["kind"] == "entered_late" and w["share"] == 1.0 for w in report["why"])
    for w in report["what_if"]:
        assert w["rank"] == 2 and 29_000.0 <= w["saves_us"] <= 30_000.0, w
    assert report["delayed"] == []


def test_gpu_host_stall_why_is_gpu_then_cpu_and_saves_the_stall(gpu_cases: Any, tmp_path: Path) -> None:
    """The host of rank 1 stalls 30 ms before a launch: the GPU view lists the idle GPU
    first, the CPU side apart lists the stall; fixing rank 1 saves about the stall."""
    truth = gpu_cases.build_late_launches(tmp_path / "run", world_size=4, rank=1, added_us=30000.0)
    report = tracefuse_stream.stragglers(str(tmp_path / "run"))
    assert report["straggler"] == truth["rank"]
    for w in report["why"]:
        assert w["view"] == "gpu" and w["contributors"][0]["kind"] == "gpu_idle"
        assert w["cpu_side"][0]["extra_us"] == pytest.approx(30000.0, rel=0.02)
        assert 0.8 <= w["share"] <= 1.2
    assert [w["saves_us"] for w in report["what_if"]] == [pytest.approx(30000.0, rel=0.05)] * 3
