"""The cap on the why's names per rank and step (analyze/name_cap.py; issue 38, item 2).

A synthetic run whose every operator and kernel call has a name of its own (as an
f-string ``record_function`` or a JIT kernel per shape gives): what each rank keeps is
bounded by the cap, not by its distinct names; the names kept hold exactly the time
they held uncapped, the rest is one ``(other names)`` part with the rest of the time;
the note says so in the text, the JSON and the page; with and without the compiled
kernel the output is the same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from tracefuse_stream.analyze.name_cap import FOLDED, NAME_CAP
from tracefuse_stream.analyze.stretch import unit_parts
from tracefuse_stream.analyze.timeline import KINDS, Segments
from tracefuse_stream.cli.app import main
from tracefuse_stream.report.info import collect_info
from tracefuse_synth.run import write_run

CAP = 4
STEPS = 3


@pytest.fixture(scope="module")
def distinct_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 ranks x 3 steps; every cpu_op and non-NCCL kernel call renamed ``name #i``."""
    d = tmp_path_factory.mktemp("distinct")
    for path in write_run(d, 4, steps=STEPS, layers=1):
        doc = json.loads(path.read_text())
        i = 0
        for e in doc["traceEvents"]:
            if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "kernel") and "nccl" not in e["name"]:
                e["name"] = f"{e['name']} #{i}"
                i += 1
        path.write_text(json.dumps(doc))
    return d


def _segments(d: Path, cap: int) -> List[Tuple[Segments, Dict[int, Tuple[int, int]]]]:
    scans: List[Any] = []
    collect_info([str(d)], jobs=1, sections=["collectives"], scans_out=scans, name_cap=cap)
    return [(sc.timeline, sc.steps) for sc in scans]


def _groups(seg: Segments, steps: Dict[int, Tuple[int, int]]) -> List[Tuple[int, int]]:
    """Each step's span as the cap groups it: from its start to the next step's start."""
    starts = sorted(lo for lo, _hi in steps.values())
    return list(zip(starts, starts[1:] + [seg.cuts[-1]]))


def _units(seg: Segments) -> List[Any]:
    return [seg.cpu[k] for k in sorted(seg.cpu)] + [seg.gpu[k] for k in sorted(seg.gpu)]


def test_what_a_rank_keeps_is_bounded_by_the_cap(distinct_run: Path) -> None:
    capped, uncapped = _segments(distinct_run, CAP), _segments(distinct_run, 10**9)
    assert len(capped) == len(uncapped) == 4
    for (seg, steps), (full, _steps) in zip(capped, uncapped):
        units = len(seg.cpu) + len(seg.gpu)
        assert units == 2 and len(steps) == STEPS  # the step thread and one GPU
        bound = STEPS * units * 3 * CAP + 1  # names per step, unit and kind, and "(other names)"
        assert len(full.names) > 3 * bound  # the distinct names, all kept when uncapped
        assert len(seg.names) <= bound
        assert seg.name_cap == CAP and full.folded == 0
        kept = set(seg.names) - {FOLDED}
        assert seg.folded == len(set(full.names) - kept) > 0  # every name is in one step only
        for (lo, hi), unit, full_unit in (
            (g, u, f) for g in _groups(seg, steps) for u, f in zip(_units(seg), _units(full))
        ):
            got, want = unit_parts(seg, unit, lo, hi), unit_parts(full, full_unit, lo, hi)
            for kind in KINDS[:3]:
                mine = {n: p for (k, n), p in got.items() if k == kind}
                theirs = {n: p for (k, n), p in want.items() if k == kind}
                named = {n: p for n, p in theirs.items() if n not in ("outside every annotation",)}
                top = sorted(named, key=lambda n: (-named[n].ns, n))[:CAP]
                assert sorted(n for n in mine if n != FOLDED and n in named) == sorted(top)
                for n in top:  # a kept name holds exactly its time and calls
                    assert (mine[n].ns, mine[n].count) == (theirs[n].ns, theirs[n].count)
                assert sum(p.ns for p in mine.values()) == sum(p.ns for p in theirs.values())
                if len(named) > CAP:
                    rest = [p for n, p in named.items() if n not in top]
                    assert mine[FOLDED].ns == sum(p.ns for p in rest)
                else:
                    assert FOLDED not in mine


def _out(capsys: pytest.CaptureFixture, *args: str) -> str:
    capsys.readouterr()
    assert main(list(args)) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("fmt", [[], ["--json"]])
def test_the_cap_is_said_and_both_code_paths_agree(
    distinct_run: Path, fmt: List[str], capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["info", str(distinct_run), "--collectives", "-j", "1", "--name-cap", str(CAP), *fmt]
    outs = []
    for kernel in ("1", "0"):
        monkeypatch.setenv("TRACEFUSE_KERNEL", kernel)
        outs.append(_out(capsys, *args))
    assert outs[0] == outs[1]
    folded = sum(seg.folded for seg, _steps in _segments(distinct_run, CAP))
    note = (
        f"names capped at {CAP} per rank and step (each kind, thread and GPU; --name-cap): "
        f"{folded} name(s) on 4 rank(s) folded into '{FOLDED}' in the why"
    )
    if fmt:
        assert note in json.loads(outs[0])["collectives"]["notes"]
    else:
        assert f"note: {note}" in outs[0].splitlines()
    # the default cap is far above this run's names per step: no note, nothing folded
    plain = _out(capsys, *args[: args.index("--name-cap")], *fmt)
    assert "names capped" not in plain and NAME_CAP > 100


def test_the_page_says_it_too(distinct_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    page = tmp_path / "r.html"
    _out(capsys, "report", str(distinct_run), "-o", str(page), "-j", "1", "-q", "--name-cap", str(CAP))
    assert f"names capped at {CAP} per rank and step" in page.read_text()


def test_a_cap_below_one_is_a_usage_error(distinct_run: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["info", str(distinct_run), "--collectives", "--name-cap", "0"]) == 2
    assert "--name-cap must be 1 or more names, not '0'" in capsys.readouterr().err
