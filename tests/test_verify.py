"""Tests for ``tracefuse verify``.

Merged files are built here from the real traces in the shared fixtures (conftest's
``shared_fixtures``: skipped with a reason outside CI, required in CI) by a tiny
reference rewrite that applies docs/OUTPUT_FORMAT.md's rules; each finding is then
provoked on a deliberately broken copy.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
import zstandard
from conftest import REPO, run_cli

from tracefuse_stream.cli.app import main as cli_main
from tracefuse_stream.select.filters import EventFilter
from tracefuse_stream.verify import jsonfile as V
from tracefuse_stream.verify import overlap, passes
from tracefuse_stream.verify.check import verify


def main(argv: list[str]) -> int:
    """``tracefuse verify ARGV`` in process (a leading ``verify`` word accepted too),
    argparse's exit codes returned, not raised."""
    args = list(argv) if argv[:1] == ["verify"] else ["verify", *argv]
    try:
        return cli_main(args)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2


U32 = 2**32

# ----------------------------------------------------------------------------- helpers


def load(path: Path) -> dict:
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw, parse_float=Decimal)


_DEC = re.compile(r'"\\u0000D([^"\\]*)\\u0000"')


def dumps(obj) -> bytes:
    """json.dumps that writes Decimals as exact JSON numbers."""

    def default(o):
        if isinstance(o, Decimal):
            return "\x00D" + str(o) + "\x00"
        raise TypeError(type(o))

    s = json.dumps(obj, default=default, separators=(",", ":"))
    return _DEC.sub(r"\1", s).encode()


def write(path: Path, doc_or_bytes, compression: str = "plain") -> Path:
    data = doc_or_bytes if isinstance(doc_or_bytes, bytes) else dumps(doc_or_bytes)
    if compression == "gzip":
        data = gzip.compress(data, 1)
    elif compression == "zstd":
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


def us_to_ns(v) -> int:
    return int(Decimal(v) * 1000) if not isinstance(v, Decimal) else int(v * 1000)


def _map_id(r: int, v):
    if isinstance(v, bool):
        return v
    if isinstance(v, str):
        try:
            v = int(v, 16)
        except ValueError:
            return v
    if isinstance(v, Decimal) and v == v.to_integral_value():
        v = int(v)
    if isinstance(v, int) and 0 <= v < U32:
        return r * U32 + v
    return v


