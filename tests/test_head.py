"""Discovery's one parse of a file's start (read/head.py) gives what the planner's
header pass and first-event peek give when they read the file themselves, and leaves
unknown whatever it cannot judge (those stages then read the file, with their errors).

Each case compares :func:`scan_head` with ``read_header`` / ``peek_first_ts`` run
without it, on crafted starts (byte-order marks, metadata first, no timed event,
broken first events, non-traces, compression) and on every real and recorded trace.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import List

import pytest
import zstandard
from conftest import shared_fixtures_dir

from tracefuse_stream.errors import TraceFuseError
from tracefuse_stream.plan.rankplan import RankPlan
from tracefuse_stream.plan.starts import peek_first_ts
from tracefuse_stream.read.head import scan_head
from tracefuse_stream.read.sources import TraceReader
from tracefuse_stream.read.toplevel import read_header

REPO = Path(__file__).resolve().parents[1]
X = '{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": TS, "dur": 2}'
M = '{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "ts": 5, "args": {"name": "p"}}'
HEAD = '"schemaVersion": 1, "distributedInfo": {"rank": 3, "world_size": 8, "x": [1.50, {"y": 18446744073709551616}]}'

#: (file text, expected ``why_not`` or None)
CASES = [
    ("{" + HEAD + ', "traceEvents": [' + X.replace("TS", "12.250") + "]}", None),
    ("\ufeff{" + HEAD + ', "traceEvents": [' + X.replace("TS", "7") + "]}", None),
    (
        '{"traceEvents": ['
        + M
        + ", "
        + M
        + ", "
        + X.replace("TS", "3057737580330.908")
        + '], "baseTimeNanoseconds": 5}',
        None,
    ),
    ('{"traceEvents": [' + M + "]}", None),  # metadata only: empty
    ('{"traceEvents": []}', None),
    ('{"traceEvents": [{"ph": "X", "ts": true}, {"ph": "i", "ts": "5"}, {"ts": 9}]}', None),
    ('{"traceEvents": [{"ph": "X", "ts": nul}]}', None),  # broken first event: unknown
    ('{"traceEvents": [' + M + ', {"ph": "X", "ts": 5', None),  # truncated in the events
    ('{"traceEvents": 5}', None),  # not an array: the header pass names it
    ('{"a": [1, 2', None),  # truncated header
    ('{"a": 1, "b": {"traceEvents": []}}', "a JSON object without traceEvents (keys: a, b)"),
    ("[" + M + ", " + X.replace("TS", "4.000") + "]", None),
    ('[{"ph": "X", "ts": 1}]', None),
    ('[{"name": "no ph", "ts": 1}]', "a JSON array whose first item is not a trace event (no 'ph')"),
    ("[1, 2]", "a JSON array of non-objects"),
    ("[]", "an empty JSON array"),
    ("  5  ", "a single JSON value, not an object or array"),
    ('"text"', "a single JSON value, not an object or array"),
    ("", None),
    ("   \n", None),
    ("hello", None),
    ("\ufeff\ufeff{}", None),
    (" \n" * 70000 + '{"traceEvents": [' + X.replace("TS", "8") + "]}", None),  # white space over chunks
    # headers longer than the parse's first pieces (they start at 8 KiB and double) and
    # than the depth gate's window, with more top-level containers than its hand-offs
    (
        '{"deviceProperties": [' + ", ".join(['{"id": %d, "name": "GPU"}' % i for i in range(4000)]) + "], "
        '"traceEvents": [' + X.replace("TS", "9.5") + "]}",
        None,
    ),  # fmt: skip
    ('{"note": "' + "n" * 300_000 + '", "traceEvents": [' + M + ", " + X.replace("TS", "10") + "]}", None),
    (
        "{"
        + ", ".join('"k%d": {"v": [%d]}' % (i, i) for i in range(3000))
        + ', "traceEvents": ['
        + X.replace("TS", "11")
        + "]}",
        None,
    ),  # fmt: skip
    # the msgspec fast path (read/head.py) must read a header as the ijson walk does:
    # the word traceEvents in a value or a nested key first, repeated keys, exponents,
    # escapes, integers past 64 bits; a header longer than the fast path reads (1 MiB)
    (
        '{"a": "\\"traceEvents\\": [", "b": {"traceEvents": [1]}, "a": -0.0, "e": [1e3, 2E-2, -0],'
        ' "u": "\\u00e9\\ud83d\\ude00", "n": 123456789012345678901234567890, "traceEvents": ['
        + X.replace("TS", "13.5")
        + "]}",
        None,
    ),  # fmt: skip
    ('{"big": "' + "b" * 1_200_000 + '", "traceEvents": [' + X.replace("TS", "14") + "]}", None),
    ('{"bad": NaN, "traceEvents": [' + X.replace("TS", "15") + "]}", None),  # not JSON: the walk judges
]


def _write(tmp: Path, i: int, text: str, codec: str) -> Path:
    data = text.encode("utf-8")
    if codec == "gzip":
        path, data = tmp / f"c{i}.json.gz", gzip.compress(data)
    elif codec == "zstd":
        path, data = tmp / f"c{i}.json.zst", zstandard.ZstdCompressor().compress(data)
    else:
        path = tmp / f"c{i}.json"
    path.write_bytes(data)
    return path


def _check_against_the_stages(path: Path) -> None:
    head = scan_head(path)
    try:
        layout, header, saw_events = read_header(path)
    except TraceFuseError:
        assert not head.ok, path  # the header pass fails: the head must not have judged it
        return
    if not head.ok:
        return  # unknown is always allowed: the stages read the file themselves
    assert saw_events and head.why_not is None
    assert (head.layout, head.header) == (layout, header), path
    reader = TraceReader(path)
    reader.close()
    assert head.compression == reader.compression
    plan = RankPlan(str(path), 0, reader.compression, 0, layout, header, trailer_known=True)
    peek_first_ts(plan)  # no head: the peek's own read
    if head.first_known:
        assert (head.first_ts, head.empty) == (plan.first_ts, plan.empty), path
        assert type(head.first_ts) is type(plan.first_ts)
    else:
        assert (plan.first_ts, plan.empty) == (None, False), path


@pytest.mark.parametrize("codec", ["plain", "gzip", "zstd"])
def test_crafted_starts(codec: str, tmp_path: Path) -> None:
    known = 0
    for i, (text, why_not) in enumerate(CASES):
        path = _write(tmp_path, i, text, codec)
        head = scan_head(path)
        assert head.why_not == why_not, (text, head)
        _check_against_the_stages(path)
        known += head.first_known
    assert known == 14  # the cases with a clean start and event array


def test_heads_of_real_and_recorded_traces() -> None:
    files: List[Path] = sorted((REPO / "tests" / "data" / "recorded").rglob("*.json*"))
    files += sorted((REPO / "fixtures").rglob("*.json*"))
    real = shared_fixtures_dir()
    if real.is_dir():
        files += sorted(real.rglob("*.json*"))
    traces = [f for f in files if scan_head(f).ok]
    assert len(traces) >= 20
    for f in files:
        _check_against_the_stages(f)
    assert all(scan_head(f).first_known for f in traces)
