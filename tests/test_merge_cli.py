"""End to end through ``python -m tracefuse_stream`` (subprocess): exit codes, one-line
errors, output codecs, determinism across --jobs, overwrite protection, temp-file
hygiene, ``info``; and the TraceLens-compatible ``TraceFuse`` API.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from decimal import Decimal
from pathlib import Path

import pytest

from tracefuse_stream import TraceFuse


def assert_one_line_error(p, *needles):
    err = p.stderr_text
    assert "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one error line, got: {err!r}"
    for n in needles:
        assert str(n) in lines[0], f"{n!r} not in {lines[0]!r}"
    return lines[0]


def listing(d: Path):
    return sorted(p.name for p in d.iterdir())


# ---------------------------------------------------------------- merge
def test_cli_merge_directory_exact(ddp4_job, tmp_path, h):
    out = tmp_path / "merged.json.gz"
    p = h.run_cli("merge", ddp4_job.dir, "-o", out, "--json-summary")
    assert p.returncode == 0, p.stderr_text
    assert "Traceback" not in p.stderr_text
    summary = json.loads(p.stdout)
    o = h.load_output(out, exact=True)
    h.check_merge(o, ddp4_job.by_rank)
    secs = h.split_by_rank(o)
    assert [r["rank"] for r in summary["ranks"]] == [0, 1, 2, 3]
    for r in summary["ranks"]:
        evs = h.cached_input(ddp4_job.by_rank[r["rank"]])["traceEvents"]
        assert r["events_in"] == len(evs)
        assert r["dropped"] == sum(e.get("cat") == "python_function" for e in evs)
        assert r["events_out"] == len(secs[r["rank"]])
        assert len(h.non_meta(secs[r["rank"]])) == len(h.kept_events(evs))
    assert summary["events_out"] == len(o["traceEvents"])
    assert listing(tmp_path) == ["merged.json.gz"]


def test_cli_quiet_prints_nothing_and_text_summary_lists_ranks(rec_ddp4, tmp_path, h):
    p = h.run_cli("merge", rec_ddp4.dir, "-o", tmp_path / "q.json", "-q")
    assert p.returncode == 0 and p.stdout == b"" and p.stderr_text == ""
    p = h.run_cli("merge", rec_ddp4.dir, "-o", tmp_path / "t.json")
    assert p.returncode == 0
    text = p.stdout.decode()
    for r, path in rec_ddp4.by_rank.items():
        n = len(h.cached_input(path)["traceEvents"])
        row = [ln for ln in text.splitlines() if ln.split()[:1] == [str(r)] and str(path) in ln]
        assert len(row) == 1 and f"{n:,}" in row[0].split()


@pytest.mark.parametrize(
    "flags, flt",
    [
        (["--include-pyfunc"], {"include_pyfunc": True}),
        (["--keep-cat", "cpu_op,user_annotation"], {"keep_cat": ["cpu_op", "user_annotation"]}),
        (["--drop-cat", "cpu_instant_event,fwdbwd"], {"drop_cat": ["cpu_instant_event", "fwdbwd"]}),
        (["--name", r"^aten::(add|mm|copy_)"], {"name_regex": r"^aten::(add|mm|copy_)"}),
        (["--include-pyfunc", "--name", "^torch/nn"], {"include_pyfunc": True, "name_regex": "^torch/nn"}),
    ],
)
def test_cli_filters(flags, flt, ddp4_job, tmp_path, h):
    out = tmp_path / "f.json"
    p = h.run_cli("merge", ddp4_job.dir, "--ranks", "1,2", "-o", out, "-q", *flags)
    assert p.returncode == 0, p.stderr_text
    o = h.load_output(out, exact=True)
    inputs = {r: ddp4_job.by_rank[r] for r in (1, 2)}
    h.check_merge(o, inputs, **flt)
    secs = h.split_by_rank(o)
    for r, path in inputs.items():
        want = len(h.kept_events(h.cached_input(path, exact=True)["traceEvents"], **flt))
        assert want > 0 and len(h.non_meta(secs[r])) == want


def test_cli_ranks_subset(ddp4_job, tmp_path, h):
    out = tmp_path / "s.json.zst"
    p = h.run_cli("merge", ddp4_job.dir, "--ranks", "0,2", "-o", out, "-q")
    assert p.returncode == 0, p.stderr_text
    o = h.load_output(out, exact=True)
    h.check_merge(o, {0: ddp4_job.by_rank[0], 2: ddp4_job.by_rank[2]})
    assert o["tracefuse"]["ranks_merged"] == [0, 2]


def test_cli_rank_from_order(ddp4_by_rank, real_dir, tmp_path, h):
    """distributedInfo says 3, none (-> position 1) and 1: a clash under auto;
    --rank-from order numbers the files 0, 1, 2."""
    files = [ddp4_by_rank[3], real_dir / "mi250_minitoy.json.gz", ddp4_by_rank[1]]
    out = tmp_path / "o.json.gz"
    p = h.run_cli("merge", *files, "-o", out)
    assert p.returncode == 2
    assert_one_line_error(p, files[1], files[2], "--rank-from order")
    p = h.run_cli("merge", *files, "--rank-from", "order", "-o", out, "-q")
    assert p.returncode == 0, p.stderr_text
    o = h.load_output(out, exact=True)
    h.check_merge(o, dict(enumerate(files)))
    assert [o["tracefuse"]["ranks"][str(r)]["rank_from"] for r in range(3)] == ["order"] * 3


def test_inputs_in_any_compression_whatever_their_name(rec_ddp4, tmp_path, h):
    """Compression is detected from the bytes: gzip named .json, plain named .json.gz,
    zstd (several frames) named .json.zst."""
    import zstandard

    d = tmp_path / "in"
    d.mkdir()
    f0 = d / "r0.json"
    f0.write_bytes(rec_ddp4.by_rank[0].read_bytes())  # gzip bytes, .json name
    f1 = d / "r1.json.gz"
    f1.write_bytes(gzip.decompress(rec_ddp4.by_rank[1].read_bytes()))  # plain bytes, .gz name
    text = gzip.decompress(rec_ddp4.by_rank[2].read_bytes())
    c = zstandard.ZstdCompressor()
    f2 = d / "r2.json.zst"
    f2.write_bytes(c.compress(text[:100_000]) + c.compress(text[100_000:]))  # two frames
    out = tmp_path / "o.json"
    p = h.run_cli("merge", d, "-o", out, "-q")
    assert p.returncode == 0, p.stderr_text
    o = h.load_output(out, exact=True)
    h.check_merge(o, {0: f0, 1: f1, 2: f2})
    assert {r: v["compression"] for r, v in o["tracefuse"]["ranks"].items()} == {
        "0": "gzip",
        "1": "plain",
        "2": "zstd",
    }


# ---------------------------------------------------------------- outputs
@pytest.fixture(scope="module")
def codec_outputs(ddp4_job, tmp_path_factory, h):
    d = tmp_path_factory.mktemp("codecs")
    runs = {}
    for name in ("m.json", "m.json.gz", "m.json.zst"):
        for jobs in (1, 2):
            sub = d / f"j{jobs}"
            sub.mkdir(exist_ok=True)
            p = h.run_cli("merge", ddp4_job.dir, "-o", sub / name, "-q", "--jobs", jobs)
            assert p.returncode == 0, p.stderr_text
            runs[(name, jobs)] = (sub / name).read_bytes()
    p = h.run_cli("merge", ddp4_job.dir, "-o", "-", "--jobs", 2)
    assert p.returncode == 0, p.stderr_text
    runs[("-", 2)] = p.stdout
    return d, runs, p


def test_codecs_give_identical_json(codec_outputs, ddp4_job, h):
    d, runs, _ = codec_outputs
    plain = runs[("m.json", 1)]
    gz = runs[("m.json.gz", 1)]
    zst = runs[("m.json.zst", 1)]
    assert gz[:2] == b"\x1f\x8b" and zst[:4] == b"\x28\xb5\x2f\xfd" and plain[:1] == b"{"
    ref = h.strict_loads(plain, exact=True)
    h.check_merge(ref, ddp4_job.by_rank)
    for key in [("m.json.gz", 1), ("m.json.zst", 1), ("-", 2)]:
        data = (
            h.gunzip_one_member(runs[key])
            if key[0].endswith(".gz")
            else (h.unzstd(runs[key]) if key[0].endswith(".zst") else runs[key])
        )
        assert h.strict_loads(data, exact=True) == ref, f"{key} differs from the plain .json output"
    for sub in ("j1", "j2"):
        assert listing(d / sub) == ["m.json", "m.json.gz", "m.json.zst"]  # no temp files


@pytest.mark.parametrize("name", ["m.json", "m.json.gz", "m.json.zst"])
def test_jobs_2_is_byte_identical_to_jobs_1(codec_outputs, name):
    _, runs, _ = codec_outputs
    assert runs[(name, 2)] == runs[(name, 1)]


def test_stdout_output_is_pure_json_and_summary_goes_to_stderr(codec_outputs, h):
    _, runs, p = codec_outputs
    assert runs[("-", 2)] == runs[("m.json", 1)]
    assert "merged 4 ranks: " in p.stderr_text


def _copy_inputs(ddp4_files, d: Path):
    d.mkdir()
    for f in ddp4_files:
        shutil.copy(f, d / f.name)
    return sorted(d.iterdir())


def test_refuses_to_overwrite_an_input(rec_ddp4, tmp_path, h):
    files = _copy_inputs(rec_ddp4.files, tmp_path / "in")
    before = {f: f.read_bytes() for f in files}
    mtimes = {f: f.stat().st_mtime_ns for f in files}
    target = files[1]
    for extra in ([], ["--force"]):
        p = h.run_cli("merge", tmp_path / "in", "-o", target, *extra)
        assert p.returncode == 3
        assert_one_line_error(p, target)
    assert {f: f.read_bytes() for f in files} == before
    assert {f: f.stat().st_mtime_ns for f in files} == mtimes
    assert listing(tmp_path / "in") == sorted(f.name for f in rec_ddp4.files)


def test_refuses_an_existing_output_without_force(rec_ddp4, tmp_path, h):
    out = tmp_path / "out.json.gz"
    out.write_bytes(b"keep me")
    p = h.run_cli("merge", rec_ddp4.dir, "-o", out)
    assert p.returncode == 3
    assert_one_line_error(p, out, "--force")
    assert out.read_bytes() == b"keep me"
    assert listing(tmp_path) == ["out.json.gz"]
    p = h.run_cli("merge", rec_ddp4.dir, "-o", out, "--force", "-q")
    assert p.returncode == 0, p.stderr_text
    h.check_merge(h.load_output(out, exact=True), rec_ddp4.by_rank)
    assert listing(tmp_path) == ["out.json.gz"]


@pytest.mark.parametrize("jobs", [1, 2])
def test_failure_leaves_no_output_and_no_temp_files(jobs, rec_ddp4, tmp_path, h):
    files = _copy_inputs(rec_ddp4.files, tmp_path / "in")
    bad = files[2]
    text = gzip.decompress(bad.read_bytes())
    bad.write_bytes(gzip.compress(text[: len(text) * 2 // 3]))  # killed job: truncated
    outdir = tmp_path / "out"
    outdir.mkdir()
    for name in ("m.json.gz", "m.json"):
        p = h.run_cli("merge", tmp_path / "in", "-o", outdir / name, "--jobs", jobs)
        assert p.returncode == 1, p.stderr_text
        assert_one_line_error(p, bad)
        assert listing(outdir) == [], "temp files or a partial output were left"
    # an existing output is untouched by a failed --force merge
    (outdir / "m.json").write_bytes(b"old")
    p = h.run_cli("merge", tmp_path / "in", "-o", outdir / "m.json", "--force", "--jobs", jobs)
    assert p.returncode == 1
    assert listing(outdir) == ["m.json"] and (outdir / "m.json").read_bytes() == b"old"
    assert listing(tmp_path) == ["in", "out"]


# ---------------------------------------------------------------- errors
def test_missing_file(rec_ddp4, tmp_path, h):
    missing = tmp_path / "nope" / "rank9.json.gz"
    p = h.run_cli("merge", rec_ddp4.files[0], missing, "-o", tmp_path / "o.json")
    assert p.returncode == 1
    assert_one_line_error(p, missing)
    assert listing(tmp_path) == []


def test_duplicate_ranks_suggest_rank_from_order(real_dir, tmp_path, h):
    a, b = real_dir / "mi300_resnet_rank0.json.gz", real_dir / "a100_nccl_rank0.json.gz"
    p = h.run_cli("merge", a, b, "-o", tmp_path / "o.json")
    assert p.returncode == 2
    assert_one_line_error(p, a, b, "--rank-from order")
    assert listing(tmp_path) == []


@pytest.mark.parametrize(
    "case, code",
    [("not_a_trace", 1), ("bad_regex", 2), ("missing_rank", 2), ("empty_dir", 1), ("no_out_dir", 3)],
)
def test_other_errors_are_one_line(case, code, rec_ddp4, tmp_path, h):
    out = tmp_path / "o.json"
    if case == "not_a_trace":
        f = tmp_path / "x.json"
        f.write_text('{"a": 1}')
        p = h.run_cli("merge", f, "-o", out)
        needle = f
    elif case == "bad_regex":
        p = h.run_cli("merge", rec_ddp4.dir, "--name", "(", "-o", out)
        needle = "("
    elif case == "missing_rank":
        p = h.run_cli("merge", rec_ddp4.dir, "--ranks", "0,9", "-o", out)
        needle = "9"
    elif case == "empty_dir":
        e = tmp_path / "empty"
        e.mkdir()
        p = h.run_cli("merge", e, "-o", out)
        needle = e
    else:
        out = tmp_path / "no" / "such" / "dir" / "o.json"
        p = h.run_cli("merge", rec_ddp4.dir, "-o", out)
        needle = out.parent
    assert p.returncode == code, p.stderr_text
    assert_one_line_error(p, needle)
    assert not out.exists()


# ---------------------------------------------------------------- info
def _expected_info(path, h):
    t = h.cached_input(path, exact=True)
    evs = h.events_of(t)
    base = t.get("baseTimeNanoseconds") if isinstance(t, dict) else None
    starts, ends = [], []
    for e in evs:
        if e.get("ph") == "M" or not isinstance(e.get("ts"), (int, Decimal)):
            continue
        s = h.abs_ns(base, e["ts"])
        starts.append(s)
        d = e.get("dur")
        ends.append(s + (h.abs_ns(0, d) if isinstance(d, (int, Decimal)) and d > 0 else 0))
    return {"events": len(evs), "base_time_ns": base, "first_ns": min(starts), "last_ns": max(ends)}


def test_info_text_rows(ddp4_job, h):
    p = h.run_cli("info", ddp4_job.dir)
    assert p.returncode == 0, p.stderr_text
    lines = p.stdout.decode().splitlines()
    for r, path in ddp4_job.by_rank.items():
        n = len(h.cached_input(path)["traceEvents"])
        rows = [ln for ln in lines if ln.split()[:1] == [str(r)]]
        assert len(rows) == 1, lines
        assert f" {n:,} " in rows[0] and rows[0].rstrip().endswith(str(path))
        assert "distributedInfo" in rows[0]


def test_info_json(ddp4_job, h):
    p = h.run_cli("info", ddp4_job.dir, "--json")
    assert p.returncode == 0, p.stderr_text
    rows = json.loads(p.stdout)["ranks"]
    assert [r["rank"] for r in rows] == [0, 1, 2, 3]
    for row in rows:
        path = ddp4_job.by_rank[row["rank"]]
        assert row["path"] == str(path)
        exp = _expected_info(path, h)
        got = {k: row[k] for k in exp}
        assert got == exp
        t = h.cached_input(path)
        assert row["world_size"] == t["distributedInfo"]["world_size"] == 4
        assert row["host_name"] == t["host_name"]
    p = h.run_cli("info", ddp4_job.dir, "--json", "--ranks", "0,2")
    assert [r["rank"] for r in json.loads(p.stdout)["ranks"]] == [0, 2]


def test_info_json_old_and_new_traces(real_dir, h):
    files = [real_dir / "a100_no_distinfo_epoch_ts.json.gz", real_dir / "h100_bert_small.json.gz"]
    p = h.run_cli("info", *files, "--json", "--rank-from", "order")
    assert p.returncode == 0, p.stderr_text
    rows = json.loads(p.stdout)["ranks"]
    for r, path in enumerate(files):
        exp = _expected_info(path, h)
        assert {k: rows[r][k] for k in exp} == exp
        assert rows[r]["rank"] == r and rows[r]["rank_from"] == "order"


# ---------------------------------------------------------------- the suite itself
@pytest.mark.parametrize("ci", [False, True])
def test_missing_shared_fixtures_skip_with_a_reason_and_fail_in_ci(ci, tmp_path, h):
    """Without ../shared/fixtures a test that needs them SKIPS with the reason (a fresh
    clone passes); with CI set it FAILS loudly (CI must run them)."""
    import subprocess
    import sys

    env = dict(os.environ, TRACEFUSE_SHARED_FIXTURES=str(tmp_path / "no-such-dir"))
    env.pop("CI", None)
    if ci:
        env["CI"] = "1"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "tests/test_merge_real.py::test_dict_inputs_keys_are_ranks",
        ],
        cwd=str(h.REPO),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "needs the real GPU traces in ../shared/fixtures (set TRACEFUSE_SHARED_FIXTURES)" in p.stdout, (
        p.stdout
    )
    assert str(tmp_path / "no-such-dir") in p.stdout
    if ci:
        assert p.returncode == 1, p.stdout[-2000:]
        assert "required when CI is set" in p.stdout
        assert ("1 error" in p.stdout or "1 failed" in p.stdout) and "skipped" not in p.stdout
    else:
        assert p.returncode == 0, p.stdout[-2000:]
        assert "1 skipped" in p.stdout and "failed" not in p.stdout and "error" not in p.stdout


# ---------------------------------------------------------------- TraceFuse API
def test_tracefuse_list_positions_are_ranks(ddp4_job, tmp_path, monkeypatch, h):
    files = [ddp4_job.by_rank[r] for r in (3, 2, 1, 0)]  # position != distributedInfo.rank
    monkeypatch.chdir(tmp_path)
    tf = TraceFuse(files)
    got = tf.merge_and_save("x.json")
    assert got == "x.json.gz"
    assert (tmp_path / "x.json.gz").is_file() and not (tmp_path / "x.json").exists()
    o = h.load_output(tmp_path / "x.json.gz", exact=True)  # also: ONE gzip member
    h.check_merge(o, dict(enumerate(files)), drop_cat=["Trace"])  # TraceLens' default drops the span
    assert o["tracefuse"]["ranks"]["0"]["header"]["distributedInfo"]["rank"] == 3
    assert listing(tmp_path) == ["x.json.gz"]


def test_tracefuse_dict_keys_and_gz_name_kept(ddp4_by_rank, real_dir, tmp_path, h):
    inputs = {5: real_dir / "h100_bert_small.json.gz", 1: ddp4_by_rank[2]}
    out = str(tmp_path / "y.json.gz")
    got = TraceFuse(inputs).merge_and_save(out)
    assert got == out
    o = h.load_output(out, exact=True)
    h.check_merge(o, inputs, drop_cat=["Trace"])  # TraceLens' default drops the span
    assert sorted(h.split_by_rank(o)) == [1, 5]
    assert listing(tmp_path) == ["y.json.gz"]


def test_tracefuse_multiprocessing_same_bytes_and_filters(ddp4_job, tmp_path, h):
    a = TraceFuse(ddp4_job.files).merge_and_save(str(tmp_path / "a.json"))
    b = TraceFuse(ddp4_job.files, use_multiprocessing=True, max_workers=2).merge_and_save(
        str(tmp_path / "b.json")
    )
    assert Path(a).read_bytes() == Path(b).read_bytes()
    # TraceLens overwrites: so does the drop-in (force by default)
    again = TraceFuse(ddp4_job.files, use_multiprocessing=True).merge_and_save(
        str(tmp_path / "b.json"),
        include_pyfunc=True,
        filter_fn=lambda e: e.get("name", "").startswith("aten::"),
    )
    assert again == str(tmp_path / "b.json.gz")
    o = h.load_output(again, exact=True)
    flt = {"include_pyfunc": True, "fn": lambda e: e.get("name", "").startswith("aten::")}
    h.check_merge(o, dict(enumerate(ddp4_job.files)), **flt)
    assert len(h.non_meta(o["traceEvents"])) == sum(
        len(h.kept_events(h.cached_input(f, exact=True)["traceEvents"], **flt)) for f in ddp4_job.files
    )
