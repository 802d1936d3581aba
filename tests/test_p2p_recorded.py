"""Point-to-point pairs in the root cause (issue 35), on real gloo pipelines recorded with
``record_shapes=True`` (tools/record_traces.py; tests/data/recorded/README.md says what
each rank does, nothing in the traces names it):

* ``pp4_shapes_a``: 4 stages, 4 micro-batches per step; rank 1 runs 2 x mm(640 x 640)
  more in each micro-batch's forward;
* ``pp4_shapes_b``: the same job, nobody slower;
* ``pp2x2_shapes``: two 2-stage pipelines on the sub-groups [0, 2] and [1, 3]: the
  recorded peers are group ranks;
* ``pp4_stages_a`` (recorded with the profiler's defaults: no peer) keeps today's answer.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Dict

import pytest
from recorded_ops import mm_640_us

from tracefuse_stream.cli.app import main

RECORDED = Path(__file__).resolve().parent / "data" / "recorded"
NO_PEER = "no peer recorded (record with record_shapes=True to link send/recv)"


def _info(capsys: pytest.CaptureFixture, name: str, *args: str) -> Dict[str, Any]:
    assert main(["info", "--collectives", "--json", "-j", "1", str(RECORDED / name), *args]) == 0
    return json.loads(capsys.readouterr().out)["collectives"]


def _info_path(capsys: pytest.CaptureFixture, path: Path) -> Dict[str, Any]:
    assert main(["info", "--collectives", "--json", "-j", "1", str(path)]) == 0
    return json.loads(capsys.readouterr().out)["collectives"]


def _text_path(capsys: pytest.CaptureFixture, path: Path) -> str:
    assert main(["info", "--collectives", "-j", "1", str(path)]) == 0
    return capsys.readouterr().out


def _text(capsys: pytest.CaptureFixture, name: str) -> str:
    assert main(["info", "--collectives", "-j", "1", str(RECORDED / name)]) == 0
    return capsys.readouterr().out


def test_a_slow_stage_is_the_origin_and_the_stages_it_held_are_delayed(capsys: pytest.CaptureFixture) -> None:
    """Rank 1 is named; rank 2 waited for it (its activations), rank 0 too (its sends held
    until rank 1 posted the recv, its grads late), rank 3 for rank 2: the cascade's origin
    is rank 1. Fixing rank 1 saves its extra compute, within 15% (the re-timed graph vs
    the matmuls' own time in the trace: 0.91, 0.94, 0.99 of it as recorded)."""
    coll = _info(capsys, "pp4_shapes_a")
    p2p = coll["point_to_point"]
    assert (p2p["total"], p2p["linked"], p2p["not_linked"]["total"]) == (144, 72, 0)
    assert {(p["src"], p["dst"]) for p in p2p["pairs"]} == {(0, 1), (1, 2), (2, 3), (3, 2), (2, 1), (1, 0)}
    assert [s["rank"] for s in coll["stragglers"]] == [1] and coll["candidates"] == []
    assert sorted((d["rank"], d["step"], d["by_rank"], d["origin"]) for d in coll["delayed"]) == sorted(
        (r, s, by, 1) for s in (2, 3, 4) for r, by in ((0, 1), (2, 1), (3, 2))
    )
    for d in coll["delayed"]:  # waited at send/recv pairs with the rank it names, several times
        assert d["collective"].startswith("send/recv ") and d["waits"] > 1
        assert sorted(d["group_ranks"]) == sorted({d["rank"], d["by_rank"]}) and d["late_group_ranks"] == [
            0,
            1,
            2,
            3,
        ]
    extra = mm_640_us("pp4_shapes_a", 1)
    assert sorted(extra) == [2, 3, 4] and all(35_000 < v < 75_000 for v in extra.values())
    assert [(w["rank"], w["step"]) for w in coll["what_if"]] == [(1, 2), (1, 3), (1, 4)]
    for w in coll["what_if"]:
        assert 0.85 * extra[w["step"]] <= w["saves_us"] <= 1.15 * extra[w["step"]], (w, extra)
    for c in coll["critical_path"]:  # through rank 1's forwards, crossing the pipeline at its pairs
        segs = c["segments"]
        crossings = {
            (a["rank"], b["rank"], a["name"].split(" #")[0])
            for a, b in zip(segs, segs[1:])
            if a["rank"] != b["rank"]
        }
        assert {(0, 1, "send/recv 0->1"), (1, 2, "send/recv 1->2"), (2, 3, "send/recv 2->3")} <= crossings
        own: Dict[int, float] = {}
        for s in segs:
            own[s["rank"]] = own.get(s["rank"], 0.0) + (s["dur_us"] if s["kind"] == "own" else 0.0)
        assert max(own, key=lambda r: own[r]) == 1 and own[1] > extra[c["step"]]
    text = _text(capsys, "pp4_shapes_a")
    assert (
        "what if: fixing rank 1 would save ~" in text
        and "re-timed through every collective and send/recv pair" in text
    )
    assert "delayed: rank 3 is late at gloo:all_reduce #" in text and "the cascade starts at rank 1" in text
    assert (
        "point-to-point: 72 x gloo:recv, 72 x gloo:send (not collectives: no wait counted above): 72 send/recv"
        in text
    )


def test_the_pipeline_control_names_nobody(capsys: pytest.CaptureFixture) -> None:
    """pp4_shapes_b: the same pipeline, nobody slower: every pair linked, nobody named,
    delayed or estimated (the fill and drain bubbles are no one's fault)."""
    coll = _info(capsys, "pp4_shapes_b")
    assert (coll["point_to_point"]["linked"], coll["point_to_point"]["not_linked"]["total"]) == (72, 0)
    assert coll["stragglers"] == [] and coll["delayed"] == [] and coll["what_if"] == []
    assert all(k["counted_us"] == 0.0 for k in coll["step_skew"])


def test_sub_group_peers_are_group_ranks_mapped_through_pg_config(capsys: pytest.CaptureFixture) -> None:
    """pp2x2_shapes: rank 0 sends to group rank "1" of [0, 2] (global 2), rank 1 to "1" of
    [1, 3] (global 3), and so on back: every pair links the two ranks of one group, in
    that group (pg_config names "1" and "2"), 8 per step (2 micro-batches x 2 ways x 2)."""
    coll = _info(capsys, "pp2x2_shapes")
    p2p = coll["point_to_point"]
    assert (p2p["linked"], p2p["not_linked"]["total"]) == (24, 0)
    assert {(p["src"], p["dst"], p["group"]) for p in p2p["pairs"]} == {
        (0, 2, "1"), (2, 0, "1"), (1, 3, "2"), (3, 1, "2")
    }  # fmt: skip
    assert [sum(1 for p in p2p["pairs"] if p["step"] == s) for s in (2, 3, 4)] == [8, 8, 8]
    assert coll["stragglers"] == []


def test_the_world_all_reduce_is_matched_though_the_pair_groups_threads_are_idle(
    capsys: pytest.CaptureFixture,
) -> None:
    """pp2x2_shapes: each rank shows two gloo threads (the pair groups' send/recv run on
    the main thread, so only the world's threads run anything in the window). Read
    thread by thread, ranks 0 and 2's all-reduces fit the pair group [0, 2] as well as
    the world; the world reading is the one under which every op matches and every
    instance releases its members alike (0.2-0.4 ms after the last arrives; read as
    pairs, ranks 1 and 3 would sit 1.5-4.9 ms in a one-float all-reduce after both
    arrived, until ranks 0 and 2 came). So: one world all-reduce per step, on all four
    ranks, nothing unmatched. The pair [0, 2] reached it 1.8-4.9 ms after [1, 3]; each
    of the two waited for the other in their pipeline (rank 0 for 2, rank 2 for 0): the
    pipeline's bubbles, no one's fault, so nobody named and nobody delayed (a wait in a
    send/recv makes a rank delayed only with a straggler behind it, as in pp4_shapes_b)."""
    coll = _info(capsys, "pp2x2_shapes")
    assert coll["unmatched"] == {"total": 0, "by_reason": []}
    assert [(i["name"], i["group"], i["step"], i["ranks"]) for i in coll["instances"]] == [
        ("gloo:all_reduce", "0", s, [0, 1, 2, 3]) for s in (2, 3, 4)
    ]
    assert coll["stragglers"] == []
    assert coll["delayed"] == []
    assert "1 could not be matched" not in _text(capsys, "pp2x2_shapes")


def test_a_slow_stage_of_one_of_two_pipelines_world_all_reduce_not_read_as_the_pairs(
    capsys: pytest.CaptureFixture,
) -> None:
    """pp2x2_shapes_a: the two 2-stage pipelines, rank 3 (the second stage of [1, 3])
    computes ~20 ms more a step. Each rank shows two gloo threads, the world's, and the
    world all-reduce alternates between them step by step. Reading the second of them as
    the pair group's matched every op too (ranks 0 and 2 form a "[0, 2]" instance, 1 and
    3 a "[1, 3]" one), and the first reading found was kept: nobody named. Cutting two
    threads with consecutive ids (one group's, started back to back) apart is what tells
    it: one world all-reduce per step on all four ranks; rank 3 named, by its matmuls;
    rank 1 delayed by it through their send/recv; ranks 0 and 2, which only waited at the
    step's all-reduce, not delayed."""
    coll = _info(capsys, "pp2x2_shapes_a")
    assert [(i["group"], i["step"], i["ranks"]) for i in coll["instances"]] == [
        ("0", s, [0, 1, 2, 3]) for s in (2, 3, 4)
    ]
    assert coll["unmatched"]["total"] == 0
    assert [s["rank"] for s in coll["stragglers"]] == [3]
    assert all(w["rank"] == 3 and w["contributors"][0]["name"] == "aten::mm" for w in coll["why"])
    assert sorted((d["rank"], d["step"], d["by_rank"]) for d in coll["delayed"]) == [
        (1, s, 3) for s in (2, 3, 4)
    ]
    for x in coll["what_if"]:  # the other pipeline's wait at the world all-reduce, as recorded: 16-21 ms
        inst = next(i for i in coll["instances"] if i["step"] == x["step"])
        lead = inst["arrival_ns"]["3"] - min(inst["arrival_ns"].values())
        assert x["rank"] == 3 and abs(x["saves_us"] - lead / 1000) <= 5_000, (x, lead)


def test_two_readings_the_release_times_cannot_tell_apart_are_reported(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    """pp2x2_shapes with every rank's i-th all-reduce given rank 0's start and length:
    world and pair groups now release alike, nothing in the traces tells them apart, so
    no rank's gloo ops are attributed (said, with the reason), rather than one picked."""
    first: Dict[int, Any] = {}
    dst = tmp_path / "same"
    dst.mkdir()
    files = sorted((RECORDED / "pp2x2_shapes").glob("*.json.gz"))
    docs = [json.loads(gzip.decompress(f.read_bytes())) for f in files]
    for doc in sorted(docs, key=lambda d: d["distributedInfo"]["rank"]):
        ops = sorted(
            (e for e in doc["traceEvents"] if e.get("name") == "gloo:all_reduce"), key=lambda e: e["ts"]
        )
        for i, e in enumerate(ops):
            e["ts"], e["dur"] = first.setdefault(i, (e["ts"], e["dur"]))
    for f, doc in zip(files, docs):
        (dst / f.name.replace(".gz", "")).write_text(json.dumps(doc))
    coll = _info_path(capsys, dst)
    assert coll["instances"] == []
    assert coll["unmatched"]["total"] == 12
    why = (
        "gloo op(s) not attributed to a process group: its gloo ops fit 2 attributions to its process groups "
        "equally well (every op matches either way, and the collectives' release times do not tell them apart)"
    )
    assert [n for n in coll["notes"] if "not attributed" in n] == [f"rank {r}: 3 {why}" for r in range(4)]


def test_without_a_peer_the_answer_is_unchanged_and_says_why(capsys: pytest.CaptureFixture) -> None:
    """pp4_stages_a (profiler defaults): nothing linked, every figure as before pairs
    existed (rank 2 named by how much longer the others sat in send/recv; no delayed
    rank; the re-timing cannot follow the pipeline), and the report says why."""
    coll = _info(capsys, "pp4_stages_a")
    assert coll["point_to_point"] == {
        "total": 144, "by_name": {"gloo:recv": 72, "gloo:send": 72}, "linked": 0, "pairs": [],
        "not_linked": {"total": 144, "by_reason": {NO_PEER: 144}},
    }  # fmt: skip
    assert [(s["rank"], s["held_us"]) for s in coll["stragglers"]] == [(2, 242177.312)]
    assert [b["held_us"]["2"] for b in coll["by_step"]] == [80207.809, 81185.029, 80784.474]
    assert coll["delayed"] == [] and coll["what_if_together"] == []
    assert [(w["step"], w["saves_us"], w["step_us"]) for w in coll["what_if"]] == [
        (2, 0.0, 159832.602), (3, 0.0, 157681.561), (4, 0.0, 159839.615)
    ]  # fmt: skip
    # rank 0's own work, then rank 1's to the end, after rank 0's late entry vs the first rank
    assert [[g["kind"] for g in c["segments"]] for c in coll["critical_path"]] == [
        ["entered_late", "own", "communication", "own"]
    ] * 3
    text = _text(capsys, "pp4_stages_a")
    assert (
        "what if: not estimated for rank 2: the others waited for it in point-to-point ops (send/recv) recorded "
        "without their peer, so the re-timing cannot follow them (record with record_shapes=True to link send/recv)"
    ) in text
    assert (
        "point-to-point: 72 x gloo:recv, 72 x gloo:send (not collectives: not matched, no wait counted); "
        f"not linked: 144 op(s), {NO_PEER}"
    ) in text


def test_the_python_path_links_the_same_pairs_as_the_kernel(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled scan hands over only the c10d send/recv ops (their args read in
    Python); without it every event goes through Python: one answer."""
    with_kernel = _info(capsys, "pp4_shapes_a")
    monkeypatch.setenv("TRACEFUSE_KERNEL", "0")
    assert _info(capsys, "pp4_shapes_a") == with_kernel


def test_the_slow_stage_why_explains_its_own_extra_time(capsys: pytest.CaptureFixture) -> None:
    """A pipeline stage's extra time reaches the others in send/recv, not at the step's
    all_reduce, where it is hardly late: its why measures the parts against its own
    extra time (``explains: own_lateness``), never a share of many times a tiny
    lateness; the top part is the injected matmuls, by about what they took."""
    coll = _info(capsys, "pp4_shapes_a")
    mm = mm_640_us("pp4_shapes_a", 1)
    whys = [w for w in coll["why"] if w["rank"] == 1]
    assert [w["step"] for w in whys] == [2, 3, 4]
    for w in whys:
        assert w["explains"] == "own_lateness" and w["lateness_us"] < 0.02 * w["own_lateness_us"]
        assert 0.9 <= w["share"] <= 1.1, w
        assert w["unexplained_us"] == pytest.approx(w["own_lateness_us"] - w["explained_us"], abs=0.002)
        top = w["contributors"][0]
        assert top["name"] == "aten::mm" and top["extra_us"] == pytest.approx(mm[w["step"]], rel=0.05)
    text = _text(capsys, "pp4_shapes_a")
    assert (
        "reached the others before that, in point-to-point ops (send/recv) or other groups, 102% explained:"
        in text
    )


def test_merge_draws_one_arrow_per_linked_pair_send_to_recv(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``merge --link-collectives`` of pp4_shapes_a: besides the collectives' arrows, one
    arrow per linked send/recv pair (72), named "send/recv", from the sender's
    ``gloo:send`` slice to the receiver's ``gloo:recv`` slice, forward in time (its end
    at the recv's end), ids in the links' space (above every rank's: max rank + 1 = 4 in
    the high bits) and none shared with any other flow of the file; the verifier, also
    against the inputs, finds no error."""
    pairs = _info(capsys, "pp4_shapes_a")["point_to_point"]["pairs"]
    out = tmp_path / "m.json"
    assert (
        main(["merge", str(RECORDED / "pp4_shapes_a"), "--link-collectives", "-j", "1", "-o", str(out), "-q"])
        == 0
    )
    assert main(["verify", str(out), "--against", str(RECORDED / "pp4_shapes_a")]) == 0
    assert "OK: no error-level findings" in capsys.readouterr().out
    events = json.loads(out.read_text())["traceEvents"]
    arrows = [e for e in events if e.get("name") == "send/recv" and e.get("ph") in ("s", "f")]
    assert len(arrows) == 2 * 72 and {e["cat"] for e in arrows} == {"collective"}
    ends: Dict[int, Dict[str, Any]] = {}
    for e in arrows:
        ends.setdefault(e["id"], {})[e["ph"]] = e
    assert len(ends) == 72 and all(set(v) == {"s", "f"} for v in ends.values())
    assert {i >> 32 for i in ends} == {4}
    others = [e["id"] for e in events if e.get("ph") in ("s", "f", "t") and e.get("name") != "send/recv"]
    assert not set(ends) & set(others)
    slices: Dict[Any, list] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("name") in ("gloo:send", "gloo:recv"):
            slices.setdefault((e["pid"], e["tid"]), []).append(e)

    def holder(f: Dict[str, Any]) -> Dict[str, Any]:
        (x,) = [x for x in slices[(f["pid"], f["tid"])] if x["ts"] <= f["ts"] <= x["ts"] + x["dur"]]
        return x

    seen = []
    for v in ends.values():
        s, f = holder(v["s"]), holder(v["f"])
        assert (s["name"], f["name"]) == ("gloo:send", "gloo:recv")
        assert v["s"]["ts"] < v["f"]["ts"] and v["f"]["bp"] == "e"
        assert s["args"]["collective_instance"] == f["args"]["collective_instance"]
        seen.append((v["s"]["args"]["rank"], v["f"]["args"]["rank"], s["args"]["collective_instance"]))
    assert sorted(seen) == sorted((p["src"], p["dst"], p["id"]) for p in pairs)


def test_a_pipeline_without_collectives_gets_its_graph_from_the_pairs_alone(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    """pp4_shapes_a with its one collective per step (the loss all-reduce: gloo:all_reduce
    and c10d::allreduce_) dropped from every rank: no collective is left, and the
    verdict comes from the 72 send/recv pairs and each step's end (analyze/p2p_steps.py):
    rank 1 named, the same ranks delayed by the same ranks with origin 1 as with the
    all-reduce, fixing it saving its matmuls within 15%; each step's critical path is as
    long as with the all-reduce (the steps are the same ProfilerSteps), running from
    rank 0's first send through the slow stage, whose own time on it is at least its
    extra matmuls'."""
    dst = tmp_path / "no_allreduce"
    dst.mkdir()
    for f in sorted((RECORDED / "pp4_shapes_a").glob("*.json.gz")):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        doc["traceEvents"] = [
            e for e in doc["traceEvents"] if e.get("name") not in ("gloo:all_reduce", "c10d::allreduce_")
        ]
        (dst / f.name.replace(".gz", "")).write_text(json.dumps(doc))
    want = _info(capsys, "pp4_shapes_a")
    coll = _info_path(capsys, dst)
    assert coll["instances"] == [] and coll["point_to_point"]["linked"] == 72 and coll["not_assessed"] is None
    assert [(s["rank"], s["steps"]) for s in coll["stragglers"]] == [(1, [2, 3, 4])] and coll[
        "candidates"
    ] == []
    delayed = sorted((d["rank"], d["step"], d["by_rank"], d["origin"]) for d in coll["delayed"])
    assert delayed == sorted((d["rank"], d["step"], d["by_rank"], d["origin"]) for d in want["delayed"])
    extra = mm_640_us("pp4_shapes_a", 1)
    assert [(w["rank"], w["step"]) for w in coll["what_if"]] == [(1, 2), (1, 3), (1, 4)]
    for w in coll["what_if"]:
        assert 0.85 * extra[w["step"]] <= w["saves_us"] <= 1.15 * extra[w["step"]], (w, extra)
    assert (
        [(p["step"], p["step_us"]) for p in coll["critical_path"]]
        == [(p["step"], p["step_us"]) for p in want["critical_path"]]
        == [(2, 128196.118), (3, 147792.334), (4, 144979.53)]
    )
    mm = mm_640_us("pp4_shapes_a", 1)
    for p in coll["critical_path"]:
        segs = p["segments"]
        if segs[0]["kind"] == "entered_late":  # rank 0 entered the step after the first rank
            assert (segs[0]["rank"], segs[0]["name"], segs[0]["start_us"]) == (0, "step start", 0.0)
            segs = segs[1:]
        assert all(s["name"].startswith("send/recv ") or s["name"] == "step end" for s in segs)
        assert (segs[0]["rank"], segs[0]["kind"], segs[0]["name"].split(" #")[0]) == (
            0,
            "own",
            "send/recv 0->1",
        )
        assert sum(s["dur_us"] for s in segs if s["rank"] == 1 and s["kind"] == "own") >= mm[p["step"]]
    text = _text_path(capsys, dst)
    assert "critical path of step 3 (147.8 ms): rank 0 own " in text