def ref_merge(inputs, filt: EventFilter = None) -> dict:
    """Reference rewrite of ``[(path, rank, doc), ...]`` following docs/OUTPUT_FORMAT.md."""
    filt = filt or EventFilter()
    bases = {r: (doc.get("baseTimeNanoseconds") or 0) for _, r, doc in inputs}
    B = min(bases.values())
    events = []
    ranks = {}
    for path, r, doc in sorted(inputs, key=lambda x: x[1]):
        base_r = bases[r]
        shift_ns = base_r - B
        shift_us = Decimal(shift_ns).scaleb(-3)
        pidmap, order = {}, []
        for e in doc["traceEvents"]:
            p = e.get("pid")
            if p not in pidmap:
                if type(p) is int and 0 <= p < 5000:
                    pidmap[p] = (r + 1) * 10000 + p
                else:
                    pidmap[p] = (
                        (r + 1) * 10000
                        + 5000
                        + sum(1 for q in order if not (type(q) is int and 0 <= q < 5000))
                    )
                order.append(p)
        tidmap, weird = {}, []

        def tid_of(t, tidmap=tidmap, weird=weird):
            if type(t) is int and 0 <= t < U32:
                return t
            if type(t) is int and -U32 < t < 0:
                return -t
            key = repr(t)
            if key not in tidmap:
                tidmap[key] = 1_000_000_000 + len(tidmap)
                weird.append(t)
            return tidmap[key]

        labels, pnames, tmeta = {}, {}, []
        kept, kept_pids, tids_used = [], set(), {}
        n_in = 0
        for e in doc["traceEvents"]:
            n_in += 1
            if e.get("ph") == "M":
                nm = e.get("name")
                if nm == "process_labels":
                    labels[e["pid"]] = e["args"].get("labels")
                elif nm == "process_name":
                    pnames[e["pid"]] = e["args"].get("name")
                elif nm in ("thread_name", "thread_sort_index"):
                    tmeta.append(e)
                continue
            if not filt.keep(e):
                continue
            ts_ns = us_to_ns(e["ts"])
            dur_ns = us_to_ns(e["dur"]) if "dur" in e else 0
            if not filt.in_window(base_r + ts_ns, dur_ns):
                continue
            o = dict(e)
            o["pid"] = pidmap[e["pid"]]
            if "tid" in e:
                o["tid"] = tid_of(e["tid"])
                tids_used[(e["pid"], o["tid"])] = e["tid"]
            o["ts"] = e["ts"] + shift_us if shift_ns else e["ts"]
            if e.get("ph") in ("s", "t", "f") and "id" in e:
                o["id"] = _map_id(r, e["id"])
            args = dict(e.get("args") or {})
            for k in ("correlation", "External id"):
                if k in args:
                    args[k] = _map_id(r, args[k])
            args["rank"] = r
            o["args"] = args
            kept.append(o)
            kept_pids.add(e["pid"])
        meta = []
        ts0 = kept[0]["ts"] if kept else 0
        cpu_i = other_i = 0
        for p in order:
            if p not in kept_pids:
                continue
            label = labels.get(p)
            if isinstance(label, str) and label.startswith("GPU "):
                kind, sort = label, r * 1000 + 100 + int(label.split()[1])
            elif label == "CPU" or (type(p) is int and p >= 5000):
                kind, sort = "CPU", r * 1000 + cpu_i
                cpu_i += 1
            else:
                kind, sort = str(p), r * 1000 + 900 + other_i
                other_i += 1
            out = pidmap[p]
            name = f"RANK {r} - {kind} ({pnames.get(p, '')}, pid {p})"
            meta.append(
                {
                    "ph": "M",
                    "name": "process_name",
                    "pid": out,
                    "tid": 0,
                    "ts": ts0,
                    "args": {"name": name, "rank": r},
                }
            )
            meta.append(
                {
                    "ph": "M",
                    "name": "process_labels",
                    "pid": out,
                    "tid": 0,
                    "ts": ts0,
                    "args": {"labels": label, "rank": r},
                }
            )
            meta.append(
                {
                    "ph": "M",
                    "name": "process_sort_index",
                    "pid": out,
                    "tid": 0,
                    "ts": ts0,
                    "args": {"sort_index": sort, "rank": r},
                }
            )
        for e in tmeta:
            if e["pid"] in kept_pids:
                o = dict(e, pid=pidmap[e["pid"]], tid=tid_of(e.get("tid")), ts=ts0)
                o["args"] = dict(e.get("args") or {}, rank=r)
                meta.append(o)
        for t in weird:
            for (p, out_t), orig in list(tids_used.items()):
                if orig == t:
                    meta.append(
                        {
                            "ph": "M",
                            "name": "thread_name",
                            "pid": pidmap[p],
                            "tid": out_t,
                            "ts": ts0,
                            "args": {"name": str(t), "rank": r},
                        }
                    )
        events.extend(kept)
        events.extend(meta)
        header = {k: v for k, v in doc.items() if k != "traceEvents"}
        ranks[str(r)] = {
            "rank": r,
            "source": str(path),
            "compression": "gzip",
            "base_time_ns": doc.get("baseTimeNanoseconds"),
            "shift_ns": shift_ns,
            "shift_us": float(shift_us),
            "align": None,
            "header": header,
            "pids": [[p, pidmap[p]] for p in order if p in kept_pids],
            "events_in": n_in,
            "events_out": len(kept) + len(meta),
            "salvage": None,
        }
    return {
        "schemaVersion": 1,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": B,
        "traceEvents": events,
        "tracefuse": {
            "tool": "tracefuse-stream",
            "version": "0.1.0",
            "base_time_ns": B,
            "ranks_merged": sorted(r for _, r, _ in inputs),
            "filters": filt.to_header(),
            "ranks": ranks,
        },
    }


@pytest.fixture(scope="module")
def ddp4(ddp4_files):
    paths = list(ddp4_files)
    inputs = []
    for p in paths:
        doc = load(p)
        inputs.append((p, doc["distributedInfo"]["rank"], doc))
    return paths, ref_merge(inputs)


@pytest.fixture(scope="module")
def h100_job(tmp_path_factory, real_dir):
    """A 2-rank job from the H100 trace: rank 1 is a copy whose base is 1 ms later and
    whose ts are 1 ms earlier (same absolute times), so the merge shifts it."""
    H100 = real_dir / "h100_bert_small.json.gz"
    d = tmp_path_factory.mktemp("h100")
    doc0 = load(H100)
    doc1 = copy.deepcopy(doc0)
    doc1["baseTimeNanoseconds"] = doc0["baseTimeNanoseconds"] + 1_000_000
    doc1["distributedInfo"] = {"rank": 1, "world_size": 2}
    for e in doc1["traceEvents"]:
        if "ts" in e:
            e["ts"] = e["ts"] - 1000
    p1 = write(d / "rank1.json.gz", doc1, "gzip")
    merged = ref_merge([(H100, 0, doc0), (p1, 1, doc1)])
    return [H100, p1], merged


