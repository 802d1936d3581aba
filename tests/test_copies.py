"""plan/copies.py: one trace given twice is found by its bytes or by its rank and start,
and finding it compares no pair of files that differ.

The end-to-end behaviour (merge refuses, ``--rank-from order`` warns, ``info`` leaves
the copy out) is in test_broken_inputs.py on real recorded traces; here, the cost rule:
files of one size and first event time that differ only in their middle are told apart
by hashes, never compared byte by byte, and a real copy is compared once.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import List

import pytest

from tracefuse_stream.errors import UsageError
from tracefuse_stream.plan import copies
from tracefuse_stream.plan.planner import plan_all


def _trace(middle: int, n: int = 3000) -> bytes:
    """A ~330 KB trace (more than the two hashed ends) whose event ``n // 2`` carries
    ``middle``: files differ only there, at the same size and first event time."""
    events = [{"ph": "X", "name": f"op{i:05d}", "pid": 7, "tid": 7, "ts": 1000 + i, "dur": 1,
               "args": {"v": middle if i == n // 2 else 0}} for i in range(n)]  # fmt: skip
    return json.dumps({"traceEvents": events}).encode()


def _write(d: Path, middles: List[int]) -> None:
    for i, m in enumerate(middles):
        (d / f"host_{i}.trace.json").write_bytes(_trace(m))


def test_files_that_differ_in_the_middle_are_never_compared_byte_by_byte(tmp_path, monkeypatch):
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    print("seed", seed)
    middles = random.Random(seed).sample(range(1, 10), 9)  # 9 distinct one-digit values: same sizes
    _write(tmp_path, middles)
    calls: List[tuple] = []
    real = copies.same_bytes
    monkeypatch.setattr(copies, "same_bytes", lambda a, b: calls.append((a, b)) or real(a, b))
    plans = plan_all([tmp_path], rank_from="order")
    assert len({(p.size_bytes, str(p.first_ts)) for p in plans}) == 1  # one group to look at
    assert copies.find_copies(plans) == [] and calls == []
    # a real copy among them: found, with one byte comparison
    (tmp_path / "host_9.trace.json").write_bytes(_trace(middles[4]))
    plans = plan_all([tmp_path], rank_from="order")  # kept, with a warning (numbered by order)
    assert len(calls) == 1
    calls.clear()
    found = copies.find_copies(plans)
    assert [(Path(c.original.path).name, Path(c.copy.path).name, c.why) for c in found] == [
        ("host_4.trace.json", "host_9.trace.json", "hold the same bytes")
    ]
    assert len(calls) == 1
    with pytest.raises(UsageError, match="host_4.trace.json and .*host_9.trace.json hold the same bytes"):
        plan_all([tmp_path])


def test_same_rank_same_instant_is_one_recording_other_instants_are_cycles(tmp_path):
    def rank0(ts: int, extra: str = "") -> str:
        return json.dumps({"distributedInfo": {"rank": 0, "world_size": 1},
                           "traceEvents": [{"ph": "X", "name": "a" + extra, "pid": 1, "tid": 1, "ts": ts, "dur": 5}],
                           "baseTimeNanoseconds": 1_700_000_000_000_000_000})  # fmt: skip

    (tmp_path / "a.json").write_text(rank0(100))
    (tmp_path / "b.json").write_text(rank0(100, extra="b"))  # other bytes, the same instant
    with pytest.raises(
        UsageError, match=r"a.json and .*b.json hold rank 0's recording from the same instant"
    ):
        plan_all([tmp_path])
    (tmp_path / "b.json").write_text(rank0(60_000_000, extra="b"))  # a minute later: a second cycle
    assert len(plan_all([tmp_path], every_cycle=True).cycles) == 2
