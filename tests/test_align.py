"""Tests for ``--align collectives`` (tracefuse_stream.align.clock).

The multi-host input is generated here from the real single-rank NCCL trace
``a100_nccl_rank0.json.gz`` (21 NCCL kernels, no ``Seq`` args, so the order
fallback is what gets exercised): 8 copies, hosts "nodeA" (ranks 0-3) and "nodeB"
(ranks 4-7). Each copy gets seeded uniform jitter on the END of every collective
kernel and arbitrarily moved STARTS (so aligning on starts would fail); nodeB's
copies have every ``ts`` shifted by +1.2 ms, i.e. nodeB's clock runs 1.2 ms ahead
and the correct offset for it is -1.2 ms. Rank 6 also gets a different
``baseTimeNanoseconds`` with ``ts`` moved the opposite way (same absolute times).

The A100 trace is one of the shared GPU traces: without ../shared/fixtures these tests
skip (and fail when CI is set), through conftest's ``require_shared``. The CPU-only
check runs on the recorded gloo job in the repository too.
"""

from __future__ import annotations

import gzip
import json
import random
import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional

import orjson
import pytest
import zstandard
from conftest import require_shared, shared_fixtures_dir
from hypothesis import given, settings
from hypothesis import strategies as st

from tracefuse_stream.align.clock import (
    RankAlignment,
    RankCollectives,
    collect_collective_ends,
    estimate_offsets,
    format_alignment_table,
    is_collective_kernel,
    load_clock_offsets,
    offsets_from_file,
)
from tracefuse_stream.errors import InputError, UsageError
from tracefuse_stream.timeunits import us_to_ns_or_none as us_to_ns

FIXTURES = shared_fixtures_dir()
A100 = FIXTURES / "real" / "a100_nccl_rank0.json.gz"

SHIFT_NS = 1_200_000  # nodeB's clock is 1200.000 us ahead
END_JITTER_NS = 2_000  # ends jitter uniformly within +-2 us
TOL_NS = 3_000  # required accuracy: 3 us
BASE_MOVE_NS = 1_000_000_000  # rank 6: base +1 s, ts -1 s
HOSTS: Dict[int, Optional[str]] = {r: ("nodeA" if r < 4 else "nodeB") for r in range(8)}


def _require(path: Path) -> Path:
    """``path`` (inside the shared fixtures) or skip/fail as conftest decides."""
    return require_shared(*path.relative_to(FIXTURES).parts)


def _load_json(path: Path) -> Dict[str, Any]:
    with gzip.open(path, "rb") as f:
        return orjson.loads(f.read())


def _ns_to_ts(ns: int, was_int: bool) -> Any:
    # ns / 1000 is correctly rounded; its shortest repr (what orjson writes) is the
    # exact 3-decimal value for |ts| < 2**43 us.
    if was_int and ns % 1000 == 0:
        return ns // 1000
    return ns / 1000


def _make_copy(src: Dict[str, Any], rank: int, rng: random.Random) -> Dict[str, Any]:
    """One rank's copy: jittered collective ends, moved starts, host clock shift."""
    host = HOSTS[rank]
    clock_shift = SHIFT_NS if host == "nodeB" else 0
    base = src["baseTimeNanoseconds"]
    base_move = BASE_MOVE_NS if rank == 6 else 0
    events: List[Dict[str, Any]] = []
    for ev in src["traceEvents"]:
        ts = ev.get("ts")
        ts_ns = us_to_ns(ts)
        if ts_ns is None:
            events.append(ev)
            continue
        ev = dict(ev)
        if is_collective_kernel(ev):
            end = ts_ns + us_to_ns(ev["dur"]) + rng.randint(-END_JITTER_NS, END_JITTER_NS)
            # Stragglers: the start is anywhere from ~2 ms earlier to just before the end.
            dur = rng.randint(1_000, us_to_ns(ev["dur"]) + 2_000_000)
            ts_ns = end - dur
            ev["dur"] = _ns_to_ts(dur, False)
        ev["ts"] = _ns_to_ts(ts_ns + clock_shift - base_move, isinstance(ts, int))
        events.append(ev)
    out = {k: v for k, v in src.items() if k != "traceEvents"}
    out["distributedInfo"] = dict(src["distributedInfo"], rank=rank, world_size=8)
    out["host_name"] = host
    out["baseTimeNanoseconds"] = base + base_move
    out["traceEvents"] = events
    return out


