"""``info``'s single pass on the compiled kernel's walk (``_kernel.c``, ``walk_event``):
each event's top level read token by token, what is nested only delimited.

What must hold: the walk's counts, time span and selected events are exactly those
of the validating scan and of the pure-Python path, on Kineto events, odd events
(escapes, non-ASCII, exponents, repeated keys, ``ts`` as text, huge numbers) and
random ones, cut at every buffer boundary; top-level damage is still reported
(``BROKEN``) while damage nested in ``args`` is the merge's to report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracefuse_stream.read.batches as batches_mod
from tracefuse_stream import native
from tracefuse_stream.analyze.onepass import steps_us
from tracefuse_stream.read.scan import ScanSelection
from tracefuse_stream.report.info import collect_info

pytestmark = pytest.mark.skipif(not native.available(), reason="the compiled kernel is not built here")

BASE = 1790857026000000000
EVENTS = [
    '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 3057737580330.5, "dur": 12.25,'
    ' "args": {"External id": 3, "Input Dims": [[2, 3], []], "s": "}]{\\"x"}}',
    '{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": 7, "tid": 7, "ts": 3057737580300,'
    ' "dur": 100.5, "args": {}}',
    '{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", "pid": 0,'
    ' "tid": 7, "ts": 3057737580400.123, "dur": 55.000, "args": {"correlation": 9, "stream": 7}}',
    '{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 7, "tid": 8, "ts": 3057737580390,'
    ' "dur": 3, "args": {"Collective name": "allreduce", "Process Group Name": "0", "Group size": 1}}',
    '{"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "pid": 7, "tid": 9, "ts": 3057737580395,'
    ' "dur": 30, "args": {"Ev Idx": 4}}',
    '{"ph": "X", "cat": "cpu_op", "name": "na\\u00efve \\"quoted\\"", "pid": 7, "tid": 7, "ts": 3057737580331,'
    ' "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "naïve", "pid": 7, "tid": 7, "ts": 3057737580332, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "late", "pid": 7, "tid": 7, "ts": 3057737590000, "dur": 1e3}',
    '{"ph": "X", "cat": "cpu_op", "name": "dup", "pid": 7, "tid": 7, "ts": 3057737580333, "ts": 3057737500000}',
    '{"ph": "X", "cat": "cpu_op", "name": "text ts", "pid": 7, "tid": 7, "ts": "3057737000000", "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "neg dur", "pid": 7, "tid": 7, "ts": 3057737580334, "dur": -5}',
    '{"ph": "X", "cat": "cpu_op", "name": "early", "pid": 7, "tid": 7, "ts": 3057737580000.000000001}',
    '{"ph": "i", "s": "t", "name": "no time", "pid": 7, "tid": 7, "nested": [{"ts": 1}, [true, false, null]]}',
    '{"ph": "M", "name": "process_name", "pid": 7, "ts": 0, "args": {"name": "rank 0"}}',
    '{ "ph" : "X" ,\n  "cat":"cpu_op","name":"spaced","pid":7,"tid":7,"ts":3057737580335 , "dur" : 2 }',
    "{}",
    '{"ph": ["X"], "cat": "kernel", "name": "ncclKernel", "pid": 0, "tid": 7, "ts": 3057737580336, "dur": 2}',
]


def _rank_file(folder: Path, events: List[str], name: str = "host.0.pt.trace.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    head = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "baseTimeNanoseconds": BASE}
    text = json.dumps(head)[:-1] + ', "traceEvents": [\n' + ",\n".join(events) + "\n]}"
    path.write_text(text, encoding="utf-8")
    return path


def _info(folder: Path) -> Tuple[Any, Any]:
    """What ``info --collectives --steps`` learns: the rows, and per file the collective
    events and step spans its single pass kept."""
    scans: List[Any] = []
    plans, rows, out, _ = collect_info([str(folder)], sections=["collectives", "steps"], scans_out=scans)
    kept = [([e._asdict() for e in sc.events], steps_us(sc)) for sc in scans]
    return out["ranks"], kept


def _three_ways(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The walk (info's default), the validating scan, and no kernel: one answer."""
    walk = _info(folder)
    monkeypatch.setattr("tracefuse_stream.analyze.onepass.INFO_SELECTION", _validating())
    assert _info(folder) == walk
    monkeypatch.setenv("TRACEFUSE_KERNEL", "0")
    assert _info(folder) == walk
    monkeypatch.delenv("TRACEFUSE_KERNEL")
    monkeypatch.undo()
    return walk


