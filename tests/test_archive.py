"""``-o NAME.perfetto.tar`` / ``.perfetto.tar.gz``: a Perfetto v58 archive of the merge.

On the recorded gloo jobs (ddp4, and ddp4_samepid where every rank's CPU process is
OS pid 1): the archive's layout (manifest first, one plain-JSON member per rank, each
a complete trace equal to the JSON merge's section of that rank), and Perfetto's
view of it (judged by the importer model of tests/importer_model.py on the members and
manifest, always, and by trace_processor where installed): one machine per rank, no flow between machines, per-rank slices equal to
the rank loaded alone, per-rank first slices where the JSON merge puts them (clock
offsets included), no import error beyond the inputs' own. Plus naming
(--split-ranks, --cycle all), atomicity, -j identity, dry runs and --verify.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any, Dict, List

import pytest
from conftest import load_output, recorded, run_cli, strict_loads
from importer_model import model_import
from perfetto import JUDGES, judge_view, run_query, summed_error_stats, trace_processor

from tracefuse_stream import merge
from tracefuse_stream.errors import InputError, UsageError
from tracefuse_stream.verify.archive import verify_archive
from tracefuse_stream.write.codecs import codec_for

ARCHIVE_SQL = """
with sp as (
  select s.id as sid, s.ts as ts, s.dur as dur, p.upid as upid, p.machine_id as mid,
         coalesce(s.category, '') as cat
  from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
  join process p using (upid)
)
select 'machine' as kind, m.id as a, coalesce(m.name, '') as b, '' as c, 0 as value from machine m
union all
select 'procs', coalesce(mid, ''), '', '', count(distinct upid) from sp group by mid
union all
select 'slices', coalesce(mid, ''), '', '', count(*) from sp where cat != 'python_function' group by mid
union all
select 'dur', coalesce(mid, ''), '', '', sum(dur) from sp where cat != 'python_function' group by mid
union all
select 'first_ts', coalesce(mid, ''), '', '', min(ts) from sp group by mid
union all
select 'cross_flows', '', '', '', count(*)
  from flow f join sp o on f.slice_out = o.sid join sp i on f.slice_in = i.sid where o.mid != i.mid
union all
select 'flows', '', '', '', count(*) from flow
union all
select 'stat', name, coalesce(idx, ''), severity, value from stats
  where severity in ('error', 'data_loss') and value > 0;
"""

ALONE_SQL = """
select count(*) as n, coalesce(sum(s.dur), 0) as dur from slice s join thread_track tt on s.track_id = tt.id
  where coalesce(s.category, '') != 'python_function';
"""


def _members(path: Path) -> List[tarfile.TarInfo]:
    with tarfile.open(path, "r:*") as tar:
        return tar.getmembers()


def _read_members(path: Path) -> Dict[str, bytes]:
    out: Dict[str, bytes] = {}
    with tarfile.open(path, "r:*") as tar:
        for info in tar:
            f = tar.extractfile(info)
            assert f is not None, f"{info.name} is not a regular member"
            out[info.name] = f.read()
    return out


def _archive_view(path: Path) -> Dict[str, Any]:
    """machine name -> facts, plus the whole trace's flows and error stats."""
    rows = run_query(path, ARCHIVE_SQL)
    names = {r["a"]: r["b"] for r in rows if r["kind"] == "machine"}
    per: Dict[str, Dict[str, int]] = {}
    facts: Dict[str, Any] = {"stats": {}}
    for r in rows:
        kind = r["kind"]
        if kind in ("procs", "slices", "dur", "first_ts"):
            per.setdefault(names.get(r["a"], "[host]"), {})[kind] = int(r["value"])
        elif kind in ("cross_flows", "flows"):
            facts[kind] = int(r["value"])
        elif kind == "stat":
            facts["stats"][f"{r['a']}[{r['b']}]" if r["b"] else r["a"]] = int(r["value"])
    facts["machines"] = sorted(n for n in names.values() if n)
    facts["per"] = per
    return facts


def _archive_model(path: Path) -> Dict[str, Any]:
    """The facts of :func:`_archive_view`, from the importer model: each member listed
    in the manifest is one file on its own machine (Perfetto tracks flows and slices per
    file, so no flow can join two members), JSON members placed at zero offset."""
    data = _read_members(path)
    files = strict_loads(data["perfetto_manifest.json"])["perfetto_manifest"]["files"]
    per: Dict[str, Dict[str, int]] = {}
    facts: Dict[str, Any] = {"stats": {}, "flows": 0, "cross_flows": 0}
    for f in files:
        member = strict_loads(data[f["path"]], exact=True)
        m = model_import(Path(f["path"]), member)
        kept = [s for s in m.slices if s.event.get("cat") != "python_function"]
        per[f["machine"]["name"]] = {
            "procs": len({s.upid for s in m.slices}),
            "slices": len(kept),
            "dur": sum(s.end - s.start for s in kept),
            "first_ts": min(s.start for s in m.slices),
        }
        facts["flows"] += len(m.flows)
        for k, v in m.view.error_stats.items():
            facts["stats"][k] = facts["stats"].get(k, 0) + v
    facts["machines"] = sorted(per)
    facts["per"] = per
    return facts