def edit(merged: dict, fn, recount: bool = True) -> dict:
    """A copy of ``merged`` (events list and header copied) changed by ``fn``; with
    ``recount`` the header's events_out follow the change (a self-consistent file)."""
    m = dict(merged)
    m["traceEvents"] = list(merged["traceEvents"])
    m["tracefuse"] = copy.deepcopy(merged["tracefuse"])
    fn(m)
    if recount:
        for r, info in m["tracefuse"]["ranks"].items():
            info["events_out"] = sum(1 for e in m["traceEvents"] if e.get("args", {}).get("rank") == int(r))
    return m


def first(m: dict, pred) -> int:
    return next(i for i, e in enumerate(m["traceEvents"]) if pred(e))


def set_field(m: dict, i: int, **kw) -> dict:
    e = dict(m["traceEvents"][i], **kw)
    m["traceEvents"][i] = e
    return e


def real(rank):
    return lambda e: e.get("ph") == "X" and e["args"].get("rank") == rank


def codes(rep, level=None):
    items = rep.errors + rep.warnings if level is None else (rep.errors if level == "error" else rep.warnings)
    return {f.code for f in items}


def check(tmp_path, doc, name="m.json", **kw):
    return verify(write(tmp_path / name, doc), **kw)


# ----------------------------------------------------------------------------- correct files


def test_correct_ddp4_merge_passes_with_against(tmp_path, ddp4):
    paths, merged = ddp4
    out = write(tmp_path / "ddp4.json.gz", merged, "gzip")
    rep = verify(out, against=paths)
    assert rep.ok, rep.format_text()
    assert sorted(rep.ranks) == [0, 1, 2, 3]
    for r in range(4):
        assert rep.ranks[r]["against"].startswith("ok"), rep.ranks[r]
        assert rep.ranks[r]["flow_starts"] > 0
    assert rep.totals["events"] == len(merged["traceEvents"])
    # the same fwdbwd ids on every rank, remapped: no shared key
    assert "flow_key_shared" not in codes(rep)
    assert main([str(out), "--against", *map(str, paths)]) == 0


def test_correct_h100_two_ranks_with_shift(tmp_path, h100_job):
    inputs, merged = h100_job
    assert merged["tracefuse"]["ranks"]["1"]["shift_ns"] == 1_000_000
    rep = check(tmp_path, merged, against=inputs)
    assert rep.ok, rep.format_text()
    assert {f.code for f in rep.errors} == set()
    # string pids ("Spans", "Traces", "") were mapped to numbers: nothing string-ish left
    assert not codes(rep) & {"string_pid", "zero_pid", "pid_out_of_range", "tid_out_of_range"}
    assert rep.ranks[0]["processes"] == rep.ranks[1]["processes"] >= 3


@pytest.mark.parametrize("comp,suffix", [("gzip", ".json.gz"), ("zstd", ".json.zst"), ("plain", ".json")])
def test_compressed_outputs(tmp_path, h100_job, comp, suffix):
    inputs, merged = h100_job
    out = write(tmp_path / ("m" + suffix), merged, comp)
    rep = verify(out, against=inputs)
    assert rep.ok, rep.format_text()
    assert rep.totals["compression"] == comp
    assert rep.totals["bytes"] == len(dumps(merged))


def test_header_before_events(tmp_path, h100_job):
    inputs, merged = h100_job
    m = {"tracefuse": merged["tracefuse"], **{k: v for k, v in merged.items() if k != "tracefuse"}}
    rep = check(tmp_path, m, against=inputs)
    assert rep.ok, rep.format_text()


def test_header_fallback_pass(tmp_path, h100_job, monkeypatch):
    """A header too big for the head/tail buffers is read by a separate pass."""
    inputs, merged = h100_job
    monkeypatch.setattr(passes, "TOPLEVEL_CAP", 1024)
    monkeypatch.setattr(passes, "READ_CHUNK", 4096)
    calls = []
    real_pass = V.header_pass
    monkeypatch.setattr(V, "header_pass", lambda p: calls.append(p) or real_pass(p))
    before = {"tracefuse": merged["tracefuse"], **{k: v for k, v in merged.items() if k != "tracefuse"}}
    for doc, name in ((merged, "after.json"), (before, "before.json")):
        rep = check(tmp_path, doc, name, against=inputs)
        assert "header_missing" not in codes(rep)
        assert rep.ranks[0]["against"].startswith("ok")
    # after the events the fast reader decodes the header itself; before them it is
    # beyond the 1 KB head region, so only the separate pass finds it
    assert [Path(p).name for p in calls] == ["before.json"]


# ----------------------------------------------------------------------------- structure findings


def test_flow_key_shared(tmp_path, h100_job):
    _, merged = h100_job

    def fn(m):
        i0 = first(m, lambda e: e.get("ph") == "s" and e["args"]["rank"] == 0)
        i1 = first(m, lambda e: e.get("ph") == "s" and e["args"]["rank"] == 1)
        set_field(m, i1, id=m["traceEvents"][i0]["id"])

    rep = check(tmp_path, edit(merged, fn))
    assert not rep.ok
    f = rep.find("flow_key_shared")
    assert f and f[0].level == "error" and f[0].examples[0]["ranks"] == [0, 1]


