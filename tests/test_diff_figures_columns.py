"""The diff's per-figure columns (analyze/diff_figures.py ``Column``; issue 38: a run's
figures in int arrays, not dicts): every value read back as put, ranks in order only,
and a step number or count past int32 widened, never wrapped."""

from __future__ import annotations

import pytest

from tracefuse_stream.analyze.diff_figures import Column, RunFigures


def test_a_column_reads_back_each_rank_as_put() -> None:
    col = Column()
    col.put(0, {3: [30, 1], 1: [10, 2]})
    col.put(2, {})
    col.put(5, {1: [7, 0]})
    assert col.of(0) == {1: (10, 2), 3: (30, 1)}
    assert col.of(2) == {} and col.of(1) == {} and col.of(9) == {}
    assert col.of(5) == {1: (7, 0)}
    assert col.steps.typecode == "i" and col.counts.typecode == "i"


def test_ranks_come_in_increasing_order() -> None:
    col = Column()
    col.put(4, {1: [1, 1]})
    with pytest.raises(ValueError, match="rank 3 after rank 4"):
        col.put(3, {1: [1, 1]})


def test_a_step_or_count_past_int32_widens_the_column() -> None:
    col = Column()
    col.put(0, {1: [5, 1], 2: [6, 2]})
    big_step, big_count = 2**31, 2**40
    col.put(1, {7: [1, 1], big_step: [2, big_count]})
    assert col.steps.typecode == "q" and col.counts.typecode == "q"
    assert col.of(0) == {1: (5, 1), 2: (6, 2)}
    assert col.of(1) == {7: (1, 1), big_step: (2, big_count)}


def test_run_figures_sum_a_rank_s_adds_and_read_series_with_zeros() -> None:
    f = RunFigures([0, 1], {})
    f.add("op", "aten::mm", 1, 100, 1)
    f.add("op", "aten::mm", 1, 50, 2)
    f.add("op", "aten::mm", 2, 7, 1)
    f.end_rank(0)
    f.add("op", "aten::add", 2, 3, 1)
    f.end_rank(1)
    assert f.series(("op", "aten::mm"), 0, [1, 2, 3]) == ([150, 7, 0], [3, 1, 0])
    assert f.series(("op", "aten::mm"), 1, [1, 2]) == ([0, 0], [0, 0])
    assert f.series(("op", "aten::add"), 1, [2]) == ([3], [1])
    assert set(f.values) == {("op", "aten::mm"), ("op", "aten::add")}


def test_a_step_past_int64_is_kept_as_written() -> None:
    col = Column()
    col.put(0, {1: [5, 1]})
    huge = 2**64
    col.put(2**70, {huge: [2**65, 3]})
    assert isinstance(col.steps, list) and isinstance(col.ranks, list) and isinstance(col.ns, list)
    assert col.of(0) == {1: (5, 1)}
    assert col.of(2**70) == {huge: (2**65, 3)}