def _alone_model(path: Path) -> Dict[str, int]:
    kept = [s for s in model_import(path).slices if s.event.get("cat") != "python_function"]
    return {"n": len(kept), "dur": sum(s.end - s.start for s in kept)}


def _judge_archive(judge: str, path: Path) -> Dict[str, Any]:
    return _archive_view(path) if judge == "trace_processor" else _archive_model(path)


def _judge_alone(judge: str, path: Path) -> Dict[str, int]:
    if judge == "trace_processor":
        return {k: int(v) for k, v in run_query(path, ALONE_SQL)[0].items()}
    return _alone_model(path)


@pytest.fixture(params=JUDGES)
def judge(request: Any) -> str:
    if request.param == "trace_processor":
        trace_processor()
    return str(request.param)


def _merge_quiet(inputs: Any, out: Path, **kw: Any) -> Any:
    kw.setdefault("progress", False)
    kw.setdefault("force", True)
    return merge(inputs, str(out), **kw)


# --------------------------------------------------------------------------- names
@pytest.mark.parametrize(
    "name, codec",
    [("a.perfetto.tar", "perfetto-tar"), ("A.PERFETTO.TAR.GZ", "perfetto-tar-gz"), ("a.json", "plain")],
)
def test_codec_for_archive_names(name, codec):
    assert codec_for(name) == codec


@pytest.mark.parametrize("name", ["a.tar", "a.tar.gz", "a.perfetto.tar.zst", ".perfetto.tar"])
def test_other_tar_names_are_usage_errors(name):
    with pytest.raises(UsageError, match="perfetto.tar"):
        codec_for(name)


# --------------------------------------------------------------------------- layout
@pytest.mark.parametrize("ext", [".perfetto.tar", ".perfetto.tar.gz"])
def test_layout_members_equal_the_json_merge(tmp_path, ext):
    src = recorded("ddp4_samepid")
    json_out = tmp_path / "m.json"
    arc = tmp_path / f"m{ext}"
    s_json = _merge_quiet([src], json_out, verify=False)
    s_arc = _merge_quiet([src], arc, verify=False)
    merged = load_output(json_out)
    infos = _members(arc)
    names = [i.name for i in infos]
    assert names == ["perfetto_manifest.json"] + [f"m.rank{r}.json" for r in range(4)]
    assert all(i.isreg() and i.mode == 0o644 for i in infos)
    data = _read_members(arc)
    manifest = strict_loads(data["perfetto_manifest.json"])
    assert data["perfetto_manifest.json"].startswith(b'{"perfetto_manifest"')  # how Perfetto detects it
    files = manifest["perfetto_manifest"]["files"]
    assert manifest["perfetto_manifest"]["version"] == 1
    assert [f["path"] for f in files] == names[1:]
    assert [f["machine"]["name"] for f in files] == [f"rank {r} (vm)" for r in range(4)]
    assert "clocks" not in files[0]
    assert [f["clocks"] for f in files[1:]] == [{"sync_to": {"file": "m.rank0.json"}, "offset_ns": 0}] * 3
    events: List[Any] = []
    for r in range(4):
        member = strict_loads(data[f"m.rank{r}.json"])
        assert member["baseTimeNanoseconds"] == merged["baseTimeNanoseconds"]
        tf = member["tracefuse"]
        assert tf["ranks_merged"] == [r] and list(tf["ranks"]) == [str(r)]
        assert tf["ranks"][str(r)] == merged["tracefuse"]["ranks"][str(r)]
        assert tf["archive"]["member"] == f"m.rank{r}.json" and tf["archive"]["machine"] == f"rank {r} (vm)"
        assert {e["args"]["rank"] for e in member["traceEvents"]} == {r}
        events.extend(member["traceEvents"])
    assert events == merged["traceEvents"]  # the same rewrites and filters, in the same order
    assert s_arc.events_out == s_json.events_out
    assert s_arc.json_bytes == sum(i.size for i in infos[1:])
    assert s_arc.bytes_out == arc.stat().st_size
    if ext.endswith(".gz"):
        raw = arc.read_bytes()
        assert raw[:2] == b"\x1f\x8b" and raw.count(b"\x1f\x8b\x08") >= 1
        assert len(strict_gunzip_members(raw)) == 1


