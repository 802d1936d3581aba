"""A new user's first hour (issue 23): what an ML performance engineer with a run
directory, the README and ``--help`` meets, on the real recorded jobs.

1. Inputs given twice never merge (every spelling of one file; "two runs?" instead of
   cycles for the same ranks in another folder or a day later).
2. ``verify --against`` follows the selection the merged file records.
3. Messages a person reads: bounded listings, one note for many ranks, only warnings
   say ``warning:``, ``8 ranks × 2 cycles``, UTC instead of epoch ns, the profiler span
   of a step merge dropped (and said), Python errors in keywords.
5. The README starts with the job, with the output the commands really print.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from tracefuse_stream import merge, native
from tracefuse_stream.cli.app import main
from tracefuse_stream.errors import OutputError, UsageError
from tracefuse_stream.select.spans import SPAN_DROPPED_NOTE

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DAY_NS = 86400 * 10**9


def cli(capsys: pytest.CaptureFixture, *args: Any) -> Tuple[int, str, str]:
    """``tracefuse ARGS`` in this process: (exit code, stdout, stderr)."""
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def _load(path: Path) -> Dict[str, Any]:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


# --------------------------------------------------------------------------- 1. twice
@pytest.fixture
def ddp4(h: Any) -> Path:
    return h.recorded("ddp4")


def _same_file_twice(ddp4: Path, tmp_path: Path) -> List[Tuple[List[str], str, str]]:
    first = sorted(ddp4.iterdir())[0]
    link = tmp_path / "link_to_run"
    link.symlink_to(ddp4, target_is_directory=True)
    hard = tmp_path / "hard.json.gz"
    os.link(first, hard) if os.stat(first).st_dev == os.stat(tmp_path).st_dev else shutil.copy(first, hard)
    cases = [
        ([str(ddp4), str(ddp4) + "/"], str(ddp4), str(ddp4) + "/"),  # dir vs dir/
        ([str(first), str(first)], str(first), str(first)),  # the same file twice
        ([str(link), str(ddp4)], str(link), str(ddp4)),  # a symlink and its target
        ([str(first), str(ddp4)], str(first), str(ddp4)),  # a file and its folder
        ([str(ddp4 / ".." / ddp4.name), str(ddp4)], str(ddp4 / ".." / ddp4.name), str(ddp4)),
    ]
    if os.stat(hard).st_ino == os.stat(first).st_ino:
        cases.append(([str(first), str(hard)], str(first), str(hard)))  # a hard link
    return cases


def test_a_file_reached_twice_is_a_usage_error_naming_both_arguments(ddp4, tmp_path, capsys):
    out = tmp_path / "m.json"
    for args, a, b in _same_file_twice(ddp4, tmp_path):
        rc, _, err = cli(capsys, "merge", *args, "-o", out, "-j", "1")
        assert rc == 2, (args, err)
        assert repr(a) in err and repr(b) in err, err
        assert "give each input once" in err
        assert "--rank-from" not in err and "--cycle" not in err, err  # no hint leads on
        assert not out.exists() and not list(tmp_path.glob("m.json*"))
        # info and verify --against read inputs the same way
        rc, _, err = cli(capsys, "info", *args)
        assert rc == 2 and "give each input once" in err


def test_python_api_refuses_one_file_as_two_ranks(ddp4, tmp_path):
    first = sorted(ddp4.iterdir())[0]
    for inputs in ([first, first], {0: first, 1: first}, [ddp4, first]):
        with pytest.raises(UsageError, match="give each input once"):
            merge(inputs, str(tmp_path / "m.json"), jobs=1)  # type: ignore[arg-type]
    assert not (tmp_path / "m.json").exists()


def test_same_ranks_in_another_folder_are_two_runs_not_cycles(h, tmp_path, capsys):
    src = h.recorded("ddp4")
    run_a, run_b = tmp_path / "runA", tmp_path / "runB"
    shutil.copytree(src, run_a)
    run_b.mkdir()
    for p in sorted(src.iterdir()):  # the same job again an hour later (not a copy: plan/copies.py)
        t = _load(p)
        t["baseTimeNanoseconds"] += 3600 * 10**9
        (run_b / p.name.removesuffix(".gz")).write_text(json.dumps(t))
    rc, _, err = cli(capsys, "merge", run_a, run_b, "-o", tmp_path / "m.json", "-j", "1")
    assert rc == 2
    lines = err.splitlines()
    assert "files of 2 runs?" in lines[0] and "another folder" in lines[0]
    assert "--cycle" not in err and "profiling cycles (" not in err
    for d in (run_a, run_b):  # full paths, one per line, every file of both runs (4 each)
        listed = [ln.strip() for ln in lines if ln.strip().startswith(str(d) + os.sep)]
        assert sorted(listed) == sorted(str(p) for p in d.iterdir())
    assert lines[-1] == "merge one run at a time: give its folder, or its files by path"
    # each folder on its own merges
    rc, _, err = cli(capsys, "merge", run_a, "-o", tmp_path / "a.json", "-j", "1", "-q")
    assert rc == 0, err


def test_same_ranks_two_days_later_in_one_folder_are_two_runs(h, tmp_path, capsys):
    src = h.recorded("ddp4")
    d = tmp_path / "logs"
    d.mkdir()
    for p in sorted(src.iterdir()):
        shutil.copy(p, d / p.name)
        t = _load(p)
        t["baseTimeNanoseconds"] += 2 * DAY_NS  # the same job run again two days later
        (d / ("later_" + p.name.removesuffix(".gz"))).write_text(json.dumps(t))
    rc, _, err = cli(capsys, "merge", d, "-o", tmp_path / "m.json", "-j", "1")
    assert rc == 2, err
    assert "files of 2 runs? the same ranks appear again 2.0 days later" in err
    assert "--cycle" not in err
    listed = [ln.strip() for ln in err.splitlines() if ln.startswith("    ")]
    assert len(listed) == 8 and all(os.path.isabs(x) for x in listed)
    assert re.search(r"  run 1: starts \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}Z, 4 files:", err)
    # info shows both runs in its table, with the same words as a warning (exit 0)
    rc, out, err = cli(capsys, "info", d)
    assert rc == 0, err
    assert "warning: " in out and "files of 2 runs?" in out


# --------------------------------------------------------------------------- 2. verify
@pytest.mark.parametrize(
    "args",
    [
        ["--ranks", "0-3"],
        ["--ranks", "1,5", "--steps", "2:3"],
        ["--window", "10:200"],
        ["--keep-cat", "cpu_op,user_annotation", "--name", "^(?!aten::)"],
        ["--steps", "3"],
    ],
    ids=["ranks", "ranks+steps", "window", "filters", "one-step"],
)
def test_verify_against_the_run_follows_the_recorded_selection(h, tmp_path, capsys, args):
    run = h.recorded("ddp8_straggler")
    out = tmp_path / "m.json"
    rc, _, err = cli(capsys, "merge", run, *args, "-o", out, "-j", "1", "-q")
    assert rc == 0, err
    rc, text, err = cli(capsys, "verify", out, "--against", run, "--json")
    rep = json.loads(text)
    assert rc == 0 and rep["ok"], (text, err)
    merged = _load(out)["tracefuse"]["ranks_merged"]
    left = [f for f in rep["warnings"] if f["code"] == "against_left_out"]
    assert sum(f["count"] for f in left) == 8 - len(merged)
    assert all(rep["ranks"][str(r)]["against"].startswith("ok (") for r in merged)


def test_verify_follows_a_chosen_cycle_and_split_parts(h, tmp_path, capsys):
    run = h.recorded("ddp2_cycles")
    out = tmp_path / "c2.json"
    assert cli(capsys, "merge", run, "--cycle", "2", "-o", out, "-j", "1", "-q")[0] == 0
    rc, text, _ = cli(capsys, "verify", out, "--against", run, "--json")
    rep = json.loads(text)
    assert rc == 0, text
    (left,) = [f for f in rep["warnings"] if f["code"] == "against_left_out"]
    assert left["count"] == 2 and all("another profiling cycle" in e["why"] for e in left["examples"])
    ddp8 = h.recorded("ddp8_straggler")
    assert (
        cli(capsys, "merge", ddp8, "--split-ranks", "3", "-o", tmp_path / "s.json", "-j", "1", "-q")[0] == 0
    )
    for part in sorted(tmp_path.glob("s.ranks*.json")):
        rc, text, _ = cli(capsys, "verify", part, "--against", ddp8)
        assert rc == 0, text


def test_verify_says_how_many_inputs_it_compared(h, tmp_path, capsys):
    run = h.recorded("ddp8_straggler")
    out = tmp_path / "m.json"
    assert cli(capsys, "merge", run, "--ranks", "2,5", "-o", out, "-j", "1", "-q")[0] == 0
    rc, text, _ = cli(capsys, "verify", out, "--against", run)
    assert rc == 0
    assert "  checked against 2 of 8 inputs (6 left out by the merge's selection: not compared)" in text


def test_rank_from_order_does_not_claim_the_files_lack_a_rank(h, tmp_path, capsys):
    files = sorted(h.recorded("ddp4").iterdir())
    rc, out, _ = cli(capsys, "merge", *files, "--rank-from", "order", "-o", tmp_path / "o.json", "-j", "1")
    assert rc == 0
    assert "note: rank numbers taken from order: 0-3 (--rank-from order: the position among the inputs" in out
    assert "no distributedInfo.rank" not in out  # they have one: it was the option


def test_verify_against_another_run_still_fails(h, tmp_path, capsys):
    out = tmp_path / "m.json"
    assert (
        cli(capsys, "merge", h.recorded("ddp8_straggler"), "--ranks", "0-3", "-o", out, "-j", "1", "-q")[0]
        == 0
    )
    rc, text, _ = cli(capsys, "verify", out, "--against", h.recorded("ddp4"))
    assert rc == 5 and "against_unmatched" in text


# --------------------------------------------------------------------------- 3. messages
def test_cycle_listing_is_multi_line_and_bounded():
    from tracefuse_stream.plan.cycles import Cycle, describe_cycles

    class P:  # the two fields describe_cycles reads
        def __init__(self, c: int, r: int) -> None:
            self.path = f"/very/long/run/folder/vm_{1000 + r}.17961126919{c:05d}4163873.pt.trace.json.gz"

    cycles = [
        Cycle(c, 1_796_112_691_974_163_873 + c * 60 * 10**9, [P(c, r) for r in range(8)]) for c in range(1, 8)
    ]
    # each cycle's start: its files' earliest events, known here as info knows them
    known = {p.path: c.start_ns for c in cycles for p in c.plans}
    lines = describe_cycles(cycles, known=known)  # type: ignore[arg-type]
    assert len(lines) == 5 and lines[-1] == "  ... and 3 more (`tracefuse info` lists every file)"
    assert lines[0].startswith("  cycle 1: starts 2026-12-01 08:12:31.974163Z, 8 files: vm_1000.")
    assert lines[0].endswith(", ... and 6 more") and all(len(ln) < 200 for ln in lines)


def test_summary_notes_and_warnings(h, tmp_path, capsys):
    rc, out, _ = cli(capsys, "merge", h.recorded("natural_order"), "-o", tmp_path / "n.json", "-j", "1")
    assert rc == 0
    assert "note: rank numbers taken from filename: 0-11" in out
    assert "warning:" not in out  # nothing here is a problem
    rc, out, _ = cli(capsys, "merge", h.recorded("ddp8_straggler"), "--align", "collectives",
                     "-o", tmp_path / "a.json", "-j", "1")  # fmt: skip
    assert rc == 0 and "warning:" not in out
    table = out[out.index("note: clock alignment:") :].splitlines()
    assert table[1].split()[:3] == ["rank", "host", "offset_us"]
    assert table[2].split()[:2] == ["0-7", "vm"]  # one row for the 8 ranks with the same figures
    assert len([ln for ln in table if "reference host" in ln]) == 1


def test_cycle_all_counts_ranks_times_cycles(h, tmp_path, capsys):
    rc, out, _ = cli(capsys, "merge", h.recorded("ddp2_cycles"), "--cycle", "all", "-o", tmp_path / "m.json",
                     "-j", "1")  # fmt: skip
    assert rc == 0
    assert re.search(r"^merged 2 ranks × 2 cycles: ", out, re.M), out
    assert "16 rank" not in out and "4 rank(s)" not in out
    # each rank is listed once per cycle: a cycle column tells the rows apart, and each
    # row's "moved us" is against the ranks of its own cycle (one output file each)
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["cycle", "rank"], out
    rows = [ln.split() for ln in lines[1:5]]
    assert [(r[0], r[1]) for r in rows] == [("1", "0"), ("1", "1"), ("2", "0"), ("2", "1")], out
    for cycle in ("1", "2"):
        assert min(float(r[7].replace(",", "")) for r in rows if r[0] == cycle) == 0.0, out
    rc, js, _ = cli(capsys, "merge", h.recorded("ddp2_cycles"), "--cycle", "all", "-o", tmp_path / "m2.json",
                    "-j", "1", "--json-summary")  # fmt: skip
    assert rc == 0
    assert [(r["cycle"], r["rank"]) for r in json.loads(js)["ranks"]] == [(1, 0), (1, 1), (2, 0), (2, 1)]


def test_step_merge_drops_the_profiler_span_says_so_once_and_verifies(h, tmp_path, capsys, monkeypatch):
    run = h.recorded("ddp8_straggler")
    out = tmp_path / "st.json"
    rc, text, _ = cli(capsys, "merge", run, "--steps", "3", "-o", out, "-j", "1")
    assert rc == 0
    # the window in UTC with its length; no raw epoch nanoseconds anywhere in the summary
    assert re.search(r"^time window: \d{4}-\d\d-\d\dT?.*Z \.\. .*Z \([\d,.]+ ms\)$", text, re.M), text
    assert not re.search(r"\b1\d{18}\b", "\n".join(ln for ln in text.splitlines() if ".pt.trace." not in ln))
    notes = [ln for ln in text.splitlines() if "profiler-span slice" in ln]
    assert notes == [f"note: ranks 0-7: {SPAN_DROPPED_NOTE}"]
    merged = _load(out)
    assert not [e for e in merged["traceEvents"] if e.get("cat") == "Trace"]
    inputs = sum(
        1
        for p in run.iterdir()
        for e in _load(p)["traceEvents"]
        if e.get("name", "").startswith("PyTorch Profiler")
    )
    assert inputs == 8  # one span per rank was there to drop
    assert cli(capsys, "verify", out, "--against", run)[0] == 0
    # the pure-Python path writes the same bytes (the kernel hands these events over;
    # where it is not built, the merge above was the Python path already)
    if native.kernel is not None:
        monkeypatch.setenv("TRACEFUSE_KERNEL", "0")
        py = tmp_path / "py.json"
        assert cli(capsys, "merge", run, "--steps", "3", "-o", py, "-j", "1", "-q")[0] == 0
        assert py.read_bytes() == out.read_bytes()
    # a window that holds the whole recording keeps the span
    whole = tmp_path / "whole.json"
    assert cli(capsys, "merge", run, "--window", "0:100000", "-o", whole, "-j", "1", "-q")[0] == 0
    assert len([e for e in _load(whole)["traceEvents"] if e.get("cat") == "Trace"]) == 8


def test_python_errors_name_keywords_the_cli_flags(h, tmp_path, capsys):
    out = tmp_path / "m.json"
    out.write_text("{}")
    with pytest.raises(OutputError) as e:
        merge([h.recorded("ddp4")], str(out), jobs=1)
    assert "use force=True to overwrite" in str(e.value) and "--force" not in str(e.value)
    rc, _, err = cli(capsys, "merge", h.recorded("ddp4"), "-o", out, "-j", "1")
    assert rc == 3 and "use --force to overwrite" in err
    with pytest.raises(UsageError) as e:
        merge([h.recorded("ddp2_cycles")], str(tmp_path / "c.json"), jobs=1)
    assert 'cycle=N, cycle="latest", or cycle="all"' in str(e.value)


# --------------------------------------------------------------------------- 5. README
def test_readme_first_screen_is_the_job_with_real_output(h, tmp_path, capsys, monkeypatch):
    text = README.read_text()
    lines = text.splitlines()
    top = "\n".join(lines[:25])
    assert (
        "pip install -e . && python -m tracefuse_stream merge fixtures/sample_run -o merged_trace.json.gz --force"
        in top
    )
    assert "pip install -e '.[test]' && python -m pytest -q" in top
    assert "(about 5 minutes on 2 cores; more under *Development*)" in top  # how long it takes
    job = text[: text.index("## Everyday use")]
    for command in (
        "tracefuse merge tests/data/recorded/ddp8_straggler -o merged.json.gz",
        "tracefuse open merged.json.gz",
        "tracefuse info --collectives tests/data/recorded/ddp8_straggler",
    ):
        assert command in job
    # the merge output shown is what the command prints (timings aside)
    monkeypatch.chdir(REPO)
    rc, out, _ = cli(capsys, "merge", "tests/data/recorded/ddp8_straggler", "-o", tmp_path / "merged.json.gz")
    assert rc == 0
    for line in out.splitlines():
        if line.lstrip().split(" ")[0].isdigit():  # the per-rank rows
            assert line in job, line
    rc, out, _ = cli(capsys, "info", "--collectives", "tests/data/recorded/ddp8_straggler")
    assert out.splitlines()[1] in job  # the straggler line
    # internals live in docs/, every linked page exists, Development comes last
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (REPO / link).is_file(), link
    for moved in (
        "## Exactly how events are rewritten",
        "## Benchmarks",
        "## Layout",
        "### Perfetto archives",
    ):
        assert moved not in text
    assert [ln for ln in lines if ln.startswith("## ")][-1] == "## Development"
    dev = text[text.index("## Development") :]
    assert "TRACEFUSE_TRACE_PROCESSOR" in dev and "PATH" in dev
    # trace_processor is never said to be in ../shared (it no longer is, and will not be)
    assert all("not part of" in ln for ln in lines if "../shared" in ln and "trace_processor" in ln)


def test_long_listings_in_a_summary_are_bounded():
    from tracefuse_stream.pipeline.summary import TABLE_ROWS, MergeSummary, RankSummary
    from tracefuse_stream.plan.planner import SKIPPED_SHOWN, PlanList

    ranks = [RankSummary(r, f"run/rank_{r}.json", 10, 9, 1, 0, 0.1) for r in range(100)]
    ranks[70].salvage = {"summary": "truncated"}
    text = MergeSummary("m.json", ranks, 0, 1, 1, 1, 1.0, 1).format_text()
    rows = [ln for ln in text.splitlines() if ln.lstrip().split(" ")[0].isdigit()]
    assert [int(r.split()[0]) for r in rows] == list(range(TABLE_ROWS))
    assert (
        f"... and {100 - TABLE_ROWS} more ranks (--json-summary lists every rank); salvaged among them: 70"
        in text
    )
    assert "merged 100 ranks:" in text
    plans = PlanList()
    plans.skipped = [(f"run/config{i}.json", "not a trace") for i in range(10)]
    notes = plans.input_notes()
    assert len(notes) == SKIPPED_SHOWN + 1 and notes[-1].startswith(
        f"skipped {10 - SKIPPED_SHOWN} more files"
    )
    assert len(plans.input_notes(limit=None)) == 10  # info names every one
