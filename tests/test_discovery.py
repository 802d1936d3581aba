"""How directories are read: which files are traces, where each rank comes from.

All on the real traces recorded in tests/data/recorded (natural_order: rank_0..rank_11
without distributedInfo, run in the order 11..0; ddp4: 4 DDP ranks). Variants
(renamed copies, a config.json beside them, a run root with subfolders, an empty rank,
a rank moved 9 days) are made here by script from those files.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, List

from tracefuse_stream.rewrite.labels import rank_metadata
from tracefuse_stream.rewrite.rules import LINK_ID_ARGS, RankRewriter
from tracefuse_stream.select.filters import EventFilter

NAT = [f"rank_{i}.json" for i in range(12)]


def merge_json(h: Any, *args: Any) -> Dict[str, Any]:
    p = h.run_cli("merge", *args, "-j", "1", "--json-summary")
    assert p.returncode == 0, p.stderr_text
    return json.loads(p.stdout)


def annotation_rank(events: List[Dict[str, Any]]) -> List[str]:
    """The ``rank_<i>`` user_annotation each natural_order process recorded."""
    return [e["name"] for e in events if e.get("cat") == "user_annotation"]


def test_natural_order_ranks_come_from_the_file_names(h, tmp_path):
    d = h.recorded("natural_order")
    out = tmp_path / "m.json"
    summary = merge_json(h, d, "-o", out)
    merged = h.load_output(out, exact=True)
    h.check_merge(merged, {i: d / NAT[i] for i in range(12)})
    sections = h.split_by_rank(merged)
    assert sorted(sections) == list(range(12))
    for r, evs in sections.items():
        assert annotation_rank(evs) == [f"rank_{r}"]  # rank_10.json is RANK 10, not RANK 2
        info = merged["tracefuse"]["ranks"][str(r)]
        assert info["rank_from"] == "filename" and Path(info["source"]).name == f"rank_{r}.json"
    notes = [w for w in summary["notes"] if "rank numbers taken from" in w]  # a fact, not a warning
    assert notes == [
        "rank numbers taken from filename: 0-11 (no distributedInfo.rank in those files; "
        "'order' = natural order of the file names)"
    ]


def test_without_a_rank_in_the_name_natural_order_decides(h, tmp_path):
    src = h.recorded("natural_order")
    d = tmp_path / "run"
    d.mkdir()
    for i in range(12):  # p2 must come before p10: numbers compared as numbers
        shutil.copy(src / NAT[i], d / f"p{i}.json")
    out = tmp_path / "m.json"
    merge_json(h, d, "-o", out)
    merged = h.load_output(out, exact=True)
    h.check_merge(merged, {i: d / f"p{i}.json" for i in range(12)})
    for r, evs in h.split_by_rank(merged).items():
        assert annotation_rank(evs) == [f"rank_{r}"]
        assert merged["tracefuse"]["ranks"][str(r)]["rank_from"] == "order"


def test_worker_n_in_the_name_is_the_rank(h, tmp_path):
    src = h.recorded("natural_order")
    d = tmp_path / "run"
    d.mkdir()
    names = {3: "worker 3.json", 0: "host_worker-0.json", 11: "worker11.json"}
    for r, name in names.items():
        shutil.copy(src / NAT[r], d / name)
    out = tmp_path / "m.json"
    merge_json(h, d, "-o", out)
    merged = h.load_output(out, exact=True)
    assert sorted(h.split_by_rank(merged)) == [0, 3, 11]
    for r, evs in h.split_by_rank(merged).items():
        assert annotation_rank(evs) == [f"rank_{r}"]
        assert merged["tracefuse"]["ranks"][str(r)]["rank_from"] == "filename"


def _ddp4_copy(h: Any, d: Path) -> Dict[int, Path]:
    d.mkdir()
    for f in h.recorded("ddp4").glob("*.json.gz"):
        shutil.copy(f, d / f.name)
    return h.by_rank(sorted(d.glob("*.json.gz")))


def test_non_trace_json_is_skipped_in_a_directory_and_named(h, tmp_path):
    d = tmp_path / "run"
    ranks = _ddp4_copy(h, d)
    (d / "config.json").write_text(json.dumps({"lr": 0.1, "world_size": 4}))
    (d / "execution_details.json").write_text(json.dumps({"hostname": "vm", "ranks": [0, 1, 2, 3]}))
    (d / "metrics.json").write_text(json.dumps([{"step": 1, "loss": 2.5}, {"step": 2, "loss": 2.1}]))
    out = tmp_path / "m.json"
    summary = merge_json(h, d, "-o", out)
    merged = h.load_output(out, exact=True)
    h.check_merge(merged, ranks)
    skipped = sorted(w for w in summary["notes"] if w.startswith("skipped "))
    assert skipped == [
        f"skipped {d / 'config.json'}: not a trace: a JSON object without traceEvents (keys: lr, world_size)",
        f"skipped {d / 'execution_details.json'}: not a trace: a JSON object without traceEvents "
        "(keys: hostname, ranks)",
        f"skipped {d / 'metrics.json'}: not a trace: a JSON array whose first item is not a trace event (no 'ph')",
    ]
    # the same file given by path stays an error (exit 1, one line naming it)
    for name in ("config.json", "metrics.json"):
        p = h.run_cli("merge", d / name, "-o", tmp_path / "x.json")
        assert p.returncode == 1, p.stderr_text
        assert p.stderr_text.startswith(f"tracefuse: error: {d / name}: not a trace: ")
        assert p.stderr_text.count("\n") == 1
        assert not (tmp_path / "x.json").exists()


def test_own_outputs_are_skipped_in_a_directory_and_refused_by_path(h, tmp_path):
    d = tmp_path / "run"
    ranks = _ddp4_copy(h, d)
    first = d / "merged_trace.json.gz"
    merge_json(h, d, "-o", first)
    again = d / "again.json.gz"
    summary = merge_json(h, d, "-o", again)  # `tracefuse merge .` run twice
    merged = h.load_output(again, exact=True)
    h.check_merge(merged, ranks)  # 4 ranks: the first merge was not read back as a rank
    assert f"skipped {first}: a merged output of tracefuse-stream (not a rank trace)" in summary["notes"]
    p = h.run_cli("merge", first, "-o", tmp_path / "x.json")
    assert p.returncode == 1
    assert p.stderr_text.startswith(f"tracefuse: error: {first}: is a merged output of tracefuse-stream")
    assert p.stderr_text.count("\n") == 1


def test_a_log_root_with_run_subfolders_names_them(h, tmp_path):
    root = tmp_path / "logs"
    root.mkdir()
    for run, src in (("run_a", "ddp4"), ("run_b", "ddp4_subgroups")):
        (root / run).mkdir()
        for f in h.recorded(src).glob("*.json.gz"):
            shutil.copy(f, root / run / f.name)
    (root / "notes").mkdir()
    (root / "notes" / "cfg.json").write_text("{}")
    p = h.run_cli("merge", root, "-o", tmp_path / "x.json")
    assert p.returncode == 2, p.stderr_text
    line = p.stderr_text
    assert line.count("\n") == 1
    assert "subfolders run_a/, run_b/ hold traces" in line and "notes/" not in line


def test_one_subfolder_per_rank_is_told_to_give_them_together(h, tmp_path):
    """A log root with one folder per rank (rank0/ ... rank3/, a different rank in each)
    is one job: merging one of them, as the one-run-per-folder advice said, gives one
    rank. The advice names all of them, and that merges the 4 ranks."""
    root = tmp_path / "logs"
    root.mkdir()
    files = sorted(h.recorded("ddp4").glob("*.json.gz"))
    for i, f in enumerate(files):
        (root / f"rank{i}").mkdir()
        shutil.copy(f, root / f"rank{i}" / f.name)
    p = h.run_cli("merge", root, "-o", tmp_path / "x.json")
    assert p.returncode == 2, p.stderr_text
    sep = os.sep
    assert p.stderr_text == (
        f"tracefuse: error: {root}: no trace files here, but its 4 subfolders (rank0/, rank1/, rank2/, "
        f"rank3/) hold ranks 0-3, other ranks in each (one job, one folder per rank?); give them "
        f"together: {root}{sep}*{sep}\n"
    )
    (root / "notes").mkdir()  # not every subfolder holds traces: the folders by name
    p = h.run_cli("merge", root, "-o", tmp_path / "x.json")
    assert p.stderr_text.rstrip().endswith(
        "give them together: " + " ".join(str(root / f"rank{i}") for i in range(4))
    ), p.stderr_text
    p = h.run_cli("merge", *(root / f"rank{i}" for i in range(4)), "-o", tmp_path / "x.json")
    assert p.returncode == 0, p.stderr_text
    assert sorted(h.load_output(tmp_path / "x.json")["tracefuse"]["ranks"]) == ["0", "1", "2", "3"]


def _load(path: Path) -> Dict[str, Any]:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def test_an_empty_rank_does_not_decide_the_output_base(h, tmp_path):
    d = tmp_path / "run"
    ranks = _ddp4_copy(h, d)
    empty = _load(ranks[0])
    empty["traceEvents"] = [e for e in empty["traceEvents"] if e.get("ph") == "M"]  # metadata only
    del empty["baseTimeNanoseconds"]
    empty["distributedInfo"]["rank"] = 4
    (d / "rank4_empty.json").write_text(json.dumps(empty))
    out = tmp_path / "m.json"
    summary = merge_json(h, d, "-o", out)
    merged = h.load_output(out, exact=True)
    ins = {r: h.cached_input(p, exact=True) for r, p in ranks.items()}
    B = h.expected_output_base(ins, {r: t["baseTimeNanoseconds"] for r, t in ins.items()})
    assert merged["baseTimeNanoseconds"] == B > 0  # not 0 (epoch): the empty rank decides nothing
    assert "rank(s) 4 have no timed events (ignored for the output base)" in summary["notes"]
    assert merged["tracefuse"]["ranks"]["4"]["events_out"] == 0
    real = {r: p for r, p in ranks.items()}
    sections = h.split_by_rank(merged)
    assert 4 not in sections
    for r, p in real.items():
        h.check_rank_section(sections[r], h.cached_input(p, exact=True), r, merged["baseTimeNanoseconds"])


def test_ranks_days_apart_get_one_warning_naming_them(h, tmp_path):
    src = h.recorded("natural_order")
    d = tmp_path / "run"
    d.mkdir()
    nine_days = 9 * 86400 * 10**9
    for i in range(4):
        t = _load(src / NAT[i])
        if i in (2, 3):  # merged by mistake: another run, 9 days later
            t["baseTimeNanoseconds"] += nine_days
        (d / NAT[i]).write_text(json.dumps(t))
    summary = merge_json(h, d, "-o", tmp_path / "m.json")
    far = [w for w in summary["warnings"] if "days apart" in w]
    assert len(far) == 1
    assert far[0].startswith("ranks start 9.0 days apart (more than 1 day): rank(s) 0-1 start ")
    assert "; rank(s) 2-3 start " in far[0] and far[0].endswith("are these traces from one run?")
    same = merge_json(h, src, "-o", tmp_path / "n.json")
    assert not [w for w in same["warnings"] if "days apart" in w]


def test_info_prints_the_good_ranks_and_marks_the_broken_file(h, tmp_path):
    d = tmp_path / "run"
    ranks = _ddp4_copy(h, d)
    broken = ranks[1]
    broken.write_bytes(broken.read_bytes()[:20000])  # a killed job's truncated gzip
    p = h.run_cli("info", d)
    assert p.returncode == 1
    text = p.stdout.decode()
    rows = [ln for ln in text.splitlines() if ln.strip().split(" ")[0] in ("0", "2", "3")]
    assert [ln.split()[0] for ln in rows] == ["0", "2", "3"]
    marked = [ln for ln in text.splitlines() if ln.startswith("BROKEN ")]
    assert marked == [
        f"BROKEN {broken}: gzip stream ends early (truncated file) (at byte {_decodable(broken)})"
    ]
    assert "--salvage" not in text + p.stderr_text
    js = json.loads(h.run_cli("info", d, "--json").stdout)["ranks"]
    assert [r.get("rank") for r in js] == [0, 2, 3, None] and js[-1]["path"] == str(broken)


def _decodable(path: Path) -> int:
    import zlib

    d = zlib.decompressobj(31)
    return len(d.decompress(path.read_bytes()))


def test_link_id_table_rewrites_every_link_and_keeps_sentinels():
    rw = RankRewriter(3, 0, EventFilter(include_pyfunc=True))
    off = 3 << 32
    ev = {
        "ph": "X",
        "cat": "cuda_sync",
        "name": "Stream Wait Event",
        "pid": 0,
        "tid": 7,
        "ts": 1,
        "dur": 1,
        "args": {
            "correlation": 11,
            "external id": 5,
            "wait_on_cuda_event_record_corr_id": 9,
            "wait_on_cuda_event_id": 2,
            "wait_on_stream": 7,
            "Ev Idx": 4,
        },
    }
    sync = {**ev, "args": {"correlation": 12, "wait_on_cuda_event_record_corr_id": -1}}
    py = {
        "ph": "X",
        "cat": "python_function",
        "name": "f",
        "pid": 1,
        "tid": 1,
        "ts": 2,
        "dur": 1,
        "args": {"Python id": 8, "Python parent id": 6, "Python module id": 2},
    }
    out = rw.feed_batch([ev, sync, py])
    assert out[0]["args"] == {
        "correlation": off + 11,
        "external id": off + 5,
        "wait_on_cuda_event_record_corr_id": off + 9,
        "wait_on_cuda_event_id": off + 2,
        "wait_on_stream": 7,
        "Ev Idx": 4,
        "rank": 3,
    }
    assert out[1]["args"] == {"correlation": off + 12, "wait_on_cuda_event_record_corr_id": -1, "rank": 3}
    assert out[2]["args"] == {
        "Python id": off + 8,
        "Python parent id": off + 6,
        "Python module id": 2,
        "rank": 3,
    }
    assert all(isinstance(why, str) and len(why) > 20 for why in LINK_ID_ARGS.values())


def test_python_tree_stays_inside_each_rank_on_a_real_job(h, tmp_path, rec_ddp4_by_rank):
    out = tmp_path / "m.json"
    merge_json(h, h.recorded("ddp4"), "-o", out, "--include-pyfunc")
    merged = h.load_output(out, exact=True)
    h.check_merge(merged, rec_ddp4_by_rank, include_pyfunc=True)
    ids: Dict[int, set] = {}
    parents: Dict[int, set] = {}
    for e in merged["traceEvents"]:
        a = e.get("args") or {}
        if "Python id" in a:
            ids.setdefault(a["rank"], set()).add(a["Python id"])
        if a.get("Python parent id") is not None:  # null at the roots: no link, kept
            parents.setdefault(a["rank"], set()).add(a["Python parent id"])
    assert sorted(ids) == [0, 1, 2, 3]
    for r in ids:
        assert all(i >> 32 == r for i in ids[r])
        assert parents[r] <= ids[r], f"rank {r}: a parent id outside its own rank's tree"
    assert not set.intersection(*ids.values())


def test_accelerator_processes_are_labelled_by_their_kind():
    rw = RankRewriter(2, 0, EventFilter())
    meta = [
        {"ph": "M", "name": "process_name", "pid": 9, "tid": 0, "args": {"name": "MTIA 9"}},
        {"ph": "M", "name": "process_labels", "pid": 9, "tid": 0, "args": {"labels": "MTIA 9"}},
        {"ph": "M", "name": "process_name", "pid": 14242, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_labels", "pid": 14242, "tid": 0, "args": {"labels": "CPU"}},
    ]
    evs = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 9, "tid": 1, "ts": 1, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 14242, "tid": 14242, "ts": 1, "dur": 1},
    ]
    rw.feed_batch(meta + evs)
    names = {m["pid"]: m["args"]["name"] for m in rank_metadata(rw) if m["name"] == "process_name"}
    sorts = {
        m["pid"]: m["args"]["sort_index"] for m in rank_metadata(rw) if m["name"] == "process_sort_index"
    }
    assert names == {30009: "RANK 2 - MTIA", 35000: "RANK 2 - CPU"}  # one MTIA: no index
    labels = {m["pid"]: m["args"]["labels"] for m in rank_metadata(rw) if m["name"] == "process_labels"}
    assert labels == {30009: "rank 2, pid 9, MTIA 9", 35000: "rank 2, pid 14242, python3, CPU"}
    assert sorts[30009] == 2 * 1000 + 100 + 9 and sorts[35000] == 2000
