"""What the reduce keeps of each rank on disk, not in memory (issue 38, item 2).

The why's segment rows and the step figures go to one temporary file per ``info``
pass (analyze/unit_pack.py ``Spill``); every stretch read back must be the rows the
pass made, two spills must never be confused in the cache of decompressed blocks, and
a spilled unit must pickle as its blocks (a Dask or worker hand-over). The judged
graphs drop what only the verdict reads (analyze/graph.py ``compact``).
"""

from __future__ import annotations

import gc
import os
import pickle
import tempfile
from array import array
from pathlib import Path
from typing import Any, List

import pytest

from tracefuse_stream.analyze import step_pack
from tracefuse_stream.analyze.analysis import collect_analyses
from tracefuse_stream.analyze.onepass import scan_file
from tracefuse_stream.analyze.step_pack import PackedSteps
from tracefuse_stream.analyze.unit_pack import (
    BLOCK_ROWS,
    ROW_FIELDS,
    Spill,
    SpilledBlocks,
    pack_unit,
    segment_starts,
    spill_unit,
    unit_rows,
)
from tracefuse_stream.errors import OutputError
from tracefuse_stream.report.info import collect_info
from tracefuse_synth.run import write_run


def _rows(n: int, salt: int) -> array[int]:
    """``n`` rows of 14 int64s, in segment order (3 rows a segment), values from ``salt``."""
    flat = array("q")
    for k in range(n):
        flat.extend([k // 3] + [salt * 1_000_003 + k * 17 + f for f in range(ROW_FIELDS - 1)])
    return flat


def test_a_spilled_unit_reads_back_every_stretch_as_in_memory() -> None:
    flat = _rows(2 * BLOCK_ROWS + 40, 1)  # three blocks, the last one short
    n_cuts = (len(flat) // ROW_FIELDS) // 3 + 2
    unit = (segment_starts(flat, n_cuts), pack_unit(flat))
    spill = Spill()
    spilled = spill_unit(unit, spill)
    assert isinstance(spilled[1], SpilledBlocks) and len(spilled[1]) == 3
    assert list(spilled[1]) == list(unit[1])  # the very blocks
    mid, edge = n_cuts // 2, BLOCK_ROWS // 3  # segment ``edge`` holds the first block's last row
    stretches = [(0, 1), (0, n_cuts - 1), (edge - 2, edge + 2), (mid - 5, mid + 5), (mid, mid + 1)]
    for i, j in stretches + [(n_cuts - 16, n_cuts - 1), (5, 5)]:
        assert list(unit_rows(spilled, i, j)) == list(unit_rows(unit, i, j)), (i, j)
    assert spill.end == sum(len(b) for b in unit[1])


def test_two_spills_are_never_confused_in_the_block_cache() -> None:
    a = spill_unit((segment_starts(_rows(30, 1), 12), pack_unit(_rows(30, 1))), Spill())
    b = spill_unit((segment_starts(_rows(30, 2), 12), pack_unit(_rows(30, 2))), Spill())
    first_a, first_b = list(unit_rows(a, 0, 10)), list(unit_rows(b, 0, 10))
    assert first_a != first_b  # both blocks sit at offset 0 of their own file
    assert first_a[0][1] == 1_000_003 and first_b[0][1] == 2_000_006
    assert list(unit_rows(a, 0, 10)) == first_a  # from the cache, still its own


def test_a_spilled_unit_pickles_as_its_blocks_and_the_file_goes_with_it() -> None:
    flat = _rows(BLOCK_ROWS + 1, 3)
    blocks = pack_unit(flat)
    spill = Spill()
    assert spill.fd == -1  # no file before the first block
    _starts, spilled = spill_unit((segment_starts(flat, 90), blocks), spill)
    fd = spill.fd
    assert pickle.loads(pickle.dumps(spilled)) == blocks
    assert os.fstat(fd).st_nlink == 0  # never a name on disk
    del spill, spilled
    gc.collect()
    try:
        os.fstat(fd)
        still_open = True
    except OSError:
        still_open = False
    assert not still_open  # closed with the last unit that read from it


def test_no_room_for_the_spill_is_an_output_error_naming_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = tmp_path / "no-such-dir"
    monkeypatch.setattr(tempfile, "tempdir", str(gone))
    with pytest.raises(OutputError) as e:
        Spill().put(pack_unit(_rows(4, 1)))
    assert str(gone) in str(e.value) and "TMPDIR" in str(e.value)


def test_the_pass_spills_the_rows_and_the_why_reads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(step_pack, "HELD_ROWS", 0)  # the step figures packed too (analyze/step_pack.py)
    write_run(tmp_path, 4, steps=3, layers=1)
    scans: List[Any] = []
    plans, _rows_, _out, _text = collect_info(
        [str(tmp_path)], jobs=1, sections=["collectives"], scans_out=scans
    )
    for p, sc in zip(plans, scans):
        fresh = scan_file(p, ("collectives",)).scan
        assert fresh is not None and sc.timeline is not None
        units = list(sc.timeline.cpu.values()) + list(sc.timeline.gpu.values())
        assert units and all(isinstance(u[1], SpilledBlocks) for u in units)
        assert isinstance(sc.step_time, PackedSteps)
        assert list(sc.step_time) == fresh.step_time
        for key, unit in sc.timeline.cpu.items():
            mine = fresh.timeline.cpu[key]
            n = len(sc.timeline.cuts)
            assert list(unit[0]) == list(mine[0])
            assert list(unit_rows(unit, 0, n - 1)) == list(unit_rows(mine, 0, n - 1))
    (a,) = collect_analyses(plans, scans, 1).values()
    graphs = [row.graph for row in a.verdict.by_step if row.graph is not None]
    assert len(graphs) == 3
    for g in graphs:  # judged: only the step-end offsets stay (the why's tails)
        assert g.pred == {} and g.own == {}
        assert sorted(g.offset) == sorted((r, -1) for r in g.order) and len(g.order) == 4
        assert g.path and g.end_ns > g.start_ns
