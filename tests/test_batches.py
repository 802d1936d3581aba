"""The batched reading stage (``tracefuse_stream.read.batches``) and its hand-over to the
exact ijson reader.

The reference for every event list is Python's own ``json`` with floats parsed as
Decimal (conftest's ``strict_loads(exact=True)``), never the engine. Batches must give
the same events, in order, with the same numbers (digits included), the same
trailer keys, for every cut position; anything they do not handle must raise
NotBatchable, and the merge must then produce what the exact reader produces.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from conftest import RECORDED, events_of, json_text, load_output, read_bytes, require_shared, strict_loads
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracefuse_stream.pipeline.stream as stream_mod
import tracefuse_stream.read.batches as batches_mod
from tracefuse_stream import merge
from tracefuse_stream.read.batches import EventBatches, NotBatchable
from tracefuse_stream.read.sources import TraceReader


def read_batches(path: Path, layout: str = "object") -> Tuple[List[Any], Dict[str, Any]]:
    reader = TraceReader(str(path))
    try:
        eb = EventBatches(reader, layout)
        events = [ev for batch in eb for ev in batch]
        return events, eb.trailer
    finally:
        reader.close()


def reference(data: bytes) -> Tuple[List[Any], Dict[str, Any]]:
    """Events and the keys written after ``traceEvents``, by the json module."""
    obj = strict_loads(data, exact=True)
    if isinstance(obj, list):
        return obj, {}
    keys = list(obj)
    after = {k: obj[k] for k in keys[keys.index("traceEvents") + 1 :]}
    return obj["traceEvents"], after


def same(a: Any, b: Any) -> bool:
    """Equal values AND equal types/digits (Decimal('1.50') != Decimal('1.5') here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()
    return a == b


@pytest.fixture
def small_chunks(monkeypatch):
    """Cut often: every few hundred bytes instead of every MB."""

    def set_chunk(n: int) -> None:
        monkeypatch.setattr(batches_mod, "CHUNK_BYTES", n)

    return set_chunk


# --------------------------------------------------------------------------- real traces
def _real_files(source: str) -> List[Path]:
    """``recorded``: every trace in tests/data/recorded (gzip and plain, pretty-printed
    Kineto); ``shared``: the GPU traces and the 4-rank job of ../shared/fixtures."""
    if source == "recorded":
        files = sorted(p for p in RECORDED.rglob("*.json*") if p.is_file())
        assert len(files) >= 30, files
        return files
    shared = require_shared()
    files = sorted((shared / "real").glob("*.json.gz"))
    files += sorted((shared / "ddp4_transformer_tb").glob("*.json.gz"))
    assert len(files) >= 9, files
    return files


@pytest.mark.parametrize("source", ["recorded", "shared"])
@pytest.mark.parametrize("chunk", [1 << 20, 3001])
def test_real_traces_batches_equal_the_json_module(source, small_chunks, chunk):
    """Every real trace (both key orders, epoch-us ts, uint64 Comms Id, string pids):
    same events, same digits, same trailer, at several cut spacings."""
    small_chunks(chunk)
    for f in _real_files(source):
        want_events, want_trailer = reference(read_bytes(f))
        got_events, got_trailer = read_batches(f)
        assert len(got_events) == len(want_events), f.name
        assert same(got_events, want_events), f.name
        assert same(got_trailer, want_trailer), f.name


# --------------------------------------------------------------------------- cut positions
def _trace_text(events: List[Dict[str, Any]], sep: str, trailer: Dict[str, Any]) -> bytes:
    head = '{"schemaVersion": 1, "meta": {"traceEvents": [{"not": "these"}]},\n "traceEvents": [\n'
    body = sep.join(json_text(e) for e in events)
    tail = "\n]" + "".join(f', "{k}": {json.dumps(v)}' for k, v in trailer.items()) + "}\n"
    return (head + body + tail).encode()


TRICKY_NAMES = [
    "plain",
    "a},{b",
    'q"},\n  {"ph": "X"',
    "x}, {y}, {z}, {w",
    "back\\slash},{",
    "uni \u00e9\u4e2d\U0001f600 },{",
    "",
]

tricky_event = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(["X", "i", "s", "f"]),
        "name": st.one_of(st.sampled_from(TRICKY_NAMES), st.text(max_size=12)),
        "pid": st.one_of(st.integers(-5, 2**40), st.sampled_from(["Spans", ""])),
        "tid": st.integers(0, 2**32 - 1),
        "ts": st.decimals(min_value=0, max_value=10**13, places=3, allow_nan=False),
        "args": st.dictionaries(
            st.sampled_from(["External id", "Comms Id", "x", "n"]),
            st.one_of(
                st.integers(0, 2**80),
                st.decimals(allow_nan=False, allow_infinity=False),
                st.text(max_size=6),
                st.lists(st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), max_size=2),
            ),
            max_size=3,
        ),
    }
)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    events=st.lists(tricky_event, min_size=1, max_size=40),
    sep=st.sampled_from([",\n", ", ", ",", " ,\n\t", ",\n  "]),
    chunk=st.integers(16, 600),
    trailer=st.sampled_from(
        [{}, {"baseTimeNanoseconds": 1700000000000000000}, {"distributedInfo": {"rank": 3}, "x": [1.50]}]
    ),
)
def test_any_cut_position_gives_the_same_events(tmp_path, monkeypatch, events, sep, chunk, trailer):
    """Names full of ``},{`` (inside strings), nested objects in args, big ints and
    long decimals, any separator, any chunk size: the events are the json module's,
    or the stage hands over (NotBatchable) — never different events."""
    monkeypatch.setattr(batches_mod, "CHUNK_BYTES", chunk)
    text = _trace_text(events, sep, trailer)
    p = tmp_path / "t.json"
    p.write_bytes(text)
    want_events, want_trailer = reference(text)
    try:
        got_events, got_trailer = read_batches(p)
    except NotBatchable:
        # allowed only when candidate cuts fall inside an event: "}," in a string, or a
        # list of objects in its args (three such candidates in a row end the stage)
        assert any(
            e["name"].count("},") + e["name"].count("}, ") >= 1
            or any(isinstance(v, list) and len(v) > 1 for v in e["args"].values())
            for e in events
        )
        return
    assert same(got_events, want_events)
    assert same(got_trailer, want_trailer)


