"""``tracefuse diff`` / ``tracefuse_stream.diff()`` on real recorded run pairs.

The pairs (tests/data/recorded/README.md, issue-37 sets): ``ddp4_runs_a`` is the job;
``ddp4_runs_a_again`` the same job recorded again; ``ddp4_runs_b`` every rank's hidden
layer 512 wide instead of 256 (every matmul larger); ``ddp4_runs_c`` rank 2 calls
torch.linalg.svd(128 x 128) 20 times per step; ``ddp4_runs_d`` every rank sleeps 0.06 s
at the start of every step; ``ddp4_runs_e`` the batch halved (512 -> 256). Each test
asserts what the recording did.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict

import pytest

import tracefuse_stream
from tracefuse_stream.align.collectives import RankScan
from tracefuse_stream.analyze.diff_figures import kernel_category, step_parts
from tracefuse_stream.analyze.diff_stats import figure_test, t_two_sided, uniform
from tracefuse_stream.analyze.onepass import scan_file
from tracefuse_stream.cli.app import main
from tracefuse_stream.errors import UsageError
from tracefuse_stream.plan.planner import plan_all

REC = Path(__file__).parent / "data" / "recorded"
A = str(REC / "ddp4_runs_a")


def _run(name: str) -> str:
    return str(REC / f"ddp4_runs_{name}")


_CACHE: Dict[str, Dict[str, Any]] = {}


def _diff(name: str) -> Dict[str, Any]:
    if name not in _CACHE:
        _CACHE[name] = tracefuse_stream.diff(A, _run(name))
    return _CACHE[name]


def test_the_same_job_again_is_no_significant_change() -> None:
    d = _diff("a_again")
    assert d["significant"] is False
    assert d["summary"] == "no significant change"
    assert d["changes"] == []
    assert d["step_time"]["significant"] is False
    assert d["ranks"] == [0, 1, 2, 3]
    assert d["steps"] == {"align": "number", "pairs": [[2, 2], [3, 3], [4, 4]]}


@pytest.mark.parametrize("pair", [("ddp4_case_f", "ddp4_case_f_again"), ("ddp2_case_f", "ddp2_case_f_again")])
def test_the_older_repeated_jobs_are_no_significant_change(pair: Any) -> None:
    d = tracefuse_stream.diff(str(REC / pair[0]), str(REC / pair[1]))
    assert (d["significant"], d["changes"], d["step_time"]["significant"]) == (False, [], False)


def test_larger_matmuls_on_every_rank_are_uniform_longer_calls() -> None:
    d = _diff("b")
    top = d["changes"][0]
    assert (top["kind"], top["name"], top["ranks"], top["class"]) == ("op", "aten::mm", "all", "uniform")
    assert top["how"] == "longer calls" and top["count_base"] == top["count_new"] == 5
    assert 10_000 < top["delta_us"] < 30_000 and top["ratio"] > 2
    second = d["changes"][1]
    assert (second["name"], second["ranks"], second["how"]) == ("aten::addmm", "all", "longer calls")
    assert d["step_time"]["significant"] and d["step_time"]["delta_us"] > 30_000
    # the step-time change is explained by the listed changes (shares, the rest unexplained)
    st = d["step_time"]
    assert st["explained_us"] + st["unexplained_us"] == pytest.approx(st["delta_us"], abs=0.01)
    assert 0.5 < st["explained_us"] / st["delta_us"] < 1.2
    # the ranks that wait longer for the others are listed after the causes, marked
    waiting = [c for c in d["changes"] if c["waiting"]]
    assert waiting and all(d["changes"].index(c) > 1 for c in waiting)


def test_an_extra_op_on_one_rank_is_rank_local_and_new() -> None:
    d = _diff("c")
    top = d["changes"][0]
    assert (top["kind"], top["name"], top["ranks"], top["class"]) == ("op", "aten::_linalg_svd", [2], "new")
    assert (top["count_base"], top["count_new"], top["base_us"]) == (0, 20, 0)
    assert 20_000 < top["delta_us"] < 60_000
    assert (
        top["per_rank_delta_us"]["0"] == top["per_rank_delta_us"]["1"] == top["per_rank_delta_us"]["3"] == 0
    )
    # the others wait for rank 2: longer, but an effect, not a cause
    rest = d["changes"][1:]
    assert rest and all(c["waiting"] and 2 not in c["ranks"] and c["ranks"] != "all" for c in rest)
    line = [ln for ln in _text("c").splitlines() if "aten::_linalg_svd" in ln][0]
    assert line.startswith("  rank 2 only: aten::_linalg_svd +") and "new op" in line


def test_a_stall_before_forward_on_every_rank_is_uniform_time_outside_ops() -> None:
    d = _diff("d")
    top = d["changes"][0]
    assert (top["kind"], top["name"], top["ranks"], top["class"]) == (
        "outside_ops", "outside every annotation", "all", "uniform",
    )  # fmt: skip
    assert 55_000 < top["delta_us"] < 85_000 and top["waiting"] is False
    assert top["share"] > 0.6 and d["step_time"]["significant"]


def test_the_batch_halved_gives_shorter_matmuls() -> None:
    d = _diff("e")
    top = d["changes"][0]
    # 4 ranks on 2 cores: ranks 0 and 3 show it above the noise, 1 and 2 (sharing a
    # core with a rank at work) do not: the test says so rather than "all"
    assert (top["kind"], top["name"], top["how"]) == ("op", "aten::addmm", "shorter calls")
    assert top["delta_us"] < -3_000 and top["count_base"] == top["count_new"] == 3
    assert top["ranks"] == [0, 3] and top["class"] == "rank-local"
    st = d["step_time"]  # the steps are mostly the work sleep: no change, nothing explained
    assert (st["significant"], st["explained_us"], st["unexplained_us"], top["share"]) == (
        False,
        None,
        None,
        None,
    )


def _text(name: str) -> str:
    from tracefuse_stream.report.diff_text import render

    return render(_diff(name))


def test_cli_json_is_the_api_object_and_text_says_no_change(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", A, _run("a_again"), "--json", "-j", "1"]) == 0
    assert json.loads(capsys.readouterr().out) == _diff("a_again")
    assert main(["diff", A, _run("a_again"), "-j", "1"]) == 0
    out = capsys.readouterr().out
    assert "no significant change: nothing above the noise" in out
    assert out.count("straggler:") == 2  # each run's verdict, side by side


def test_steps_by_position_and_chosen_per_run(capsys: pytest.CaptureFixture[str]) -> None:
    d = tracefuse_stream.diff(A, _run("a_again"), base_steps="2:3", new_steps="3:4", align_steps="position")
    assert d["steps"] == {"align": "position", "pairs": [[2, 3], [3, 4]]}
    with pytest.raises(
        UsageError,
        match=r"no common steps: BASE has ProfilerStep#2, NEW has ProfilerStep#4; align_steps=\"position\" ",
    ):
        tracefuse_stream.diff(A, _run("a_again"), base_steps="2:2", new_steps="4:4")
    assert main(["diff", A, _run("a_again"), "--base-steps", "2", "--new-steps", "4"]) == 2
    assert (
        "; --align-steps position matches them by position, or --base-steps / --new-steps"
        in capsys.readouterr().err
    )


def test_different_world_sizes_name_the_sizes_and_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    other = str(REC / "ddp8_straggler")
    with pytest.raises(
        UsageError, match=r"different world sizes: BASE 4 ranks, NEW 8.* ranks 0-3 \(the ranks"
    ):
        tracefuse_stream.diff(A, other)
    assert main(["diff", A, other]) == 2
    assert "each: --ranks 0-3 (the ranks both have)" in capsys.readouterr().err
    d = tracefuse_stream.diff(A, other, ranks="0-3")
    assert d["ranks"] == [0, 1, 2, 3] and d["steps"]["pairs"] == [[2, 2], [3, 3]]


def test_no_common_rank_names_both_and_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    base = sorted(Path(A).glob("*.json.gz"))
    new = sorted(Path(_run("a_again")).glob("*.json.gz"))
    plans = {p.path: p.rank for run in (base, new) for p in plan_all([str(f) for f in run])}
    b0 = next(str(f) for f in base if plans[str(f)] == 0)
    n1 = next(str(f) for f in new if plans[str(f)] == 1)
    with pytest.raises(
        UsageError, match=r"no common rank: BASE has ranks 0, NEW has 1; .* rank_from=\"order\""
    ):
        tracefuse_stream.diff(b0, n1)
    assert main(["diff", b0, n1]) == 2
    assert "or --rank-from order to number each run's files by their position" in capsys.readouterr().err
    assert tracefuse_stream.diff(b0, n1, rank_from="order")["ranks"] == [0]


def test_a_whole_step_is_the_sum_of_its_parts() -> None:
    """The timeline is cut at step ends too: each step's main-thread parts add up to it."""
    plan = next(p for p in plan_all([A]) if p.rank == 2)
    scan = scan_file(plan, ("collectives",)).scan
    assert isinstance(scan, RankScan) and sorted(scan.steps) == [2, 3, 4]
    every = step_parts(scan.timeline, scan.steps)
    assert sorted(every) == [2, 3, 4]
    for step, (lo, hi) in scan.steps.items():
        parts = every[step]
        main_thread = sum(p.ns for (k, _n), p in parts.items() if k in ("op", "outside_ops"))
        assert main_thread == hi - lo
        assert parts[("op", "aten::addmm")].count == 3 and parts[("op", "aten::mm")].count == 5


