"""Issue 7: keeping big merges viewable — step windows, rank strides, dry runs, split outputs.

Expected numbers are computed here from the real inputs with ``json`` and Decimal,
independently of the engine.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from conftest import abs_ns, kept, load_input, load_output, non_meta, run_cli, to_ns

from tracefuse_stream import merge
from tracefuse_stream.errors import UsageError
from tracefuse_stream.rankset import parse_rank_spec


@pytest.fixture(scope="module")
def ddp4(shared_fixtures: Path) -> Dict[int, dict]:
    """rank -> parsed input (exact numbers) of the real 4-rank gloo job."""
    out = {}
    for f in sorted((shared_fixtures / "ddp4_transformer_tb").glob("*.json.gz")):
        t = load_input(f, exact=True)
        out[t["distributedInfo"]["rank"]] = {"trace": t, "path": f}
    assert sorted(out) == [0, 1, 2, 3]
    return out


def _step_window(trace: dict, first: int, last: int) -> Tuple[int, int]:
    """Absolute ns from the start of ProfilerStep#first to the end of #last (all
    X events of that name, CPU and GPU annotation alike)."""
    base = trace["baseTimeNanoseconds"]
    starts, ends = {}, {}
    for e in trace["traceEvents"]:
        m = re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name", "")))
        if e.get("ph") == "X" and m:
            n = int(m.group(1))
            s = abs_ns(base, e["ts"])
            en = s + int(to_ns(e.get("dur", 0)))
            starts[n] = min(starts.get(n, s), s)
            ends[n] = max(ends.get(n, en), en)
    return starts[first], ends[last]


def _in_window(e: dict, base: int, lo: int, hi: int) -> bool:
    if "ts" not in e:
        return False
    s = abs_ns(base, e["ts"])
    d = int(to_ns(e["dur"])) if e.get("ph") == "X" and "dur" in e else 0
    if e.get("cat") == "Trace" and e.get("pid") == "Spans" and e.get("ph") == "X":
        # Kineto's profiler span ("PyTorch Profiler (0)") covers the whole recording:
        # a window keeps it only when it lies inside (issue 23, select/spans.py)
        assert str(e.get("name")).startswith("PyTorch Profiler")
        return lo <= s and s + max(d, 0) <= hi
    return s <= hi and s + max(d, 0) >= lo


def _per_rank_non_meta(out: dict) -> Dict[int, List[dict]]:
    per: Dict[int, List[dict]] = {}
    for e in non_meta(out["traceEvents"]):
        per.setdefault(e["args"]["rank"], []).append(e)
    return per


@pytest.mark.parametrize("first,last,ref", [(3, 3, 0), (2, 4, 0), (3, 4, 2)])
def test_step_window_keeps_exactly_the_intersecting_events(ddp4, tmp_path, first, last, ref):
    lo, hi = _step_window(ddp4[ref]["trace"], first, last)
    out_path = tmp_path / "w.json"
    s = merge([str(v["path"]) for v in ddp4.values()], str(out_path), steps=(first, last), step_rank=ref)
    assert s.window_ns == (lo, hi)
    out = load_output(out_path, exact=True)
    per = _per_rank_non_meta(out)
    for r, v in ddp4.items():
        t = v["trace"]
        want = [
            e
            for e in non_meta(t["traceEvents"])
            if kept(e) and _in_window(e, t["baseTimeNanoseconds"], lo, hi)
        ]
        got = per.get(r, [])
        assert len(got) == len(want), f"rank {r}"
        # same events, same absolute times
        B = out["baseTimeNanoseconds"]
        assert sorted(abs_ns(B, e["ts"]) for e in got) == sorted(
            abs_ns(t["baseTimeNanoseconds"], e["ts"]) for e in want
        )
    # metadata only for processes that kept events
    named = {e["pid"] for e in out["traceEvents"] if e.get("name") == "process_name"}
    assert named == {e["pid"] for e in non_meta(out["traceEvents"])}


def test_missing_step_lists_present_steps(ddp4, tmp_path):
    with pytest.raises(UsageError, match=r"steps present: 2-4"):
        merge([str(v["path"]) for v in ddp4.values()], str(tmp_path / "x.json"), steps=(7, 8))
    assert not (tmp_path / "x.json").exists()
    r = run_cli(
        "merge", *[str(v["path"]) for v in ddp4.values()], "-o", str(tmp_path / "y.json"), "--steps", "1:9"
    )
    assert r.returncode == 2
    assert b"steps present: 2-4" in r.stderr and b"Traceback" not in r.stderr
    assert not (tmp_path / "y.json").exists()


def test_window_ms_relative_to_first_event(ddp4, tmp_path):
    first = min(
        abs_ns(v["trace"]["baseTimeNanoseconds"], e["ts"])
        for v in ddp4.values()
        for e in non_meta(v["trace"]["traceEvents"])
        if "ts" in e
    )
    lo, hi = first + 20_000_000, first + 60_000_000
    out_path = tmp_path / "w.json.gz"
    s = merge([str(v["path"]) for v in ddp4.values()], str(out_path), window_ms=(20, 60))
    assert s.window_ns == (lo, hi)
    per = _per_rank_non_meta(load_output(out_path, exact=True))
    for r, v in ddp4.items():
        t = v["trace"]
        want = sum(
            1
            for e in non_meta(t["traceEvents"])
            if kept(e) and _in_window(e, t["baseTimeNanoseconds"], lo, hi)
        )
        assert len(per.get(r, [])) == want


def test_rank_stride_spec():
    assert parse_rank_spec("0,8,16-23,32-63:8") == [0, 8, 16, 17, 18, 19, 20, 21, 22, 23, 32, 40, 48, 56]


def test_ranks_subset_on_real_job(ddp4, tmp_path):
    out_path = tmp_path / "sub.json"
    r = run_cli(
        "merge", *[str(v["path"]) for v in ddp4.values()], "-o", str(out_path), "--ranks", "1-3:2", "-q"
    )
    assert r.returncode == 0, r.stderr
    out = load_output(out_path)
    assert sorted({e["args"]["rank"] for e in out["traceEvents"]}) == [1, 3]
    assert out["tracefuse"]["ranks_merged"] == [1, 3]


@pytest.mark.parametrize("opts", [{}, {"steps": (3, 4)}, {"keep_cat": ["cpu_op"], "include_pyfunc": True}])
def test_dry_run_counts_equal_real_merge(ddp4, tmp_path, opts):
    paths = [str(v["path"]) for v in ddp4.values()]
    real = merge(paths, str(tmp_path / "real.json.gz"), **opts)
    dry = merge(paths, str(tmp_path / "dry.json.gz"), dry_run=True, **opts)
    assert not (tmp_path / "dry.json.gz").exists()
    assert [(r.rank, r.events_in, r.events_out, r.dropped) for r in dry.ranks] == [
        (r.rank, r.events_in, r.events_out, r.dropped) for r in real.ranks
    ]
    assert dry.json_bytes == real.json_bytes
    assert dry.bytes_out == real.bytes_out == (tmp_path / "real.json.gz").stat().st_size
    assert list(tmp_path.iterdir()) == [tmp_path / "real.json.gz"]


@pytest.mark.parametrize("k,codec", [(1, ".json"), (3, ".json.gz"), (2, ".json.zst")])
def test_split_outputs_equal_unsplit(ddp4, tmp_path, k, codec):
    paths = [str(v["path"]) for v in ddp4.values()]
    whole = load_output(merge(paths, str(tmp_path / f"all{codec}")).outputs[0], exact=True)
    s = merge(paths, str(tmp_path / f"part{codec}"), split_ranks=k)
    groups = [list(range(i, min(i + k, 4))) for i in range(0, 4, k)]
    expected_names = [
        tmp_path / (f"part.ranks{g[0]}{codec}" if len(g) == 1 else f"part.ranks{g[0]}-{g[-1]}{codec}")
        for g in groups
    ]
    assert [Path(p) for p in s.outputs] == expected_names
    events: List[dict] = []
    for name, g in zip(expected_names, groups):
        part = load_output(name, exact=True)
        assert part["baseTimeNanoseconds"] == whole["baseTimeNanoseconds"]
        assert sorted(int(r) for r in part["tracefuse"]["ranks"]) == g
        assert {e["args"]["rank"] for e in part["traceEvents"]} == set(g)
        events.extend(part["traceEvents"])
    assert events == whole["traceEvents"]


def test_size_warning_mentions_remedies(monkeypatch, ddp4, tmp_path):
    import importlib

    m = importlib.import_module("tracefuse_stream.pipeline.summary")
    monkeypatch.setattr(m, "SIZE_WARN_BYTES", 1000)
    s = merge([str(v["path"]) for v in ddp4.values()], str(tmp_path / "x.json.gz"))
    text = " ".join(s.warnings)
    for hint in ("python_function", "--steps", "--ranks", "trace_processor"):
        assert hint in text
