"""File names in plan/'s notes and warnings go through textout.printable one by one, so
the API's strings (``PlanList.input_notes``, ``warnings``), not only the terminal's net,
hold a name with a terminal escape escaped (issue 39)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tracefuse_stream.plan.planner import plan_all

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "fixtures" / "sample_run"


def test_a_skipped_file_named_with_an_escape_is_noted_escaped(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for f in sorted(SAMPLE.iterdir())[:2]:
        shutil.copy(f, run / f.name)
    (run / "bad\x1b[31m.json").write_text('{"a": 1}')
    notes = plan_all([str(run)]).input_notes()
    skipped = [n for n in notes if n.startswith("skipped ")]
    assert skipped == [
        f"skipped {run}/bad\\x1b[31m.json: not a trace: a JSON object without traceEvents (keys: a)"
    ]
    assert not any("\x1b" in n for n in notes)
