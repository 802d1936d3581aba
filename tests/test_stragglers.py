"""``info --collectives`` on the issue-20 recordings: sub-groups, several, intermittent
and no stragglers, with the profiler's defaults (no shapes, no stacks).

Every expectation comes from tests/data/recorded/README.md (what each set was recorded
to show, and the runloop tids each group started, printed by the workers while
recording: the ground truth of which thread belongs to which group).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

from tracefuse_stream.cli.app import main

RECORDED = Path(__file__).resolve().parent / "data" / "recorded"

# README "Runloop threads per group" for ddp8_subgroups_slow: rank -> (world, sub-group)
DDP8_TIDS = {
    0: ({13462, 13463}, {13524, 13525}),
    1: ({13467, 13468}, {13515, 13516}),
    2: ({13469, 13470}, {13519, 13520}),
    3: ({13465, 13466}, {13530, 13531}),
    4: ({13471, 13472}, {13528, 13529}),
    5: ({13476, 13477}, {13532, 13533}),
    6: ({13505, 13506}, {13522, 13523}),
    7: ({13474, 13475}, {13526, 13527}),
}
SUBGROUPS = {"1": [0, 1], "2": [2, 3], "3": [4, 5], "4": [6, 7]}


def _info(capsys: pytest.CaptureFixture, *args: str) -> Dict[str, Any]:
    assert main(["info", "--collectives", "--json", "-j", "1", *args]) == 0
    return json.loads(capsys.readouterr().out)["collectives"]


def _text(capsys: pytest.CaptureFixture, *args: str) -> str:
    assert main(["info", "--collectives", "-j", "1", *args]) == 0
    return capsys.readouterr().out


def _rewritten(src: Path, dst: Path, edit: Callable[[int, Dict[str, Any]], None]) -> Path:
    """Copies of ``src``'s traces with ``edit(rank, trace)`` applied (plain JSON)."""
    dst.mkdir()
    for f in sorted(src.glob("*.json.gz")):
        trace = json.loads(gzip.decompress(f.read_bytes()))
        edit(trace["distributedInfo"]["rank"], trace)
        (dst / f.name.replace(".gz", "")).write_text(json.dumps(trace))
    return dst


def _by_step(coll: Dict[str, Any]) -> List[tuple]:
    return [(b["step"], b["straggler"], b["last_rank"]) for b in coll["by_step"]]


# ------------------------------------------------------------- sub-groups, slow rank
def test_subgroups_slow_rank_named_groups_and_threads_exact(capsys: pytest.CaptureFixture) -> None:
    coll = _info(capsys, str(RECORDED / "ddp8_subgroups_slow"))
    assert coll["unmatched"]["total"] == 0
    groups: Dict[str, List[Any]] = {}
    for inst in coll["instances"]:
        groups.setdefault(inst["group"], []).append((inst["step"], inst["ranks"]))
    assert groups["0"] == [(s, list(range(8))) for s in (2, 2, 3, 3, 4, 4)]
    for g, ranks in SUBGROUPS.items():
        assert groups[g] == [(s, ranks) for s in (2, 3, 4)]
    assert coll["straggler"] == 5
    assert [(s["rank"], s["steps"]) for s in coll["stragglers"]] == [(5, [2, 3, 4])]
    assert _by_step(coll) == [(2, 5, 5), (3, 5, 5), (4, 5, 5)]
    # README: rank 5 arrives 203.0, 203.4 and 204.7 ms after the first at the DDP all_reduce
    ddp = [i for i in coll["instances"] if i["group"] == "0" and i["last_rank"] == 5]
    assert [round(i["spread_us"] / 1000, 1) for i in ddp] == [203.0, 203.4, 204.7]
    assert all(i["wait_us"]["5"] == 0 for i in ddp)


def test_subgroups_slow_ops_attributed_to_their_groups_threads() -> None:
    """Against the runloop tids each group started (printed while recording)."""
    from tracefuse_stream.plan.planner import plan_all
    from tracefuse_stream.report.collectives import collect_table

    table = collect_table(plan_all([str(RECORDED / "ddp8_subgroups_slow")]))
    assert len(table.instances) == 18
    for inst in table.instances:
        for r, entry in inst.entries.items():
            world, sub = DDP8_TIDS[r]
            assert entry.event.tid in (world if inst.group == "0" else sub), (inst.group, r)


