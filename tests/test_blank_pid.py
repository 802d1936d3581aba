"""Issue 28: Kineto writes one global instant, "Record Window End" (``"s": "g"``, pid and
tid ``""``), at the end of each rank's trace. It used to get a process of its own per
rank (``RANK 0 - ''``, later ``RANK 0 - pid ""``) holding nothing else; it now goes into
the rank's CPU process (docs/OUTPUT_FORMAT.md), the same on both code paths, and the
merge still passes ``verify --against``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

from tracefuse_stream import merge, native
from tracefuse_stream.cli.app import main as cli_main

BASE_NS = 1_700_000_000_000_000_000
OS_PID = 11777
WINDOW_END = {"ph": "i", "cat": "", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 50}


def kineto_like(
    rank: int, first: List[Dict[str, Any]] = (), last: List[Dict[str, Any]] = ()
) -> Dict[str, Any]:  # type: ignore[assignment]
    meta = [
        {"ph": "M", "name": "process_name", "pid": OS_PID, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_labels", "pid": OS_PID, "tid": 0, "args": {"labels": "CPU"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
    ]
    ops = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": OS_PID, "tid": OS_PID, "ts": 10 + i, "dur": 1}
        for i in range(3)
    ]
    ops.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 20, "dur": 5})
    return {
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": [*first, *meta, *ops, *last],
    }


def write(tmp: Path, docs: List[Dict[str, Any]]) -> List[str]:
    paths = []
    for r, doc in enumerate(docs):
        p = tmp / f"host.{r}.pt.trace.json"
        p.write_text(json.dumps(doc))
        paths.append(str(p))
    return paths


def processes(path: Path) -> Dict[int, str]:
    events = json.loads(path.read_bytes())["traceEvents"]
    return {
        e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
    }


@pytest.mark.parametrize("kernel", [False, True])
def test_window_end_goes_into_the_cpu_process(
    tmp_path: Path, kernel: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kernel and native.kernel is None:
        pytest.skip("the optional C kernel is not built here")
    monkeypatch.setenv("TRACEFUSE_KERNEL", "1" if kernel else "0")
    inputs = write(tmp_path, [kineto_like(r, last=[WINDOW_END]) for r in range(2)])
    out = tmp_path / "m.json"
    merge(inputs, str(out), jobs=1)
    assert sorted(processes(out).values()) == ["RANK 0 - CPU", "RANK 0 - GPU", "RANK 1 - CPU", "RANK 1 - GPU"]
    events = json.loads(out.read_bytes())["traceEvents"]
    ends = [e for e in events if e.get("name") == "Record Window End"]
    names = processes(out)
    assert [(names[e["pid"]], e["s"], e["args"]["rank"]) for e in ends] == [
        ("RANK 0 - CPU", "g", 0),
        ("RANK 1 - CPU", "g", 1),
    ]
    header = json.loads(out.read_bytes())["tracefuse"]["ranks"]["0"]["pids"]
    assert [OS_PID, 15000] in header and ["", 15000] in header
    assert cli_main(["verify", str(out), "--against", *inputs]) == 0


def test_both_paths_write_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if native.kernel is None:
        pytest.skip("the optional C kernel is not built here")
    inputs = write(tmp_path, [kineto_like(r, last=[WINDOW_END]) for r in range(2)])
    written = []
    for k in ("0", "1"):
        monkeypatch.setenv("TRACEFUSE_KERNEL", k)
        out = tmp_path / f"m{k}.json"
        merge(inputs, str(out), jobs=1)
        written.append(out.read_bytes())
    assert written[0] == written[1]


def test_a_blank_pid_before_any_cpu_process_is_named_as_the_pid_it_is(tmp_path: Path) -> None:
    """No CPU process has appeared yet: the pid keeps a process of its own, named so that
    it reads as a pid, not as a process without a name."""
    inputs = write(tmp_path, [kineto_like(0, first=[dict(WINDOW_END, ts=5)])])
    out = tmp_path / "m.json"
    merge(inputs, str(out), jobs=1)
    assert 'RANK 0 - pid ""' in processes(out).values()
    assert cli_main(["verify", str(out), "--against", *inputs]) == 0
