"""The importer model (tests/importer_model.py) follows the rules it stands for.

Each case is one rule of ../shared/TRACE_FORMAT_FACTS.md on a small hand-made trace,
so a model that stopped seeing a property (and so would let a broken merge pass the
tests that rely on it) fails here. Where trace_processor is installed, the same traces
are loaded there too and must give the same view.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest
from importer_model import model_cross_rank_flows, model_view
from perfetto import find_trace_processor, view


def _write(tmp_path: Path, events: List[Dict[str, Any]], name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def _x(pid: Any, tid: Any, ts: Any, dur: Any, name: str = "a") -> Dict[str, Any]:
    return {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}


def _same_in_trace_processor(path: Path) -> None:
    if find_trace_processor():
        tp, m = view(path), model_view(path)
        assert (tp.all_slices, tp.all_flows, tp.error_stats) == (m.all_slices, m.all_flows, m.error_stats)


def test_empty_names_are_import_errors(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        [
            _x(1, 7, 1, 1),
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": ""}},
            {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "p"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 8, "args": {"name": "ok"}},
        ],
    )
    v = model_view(p)
    assert v.error_stats == {"json_parser_failure": 1}
    assert list(v.process_names.values()) == ["p"]
    _same_in_trace_processor(p)


def test_pids_are_uint32_and_strings_are_their_own_processes(tmp_path: Path) -> None:
    events = [_x(-5, 1, 1, 1), _x(0, 1, 3, 1), _x(2**32, 1, 5, 1), _x("6583", 1, 7, 1), _x(6583, 1, 9, 1)]
    v = model_view(_write(tmp_path, events))
    # -5, 0 and 2**32 are one process (0); "6583" is not 6583
    assert sorted(v.slices_by_upid.values()) == [1, 1, 3]


def test_flows_bind_by_id_cat_name_across_processes(tmp_path: Path) -> None:
    """Two ranks using the same flow id: the second "s" is ignored and rank 1's "f"
    draws an arrow from rank 0 (the cross-rank arrow the merge must never write)."""
    events = []
    for rank in (0, 1):
        pid = (rank + 1) * 10000 + 1
        events += [
            _x(pid, 1, 10 + rank, 5, "launch"),
            _x(pid, 2, 20 + rank, 5, "kernel"),
            {"ph": "s", "id": 7, "cat": "ac2g", "name": "ac2g", "pid": pid, "tid": 1, "ts": 11 + rank},
            {
                "ph": "f",
                "id": 7,
                "cat": "ac2g",
                "name": "ac2g",
                "pid": pid,
                "tid": 2,
                "ts": 21 + rank,
                "bp": "e",
            },
        ]
    p = _write(tmp_path, events)
    v = model_view(p)
    assert v.all_flows == 2
    rows, errors = model_cross_rank_flows(p)
    assert [(r["out_rank"], r["in_rank"]) for r in rows] == [("0", "1")]
    assert errors == []
    _same_in_trace_processor(p)


def test_flow_end_without_bp_binds_the_next_slice(tmp_path: Path) -> None:
    events = [
        _x(1, 1, 10, 5, "s-host"),
        _x(1, 2, 30, 5, "next"),
        {"ph": "s", "id": 1, "cat": "c", "name": "c", "pid": 1, "tid": 1, "ts": 12},
        {"ph": "f", "id": 1, "cat": "c", "name": "c", "pid": 1, "tid": 2, "ts": 25},
    ]
    assert model_view(_write(tmp_path, events)).all_flows == 1


@pytest.mark.parametrize(
    "second, errors",
    [((12, 3), 0), ((12, 10), 1), ((15, 5), 0)],  # nested, partial overlap, abutting
)
def test_partial_overlap_is_counted(tmp_path: Path, second: Any, errors: int) -> None:
    events = [_x(1, 1, 10, 5), _x(1, 1, *second)]
    v = model_view(_write(tmp_path, events))
    assert v.error_stats.get("slice_spill_overlapping_complete_event", 0) == errors


def test_epoch_scale_doubles_lose_abutment(tmp_path: Path) -> None:
    """At epoch µs a double resolves 0.25 µs: slices that abut at ns precision can come
    out overlapping, while the same slices at small ts do not (why the merge keeps ts small)."""
    epoch = 1_700_000_000_000_000
    small = [_x(1, 1, "10.000", "0.300"), _x(1, 1, "10.300", "1.000")]
    big = [_x(1, 1, f"{epoch}.000", "0.300"), _x(1, 1, f"{epoch}.300", "1.000")]
    ps, pb = tmp_path / "small.json", tmp_path / "big.json"
    ps.write_text(_numbers(small))
    pb.write_text(_numbers(big))
    assert model_view(ps).error_stats == {}
    assert model_view(pb).error_stats == {"slice_spill_overlapping_complete_event": 1}


def _numbers(events: List[Dict[str, Any]]) -> str:
    """JSON with the string ts/dur written as bare numbers (their digits kept)."""
    out = json.dumps({"traceEvents": events})
    for e in events:
        for k in ("ts", "dur"):
            out = out.replace(f'"{k}": "{e[k]}"', f'"{k}": {e[k]}')
    return out
