"""Batched NCCL send/recv (``batch_isend_irecv``, Megatron's 1F1B): one SendRecv kernel a
batch, no collective args on it, its ops linked through the ``nccl:coalesced``
annotations (align/coalesced.py) -- never a collective, never used to align clocks.

The traces are written by tests/nccl_pipeline.py (``batched=True``) as PyTorch writes
them on NCCL: per op a CPU ``record_param_comms`` (send / recv, its peer), a CPU
``nccl:coalesced`` around the launch, one ``ncclDevKernel_SendRecv`` without
``Collective name``, the GPU ``nccl:coalesced`` around it (PyTorch PR #160680). A
4-stage 1F1B pipeline, 4 micro-batches, 3 steps, one world all-reduce a step; stage 2
runs one more GEMM (300 us) in each forward. The simulated GPU gives the truth: the same
plan simulated without those kernels ends ``truth.saves_ns[step]`` earlier.

Before this, such a kernel was keyed as a collective by order (``ncclDevKernel_SendRecv``
on its stream): the k-th batch of every rank "matched" as one instance across stages.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Callable, Dict, List

import nccl_pipeline as pipe
import pytest

from tracefuse_stream.align.clock import collect_collective_ends
from tracefuse_stream.align.coalesced import NO_GPU_MARK, NO_OPS, SHARED_MARK
from tracefuse_stream.align.collectives import scan_collectives
from tracefuse_stream.cli.app import main

BATCHED = "NCCL batched send/recv kernel"


def _info(capsys: pytest.CaptureFixture, path: Path) -> Dict[str, Any]:
    assert main(["info", "--collectives", "--json", "-j", "1", str(path)]) == 0
    return json.loads(capsys.readouterr().out)["collectives"]


def _edit(folder: Path, change: Callable[[Dict[str, Any]], Any]) -> None:
    """Every event through ``change`` (its result: keep it, None: drop it), in place."""
    for f in folder.glob("*.json.gz"):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        doc["traceEvents"] = [e for e in doc["traceEvents"] if change(e) is not None]
        f.write_bytes(gzip.compress(json.dumps(doc).encode()))


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("nccl_batched")
    return out, pipe.build(out, batched=True)


def test_batched_kernels_are_pairs_and_only_all_reduces_are_collectives(
    capsys: pytest.CaptureFixture, slow: Any
) -> None:
    path, truth = slow
    coll = _info(capsys, path)
    assert [(i["name"], i["match"], i["ranks"]) for i in coll["instances"]] == [
        ("allreduce", "seq", [0, 1, 2, 3])
    ] * truth.allreduces
    assert coll["unmatched"]["total"] == 0
    p2p = coll["point_to_point"]
    # 1F1B: 3 boundaries x 4 micro-batches x (forward + backward) a step; the batches of
    # stage s: 2 x 4 single-op ones at its ends, fused pairs in the steady state
    assert (p2p["linked"], p2p["not_linked"]["total"]) == (truth.pairs, 0) == (72, 0)
    assert p2p["by_name"] == {BATCHED: truth.batches} == {BATCHED: 108}
    assert [sum(1 for p in p2p["pairs"] if p["step"] == s) for s in truth.steps] == [24, 24, 24]
    assert sorted({(p["src"], p["dst"]) for p in p2p["pairs"]}) == [
        (0, 1),
        (1, 0),
        (1, 2),
        (2, 1),
        (2, 3),
        (3, 2),
    ]
    assert [n for n in coll["notes"] if "point-to-point" in n] == [
        "point-to-point: 72 batched NCCL send/recv pair(s) (batch_isend_irecv: one SendRecv kernel a batch) "
        "linked through the GPU nccl:coalesced annotation around the kernel, the CPU one with its External "
        "id and the send/recv record_param_comms before it on that thread"
    ]


def test_slow_stage_named_its_neighbours_delayed_and_the_saving_is_what_was_injected(
    capsys: pytest.CaptureFixture, slow: Any
) -> None:
    path, truth = slow
    coll = _info(capsys, path)
    assert [s["rank"] for s in coll["stragglers"]] == [2]
    assert {d["rank"] for d in coll["delayed"]} == {0, 1, 3}
    assert all(d["origin"] == 2 for d in coll["delayed"])
    for w in coll["why"]:
        assert w["rank"] == 2 and 0.8 <= w["share"] <= 1.2
        assert w["contributors"][0]["name"] == pipe.EXTRA
    saves = {w["step"]: w["saves_us"] for w in coll["what_if"] if w["rank"] == 2}
    assert sorted(saves) == truth.steps
    for s in truth.steps:
        injected = truth.saves_ns[s] / 1000
        assert injected > 800 and abs(saves[s] - injected) <= 0.05 * injected, (s, saves[s], injected)


def test_clock_alignment_reads_only_the_all_reduces(slow: Any) -> None:
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


def _no_gpu_mark(e: Dict[str, Any]) -> Any:
    return None if e.get("cat") == "gpu_user_annotation" else e


def test_without_the_gpu_annotation_nothing_is_linked_and_it_says_why(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    """PyTorch before PR #160680 writes no GPU-side nccl:coalesced: the kernel cannot be
    tied to its CPU block, so none is linked -- and none becomes a collective."""
    truth = pipe.build(tmp_path, batched=True)
    _edit(tmp_path, _no_gpu_mark)
    coll = _info(capsys, tmp_path)
    p2p = coll["point_to_point"]
    assert p2p["linked"] == 0 and p2p["not_linked"]["by_reason"] == {NO_GPU_MARK: truth.batches}
    assert [i["name"] for i in coll["instances"]] == ["allreduce"] * truth.allreduces
    assert coll["unmatched"]["total"] == 0


def test_old_kineto_without_any_kernel_args_is_not_linked(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    """Older Kineto copies no args onto kernels at all: the all-reduces are matched by
    order, the SendRecv kernels are batched ones nothing ties to their ops."""
    truth = pipe.build(tmp_path, batched=True)

    def old(e: Dict[str, Any]) -> Any:
        if e.get("cat") == "kernel":
            e.pop("args", None)
        return _no_gpu_mark(e)

    _edit(tmp_path, old)
    coll = _info(capsys, tmp_path)
    assert [(i["name"], i["match"]) for i in coll["instances"]] == [
        (pipe.ALLREDUCE, "order")
    ] * truth.allreduces
    p2p = coll["point_to_point"]
    assert p2p["by_name"] == {BATCHED: truth.batches}
    assert p2p["linked"] == 0 and p2p["not_linked"]["by_reason"] == {NO_GPU_MARK: truth.batches}


def test_other_missing_links_are_named(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    """No record_param_comms before the CPU annotation: that reason; a GPU annotation
    stretched over the next batch's kernel too: both kernels refused, never guessed."""
    truth = pipe.build(tmp_path / "ops", batched=True)
    _edit(tmp_path / "ops", lambda e: None if e.get("name") == "record_param_comms" else e)
    p2p = _info(capsys, tmp_path / "ops")["point_to_point"]
    assert p2p["linked"] == 0 and p2p["not_linked"]["by_reason"] == {NO_OPS: truth.batches}
    pipe.build(tmp_path / "wide", batched=True, stages=2, steps=(5,))
    f = tmp_path / "wide" / "rank0.json.gz"
    doc = json.loads(gzip.decompress(f.read_bytes()))
    marks = sorted(
        (e for e in doc["traceEvents"] if e.get("cat") == "gpu_user_annotation"), key=lambda e: e["ts"]
    )
    marks[0]["dur"] = marks[1]["ts"] + marks[1]["dur"] - marks[0]["ts"]
    doc["traceEvents"].remove(marks[1])
    f.write_bytes(gzip.compress(json.dumps(doc).encode()))
    p2p = _info(capsys, tmp_path / "wide")["point_to_point"]
    assert p2p["not_linked"]["by_reason"][SHARED_MARK] == 2


