"""Side passes read projected events (``iter_event_batches(fields=...)``): dicts of only
the keys a pass needs, decoded several times faster. They must be exactly the full
events restricted to those keys, on real traces, in both layouts; anything odd hands
over to the exact reader (whole events, a superset) instead of being misread."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List

import orjson
import pytest
from conftest import _decimal_default, shared_fixtures_dir

from tracefuse_stream.read.events import (
    KernelFields,
    StepFields,
    TimedFields,
    decode_args,
    iter_event_batches,
)

RECORDED = Path(__file__).resolve().parent / "data" / "recorded"
FILES = sorted(RECORDED.glob("*/*.json*"))
SHARED = sorted((shared_fixtures_dir() / "real").glob("*.json.gz")) if shared_fixtures_dir().is_dir() else []


def _keys(fields: type) -> set:
    return set().union(*(getattr(c, "__annotations__", {}).keys() for c in fields.__mro__))


def _all(path: Path, **kw: Any) -> List[Dict[str, Any]]:
    return [e for b in iter_event_batches(path, **kw) for e in b]


@pytest.mark.parametrize("path", FILES + SHARED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_projection_is_the_full_event_restricted(path):
    full = _all(path)
    assert len(full) > 10
    for fields in (TimedFields, StepFields, KernelFields):
        keys = _keys(fields)
        proj = _all(path, fields=fields)
        assert len(proj) == len(full)
        for a, b in zip(full, proj):
            if "args" in b:
                b = {**b, "args": decode_args(b)}
            assert b == {k: a[k] for k in keys if k in a}


def test_bare_array_and_odd_items(tmp_path):
    src = RECORDED / "natural_order" / "rank_2.json"
    events = json.loads(src.read_bytes(), parse_float=Decimal)["traceEvents"]
    bare = tmp_path / "bare.json"
    bare.write_bytes(orjson.dumps(events, default=_decimal_default))
    assert _all(bare, fields=StepFields) == [
        {k: e[k] for k in ("ph", "name", "ts", "dur") if k in e} for e in events
    ]
    odd = tmp_path / "odd.json"  # a non-object item: the exact reader takes over, whole events
    odd.write_bytes(orjson.dumps({"traceEvents": events[:5] + [7] + events[5:]}, default=_decimal_default))
    got = _all(odd, fields=StepFields)
    assert len(got) == len(events) + 1 and 7 in got


def test_side_passes_read_bare_array_traces(tmp_path):
    """Issue 11: `--steps`, `info` and `--align` used to see nothing in a bare
    ``[...]`` trace. The bare-array copy of a real recorded rank (its own events, the
    same file otherwise) gives the same steps, span and events."""
    from tracefuse_stream.plan.extent import scan_rank
    from tracefuse_stream.plan.planner import plan_inputs
    from tracefuse_stream.select.window import list_steps

    src = sorted((RECORDED / "ddp4").glob("*.json.gz"))[0]
    import gzip

    doc = json.loads(gzip.decompress(src.read_bytes()), parse_float=Decimal)
    bare = tmp_path / "bare.json"
    bare.write_bytes(orjson.dumps(doc["traceEvents"], default=_decimal_default))
    steps = list_steps(src)
    assert steps and list_steps(bare) == steps
    obj, arr = plan_inputs([str(src)])[0], plan_inputs([str(bare)], rank_from="order")[0]
    a, b = scan_rank(obj), scan_rank(arr)
    assert a.events == b.events == len(doc["traceEvents"])
    # the bare copy has no base: its relative ts read as epoch us, so compare spans
    assert (a.last_ns - a.first_ns) == (b.last_ns - b.first_ns) > 0