def test_pg_config_of_some_ranks_is_enough(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Odd ranks' traces lose pg_config: their groups come from the even ranks'."""
    want = _info(capsys, str(RECORDED / "ddp8_subgroups_slow"))

    def drop_odd(rank: int, trace: Dict[str, Any]) -> None:
        if rank % 2:
            del trace["distributedInfo"]["pg_config"]

    coll = _info(capsys, str(_rewritten(RECORDED / "ddp8_subgroups_slow", tmp_path / "d", drop_odd)))
    key = ("group", "ranks", "arrival_ns", "step")
    assert [[i[k] for k in key] for i in coll["instances"]] == [
        [i[k] for k in key] for i in want["instances"]
    ]
    assert coll["straggler"] == 5


def test_no_pg_config_with_several_groups_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """pg_count 5 but no pg_config anywhere: which group an op is in is unknown, so
    nothing is matched (never world and sub-group ops in one instance)."""

    def drop(rank: int, trace: Dict[str, Any]) -> None:
        del trace["distributedInfo"]["pg_config"]

    coll = _info(capsys, str(_rewritten(RECORDED / "ddp8_subgroups_slow", tmp_path / "d", drop)))
    assert coll["instances"] == [] and coll["straggler"] is None
    assert coll["unmatched"]["total"] == 8 * 9
    assert [u["reason"] for u in coll["unmatched"]["by_reason"]] == ["process group unknown"]
    assert sum("5 process groups but its trace lists none" in n for n in coll["notes"]) == 8


def test_single_group_without_distributed_info_is_world(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    def drop(rank: int, trace: Dict[str, Any]) -> None:
        di = trace["distributedInfo"]
        del di["pg_config"], di["pg_count"]

    coll = _info(capsys, str(_rewritten(RECORDED / "ddp4_two_stragglers", tmp_path / "d", drop)))
    assert len(coll["instances"]) == 3 and {i["group"] for i in coll["instances"]} == {""}
    assert [s["rank"] for s in coll["stragglers"]] == [1, 3]


# ------------------------------------------------------------- several, intermittent, none
def test_two_stragglers_both_named_by_how_long_the_others_wait(capsys: pytest.CaptureFixture) -> None:
    coll = _info(capsys, str(RECORDED / "ddp4_two_stragglers"))
    assert [(s["rank"], s["steps"]) for s in coll["stragglers"]] == [(1, [2, 3, 4]), (3, [2, 3, 4])]
    assert coll["straggler"] == 1
    ranks = {r["rank"]: r for r in coll["ranks"]}
    assert ranks[3]["last_arrivals"] == 0 and ranks[1]["last_arrivals"] == 3  # rank 3 is never last
    for b in coll["by_step"]:
        assert b["stragglers"] == [1, 3] and b["last_rank"] == 1
        # README: rank 1 +149.2..156.3 ms, rank 3 +62.5..63.9 ms, ranks 0 and 2 within 3.7 ms
        assert 145_000 < b["held_us"]["1"] < 157_000 and 58_000 < b["held_us"]["3"] < 64_000
        assert b["held_us"]["0"] == b["held_us"]["2"] == 0
    text = _text(capsys, str(RECORDED / "ddp4_two_stragglers"))
    assert (
        "straggler: rank 1 -- the others waited" in text and "also     : rank 3 -- the others waited" in text
    )


def test_intermittent_straggler_named_for_its_step_only(capsys: pytest.CaptureFixture) -> None:
    coll = _info(capsys, str(RECORDED / "ddp4_intermittent"))
    assert coll["straggler"] == 2
    assert [(s["rank"], s["steps"]) for s in coll["stragglers"]] == [(2, [3])]
    assert [(b["step"], b["straggler"], b["stragglers"]) for b in coll["by_step"]] == [
        (2, None, []),
        (3, 2, [2]),
        (4, None, []),
    ]
    # README table: last to arrive rank 3 in #2 (+7.7 ms) and rank 0 in #4 (+1.8 ms) -- noise,
    # reported as last only
    assert [b["last_rank"] for b in coll["by_step"]] == [3, 2, 0]


def test_mild_persistent_straggler_named(capsys: pytest.CaptureFixture) -> None:
    """Rank 2 sleeps 15 ms more than the others in every ~0.1 s step (README): 15% of the
    job's time every step, well above the arrival noise, is a straggler (a quarter of the
    step as the floor, the first choice, called this run balanced)."""
    coll = _info(capsys, str(RECORDED / "ddp4_mild_straggler"))
    assert coll["straggler"] == 2
    assert [(s["rank"], s["steps"]) for s in coll["stragglers"]] == [(2, [2, 3, 4, 5])]
    for b in coll["by_step"]:
        assert b["straggler"] == 2 and b["last_rank"] == 2
        assert 12_000 < b["held_us"]["2"] < 19_000  # the extra 15 ms, give or take the noise
    t = coll["threshold"]
    assert 95_000 < t["busy_step_us"] < 125_000 and t["noise_us"] < 2_000
    assert t["step_fraction"] * t["busy_step_us"] < 12_000  # the floor a 15 ms straggler must pass


@pytest.mark.parametrize(
    "name",
    ["ddp4_balanced", "ddp4_balanced_work", "ddp4_subgroups_defaults_samepid", "ddp4", "ddp4_subgroups"],
)
def test_balanced_runs_name_no_straggler(name: str, capsys: pytest.CaptureFixture) -> None:
    coll = _info(capsys, str(RECORDED / name))
    assert coll["instances"] and coll["unmatched"]["total"] == 0
    assert coll["straggler"] is None and coll["stragglers"] == []
    assert all(b["straggler"] is None and b["last_rank"] is not None for b in coll["by_step"])
    assert "no rank stands out" in _text(capsys, str(RECORDED / name))


def test_defaults_samepid_subgroups_matched(capsys: pytest.CaptureFixture) -> None:
    """All ranks are pid 1 with tids 3..8: groups still come out per rank."""
    coll = _info(capsys, str(RECORDED / "ddp4_subgroups_defaults_samepid"))
    groups: Dict[str, List[Any]] = {}
    for inst in coll["instances"]:
        groups.setdefault(inst["group"], []).append(inst["ranks"])
    assert groups == {"0": [[0, 1, 2, 3]] * 6, "1": [[0, 1]] * 3, "2": [[2, 3]] * 3}


def _scaled(k: float) -> Callable[[int, Dict[str, Any]], None]:
    """Every timed event's ts (from the first file's first one: one origin for all
    ranks, which share baseTimeNanoseconds) and dur multiplied by ``k``."""
    origin: List[float] = []

    def edit(rank: int, trace: Dict[str, Any]) -> None:
        evs = [
            e for e in trace["traceEvents"] if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M"
        ]
        if not origin:
            origin.append(min(e["ts"] for e in evs))
        t0 = origin[0]
        for e in evs:
            e["ts"] = round(t0 + (e["ts"] - t0) * k, 3)
            if isinstance(e.get("dur"), (int, float)):
                e["dur"] = round(e["dur"] * k, 3)

    return edit


@pytest.mark.parametrize(
    ("name", "k", "stragglers"),
    [("ddp4_balanced", 20.0, []), ("ddp4_two_stragglers", 0.05, [1, 3]), ("ddp4_intermittent", 10.0, [2])],
)
def test_threshold_scales_with_the_run(
    name: str, k: float, stragglers: List[int], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The threshold comes from the run's own noise and steps, not a fixed number: the
    same run 20x slower still has no straggler, 20x faster (rank 3 then only 3 ms late)
    still two, and the verdict and threshold scale with the times."""
    want = _info(capsys, str(RECORDED / name))
    coll = _info(capsys, str(_rewritten(RECORDED / name, tmp_path / "d", _scaled(k))))
    assert [s["rank"] for s in coll["stragglers"]] == stragglers == [s["rank"] for s in want["stragglers"]]
    assert _by_step(coll) == _by_step(want)
    for key in ("noise_us", "busy_step_us", "typical_step_us"):
        assert coll["threshold"][key] == pytest.approx(want["threshold"][key] * k, rel=1e-3, abs=0.01)


