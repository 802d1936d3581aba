"""Issue 22, item 3: batch cutting (``read/batches.py``) decides by whether a candidate
decodes, never by the text of msgspec's error message.

The tests replace every decode error the stage sees by one with a message that says
nothing ("reworded"): a stage that parsed ``(byte N)`` or "truncated" out of the
message would then hand real traces to the slow exact reader (NotBatchable) or
mis-cut them. The expected events come from Python's ``json`` (conftest's
``strict_loads``), not from the engine.
"""

from __future__ import annotations

import ast
import json
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Tuple

import msgspec
import pytest
from conftest import RECORDED, REPO, read_bytes, strict_loads

import tracefuse_stream.read.batches as batches_mod
from tracefuse_stream.read.batches import EventBatches, NotBatchable
from tracefuse_stream.read.sources import TraceReader


@pytest.fixture
def reworded(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    """Every decode error inside the stage carries the message "reworded"; returns
    the list of original messages replaced (so a test can see the path was taken)."""
    real = batches_mod._decode
    seen: List[str] = []

    def decode(data: Any) -> Any:
        try:
            return real(data)
        except msgspec.DecodeError as e:
            seen.append(str(e))
            raise msgspec.DecodeError("reworded") from None

    monkeypatch.setattr(batches_mod, "_decode", decode)
    return seen


def _read(path: Path, layout: str = "object") -> Tuple[List[Any], Dict[str, Any]]:
    reader = TraceReader(str(path))
    try:
        eb = EventBatches(reader, layout)
        events = [ev for batch in eb for ev in batch]
        assert eb.trailer is not None
        return events, eb.trailer
    finally:
        reader.close()


def _reference(data: bytes) -> Tuple[List[Any], Dict[str, Any]]:
    obj = strict_loads(data, exact=True)
    keys = list(obj)
    return obj["traceEvents"], {k: obj[k] for k in keys[keys.index("traceEvents") + 1 :]}


@pytest.mark.parametrize("n_devices", [3, 8])
def test_trailer_lists_of_objects_without_error_positions(tmp_path, monkeypatch, reworded, n_devices):
    """The keys after the array hold more ``},{`` than the stage tries candidates
    (8 devices: 7), so the array's end must be found in the text itself."""
    monkeypatch.setattr(batches_mod, "CHUNK_BYTES", 1 << 16)
    events = [{"ph": "X", "name": f"op{i}", "pid": 1, "tid": 2, "ts": i, "dur": 1} for i in range(20000)]
    devices = [{"id": d, "name": "GPU", "totalGlobalMem": 2**40 + d} for d in range(n_devices)]
    text = json.dumps({"traceEvents": events, "deviceProperties": devices, "traceName": "x"}, indent=1)
    p = tmp_path / "t.json"
    p.write_text(text)
    got, trailer = _read(p)
    assert got == events
    assert trailer == {"deviceProperties": devices, "traceName": "x"}
    assert reworded, "no candidate failed: the test did not exercise the failure path"


@pytest.mark.parametrize("chunk", [4093, 1 << 20])
def test_real_traces_stay_batched_without_error_positions(monkeypatch, reworded, chunk):
    """Every recorded Kineto trace (both key orders, trailers after the events): the
    json module's events and trailer, with no hand-over."""
    monkeypatch.setattr(batches_mod, "CHUNK_BYTES", chunk)
    files = sorted(p for p in RECORDED.rglob("*.json*") if p.is_file())
    assert len(files) >= 30
    for f in files:
        want, want_trailer = _reference(read_bytes(f))
        got, trailer = _read(f)
        assert len(got) == len(want) and got == want, f.name
        assert trailer == want_trailer, f.name


def test_commas_inside_strings_without_error_positions(tmp_path, monkeypatch, reworded):
    """A ``},{`` inside a name makes a candidate that does not decode (unterminated
    string); the stage must step back to a real boundary, not hand over."""
    monkeypatch.setattr(batches_mod, "CHUNK_BYTES", 700)
    events = [
        {"ph": "X", "name": "a},{b" if i % 7 == 0 else f"op{i}", "ts": Decimal(f"{i}.250"), "args": {"n": i}}
        for i in range(400)
    ]
    body = ",\n".join(json.dumps(e, default=str).replace(f'"{e["ts"]}"', str(e["ts"])) for e in events)
    p = tmp_path / "s.json"
    p.write_text('{"traceEvents": [\n' + body + '\n], "baseTimeNanoseconds": 5}')
    want, want_trailer = _reference(p.read_bytes())
    got, trailer = _read(p)
    assert got == want and [type(e["ts"]) for e in got] == [Decimal] * 400
    assert trailer == want_trailer == {"baseTimeNanoseconds": 5}
    assert reworded


@pytest.mark.parametrize(
    "text",
    [
        b'{"traceEvents": [{"ph": "i", "ts": 1}, {"ph": "i", "ts": NaN}, {"ph": "i", "ts": 2}]}',
        b'{"traceEvents": [{"ph": "i", "ts": 1}, {"ph": "i", "ts": 2}',  # truncated
        b'{"traceEvents": [{"ph": "i", "ts": 1}, {"ph": "i"} {"ph": "i"}], "x": [{"a": 1}, {"b": 2}]}',
    ],
)
def test_bad_input_still_hands_over_without_error_positions(tmp_path, reworded, text):
    p = tmp_path / "b.json"
    p.write_bytes(text)
    with pytest.raises(NotBatchable):
        _read(p)


def test_batches_import_no_message_parsing():
    """The stage does not import the module that maps third-party messages
    (read/jsonerrors.py): nothing it decides can depend on message text."""
    tree = ast.parse((REPO / "tracefuse_stream" / "read" / "batches.py").read_text())
    imported = {
        n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module is not None
    } | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "tracefuse_stream.read.jsonerrors" not in imported
    assert "re" in imported  # the array's end is found by a pattern, then a decode
