"""``merge --link-collectives``' per-rank step counters (report/step_counters.py).

Each GPU rank's process gets two counter tracks, ``exposed comm (ms) per step`` and
``GPU idle (ms) per step``: at each step's start the step's value, at its end 0 (or the
next step's value when the steps abut). Checked on:

* a hand-built 2-rank run whose figures are worked out by hand (:func:`_rank_trace`):
  rank 0 on GPU 3 (pid 3 -> output pid 10003), steps that abut and one after a gap, its
  clock 7,000,123 ns after rank 1's (an exact shift with ns digits); rank 1 CPU only,
  with a counter of its own named like ours (an input's counter is never taken for the
  merge's). No collective matches there, so the step figures come from the side pass;
* the bundled sample run (4 ranks on two GPUs per host, node1's clock 1.2 ms ahead,
  merged with ``--align collectives``): the figures come from the summary's analysis;
* the real A100 NCCL trace made into 2 ranks (tests/gpu_cases.py; shared fixtures).

Always: the values equal ``info --collectives --json``'s ``step_time`` (exact, to the
ns), every counter sits in the process of the rank's kernels, at the ``ProfilerStep#N``
slice's written ts (shifted as the rank's other events), the output is strict JSON and
``verify --against`` the inputs passes.
"""

from __future__ import annotations

import json
import os
import sys
import tarfile
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Tuple

import gpu_cases
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from importer_model import model_counters  # noqa: E402

from tracefuse_stream import native  # noqa: E402
from tracefuse_stream.cli.app import main  # noqa: E402
from tracefuse_stream.pipeline.orchestrate import merge  # noqa: E402
from tracefuse_stream.report.step_counters import EXPOSED, IDLE, KEY, TRACKS  # noqa: E402
from tracefuse_stream.verify.check import verify  # noqa: E402

HERE = Path(__file__).resolve().parent
SAMPLE = HERE.parent / "fixtures" / "sample_run"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32"
BASE_NS = 1_790_857_026_000_000_000
LATER_NS = 7_000_123  # rank 0's clock zero after rank 1's: its shift in the merge


def _x(cat: str, name: str, ts: int, dur: int, pid: int, tid: int) -> Dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": {}}


def _rank_trace(rank: int) -> Dict[str, Any]:
    """Rank 0: steps 1 [0, 1000), 2 [1000, 2000) and 3 [2500, 3000) µs on thread 1 of pid
    100; GPU pid 3, streams 7 and 20. Step 1: GEMM [100, 400), NCCL [300, 600): compute
    300, comm 300 of which 100 under the GEMM, so exposed 200, idle 1000 - 500 = 500.
    Step 2: NCCL [1200, 1300): exposed 100, idle 900. Step 3: GEMM [2600, 2700):
    exposed 0, idle 400. Rank 1: steps 1 and 2 on pid 101, CPU operators only, and a
    counter event of its own named as the merge's."""
    if rank == 0:
        events = [
            _x("user_annotation", "ProfilerStep#1", 0, 1000, 100, 1),
            _x("user_annotation", "ProfilerStep#2", 1000, 1000, 100, 1),
            _x("user_annotation", "ProfilerStep#3", 2500, 500, 100, 1),
            _x("cpu_op", "aten::mm", 10, 40, 100, 1),
            _x("kernel", GEMM, 100, 300, 3, 7),
            _x("kernel", NCCL, 300, 300, 3, 20),
            _x("kernel", NCCL, 1200, 100, 3, 20),
            _x("kernel", GEMM, 2600, 100, 3, 7),
            {"ph": "M", "name": "process_labels", "pid": 3, "tid": 0, "args": {"labels": "GPU 3"}},
        ]
    else:
        events = [
            _x("user_annotation", "ProfilerStep#1", 0, 1000, 101, 1),
            _x("user_annotation", "ProfilerStep#2", 1000, 1000, 101, 1),
            _x("cpu_op", "aten::add", 100, 50, 101, 1),
            {"ph": "C", "name": EXPOSED, "pid": 101, "tid": 1, "ts": 500, "args": {KEY: 1}},
        ]
    return {
        "distributedInfo": {"rank": rank, "world_size": 2},
        "baseTimeNanoseconds": BASE_NS + (LATER_NS if rank == 0 else 0),
        "traceEvents": events,
    }