# ------------------------------------------------------------- info: -j and one pass
def test_info_jobs_give_the_same_answer(capsys: pytest.CaptureFixture) -> None:
    d = str(RECORDED / "ddp8_subgroups_slow")
    outs = []
    for j in ("1", "2"):
        assert main(["info", "--collectives", "--steps", "--json", "-j", j, d]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0] == outs[1] and outs[0]["collectives"]["straggler"] == 5


def test_info_answers_every_section_in_one_pass(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import tracefuse_stream.plan.extent as info_mod  # where the counting pass reads the events

    calls: List[str] = []
    real = info_mod.iter_event_batches

    def counting(path: Any, **kw: Any) -> Any:
        calls.append(str(path))
        return real(path, **kw)

    monkeypatch.setattr(info_mod, "iter_event_batches", counting)
    d = RECORDED / "ddp4_intermittent"
    assert main(["info", "--steps", "--align", "--json", "-j", "1", str(d)]) == 0
    both = json.loads(capsys.readouterr().out)
    assert sorted(calls) == sorted(str(f) for f in d.glob("*.json.gz"))  # one pass per file
    assert both["steps"] == {str(r): [2, 3, 4] for r in range(4)}
    assert set(both["align"]) == {"0", "1", "2", "3"}
    calls.clear()
    coll = _info(capsys, str(d))
    assert len(calls) == 4 and coll["straggler"] == 2


# ------------------------------------------------------------- merge: the summary process
def _held_last(inst: Dict[str, Any]) -> int:
    """How long the others (median) waited for the last rank, from the arrivals."""
    arr = {int(r): a for r, a in inst["arrival_ns"].items()}
    others = sorted(a for r, a in arr.items() if r != inst["last_rank"])
    n = len(others)
    mid = others[n // 2] if n % 2 else (others[n // 2 - 1] + others[n // 2]) // 2
    return arr[inst["last_rank"]] - mid


def _strip_links(events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The ranks' events without what --link-collectives adds (flows and three args)."""
    out = []
    for e in events:
        if not isinstance(e.get("pid"), int) or e["pid"] < 10000 or e.get("cat") == "collective":
            continue
        args = e.get("args")
        if isinstance(args, dict):
            e = dict(e, args={k: v for k, v in args.items() if not k.startswith("collective_")})
        out.append(e)
    return out


def test_summary_process_first_with_one_slice_per_instance(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    import sys
    from decimal import Decimal

    from tracefuse_stream.pipeline.orchestrate import merge

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from importer_model import model_import

    d = str(RECORDED / "ddp8_subgroups_slow")
    coll = _info(capsys, d)
    out, plain = tmp_path / "linked.json", tmp_path / "plain.json"
    summary = merge([d], str(out), link_collectives=True, jobs=1, verify=True)
    assert summary.verify_reports[0].ok and not summary.verify_reports[0].warnings
    merge([d], str(plain), jobs=1)
    trace = json.loads(out.read_text(), parse_float=Decimal)
    events, base = trace["traceEvents"], trace["baseTimeNanoseconds"]
    mine = [e for e in events if e.get("pid") == 1]
    meta = {(e["name"], e["tid"]): e["args"] for e in mine if e["ph"] == "M"}
    assert meta[("process_name", 0)]["name"] == "Collectives"
    sorts = {e["pid"]: e["args"]["sort_index"] for e in events if e.get("name") == "process_sort_index"}
    assert sorts[1] == -1 and min(v for p, v in sorts.items() if p != 1) >= 0
    threads = {tid: a["name"] for (n, tid), a in meta.items() if n == "thread_name"}
    path_ranks = sorted({g["rank"] for c in coll["critical_path"] for g in c["segments"] if g["dur_us"] > 0})
    assert 5 in path_ranks  # the straggler's own work is on every step's critical path
    assert sorted(n for n in threads.values() if not n.startswith("critical path")) == [
        "group 0 (ranks 0-7)", "group 1 (ranks 0-1)", "group 2 (ranks 2-3)", "group 3 (ranks 4-5)",
        "group 4 (ranks 6-7)", "why rank 5",
    ]  # fmt: skip
    assert (
        sorted({int(n.split()[3]) for n in threads.values() if n.startswith("critical path")}) == path_ranks
    )
    # issue 35, item 5: one slice per segment, where the JSON says, and a flow where the path crosses ranks
    on_path = [e for e in mine if e["ph"] == "X" and "path_rank" in e["args"]]
    want = [(c["step"], g["rank"], g["kind"], c["start_ns"] + round(Decimal(str(g["start_us"])) * 1000))
            for c in coll["critical_path"] for g in c["segments"] if g["dur_us"] > 0]  # fmt: skip
    got = [(e["args"]["step"], e["args"]["path_rank"], e["args"]["kind"], base + round(Decimal(e["ts"]) * 1000))
           for e in on_path]  # fmt: skip
    assert [w[:3] for w in want] == [g[:3] for g in got] and all(
        abs(a[3] - b[3]) <= 1000 for a, b in zip(want, got)
    )
    flows = [e for e in mine if e.get("cat") == "critical_path"]
    hops = 0
    for c in coll["critical_path"]:
        segs = [g for g in c["segments"] if g["dur_us"] > 0]
        hops += sum(1 for a, b in zip(segs, segs[1:]) if a["rank"] != b["rank"])
    assert len(flows) == 2 * hops and sorted(e["ph"] for e in flows) == ["f"] * hops + ["s"] * hops
    slices = {e["args"]["instance"]: e for e in mine if e["ph"] == "X" and "instance" in e["args"]}
    assert sorted(slices) == [i["id"] for i in coll["instances"]]
    for inst in coll["instances"]:
        s = slices[inst["id"]]
        first = min(inst["arrival_ns"].values())
        assert (
            s["name"]
            == f"all_reduce #{inst['id']} \u00b7 last: rank {inst['last_rank']} (+{_held_last(inst) / 1e6:.1f} ms)"
        )
        assert (
            base + Decimal(s["ts"]) * 1000 == first
            and Decimal(s["dur"]) * 1000 == inst["last_arrival_ns"] - first
        )
        assert threads[s["tid"]].startswith(f"group {inst['group']} ")
        assert s["args"]["step"] == inst["step"] and s["args"]["last_rank"] == inst["last_rank"]
    assert "last: rank 5 (+" in slices[0]["name"]
    # one counter per rank: each step's wait (ms), then 0 after the last step
    counters = [e for e in mine if e["ph"] == "C"]
    assert [sorted(c["args"]) for c in counters] == [[f"rank {r}" for r in range(8)]] * 4
    for c, b in zip(counters, coll["by_step"]):
        assert {k: float(v) for k, v in c["args"].items()} == {
            f"rank {r}": round(w / 1000, 3) for r, w in ((int(r), w) for r, w in b["wait_us"].items())
        }
    assert set(counters[-1]["args"].values()) == {0}
    # the ranks' slices and flows are exactly those of a plain merge, plus the links
    assert _strip_links(events) == _strip_links(
        json.loads(plain.read_text(), parse_float=Decimal)["traceEvents"]
    )
    assert not {k: v for k, v in model_import(out).view.error_stats.items() if v}


@pytest.mark.parametrize("name", ["ddp8_subgroups_slow", "ddp4_two_stragglers"])
def test_the_reports_merge_command_shows_the_straggler(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The last line of the report, run as it is (output renamed): the worst step,
    the straggler and the reference rank, the straggler last in the summary slices."""
    import shlex

    coll = _info(capsys, str(RECORDED / name))
    cmd = shlex.split(_text(capsys, str(RECORDED / name)).rstrip().splitlines()[-1])
    assert cmd[:2] == ["tracefuse", "merge"] and cmd[-2] == "-o"
    worst = max(coll["by_step"], key=lambda b: b["held_us"][str(coll["straggler"])])
    ranks = [int(r) for r in cmd[cmd.index("--ranks") + 1].split(",")]
    ref = int(cmd[cmd.index("--step-rank") + 1])
    assert coll["straggler"] in ranks and ref in ranks and len(ranks) == 2
    assert ref == max(
        (r for r in map(int, worst["wait_us"]) if r != coll["straggler"]),
        key=lambda r: worst["wait_us"][str(r)],
    )
    assert cmd[cmd.index("--steps") + 1] == f"{worst['step']}:{worst['step']}"
    out = tmp_path / "look.json"
    assert main([*cmd[1:-1], str(out), "-q"]) == 0
    summary = [
        e for e in json.loads(out.read_text())["traceEvents"] if e.get("pid") == 1 and e.get("ph") == "X"
    ]
    slices = [e for e in summary if "instance" in e["args"]]
    assert slices and all(s["args"]["step"] == worst["step"] for s in summary)
    why = [e for e in summary if "straggler_rank" in e["args"]]
    assert [(w["args"]["straggler_rank"], w["args"]["step"]) for w in why] == [
        (coll["straggler"], worst["step"])
    ]
    assert f"last: rank {coll['straggler']} (+" in slices[0]["name"]


@pytest.mark.parametrize(
    ("name", "ranks", "straggler"),
    [
        ("ddp8_subgroups_slow", "5,7", 5),  # rank 5's sub-group [4,5] has no other merged member
        ("ddp8_subgroups_slow", "4,5", 5),  # world and sub-group, both on two ranks
        ("ddp8_subgroups_slow", "1,3", None),
        ("ddp4_two_stragglers", "1,3", 1),  # rank 3 waits for rank 1 only
        ("ddp4_two_stragglers", "0,3", 3),
    ],
)
def test_two_ranks_merged(name: str, ranks: str, straggler: Any, capsys: pytest.CaptureFixture) -> None:
    """Two ranks only (the report's merge command): every instance they share is
    matched, and a rank late at the same collective every step is still told from noise."""
    coll = _info(capsys, str(RECORDED / name), "--ranks", ranks)
    assert coll["unmatched"]["total"] == 0 and coll["instances"]
    assert all(i["ranks"] == [int(r) for r in ranks.split(",")] for i in coll["instances"])
    assert coll["straggler"] == straggler


def test_undecided_thread_cut_is_reported_not_guessed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Rank 0 of ddp4_subgroups keeps its 4 gloo ops, the others lose theirs: nothing
    tells rank 0's world threads from its sub-group's, so its ops are reported."""

    def drop(rank: int, trace: Dict[str, Any]) -> None:
        if rank:
            trace["traceEvents"] = [
                e for e in trace["traceEvents"] if not str(e.get("name")).startswith("gloo:")
            ]

    coll = _info(capsys, str(_rewritten(RECORDED / "ddp4_subgroups", tmp_path / "d", drop)))
    assert coll["instances"] == [] and coll["straggler"] is None
    assert coll["unmatched"]["by_reason"] == [
        {
            "kind": "gloo",
            "name": "gloo:all_reduce",
            "group": "?",
            "reason": "process group unknown",
            "instances": 4,
        }
    ]
    assert any(
        n.startswith("rank 0: 4 gloo op(s) not attributed") and "equally well" in n for n in coll["notes"]
    )


def test_kernel_known_by_its_collective_args_only(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A collective kernel whose name does not say NCCL (args ``Collective name`` and
    ``Seq`` do) is found by info's single pass as by the merge's."""
    src = Path(__file__).resolve().parents[1] / "fixtures" / "sample_run"
    want = _info(capsys, str(src))
    d = tmp_path / "renamed"
    d.mkdir()
    for f in sorted(src.iterdir()):
        raw = f.read_bytes()
        trace = json.loads(gzip.decompress(raw) if f.name.endswith(".gz") else raw)
        for e in trace["traceEvents"]:
            if e.get("cat") == "kernel" and "Collective name" in (e.get("args") or {}):
                e["name"] = "vendor_allreduce_kernel"
        (d / f.name.replace(".gz", "")).write_text(json.dumps(trace))
    coll = _info(capsys, str(d))
    assert len(coll["instances"]) == len(want["instances"]) == 6
    assert [i["arrival_ns"] for i in coll["instances"]] == [i["arrival_ns"] for i in want["instances"]]
    assert {i["match"] for i in coll["instances"]} == {"seq"}


def test_collectives_with_other_sections(capsys: pytest.CaptureFixture) -> None:
    d = str(RECORDED / "ddp4_intermittent")
    text = _text(capsys, "--steps", d)
    lines = text.rstrip().splitlines()
    assert lines[:4] == [f"rank {r}: ProfilerSteps 2-4" for r in range(4)]
    assert lines[-1].strip().startswith("tracefuse merge ")
    assert main(["info", "--collectives", "--steps", "--json", "-j", "1", d]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["steps"] == {str(r): [2, 3, 4] for r in range(4)} and out["collectives"]["straggler"] == 2


@pytest.mark.parametrize("name", sorted(p.name for p in RECORDED.iterdir() if p.is_dir()))
def test_one_answer_whatever_the_code_path(name: str, capsys: pytest.CaptureFixture, monkeypatch) -> None:
    """``info --collectives --steps --align --json`` on every recorded run: the kernel's
    walk with one worker, two workers, and the Python readers alone give one answer, to
    the byte (the report is what users act on: a path that found another straggler, or
    none, would be a silent wrong answer)."""
    run = str(RECORDED / name)

    def answer(*extra: str) -> str:
        rc = main(["info", "--collectives", "--steps", "--align", "--json", run, *extra])
        out = capsys.readouterr().out
        assert rc == 0, out
        return out

    walk = answer("-j", "1")
    assert json.loads(walk)["collectives"] is not None
    assert answer("-j", "2") == walk
    monkeypatch.setenv("TRACEFUSE_KERNEL", "0")
    assert answer("-j", "1") == walk