def _validating() -> Any:
    import dataclasses

    from tracefuse_stream.analyze.onepass import INFO_SELECTION

    return dataclasses.replace(INFO_SELECTION, validate=True)


def test_walk_counts_times_and_keeps_what_the_validating_scan_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "run"
    _rank_file(folder, EVENTS * 3)
    walked = 0
    real_scan = native.kernel.scan  # type: ignore[union-attr]

    def counting_scan(*args: Any) -> Any:
        nonlocal walked
        out = real_scan(*args)
        walked += out[5] if (args[0].extremes and not args[0].validate) else 0  # the walk's events
        return out

    monkeypatch.setattr(native.kernel, "scan", counting_scan)
    (row,), kept = _three_ways(folder, monkeypatch)
    # 10 of the 17 are judged by the walk alone (the rest: selected or odd; "naïve", raw
    # non-ASCII, goes to Python, which checks its UTF-8 as the merge does). Among the 10:
    # record_param_comms and a gloo: op that is a cpu_op (the collector keeps gloo ops
    # from annotations, and a "Collective name" text from GPU kernels only), and
    # aten::mm, whose args' escape could spell that text only in a kernel
    assert walked == 3 * 10
    assert row["events"] == 3 * len(EVENTS)
    # the earliest: "dup"'s repeated ts, whose last value counts (as Python reads it)
    assert row["first_ns"] == BASE + 3057737500000 * 1000
    assert row["last_ns"] == BASE + (3057737590000 + 1000) * 1000  # "late": dur 1e3 (Python reads it)
    ((events, steps),) = kept
    assert steps == {4: (3057737580300.0, 3057737580400.5)}
    # the collector keeps the NCCL kernel (gloo ops only on their runloop threads)
    assert [e["name"] for e in events] == ["ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)"] * 3


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_walk_every_cut(chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "run"
    _rank_file(folder, EVENTS)
    whole = _three_ways(folder, monkeypatch)
    monkeypatch.setattr(batches_mod, "CHUNK_BYTES", chunk)
    assert _info(folder) == whole


def test_damage_top_level_or_nested_is_broken(tmp_path: Path) -> None:
    """info reports what the merge will meet: a file the merge refuses as invalid JSON
    is BROKEN here too, wherever in an event the damage is (issue 28)."""
    top = _rank_file(tmp_path / "top", EVENTS[:3] + ['{"ph": "X", "ts": 3057737580400, "dur": nul}'] + EVENTS)
    plans, rows, out, text = collect_info([str(top.parent)])
    assert not rows and len(plans.broken) == 1 and plans.broken[0][0] == str(top)
    nested = _rank_file(tmp_path / "nested", EVENTS[:3] + ['{"ph": "X", "ts": 1, "args": {"x": nul}}'])
    plans, rows, out, text = collect_info([str(nested.parent)])
    assert not rows and len(plans.broken) == 1 and plans.broken[0][0] == str(nested)
    cut = _rank_file(tmp_path / "cut", EVENTS[:3])
    cut.write_bytes(cut.read_bytes()[:-40])  # a killed job's file
    plans, rows, out, text = collect_info([str(cut.parent)])
    assert not rows and plans.broken[0][0] == str(cut)


_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(10**20), max_value=10**20),
        st.text(max_size=10),
        st.text(alphabet='{}[],: "\\nC#', max_size=80),
        st.sampled_from(["Collective name", "ncclKernel", "ProfilerStep#2", "gloo:broadcast", "X", "M"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
#: numbers as written, every shape the readers tell apart (exponents, -0, leading
#: zeros of fractions, more than 9 decimals, beyond any clock)
_numbers = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**22).map(str),
    st.decimals(places=3, min_value=-(10**6), max_value=10**14, allow_nan=False).map(str),
    st.sampled_from(["-0", "0.0000001", "1e3", "2.5E-1", "3057737580330.1234567891", "0.000", "-1.5"]),
)
_keys = st.sampled_from(["ph", "cat", "name", "ts", "dur", "args", "pid", "Collective name", "x"])


@st.composite
def _event(draw: Any) -> str:
    keys = draw(st.lists(_keys, max_size=7, unique=True))
    members = {k: json.dumps(draw(_values), ensure_ascii=draw(st.booleans())) for k in keys}
    for k in ("ts", "dur"):
        if draw(st.booleans()):
            members[k] = draw(_numbers)
    if draw(st.booleans()):
        members["ph"] = json.dumps(draw(st.sampled_from(["X", "i", "M"])))
        members["name"] = json.dumps(
            draw(st.sampled_from(["ncclKernel_x", "ProfilerStep#7", "gloo:x", "op"]))
        )
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in members.items()) + "}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(_event(), min_size=1, max_size=8))
def test_walk_on_random_events(events: List[str], tmp_path_factory: pytest.TempPathFactory) -> None:
    """Random valid events (any JSON nested, numbers of every shape at ts and dur,
    non-ASCII, escapes): the walk, the validating scan and Python agree."""
    folder = tmp_path_factory.mktemp("walk")
    _rank_file(folder, events)
    with pytest.MonkeyPatch.context() as mp:
        _three_ways(folder, mp)