def test_ordinary_names_never_hand_over(tmp_path, small_chunks):
    """Kineto-like text with no braces in strings is always batched, at any cut."""
    events = [
        {
            "ph": "X",
            "name": f"aten::op{i}",
            "pid": 7,
            "tid": 1,
            "ts": Decimal(f"{i}.125"),
            "args": {
                "External id": i,
                "Comms Id": 2**64 - 1 - i,
                "dims": [[1, 2], [3]],
                "obj": {"k": {"deep": i}},
            },
        }
        for i in range(300)
    ]
    text = _trace_text(events, ",\n  ", {"deviceProperties": []})
    p = tmp_path / "k.json"
    p.write_bytes(text)
    want, want_tr = reference(text)
    for chunk in (17, 64, 100, 333, 1000, 4096):
        small_chunks(chunk)
        got, tr = read_batches(p)
        assert same(got, want) and same(tr, want_tr), chunk


def test_top_level_key_is_found_after_a_nested_one(tmp_path):
    text = (
        b'{"a": "traceEvents", "meta": {"traceEvents": [{"x": 1}]}, "traceEvents" :\n [{"ph": "i", "ts": 1.5}, '
        b'{"ph": "i", "ts": 2}], "after": 1}'
    )
    p = tmp_path / "n.json"
    p.write_bytes(text)
    got, tr = read_batches(p)
    assert same(got, [{"ph": "i", "ts": Decimal("1.5")}, {"ph": "i", "ts": 2}])
    assert tr == {"after": 1}


def test_array_form(tmp_path):
    p = tmp_path / "a.json"
    p.write_bytes(b'  [{"ph": "X", "ts": 1.000, "dur": 2}, {"ph": "i", "ts": 18446744073709551616}]\n')
    got, tr = read_batches(p, "array")
    assert same(got, [{"ph": "X", "ts": Decimal("1.000"), "dur": 2}, {"ph": "i", "ts": 2**64}])
    assert tr == {}


@pytest.mark.parametrize(
    "text, layout",
    [
        (b'{"traceEvents": [{"ph": "i", "ts": 1}, {"ph": "i", "ts": 2}', "object"),  # truncated
        (b'{"traceEvents": [{"ph": "i", "ts": NaN}]}', "object"),
        (b'{"traceEvents": [{"ph": "i", "name": "\xff\xfe"}]}', "object"),  # invalid UTF-8
        (b'{"traceEvents": [{"ph": "i", "name": "\\ud800"}]}', "object"),  # lone surrogate
        (b'{"traceEvents": [{"ph": "i", "name": "a\x01b"}]}', "object"),  # raw control char
        (b'{"traceEvents": {"ph": "i"}}', "object"),  # not an array
        (b'{"other": 1}', "object"),
        (b'[{"ph": "i", "ts": 1}, {"ph": "i", "ts": 2}', "array"),  # open array (Chrome allows)
    ],
)
def test_what_the_stage_hands_over(tmp_path, text, layout):
    p = tmp_path / "b.json"
    p.write_bytes(text)
    with pytest.raises(NotBatchable):
        read_batches(p, layout)


def test_invalid_content_deep_in_a_big_file_hands_over_quickly(tmp_path, small_chunks):
    """A bad byte far from the cut: one failed decode, then NotBatchable (not a
    search through ever larger buffers)."""
    small_chunks(4096)
    evs = ",\n".join('{"ph": "X", "name": "op", "ts": %d.5, "dur": 1}' % i for i in range(20000))
    bad = evs[:50000] + '{"ph": "i", "ts": NaN},\n' + evs[50000:].lstrip(",\n")
    p = tmp_path / "nan.json"
    p.write_bytes(('{"traceEvents": [' + bad + "]}").encode())
    calls = []
    real = batches_mod._decode

    def counting(data):
        calls.append(len(data))
        return real(data)

    batches_mod._decode = counting
    try:
        with pytest.raises(NotBatchable):
            read_batches(p)
    finally:
        batches_mod._decode = real
    assert sum(calls) < 200_000, f"{len(calls)} decodes, {sum(calls)} bytes"