@pytest.fixture(scope="module")
def eight_ranks(tmp_path_factory) -> Dict[int, Dict[str, Any]]:
    """Write the 8 per-rank copies once; returns rank -> {path, base}."""
    src = _load_json(_require(A100))
    d = tmp_path_factory.mktemp("align8")
    rng = random.Random(20240522)
    out: Dict[int, Dict[str, Any]] = {}
    for rank in range(8):
        data = orjson.dumps(_make_copy(src, rank, rng))
        if rank == 3:  # compression is detected from bytes, not names
            path = d / f"rank{rank}.json.zst"
            path.write_bytes(zstandard.ZstdCompressor(level=1).compress(data))
        elif rank == 5:
            path = d / f"rank{rank}.json.gz"
            path.write_bytes(gzip.compress(data, compresslevel=1))
        else:
            path = d / f"rank{rank}.json"
            path.write_bytes(data)
        out[rank] = {"path": path, "base": src["baseTimeNanoseconds"] + (BASE_MOVE_NS if rank == 6 else 0)}
    return out


@pytest.fixture(scope="module")
def collected(eight_ranks) -> Dict[int, RankCollectives]:
    return {r: collect_collective_ends(info["path"], info["base"]) for r, info in eight_ranks.items()}


@pytest.fixture(scope="module")
def aligned(collected) -> Dict[int, RankAlignment]:
    return estimate_offsets(collected, HOSTS)


def _shifted(rc: RankCollectives, delta_ns: int, keep: Optional[int] = None) -> RankCollectives:
    items = sorted(rc.ends.items())[: keep if keep is not None else len(rc.ends)]
    return RankCollectives(ends={k: v + delta_ns for k, v in items}, count=len(items))


# --------------------------------------------------------------------------- collection


def test_real_trace_uses_order_fallback(collected):
    rc = collected[0]
    assert rc.count == 21 and not rc.cap_hit and rc.error is None
    assert len(rc.ends) == 21
    assert {k[0] for k in rc.ends} == {"order"}, "the a100 kernels carry no Seq/Comms Id"
    names = {k[1].split("(")[0] for k in rc.ends}
    assert names == {"ncclKernel_AllReduce_RING_LL_Sum_float", "ncclKernel_Broadcast_RING_LL_Sum_int8_t"}
    # Every rank (plain, zstd, gzip, moved base) sees the same keys.
    assert all(set(c.ends) == set(rc.ends) for c in collected.values())


def test_real_trace_end_times_are_exact_ns():
    src = _load_json(_require(A100))
    base = src["baseTimeNanoseconds"]
    rc = collect_collective_ends(_require(A100), base)
    kernels = [e for e in src["traceEvents"] if is_collective_kernel(e)]
    # Exact: ts and dur are 3-decimal us; compare with a decimal-string computation.
    from decimal import Decimal

    expected = sorted(
        base + int(Decimal(repr(e["ts"])) * 1000) + int(Decimal(repr(e["dur"])) * 1000) for e in kernels
    )
    assert sorted(rc.ends.values()) == expected


def test_cap_is_honoured(eight_ranks):
    rc = collect_collective_ends(eight_ranks[0]["path"], eight_ranks[0]["base"], cap=5)
    assert rc.count == 5 and len(rc.ends) == 5 and rc.cap_hit
    rc = collect_collective_ends(eight_ranks[0]["path"], eight_ranks[0]["base"], cap=21)
    assert rc.count == 21 and not rc.cap_hit
    with pytest.raises(UsageError):
        collect_collective_ends(eight_ranks[0]["path"], 0, cap=-1)


