"""One giant event (a hostile input, not a profiler's): read right, in time linear in its
size (the time itself is measured in benchmarks/giant_event.py, not here).

What keeps it linear, each checked here for its answers: the start-of-file look stops
after ``HEAD_BUDGET`` bytes and leaves the first ts unknown, the planner's peek then
reads events with msgspec (the same first ts ijson gives, on every recorded trace), and
the batch readers grow their reads with their buffer so an event up to ``MAX_BUFFER``
stays on the batch path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracefuse_stream import merge
from tracefuse_stream.plan import starts
from tracefuse_stream.plan.planner import plan_all
from tracefuse_stream.read import batches
from tracefuse_stream.read.head import HEAD_BUDGET, scan_head
from tracefuse_stream.read.sources import TraceReader

RECORDED = Path(__file__).resolve().parent / "data" / "recorded"


def _trace(path: Path, big: int) -> None:
    """``big`` bytes of args in the first timed event, after one metadata event."""
    events = [
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 7, "args": {"name": "main"}},
        {
            "ph": "X",
            "name": "giant",
            "pid": 7,
            "tid": 7,
            "ts": 1500.25,
            "dur": 10,
            "args": {"s": "ab" * (big // 2)},
        },
        {"ph": "X", "name": "after", "pid": 7, "tid": 7, "ts": 1600, "dur": 5},
    ]
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": 10**18}))


def test_a_first_event_over_the_head_budget_is_planned_and_merged_exactly(tmp_path: Path) -> None:
    giant, small = tmp_path / "giant" / "rank0.json", tmp_path / "small" / "rank0.json"
    giant.parent.mkdir()
    small.parent.mkdir()
    _trace(giant, HEAD_BUDGET + (1 << 20))
    _trace(small, 16)
    head = scan_head(giant)
    assert head.ok and head.header == {"schemaVersion": 1} and not head.first_known  # the budget ran out
    assert scan_head(small).first_known
    (plan,) = plan_all([giant])
    assert (str(plan.first_ts), plan.empty) == ("1500.25", False)  # the peek read it
    outs = {}
    for name, src in (("giant", giant), ("small", small)):
        out = tmp_path / f"{name}.json"
        merge([str(src)], str(out), jobs=1)
        outs[name] = json.loads(out.read_text())
    timed = [
        [(e["name"], e["ts"], e["dur"]) for e in o["traceEvents"] if e.get("ph") == "X"]
        for o in outs.values()
    ]
    assert timed[0] == timed[1] and len(timed[0]) == 2
    big = next(e for e in outs["giant"]["traceEvents"] if e.get("name") == "giant")
    assert len(big["args"]["s"]) == HEAD_BUDGET + (1 << 20)


def test_an_event_larger_than_many_reads_stays_on_the_batch_path(tmp_path: Path, monkeypatch) -> None:
    p = tmp_path / "rank0.json"
    _trace(p, 8 * batches.CHUNK_BYTES)
    sizes = []
    real = batches._more

    def spy(reader, buf):  # type: ignore[no-untyped-def]
        data = real(reader, buf)
        sizes.append(len(data))
        return data

    monkeypatch.setattr(batches, "_more", spy)
    r = TraceReader(str(p))
    try:
        evs = [e for b in batches.EventBatches(r, "object") for e in b]
    finally:
        r.close()
    assert [e["name"] for e in evs if e["ph"] == "X"] == ["giant", "after"]
    assert len(sizes) <= 6, sizes  # reads grew with the buffer: not one per CHUNK_BYTES (9+)


@pytest.mark.parametrize(
    "path", sorted(RECORDED.glob("*/*.json*")), ids=lambda p: f"{p.parent.name}/{p.name[:12]}"
)
def test_the_peek_reads_the_first_ts_ijson_reads(path: Path) -> None:
    (plan,) = plan_all({0: str(path)})
    assert starts._first_ts_batched(plan) == starts._first_ts_exact(plan)