def test_string_pid(tmp_path, h100_job):
    rep = check(tmp_path, edit(h100_job[1], lambda m: set_field(m, first(m, real(1)), pid="Spans")))
    assert "string_pid" in codes(rep, "error") and not rep.ok


def test_zero_pid(tmp_path, h100_job):
    rep = check(tmp_path, edit(h100_job[1], lambda m: set_field(m, first(m, real(0)), pid=0)))
    assert "zero_pid" in codes(rep, "error")


def test_pid_out_of_range(tmp_path, h100_job):
    rep = check(tmp_path, edit(h100_job[1], lambda m: set_field(m, first(m, real(0)), pid=U32 + 10001)))
    assert "pid_out_of_range" in codes(rep, "error")
    rep = check(tmp_path, edit(h100_job[1], lambda m: set_field(m, first(m, real(0)), pid=-1)))
    assert "pid_out_of_range" in codes(rep, "error")


def test_tid_out_of_range(tmp_path, h100_job):
    rep = check(tmp_path, edit(h100_job[1], lambda m: set_field(m, first(m, real(0)), tid=-247463936)))
    assert "tid_out_of_range" in codes(rep, "error")


def test_process_named_twice(tmp_path, h100_job):
    def fn(m):
        i = first(m, lambda e: e.get("name") == "process_name")
        m["traceEvents"].append(
            dict(m["traceEvents"][i], args=dict(m["traceEvents"][i]["args"], name="other"))
        )

    rep = check(tmp_path, edit(h100_job[1], fn))
    f = rep.find("process_named_twice")
    assert f and f[0].level == "error"


def test_process_unnamed(tmp_path, h100_job):
    def fn(m):
        del m["traceEvents"][first(m, lambda e: e.get("name") == "process_name" and e["args"]["rank"] == 1)]

    rep = check(tmp_path, edit(h100_job[1], fn))
    f = rep.find("process_unnamed")
    assert f and f[0].rank == 1 and not rep.ok


def test_process_multi_rank(tmp_path, h100_job):
    def fn(m):
        pid0 = m["traceEvents"][first(m, real(0))]["pid"]
        set_field(m, first(m, real(1)), pid=pid0)

    rep = check(tmp_path, edit(h100_job[1], fn))
    f = rep.find("process_multi_rank")
    assert f and f[0].level == "error" and f[0].examples[0]["ranks"] == [0, 1]
    assert "pid_rank_mismatch" not in codes(rep)


def test_sort_index_not_int32(tmp_path, h100_job):
    def fn(m):
        i = first(m, lambda e: e.get("name") == "process_sort_index")
        set_field(m, i, args=dict(m["traceEvents"][i]["args"], sort_index=2**31))

    rep = check(tmp_path, edit(h100_job[1], fn))
    assert "sort_index_not_int32" in codes(rep, "error")


def test_flow_float_id(tmp_path, h100_job):
    rep = check(
        tmp_path,
        edit(h100_job[1], lambda m: set_field(m, first(m, lambda e: e.get("ph") == "s"), id=Decimal("5.0"))),
    )
    f = rep.find("flow_float_id")
    assert f and f[0].level == "error" and not rep.ok


def test_flow_orphan_end_is_warning(tmp_path, h100_job):
    def fn(m):
        i = first(m, lambda e: e.get("ph") == "f" and e["args"]["rank"] == 1)
        m["traceEvents"].insert(i, dict(m["traceEvents"][i], id=U32 + 999_999))

    base = check(tmp_path, h100_job[1], "a.json")
    rep = check(tmp_path, edit(h100_job[1], fn))
    assert rep.ok, rep.format_text()  # a warning only
    f = {x.rank: x for x in rep.find("flow_orphan_end")}
    before = {x.rank: x.count for x in base.find("flow_orphan_end")}
    assert f[1].level == "warning" and f[1].count == before.get(1, 0) + 1
    assert rep.ranks[1]["flow_orphan_ends"] == before.get(1, 0) + 1


def _x(pid, tid, ts, dur, name, rank=0):
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": Decimal(ts),
        "dur": Decimal(dur),
        "args": {"rank": rank},
    }


