"""The step figures packed per rank in the reduce (analyze/step_pack.py; issue 38, item 2).

Packed rows must decode to exactly the rows the pass made (every value and type: the
reports are compared byte for byte), keep the blocked times filled in after packing,
and hold each distinct name once for the whole reduce.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, List

import pytest

from tracefuse_stream.analyze import step_pack, step_time
from tracefuse_stream.analyze.analysis import collect_analyses
from tracefuse_stream.analyze.gpu_union import FIGURE_FIELDS, GpuFigures
from tracefuse_stream.analyze.onepass import scan_file
from tracefuse_stream.analyze.step_pack import NameIds, PackedSteps, StepRows
from tracefuse_stream.report.info import collect_info
from tracefuse_synth.run import write_run


def test_the_figures_field_order_is_the_packed_order() -> None:
    assert tuple(f.name for f in dataclasses.fields(GpuFigures)) == ("window_ns", *FIGURE_FIELDS)


def test_packed_rows_decode_to_the_rows_of_the_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(step_pack, "HELD_ROWS", 0)  # every rank packed
    write_run(tmp_path, 4, steps=3, layers=1)
    scans: List[Any] = []
    plans, _rows, _out, _text = collect_info(
        [str(tmp_path)], jobs=1, sections=["collectives"], scans_out=scans
    )
    ids = NameIds()
    seen: List[str] = []  # every name of every rank's rows, repeats kept
    for p, sc in zip(plans, scans):
        assert isinstance(sc.step_time, PackedSteps) and len(sc.step_time) == 3
        fresh = scan_file(p, ("collectives",)).scan
        assert fresh is not None
        assert list(sc.step_time) == fresh.step_time  # every value, before the blocked times
        again = PackedSteps(fresh.step_time, ids)
        assert list(again) == fresh.step_time and again[1] == fresh.step_time[1]
        assert [type(x[1]) for x in fresh.step_time[0].cpu.ops] == [type(x[1]) for x in again[0].cpu.ops]
        for st in fresh.step_time:
            seen += [n for n, _ns, _c in st.cpu.ops] + (
                [n for n, _ns, _c in st.gpu.kernels] if st.gpu else []
            )
    # one string per distinct name across the 4 ranks, not one per rank
    assert len(ids.names) == len(set(ids.names)) and set(seen) <= set(ids.names)
    assert len(seen) >= 4 * len(set(seen))  # each name met on every rank, held once
    a = collect_analyses(plans, scans)[None]
    assert isinstance(a.step_time, StepRows) and len(a.step_time) == 12
    rows = list(a.step_time)
    assert [(st.rank, st.step) for st in rows] == sorted((st.rank, st.step) for st in rows)
    # the blocked times were filled in after packing, and are held packed
    assert all(st.cpu.collective_wait_ns is not None for st in rows)
    fresh_rows = [st for p in plans for st in scan_file(p, ("collectives",)).scan.step_time]  # type: ignore[union-attr]
    step_time.fill_blocked(a.table, {0: fresh_rows})
    assert rows == sorted(fresh_rows, key=lambda st: (st.rank, st.step))


def _json_of(run: Path) -> bytes:
    scans: List[Any] = []
    plans, _rows, _out, _text = collect_info([str(run)], jobs=1, sections=["collectives"], scans_out=scans)
    a = collect_analyses(plans, scans)[None]
    return json.dumps([step_time.to_json(st) for st in a.step_time], sort_keys=True).encode()


def test_the_first_ranks_rows_are_held_as_they_are_until_the_budget_is_spent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_run(tmp_path, 4, steps=3, layers=1)
    monkeypatch.setattr(step_pack, "HELD_ROWS", 7)  # ranks 0 and 1 (3 + 3 rows), then spent
    scans: List[Any] = []
    collect_info([str(tmp_path)], jobs=1, sections=["collectives"], scans_out=scans)
    kinds = [type(sc.step_time) for sc in sorted(scans, key=lambda sc: sc.rank)]
    assert kinds == [list, list, PackedSteps, PackedSteps]
    held = _json_of(tmp_path)
    monkeypatch.setattr(step_pack, "HELD_ROWS", 0)
    assert _json_of(tmp_path) == held  # the same figures, blocked times included, packed or not
    monkeypatch.setattr(step_pack, "HELD_ROWS", 10**6)
    assert _json_of(tmp_path) == held


def test_a_budget_once_overdrawn_holds_nothing_more() -> None:
    b = step_pack.HoldBudget(5)
    assert b.take(3) and not b.take(3) and not b.take(1) and b.left == 0