def test_seq_keys_and_kernel_selection(tmp_path):
    big = 2**64 - 5  # Comms Id is a uint64 beyond int64
    events = [
        # CPU-side collective op: never used.
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "record_param_comms",
            "pid": 1,
            "tid": 1,
            "ts": 1.0,
            "dur": 5.0,
            "args": {"Collective name": "allreduce", "Seq": 1, "Process Group Name": "0"},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "pid": 0,
            "tid": 7,
            "ts": 10.0,
            "dur": 2.5,
            "args": {"Collective name": "allreduce", "Seq": 1, "Process Group Name": "0", "stream": 7},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclDevKernel_AllGather_RING_LL(x)",
            "pid": 0,
            "tid": 7,
            "ts": 20.0,
            "dur": 1.0,
            "args": {"Collective name": "allgather", "Comms Id": big, "Process Group Name": "3"},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "rcclGenericKernel",
            "pid": 0,
            "tid": -9,
            "ts": 30.0,
            "dur": 1.0,
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "void at::native::elementwise_kernel",
            "pid": 0,
            "tid": 7,
            "ts": 40.0,
            "dur": 1.0,
        },
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "nccl:all_reduce",
            "pid": 0,
            "tid": 7,
            "ts": 9.0,
            "dur": 4.0,
        },
    ]
    p = tmp_path / "seq.json"
    p.write_bytes(orjson.dumps({"traceEvents": events, "baseTimeNanoseconds": 1}))
    rc = collect_collective_ends(p, 1_000_000)
    assert rc.ends == {
        ("seq", "0", "allreduce", 1): 1_000_000 + 12_500,
        ("seq", "3", "allgather", big): 1_000_000 + 21_000,
        ("order", "rcclGenericKernel", 9, 0): 1_000_000 + 31_000,
    }


def test_uint64_comms_id_and_epoch_timestamps_are_exact(tmp_path):
    # yajl's float mode overflows on the uint64 Comms Id: the pass is redone exactly.
    # Without a base (PyTorch <= 2.3) ts are epoch us: beyond float ns precision.
    text = (
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "pid": 0, '
        '"tid": 7, "ts": 1715000000123456.789, "dur": 1.001, '
        '"args": {"Collective name": "allreduce", "Comms Id": 18446744073709551615, '
        '"Process Group Name": "0"}}]}'
    )
    p = tmp_path / "epoch.json"
    p.write_text(text)
    assert collect_collective_ends(p, None).ends == {
        ("seq", "0", "allreduce", 2**64 - 1): 1715000000123457790
    }
    rc = collect_collective_ends(p, 5)  # with a base: float path, overflow, exact retry
    assert rc.error is None and rc.ends == {("seq", "0", "allreduce", 2**64 - 1): 1715000000123457795}


def test_truncated_trace_keeps_what_was_read(tmp_path, eight_ranks):
    data = Path(eight_ranks[0]["path"]).read_bytes()
    p = tmp_path / "truncated.json"
    p.write_bytes(data[: len(data) * 3 // 4])
    rc = collect_collective_ends(p, eight_ranks[0]["base"])
    assert rc.error and "truncated" in rc.error
    assert 0 < rc.count < 21
    with pytest.raises(InputError):
        collect_collective_ends(tmp_path / "nope.json", 0)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=-(2**43) * 1000 + 1, max_value=2**43 * 1000 - 1))
def test_us_to_ns_is_exact_for_three_decimal_floats(k):
    sign = "-" if k < 0 else ""
    text = f"{sign}{abs(k) // 1000}.{abs(k) % 1000:03d}"
    assert us_to_ns(float(text)) == k
    assert us_to_ns(json.loads(text)) == k


def test_us_to_ns_odd_values():
    assert us_to_ns(1715000000123456) == 1715000000123456000  # integer epoch us (old PyTorch)
    assert us_to_ns(True) is None and us_to_ns("1.0") is None and us_to_ns(float("nan")) is None


# --------------------------------------------------------------------------- estimation


def test_recovers_host_offset(aligned):
    b = aligned[4]
    assert b.applied, b.reason
    assert abs(b.offset_ns - (-SHIFT_NS)) <= TOL_NS, b.offset_ns
    assert b.matched == 21
    assert "aligned to host nodeA" in b.reason
    # One clock per host: every nodeB rank (including the one with a moved base) gets it.
    assert {aligned[r].offset_ns for r in range(4, 8)} == {b.offset_ns}
    assert all(aligned[r].host == "nodeB" for r in range(4, 8))
    for r in range(4):
        assert aligned[r].offset_ns == 0 and aligned[r].host == "nodeA"
        assert "reference host" in aligned[r].reason


def test_aligned_ends_agree(collected, aligned):
    ref = collected[0].ends
    for r, rc in collected.items():
        off = aligned[r].offset_ns
        diffs = [abs(e + off - ref[k]) for k, e in rc.ends.items() if k in ref]
        assert len(diffs) == 21
        assert statistics.median(diffs) <= TOL_NS, (r, statistics.median(diffs))
    # And without alignment nodeB really is off by the shift.
    raw = [collected[5].ends[k] - ref[k] for k in ref]
    assert abs(statistics.median(raw) - SHIFT_NS) <= TOL_NS