def test_overlap_x(tmp_path, h100_job):
    def fn(m):
        pid = m["traceEvents"][first(m, real(0))]["pid"]
        ev = m["traceEvents"]
        # file order is not time order
        ev.append(_x(pid, 777, "110.000", "5.000", "child"))  # nests in parent
        ev.append(_x(pid, 777, "100.000", "20.000", "parent"))
        ev.append(_x(pid, 777, "120.000", "3.000", "adjacent"))  # starts when parent ends
        ev.append(_x(pid, 777, "100.000", "20.000", "same"))  # equal ts and end: nests
        ev.append(_x(pid, 777, "115.001", "10.000", "partial"))  # starts inside, ends after
        ev.append(_x(pid, 778, "100.000", "20.000", "other thread"))

    rep = check(tmp_path, edit(h100_job[1], fn))
    assert rep.ok  # warning only
    f = [x for x in rep.find("overlap_x") if x.rank == 0][0]
    assert f.level == "warning"
    ours = [x for x in f.examples if x["tid"] == 777]
    base = check(tmp_path, h100_job[1], "base.json")
    assert rep.ranks[0]["overlaps"] == base.ranks[0]["overlaps"] + 1
    assert len(ours) == 1, f.examples
    assert ours[0]["event"]["name"] == "partial" and ours[0]["event"]["ts_ns"] == 115_001  # 115.001 us
    assert ours[0]["overlaps"]["name"] in ("parent", "same")
    assert rep.ranks[0]["overlaps_by_thread"][0]["tid"] in (777, ours[0]["tid"])


def test_overlap_external_sort_matches_in_memory(tmp_path, ddp4):
    out = write(tmp_path / "d.json", ddp4[1])
    a = verify(out)
    b = verify(out, sort_chunk_records=997)
    assert b.totals["overlap_records_spilled"] and not a.totals["overlap_records_spilled"]
    assert [r["overlaps"] for r in a.ranks.values()] == [r["overlaps"] for r in b.ranks.values()]
    assert a.codes() == b.codes()


def test_overlap_many_runs_multilevel_merge(tmp_path, monkeypatch):
    monkeypatch.setattr(overlap, "SORT_FAN_IN", 3)
    ev = []
    for k in range(300):  # 300 parents, each with a nested child and a partial overlapper, shuffled
        t = k * 100
        ev += [
            _x(10001, 1, f"{t + 1}.000", "10.000", "child"),
            _x(10001, 1, f"{t + 5}.500", "50.000", "partial"),
            _x(10001, 1, f"{t}.000", "50.000", "parent"),
        ]
    ev.reverse()
    ev.append(
        {
            "ph": "M",
            "name": "process_name",
            "pid": 10001,
            "tid": 0,
            "args": {"name": "RANK 0 - CPU", "rank": 0},
        }
    )
    rep = verify(write(tmp_path / "o.json", {"traceEvents": ev}), sort_chunk_records=50)
    assert rep.ranks[0]["overlaps"] == 300


# ----------------------------------------------------------------------------- invalid JSON


