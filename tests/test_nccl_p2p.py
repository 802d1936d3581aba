"""NCCL send/recv: linked as pairs by the peer their kernels name, never matched as a
collective (issue 35, item 1: "point-to-point pairs ... NCCL and gloo").

The traces are written by tests/nccl_pipeline.py in the format PyTorch's profiler
writes for a ``dist.send`` / ``dist.recv`` on NCCL (``Collective name`` send/recv,
``Rank`` = the peer's group rank, ``Dst Rank`` / ``Src Rank`` = its global rank, ``Seq``
= the rank's own point-to-point counter): a 4-stage GPipe pipeline, 4 micro-batches,
one world all-reduce per step, stage 2 running one more GEMM kernel (300 us) in each
micro-batch's forward. The generator's simulated GPU gives the truth: stage 2's extra
is on the pipeline's critical path, so fixing it saves the whole 1.2 ms a step (the
control without it is exactly that much shorter).

Before this, the send/recv kernels were keyed like collectives: by ``Seq``, rank 0's
k-th send and rank 1's k-th send "matched" as one instance across the pipeline.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Dict, List

import nccl_pipeline as pipe
import pytest

from tracefuse_stream.align.clock import collect_collective_ends
from tracefuse_stream.align.p2p import NO_KERNEL_PEER
from tracefuse_stream.cli.app import main


def _info(capsys: pytest.CaptureFixture, path: Path) -> Dict[str, Any]:
    assert main(["info", "--collectives", "--json", "-j", "1", str(path)]) == 0
    return json.loads(capsys.readouterr().out)["collectives"]


def _edit_kernels(folder: Path, drop: List[str]) -> None:
    """Remove ``drop`` from every send/recv kernel's args, in place."""
    for f in folder.glob("*.json.gz"):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        for e in doc["traceEvents"]:
            if e.get("args", {}).get("Collective name") in ("send", "recv"):
                for k in drop:
                    e["args"].pop(k, None)
        f.write_bytes(gzip.compress(json.dumps(doc).encode()))


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("nccl_slow")
    return out, pipe.build(out)


def test_send_recv_kernels_are_pairs_not_collectives(capsys: pytest.CaptureFixture, slow: Any) -> None:
    path, truth = slow
    coll = _info(capsys, path)
    assert [(i["name"], i["match"], i["ranks"]) for i in coll["instances"]] == [
        ("allreduce", "seq", [0, 1, 2, 3])
    ] * truth.allreduces
    p2p = coll["point_to_point"]
    assert (p2p["linked"], p2p["not_linked"]["total"]) == (truth.pairs, 0) == (72, 0)
    assert p2p["by_name"] == {"NCCL recv kernel": 72, "NCCL send kernel": 72}
    assert sorted({(p["src"], p["dst"]) for p in p2p["pairs"]}) == [
        (0, 1),
        (1, 0),
        (1, 2),
        (2, 1),
        (2, 3),
        (3, 2),
    ]
    # per step: 3 stage boundaries x 4 micro-batches x (forward + backward)
    assert [sum(1 for p in p2p["pairs"] if p["step"] == s) for s in truth.steps] == [24, 24, 24]
    assert coll["unmatched"]["total"] == 0
    assert any("NCCL send/recv kernel pair(s) linked" in n for n in coll["notes"])


def test_slow_stage_named_its_neighbours_delayed_and_the_saving_is_the_extra(
    capsys: pytest.CaptureFixture, slow: Any
) -> None:
    path, truth = slow
    coll = _info(capsys, path)
    assert [s["rank"] for s in coll["stragglers"]] == [2]
    assert {d["rank"] for d in coll["delayed"]} == {0, 1, 3}
    assert all(d["origin"] == 2 for d in coll["delayed"])
    for w in coll["why"]:
        assert w["rank"] == 2 and 0.8 <= w["share"] <= 1.2
        top = w["contributors"][0]
        assert top["name"] == pipe.EXTRA and top["count"] == 4 and top["others_count"] == 0
    saves = {w["step"]: w["saves_us"] for w in coll["what_if"] if w["rank"] == 2}
    assert sorted(saves) == truth.steps
    extra_us = truth.extra_per_step_ns / 1000
    for s in truth.steps:  # the simulated GPU: the step is exactly the extra longer than without it
        assert abs(saves[s] - extra_us) <= 0.05 * extra_us, (s, saves[s], extra_us)


