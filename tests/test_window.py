"""Step windows on a reference rank, exact us -> ns conversion, --window conversion."""

from __future__ import annotations

import gzip
import json
import math
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import require_shared
from hypothesis import given, settings
from hypothesis import strategies as st

from tracefuse_stream.errors import ErrorKind, InputError, UsageError
from tracefuse_stream.select.window import (
    FLOAT_FAST_LIMIT,
    find_step_window,
    list_steps,
    us_to_ns,
    window_from_ms,
)

# the profiled steps of each real 4-rank job (schedule wait 1, warmup 1, active 2 / 3;
# tests/data/recorded/README.md and ../shared/fixtures/README.md)
STEPS = {"recorded": [2, 3], "shared": [2, 3, 4]}


def _load_exact(path: Path):
    """Independent reference: the whole file with json + Decimal (exact numbers)."""
    with gzip.open(path, "rb") as f:
        return json.load(f, parse_float=Decimal)


def _reference_steps(doc):
    """{step: (start_ns, end_ns)} relative ns, union of all X ProfilerStep#N events."""
    out = {}
    for e in doc["traceEvents"]:
        name = e.get("name")
        if e.get("ph") == "X" and isinstance(name, str) and name.startswith("ProfilerStep#"):
            n = int(name[len("ProfilerStep#") :])
            s = int(Decimal(e["ts"]) * 1000)
            t = s + int(Decimal(e.get("dur", 0)) * 1000)
            if n in out:
                s, t = min(s, out[n][0]), max(t, out[n][1])
            out[n] = (s, t)
    return out


@pytest.fixture(scope="module")
def ddp4(ddp4_job):
    """[(path, rank, base_ns, reference step table)] for a real 4-rank job (the
    recorded one and the shared one), by rank."""
    out = []
    for p in ddp4_job.files:
        doc = _load_exact(p)
        out.append(
            (p, doc["distributedInfo"]["rank"], int(doc["baseTimeNanoseconds"]), _reference_steps(doc))
        )
    out.sort(key=lambda t: t[1])
    assert [t[1] for t in out] == [0, 1, 2, 3]
    return out


# ---------------------------------------------------------------- real 4-rank job
@pytest.fixture(scope="module")
def steps(ddp4_job):
    return STEPS[ddp4_job.name]


def test_ddp4_has_its_profiled_steps(ddp4, steps):
    for _, _, _, ref in ddp4:
        assert sorted(ref) == steps


def test_step_window_matches_independent_computation(ddp4, steps):
    pairs = [(a, b) for a in steps for b in steps if a <= b]  # every window of the job
    assert len(pairs) >= 3
    for first, last in pairs:
        for path, rank, base, ref in ddp4:
            got = find_step_window(path, base, first, last, rank=rank)
            expected = (base + ref[first][0], base + ref[last][1])
            assert got == expected, (path.name, first, last)
            assert all(type(x) is int for x in got)
            assert got[0] < got[1]


def test_step_window_known_values(ddp4_by_rank):
    # Rank 0 of the shared job, computed by hand from the file: base 1790857026000000000,
    # ProfilerStep#2 ts 5081916105182.348, ProfilerStep#4 ts 5081916284966.006 dur 102947.906.
    path = ddp4_by_rank[0]
    base = int(_load_exact(path)["baseTimeNanoseconds"])
    assert base == 1790857026000000000
    start, end = find_step_window(path, base, 2, 4, rank=0)
    assert start == 1790857026000000000 + 5081916105182348
    assert end == 1790857026000000000 + 5081916284966006 + 102947906


def test_step_window_absolute_is_in_the_file_name_epoch(ddp4, steps):
    # tensorboard_trace_handler puts time.time_ns() at export in the file name;
    # the steps were recorded shortly (< 10 s) before it.
    for path, rank, base, _ in ddp4:
        export_ns = int(path.name.split(".")[1])
        start, end = find_step_window(path, base, steps[0], steps[-1], rank=rank)
        assert 0 < export_ns - end < 10 * 10**9


def test_missing_step_lists_steps_present(ddp4, steps):
    path, rank, base, _ = ddp4[0]
    present = f"steps present: {steps[0]}-{steps[-1]}"
    with pytest.raises(UsageError) as ei:
        find_step_window(path, base, 2, 9, rank=0)
    msg = str(ei.value)
    assert "step 9 not found on rank 0" in msg
    assert str(path) in msg
    assert present in msg
    with pytest.raises(UsageError) as ei:
        find_step_window(path, base, 0, 9)
    assert "steps 0 and 9 not found in" in str(ei.value)
    assert present in str(ei.value)