def test_invalid_json_truncated_reports_offset(tmp_path, h100_job):
    data = dumps(h100_job[1])
    cut = len(data) * 2 // 3
    rep = verify(write(tmp_path / "t.json", data[:cut]))
    f = rep.find("invalid_json")
    assert f and f[0].level == "error" and not rep.ok
    assert f[0].examples[0]["offset"] == cut
    assert rep.totals["events"] > 0  # events before the cut were still checked
    # truncated gzip too
    gz = gzip.compress(data)
    rep = verify(write(tmp_path / "t.json.gz", gz[: len(gz) // 2]))
    assert "invalid_json" in codes(rep, "error")


def test_invalid_json_bad_byte_offset(tmp_path, h100_job, monkeypatch):
    monkeypatch.setattr(passes, "READ_CHUNK", 4096)
    data = bytearray(dumps(h100_job[1]))
    pos = data.index(b'"name":', len(data) // 2) + 8  # inside a name string
    data[pos] = 0x01  # raw control character
    rep = verify(write(tmp_path / "c.json", bytes(data)))
    f = rep.find("invalid_json")[0]
    assert f.examples[0]["offset"] == pos


def test_nan_is_invalid_json(tmp_path, h100_job):
    data = dumps(h100_job[1])
    m = re.search(rb'"dur":[0-9.]+', data[len(data) // 3 :])
    pos = len(data) // 3 + m.start() + len(b'"dur":')
    data = data[:pos] + b"NaN" + data[m.end() + len(data) // 3 :]
    rep = verify(write(tmp_path / "n.json", data))
    f = rep.find("invalid_json")
    assert f and not rep.ok
    assert "NaN" in f[0].message
    assert pos <= f[0].examples[0]["offset"] <= pos + 3


# ----------------------------------------------------------------------------- --against


def test_dropped_event(tmp_path, h100_job):
    inputs, merged = h100_job
    victim = {}

    def fn(m):
        i = first(m, real(1))
        victim.update(m["traceEvents"][i])
        del m["traceEvents"][i]

    rep = check(tmp_path, edit(merged, fn), against=inputs)
    f = rep.find("missing_event")
    assert f and f[0].rank == 1 and f[0].count == 1 and not rep.ok
    assert f[0].examples[0]["name"] == victim["name"]
    assert f[0].examples[0]["ts_ns"] == us_to_ns(victim["ts"])
    assert "extra_event" not in codes(rep)
    assert rep.ranks[0]["against"].startswith("ok")


def test_duplicated_event(tmp_path, h100_job):
    inputs, merged = h100_job

    def fn(m):
        i = first(m, real(0))
        m["traceEvents"].insert(i, m["traceEvents"][i])

    rep = check(tmp_path, edit(merged, fn), against=inputs)
    f = rep.find("extra_event")
    assert f and f[0].rank == 0 and f[0].count == 1 and f[0].examples
    assert "missing_event" not in codes(rep)


def test_wrong_ts(tmp_path, h100_job):
    inputs, merged = h100_job

    def fn(m):
        i = first(m, real(1))
        set_field(m, i, ts=m["traceEvents"][i]["ts"] + Decimal("0.001"))

    rep = check(tmp_path, edit(merged, fn), against=inputs)
    assert {"missing_event", "extra_event", "wrong_time"} <= codes(rep, "error")
    assert rep.find("wrong_time")[0].examples[0]["off_by_ns"] == 1


def test_wrong_pid_map(tmp_path, h100_job):
    inputs, merged = h100_job

    def fn(m):
        pairs = m["tracefuse"]["ranks"]["0"]["pids"]
        pairs[0][1] += 1

    rep = check(tmp_path, edit(merged, fn), against=inputs)
    assert "pid_map_mismatch" in codes(rep, "error")
    assert "missing_event" in codes(rep) and "extra_event" in codes(rep)


def test_header_mismatch(tmp_path, h100_job):
    inputs, merged = h100_job

    def fn(m):
        m["tracefuse"]["ranks"]["1"]["header"]["traceName"] = "changed"

    rep = check(tmp_path, edit(merged, fn), against=inputs)
    f = rep.find("header_mismatch")
    assert f and f[0].rank == 1 and f[0].examples[0]["key"] == "traceName"
    assert not rep.ok


def test_base_time_mismatch(tmp_path, h100_job):
    inputs, merged = h100_job

    def fn(m):
        m["baseTimeNanoseconds"] += 1

    rep = check(tmp_path, edit(merged, fn))
    assert "header_mismatch" in codes(rep, "error")


def test_filters_reapplied(tmp_path, h100_job):
    """A merge that kept python_function must be checked with that filter."""
    inputs, _ = h100_job
    docs = [(p, r, load(p)) for r, p in enumerate(inputs)]
    filt = EventFilter(include_pyfunc=True, drop_cat=frozenset({"cpu_instant_event"}))
    merged = ref_merge(docs, filt)
    rep = check(tmp_path, merged, against=inputs)
    assert rep.ok, rep.format_text()
    m2 = dict(merged, tracefuse=dict(merged["tracefuse"], filters=EventFilter().to_header()))
    rep = check(tmp_path, m2, "m2.json", against=inputs)
    assert "extra_event" in codes(rep)


def test_against_unmatched_input(tmp_path, h100_job, ddp4):
    inputs, merged = h100_job
    rep = check(tmp_path, merged, against=[inputs[0], ddp4[0][0]])
    assert "against_unmatched" in codes(rep, "error")


# ----------------------------------------------------------------------------- CLI


def test_cli_text_and_json(tmp_path, h100_job, capsys):
    inputs, merged = h100_job
    out = write(tmp_path / "m.json.gz", merged, "gzip")
    assert main([str(out)]) == 0
    text = capsys.readouterr().out
    assert "rank" in text and "total" in text and "OK" in text
    assert main(["verify", str(out), "--against", *map(str, inputs), "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["ok"] is True and set(js["ranks"]) == {"0", "1"}
    assert js["ranks"]["1"]["against"].startswith("ok")

    bad = write(tmp_path / "bad.json", edit(merged, lambda m: set_field(m, first(m, real(1)), pid="Spans")))
    assert main([str(bad), "--json"]) == 5
    js = json.loads(capsys.readouterr().out)
    assert js["ok"] is False and any(e["code"] == "string_pid" for e in js["errors"])


def test_cli_missing_file(tmp_path, capsys):
    assert main([str(tmp_path / "nope.json")]) == 1
    err = capsys.readouterr().err
    assert "nope.json" in err and len(err.strip().splitlines()) == 1
    out = write(tmp_path / "x.json", {"traceEvents": []})
    assert main([str(out), "--against", str(tmp_path / "missing.json.gz")]) == 1
    assert "missing.json.gz" in capsys.readouterr().err


def test_cli_module_entry(tmp_path, h100_job):
    out = write(tmp_path / "m.json", h100_job[1])
    p = subprocess.run(
        [sys.executable, "-m", "tracefuse_stream", "verify", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert p.returncode == 0, p.stderr
    assert "OK" in p.stdout


def test_event_count_mismatch(tmp_path, h100_job):
    rep = check(tmp_path, edit(h100_job[1], lambda m: m["traceEvents"].pop(first(m, real(1))), recount=False))
    f = rep.find("event_count_mismatch")
    assert f and f[0].rank == 1 and not rep.ok


def test_alignment_recorded_and_checked(tmp_path, h100_job):
    """A shift beyond base_r - B must be explained by the recorded alignment."""
    inputs, merged = h100_job

    def moved(m, align):
        m["tracefuse"]["ranks"]["1"]["shift_ns"] += 5000
        m["tracefuse"]["ranks"]["1"]["align"] = align
        for i, e in enumerate(m["traceEvents"]):
            if e.get("args", {}).get("rank") == 1 and e.get("ph") != "M":
                m["traceEvents"][i] = dict(e, ts=e["ts"] + Decimal("5.000"))

    ok = check(
        tmp_path, edit(merged, lambda m: moved(m, {"offset_ns": 5000, "applied": True})), against=inputs
    )
    assert ok.ok, ok.format_text()
    assert ok.find("time_shift")[0].examples[0]["moved_ns"] == 5000
    bad = check(tmp_path, edit(merged, lambda m: moved(m, None)), against=inputs)
    assert "header_mismatch" in codes(bad, "error")


def test_no_trace_events(tmp_path):
    rep = check(tmp_path, {"schemaVersion": 1})
    assert "no_trace_events" in codes(rep, "error")
    rep = check(tmp_path, {"traceEvents": []}, "empty.json")
    assert "no_trace_events" not in codes(rep)


# ----------------------------------------------------------------------------- end to end


def test_end_to_end_merge_ddp4_then_verify(tmp_path, ddp4_dir):
    """The real merge engine's output of the ddp4 job verifies clean against its inputs."""
    from tracefuse_stream.pipeline.orchestrate import merge

    out = tmp_path / "ddp4_merged.json.gz"
    merge([str(ddp4_dir)], str(out))
    rep = verify(out, against=[ddp4_dir])
    assert rep.ok, rep.format_text()
    assert sorted(rep.ranks) == [0, 1, 2, 3]
    assert all(rep.ranks[r]["against"].startswith("ok") for r in range(4))
    # the package's CLI dispatches ``verify`` here
    p = run_cli("verify", out, "--json", cwd=REPO)
    assert p.returncode == 0, p.stderr_text + p.stdout.decode()
    assert json.loads(p.stdout)["ok"] is True


def test_zstd_and_plain_inputs(tmp_path, h100_job):
    """--against inputs are read whatever their compression (detected from the bytes)."""
    inputs, merged = h100_job
    raw = gzip.decompress(Path(inputs[1]).read_bytes())
    zin = write(tmp_path / "rank1.json.zst", raw, "zstd")
    pin = write(tmp_path / "rank0.json", gzip.decompress(Path(inputs[0]).read_bytes()))

    def fn(m):
        m["tracefuse"]["ranks"]["1"]["source"] = str(zin)
        m["tracefuse"]["ranks"]["0"]["source"] = str(pin)

    rep = check(tmp_path, edit(merged, fn), against=[pin, zin])
    assert rep.ok, rep.format_text()
    assert all(rep.ranks[r]["against"].startswith("ok") for r in (0, 1))


def test_gzip_multi_member(tmp_path, h100_job):
    """Valid JSON split over two gzip members: Python reads both, Perfetto only the first."""
    data = dumps(h100_job[1])
    half = len(data) // 2
    out = tmp_path / "mm.json.gz"
    out.write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]))
    rep = verify(out)
    f = rep.find("gzip_multi_member")
    assert f and f[0].level == "error" and f[0].examples[0]["first_member_bytes"] == half
    assert "invalid_json" not in codes(rep)
    single = verify(write(tmp_path / "one.json.gz", data, "gzip"))
    assert "gzip_multi_member" not in codes(single)


# ----------------------------------------------------------------------------- one subcommand


def _report_json(p) -> dict:
    d = json.loads(p.stdout)
    d["totals"].pop("seconds")
    d["totals"].pop("mb_per_s")
    return d


def test_cli_against_before_or_after_the_merged_file(tmp_path, h100_job):
    """``--against`` takes one or more inputs, before or after MERGED: argparse must not
    swallow the merged file into the inputs."""
    inputs, merged = h100_job
    out = write(tmp_path / "m.json.gz", merged, "gzip")
    a, b = map(str, inputs)
    orders = [
        ("verify", out, "--against", a, b, "--json"),
        ("verify", "--against", a, b, out, "--json"),
        ("verify", "--json", "--against", a, b, out),
        ("verify", "--against", a, b, "--json", out),
    ]
    reports = []
    for args in orders:
        p = run_cli(*args, cwd=REPO)
        assert p.returncode == 0, (args, p.stderr_text)
        reports.append(_report_json(p))
    assert all(r == reports[0] for r in reports)
    assert reports[0]["path"] == str(out) and reports[0]["against"] == [a, b]
    assert all(reports[0]["ranks"][r]["against"].startswith("ok") for r in ("0", "1"))
    # in-process entry point: same parser, same result
    assert main(["--against", a, b, str(out)]) == 0


def test_cli_errors_use_the_shared_format(tmp_path, h100_job, capsys):
    inputs, merged = h100_job
    missing = tmp_path / "nope.json"
    p = run_cli("verify", missing, cwd=REPO)
    assert p.returncode == 1
    assert p.stderr_text.strip().splitlines() == [f"tracefuse: error: {missing}: no such file"]
    p = run_cli("verify", "--against", str(inputs[0]), str(tmp_path / "gone.json.gz"), cwd=REPO)
    assert p.returncode == 1  # the last word is the merged file, and it does not exist
    assert p.stderr_text.strip().splitlines() == [
        f"tracefuse: error: {tmp_path / 'gone.json.gz'}: no such file"
    ]
    # an --against input that is missing is named the same way
    out = write(tmp_path / "m.json", merged)
    p = run_cli("verify", out, "--against", tmp_path / "missing.json.gz", cwd=REPO)
    assert p.returncode == 1
    err = p.stderr_text.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"tracefuse: error: {tmp_path / 'missing.json.gz'}: ")
    # no merged file at all: a usage error, one line, exit 2
    p = run_cli("verify", "--against", str(inputs[0]), cwd=REPO)
    assert p.returncode == 2
    err = p.stderr_text.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tracefuse: error: verify: the merged file is required")
    assert main(["--against", str(inputs[0])]) == 2
    assert "the merged file is required" in capsys.readouterr().err


def test_cli_exit_5_on_error_findings(tmp_path, h100_job):
    bad = write(
        tmp_path / "bad.json", edit(h100_job[1], lambda m: set_field(m, first(m, real(1)), pid="Spans"))
    )
    p = run_cli("verify", bad, cwd=REPO)
    assert p.returncode == 5
    assert b"FAILED" in p.stdout and b"string_pid" in p.stdout
    assert p.stderr_text == ""


# ----------------------------------------------------------------------------- fast and exact reads agree


def _exact_only(monkeypatch):
    """Every pass through the ijson reader, as before the fast path existed."""
    import tracefuse_stream.verify.against as against_mod

    def exact(path, consume, *, capture=True, prefix="traceEvents.item"):
        return passes.run_exact_pass(path, consume, capture=capture, prefix=prefix)

    monkeypatch.setattr(V, "run_pass", exact)
    monkeypatch.setattr(against_mod, "run_pass", exact)


def _comparable(rep) -> dict:
    d = rep.to_dict()
    d["totals"].pop("seconds")
    d["totals"].pop("mb_per_s")
    return d


def _broken_copies(tmp_path, h100_job):
    inputs, merged = h100_job
    data = dumps(merged)
    cut = data[: len(data) * 2 // 3]
    ctrl = bytearray(data)
    ctrl[data.index(b'"name":', len(data) // 2) + 8] = 0x01
    dropped = edit(merged, lambda m: m["traceEvents"].pop(first(m, real(1))))
    moved = edit(merged, lambda m: set_field(m, first(m, real(0)), ts=Decimal("1.000")))
    yield "ok", write(tmp_path / "ok.json.gz", merged, "gzip")
    yield "truncated", write(tmp_path / "t.json", cut)
    yield "control", write(tmp_path / "c.json", bytes(ctrl))
    yield "dropped", write(tmp_path / "d.json", dropped)
    yield "moved", write(tmp_path / "w.json.zst", moved, "zstd")


def test_fast_and_exact_reads_give_the_same_report(tmp_path, h100_job, monkeypatch):
    """The fast reader changes the speed of verify, not its findings: every report,
    on a valid file and on broken ones, equals the all-ijson one."""
    inputs = h100_job[0]
    fast = {name: _comparable(verify(p, against=inputs)) for name, p in _broken_copies(tmp_path, h100_job)}
    _exact_only(monkeypatch)
    exact = {name: _comparable(verify(p, against=inputs)) for name, p in _broken_copies(tmp_path, h100_job)}
    assert fast == exact
    assert fast["ok"]["ok"] and not fast["truncated"]["ok"] and not fast["control"]["ok"]
    assert {e["code"] for e in fast["dropped"]["errors"]} >= {"missing_event"}
    assert {e["code"] for e in fast["moved"]["errors"]} >= {"wrong_time"}