@pytest.fixture()
def hand_run(tmp_path: Path) -> Path:
    d = tmp_path / "hand"
    d.mkdir()
    for r in (0, 1):
        (d / f"rank{r}.json").write_text(json.dumps(_rank_trace(r)))
    return d


def _info_steps(capsys: pytest.CaptureFixture, src: Path) -> List[Dict[str, Any]]:
    assert main(["info", "--collectives", "--json", str(src)]) == 0
    return json.loads(capsys.readouterr().out)["collectives"]["step_time"]


def _load(path: Path, h: Any) -> Dict[str, Any]:
    return h.load_output(path, exact=True)  # strict JSON: NaN/Infinity raise; numbers as written


def _counters(trace: Dict[str, Any]) -> Dict[Tuple[int, str], List[Tuple[Decimal, Decimal]]]:
    """(pid, name) -> [(ts µs, value ms)] of the merge's step counters, in file order."""
    out: Dict[Tuple[int, str], List[Tuple[Decimal, Decimal]]] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "C" and e.get("name") in (EXPOSED, IDLE) and "rank" not in e["args"]:
            assert set(e["args"]) == {KEY} and e["tid"] == 0, e
            out.setdefault((e["pid"], e["name"]), []).append((Decimal(e["ts"]), Decimal(e["args"][KEY])))
    return out


def _steps(trace: Dict[str, Any]) -> Dict[Tuple[int, int], Tuple[Decimal, Decimal]]:
    """(rank, step) -> the written ProfilerStep#N slice's (ts, end), µs."""
    return {
        (e["args"]["rank"], int(e["name"].split("#")[1])): (
            Decimal(e["ts"]),
            Decimal(e["ts"]) + Decimal(e["dur"]),
        )
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    }


def _check_against_info(trace: Dict[str, Any], rows: List[Dict[str, Any]]) -> int:
    """Every GPU rank and step of ``info``'s figures: both counters set to them at the
    step's written start, in the process of that rank's kernels on that device; the
    number of (rank, step) checked."""
    counters = _counters(trace)
    steps = _steps(trace)
    kernel_pids: Dict[int, set] = {}
    for e in trace["traceEvents"]:
        if e.get("cat") == "kernel":
            kernel_pids.setdefault(e["args"]["rank"], set()).add(e["pid"])
    checked = 0
    for row in rows:
        g = row["gpu"]
        if g is None or (row["rank"], row["step"]) not in steps:
            continue
        r, dev = row["rank"], int(g["device"].split()[1])
        pid = (r + 1) * 10000 + dev
        assert pid in kernel_pids[r]
        start = steps[(r, row["step"])][0]
        for name, key in ((EXPOSED, "comm_exposed_us"), (IDLE, "idle_us")):
            at = dict(counters[(pid, name)])
            assert at[start] * 1000 == Decimal(repr(g[key])), (r, row["step"], name)
        checked += 1
    return checked


