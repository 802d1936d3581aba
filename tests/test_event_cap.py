"""A brace never closed: every reader holds at most MAX_EVENT_BYTES of one event.

Without a cap, the exact reader's ijson built the rest of the file as one value (an
unclosed ``{"args": {"a": [1, 2,`` at 10% of a 76 MB rank: 509 MB) and salvage held it
too, copying it again with every read (18 s, quadratic). Now the strict merge stops with
an error that names the file and the event, and salvage keeps the events before it. The
cap is 64 MiB (read/toplevel.py ``MAX_EVENT_BYTES``); these tests lower it to 1 MiB to
run on a small file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracefuse_stream import InputError, merge
from tracefuse_stream.read import batches, readers, salvage

CAP = 1 << 20
GOOD = 2000


def _damaged(path: Path) -> int:
    """GOOD complete events, then one whose brace never closes, then ~4.5 MB of events
    inside it; returns the byte where the unclosed event starts."""
    events = [
        {"ph": "X", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 1000 + i, "dur": 1} for i in range(GOOD)
    ]
    head = b'{"traceEvents": [' + b", ".join(json.dumps(e).encode() for e in events) + b", "
    tail = b", ".join(json.dumps(e).encode() for e in events * 30)
    path.write_bytes(head + b'{"ph": "X", "args": {"a": [1, 2, ' + tail + b"]}")
    return len(head)


@pytest.fixture
def small_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers, "MAX_EVENT_BYTES", CAP)
    monkeypatch.setattr(salvage, "MAX_EVENT_BYTES", CAP)
    monkeypatch.setattr(batches, "MAX_BUFFER", CAP)


def test_the_strict_merge_stops_at_the_cap_naming_file_and_event(tmp_path: Path, small_cap: None) -> None:
    src = tmp_path / "rank0.json"
    _damaged(src)
    assert src.stat().st_size > 3 * CAP
    out = tmp_path / "m.json"
    with pytest.raises(InputError) as err:
        merge([str(src)], str(out), jobs=1)
    e = err.value
    assert e.path == str(src) and e.event_index == GOOD
    assert "does not end within 1 MB" in str(e) and "salvage" in str(e)
    assert not out.exists()


def test_salvage_keeps_the_events_before_it(tmp_path: Path, small_cap: None) -> None:
    src = tmp_path / "rank0.json"
    start = _damaged(src)
    out = tmp_path / "m.json"
    summary = merge([str(src)], str(out), jobs=1, salvage=True)
    (rank,) = summary.ranks
    assert rank.events_in == GOOD
    report = rank.salvage
    assert report is not None and report["truncated_at_byte"] == start
    assert any("does not end within 1 MB" in x for x in report["examples"])
    merged = json.loads(out.read_text())
    assert sorted(e["name"] for e in merged["traceEvents"] if e.get("ph") == "X") == sorted(
        f"op{i}" for i in range(GOOD)
    )


def test_under_the_cap_the_error_is_the_truncation_as_before(tmp_path: Path) -> None:
    src = tmp_path / "rank0.json"
    _damaged(src)
    with pytest.raises(InputError, match="truncated|ends in the middle") as err:
        merge([str(src)], str(tmp_path / "m.json"), jobs=1)
    assert err.value.event_index == GOOD
