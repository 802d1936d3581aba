"""Issue 22 item 2: one reader of a trace file's top level (read/toplevel.py), and every
stage that reads the keys around ``traceEvents`` gets the same keys from it.

For each file (every recorded trace, and crafted ones: keys before the events as in
current Kineto, after them as in Kineto of May 2024 - March 2025, split, a
``deviceProperties`` list of objects after the events, the word ``traceEvents`` nested
in a header value, the bare-array form, gzip and zstd), the expected keys come from
one whole-document exact parse; then discovery's parse of the start, the planner's
strict header read and tail read, the batched and the exact reader's trailers,
salvage's framer and verify's plain reading of the head and tail bytes must all
give exactly those keys, values digit for digit (verify: as plain floats).
"""

from __future__ import annotations

import gzip
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import zstandard

from tracefuse_stream.exactjson import loads_exact
from tracefuse_stream.read.batches import EventBatches
from tracefuse_stream.read.head import scan_head
from tracefuse_stream.read.readers import ExactReader
from tracefuse_stream.read.salvage import Framer, SalvageReport, tolerant_chunks
from tracefuse_stream.read.sources import TraceReader
from tracefuse_stream.read.toplevel import keys_before, read_header, to_plain, trailer_of_file
from tracefuse_stream.verify.passes import run_exact_pass, run_pass

REPO = Path(__file__).resolve().parents[1]
RECORDED = sorted((REPO / "tests" / "data" / "recorded").glob("*/*.json*"))

EV = '{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 12.250, "dur": 2, "args": {"l": [{"a": 1}]}}'
EVENTS = '"traceEvents": [' + ", ".join([EV] * 3) + "]"
BEFORE = '"schemaVersion": 1, "distributedInfo": {"rank": 3, "world_size": 8, "x": [1.50, {"y": 18446744073709551616}]}'
AFTER = (
    '"deviceProperties": [{"id": 0, "name": "GPU", "totalGlobalMem": 85045510144}], '
    '"baseTimeNanoseconds": 1700000000000000000, "traceName": "rank3", "f": -0.0e-3'
)
NESTED = '"note": {"traceEvents": [1, 2], "s": "\\"traceEvents\\": ["}'

CRAFTED = {
    "before": "{" + BEFORE + ", " + EVENTS + "}",
    "after": "{" + EVENTS + ", " + AFTER + "}",
    "split": "{\n " + BEFORE + ",\n " + EVENTS + ",\n " + AFTER + "\n}\n",
    "nested-word": "{" + NESTED + ", " + BEFORE + ", " + EVENTS + ", " + AFTER + "}",
    "empty-events": '{"schemaVersion": 1, "traceEvents": [], "baseTimeNanoseconds": 5}',
    "array": "[" + ", ".join([EV] * 3) + "]",
}


def _crafted(tmp: Path) -> List[Path]:
    out = []
    for name, text in CRAFTED.items():
        data = text.encode()
        for suffix, pack in ((".json", bytes), (".json.gz", gzip.compress), (".json.zst", _zst)):
            p = tmp / f"{name}{suffix}"
            p.write_bytes(pack(data))
            out.append(p)
    return out


def _zst(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


def _text(path: Path) -> bytes:
    r = TraceReader(path)
    try:
        return r.read()
    finally:
        r.close()


def _expected(data: bytes) -> Tuple[str, Dict[str, Any], Dict[str, Any]]:
    """(layout, keys before traceEvents, keys after it) from one whole exact parse."""
    doc = loads_exact(data)
    if isinstance(doc, list):
        return "array", {}, {}
    keys = list(doc)
    at = keys.index("traceEvents")
    return "object", {k: doc[k] for k in keys[:at]}, {k: doc[k] for k in keys[at + 1 :]}


def _same(a: Any, b: Any) -> bool:
    """Equal with the same types and digits (Decimal('1.50') is not Decimal('1.5'))."""
    return repr(a) == repr(b)


def _check_file(path: Path) -> None:
    data = _text(path)
    layout, before, after = _expected(data)

    # the planner's strict read and discovery's one parse of the start
    assert read_header(path) == (layout, before, True)
    assert _same(read_header(path)[1], before)
    head = scan_head(path)
    assert head.ok and head.layout == layout and _same(head.header, before)
    # the keys after the events, from the file's tail
    assert _same(trailer_of_file(path)[0], after)
    # the batched reader and the exact reader (ijson) find the same trailer
    r = TraceReader(path)
    batches = EventBatches(r, layout)
    n = sum(len(b) for b in batches)
    r.close()
    assert _same(batches.trailer, after)
    exact = ExactReader(str(path), TraceReader(path).compression, layout, need_trailer=layout == "object")
    assert sum(len(b) for b in exact.batches()) == n
    exact.close()
    if layout == "object":
        assert _same(exact.trailer, after)
    # salvage's framer, on an intact file
    report = SalvageReport()
    framer = Framer(tolerant_chunks(str(path), report), report, exact=True)
    assert sum(1 for _ in framer.events()) == n
    assert framer.layout == layout and _same(framer.header, {**before, **after})
    assert not report.anything
    # verify (merged outputs: the object form): plain values, from the head and tail
    # bytes its passes keep, on the fast and the exact path
    if layout == "object":
        for run in (run_pass, run_exact_pass):
            res = run(path, _drain)
            assert res.error is None and res.items == n
            assert _same(res.top_level(), (to_plain({**before, **after}), True, True))
        assert _same(keys_before(data), to_plain(before))


def _drain(items: Any) -> None:
    for _ in items:
        pass


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_every_stage_reads_the_same_top_level_crafted(tmp_path, name):
    for path in _crafted(tmp_path):
        if path.name.split(".")[0] == name:
            _check_file(path)


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: f"{p.parent.name}/{p.name[:12]}")
def test_every_stage_reads_the_same_top_level_recorded(path):
    _check_file(path)


def test_recorded_traces_are_there():
    assert len(RECORDED) >= 40


def test_salvage_header_values_exact_first_then_repaired():
    """Salvage decodes a top-level value with the one exact decoder; only a value it
    refuses goes through the repairs (NaN -> null), and one beyond repair is dropped
    and marks the header incomplete."""
    text = (
        '{"a": 1.50, "big": 18446744073709551616, "nan": [NaN, 2.0], "bad": {"x": 1,, },'
        ' "traceEvents": [' + EV + '], "after": {"s": "t\\u00e9"}}'
    ).encode()
    report = SalvageReport()
    framer = Framer(iter([text[:40], text[40:]]), report, exact=True)
    assert sum(1 for _ in framer.events()) == 1
    assert _same(
        framer.header,
        {
            "a": Decimal("1.50"),
            "big": 18446744073709551616,
            "nan": [None, Decimal("2.0")],
            "after": {"s": "té"},
        },
    )
    assert not report.header_complete