def test_the_t_tail_and_the_figure_test_by_hand() -> None:
    assert t_two_sided(2.306, 8) == pytest.approx(0.05, abs=1e-5)
    assert t_two_sided(12.706, 1) == pytest.approx(0.05, abs=1e-5)
    assert t_two_sided(0.0, 5) == 1.0
    # one rank: 1,2,3 -> 4,5,6: pooled variance (2 + 2) / 4 = 1, se sqrt(2/3), t 3.674, 4 dof
    ft = figure_test({0: [1, 2, 3]}, {0: [4, 5, 6]})
    assert ft.noise_ns == 1.0 and ft.dof == 4
    assert ft.ranks[0].delta_ns == 3.0
    assert (
        ft.ranks[0].p_value
        == pytest.approx(t_two_sided(3 / math.sqrt(2 / 3), 4))
        == pytest.approx(0.02131, abs=1e-5)
    )
    # no noise: a change is certain, no change is none
    assert figure_test({0: [0, 0]}, {0: [5, 5]}).ranks[0].p_value == 0.0
    assert figure_test({0: [5, 5]}, {0: [5, 5]}).ranks[0].p_value == 1.0
    # every rank together: the steps are the units. Noise shared by every rank (a slow
    # step on all) counts once: the test of 8 ranks is that of one rank's steps
    base = {r: [10.0, 12.0, 11.0] for r in range(8)}
    new = {r: [12.5, 14.5, 13.5] for r in range(8)}
    ft = figure_test(base, new)
    assert (
        ft.all_p == pytest.approx(t_two_sided(2.5 / math.sqrt(2 / 3), 4)) == pytest.approx(0.0376, abs=1e-4)
    )
    # ... while each rank's own noise averages out over the ranks
    turn = [[10.0, 12.0, 11.0], [12.0, 11.0, 10.0], [11.0, 10.0, 12.0]]
    ft = figure_test({r: turn[r] for r in range(3)}, {r: [x + 2.5 for x in turn[r]] for r in range(3)})
    assert all(t.p_value > 0.001 for t in ft.ranks.values()) and ft.all_p == 0.0
    assert uniform([3.0] * 8, ft.noise_ns) and not uniform([3.0, 30.0], 0.1) and not uniform([3.0, -3.0], 0.1)