#: events as Kineto lays them out (the walk compares its separators and keys whole,
#: csrc/walk.c kineto_key), and near misses of that layout the generic path must read
KINETO_LAYOUT = [
    '{\n    "ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7,\n    "ts": 3057737580330.5,'
    ' "dur": 12.25,\n    "args": {\n      "External id": 3, "Ev Idx": 2\n    }\n  }',
    '{\n    "ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "pid": 0, "tid": 7,\n    "ts":'
    ' 3057737580400.123, "dur": 55.000,\n    "args": {\n      "Collective name": "allreduce", "Seq": 1\n    }\n  }',
    '{\n    "ph": "f", "id": 9, "pid": 7, "tid": 7, "ts": 3057737580331, "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }',
    '{\n    "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 7, "tid": 7,\n'
    '    "ts": 3057737580332,\n    "args": {"Bytes": 16}\n  }',
    # near misses: white space after the colon, a longer key, a repeated key, a key with
    # a space, a newline and three spaces, a value that is not what the key wants
    '{\n    "ph": \t"X", "cat": "cpu_op", "name":  "a", "pid": 7, "tid": 7, "ts": 3057737580333, "dur": 1}',
    '{\n    "ph": "X", "cat": "cpu_op", "name": "b", "pidx": 7, "pid": 7, "tid": 7, "ts": 3057737580334, "dur": 1}',
    '{\n    "ph": "X", "cat": "cpu_op", "name": "c", "pid": 7, "tid": 7,\n    "ts": 3057737580335,\n    "ts": 1}',
    '{\n    "ph ": "X", "cat": "cpu_op", "name": "d", "pid": 7, "tid": 7, "ts": 3057737580336, "dur": 1}',
    '{\n    "ph": "X", "cat": "cpu_op", "name": "e", "pid": 7, "tid": 7,\n   "ts": 3057737580337, "dur": 1}',
    '{\n    "ph": "X", "cat": "cpu_op", "name": "f", "pid": 7, "tid": 7, "ts": "3057737580338", "dur": [1]}',
    '{\n    "ph": "X", "cat": "cpu_op", "name": "g", "pid": 7, "tid": 7, "ts": 3057737580339, "dur": 1, "dur": 2}',
    '{\n    "ph": "X", "cat": "cpu_op", "name": "h", "pid": 7, "tid": 7, "ts": 3057737580340, "dur": 1 }',
]


@pytest.mark.parametrize("chunk", [None, 1, 5, 23])
def test_walk_on_kineto_layout_and_near_misses(
    chunk: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "run"
    _rank_file(folder, KINETO_LAYOUT * 2)
    if chunk is not None:
        monkeypatch.setattr(batches_mod, "CHUNK_BYTES", chunk)
    (row,), kept = _three_ways(folder, monkeypatch)
    assert row["events"] == 2 * len(KINETO_LAYOUT)
    # the repeated ts counts its last value, as Python reads it: 1 us after the base
    assert row["first_ns"] == BASE + 1000
    ((events, steps),) = kept
    assert [e["name"] for e in events] == ["ncclDevKernel_AllReduce"] * 2


def test_walk_layout_off_when_the_needle_is_one_of_its_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """text_contains '"name"' is met as a key: the walk must compare every key with it."""
    import dataclasses

    from tracefuse_stream.read.scan import _Args

    text = ("[" + ", ".join(KINETO_LAYOUT[:4]) + "]").encode()
    for needle in ('"name"', '"Bytes"'):
        sel = dataclasses.replace(
            ScanSelection(ph="X", name_contains=("zz",), text_contains=needle), extremes=True, validate=False
        )
        walk = native.kernel.scan(_Args(sel), bytearray(text), 1, False, True)  # type: ignore[union-attr]
        scan = native.kernel.scan(  # type: ignore[union-attr]
            _Args(dataclasses.replace(sel, validate=True)), bytearray(text), 1, False, True
        )
        assert walk[0] == scan[0] and walk[5] == scan[5], needle
        assert walk[0].count(b'"ph"') == (2 if needle == '"name"' else 0)  # the two X events hold "name"
