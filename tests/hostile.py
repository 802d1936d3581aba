"""Small hostile inputs for tests/test_one_answer.py and tests/test_differential.py:
one trace file per case, written as raw text (the cases are spellings json.dumps
cannot produce: lone surrogate escapes, pid aliases, bad literals deep in args)."""

from __future__ import annotations

import contextlib
import io
import json
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple, Union

import orjson

from tracefuse_stream.cli.app import main as cli_main

PERIOD_NS = 7_889_238 * 10**9  # Kineto's baseTimeNanoseconds period
BASE_NS = 1_700_000_000_000_000_000 // PERIOD_NS * PERIOD_NS

Event = Union[str, Dict[str, Any]]


def x_event(ts: Any, pid: Any = 77, tid: Any = 7, **more: Any) -> Dict[str, Any]:
    ev = {"ph": "X", "cat": "cpu_op", "name": "op", "pid": pid, "tid": tid, "ts": ts, "dur": 10}
    ev.update(more)
    return ev


def thread_name(ts: Any, pid: Any = 77, tid: Any = 7) -> Dict[str, Any]:
    return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": ts, "args": {"name": "main"}}


def _digits(v: Any) -> Any:
    if isinstance(v, Decimal):
        return orjson.Fragment(str(v).encode())
    raise TypeError(type(v).__name__)


def trace_bytes(events: Sequence[Event], base_ns: int = BASE_NS, rank: int = 0, world: int = 1) -> bytes:
    """A Kineto-style trace; events given as text are written as they are."""
    body = ",\n".join(e if isinstance(e, str) else orjson.dumps(e, default=_digits).decode() for e in events)
    head = f'{{"distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {world}}}, '
    return (head + f'"baseTimeNanoseconds": {base_ns}, "traceEvents": [\n{body}\n]}}').encode()


def write(path: Path, events: Sequence[Event], **kw: Any) -> Path:
    path.write_bytes(trace_bytes(events, **kw))
    return path


def cli(*args: Any) -> Tuple[int, str, str]:
    """``tracefuse ARGS`` in-process: (exit code, stdout, stderr)."""
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        rc = cli_main([str(a) for a in args])
    return rc, o.getvalue(), e.getvalue()


OK = '{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 77, "tid": 7, "ts": 1, "dur": 10}'


def _ev(inner: str) -> str:
    return '{"ph": "X", "cat": "c", "name": "a", "pid": 77, "tid": 7, "ts": 2, "dur": 1' + inner + "}"


#: one broken event per class (name -> its text, after a good first event)
BROKEN_CLASSES: Dict[str, bytes] = {
    "nested_bad_literal": _ev(', "args": {"x": [tru]}').encode(),
    "nested_leading_zeros": _ev(', "args": {"x": [00012]}').encode(),
    "control_byte": _ev(', "args": {"x": "a\x01b"}').encode(),
    "control_byte_name": b'{"ph": "X", "cat": "c", "name": "a\x01b", "pid": 77, "tid": 7, "ts": 2, "dur": 1}',
    "invalid_utf8": _ev(', "args": {"x": "a\xffb"}').encode("latin-1"),
    "invalid_utf8_name": b'{"ph": "X", "cat": "c", "name": "a\xffb", "pid": 77, "tid": 7, "ts": 2, "dur": 1}',
    "lone_surrogate_args": _ev(', "args": {"x": "a\\ud800b"}').encode(),
    "lone_surrogate_name": b'{"ph": "X", "cat": "c", "name": "\\udc00", "pid": 77, "tid": 7, "ts": 2, "dur": 1}',
    "lone_surrogate_tid": b'{"ph": "X", "cat": "c", "name": "a", "pid": 77, "tid": "\\ud800", "ts": 2, "dur": 1}',
    "lone_surrogate_pid": b'{"ph": "X", "cat": "c", "name": "a", "pid": "\\ud800", "tid": 7, "ts": 2, "dur": 1}',
    "deep_args": _ev(', "args": {"x": ' + "[" * 5000 + "]" * 5000 + "}").encode(),
    "pid_list": b'{"ph": "X", "cat": "c", "name": "a", "pid": [1], "tid": 7, "ts": 2, "dur": 1}',
    "pid_object": b'{"ph": "X", "cat": "c", "name": "a", "pid": {}, "tid": 7, "ts": 2, "dur": 1}',
}


def broken_trace(kind: str) -> bytes:
    head = b'{"baseTimeNanoseconds": ' + str(BASE_NS).encode() + b', "traceEvents": [\n'
    return head + OK.encode() + b",\n" + BROKEN_CLASSES[kind] + b",\n" + OK.encode() + b"\n]}"


def events_of(path: Path) -> List[Dict[str, Any]]:
    return json.loads(path.read_bytes())["traceEvents"]