# --------------------------------------------------------------------------- in the merge
def _force_exact(monkeypatch):
    """Every rank hands over from the batched reader to the exact one at once."""

    class Refusing(stream_mod.BatchedReader):
        def batches(self):
            raise NotBatchable("forced by the test")
            yield  # a generator, like the real one

    monkeypatch.setattr(stream_mod, "BatchedReader", Refusing)


@pytest.mark.parametrize("codec", ["json", "json.gz", "json.zst"])
def test_batched_merge_equals_the_exact_reader(tmp_path, monkeypatch, ddp4_job, codec):
    """A real 4-rank job (recorded, and the shared one): the batched merge and the
    exact (ijson) merge give the same events, numbers digit for digit, same headers."""
    inputs = [str(p) for p in ddp4_job.files]
    fast = tmp_path / f"fast.{codec}"
    merge(inputs, str(fast), include_pyfunc=True)
    with monkeypatch.context() as m:
        _force_exact(m)
        exact = tmp_path / f"exact.{codec}"
        merge(inputs, str(exact), include_pyfunc=True, verify=False)  # compared below
    a, b = load_output(fast, exact=True), load_output(exact, exact=True)
    assert len(events_of(a)) == len(events_of(b)) > 4000
    assert same(events_of(a), events_of(b))
    ha, hb = a["tracefuse"], b["tracefuse"]
    for r in ha["ranks"]:
        for k in ("header", "pid_map", "events_in", "events_out", "shift_ns"):
            if k in ha["ranks"][r]:
                assert same(ha["ranks"][r][k], hb["ranks"][r][k]), (r, k)


def test_real_single_rank_traces_batched_equals_exact(tmp_path, monkeypatch, real_dir):
    files = sorted(str(p) for p in real_dir.glob("*.json.gz"))
    fast = tmp_path / "fast.json"
    merge(files, str(fast), include_pyfunc=True, rank_from="order")
    with monkeypatch.context() as m:
        _force_exact(m)
        exact = tmp_path / "exact.json"
        merge(files, str(exact), include_pyfunc=True, rank_from="order", verify=False)  # compared below
    a, b = load_output(fast, exact=True), load_output(exact, exact=True)
    assert same(events_of(a), events_of(b))


def test_hand_over_mid_file_gives_the_exact_result_and_honest_progress(tmp_path):
    """The open array form is batched up to its end, then handed over: the merge still
    succeeds, events counted once, and progress adds up to the file's size."""
    evs = [{"ph": "X", "name": f"k{i}", "pid": 1, "tid": 2, "ts": i + 0.5, "dur": 1} for i in range(30000)]
    p = tmp_path / "open.json"
    p.write_bytes(("[" + ",\n".join(json.dumps(e) for e in evs)).encode())  # no closing ']'
    from tracefuse_stream.pipeline.stream import RankTask, stream_rank
    from tracefuse_stream.plan.planner import plan_inputs
    from tracefuse_stream.select.filters import EventFilter

    plan = plan_inputs([str(p)])[0]
    seen: List[int] = []
    res = stream_rank(
        RankTask(plan, EventFilter(include_pyfunc=True), "plain", str(tmp_path / "frag")), seen.append
    )
    assert res.events_in == 30000 and res.events_out == 30000 + res.metadata_out
    assert sum(seen) == p.stat().st_size
    out = merge([str(p)], str(tmp_path / "o.json"))
    assert out.ranks[0].events_in == 30000


@pytest.mark.parametrize("n_devices", [2, 8])
def test_trailer_with_object_lists_stays_batched(tmp_path, n_devices):
    """Keys after the event array whose lists of objects contain '},{' (Kineto's
    deviceProperties in the old layout, this tool's own header) are the trailer, not a
    reason to hand the rank to the slow exact reader."""
    from tracefuse_stream.read.batches import EventBatches
    from tracefuse_stream.read.sources import TraceReader

    # more than one read chunk (1 MB), so the trailer arrives in a later chunk and is cut
    events = [{"ph": "X", "name": f"op{i}", "pid": 1, "tid": 2, "ts": i, "dur": 1} for i in range(30000)]
    devices = [{"id": d, "name": "GPU", "totalGlobalMem": 2**40 + d} for d in range(n_devices)]
    text = json.dumps(
        {"traceEvents": events, "deviceProperties": devices, "traceName": "x"}, separators=(",", ":")
    )
    p = tmp_path / "t.json"
    p.write_text(text)
    b = EventBatches(TraceReader(p), "object")
    got = [e for batch in b for e in batch]
    assert got == events
    assert b.trailer == {"deviceProperties": devices, "traceName": "x"}