def strict_gunzip_members(raw: bytes) -> List[bytes]:
    """The gzip members of ``raw`` (Perfetto reads one): decompressed, in order."""
    import zlib

    out, rest = [], raw
    while rest:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out.append(d.decompress(rest))
        assert d.eof, "truncated gzip member"
        rest = d.unused_data
    return out


def test_jobs_do_not_change_the_bytes(tmp_path):
    src = recorded("ddp4")
    a, b = tmp_path / "a" / "m.perfetto.tar.gz", tmp_path / "b" / "m.perfetto.tar.gz"
    a.parent.mkdir()
    b.parent.mkdir()
    _merge_quiet([src], a, jobs=1, verify=False)
    _merge_quiet([src], b, jobs=2, verify=False)
    assert a.read_bytes() == b.read_bytes()


# --------------------------------------------------------------------------- trace_processor
@pytest.mark.parametrize("job", ["ddp4", "ddp4_samepid"])
def test_perfetto_one_machine_per_rank(tmp_path, job, judge):
    src = recorded(job)
    files = sorted(src.glob("*.json.gz"))
    json_out, arc = tmp_path / "m.json", tmp_path / "m.perfetto.tar"
    s = _merge_quiet([src], json_out, verify=False)
    _merge_quiet([src], arc, verify=False)
    facts = _judge_archive(judge, arc)
    merged = judge_view(judge, json_out)
    assert facts["machines"] == [f"rank {r} (vm)" for r in range(4)]
    per = facts["per"]
    assert sorted(per) == facts["machines"]  # every slice is on a rank's machine
    # per rank as many CPU processes as in the JSON merge: samepid ranks stay 4 processes
    merged_procs: Dict[int, set] = {}
    for upid in merged.slices_by_upid:
        merged_procs.setdefault(merged.rank_of(upid), set()).add(upid)
    assert {int(m.split()[1]): v["procs"] for m, v in per.items()} == {
        r: len(u) for r, u in merged_procs.items()
    }
    assert sum(v["procs"] for v in per.values()) >= 4
    assert facts["cross_flows"] == 0
    assert facts["flows"] == merged.all_flows > 0
    first_json = merged.first_ts_by_rank()
    path_of = {r.rank: r.path for r in s.ranks}
    alone_views = []
    for r in range(4):
        m = per[f"rank {r} (vm)"]
        alone = _judge_alone(judge, Path(path_of[r]))
        assert (m["slices"], m["dur"]) == (alone["n"], alone["dur"]), f"rank {r}"
        assert abs(m["first_ts"] - first_json[r]) <= 1000, f"rank {r}"
        alone_views.append(judge_view(judge, Path(path_of[r])))
    allowed = summed_error_stats(alone_views)
    for k, v in facts["stats"].items():
        assert v <= allowed.get(k, 0), f"archive import error {k}={v} beyond the inputs' {allowed.get(k, 0)}"
    assert len(files) == 4


def test_clock_offsets_land_as_in_the_json_merge(tmp_path, judge):
    """Shifted ranks (--clock-offsets: rank 1 +1.5 ms, rank 2 -0.7 ms) land where the
    JSON merge puts them; the wall clock of a member's first slice is its input's
    first slice plus the rank's shift."""
    src = recorded("ddp4")
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"1": 1500, "2": -700}))
    json_out, arc = tmp_path / "m.json", tmp_path / "m.perfetto.tar.gz"
    s = _merge_quiet([src], json_out, clock_offsets=str(offsets), verify=False)
    _merge_quiet([src], arc, clock_offsets=str(offsets), verify=False)
    shifts = {r.rank: r.shift_ns for r in s.ranks}
    assert len(set(shifts.values())) > 1
    first_json = judge_view(judge, json_out).first_ts_by_rank()
    per = _judge_archive(judge, arc)["per"]
    base = load_output(json_out)["baseTimeNanoseconds"]
    for r in s.ranks:
        got = per[f"rank {r.rank} (vm)"]["first_ts"]
        assert abs(got - first_json[r.rank]) <= 1000
        alone = judge_view(judge, Path(r.path))
        own_base = load_output(r.path)["baseTimeNanoseconds"]
        wall_alone = own_base + alone.first_ts() + (r.shift_ns - (own_base - base))
        assert abs(base + got - wall_alone) <= 1000, f"rank {r.rank}"


# --------------------------------------------------------------------------- outputs
def test_split_ranks_one_archive_per_group(tmp_path, judge):
    arc = tmp_path / "m.perfetto.tar"
    s = _merge_quiet([recorded("ddp4")], arc, split_ranks=2, verify=False)
    want = [tmp_path / "m.ranks0-1.perfetto.tar", tmp_path / "m.ranks2-3.perfetto.tar"]
    assert s.outputs == [str(p) for p in want]
    assert sorted(tmp_path.iterdir()) == want
    for p, ranks in zip(want, ([0, 1], [2, 3])):
        stem = p.name[: -len(".perfetto.tar")]
        assert [i.name for i in _members(p)][1:] == [f"{stem}.rank{r}.json" for r in ranks]
        assert _judge_archive(judge, p)["machines"] == [f"rank {r} (vm)" for r in ranks]