def test_kernel_categories_by_name() -> None:
    names = {
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)": "communication",
        "Memcpy HtoD (Pageable -> Device)": "memcpy",
        "Memset (Device)": "memset",
        "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolution": "convolution",
        "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw": "convolution",
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(...)": "GEMM",
        "ampere_sgemm_32x128_nt": "GEMM",
        "flash_fwd_kernel": "attention",
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>": "normalization",
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>": "elementwise / reduction",
        "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>": "other",
    }
    assert {n: kernel_category(n) for n in names} == names


def test_two_cycles_of_one_folder_by_position() -> None:
    cycles = str(REC / "ddp2_cycles")  # cycle 1: ProfilerStep#2-3, cycle 2: #6-7
    with pytest.raises(
        UsageError, match=r"no common steps: BASE has ProfilerStep#2-3, NEW has ProfilerStep#6-7"
    ):
        tracefuse_stream.diff(cycles, cycles, base_cycle=1, new_cycle=2)
    d = tracefuse_stream.diff(cycles, cycles, base_cycle=1, new_cycle=2, align_steps="position")
    assert d["steps"] == {"align": "position", "pairs": [[2, 6], [3, 7]]} and d["ranks"] == [0, 1]


def test_steps_that_are_not_there_say_what_is(capsys: pytest.CaptureFixture[str]) -> None:
    """merge's and report's words (select/window.py steps_not_found): both ends of the
    range must be there (issue 39 item 4: 3:7 compared step 3 alone, silently)."""
    for flags, what in ((["--steps", "9"], "step 9 not found in BASE"), (["--steps", "3:7"], "step 7 not found in BASE"),
                        (["--new-steps", "50:60"], "steps 50 and 60 not found in NEW")):  # fmt: skip
        assert main(["diff", A, _run("b"), *flags, "-j", "1"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"tracefuse: error: {what} (") and err.endswith("); steps present: 2-4\n"), err
    with pytest.raises(UsageError, match="^step 9 not found in BASE"):
        tracefuse_stream.diff(A, _run("b"), base_steps="9")


def test_one_step_a_run_tests_nothing_and_says_so() -> None:
    d = tracefuse_stream.diff(A, _run("c"), steps="3")
    assert d["steps"]["pairs"] == [[3, 3]]
    assert (d["significant"], d["changes"], d["step_time"]["p_value"]) == (False, [], 1.0)
    assert d["notes"] and d["notes"][0].startswith(
        "one step per run: the step-to-step noise cannot be measured"
    )


@pytest.mark.parametrize("base, new", [("ddp4_case_f", "ddp4_two_b"), ("mg4_pairs_b", "mg4_pairs_c")])
def test_a_second_slow_rank_s_own_new_ops_are_not_waiting(base: str, new: str) -> None:
    """Two slow ranks: rank 3's QRs (a new op, and 90 more aten::copy_ calls) are its own
    work, though rank 3 also waits longer for the slower rank 1 (0): waiting lengthens
    what a rank already did, it never adds ops or calls. Its longer waits are marked."""
    rec = Path(__file__).resolve().parent / "data" / "recorded"
    d = tracefuse_stream.diff(str(rec / base), str(rec / new))
    mine = {c["name"]: c for c in d["changes"] if c["ranks"] == [3]}
    assert mine["aten::linalg_qr"]["class"] == "new" and mine["aten::linalg_qr"]["waiting"] is False
    assert mine["aten::copy_"]["how"] == "more calls" and mine["aten::copy_"]["waiting"] is False
    (wait,) = [c for c in d["changes"] if c["kind"] == "wait"]
    assert wait["waiting"] is True and 3 in wait["ranks"]