def test_first_after_last_is_usage_error_without_reading(tmp_path):
    # The check happens before the file is opened: a missing file does not matter.
    with pytest.raises(UsageError, match="first step is after last step"):
        find_step_window(tmp_path / "nope.json", 0, 4, 2)
    with pytest.raises(UsageError, match="negative"):
        find_step_window(tmp_path / "nope.json", 0, -1, 2)


def test_list_steps_on_ddp4(ddp4, steps):
    for path, _, _, ref in ddp4:
        got = list_steps(path)
        assert list(got) == steps
        for n, (s, e) in got.items():
            assert s == pytest.approx(ref[n][0] / 1000, abs=1e-3)
            assert e == pytest.approx(ref[n][1] / 1000, abs=1e-3)
            assert isinstance(s, float) and isinstance(e, float)


def test_real_gpu_trace_union_of_cpu_and_gpu_annotation():
    # mi300: ProfilerStep#N exists as user_annotation (CPU) and gpu_user_annotation (GPU).
    path = require_shared("real", "mi300_resnet_rank0.json.gz")
    doc = _load_exact(path)
    ref = _reference_steps(doc)
    base = int(doc["baseTimeNanoseconds"])
    assert sorted(ref) == [15, 16, 17]
    assert find_step_window(path, base, 15, 17) == (base + ref[15][0], base + ref[17][1])


def test_old_trace_without_base_has_absolute_epoch_us():
    path = require_shared("real", "a100_no_distinfo_epoch_ts.json.gz")
    # ProfilerStep#1009: ts 1661203462598772 (integer epoch us), dur 75473
    assert find_step_window(path, None, 1009, 1009) == (
        1661203462598772000,
        1661203462598772000 + 75473000,
    )


# ---------------------------------------------------------------- synthetic files
def _write(tmp_path, events, name="t.json", gz=False, raw=None):
    p = tmp_path / name
    data = raw if raw is not None else json.dumps({"traceEvents": events}).encode()
    p.write_bytes(gzip.compress(data) if gz else data)
    return p


def test_step_any_category_and_non_step_names_ignored(tmp_path):
    ev = [
        {"ph": "X", "name": "ProfilerStep#1", "cat": "whatever", "ts": 10.5, "dur": 1.25},
        {"ph": "X", "name": "ProfilerStep#2", "ts": 20, "dur": 5},
        {"ph": "X", "name": "ProfilerStep#3x", "ts": 0, "dur": 1000},
        {"ph": "X", "name": "MyProfilerStep#3", "ts": 0, "dur": 1000},
        {"ph": "i", "name": "ProfilerStep#3", "ts": 0},
        {"ph": "X", "name": "ProfilerStep#4", "ts": "bad", "dur": 1},
        {"ph": "X", "name": 7, "ts": 0, "dur": 1},
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}},
    ]
    p = _write(tmp_path, ev)
    assert list_steps(p) == {1: (10.5, 11.75), 2: (20.0, 25.0)}
    assert find_step_window(p, 1000, 1, 2) == (1000 + 10500, 1000 + 25000)
    with pytest.raises(UsageError, match=r"steps present: 1-2$"):
        find_step_window(p, 0, 3, 3)


def test_step_without_dur_is_an_instant(tmp_path):
    p = _write(tmp_path, [{"ph": "X", "name": "ProfilerStep#0", "ts": 1.001}])
    assert find_step_window(p, 0, 0, 0) == (1001, 1001)


def test_no_steps_at_all(tmp_path):
    p = _write(tmp_path, [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 1}], gz=True)
    with pytest.raises(UsageError, match="steps present: none"):
        find_step_window(p, 0, 1, 1, rank=3)


def test_key_order_and_gzip_detection_by_content(tmp_path):
    raw = (
        b'{"traceEvents": [{"dur": 2.5, "ts": 7.125, "name": "ProfilerStep#5", "ph": "X"}],'
        b' "baseTimeNanoseconds": 1000000000}'
    )
    p = _write(tmp_path, None, name="renamed.json", gz=True, raw=raw)
    assert find_step_window(p, 10**9, 5, 5) == (10**9 + 7125, 10**9 + 9625)