# ---------------------------------------------------------------- hand-built, always
@pytest.mark.parametrize("kernel", ["1", "0"])
def test_hand_built_run_counters_by_hand(
    hand_run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    h: Any,
    kernel: str,
) -> None:
    """With the compiled kernel and without it (its Python twin): one answer."""
    if kernel == "1" and native.kernel is None:
        pytest.skip("the compiled kernel is not built here")
    monkeypatch.setenv("TRACEFUSE_KERNEL", kernel)
    rows = _info_steps(capsys, hand_run)
    out = tmp_path / "merged.json"
    summary = merge([str(hand_run)], str(out), link_collectives=True, jobs=1, verify=True)
    assert summary.verify_reports and all(r.ok for r in summary.verify_reports)
    trace = _load(out, h)
    shift = Decimal(LATER_NS).scaleb(-3)  # 7000.123 µs: rank 0's ts move by exactly this
    assert trace["tracefuse"]["ranks"]["0"]["shift_ns"] == LATER_NS
    t = [shift + x for x in (0, 1000, 2000, 2500, 3000)]
    exposed = [Decimal(x) for x in ("0.2", "0.1", "0", "0", "0")]
    idle = [Decimal(x) for x in ("0.5", "0.9", "0", "0.4", "0")]
    # steps 1 and 2 abut: step 2's value replaces step 1's at 1000, no 0 between
    assert _counters(trace) == {(10003, EXPOSED): list(zip(t, exposed)), (10003, IDLE): list(zip(t, idle))}
    assert _check_against_info(trace, rows) == 3
    assert [r["rank"] for r in rows if r["gpu"] is None] == [1, 1]
    # the counters' ts are the written ProfilerStep slices' (shifted as the rank's events)
    steps = _steps(trace)
    assert [steps[(0, s)][0] for s in (1, 2, 3)] == [t[0], t[1], t[3]]
    assert summary.counters_added == 10 and [r.counters_added for r in summary.ranks] == [10, 0]
    assert any(n == "step counters: none for rank 1: no GPU events (CPU only)" for n in summary.notes)
    assert any(n.startswith(f"step counters: rank 0: '{TRACKS[0]}' and '{TRACKS[1]}'") for n in summary.notes)
    # rank 1's own counter (named as ours) stays the input's: rank arg, compared with its input
    (own,) = [e for e in trace["traceEvents"] if e.get("ph") == "C" and e["pid"] == 20101]
    assert own["args"] == {KEY: 1, "rank": 1}
    report = verify(str(out), against=[str(p) for p in sorted(hand_run.iterdir())])
    assert report.ok and report.ranks[0]["counters"] == 10 and report.ranks[1]["counters"] == 1
    # what Perfetto's importer makes of them: two tracks in rank 0's GPU process (and
    # rank 1's own counter its track, as it would without the merge's)
    tracks = {k: v for k, v in model_counters(out).items() if k[1] in TRACKS}
    assert sorted(tracks) == [(10003, TRACKS[1]), (10003, TRACKS[0]), (20101, TRACKS[0])]
    assert [v for _, v in tracks[(10003, TRACKS[1])]] == [0.5, 0.9, 0.0, 0.4, 0.0]


def test_the_same_without_links_has_no_counters(hand_run: Path, tmp_path: Path, h: Any) -> None:
    out = tmp_path / "plain.json"
    linked = merge([str(hand_run)], str(tmp_path / "linked.json"), link_collectives=True, jobs=1)
    plain = merge([str(hand_run)], str(out), jobs=1)
    assert _counters(_load(out, h)) == {} and plain.counters_added == 0
    # the kept events are the same: the counters are counted apart
    assert [r.events_kept for r in linked.ranks] == [r.events_kept for r in plain.ranks]
    assert [r.events_out - r.counters_added - r.flows_added for r in linked.ranks] == [
        r.events_out for r in plain.ranks
    ]


def test_steps_window_keeps_the_steps_it_keeps(hand_run: Path, tmp_path: Path, h: Any) -> None:
    """``--steps 2:2`` of rank 0: the window [1000, 2000] µs; step 1 touches it at its
    end and is kept whole (every event's rule), step 3 is outside."""
    out = tmp_path / "window.json"
    summary = merge(
        [str(hand_run)], str(out), link_collectives=True, steps=(2, 2), step_rank=0, jobs=1, verify=True
    )
    trace = _load(out, h)
    kept = sorted(s for r, s in _steps(trace) if r == 0)
    assert kept == [1, 2]
    shift = Decimal(LATER_NS).scaleb(-3)
    assert [ts for ts, _ in _counters(trace)[(10003, IDLE)]] == [shift, shift + 1000, shift + 2000]
    assert summary.counters_added == 6


def test_gpu_process_filtered_out_gets_no_counters(hand_run: Path, tmp_path: Path, h: Any) -> None:
    out = tmp_path / "nokernels.json"
    summary = merge(
        [str(hand_run)], str(out), link_collectives=True, drop_cat=["kernel"], jobs=1, verify=True
    )
    assert _counters(_load(out, h)) == {} and summary.counters_added == 0
    assert "rank 0: step counters: none, its GPU 3 process has no event in the merge" in summary.notes


