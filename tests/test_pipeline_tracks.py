"""``merge --link-collectives`` on a pure pipeline (send/recv pairs only, no collective
in the steps; issue 35, item 5): the merged trace gets what a collective job gets, the
"Collectives" process with each rank's wait per step, a "why rank R" track per slow
stage and the critical path, one slice per segment and a flow where it changes rank,
exactly what ``info --collectives --json`` says for the same set.

Sets: the recorded gloo pipelines ``pp4_pure_a`` (rank 2 slower) and ``pp4_pure_b``
(nobody slower; tests/data/recorded/README.md), and a simulated NCCL pipeline with
stage 2 slower (tests/nccl_pipeline.py, ``pure=True``).
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Tuple

import nccl_pipeline as pipe
import pytest

from tracefuse_stream.cli.app import main

RECORDED = Path(__file__).resolve().parent / "data" / "recorded"


def _info(capsys: pytest.CaptureFixture, path: Path) -> Dict[str, Any]:
    assert main(["info", "--collectives", "--json", "-j", "1", str(path)]) == 0
    return json.loads(capsys.readouterr().out)["collectives"]


def _merge(capsys: pytest.CaptureFixture, path: Path, out: Path) -> Tuple[List[Dict[str, Any]], int]:
    """The merged trace's summary events (pid 1) and its base (ns)."""
    assert main(["merge", "--link-collectives", "-j", "1", "-q", "-o", str(out), str(path)]) == 0
    capsys.readouterr()
    trace = json.loads(out.read_text(), parse_float=Decimal)
    return [e for e in trace["traceEvents"] if e.get("pid") == 1], trace["baseTimeNanoseconds"]


def _ns(us: Any) -> int:
    """An exact µs figure (the trace's ts, info's ``*_us``) in ns."""
    ns = Decimal(str(us)) * 1000
    assert ns == ns.to_integral_value(), us
    return int(ns)


def _threads(mine: List[Dict[str, Any]]) -> Dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in mine if e["ph"] == "M" and e["name"] == "thread_name"}


def _assert_tracks_are_infos(coll: Dict[str, Any], mine: List[Dict[str, Any]], base: int) -> Dict[str, int]:
    """Every track of the summary process against ``info --collectives --json``, to the
    ns; the counts of what was drawn back."""
    assert coll["instances"] == [] and coll["point_to_point"]["linked"] > 0  # a pure pipeline
    names = {e["name"]: e["args"] for e in mine if e["ph"] == "M" and e["tid"] == 0}
    assert names["process_name"]["name"] == "Collectives" and names["process_sort_index"]["sort_index"] == -1
    threads = _threads(mine)
    slices = [e for e in mine if e["ph"] == "X"]
    assert all(threads[e["tid"]].startswith(("critical path: rank ", "why rank ")) for e in slices)
    # the critical path: one slice per segment that lasts, where and as long as info says
    want = [
        (c["step"], g["rank"], g["kind"], c["start_ns"] + _ns(g["start_us"]), _ns(g["dur_us"]))
        for c in coll["critical_path"]
        for g in c["segments"]
        if g["dur_us"] > 0
    ]
    on_path = [e for e in slices if "path_rank" in e["args"]]
    got = [
        (e["args"]["step"], e["args"]["path_rank"], e["args"]["kind"], base + _ns(e["ts"]), _ns(e["dur"]))
        for e in on_path
    ]
    assert want and got == want
    assert all(threads[e["tid"]].startswith(f"critical path: rank {e['args']['path_rank']}") for e in on_path)
    # a flow wherever the path changes rank, from the one segment's track to the next's
    hops = []
    for c in coll["critical_path"]:
        segs = [g for g in c["segments"] if g["dur_us"] > 0]
        hops += [(a["rank"], b["rank"]) for a, b in zip(segs, segs[1:]) if a["rank"] != b["rank"]]
    flows = [e for e in mine if e["ph"] in ("s", "f")]
    assert all(e["cat"] == "critical_path" for e in flows)
    starts = {e["id"]: e for e in flows if e["ph"] == "s"}
    ends = {e["id"]: e for e in flows if e["ph"] == "f"}
    assert sorted(starts) == sorted(ends) and len(flows) == 2 * len(hops)
    rank_of = {tid: int(n.split()[3]) for tid, n in threads.items() if n.startswith("critical path")}
    assert [(rank_of[starts[i]["tid"]], rank_of[ends[i]["tid"]]) for i in sorted(starts)] == hops
    # the why: one slice per finding, on its rank's track, as long as its top contributor's stretch
    why = [e for e in slices if "straggler_rank" in e["args"]]
    assert [(e["args"]["straggler_rank"], e["args"]["step"]) for e in why] == [
        (w["rank"], w["step"]) for w in coll["why"]
    ]
    for e, w in zip(why, coll["why"]):
        assert threads[e["tid"]] == f"why rank {w['rank']}"
        assert [_ns(e["args"][k]) for k in ("lateness_us", "explained_us")] == [
            _ns(w[k]) for k in ("lateness_us", "explained_us")
        ]
        assert e["args"]["collective"] == w["collective"] and w["collective"].startswith("step end #")
        top = next(c for c in w["contributors"] if c.get("piece_ns"))
        lo, hi = top["piece_ns"] if top["kind"] in ("outside_ops", "gpu_idle") else top["span_ns"]
        assert _ns(e["dur"]) == hi - lo
        # what fixing it saves (info's what_if for the rank and step), where one is estimated
        saves = {(x["rank"], x["step"]): x["saves_us"] for x in coll["what_if"]}
        want = saves.get((w["rank"], w["step"]))
        assert e["args"].get("saves_us") == (None if want is None else Decimal(str(want)))
    assert len(on_path) + len(why) == len(slices)
    # the wait counters: each step's wait in its pairs (ms to the µs, as for collectives), then 0
    counters = [e for e in mine if e["ph"] == "C"]
    steps = [b for b in coll["by_step"] if b["step"] is not None]
    assert [{k: float(v) for k, v in e["args"].items()} for e in counters[:-1]] == [
        {
            f"rank {r}": round(_ns(w) / 1e6, 3)
            for r, w in sorted(b["wait_us"].items(), key=lambda kv: int(kv[0]))
        }
        for b in steps
    ]
    assert set(counters[-1]["args"].values()) == {0} and len(counters) == len(steps) + 1
    return {"path": len(on_path), "hops": len(hops), "why": len(why), "counters": len(counters)}