def test_truncated_file_is_input_error_or_partial(tmp_path, rec_ddp4_by_rank):
    src = rec_ddp4_by_rank[0]
    data = gzip.decompress(src.read_bytes())
    p = tmp_path / "killed.json"
    # cut the file between the last two ProfilerStep events (a killed job)
    cut = data.rindex(b'"ProfilerStep#') - 100
    p.write_bytes(data[:cut])
    with pytest.raises(InputError) as ei:
        find_step_window(p, 0, 2, 2)
    assert str(p) in str(ei.value) and "truncated" in str(ei.value)
    assert ei.value.kind is ErrorKind.TRUNCATED and ei.value.offset == cut
    partial = list_steps(p, strict=False)
    full = list_steps(src)
    assert partial and set(partial) < set(full)
    assert all(partial[n] == full[n] for n in partial)


def test_invalid_utf8_is_input_error(tmp_path):
    p = _write(tmp_path, None, raw=b'{"traceEvents":[{"name":"a\xffb","ph":"X","ts":1,"dur":1}]}')
    with pytest.raises(InputError, match="invalid JSON"):
        list_steps(p)


# ---------------------------------------------------------------- us_to_ns
def test_us_to_ns_examples():
    assert us_to_ns(5081916104754.466) == 5081916104754466
    assert us_to_ns(5081916105182.348) == 5081916105182348
    assert us_to_ns(0.001) == 1
    assert us_to_ns(-0.001) == -1
    assert us_to_ns(0) == 0
    assert us_to_ns(0.0) == 0
    assert us_to_ns(1661203462598772) == 1661203462598772000
    assert us_to_ns(1661203462598772.5) == 1661203462598772500
    assert us_to_ns(2**70) == 2**70 * 1000
    assert us_to_ns(Decimal("5081916104754.466")) == 5081916104754466
    assert us_to_ns(Decimal("1661203462598772.001")) == 1661203462598772001
    assert us_to_ns(Decimal("-3.5")) == -3500
    assert us_to_ns(Decimal("0.0005")) == 0  # half to even
    assert us_to_ns(Decimal("0.0015")) == 2
    for v in (us_to_ns(1), us_to_ns(1.5), us_to_ns(Decimal("1.5")), us_to_ns(1e15)):
        assert type(v) is int


@pytest.mark.parametrize("bad", [True, None, "1.5", [1]])
def test_us_to_ns_type_errors(bad):
    with pytest.raises(TypeError):
        us_to_ns(bad)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, Decimal("NaN"), Decimal("Infinity")])
def test_us_to_ns_non_finite(bad):
    with pytest.raises(ValueError):
        us_to_ns(bad)


@settings(max_examples=2000)
@given(st.integers(-(int(FLOAT_FAST_LIMIT) * 1000 - 1), int(FLOAT_FAST_LIMIT) * 1000 - 1))
def test_us_to_ns_float_fast_path_is_exact(ns):
    # The float a JSON parser produces for the 3-decimal text of ns/1000.
    text = str(Decimal(ns) / 1000)
    assert us_to_ns(float(text)) == ns
    assert us_to_ns(Decimal(text)) == ns


@settings(max_examples=500)
@given(st.integers(int(FLOAT_FAST_LIMIT) * 1000 - 10**6, int(FLOAT_FAST_LIMIT) * 1000 + 10**6))
def test_us_to_ns_near_fast_path_limit(ns):
    f = float(str(Decimal(ns) / 1000))
    if abs(f) < FLOAT_FAST_LIMIT:
        assert us_to_ns(f) == ns
    else:  # a float cannot hold every 3-decimal value up there; the value as repr shows it
        assert us_to_ns(f) == int(Decimal(repr(f)) * 1000)
        assert abs(us_to_ns(f) - ns) <= 2


@given(st.integers(-(2**80), 2**80))
def test_us_to_ns_decimal_exact(ns):
    assert us_to_ns(Decimal(ns) / 1000) == ns
    assert us_to_ns(ns) == ns * 1000


# ---------------------------------------------------------------- window_from_ms
def test_window_from_ms():
    first = 1795938942101445047
    assert window_from_ms(first, 0, 100) == (first, first + 100_000_000)
    assert window_from_ms(first, 1.5, 2250.5) == (first + 1_500_000, first + 2_250_500_000)
    assert window_from_ms(first, 0.1, 0.3) == (first + 100_000, first + 300_000)
    # sub-ns bounds round outwards
    assert window_from_ms(0, 0.0000015, 0.0000025) == (1, 3)
    assert window_from_ms(0, Decimal("1.000001"), Decimal("2")) == (1_000_001, 2_000_000)


@pytest.mark.parametrize("s,e", [(5, 5), (6, 5), (-1, 5), (0, -1), (0, math.inf), (math.nan, 1)])
def test_window_from_ms_errors(s, e):
    with pytest.raises(UsageError):
        window_from_ms(0, s, e)
