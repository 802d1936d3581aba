"""Issue 28: one answer for every input. Metadata never moves the output base; no
wrong trace with exit 0 (pid aliases, tids -7/7, link args >= 2**32, id2, lone
surrogates); no internal error (exit 70) for any input; the kernel and the Python
path give the same bytes or the same error. Inputs are generated here (tests/hostile.py)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import List

import pytest

from conftest import run_cli
from hostile import BASE_NS, PERIOD_NS, cli, events_of, thread_name, write, x_event
from tracefuse_stream import native

PATHS = ["1", "0"]  # TRACEFUSE_KERNEL: the C kernel, the Python path


@pytest.fixture(params=PATHS, ids=["kernel", "python"])
def path_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "1" and native.kernel is None:
        pytest.skip("the C kernel is not built")
    monkeypatch.setenv("TRACEFUSE_KERNEL", request.param)
    return str(request.param)


def _rebased(tmp: Path) -> List[Path]:
    """Three ranks at the same instants: rank 1 re-based one Kineto period earlier,
    rank 2 two (ts grow by as much); rank 1's thread_name at ts 0, rank 2's at its old ts."""
    p_us = PERIOD_NS // 1000
    out = []
    for r, meta_ts in ((0, 0), (1, 0), (2, 1000)):
        events = [thread_name(meta_ts), x_event(Decimal("1000.5") + r * p_us), x_event(2000 + r * p_us)]
        out.append(write(tmp / f"r{r}.json", events, base_ns=BASE_NS - r * PERIOD_NS, rank=r, world=3))
    return out


def test_metadata_never_moves_the_output_base(tmp_path: Path, path_kind: str) -> None:
    inputs = _rebased(tmp_path)
    out = tmp_path / "out.json"
    rc, _, err = cli("merge", *inputs, "-o", out, "-q", "-j", "1")
    assert (rc, err) == (0, "")
    events = events_of(out)
    timed = [e["ts"] for e in events if e["ph"] != "M"]
    # the base is the first event minus 10 s (the ranks' bases are 91 and 182 days apart)
    assert timed == [10_000_000.5, 10_001_000] * 3
    assert all(0 <= e["ts"] < 2**32 for e in events)
    names = [e for e in events if e["name"] == "thread_name"]
    # rank 0's ts 0 is 10 s before its first event; the others fall before the base
    # and are placed where their process starts
    assert [(n["ts"], n["args"]["rank"]) for n in names] == [(9_999_000, 0), (10_000_000.5, 1), (10_000_000.5, 2)]
    header = json.loads(out.read_bytes())["tracefuse"]
    assert header["base_time_ns"] == BASE_NS + 1_000_500 - 10_000_000_500


def test_metadata_before_the_base_on_stdout(tmp_path: Path, path_kind: str) -> None:
    """stdout cannot be written twice: metadata used to make that merge fail (exit 3)."""
    inputs = _rebased(tmp_path)
    p = run_cli("merge", *inputs, "-o", "-", "-q", "-j", "1", env={"TRACEFUSE_KERNEL": path_kind})
    assert (p.returncode, p.stderr_text) == (0, "")
    assert [e["ts"] for e in json.loads(p.stdout)["traceEvents"] if e["ph"] != "M"] == [10_000_000.5, 10_001_000] * 3


def test_both_paths_write_the_same_rebased_merge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if native.kernel is None:
        pytest.skip("the C kernel is not built")
    inputs = _rebased(tmp_path)
    outs = []
    for k in PATHS:
        monkeypatch.setenv("TRACEFUSE_KERNEL", k)
        out = tmp_path / f"out{k}.json"
        assert cli("merge", *inputs, "-o", out, "-q", "-j", "1")[0] == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
