"""``merge NEW --against BASE --steps N``: one step of each run side by side.

On the recorded pair ddp4_runs_c (NEW) / ddp4_runs_a (BASE): BASE's rank r must come
out as its own processes titled ``BASE RANK r`` (merged as rank 10+r: pids and flow ids
apart), sorted right under ``NEW RANK r``, its step N starting at the very microsecond NEW's does on rank 0,
and every other step option refused with the option to use.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from tracefuse_stream.cli.app import main
from tracefuse_stream.pipeline.against import base_offset
from tracefuse_stream.plan.planner import plan_all
from tracefuse_stream.select.window import find_step_window

REC = Path(__file__).parent / "data" / "recorded"
NEW, BASE = str(REC / "ddp4_runs_c"), str(REC / "ddp4_runs_a")


def _steps(path: Path) -> Dict[Tuple[str, str], Tuple[float, float]]:
    """(process name, step name) -> (ts, dur) of the merged file's ProfilerSteps."""
    ev = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    names = {
        e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    return {
        (names[e["pid"]], e["name"]): (e["ts"], e["dur"])
        for e in ev
        if e.get("ph") == "X" and str(e.get("name")).startswith("ProfilerStep#")
    }


def _sorted_titles(path: Path) -> List[str]:
    """The process titles in the order Perfetto lists them (by process_sort_index)."""
    ev = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    meta = [e for e in ev if e.get("ph") == "M"]
    names = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    sort = {e["pid"]: e["args"]["sort_index"] for e in meta if e["name"] == "process_sort_index"}
    assert len(set(sort.values())) == len(sort)  # no two processes share a place
    return [names[p] for p in sorted(sort, key=sort.__getitem__)]


def test_base_ranks_are_offset_and_the_steps_start_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "side.json.gz"
    assert main(["merge", NEW, "--against", BASE, "--steps", "3", "-o", str(out), "-j", "1"]) == 0
    assert "merged as rank 10+r" in capsys.readouterr().err
    st = _steps(out)
    procs: List[str] = sorted({p for p, _ in st})
    assert procs == sorted(f"{run} RANK {r} - CPU" for run in ("NEW", "BASE") for r in range(4))
    assert _sorted_titles(out) == [f"{run} RANK {r} - CPU" for r in range(4) for run in ("NEW", "BASE")]
    assert st[("NEW RANK 0 - CPU", "ProfilerStep#3")][0] == st[("BASE RANK 0 - CPU", "ProfilerStep#3")][0]
    # BASE keeps its own skew between ranks: its rank 1 starts as far from its rank 0 as recorded
    plans = {p.rank: p for p in plan_all([BASE])}
    rec = {r: find_step_window(plans[r].path, plans[r].base_time_ns, 3, 3)[0] for r in (0, 1)}
    skew_us = st[("BASE RANK 1 - CPU", "ProfilerStep#3")][0] - st[("BASE RANK 0 - CPU", "ProfilerStep#3")][0]
    assert skew_us == pytest.approx((rec[1] - rec[0]) / 1000, abs=0.002)
    new_step = st[("NEW RANK 0 - CPU", "ProfilerStep#3")]
    # NEW's step is the longer: the window
    assert new_step[1] > st[("BASE RANK 0 - CPU", "ProfilerStep#3")][1]


def test_base_step_shows_another_step_of_base(tmp_path: Path) -> None:
    out = tmp_path / "side.json.gz"
    assert (
        main(["merge", NEW, "--against", BASE, "--steps", "3", "--base-step", "4", "-o", str(out), "-q"]) == 0
    )
    st = _steps(out)
    assert st[("NEW RANK 0 - CPU", "ProfilerStep#3")][0] == st[("BASE RANK 0 - CPU", "ProfilerStep#4")][0]


@pytest.mark.parametrize(
    "extra, says",
    [
        ([], "give --steps N (one step)"),
        (["--steps", "2:3"], "give --steps N (one step)"),
        (["--steps", "3", "--step-rank", "1"], "leave out --step-rank"),
        (["--steps", "3", "--align", "collectives"], "leave out --clock-offsets and --align collectives"),
    ],
)
def test_what_does_not_combine_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra, says
) -> None:
    out = tmp_path / "x.json.gz"
    assert main(["merge", NEW, "--against", BASE, *extra, "-o", str(out)]) == 2
    assert says in capsys.readouterr().err and not out.exists()
    assert main(["merge", NEW, "--base-step", "3", "-o", str(out)]) == 2
    assert "--base-step goes with --against BASE" in capsys.readouterr().err


def test_base_offset_is_a_power_of_ten_above_every_rank() -> None:
    assert [base_offset(x) for x in ([0, 3], [9], [10], [511], [])] == [10, 10, 100, 1000, 10]