@pytest.mark.parametrize("output", ["split.json", "run.perfetto.tar"])
def test_counters_go_with_their_rank_file(hand_run: Path, tmp_path: Path, h: Any, output: str) -> None:
    out = tmp_path / output
    kw: Dict[str, Any] = {"split_ranks": 1} if output.endswith(".json") else {}
    summary = merge([str(hand_run)], str(out), link_collectives=True, jobs=1, verify=True, **kw)
    assert all(r.ok for r in summary.verify_reports) and len(summary.verify_reports) == 2
    if output.endswith(".json"):
        files = {r: tmp_path / f"split.ranks{r}.json" for r in (0, 1)}
        traces = {r: _load(p, h) for r, p in files.items()}
    else:
        with tarfile.open(out) as tar:
            traces = {
                r: h.strict_loads(tar.extractfile(f"run.rank{r}.json").read(), exact=True)  # type: ignore[union-attr]
                for r in (0, 1)
            }
    assert {k[0] for k in _counters(traces[0])} == {10003} and len(_counters(traces[0])[(10003, IDLE)]) == 5
    assert _counters(traces[1]) == {}


# ---------------------------------------------------------------- the bundled sample run, always
def test_sample_run_aligned_counters_equal_info(
    tmp_path: Path, capsys: pytest.CaptureFixture, h: Any
) -> None:
    rows = _info_steps(capsys, SAMPLE)
    out = tmp_path / "sample.json"
    summary = merge([str(SAMPLE)], str(out), link_collectives=True, align="collectives", jobs=2, verify=True)
    assert summary.verify_reports[0].ok  # against the inputs: the counters are in none of them
    trace = _load(out, h)
    assert _check_against_info(trace, rows) == 12
    header = trace["tracefuse"]["ranks"]
    moved = {int(r): v["shift_ns"] for r, v in header.items()}
    assert len(set(moved.values())) > 1  # node1's ranks moved by the alignment too
    # each counter's ts: the input's ProfilerStep ts + the rank's shift, exactly
    counters = _counters(trace)
    for path in sorted(SAMPLE.iterdir()):
        src = h.load_input(path, exact=True)
        r = src["distributedInfo"]["rank"]
        at = Decimal(moved[r]).scaleb(-3)
        windows = sorted(
            (Decimal(e["ts"]) + at, Decimal(e["ts"]) + Decimal(e["dur"]) + at)
            for e in src["traceEvents"]
            if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("ProfilerStep#")
        )
        (pid,) = {p for p, _ in counters if p // 10000 - 1 == r}
        for name in (EXPOSED, IDLE):
            series = counters[(pid, name)]
            # 3 steps with gaps between them: the value at each start, 0 at each end
            assert [ts for ts, _ in series] == [t for w in windows for t in w]
            assert [v for _, v in series][1::2] == [0, 0, 0] and all(v > 0 for _, v in series[0::2])
    assert summary.counters_added == 4 * 3 * 2 * 2
    assert summary.to_dict()["counters_added"] == 48


# ---------------------------------------------------------------- real A100 NCCL trace (shared fixtures)
def test_real_a100_two_ranks_counters_equal_info(
    tmp_path: Path, capsys: pytest.CaptureFixture, h: Any
) -> None:
    fixture = h.require_shared(*gpu_cases.FIXTURE_PARTS)
    truth = gpu_cases.build_late_launches(
        tmp_path / "run", fixture=fixture, world_size=2, rank=1, added_us=8000.0
    )
    d = Path(truth["files"][0]).parent
    rows = _info_steps(capsys, d)
    assert sorted((r["rank"], r["step"]) for r in rows if r["gpu"] is not None) == [
        (0, 4), (0, 5), (0, 6), (1, 4), (1, 5), (1, 6)
    ]  # fmt: skip
    out = tmp_path / "a100.json"
    summary = merge([str(d)], str(out), link_collectives=True, jobs=1, verify=True)
    assert summary.verify_reports[0].ok
    trace = _load(out, h)
    assert _check_against_info(trace, rows) == 6
    assert summary.counters_added == 2 * 3 * 2 * 2