def test_the_slow_stage_of_a_recorded_pipeline_is_drawn(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    """pp4_pure_a: rank 2's why in each of the three steps, the path through its stage."""
    coll = _info(capsys, RECORDED / "pp4_pure_a")
    mine, base = _merge(capsys, RECORDED / "pp4_pure_a", tmp_path / "a.json")
    drawn = _assert_tracks_are_infos(coll, mine, base)
    assert (drawn["why"], drawn["counters"]) == (len(coll["why"]), 4) and drawn["hops"] > 0
    assert [w["rank"] for w in coll["why"]] == [2, 2, 2]
    assert {n for n in _threads(mine).values() if n.startswith("why")} == {"why rank 2"}
    assert 2 in {e["args"]["path_rank"] for e in mine if e["ph"] == "X" and "path_rank" in e["args"]}


def test_the_control_pipeline_gets_its_path_and_names_nobody(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    """pp4_pure_b: nobody slower; the path and the waits are drawn, no why track."""
    coll = _info(capsys, RECORDED / "pp4_pure_b")
    mine, base = _merge(capsys, RECORDED / "pp4_pure_b", tmp_path / "b.json")
    drawn = _assert_tracks_are_infos(coll, mine, base)
    assert coll["why"] == [] and drawn["why"] == 0 and drawn["path"] > 0
    assert not any(n.startswith("why") for n in _threads(mine).values())


def test_a_simulated_nccl_pipeline_gets_the_same_tracks(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    """Stage 2's extra GEMM (tests/nccl_pipeline.py): its NCCL send/recv kernel pairs are
    what the summary stands on; the why names the slow stage in every step."""
    folder = tmp_path / "nccl"
    truth = pipe.build(folder, pure=True)
    coll = _info(capsys, folder)
    mine, base = _merge(capsys, folder, tmp_path / "nccl.json")
    drawn = _assert_tracks_are_infos(coll, mine, base)
    assert coll["point_to_point"]["linked"] == truth.pairs
    assert [(w["rank"], w["step"]) for w in coll["why"]] == [(truth.slow, s) for s in truth.steps]
    assert drawn["counters"] == len(truth.steps) + 1


def test_both_kernel_paths_draw_the_same_bytes(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without the compiled kernel the summary of a pure pipeline is the same, byte for byte."""
    with_kernel, base = _merge(capsys, RECORDED / "pp4_pure_a", tmp_path / "k1.json")
    monkeypatch.setenv("TRACEFUSE_KERNEL", "0")
    without, _ = _merge(capsys, RECORDED / "pp4_pure_a", tmp_path / "k0.json")
    assert any(e["ph"] == "X" for e in with_kernel)
    assert (tmp_path / "k1.json").read_bytes() == (tmp_path / "k0.json").read_bytes()


def test_the_text_report_ends_with_the_merge_that_draws_the_worst_step(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    """pp4_pure_a: the text names the worst step's merge (the slow stage and the rank that
    waited longest for it), and that command draws the slow stage's why in that step."""
    d = RECORDED / "pp4_pure_a"
    assert main(["info", "--collectives", "-j", "1", str(d)]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[-2] == "to see the worst step with the straggler and a reference rank:"
    cmd = text[-1].split()
    assert cmd[:3] == ["tracefuse", "merge", str(d)]
    coll = _info(capsys, d)
    worst = max(coll["what_if"], key=lambda w: w["saves_us"])["step"]
    assert cmd[cmd.index("--steps") + 1] == f"{worst}:{worst}" and cmd[cmd.index("--ranks") + 1] == "1,2"
    out = tmp_path / "worst.json"
    argv = cmd[2:]
    argv[argv.index("-o") + 1] = str(out)
    assert main(["merge", "-q", "-j", "1", *argv]) == 0
    capsys.readouterr()
    mine = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("pid") == 1]
    why = [e["args"] for e in mine if e["ph"] == "X" and "straggler_rank" in e["args"]]
    assert [(w["straggler_rank"], w["step"]) for w in why] == [(2, worst)]