def test_the_merges_scan_reads_the_same_batches_with_or_without_positions(slow: Any) -> None:
    """merge's collective scan keeps every event's position (all handed over) or not
    (the selection: the batches' ops then come from the second pass, read_batches)."""
    path, truth = slow
    for r in range(4):
        f = path / f"rank{r}.json.gz"
        whole = scan_collectives(f, r, pipe.BASE_NS, positions=True)
        picked = scan_collectives(f, r, pipe.BASE_NS, positions=False)
        assert sorted(whole.comms_calls) == sorted(picked.comms_calls) and whole.comms_calls
        assert sorted(whole.coalesced) == sorted(picked.coalesced)
    n_ops = sum(
        len(scan_collectives(path / f"rank{r}.json.gz", r, pipe.BASE_NS).comms_calls) for r in range(4)
    )
    assert n_ops == 2 * truth.pairs


def test_a_kernel_named_coalesced_is_a_batch_too(
    capsys: pytest.CaptureFixture, slow: Any, tmp_path: Path
) -> None:
    """Where the kernel does carry record_param_comms args, those of the block's
    ``coalesced`` record (``Collective name`` ``coalesced``, a ``Seq``, no peer): still a
    batch, the same pairs; never a collective keyed by that Seq."""
    path, truth = slow
    for f in path.glob("*.json.gz"):
        (tmp_path / f.name).write_bytes(f.read_bytes())

    def named(e: Dict[str, Any]) -> Any:
        if e.get("cat") == "kernel" and e["name"] == pipe.SENDRECV:
            e["args"].update({"Collective name": "coalesced", "Seq": 1, "Process Group Name": "0"})
        return e

    _edit(tmp_path, named)
    coll = _info(capsys, tmp_path)
    assert coll["point_to_point"]["linked"] == truth.pairs and coll["point_to_point"]["by_name"] == {
        BATCHED: truth.batches
    }
    assert [i["name"] for i in coll["instances"]] == ["allreduce"] * truth.allreduces
    assert coll["point_to_point"]["pairs"] == _info(capsys, path)["point_to_point"]["pairs"]


