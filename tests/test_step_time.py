"""Where every rank's step goes (issue 36): analyze/step_time.py, gpu_union.py,
kernel_categories.py, imbalance.py, report/step_time_text.py.

* a hand-built 2-rank NCCL run whose every figure is worked out by hand in the
  docstring of :func:`_rank_trace` (streams overlapping, back-to-back kernels, an
  exposed memcpy, a hidden memset, a host stall, a kernel across the step boundary,
  the CPU side's operators, annotations, data loader and optimizer), through
  ``info --collectives --json`` with the compiled kernel and without it: one answer;
* the union's rule on its own (precedence, idle split, the parts add up);
* the category table, a user's file, and its errors naming the file and the place;
* the imbalance verdicts: a rank computing more in every step, a communication-bound job;
* the real A100 NCCL fixture (two ranks built from it): every rank and step against an
  independent union computed here from the trace's own events.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from tracefuse_stream import native
from tracefuse_stream.analyze import imbalance
from tracefuse_stream.analyze.gpu_union import COMM_C, COMPUTE_C, MEMORY_C, GpuFigures, window_figures
from tracefuse_stream.analyze.kernel_categories import builtin, load
from tracefuse_stream.analyze.step_time import CpuStep, GpuStep, StepTime
from tracefuse_stream.cli.app import main
from tracefuse_stream.errors import UsageError
from tracefuse_stream.report import step_time_text

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32"
ELEM = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"
ODD = "my_custom_kernel"


def _x(cat: str, name: str, ts: int, dur: int, pid: int, tid: int) -> Dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": {}}


def _rank_trace(rank: int, extra_us: int) -> Dict[str, Any]:
    """One rank: steps 1 [0, 1000) and 2 [1000, 2000) µs on thread 1 of pid 100+rank;
    GPU 0, streams 7 (compute) and 20 (NCCL). Rank 1's last GEMM of each step lasts
    ``extra_us`` longer (within the step's host stall, so nothing else moves).

    Step 1, GPU (rank 0): GEMM [100, 300) on 7, NCCL [250, 450) on 20 (50 hidden,
    150 exposed), Memset [120, 130) under the GEMM (hidden), Memcpy [455, 500)
    (exposed 45, after a 5 µs gap: kernel wait), ODD [600, 700) on 7 after a 100 µs gap
    (host wait) and GEMM [650, 720 + extra) on 20, ELEM [950, 1100) across the step
    end. compute = 200 + 120 + 50 = 370, comm 200, exposed 150, memcpy 45, idle 435 =
    head 100 (other) + 5 (kernel wait) + 100 + 230 (host wait); 1000 in all; overlap
    25%. Step 2: ELEM to 1100, a host stall to GEMM [1500, 1600 + extra), NCCL [1700,
    1750), idle to 2000: compute 200, comm 50 (exposed), idle 750 = 400 + 100 host
    wait + 250 other (the tail).

    CPU, step 1: aten::linear [10, 210) holding aten::mm [20, 120) (self 100 each),
    the data loader [300, 400), Optimizer.step [800, 900) holding aten::add_ [810, 850):
    outside operators 600 + 100 + 60.
    """
    pid = 100 + rank
    e = [
        _x("user_annotation", "ProfilerStep#1", 0, 1000, pid, 1),
        _x("user_annotation", "ProfilerStep#2", 1000, 1000, pid, 1),
        _x("cpu_op", "aten::linear", 10, 200, pid, 1),
        _x("cpu_op", "aten::mm", 20, 100, pid, 1),
        _x(
            "user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 300, 100, pid, 1
        ),
        _x("user_annotation", "Optimizer.step#SGD.step", 800, 100, pid, 1),
        _x("cpu_op", "aten::add_", 810, 40, pid, 1),
        _x("kernel", GEMM, 100, 200, 0, 7),
        _x("gpu_memset", "Memset (Device)", 120, 10, 0, 7),
        _x("kernel", NCCL, 250, 200, 0, 20),
        _x("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 455, 45, 0, 7),
        _x("kernel", ODD, 600, 100, 0, 7),
        _x("kernel", GEMM, 650, 70 + extra_us, 0, 20),
        _x("kernel", ELEM, 950, 150, 0, 7),
        _x("kernel", GEMM, 1500, 100 + extra_us, 0, 7),
        _x("kernel", NCCL, 1700, 50, 0, 20),
    ]
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "baseTimeNanoseconds": 1_700_000_000_000_000_000 + 1000 * rank,
        "traceEvents": e,
    }


def _run(tmp_path: Path, extra_us: int = 0) -> Path:
    d = tmp_path / "run"
    d.mkdir(exist_ok=True)
    for r in (0, 1):
        (d / f"rank{r}.json").write_text(json.dumps(_rank_trace(r, extra_us if r == 1 else 0)))
    return d


def _info(capsys: pytest.CaptureFixture, d: Path, *args: str) -> Dict[str, Any]:
    assert main(["info", "--collectives", "--json", "-j", "1", *args, str(d)]) == 0
    return json.loads(capsys.readouterr().out)["collectives"]


STEP1_GPU = {
    "device": "GPU 0", "compute_us": 370.0, "comm_us": 200.0, "comm_exposed_us": 150.0, "memcpy_us": 45.0,
    "idle_us": 435.0, "overlap_pct": 25.0, "idle_host_wait_us": 330.0, "idle_kernel_wait_us": 5.0,
    "idle_other_us": 100.0,
}  # fmt: skip


@pytest.mark.parametrize("kernel", ["1", "0"])
def test_hand_built_run_every_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, kernel: str
) -> None:
    if kernel == "1" and native.kernel is None:
        pytest.skip("the compiled kernel is not built here")
    monkeypatch.setenv("TRACEFUSE_KERNEL", kernel)
    rows = _info(capsys, _run(tmp_path))["step_time"]
    assert [(r["rank"], r["step"], r["step_us"]) for r in rows] == [
        (0, 1, 1000.0), (0, 2, 1000.0), (1, 1, 1000.0), (1, 2, 1000.0)
    ]  # fmt: skip
    g1, g2 = rows[0]["gpu"], rows[1]["gpu"]
    assert {k: g1[k] for k in STEP1_GPU} == STEP1_GPU
    assert g1["categories_us"] == {
        "GEMM": 270.0, "communication: AllReduce": 200.0, "elementwise/reduction": 50.0, "memory": 55.0, "other": 100.0
    }  # fmt: skip
    assert g1["unknown_kernels"] == [{"name": ODD, "us": 100.0}]
    assert g1["top_kernels"][0] == {"name": GEMM, "us": 270.0, "count": 2}
    assert (g2["compute_us"], g2["comm_us"], g2["comm_exposed_us"], g2["idle_us"]) == (
        200.0,
        50.0,
        50.0,
        750.0,
    )
    assert (g2["idle_host_wait_us"], g2["idle_other_us"], g2["overlap_pct"]) == (500.0, 250.0, 0.0)
    for r in rows:
        g = r["gpu"]
        assert g["compute_us"] + g["comm_exposed_us"] + g["memcpy_us"] + g["idle_us"] == r["step_us"]
        assert g["idle_host_wait_us"] + g["idle_kernel_wait_us"] + g["idle_other_us"] == g["idle_us"]
    c1 = rows[0]["cpu"]
    assert c1["top_ops"] == [
        {"name": "aten::linear", "self_us": 100.0, "count": 1},
        {"name": "aten::mm", "self_us": 100.0, "count": 1},
        {"name": "aten::add_", "self_us": 40.0, "count": 1},
    ]
    assert c1["outside_ops"] == [
        {"annotation": "outside every annotation", "us": 600.0},
        {"annotation": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "us": 100.0},
        {"annotation": "Optimizer.step#SGD.step", "us": 60.0},
    ]
    assert (c1["dataloader_us"], c1["optimizer_us"]) == (100.0, 100.0)
    # the NCCL kernels are the matched collectives: rank 1's clock is 1 us later (its
    # base), so rank 0 waits 1 us in the 200 us all-reduce of step 1; rank 1, last, none
    assert (c1["collective_wait_us"], c1["collective_comm_us"]) == (1.0, 199.0)
    assert (rows[2]["cpu"]["collective_wait_us"], rows[2]["cpu"]["collective_comm_us"]) == (0.0, 200.0)


def test_both_paths_give_one_answer_and_rank_1_computes_more(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = _run(tmp_path, extra_us=200)
    got = []
    for kernel in ("1", "0") if native.kernel is not None else ("0",):
        monkeypatch.setenv("TRACEFUSE_KERNEL", kernel)
        c = _info(capsys, d)
        got.append((c["step_time"], c["step_time_spread"], c["step_time_verdicts"]))
    assert all(g == got[0] for g in got)
    rows, spread, verdicts = got[0]
    # rank 1's GEMM on stream 20 runs to 920 (step 1: compute 370 + 200), step 2's to 1800
    assert [r["gpu"]["compute_us"] for r in rows if r["rank"] == 1] == [570.0, 400.0]
    comp = [s for s in spread if s["figure"] == "compute"]
    assert comp == [
        {"step": 1, "figure": "compute", "median_us": 470.0, "max_us": 570.0, "max_rank": 1, "max_over_median": 1.213},
        {"step": 2, "figure": "compute", "median_us": 300.0, "max_us": 400.0, "max_rank": 1, "max_over_median": 1.333},
    ]  # fmt: skip
    assert verdicts[0] == (
        "compute spread 1.21x: rank 1 has 108% more GEMM time in every step (GPU compute at least 1.21x the median rank's)"
    )
    monkeypatch.setenv("TRACEFUSE_KERNEL", "0")
    assert main(["info", "--collectives", "-j", "1", str(d)]) == 0
    text = capsys.readouterr().out
    assert "imbalance: compute spread 1.21x: rank 1 has 108% more GEMM time in every step" in text
    assert "     1  1000.0" not in text and "where the steps go" in text


def test_union_precedence_and_idle_split() -> None:
    evs = [(0, 10, COMM_C), (5, 8, COMPUTE_C), (12, 14, MEMORY_C), (13, 20, COMM_C), (40, 50, COMPUTE_C)]
    f = window_figures(evs, [(0, 60), (6, 13), (20, 40)], kernel_wait_ns=2)
    assert f[0] == GpuFigures(60, compute_ns=13, comm_ns=17, comm_exposed_ns=14, memcpy_ns=1, idle_ns=32,
                              idle_host_wait_ns=20, idle_kernel_wait_ns=2, idle_other_ns=10)  # fmt: skip
    assert f[1] == GpuFigures(7, compute_ns=2, comm_ns=4, comm_exposed_ns=2, memcpy_ns=1, idle_ns=2,
                              idle_kernel_wait_ns=2)  # fmt: skip
    assert f[2] == GpuFigures(20, idle_ns=20, idle_other_ns=20)  # no kernel in the window: its edges
    assert window_figures([], [(0, 5)]) == [GpuFigures(5, idle_ns=5, idle_other_ns=5)]


def test_builtin_categories() -> None:
    kc = builtin()
    assert [kc.of(n) for n in (
        NCCL, "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "ncclKernel_AllGather_RING_LL_Sum_int8_t",
        "ncclDevKernel_SendRecv(ncclDevComm*)", "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits>",
        GEMM, "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32", "Memcpy HtoD (Pageable -> Device)", "Memset (Device)",
        "void cudnn::bn_bw_1C11_kernel_new<float>", "batched_transpose_16x32_half", ODD,
    )] == [
        ("communication: AllReduce", "communication"), ("communication: other", "communication"),
        ("communication: AllGather", "communication"), ("communication: SendRecv", "communication"),
        ("attention", "compute"), ("GEMM", "compute"), ("GEMM", "compute"), ("memory", "memory"),
        ("memory", "memory"), ("elementwise/reduction", "compute"), ("elementwise/reduction", "compute"),
        ("other", "compute"),
    ]  # fmt: skip


def test_user_categories_file_and_its_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    good = tmp_path / "cats.json"
    good.write_text(
        json.dumps({"categories": [{"name": "mine", "pattern": "^my_", "class": "communication"}]})
    )
    kc = load(str(good))
    assert kc.of(ODD) == ("mine", "communication") and kc.of(GEMM) == ("GEMM", "compute")
    row = _info(capsys, _run(tmp_path), "--kernel-categories", str(good))["step_time"][0]["gpu"]
    # ODD [600, 700) is communication now, under the GEMM from 650: 50 more exposed communication
    assert (row["compute_us"], row["comm_us"], row["comm_exposed_us"], row["unknown_kernels"]) == (
        320.0, 300.0, 200.0, []
    )  # fmt: skip
    cases = {
        '{"categories": [\n  {"name": "x", "pattern": "a"},,\n]}': "line 2, column 33: not valid JSON",
        '{"categories": [{"name": "x", "pattern": "("}]}': "categories[0]: pattern '('",
        '{"categories": [{"name": "x", "pattern": "a", "class": "gpu"}]}': "categories[0]: class 'gpu'",
        '{"categories": {"name": "x"}}': "top level: expected",
    }
    for i, (text, problem) in enumerate(cases.items()):
        bad = tmp_path / f"bad{i}.json"
        bad.write_text(text)
        with pytest.raises(UsageError, match="--kernel-categories " + str(bad).replace("\\", "\\\\")) as e:
            load(str(bad))
        assert problem in str(e.value)
    assert (
        main(["info", "--collectives", "--kernel-categories", str(tmp_path / "nope.json"), str(tmp_path)])
        == 2
    )
    assert "nope.json: cannot be read" in capsys.readouterr().err


def _row(rank: int, step: int, compute: int, exposed: int, gemm: int) -> StepTime:
    f = GpuFigures(1000, compute_ns=compute, comm_ns=exposed, comm_exposed_ns=exposed,
                   idle_ns=1000 - compute - exposed, idle_other_ns=1000 - compute - exposed)  # fmt: skip
    return StepTime(rank, step, 0, 1000, GpuStep(f, "GPU 0", {"GEMM": gemm, "attention": 100}), CpuStep(None))


def test_imbalance_verdicts() -> None:
    rows = [_row(r, s, 400 if r == 3 else 300, 450, 260 if r == 3 else 200) for r in range(4) for s in (1, 2)]
    sp = imbalance.spreads(rows)
    assert [(s.step, s.median_ns, s.max_ns, s.max_rank) for s in sp if s.figure == "compute"] == [
        (1, 300, 400, 3), (2, 300, 400, 3)
    ]  # fmt: skip
    assert imbalance.verdicts(rows, sp) == [
        "compute spread 1.33x: rank 3 has 30% more GEMM time in every step (GPU compute at least 1.33x the median rank's)",
        "45% of the step is exposed communication on every rank (at least; all steps)",
    ]
    balanced = [_row(r, 1, 800, 100, 200) for r in range(4)]
    assert imbalance.verdicts(balanced, imbalance.spreads(balanced)) == []
    assert step_time_text.lines(balanced)[-1].startswith("imbalance: none named (compute within 1.10x")
    cpu_only = [StepTime(r, 1, 0, 1000 + r, None, CpuStep(None)) for r in range(2)]
    # not in a matched step: no CPU busy figure (what it waited for is unknown)
    assert step_time_text.lines(cpu_only)[-3:] == [
        "  step                step  CPU busy",
        "     1  0.0 (r1 0.0 1.00x)         -",
        "imbalance: none named (CPU only: no rank busy over 1.10x the median rank and by 10% of the step in "
        "every step, in one operator or annotation; the CPU side per step is in --json collectives.step_time)",
    ]


def _cpu_row(rank: int, step: int, wait: int, ops: list) -> StepTime:
    return StepTime(
        rank,
        step,
        0,
        100_000_000,
        None,
        CpuStep(None, ops, collective_wait_ns=wait, collective_comm_ns=1_000_000),
    )


def test_cpu_imbalance_is_named_only_when_material() -> None:
    """CPU busy = step - wait - comm; one rank busier by >= 10% of the step in every step,
    half of it in one operator: named with that operator's extra per step."""
    rows = [
        _cpu_row(r, s, 0 if r == 2 else 30_000_000, [("aten::mm", 20_000_000, 5)] + ([("aten::svd", 28_000_000, 20)] if r == 2 else []))
        for r in range(4) for s in (1, 2)
    ]  # fmt: skip
    sp = imbalance.spreads(rows)
    assert [(s.step, s.median_ns, s.max_ns, s.max_rank) for s in sp if s.figure == "cpu_busy"] == [
        (1, 69_000_000, 99_000_000, 2), (2, 69_000_000, 99_000_000, 2)
    ]  # fmt: skip
    assert imbalance.verdicts(rows, sp) == [
        "CPU busy spread 1.43x: rank 2 has +28.0 ms/step of aten::svd self time in every step "
        "(the step outside collectives at least 1.43x the median rank's)"
    ]
    # the same excess with no one operator holding half of it: the rank and its excess
    # are said (never "none named" beside the table), the straggler's why says where
    spread_out = [
        _cpu_row(r, 1, 0 if r == 2 else 30_000_000, [("aten::mm", 20_000_000, 5)]) for r in range(4)
    ]
    assert imbalance.verdicts(spread_out, imbalance.spreads(spread_out)) == [
        "CPU busy spread 1.43x: rank 2 is busy +30.0 ms/step over the median rank in the one step "
        "(the step outside collectives at least 1.43x the median rank's), in no one operator or "
        "annotation (its step thread's time outside operators mixes it with the others' waiting: "
        "the why of the straggler verdict says where it went)"
    ]
    # busier by 9% of the step only: not material
    small = [
        _cpu_row(r, 1, 0 if r == 2 else 9_000_000, [("aten::svd", 9_000_000 if r == 2 else 0, 1)])
        for r in range(4)
    ]
    assert imbalance.verdicts(small, imbalance.spreads(small)) == []


def _reference(trace: Dict[str, Any], lo: int, hi: int) -> Tuple[int, int, int, int]:
    """(compute, comm, comm exposed, memcpy) ns of [lo, hi) by interval sets, kernel
    ts/dur as whole ns: another way to the same union."""
    kc = builtin()
    spans: Dict[str, List[Tuple[int, int]]] = {"compute": [], "communication": [], "memory": []}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            a = int(round(float(e["ts"]) * 1000))
            spans[kc.of(e["name"])[1]].append((max(a, lo), min(a + int(round(float(e["dur"]) * 1000)), hi)))

    def union(iv: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
        out: List[Tuple[int, int]] = []
        for a, b in sorted(x for x in iv if x[1] > x[0]):
            if out and a <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        return out

    def minus(x: List[Tuple[int, int]], y: List[Tuple[int, int]]) -> int:
        return sum(b - a for a, b in x) - sum(max(0, min(b, d) - max(a, c)) for a, b in x for c, d in y)

    comp, comm, mem = union(spans["compute"]), union(spans["communication"]), union(spans["memory"])
    length = sum(b - a for a, b in comp)
    return length, sum(b - a for a, b in comm), minus(comm, comp), minus(mem, union(comp + comm))


def test_real_a100_fixture_against_an_independent_union(
    tmp_path: Path, capsys: pytest.CaptureFixture, h: Any
) -> None:
    src = h.require_shared("real", "a100_nccl_rank0.json.gz")
    trace = json.loads(gzip.decompress(src.read_bytes()))
    d = tmp_path / "a100"
    d.mkdir()
    for rank in (0, 1):
        trace["distributedInfo"]["rank"] = rank
        trace["baseTimeNanoseconds"] += 1000 * rank
        (d / f"rank{rank}.json").write_text(json.dumps(trace))
    rows = _info(capsys, d)["step_time"]
    steps = {
        int(e["name"].split("#")[1]): (round(float(e["ts"]) * 1000), round(float(e["ts"] + e["dur"]) * 1000))
        for e in trace["traceEvents"]
        if e.get("name", "").startswith("ProfilerStep#")
    }
    assert sorted({r["step"] for r in rows}) == sorted(steps) == [4, 5, 6]
    for r in rows:
        g = r["gpu"]
        comp, comm, exposed, mem = _reference(trace, *steps[r["step"]])
        assert (g["compute_us"], g["comm_us"], g["comm_exposed_us"], g["memcpy_us"]) == tuple(
            round(x / 1000, 3) for x in (comp, comm, exposed, mem)
        )
        assert (
            round(g["compute_us"] + g["comm_exposed_us"] + g["memcpy_us"] + g["idle_us"], 3) == r["step_us"]
        )
    assert rows[1]["gpu"]["compute_us"] == 38429.422 and rows[1]["gpu"]["overlap_pct"] == 14.31


@pytest.mark.skipif(native.kernel is None, reason="the compiled kernel is not built here")
def test_kernel_and_python_gpu_windows_agree_on_random_events() -> None:
    """csrc/timeline_steps.c against analyze/gpu_union.py (PyTimeline.gpu_windows):
    overlapping streams, zero lengths, duplicates, several devices, windows with gaps."""
    import random

    from tracefuse_stream.analyze.timeline import PyTimeline, value_key

    seed = random.SystemRandom().randrange(2**31)
    print(f"seed {seed}")
    rnd = random.Random(seed)
    for _case in range(40):
        c, p = native.kernel.Timeline(), PyTimeline()  # type: ignore[union-attr]
        t = 0
        for _ in range(rnd.randrange(0, 200)):
            t += rnd.choice([0, 1, 5, 50])
            ev = (rnd.choice([0, 2, 2, 2]), t, t + rnd.choice([0, 1, 7, 30, 300]),
                  rnd.choice([b"gemm", b"ncclKernel_AllReduce", b"Memcpy HtoD", b"relu"]),
                  value_key(0) + value_key(rnd.choice([7, 20])), value_key(rnd.choice([0, 0, 1])))  # fmt: skip
            c.add(*ev)
            p.add(*ev)
        wins: List[int] = []
        at = rnd.randrange(0, 50)
        for _ in range(rnd.randrange(1, 6)):
            lo = at + rnd.choice([0, 0, 10])
            at = lo + rnd.randrange(1, 400)
            wins += [lo, at]
        classes = bytes(rnd.choice([0, 1, 2]) for _ in range(3))  # the fourth name: beyond, compute
        for dev in (None, value_key(0), value_key(1), value_key(9)):
            args = (dev, wins, classes, rnd.choice([0, 5, 10_000]))
            assert c.gpu_windows(*args) == p.gpu_windows(*args)


def test_an_empty_step_has_figures_of_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A ``ProfilerStep`` of no length (the fuzz found it: no segment is its window)."""
    d = tmp_path / "run"
    d.mkdir()
    for r in (0, 1):
        t = _rank_trace(r, 0 if r == 0 else 10)
        t["traceEvents"].append(_x("user_annotation", "ProfilerStep#3", 2000, 0, 100 + r, 1))
        (d / f"rank{r}.json").write_text(json.dumps(t))
    rows = _info(capsys, d)["step_time"]
    empty = [r for r in rows if r["step"] == 3]
    assert [(r["rank"], r["step_us"], r["gpu"]["idle_us"], r["gpu"]["overlap_pct"], r["cpu"]["top_ops"]) for r in empty] == [
        (0, 0.0, 0.0, None, []), (1, 0.0, 0.0, None, [])
    ]  # fmt: skip


@pytest.mark.parametrize(
    "run, verdict",
    [
        # rank 2 runs torch.linalg.svd 20x per step, nobody else does (recorded README)
        ("ddp4_runs_c", "CPU busy spread 1.23x: rank 2 has +35.5 ms/step of aten::_linalg_svd self time"),
        # rank 3 runs a QR the others never run
        ("ddp4_case_c", "CPU busy spread 2.07x: rank 3 has +72.3 ms/step of aten::linalg_qr self time"),
        # rank 0 sleeps outside every operator before the first group's all_reduce: the
        # excess is said with no operator (its why names the time outside operators)
        ("mg6_three_groups_a", "CPU busy spread 2.73x: rank 0 is busy +97.5 ms/step over the median rank"),
        ("ddp4_balanced", None),  # nobody sleeps or computes more: nothing named
        ("ddp4_runs_a_again", None),
    ],
)
def test_cpu_imbalance_on_recorded_runs(run: str, verdict: Any, capsys: pytest.CaptureFixture[str]) -> None:
    rec = Path(__file__).parent / "data" / "recorded" / run
    assert main(["info", "--collectives", str(rec), "--json", "-j", "1"]) == 0
    got = json.loads(capsys.readouterr().out)["collectives"]["step_time_verdicts"]
    if verdict is None:
        assert got == []
    else:
        assert len(got) == 1 and got[0].startswith(verdict + " in every step")
