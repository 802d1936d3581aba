"""tests/gpu_cases.py builds what it says: multi-rank GPU runs from the real A100 NCCL
trace of ../shared/fixtures (skipped without that folder, required under CI, as every
shared-fixture test: conftest's require_shared), with one rank slower by a known amount.

Checked from the written files alone (json): valid JSON, one file per stated rank with
that ``distributedInfo`` and its own ``trace_id``; on the slow rank the chosen NCCL
kernel starts ``added_us`` after the others' (which, waiting, last that much longer),
the lengthened kernels / the delayed launches are as stated, and the trace stays
consistent: every launch before its kernel, no two kernels of a stream overlapping,
ts with three decimals.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Dict, List

import gpu_cases
import pytest

TOL_US = 0.002  # two floats near 4.46e12 us differ by a multiple of ~0.001 us


@pytest.fixture(scope="module")
def fixture_path(h: Any) -> Path:
    return h.require_shared(*gpu_cases.FIXTURE_PARTS)


@pytest.fixture(scope="module")
def source(fixture_path: Path) -> Dict[str, Any]:
    return json.loads(gpu_cases.load_source(str(fixture_path)).text)


def _load(truth: Dict[str, Any]) -> Dict[int, Dict[str, Any]]:
    docs = {}
    for r, path in truth["files"].items():
        text = Path(path).read_text()
        assert re.search(r'"ts": \d+\.\d{3}\b', text) and not re.search(
            r'"(ts|dur)": \d+(\.\d{1,2}|\.\d{4,})?[,\n}]', text
        )
        docs[r] = json.loads(text)
    return docs


def _by_corr(doc: Dict[str, Any], cat: str) -> Dict[int, Dict[str, Any]]:
    return {e["args"]["correlation"]: e for e in doc["traceEvents"] if e.get("cat") == cat}


def _check_run(truth: Dict[str, Any], source: Dict[str, Any]) -> Dict[int, Dict[str, Any]]:
    n, slow = truth["world_size"], truth["rank"]
    docs = _load(truth)
    assert sorted(docs) == list(range(n))
    ids = set()
    for r, doc in docs.items():
        info = doc["distributedInfo"]
        assert (info["rank"], info["world_size"]) == (r, n)
        assert info["pg_config"][0]["ranks"] == list(range(n)) and info["pg_config"][0]["pg_size"] == n
        assert doc["baseTimeNanoseconds"] == source["baseTimeNanoseconds"]
        assert len(doc["traceEvents"]) == len(source["traceEvents"])
        ids.add(doc["trace_id"])
        # the comms of the world group say its size (the source's "wait" entries: 1, "[]")
        comms = [
            e["args"]
            for e in doc["traceEvents"]
            if e.get("args", {}).get("Collective name") not in (None, "wait")
        ]
        assert len(comms) == 42 and {(a["Group size"], a["Process Group Ranks"]) for a in comms} == {
            (n, str(list(range(n))))
        }
    assert len(ids) == n, "every rank has its own trace_id"
    peer = next(r for r in docs if r != slow)
    for x in truth["instances"]:
        k_slow = _by_corr(docs[slow], "kernel")[x["correlation"]]
        k_peer = _by_corr(docs[peer], "kernel")[x["correlation"]]
        assert k_slow["name"] == k_peer["name"] == x["kernel"]
        assert k_slow["args"]["Collective name"] == x["collective"]
        assert abs(k_slow["ts"] - k_peer["ts"] - truth["added_us"]) < TOL_US, x["step"]
        assert abs(k_slow["ts"] - x["ts_ns_slow"] / 1000) < TOL_US
        # the peers wait: their kernel lasts added_us longer and ends with the slow rank's
        assert abs(k_peer["dur"] - k_slow["dur"] - truth["added_us"]) < TOL_US
        assert abs(k_slow["ts"] + k_slow["dur"] - k_peer["ts"] - k_peer["dur"]) < TOL_US
        assert abs(k_slow["dur"] - x["dur_ns_in"] / 1000) < TOL_US
        for r in docs:
            if r != slow:
                assert _by_corr(docs[r], "kernel")[x["correlation"]]["ts"] == k_peer["ts"]
    for r in (slow, peer):
        _consistent(docs[r])
    return docs


def _consistent(doc: Dict[str, Any]) -> None:
    ev = doc["traceEvents"]
    launch = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime"}
    streams: Dict[Any, List[Any]] = {}
    for e in ev:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            assert launch[e["args"]["correlation"]]["ts"] <= e["ts"], e["name"]
            streams.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
        if e.get("ph") == "X":
            assert e["dur"] >= 0
    for tid, spans in streams.items():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert start >= end - TOL_US, f"stream {tid}: overlap at {start}"


def test_longer_kernels_two_ranks(tmp_path: Path, fixture_path: Path, source: Dict[str, Any]) -> None:
    t0 = time.monotonic()
    truth = gpu_cases.build_longer_kernels(tmp_path, fixture=fixture_path, added_us=5000.0)
    assert time.monotonic() - t0 < 5  # ~0.3 s once the source is read; generous for a busy host
    assert (truth["world_size"], truth["rank"], truth["case"]) == (2, 1, "longer_kernels")
    assert [x["step"] for x in truth["instances"]] == ["ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"]
    assert truth["total_added_us"] == 15000.0
    docs = _check_run(truth, source)
    src_k = _by_corr(source, "kernel")
    slow_k = _by_corr(docs[1], "kernel")
    peer_k = _by_corr(docs[0], "kernel")
    for x in truth["instances"]:
        lo, hi = x["stretch_ns"]
        inside = [
            c
            for c, e in src_k.items()
            if not e["name"].lower().startswith("nccl") and e["dur"] > 0 and lo / 1000 <= e["ts"] and e["ts"] + e["dur"] <= hi / 1000
        ]  # fmt: skip
        assert len(inside) == x["n_lengthened"] > 0
        assert sum(x["lengthened"].values()) == x["n_lengthened"]
        grown = sum(slow_k[c]["dur"] - src_k[c]["dur"] for c in inside)
        assert abs(grown - truth["added_us"]) < 0.001 * len(inside) + TOL_US
        assert all(abs(peer_k[c]["dur"] - src_k[c]["dur"]) < TOL_US for c in inside)  # only the slow rank's
        # every kernel grew by the same factor (to the ns)
        for c in inside:
            want = src_k[c]["dur"] * x["factor"]
            assert abs(slow_k[c]["dur"] - want) < 0.002 + 1e-6 * want


def test_late_launches_four_ranks_one_step(
    tmp_path: Path, fixture_path: Path, source: Dict[str, Any]
) -> None:
    truth = gpu_cases.build_late_launches(
        tmp_path, fixture=fixture_path, world_size=4, rank=2, added_us=8000.0, steps=["ProfilerStep#5"]
    )
    assert (truth["world_size"], truth["rank"], truth["case"]) == (4, 2, "late_launches")
    (x,) = truth["instances"]
    assert x["step"] == "ProfilerStep#5" and x["start_delay_ns"] == x["added_ns"] == 8_000_000
    docs = _check_run(truth, source)
    slow, src_rt = docs[2], _by_corr(source, "cuda_runtime")
    rt = _by_corr(slow, "cuda_runtime")
    src_k, slow_k = _by_corr(source, "kernel"), _by_corr(slow, "kernel")
    stall = x["stall_at_ns"] / 1000
    for c, e in src_rt.items():  # launches before the stall keep their time, the others move
        moved = rt[c]["ts"] - e["ts"]
        want = truth["added_us"] if e["ts"] >= stall - 0.0005 else 0.0
        assert abs(moved - want) < TOL_US, (e["name"], e["ts"])
    for c, e in src_k.items():  # and so do the kernels they launched
        want = truth["added_us"] if src_rt[c]["ts"] >= stall - 0.0005 else 0.0
        assert abs(slow_k[c]["ts"] - e["ts"] - want) < TOL_US
        assert abs(slow_k[c]["dur"] - e["dur"]) < TOL_US
    assert x["idle_ns_slow"] - x["idle_ns_in"] == 8_000_000  # the compute stream idles
    assert x["delayed_launches"] == 21 and sum(x["delayed_kernels"].values()) >= 1


def test_without_waiting_peers_are_the_source(
    tmp_path: Path, fixture_path: Path, source: Dict[str, Any]
) -> None:
    """peers_wait=False: the other ranks' events are the source's, byte for byte after
    the header; the slow rank's lead then adds up over the steps."""
    truth = gpu_cases.build_longer_kernels(tmp_path, fixture=fixture_path, peers_wait=False, added_us=1000.0)
    text = gpu_cases.load_source(str(fixture_path)).text
    peer = Path(truth["files"][0]).read_text()
    assert peer[peer.index('"traceEvents"') :] == text[text.index('"traceEvents"') :]
    assert [x["start_delay_ns"] for x in truth["instances"]] == [1_000_000, 2_000_000, 3_000_000]