def test_the_balanced_pipeline_names_nobody(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    """The fill and drain bubbles are no one's fault: no straggler, nobody delayed."""
    pipe.build(tmp_path, slow=None)
    coll = _info(capsys, tmp_path)
    assert coll["point_to_point"]["linked"] == 72
    assert coll["stragglers"] == [] and coll["delayed"] == [] and coll["what_if"] == []


def test_peer_from_the_group_rank_when_no_global_one_is_written(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    """Older writers give ``Rank`` (the peer's rank in the group) and ``Process Group
    Ranks`` only: the same pairs."""
    pipe.build(tmp_path)
    _edit_kernels(tmp_path, ["Dst Rank", "Src Rank"])
    p2p = _info(capsys, tmp_path)["point_to_point"]
    assert (p2p["linked"], p2p["not_linked"]["total"]) == (72, 0)


def test_no_peer_at_all_is_said_and_still_no_collective(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    pipe.build(tmp_path)
    _edit_kernels(tmp_path, ["Dst Rank", "Src Rank", "Rank"])
    coll = _info(capsys, tmp_path)
    assert coll["point_to_point"]["linked"] == 0
    assert coll["point_to_point"]["not_linked"]["by_reason"] == {NO_KERNEL_PEER: 144}
    assert len(coll["instances"]) == 3 and coll["unmatched"]["total"] == 0


def test_clock_alignment_reads_only_the_collectives(slow: Any) -> None:
    """A send's end is not one every rank of its group sees: alignment keys only the
    all-reduces (one per step), on every rank."""
    path, truth = slow
    for f in sorted(path.glob("*.json.gz")):
        ends = collect_collective_ends(f, pipe.BASE_NS)
        assert sorted(k[2] for k in ends.ends) == ["allreduce"] * truth.allreduces


def test_both_code_paths_agree(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, slow: Any
) -> None:
    path, _truth = slow
    kernel = _info(capsys, path)
    monkeypatch.setenv("TRACEFUSE_KERNEL", "0")
    assert _info(capsys, path) == kernel


def test_a_pure_nccl_pipeline_is_judged_on_the_gpu(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    """No collective in the step (analyze/p2p_steps.py): the step's end plays the
    collective, and the why reads the GPU where the pairs are NCCL kernels: the extra
    GEMM, all of the 1.2 ms a step; the what-if the same."""
    truth = pipe.build(tmp_path, pure=True)
    coll = _info(capsys, tmp_path)
    assert coll["instances"] == [] and coll["point_to_point"]["linked"] == 72
    assert [s["rank"] for s in coll["stragglers"]] == [2]
    assert {d["rank"] for d in coll["delayed"]} == {0, 1, 3}
    extra_us = truth.extra_per_step_ns / 1000
    assert sorted(w["step"] for w in coll["why"]) == truth.steps
    for w in coll["why"]:
        assert w["view"] == "gpu" and 0.8 <= w["share"] <= 1.2
        top = w["contributors"][0]
        assert top["name"] == pipe.EXTRA and abs(top["extra_us"] - extra_us) <= 0.05 * extra_us
    for s in coll["what_if"]:
        assert s["rank"] == 2 and abs(s["saves_us"] - extra_us) <= 0.05 * extra_us


def test_two_pipelines_side_by_side_judge_each_stage_within_its_own(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    """Ranks 0-1 and 2-3 are two 2-stage pipelines with no collective between them
    (analyze/p2p_steps.py: one step end per set of ranks the pairs connect). Rank 1 is
    slow: only rank 0 waits for it, the other pipeline does not; compared with every
    rank at once (one end for all) the median hid it and nobody was named. The what-if
    is the extra exactly: each stage is compared with the others' same moment (the last
    stage's first backward send with the other last stage's)."""
    truth = pipe.build(tmp_path, stages=2, pipelines=2, slow=1, pure=True)
    coll = _info(capsys, tmp_path)
    assert coll["point_to_point"]["linked"] == truth.pairs == 48
    assert sorted({(p["src"], p["dst"]) for p in coll["point_to_point"]["pairs"]}) == [
        (0, 1),
        (1, 0),
        (2, 3),
        (3, 2),
    ]
    assert [s["rank"] for s in coll["stragglers"]] == [1]
    assert [(d["rank"], d["by_rank"]) for d in coll["delayed"]] == [(0, 1)] * len(coll["delayed"])
    assert coll["delayed"]
    extra_us = truth.extra_per_step_ns / 1000
    for w in coll["why"]:
        assert w["contributors"][0]["name"] == pipe.EXTRA and 0.8 <= w["share"] <= 1.2
    assert len(coll["what_if"]) == 3
    for s in coll["what_if"]:
        assert abs(s["saves_us"] - extra_us) <= 0.05 * extra_us, s
    pipe.build(tmp_path / "control", stages=2, pipelines=2, slow=None, pure=True)
    control = _info(capsys, tmp_path / "control")
    assert control["stragglers"] == [] and control["delayed"] == []


def test_a_pipeline_beside_the_slow_one_waits_for_it_at_the_all_reduce(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    """Two 4-stage pipelines (ranks 0-3, 4-7) side by side meet at one all-reduce; rank 2
    is slow. Ranks 4-7 waited for it only there, the step's last collective: that wait is
    rank 2's held, as every rank of a data-parallel job waits for its straggler, not a
    delay ("late at the all-reduce because it waited at the all-reduce"), and never their
    own neighbour in send/recv (their pipeline's fill and drain bubbles, which fixing rank
    2 would not shorten). Fixing rank 2 saves what the first stage there waited."""
    truth = pipe.build(tmp_path, stages=4, pipelines=2, slow=2, batched=True)
    coll = _info(capsys, tmp_path)
    assert [s["rank"] for s in coll["stragglers"]] == [2]
    assert [d for d in coll["delayed"] if d["rank"] >= 4] == []
    assert {d["rank"] for d in coll["delayed"]} <= {0, 1, 3} and all(
        d["origin"] == 2 for d in coll["delayed"]
    )
    saves = {w["step"]: w["saves_us"] for w in coll["what_if"]}
    assert saves
    for step, saved in saves.items():  # the first stage there ends its pipeline: it waits just that
        (inst,) = [i for i in coll["instances"] if i["step"] == step and i["ranks"] == list(range(8))]
        first = min(inst["wait_us"][str(r)] for r in range(4, 8))
        assert abs(first - saved) <= 0.02 * saved and abs(saved - truth.saves_ns[step] / 1000) <= 0.02 * saved


def test_two_causes_in_two_pipelines_the_hidden_one_is_named_too(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    """Two 4-stage pipelines meet at one all-reduce: stage 2 of the first computes 1.2 ms
    more a step, rank 5 of the second enters every step 2 ms late and sets the step. Over
    every rank nobody waited for rank 2 (the first pipeline reaches the all-reduce before
    the second anyway) and fixing it alone saves nothing: it was not named. Its own
    pipeline would reach the all-reduce ~1.2 ms earlier without it, so it is named, off
    the critical path; each saving matches the re-built runs' step times."""
    both = pipe.build(tmp_path / "both", stages=4, pipelines=2, slow=2, late={5: 2_000_000})
    no_late = pipe.build(tmp_path / "slow", stages=4, pipelines=2, slow=2)
    neither = pipe.build(tmp_path / "none", stages=4, pipelines=2, slow=None)
    coll = _info(capsys, tmp_path / "both")
    assert [(s["rank"], s["on_critical_path"]) for s in coll["stragglers"]] == [(5, True), (2, False)]
    saves = {(x["rank"], x["step"]): x["saves_us"] for x in coll["what_if"]}
    together = {x["step"]: x["saves_us"] for x in coll["what_if_together"]}
    for step in both.steps:
        assert saves[(2, step)] == 0.0
        want_5 = (
            both.step_ns[(0, step)] - no_late.step_ns[(0, step)]
        ) / 1000  # ~0.4 ms: the pipeline absorbs the rest
        want_both = (both.step_ns[(0, step)] - neither.step_ns[(0, step)]) / 1000
        assert abs(saves[(5, step)] - want_5) <= 20 and abs(together[step] - want_both) <= 20, (
            step,
            saves,
            together,
        )
