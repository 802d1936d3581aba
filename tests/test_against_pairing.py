"""Issue 28: ``verify --against INPUTS`` of a merge made with ``--ranks`` (a subset) or a
rank renumbering (``--rank-from order``) pairs each input with the merged rank the
merge itself identified it as -- by the ``source`` its header records, else by the
longest trailing part of that path the input shares (copies of the inputs elsewhere) --
or stops with a clear error that says what to pass; never a wrong pairing with exit 0.
The per-rank figures of such merges add up: in = kept + dropped + labels in."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any, List, Tuple

import pytest

from tracefuse_stream.cli.app import main as cli_main

BASE_NS = 1_700_000_000_000_000_000


def cli(*args: Any) -> Tuple[int, str, str]:
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        rc = cli_main([str(a) for a in args])
    return rc, o.getvalue(), e.getvalue()


def write_rank(path: Path, i: int, dist: bool) -> Path:
    """A small trace whose events tell its rank apart (``i + 2`` events named ``op<i>``)."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 100 + i, "tid": 1, "ts": 10 + j, "dur": 1}
        for j in range(2 + i)
    ]
    events.append({"ph": "M", "name": "process_name", "pid": 100 + i, "tid": 0, "args": {"name": "python"}})
    doc: dict = {"baseTimeNanoseconds": BASE_NS, "traceEvents": events}
    if dist:
        doc = {"distributedInfo": {"backend": "nccl", "rank": i, "world_size": 4}, **doc}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def merge_json(tmp: Path, inputs: List[Path], *opts: str) -> Tuple[Path, dict]:
    out = tmp / "merged.json"
    rc, js, err = cli("merge", *inputs, "-o", out, "--force", "-j", "1", "-q", "--json-summary", *opts)
    assert rc == 0, err
    summary = json.loads(js)
    for r in summary["ranks"]:  # the figures add up for a selection too
        assert r["events_in"] == r["events_kept"] + r["dropped"] + r["metadata_in"] + r["skipped"], r
        assert r["events_out"] == r["events_kept"] + r["metadata_out"] + r["flows_added"], r
    return out, summary


def verify(merged: Path, against: List[Path]) -> Tuple[int, dict]:
    rc, text, _ = cli("verify", merged, "--json", "--against", *against)
    return rc, json.loads(text)


def compared(report: dict) -> dict:
    """rank -> the name of the input it was checked against (a rank's ``op<i>`` events
    differ from every other's: ``ok`` is the right pairing)."""
    out = {}
    for r, row in report["ranks"].items():
        if row.get("against_input") is not None:
            assert row["against"].startswith("ok"), row
            out[int(r)] = Path(row["against_input"]).name
    return out


@pytest.fixture
def four(tmp_path: Path) -> List[Path]:
    return [write_rank(tmp_path / "run" / f"host.{i}.pt.trace.json", i, dist=True) for i in range(4)]


def test_subset_by_distributed_info_in_any_order(tmp_path: Path, four: List[Path]) -> None:
    merged, summary = merge_json(tmp_path, four, "--ranks", "1,3")
    assert [r["rank"] for r in summary["ranks"]] == [1, 3]
    for against in ([four[3], four[1]], four, list(reversed(four))):
        rc, rep = verify(merged, against)
        assert rc == 0, rep["errors"]
        assert compared(rep) == {1: "host.1.pt.trace.json", 3: "host.3.pt.trace.json"}


def test_renumbered_by_position(tmp_path: Path) -> None:
    """--rank-from order over files in reversed order: rank 0 is the file of
    distributedInfo rank 3; --ranks 0,2 keeps two of them."""
    files = [write_rank(tmp_path / "run" / f"f{i}.json", i, dist=True) for i in range(4)]
    merged, summary = merge_json(tmp_path, list(reversed(files)), "--rank-from", "order", "--ranks", "0,2")
    assert [(r["rank"], Path(r["path"]).name) for r in summary["ranks"]] == [(0, "f3.json"), (2, "f1.json")]
    for against in ([files[1], files[3]], [files[3], files[1]], list(reversed(files))):
        rc, rep = verify(merged, against)
        assert rc == 0, rep["errors"]
        assert compared(rep) == {0: "f3.json", 2: "f1.json"}
    # every input, in another order than the merge's: a left-out file's rank (a position)
    # cannot be told, so verify says what to pass instead of guessing
    rc, rep = verify(merged, files)
    assert rc == 5 and [e["code"] for e in rep["errors"]] == ["against_order"]
    assert rep["errors"][0]["examples"][0]["merged_from"] == ["run/f3.json", "run/f1.json"]


def test_copies_elsewhere_pair_by_their_names(tmp_path: Path, four: List[Path]) -> None:
    merged, _ = merge_json(tmp_path, four, "--ranks", "1,3")
    copies = tmp_path / "copies"
    shutil.copytree(tmp_path / "run", copies)
    rc, rep = verify(merged, [copies / four[3].name, copies / four[1].name])
    assert rc == 0, rep["errors"]
    assert compared(rep) == {1: "host.1.pt.trace.json", 3: "host.3.pt.trace.json"}


def test_copies_of_one_name_pair_by_their_folders(tmp_path: Path) -> None:
    """run/rank0/trace.json, run/rank1/trace.json, ... copied to another place: the
    file name alone names no rank; the folder and the name do."""
    files = [write_rank(tmp_path / "run" / f"rank{i}" / "trace.json", i, dist=False) for i in range(3)]
    merged, summary = merge_json(tmp_path, files, "--ranks", "1,2")
    assert [r["rank"] for r in summary["ranks"]] == [1, 2]
    copies = tmp_path / "elsewhere"
    shutil.copytree(tmp_path / "run", copies)
    rc, rep = verify(merged, [copies / "rank2" / "trace.json", copies / "rank1" / "trace.json"])
    assert rc == 0, rep["errors"]
    assert compared(rep) == {1: "trace.json", 2: "trace.json"}
    assert {r: Path(row["against_input"]).parent.name for r, row in rep["ranks"].items()} == {
        "1": "rank1",
        "2": "rank2",
    }


def test_swapped_copies_are_never_a_pass(tmp_path: Path, four: List[Path]) -> None:
    """Copies whose names were swapped: paired by name, their events differ from the
    merged ranks' -- an error, not exit 0."""
    merged, _ = merge_json(tmp_path, four, "--ranks", "1,3")
    swapped = tmp_path / "swapped"
    swapped.mkdir()
    shutil.copy(four[1], swapped / four[3].name)
    shutil.copy(four[3], swapped / four[1].name)
    rc, _rep = verify(merged, [swapped / four[1].name, swapped / four[3].name])
    assert rc == 5


def test_renamed_copies_stop_with_what_to_pass(tmp_path: Path, four: List[Path]) -> None:
    merged, _ = merge_json(tmp_path, four, "--ranks", "1,3")
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    shutil.copy(four[1], renamed / "a.json")
    rc, text, _ = cli("verify", merged, "--against", renamed / "a.json")
    assert rc == 5
    assert "pass the files the merge read" in text
    assert '"merged_from":["run/host.1.pt.trace.json","run/host.3.pt.trace.json"]' in text