def test_cycle_all_one_archive_per_cycle(tmp_path):
    arc = tmp_path / "m.perfetto.tar"
    s = _merge_quiet([recorded("ddp2_cycles")], arc, cycle="all", verify=False)
    assert len(s.outputs) >= 2
    assert s.outputs == [str(tmp_path / f"m.cycle{i}.perfetto.tar") for i in range(1, len(s.outputs) + 1)]
    for p in s.outputs:
        names = [i.name for i in _members(Path(p))]
        assert names[0] == "perfetto_manifest.json" and len(names) == 3


def test_dry_run_writes_nothing_and_sizes_the_members(tmp_path):
    arc = tmp_path / "m.perfetto.tar"
    dry = _merge_quiet([recorded("ddp4")], arc, dry_run=True)
    assert list(tmp_path.iterdir()) == []
    real = _merge_quiet([recorded("ddp4")], arc, verify=False)
    assert dry.json_bytes == real.json_bytes
    assert dry.bytes_out == real.bytes_out == arc.stat().st_size


def test_failure_leaves_nothing(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for f in sorted(recorded("ddp4").glob("*.json.gz"))[:3]:
        (src / f.name).write_bytes(f.read_bytes())
    (src / "rank3.json").write_bytes(b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "pid": 1, "tid": 1}, ')
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(InputError, match="rank3.json"):
        _merge_quiet([src], out / "m.perfetto.tar", verify=False)
    assert list(out.iterdir()) == []


def test_existing_archive_needs_force(tmp_path):
    arc = tmp_path / "m.perfetto.tar"
    arc.write_bytes(b"keep")
    p = run_cli("merge", recorded("ddp4"), "-o", arc, "-q")
    assert p.returncode == 3 and "--force" in p.stderr_text
    assert arc.read_bytes() == b"keep"


# --------------------------------------------------------------------------- verify
def test_verify_checks_every_member_against_its_input(tmp_path):
    arc = tmp_path / "m.perfetto.tar.gz"
    s = _merge_quiet([recorded("ddp4_samepid")], arc, verify=True)
    assert [r.path for r in s.verify_reports] == [f"{arc}/m.rank{r}.json" for r in range(4)]
    assert all(r.ok and r.against for r in s.verify_reports)


def test_verify_finds_a_manifest_that_disagrees(tmp_path):
    arc = tmp_path / "m.perfetto.tar"
    s = _merge_quiet([recorded("ddp4")], arc, verify=False)
    plans = [type("P", (), {"rank": r.rank, "path": r.path})() for r in s.ranks]
    data = _read_members(arc)
    doc = json.loads(data["perfetto_manifest.json"])
    doc["perfetto_manifest"]["files"][2]["machine"]["name"] = "rank 1 (vm)"  # two ranks, one machine
    data["perfetto_manifest.json"] = json.dumps(doc).encode()
    bad = tmp_path / "bad" / "m.perfetto.tar"
    bad.parent.mkdir()
    with tarfile.open(bad, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, blob in data.items():
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    reports = verify_archive(str(bad), plans)
    assert not reports[0].ok and "one per rank" in reports[0].errors[0].message
    assert all(r.ok for r in reports[1:]) and len(reports) == 5
    assert all(r.ok for r in verify_archive(str(arc), plans))


def test_cli_merge_under_verify_env(tmp_path):
    arc = tmp_path / "m.perfetto.tar"
    p = run_cli("merge", recorded("ddp4"), "-o", arc, "-q", env={"TRACEFUSE_VERIFY": "1"})
    assert p.returncode == 0, p.stderr_text
    assert [i.name for i in _members(arc)][0] == "perfetto_manifest.json"


def test_verify_command_checks_an_archive_member_by_member(tmp_path, h):
    """`tracefuse verify ARCHIVE --against INPUTS`: every member against the input its
    header names; inputs of another run are an error, not a silent pass."""
    rec = Path(__file__).resolve().parent / "data" / "recorded"
    for ext in (".perfetto.tar", ".perfetto.tar.gz"):
        out = tmp_path / f"m{ext}"
        merge([str(rec / "ddp4")], str(out))
        ok = h.run_cli("verify", str(out), "--against", str(rec / "ddp4"))
        assert ok.returncode == 0, ok.stderr_text + ok.stdout.decode()
        assert b"OK: no error-level findings" in ok.stdout
        wrong = h.run_cli("verify", str(out), "--against", str(rec / "ddp4_samepid"))
        assert wrong.returncode == 5
        assert b"against_unmatched" in wrong.stdout