def test_unshifted_inputs_get_no_real_offset(collected):
    unshifted = {r: (_shifted(rc, -SHIFT_NS) if HOSTS[r] == "nodeB" else rc) for r, rc in collected.items()}
    for a in estimate_offsets(unshifted, HOSTS).values():
        assert abs(a.offset_ns) <= TOL_NS, a
    # Unknown hosts: every rank is its own clock; still nothing beyond the jitter.
    one_host = {r: collected[r] for r in range(4)}
    res = estimate_offsets(one_host, {r: None for r in range(4)})
    assert set(res) == {0, 1, 2, 3}
    for r, a in res.items():
        assert abs(a.offset_ns) <= TOL_NS, a
        assert a.host == f"rank {r} (host unknown)"
        if a.estimate_ns is not None:
            assert abs(a.estimate_ns) <= TOL_NS
    # One named host: all reference, all zero.
    res = estimate_offsets(one_host, {r: "nodeA" for r in range(4)})
    assert all(a.offset_ns == 0 and not a.applied for a in res.values())


def test_gloo_cpu_only_job_gets_no_offset(ddp4_job):
    files = ddp4_job.files
    ranks: Dict[int, RankCollectives] = {}
    hosts: Dict[int, Optional[str]] = {}
    for f in files:
        head = _load_json(f)
        r = head["distributedInfo"]["rank"]
        ranks[r] = collect_collective_ends(f, head.get("baseTimeNanoseconds"))
        hosts[r] = head.get("host_name")
        assert ranks[r].count == 0 and ranks[r].ends == {}
    assert set(hosts.values()) == {"vm"}
    for host_map in (hosts, {r: None for r in hosts}):  # one host, or unknown hosts
        res = estimate_offsets(ranks, host_map)
        assert sorted(res) == [0, 1, 2, 3]
        for a in res.values():
            assert a.offset_ns == 0 and not a.applied
            assert "no GPU collective" in a.reason, a.reason


def test_fewer_than_min_matches_is_not_applied(collected, eight_ranks):
    few = {0: collected[0], 4: _shifted(collected[4], 0, keep=2)}
    a = estimate_offsets(few, {0: "nodeA", 4: "nodeB"})[4]
    assert not a.applied and a.offset_ns == 0 and a.matched == 2
    assert "only 2" in a.reason and "need 3" in a.reason
    # Through the cap: two kernels read per rank -> two matches.
    capped = {
        r: collect_collective_ends(eight_ranks[r]["path"], eight_ranks[r]["base"], cap=2) for r in (0, 4)
    }
    a = estimate_offsets(capped, {0: "nodeA", 4: "nodeB"})[4]
    assert not a.applied and a.matched == 2 and "cap" in a.reason
    # The same data is fine with a lower threshold.
    a = estimate_offsets(capped, {0: "nodeA", 4: "nodeB"}, min_matches=2)[4]
    assert a.applied and abs(a.offset_ns + SHIFT_NS) <= TOL_NS


def _synthetic(offset_ns: int, noise_ns: int, n: int = 60, seed: int = 7) -> Dict[int, RankCollectives]:
    rng = random.Random(seed)
    ref = {("seq", "0", "allreduce", i): 10**18 + i * 5_000_000 for i in range(n)}
    other = {k: v - offset_ns + rng.randint(-noise_ns, noise_ns) for k, v in ref.items()}
    return {0: RankCollectives(ends=ref, count=n), 1: RankCollectives(ends=other, count=n)}


def test_spread_larger_than_offset_is_not_applied():
    a = estimate_offsets(_synthetic(10_000, 500_000), {0: "a", 1: "b"})[1]
    assert not a.applied and a.offset_ns == 0
    assert a.spread_us > abs(a.estimate_ns) / 1000
    assert "spread" in a.reason and "not significant" in a.reason
    # Positive control: the same offset with little noise is applied, sign included.
    a = estimate_offsets(_synthetic(10_000, 1_000), {0: "a", 1: "b"})[1]
    assert a.applied and abs(a.offset_ns - 10_000) <= 1_000 and a.spread_us < 1.0


