"""The reduce's per-step figures held as arrays (issue 38, item 2): each compact form
must read exactly as the dict it replaces (keys, order, values, misses), and keep the
dict where it could not."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

from tracefuse_stream.align.step_spans import StepSpans, step_spans
from tracefuse_stream.analyze.analysis import collect_analyses
from tracefuse_stream.analyze.gpu_devices import GpuDevices, gpu_devices
from tracefuse_stream.analyze.rank_ints import Freezer, RankInts
from tracefuse_stream.report.info import collect_info
from tracefuse_synth.run import write_run

RECORDED = Path(__file__).parent / "data" / "recorded"


def _same(m: Any, d: Dict[Any, Any]) -> None:
    assert list(m) == list(d) and list(m.items()) == list(d.items()) and list(m.values()) == list(d.values())
    assert len(m) == len(d) and dict(m.items()) == d and m == d
    for k in d:
        assert m[k] == d[k] and m.get(k) == d[k] and k in m


def test_rank_ints_read_as_the_dict() -> None:
    f = Freezer()
    d = {3: 7, 0: -1, 2: 2**40}
    a, b = f.freeze(d), f.freeze({3: 1, 0: 2, 2: 3})
    assert isinstance(a, RankInts) and a._keys is b._keys  # one key order shared
    _same(a, d)
    assert a.get(5) is None and 5 not in a and sorted(a.items()) == sorted(d.items())
    for kept in ({}, {1: 2**63}, {1: 1.5}, {1: True}, {"1": 2}):
        assert f.freeze(kept) is kept


def test_step_spans_read_as_the_dict() -> None:
    d = {2: (10, 20), 5: (30, 45), 9: (50, 50)}
    s = step_spans(dict(d))
    assert isinstance(s, StepSpans)
    _same(s, d)
    assert s.get(3) is None and s.get(None) is None and None not in s and 5.0 in s and s[5.0] == (30, 45)
    for kept in ({3: (1, 2), 1: (0, 1)}, {1: (0, 2**63)}, {1: (0.5, 1)}, {}):
        assert step_spans(kept) is kept


def test_gpu_devices_read_as_the_dict() -> None:
    d: Dict[Tuple[Any, int], bytes] = {(7, 30): b"g1", (7, 10): b"g0", ("s", 5): b"g1", (8, 10): b"g0"}
    g = gpu_devices(d)
    assert isinstance(g, GpuDevices) and len(g) == len(d)
    for k, v in d.items():
        assert g.get(k) == v
    assert g.get((7, 11)) is None and g.get((9, 10)) is None
    assert sorted(g.items(), key=str) == sorted(d.items(), key=str)
    assert sorted(set(g.values())) == sorted(set(d.values()))
    for kept in ({(1.0, 3): b"x"}, {(1, 2**63): b"x"}, {(None, 1): b"x"}):
        assert gpu_devices(kept) is kept


def test_a_recorded_run_is_held_compact() -> None:
    scans: List[Any] = []
    plans, _rows, _out, _text = collect_info(
        [str(RECORDED / "ddp4_two_stragglers")], jobs=1, sections=["collectives"], scans_out=scans
    )
    a = collect_analyses(plans, scans)[None]
    assert all(isinstance(s, StepSpans) for s in a.table.steps.values()) and a.table.steps
    assert all(isinstance(sc.steps, StepSpans) for sc in scans)
    rows = [row for row in a.verdict.by_step if row.step is not None]
    assert rows and all(isinstance(row.held, RankInts) and isinstance(row.wait, RankInts) for row in rows)
    assert all(row.own is row.graph.own_late for row in rows if row.graph is not None)


def test_a_gpu_run_holds_its_devices_compact(tmp_path: Path) -> None:
    write_run(tmp_path, 4, steps=3, layers=1)
    scans: List[Any] = []
    plans, _rows, _out, _text = collect_info(
        [str(tmp_path)], jobs=1, sections=["collectives"], scans_out=scans
    )
    a = collect_analyses(plans, scans)[None]
    segs = list(a.table.timelines.values())
    assert len(segs) == 4 and all(isinstance(s.gpu_dev, GpuDevices) and len(s.gpu_dev) > 0 for s in segs)
    # each rank's devices answer for its GPU collectives: the why found a GPU for every stretch
    text = json.dumps(list(a.breakdown))
    assert "GPU ?" not in text and sorted(set(re.findall(r'"(GPU [^"]*)"', text))) == [
        f"GPU {k}" for k in range(4)
    ]
