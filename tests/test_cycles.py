"""Profiling cycles: schedule(repeat=2) wrote 2 files per rank into one folder.

On tests/data/recorded/ddp2_cycles (real: 2 DDP ranks x 2 cycles; cycle 1 holds
ProfilerStep#2/#3, cycle 2 ProfilerStep#6/#7). Variants (a rank that missed a cycle,
the same files without distributedInfo) are made here by script from those files.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path
from typing import Any, Dict, List

import pytest

CYCLE_FILES = {
    1: {0: "vm_4510.1796112691974163873.pt.trace.json.gz", 1: "vm_4511.1796112691979449488.pt.trace.json.gz"},
    2: {0: "vm_4510.1796112692026214583.pt.trace.json.gz", 1: "vm_4511.1796112692030640755.pt.trace.json.gz"},
}
STEPS = {1: ["ProfilerStep#2", "ProfilerStep#3"], 2: ["ProfilerStep#6", "ProfilerStep#7"]}


@pytest.fixture
def cycles_dir(h: Any) -> Path:
    d = h.recorded("ddp2_cycles")
    assert sorted(p.name for p in d.iterdir()) == sorted(n for c in CYCLE_FILES.values() for n in c.values())
    return d


def steps_by_rank(merged: Dict[str, Any]) -> Dict[int, List[str]]:
    out: Dict[int, List[str]] = {}
    for e in merged["traceEvents"]:
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            out.setdefault(e["args"]["rank"], []).append(e["name"])
    return {r: sorted(v) for r, v in out.items()}


def test_several_cycles_without_a_choice_is_a_usage_error_listing_them(h, cycles_dir, tmp_path):
    out = tmp_path / "m.json"
    p = h.run_cli("merge", cycles_dir, "-o", out)
    assert p.returncode == 2
    text = p.stderr_text
    lines = text.splitlines()  # one line per cycle, bounded (tests/test_first_hour.py)
    assert len(lines) == 4 and lines[0].startswith(f"tracefuse: error: {cycles_dir} holds 2 profiling cycles")
    for c, files in CYCLE_FILES.items():
        m = re.fullmatch(
            rf"  cycle {c}: starts (\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{{6}})Z, 2 files: (.*)", lines[c]
        )
        assert m, lines[c]
        assert m.group(2) == ", ".join(files[r] for r in (0, 1))
    line = lines[-1]
    assert "--cycle N, --cycle latest, or --cycle all" in line
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("choice, cycle", [("1", 1), ("2", 2), ("latest", 2)])
def test_one_chosen_cycle_merges_its_ranks(h, cycles_dir, tmp_path, choice, cycle):
    out = tmp_path / "m.json"
    p = h.run_cli("merge", cycles_dir, "--cycle", choice, "-o", out, "-j", "1", "--json-summary")
    assert p.returncode == 0, p.stderr_text
    inputs = {r: cycles_dir / name for r, name in CYCLE_FILES[cycle].items()}
    merged = h.load_output(out, exact=True)
    h.check_merge(merged, inputs)
    assert steps_by_rank(merged) == {0: STEPS[cycle], 1: STEPS[cycle]}
    notes = json.loads(p.stdout)["notes"]
    names = ", ".join(sorted(CYCLE_FILES[cycle].values()))
    assert f"merged profiling cycle {cycle} of 2 ({names})" in notes, notes


def test_cycle_all_writes_one_file_per_cycle(h, cycles_dir, tmp_path):
    out = tmp_path / "merged.json.gz"
    p = h.run_cli("merge", cycles_dir, "--cycle", "all", "-o", out, "-j", "1", "--json-summary")
    assert p.returncode == 0, p.stderr_text
    assert sorted(x.name for x in tmp_path.iterdir()) == ["merged.cycle1.json.gz", "merged.cycle2.json.gz"]
    for cycle, files in CYCLE_FILES.items():
        merged = h.load_output(tmp_path / f"merged.cycle{cycle}.json.gz", exact=True)
        h.check_merge(merged, {r: cycles_dir / n for r, n in files.items()})
        assert steps_by_rank(merged) == {0: STEPS[cycle], 1: STEPS[cycle]}
    summary = json.loads(p.stdout)
    assert summary["outputs"] == [
        str(tmp_path / "merged.cycle1.json.gz"),
        str(tmp_path / "merged.cycle2.json.gz"),
    ]


@pytest.mark.parametrize("bad", ["3", "0", "first", "-1"])
def test_a_bad_cycle_choice_is_a_usage_error(h, cycles_dir, tmp_path, bad):
    p = h.run_cli("merge", cycles_dir, f"--cycle={bad}", "-o", tmp_path / "m.json")
    assert p.returncode == 2, p.stderr_text
    assert "--cycle" in p.stderr_text and p.stderr_text.count("\n") <= 3  # cycles listed one a line
    assert list(tmp_path.iterdir()) == []


def test_info_lists_the_cycles(h, cycles_dir):
    p = h.run_cli("info", cycles_dir)
    assert p.returncode == 0, p.stderr_text
    text = p.stdout.decode()
    assert text.splitlines()[0].startswith("2 profiling cycles (the cycle column")
    assert text.splitlines()[1].startswith("  cycle 1: starts ")
    rows = [ln.split() for ln in text.splitlines()[4:8]]
    assert [(r[0], r[1], Path(r[-1]).name) for r in rows] == [
        (str(c), str(r), CYCLE_FILES[c][r]) for c in (1, 2) for r in (0, 1)
    ]
    js = json.loads(h.run_cli("info", cycles_dir, "--json").stdout)
    assert [c["cycle"] for c in js["cycles"]] == [1, 2]
    assert [[Path(f).name for f in c["files"]] for c in js["cycles"]] == [
        [CYCLE_FILES[c][0], CYCLE_FILES[c][1]] for c in (1, 2)
    ]
    assert js["cycles"][0]["start_ns"] < js["cycles"][1]["start_ns"]
    assert [(r["cycle"], r["rank"]) for r in js["ranks"]] == [(1, 0), (1, 1), (2, 0), (2, 1)]


def test_a_rank_missing_from_one_cycle_keeps_the_others_in_place(h, cycles_dir, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    for c, files in CYCLE_FILES.items():
        for r, name in files.items():
            if (c, r) != (1, 1):  # rank 1's first-cycle file is missing
                shutil.copy(cycles_dir / name, d / name)
    out = tmp_path / "m.json"
    p = h.run_cli("merge", d, "--cycle", "2", "-o", out, "-j", "1")
    assert p.returncode == 0, p.stderr_text
    h.check_merge(h.load_output(out, exact=True), {r: d / n for r, n in CYCLE_FILES[2].items()})
    p = h.run_cli("merge", d, "--cycle", "1", "-o", tmp_path / "one.json", "-j", "1")
    assert p.returncode == 0, p.stderr_text
    h.check_merge(h.load_output(tmp_path / "one.json", exact=True), {0: d / CYCLE_FILES[1][0]})


def test_cycles_without_distributed_info_are_grouped_by_worker_name(h, cycles_dir, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    for files in CYCLE_FILES.values():
        for name in files.values():
            t = json.loads(gzip.decompress((cycles_dir / name).read_bytes()))
            del t["distributedInfo"]  # as every trace before PyTorch 2.0
            (d / name).write_bytes(gzip.compress(json.dumps(t).encode(), compresslevel=1))
    p = h.run_cli("merge", d, "-o", tmp_path / "x.json")
    assert p.returncode == 2 and "holds 2 profiling cycles" in p.stderr_text
    out = tmp_path / "m.json"
    p = h.run_cli("merge", d, "--cycle", "1", "-o", out, "-j", "1")
    assert p.returncode == 0, p.stderr_text
    merged = h.load_output(out, exact=True)
    h.check_merge(merged, {r: d / n for r, n in CYCLE_FILES[1].items()})  # vm_4510 -> 0, vm_4511 -> 1 (order)
    assert [merged["tracefuse"]["ranks"][r]["rank_from"] for r in ("0", "1")] == ["order", "order"]


def test_cycle_all_needs_a_file_name(h, cycles_dir):
    p = h.run_cli("merge", cycles_dir, "--cycle", "all", "-o", "-")
    assert p.returncode == 2 and "needs a file name for -o" in p.stderr_text
    assert p.stdout == b""
