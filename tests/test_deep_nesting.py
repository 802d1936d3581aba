"""Issue 28: deep nesting is an input error that names the file and the depth, one
rule on both code paths (kernel and pure Python) for merge (with and without
--salvage), info with every flag, and verify -- never an internal error (exit 70).

An event may nest ``MAX_DEPTH`` levels (the event object is level 1); a top-level key
other than ``traceEvents`` ``MAX_KEY_DEPTH`` (the merge copies it into its header).
The depths are tried at the limit, one below and one above, and far beyond it (where
msgspec stops at Python's recursion limit and used to raise RecursionError from
read/toplevel.py's find_trailer)."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import List, Tuple

import pytest
from test_differential import INFO_FLAGS, kernel_built, run_cli_in_process  # noqa: F401

from tracefuse_stream.read.depthgate import DepthGate, TooDeepText
from tracefuse_stream.read.textcheck import MAX_DEPTH, MAX_KEY_DEPTH

EVENT = '{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1%s}'
#: 100,000 levels took 23 GB in ijson's prefixes before read/depthgate.py
FAR = [1000, 5000, 100_000]


def _nest(levels: int) -> str:
    return "[" * levels + "]" * levels


def trace_text(place: str, depth: int) -> str:
    """A one-event trace whose ``place`` nests ``depth`` levels (as the rule counts
    them: the event, or the key's value, is level 1)."""
    if place == "args":  # event (1) > args (2) > x (3...)
        return '{"traceEvents":[' + EVENT % (',"args":{"x":%s}' % _nest(depth - 2)) + "]}"
    if place == "event":  # event (1) > q (2...)
        return '{"traceEvents":[' + EVENT % (',"q":%s' % _nest(depth - 1)) + "]}"
    if place == "header":
        return '{"aa":%s,"traceEvents":[' % _nest(depth) + EVENT % "" + "]}"
    return '{"traceEvents":[' + EVENT % "" + '],"zz":%s}' % _nest(depth)


def cases() -> List[Tuple[str, int]]:
    out = []
    for place in ("args", "event"):
        out += [(place, d) for d in (MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, *FAR)]
    for place in ("header", "trailer"):
        out += [(place, d) for d in (MAX_KEY_DEPTH - 1, MAX_KEY_DEPTH, MAX_KEY_DEPTH + 1, *FAR)]
    return out


def commands(path: Path, out: Path) -> List[List[str]]:
    merge = ["merge", str(path), "-o", str(out), "--force", "-q", "-j", "1"]
    return [
        merge,
        [*merge, "--salvage"],
        [*merge, "--window", "0:1"],
        *(["info", *flags, str(path)] for flags in INFO_FLAGS),
        ["verify", str(path)],
    ]


def _answer(argv: List[str], kernel: bool, monkeypatch: pytest.MonkeyPatch) -> Tuple[int, str, str]:
    rc, out, err = run_cli_in_process(argv, kernel, monkeypatch)
    return rc, _RATE.sub("R", out), err


_RATE = re.compile(r"\d+\.\d+ MB/s")


@pytest.mark.parametrize("place,depth", cases(), ids=lambda v: str(v))
def test_one_rule_for_deep_nesting(
    place: str,
    depth: int,
    tmp_path: Path,
    kernel_built: None,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TRACEFUSE_VERIFY", raising=False)
    path = tmp_path / "deep.json"
    path.write_text(trace_text(place, depth))
    limit = MAX_DEPTH if place in ("args", "event") else MAX_KEY_DEPTH
    for i, argv in enumerate(commands(path, tmp_path / "out.json")):
        out = tmp_path / f"out{i}.json"
        argv = [out.name if a == str(tmp_path / "out.json") else a for a in argv]
        argv = [str(out) if a == out.name else a for a in argv]
        python, kernel = (_answer(argv, k, monkeypatch) for k in (False, True))
        assert python == kernel, argv
        rc, stdout, stderr = python
        assert rc != 70 and "internal error" not in stderr + stdout, (argv, python)
        if argv[0] == "info":  # as strict as the merge, with the same words
            assert rc == (1 if depth > limit else 0), (argv, stdout)
            assert (f"nests {depth} levels deep (at most {limit} are accepted)" in stdout) == (depth > limit)
        if argv[0] != "merge":
            continue
        if depth <= limit:
            assert rc == 0, (argv, stderr)
            continue
        if "--salvage" in argv and place in ("args", "event"):
            assert rc == 4, (argv, stderr)  # the event is dropped, and the merge says so
            continue
        assert rc == 1, (argv, stderr)
        what = (
            "an event"
            if place in ("args", "event")
            else f"the top-level key {'aa' if place == 'header' else 'zz'!r}"
        )
        assert f"{path}: {what} nests {depth} levels deep (at most {limit} are accepted)" in stderr, stderr
        if place in ("args", "event"):
            assert "(at event #0)" in stderr
        assert not out.exists()  # nothing half-written


GATE_TEXTS = [
    b'{"a":"x\\\\","traceEvents":[{"n":"[[[[\\"]]","args":{"k":[[1],{"b":"}}"}]}}]}',
    b'[{"n":"\\\\\\"[","x":[[[]]]},{"n":"{"}]',
    b'{"traceEvents":[],"deviceProperties":[{"id":0,"name":"A100 [sxm]"}],"traceName":"t\\"x"}',
]


@pytest.mark.parametrize("text", GATE_TEXTS)
def test_gate_counts_levels_outside_strings_however_the_text_is_cut(text: bytes) -> None:
    """Brackets in strings, escaped quotes and backslashes, at every chunk size: the
    gate's fast path (C-speed counts) and its exact scan end at the same level, 0."""
    for n in range(1, len(text) + 1):
        gate = DepthGate(io.BytesIO(text))
        while gate.read(n):
            pass
        assert gate.level == 0, n


@pytest.mark.parametrize("chunk", [1, 7, 4096, 1 << 20])
def test_gate_names_the_key_and_depth(chunk: int) -> None:
    text = b'{"schemaVersion":1,"a_long_key_name":' + b"[" * 300 + b"]" * 300 + b',"traceEvents":[]}'
    gate = DepthGate(io.BytesIO(text))
    with pytest.raises(TooDeepText) as e:
        while gate.read(chunk):
            pass
    assert (e.value.key, e.value.depth, e.value.in_event) == ("a_long_key_name", 300, False)
    event = b'{"traceEvents":[{"ph":"X"},{"args":{"x":' + b"[" * 400 + b"]" * 400 + b"}}]}"
    gate = DepthGate(io.BytesIO(event))
    with pytest.raises(TooDeepText) as e:
        while gate.read(chunk):
            pass
    assert (e.value.depth, e.value.in_event) == (402, True)
