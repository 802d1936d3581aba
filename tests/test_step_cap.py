"""The cap on the steps the analysis keeps per rank (analyze/step_cap.py; issue 38, item 2).

A synthetic run of 2 ranks x 12 steps (ProfilerStep#0..#11): with a cap of 4 the
analysis keeps steps #0..#3 on both ranks, exactly what an uncapped analysis of the
window 0:3 gives, and says so (the text's line, ``step_cap`` in the JSON, the page,
diff's warnings); under the cap nothing is said and nothing changes; ``--max-steps``
and the user's window choose; bad values are usage errors. In the file's pass the
timeline holds nothing past the kept steps, and a file whose step numbers are not in
time order is read again without that limit, to the same result.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from tracefuse_stream.analyze import step_cap
from tracefuse_stream.analyze.onepass import _scan_file
from tracefuse_stream.analyze.step_cap import MAX_STEPS, PassLimit, steps_limit
from tracefuse_stream.cli.app import main
from tracefuse_stream.plan.planner import plan_all
from tracefuse_synth.run import write_run

STEPS = 12
HINT = "--max-steps N, or --steps A:B (info: --step-window), to choose"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("steps")
    write_run(d, 2, steps=STEPS, layers=1)
    return d


def _out(capsys: pytest.CaptureFixture, *args: str) -> str:
    capsys.readouterr()
    assert main(list(args)) == 0
    return capsys.readouterr().out


def _json(capsys: pytest.CaptureFixture, run: Path, *args: str) -> Dict[str, Any]:
    out = _out(capsys, "info", str(run), "--collectives", "--json", "-j", "1", *args)
    return json.loads(out)["collectives"]


def _steps(c: Dict[str, Any]) -> List[int]:
    return [row["step"] for row in c["by_step"]]


def test_the_limit_bounds_rank_steps() -> None:
    assert steps_limit(8) == MAX_STEPS == 1000
    assert steps_limit(164) == 999  # 163,840 // 164
    assert steps_limit(16_384) == 10
    assert steps_limit(1_000_000) == 1  # never none
    assert steps_limit(16_384, 50) == 50  # --max-steps: the user's


@pytest.mark.parametrize("kernel", ["1", "0"])
def test_the_cap_keeps_the_first_steps_and_says_so(
    run: Path, kernel: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACEFUSE_KERNEL", kernel)
    capped = _json(capsys, run, "--max-steps", "4")
    text = "steps capped: analysed ProfilerStep#0..#3, 4 of 12 profiled steps (--max-steps 4; " + HINT + ")"
    assert capped.pop("step_cap") == {
        "first_step": 0,
        "last_step": 3,
        "steps_kept": 4,
        "steps_profiled": 12,
        "max_steps": 4,
        "files": 2,
        "chosen": "--max-steps",
        "window": None,
        "text": text,
    }
    assert _steps(capped) == [0, 1, 2, 3]
    # exactly the analysis of the window 0:3 read whole (no cap: 12 steps <= 1,000)
    window = _json(capsys, run, "--step-window", "0:3")
    assert "step_cap" not in window
    assert capped == window
    lines = _out(capsys, "info", str(run), "--collectives", "-j", "1", "--max-steps", "4").splitlines()
    assert lines[1] == text  # right under the matched instances
    assert re.search(r"rank\s+step 0\s+step 1\s+step 2\s+step 3\s+total", "\n".join(lines))


def test_under_the_cap_nothing_is_said(run: Path, capsys: pytest.CaptureFixture) -> None:
    plain = _json(capsys, run)
    assert "step_cap" not in plain and _steps(plain) == list(range(STEPS))
    assert _json(capsys, run, "--max-steps", str(STEPS)) == plain  # 12 of 12: nothing left out
    text = _out(capsys, "info", str(run), "--collectives", "-j", "1")
    assert "steps capped" not in text


def test_the_automatic_cap_divides_the_rank_steps(
    run: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(step_cap, "RANK_STEPS", 10)  # 2 rank files: 5 steps each
    cap = _json(capsys, run)["step_cap"]
    assert (cap["first_step"], cap["last_step"], cap["steps_kept"], cap["max_steps"]) == (0, 4, 5, 5)
    assert cap["chosen"] == "auto"
    assert cap["text"] == (
        "steps capped: analysed ProfilerStep#0..#4, 5 of 12 profiled steps (at most 5 steps per rank "
        "at 2 rank file(s) keeps the analysis' memory bounded; " + HINT + ")"
    )
    assert "step_cap" not in _json(capsys, run, "--max-steps", "100")  # the user's cap wins


@pytest.mark.parametrize("kernel", ["1", "0"])
def test_the_users_window_chooses_and_the_cap_bounds_it(
    run: Path, kernel: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACEFUSE_KERNEL", kernel)
    inside = _json(capsys, run, "--step-window", "3:6", "--max-steps", "4")
    assert "step_cap" not in inside and _steps(inside) == [3, 4, 5, 6]  # 4 steps: within the cap
    wide = _json(capsys, run, "--step-window", "2:11", "--max-steps", "4")
    cap = wide.pop("step_cap")
    assert (cap["first_step"], cap["last_step"], cap["steps_profiled"], cap["window"]) == (2, 5, 10, [2, 11])
    assert "10 of 12" not in cap["text"] and "4 of 10 profiled steps in the window #2..#11" in cap["text"]
    assert _steps(wide) == [2, 3, 4, 5]
    same = _json(capsys, run, "--step-window", "2:5")
    # the same analysis but the instance ids: the capped pass never read steps #0..#1's
    for k in ("ranks", "step_time", "stragglers", "verdict", "why", "notes", "per_collective"):
        assert wide[k] == same[k], k
    shift = same["instances"][0]["id"]  # the instances before step #2, read by the window alone
    assert shift > 0 and wide["instances"][0]["id"] == 0
    assert [i["id"] + shift for i in wide["instances"]] == [i["id"] for i in same["instances"]]
    for mine, theirs in zip(wide["by_step"], same["by_step"]):
        assert mine.pop("worst_instance") + shift == theirs.pop("worst_instance")
        assert mine == theirs


def test_report_and_diff_say_it(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    page = tmp_path / "r.html"
    _out(capsys, "report", str(run), "-o", str(page), "-j", "1", "-q", "--max-steps", "4")
    html = page.read_text()
    assert "steps capped: analysed ProfilerStep#0..#3, 4 of 12 profiled steps" in html
    assert 'id="step-cap"' in html  # drawn, not only embedded
    wide = tmp_path / "w.html"
    _out(capsys, "report", str(run), "-o", str(wide), "-j", "1", "-q", "--max-steps", "4", "--steps", "2:11")
    assert "analysed ProfilerStep#2..#5, 4 of 10 profiled steps in the window #2..#11" in wide.read_text()
    assert (
        main(
            ["report", str(run), "-o", str(tmp_path / "x.html"), "-q", "--max-steps", "4", "--steps", "2:40"]
        )
        == 2
    )
    assert "step 40 not found" in capsys.readouterr().err  # checked on every step recorded, not the kept ones
    plain = tmp_path / "plain.html"
    _out(capsys, "report", str(run), "-o", str(plain), "-j", "1", "-q")
    assert "steps capped:" not in plain.read_text()
    d = json.loads(_out(capsys, "diff", str(run), str(run), "-j", "1", "--json", "--max-steps", "4"))
    for side in ("base", "new"):
        assert [w for w in d[side]["warnings"] if w.startswith("steps capped")] == [
            "steps capped: analysed ProfilerStep#0..#3, 4 of 12 profiled steps (--max-steps 4; " + HINT + ")"
        ]


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["info", "--collectives", "--max-steps", "0"],
            "--max-steps must be 1 or more steps per rank, not '0'",
        ),
        (
            ["info", "--collectives", "--max-steps", "x"],
            "--max-steps must be 1 or more steps per rank, not 'x'",
        ),
        (
            ["report", "-o", "-", "--max-steps", "-3"],
            "--max-steps must be 1 or more steps per rank, not '-3'",
        ),
        (
            ["info", "--collectives", "--step-window", "5:3"],
            "bad --step-window '5:3': first step 5 is after last step 3",
        ),
        (["info", "--step-window", "1:2"], "--step-window chooses the steps --collectives analyses"),
        (["info", "--max-steps", "3"], "--max-steps chooses the steps --collectives analyses"),
    ],
)
def test_bad_values_are_usage_errors(
    run: Path, args: List[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    assert main([args[0], str(run), *args[1:]]) == 2
    assert message in capsys.readouterr().err


def test_a_window_past_the_recorded_steps_is_refused(run: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["info", str(run), "--collectives", "--step-window", "3:40", "--max-steps", "2"]) == 2
    assert "40" in capsys.readouterr().err


class _Timeline:
    def __init__(self) -> None:
        self.limits: List[int] = []
        self.floors: List[int] = []

    def set_limit(self, ns: int) -> None:
        self.limits.append(ns)

    def set_floor(self, ns: int) -> None:
        self.floors.append(ns)


def test_the_pass_limit_is_the_end_of_the_step_after_the_kept_ones() -> None:
    steps: Dict[int, Tuple[int, int]] = {}
    tl = _Timeline()
    limit = PassLimit(steps, 2, None, tl)
    for s in range(5):
        steps[s] = (100 * s, 100 * s + 90)
        limit.update()
    assert tl.limits == [290] and tl.floors == []  # #0, #1 kept, #2 the next: nothing after its end is read
    assert limit.safe({0: steps[0], 1: steps[1], 2: steps[2]})
    steps[-1] = (500, 590)  # a lower number later in time: what was left out may be read
    limit.update()
    assert tl.limits == [290, 190] and not limit.safe({-1: steps[-1], 0: steps[0], 1: steps[1]})


def test_with_a_window_the_pass_floor_is_the_end_of_the_last_step_before_it() -> None:
    steps: Dict[int, Tuple[int, int]] = {}
    tl = _Timeline()
    limit = PassLimit(steps, 2, (4, 9), tl)
    for s in range(8):
        steps[s] = (100 * s, 100 * s + 90)
        limit.update()
    # no floor before the file shows more than 2 steps (#0..#2), then the end of the last before #4
    assert tl.floors == [290, 390] and tl.limits == [690]  # #4, #5 kept, #6 the next
    assert limit.safe({4: steps[4], 5: steps[5], 6: steps[6]})
    assert not limit.safe({3: steps[3], 4: steps[4], 5: steps[5]})


def _renumbered(src: Path, dst: Path) -> Path:
    """``src`` with its ProfilerStep numbers reversed: the lowest last in time."""
    dst.mkdir()
    for f in sorted(src.iterdir()):
        text = re.sub(
            r"ProfilerStep#(\d+)", lambda m: f"ProfilerStep#{STEPS - 1 - int(m.group(1))}", f.read_text()
        )
        (dst / f.name).write_text(text)
    return dst


@pytest.mark.parametrize("kernel", ["1", "0"])
@pytest.mark.parametrize("window, kept", [(None, [0, 1, 2, 3]), ((5, 11), [5, 6, 7, 8])])
@pytest.mark.parametrize("reverse", [False, True])
def test_the_pass_limit_changes_nothing_read(
    run: Path,
    tmp_path: Path,
    reverse: bool,
    window: Any,
    kept: List[int],
    kernel: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRACEFUSE_KERNEL", kernel)
    d = _renumbered(run, tmp_path / "rev") if reverse else run
    plan = plan_all([str(d)])[0]
    early = _scan_file(plan, ("collectives",), None, 256, (4, window))
    whole = _scan_file(plan, ("collectives",), None, 256, (4, window), early=False)
    assert early.scan is not None and whole.scan is not None
    assert sorted(early.scan.steps) == sorted(whole.scan.steps) == kept
    assert early.scan.events == whole.scan.events and early.scan.step_time == whole.scan.step_time
    assert early.scan.timeline.cuts == whole.scan.timeline.cuts
    assert early.steps == set(range(STEPS))  # every number recorded: the run check's


def test_the_api_caps_too(run: Path) -> None:
    from tracefuse_stream import diff, stragglers

    report: Dict[str, Any] = dict(stragglers(str(run), max_steps=4))
    assert report["step_cap"]["steps_kept"] == 4 and _steps(report) == [0, 1, 2, 3]
    assert "step_cap" not in stragglers(str(run))
    d = diff(str(run), str(run), max_steps=5)
    assert any(w.startswith("steps capped: analysed ProfilerStep#0..#4") for w in d["new"]["warnings"])


def test_one_step_kept_is_named_alone() -> None:
    cap = step_cap.StepCap(2, 2, 1, 2, 1, 4, "--max-steps", (2, 7))
    assert cap.text() == (
        "steps capped: analysed ProfilerStep#2, 1 of 2 profiled steps in the window #2..#7 (--max-steps 1; "
        + HINT
        + ")"
    )