def test_merge_draws_one_complete_arrow_per_pair(slow: Any, tmp_path: Path) -> None:
    """A batch's kernel is a side of two pairs in the steady state (send forward and
    recv backward in one kernel): the merge's linker finds a slice once, so both arrows
    hang off one spec. Before, one of them lost its end (54 starts for 72 pairs)."""
    path, truth = slow
    out = tmp_path / "merged.json"
    assert main(["merge", "--link-collectives", "-q", "-j", "1", "-o", str(out), str(path)]) == 0
    flows = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("name") == "send/recv"]
    starts = sorted(e["id"] for e in flows if e["ph"] == "s")
    ends = sorted(e["id"] for e in flows if e["ph"] == "f")
    assert len(starts) == truth.pairs == 72 and starts == ends == sorted(set(starts))


def _plain_p2p(rank: int, peer: int, op: str, step_ts_us: float, gpu_ts_us: float) -> List[Dict[str, Any]]:
    """A plain ``dist.send`` / ``dist.recv`` as PyTorch writes it: its record_param_comms
    launches the kernel, which carries its args and its External id."""
    args = {"External id": 777, "Collective name": op, "Rank": peer, "Dst Rank" if op == "send" else "Src Rank": peer,
            "Process Group Name": "0", "Process Group Ranks": "[0, 1, 2, 3]", "Seq": 0}  # fmt: skip
    cpu = {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 100 + rank, "tid": 100 + rank,
           "ts": step_ts_us - 50, "dur": 5, "args": args}  # fmt: skip
    gpu = {"ph": "X", "cat": "kernel", "name": pipe.SENDRECV, "pid": rank, "tid": pipe.NCCL_STREAM,
           "ts": gpu_ts_us, "dur": 40, "args": {**args, "stream": pipe.NCCL_STREAM, "correlation": 777}}  # fmt: skip
    return [cpu, gpu]


def test_a_plain_send_before_a_batch_is_not_one_of_its_ops(
    capsys: pytest.CaptureFixture, slow: Any, tmp_path: Path
) -> None:
    """Rank 0 sends rank 1 one tensor with a plain ``dist.send`` before the first step:
    its record_param_comms is on the thread before the first batch's nccl:coalesced, but
    it launched its own kernel (same External id): one more pair, the batches' as before.
    Swept into the batch it made a spurious pair of the batch kernels."""
    path, truth = slow
    for r in range(4):
        f = path / f"rank{r}.json.gz"
        doc = json.loads(gzip.decompress(f.read_bytes()))
        if r in (0, 1):
            start = min(e["ts"] for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#"))
            doc["traceEvents"] += _plain_p2p(r, 1 - r, "send" if r == 0 else "recv", start, start - 500)
        (tmp_path / f.name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    p2p = _info(capsys, tmp_path)["point_to_point"]
    assert (p2p["linked"], p2p["not_linked"]["total"]) == (truth.pairs + 1, 0)
    assert p2p["by_name"] == {BATCHED: truth.batches, "NCCL send kernel": 1, "NCCL recv kernel": 1}
    before = _info(capsys, path)["point_to_point"]["pairs"]
    after = p2p["pairs"]
    assert [
        (p["src"], p["dst"])
        for p in after
        if (p["src"], p["dst"]) not in {(q["src"], q["dst"]) for q in before}
    ] == []
    assert len(after) == len(before) + 1