def test_reference_without_collectives_and_missing_ranks():
    data = _synthetic(-50_000, 100)
    data[0] = RankCollectives()
    res = estimate_offsets(data, {0: "a", 1: "b", 2: "b"})
    assert res[1].offset_ns == 0 and "reference host a has no GPU collective" in res[1].reason
    assert set(res) == {0, 1, 2}  # rank 2 has no collected data: still reported
    assert estimate_offsets({}, {}) == {}


def test_header_and_table(aligned):
    h = aligned[5].to_header()
    json.dumps(h)
    assert h["offset_ns"] == aligned[5].offset_ns and h["applied"] and h["method"] == "collectives"
    table = format_alignment_table(aligned)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["rank", "host", "offset_us"]
    assert len(lines) == 3  # one row per host here: ranks with the same figures share a row
    cells = lines[2].split()
    assert cells[:2] == ["4-7", "nodeB"] and "aligned to host nodeA" in lines[2]
    assert abs(float(cells[2]) * 1000 + SHIFT_NS) <= TOL_NS


def test_estimate_is_exact_at_epoch_magnitudes():
    # Epoch ns (~1.8e18) are beyond float precision (ulp 256 ns); with an even number
    # of reference ranks the per-key median is a half-integer. Noise-free data must
    # still give the offset to the nanosecond.
    ends0 = {("order", "k", 1, i): 1_795_938_942_456_985_859 + i * 3_000_001 for i in range(9)}
    ends1 = {k: v + 1 for k, v in ends0.items()}
    ends2 = {k: v - 12_345 for k, v in ends0.items()}  # other clock 12.345 us (+0.5 ns) behind
    data = {
        0: RankCollectives(ends=ends0, count=9),
        1: RankCollectives(ends=ends1, count=9),
        2: RankCollectives(ends=ends2, count=9),
    }
    a = estimate_offsets(data, {0: "a", 1: "a", 2: "b"})[2]
    assert a.applied and a.spread_us == 0.0
    assert a.estimate_ns == 12_346 and a.offset_ns == 12_346  # 12_345.5 rounds half to even


# --------------------------------------------------------------------------- --clock-offsets


def test_clock_offsets_file(tmp_path):
    p = tmp_path / "offsets.json"
    p.write_text(json.dumps({"nodeB": -1200.0, "5": 3.5, "0": 0}))
    mapping = load_clock_offsets(p)
    assert mapping == {"nodeB": -1200.0, "5": 3.5, "0": 0}
    res = offsets_from_file(mapping, HOSTS)
    assert sorted(res) == list(range(8))
    assert [res[r].offset_ns for r in range(8)] == [0, 0, 0, 0, -1_200_000, 3_500, -1_200_000, -1_200_000]
    assert res[5].applied and "rank entry" in res[5].reason  # rank wins over host
    assert res[4].applied and "host entry" in res[4].reason
    assert res[0].applied and not res[1].applied and "not in clock-offsets" in res[1].reason
    assert all(a.method == "file" for a in res.values())
    assert "-1200.000" in format_alignment_table(res)


@pytest.mark.parametrize("key", ["elsewhere", "8", "nodeb"])
def test_clock_offsets_key_matching_nothing_is_usage_error(key):
    # a typo or a file for another run: an offset silently not applied is as wrong as a wrong one
    with pytest.raises(UsageError, match=f"'{key}' name\\(s\\) no merged rank or host") as ei:
        offsets_from_file({"nodeB": -1200.0, key: 7}, HOSTS)
    assert "ranks 0-7" in str(ei.value) and "nodeA, nodeB" in str(ei.value)


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"nodeB": "1.2ms"}', "must be a number"),
        ('{"nodeB": true}', "must be a number"),
        ('{"nodeB": null}', "must be a number"),
        ('{"nodeB": NaN}', "not finite"),
        ('{"nodeB": 1, "nodeB": 2}', "duplicate key"),
        ('{" ": 1}', "empty"),
    ],
)
def test_clock_offsets_file_errors(tmp_path, content, message):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(UsageError, match=message) as ei:
        load_clock_offsets(p)
    assert str(p) in str(ei.value)


def test_clock_offsets_file_missing_and_ambiguous(tmp_path):
    with pytest.raises(UsageError, match="cannot read"):
        load_clock_offsets(tmp_path / "missing.json")
    with pytest.raises(UsageError, match="both name rank 3"):
        offsets_from_file({"3": 1.0, "03": 2.0}, {3: "h"})
