"""The walk's validator of nested values (csrc/validate.c) gives copy_value's answer.

info's walk must take exactly the nested text the merge takes (issue 28: one answer);
it has its own loop for that (the merge's copier was a third of the walk). What must
hold, for any text at an event's ``args``: the walk judges the event itself (counts it
as sure) exactly when the validating scan, which validates with copy_value, does, and
both ask for more text at the same cuts. The texts are token soups: every JSON token,
the ones copy_value refuses (\\u and \\/ escapes, control bytes, non-ASCII, exponents,
-0, leading zeros, 0.0000001, broken literals, trailing commas, unclosed or mismatched
brackets) and nesting around the depth limit. Random: the seed is printed by
hypothesis on a failure; CI derandomizes (tests/conftest.py).
"""

from __future__ import annotations

from typing import Any, List, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracefuse_stream import native
from tracefuse_stream.read.scan import ScanSelection, _Args

pytestmark = pytest.mark.skipif(not native.available(), reason="the compiled kernel is not built here")

HEAD = b'{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 2, "ts": 5, "dur": 1, "args": '
#: not selected (no name holds the needle): both judge the event themselves when they can
WALK = _Args(ScanSelection(ph="X", name_contains=("zz",), extremes=True, validate=False))
SCAN = _Args(ScanSelection(ph="X", name_contains=("zz",), extremes=True, validate=True))

TOKENS = [
    "{", "}", "[", "]", ",", ":", " ", "\n", "\t", '"a"', '"k"', '""', '"x y"', '"\\n"', '"\\""', '"\\\\"',
    '"\\t\\b\\f\\r"', '"\\u0041"', '"\\/"', '"\\q"', '"\x01"', '"\x7f"', '"é"', '"a', "0", "7", "-0", "-1",
    "01", "1.5", "1.", ".5", "-", "0.000001", "0.0000001", "0.000000", "0.0000000", "0.5e3", "1e3", "2E-1",
    "12345678901234567890123", "true", "false", "null", "tru", "nul", "falsey", "x", "\\",
]  # fmt: skip
MAX_DEPTH = 32


def _judge(args: Any, value: bytes) -> Tuple[int, int]:
    """(events judged alone, status) for one event with ``value`` at args."""
    buf = bytearray(b"[" + HEAD + value + b"}]")
    out = native.kernel.scan(args, buf, 1, False, True)  # type: ignore[union-attr]
    return out[5], out[2]


def _both(value: bytes) -> None:
    walk, scan = _judge(WALK, value), _judge(SCAN, value)
    assert walk == scan, value
    # cut anywhere inside the value: both need more text, or both give up on it
    for cut in range(1, len(value)):
        buf = bytearray(b"[" + HEAD + value[:cut])
        w = native.kernel.scan(WALK, buf, 1, False, True)  # type: ignore[union-attr]
        s = native.kernel.scan(SCAN, buf, 1, False, True)  # type: ignore[union-attr]
        assert (w[2], w[3]) == (s[2], s[3]), (value, cut)


def _nest(depth: int, inner: str = "1") -> bytes:
    """``depth`` levels, objects and arrays in turn, the value itself the first."""
    opens = ['{"a": ' if k % 2 == 0 else "[" for k in range(depth)]
    closes = ["}" if k % 2 == 0 else "]" for k in reversed(range(depth))]
    return ("".join(opens) + inner + "".join(closes)).encode()


def test_known_values() -> None:
    good = [
        b"{}",
        b"[]",
        b'{"a": [1, -2, 3.25, 0.5, 0.000001, true, false, null, "s\\n"], "b": {}}',
        b"[[[]]]",
    ]
    bad = [b"[1,]", b'{"a":1,}', b"[01]", b"[-0]", b"[1e3]", b'["\\u0041"]', b'["\\/"]', b"[tru]", b"[1 2]",
           b'{"a" 1}', b"{1: 2}", b"[}", b'["\x01"]', '["é"]'.encode(), b"[0.0000001]", b"[1.]"]  # fmt: skip
    for v in good:
        assert _judge(WALK, v) == (1, 1), v  # judged; the array's end reached
    for v in bad:
        assert _judge(WALK, v)[0] == 0, v
    for v in good + bad:
        _both(v)


@pytest.mark.parametrize("token", TOKENS)
def test_every_token_as_a_leaf(token: str) -> None:
    for value in (f"[{token}]", f'{{"k": {token}}}', f"[1, {token}, 2]", f'{{"k": [{token}], "z": {token}}}'):
        _both(value.encode("utf-8"))


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 40])
def test_depth_limit(depth: int) -> None:
    value = _nest(depth)
    assert _judge(WALK, value)[0] == (1 if depth <= MAX_DEPTH else 0)
    _both(value)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=24), st.sampled_from(["{", "["]))
def test_token_soup(tokens: List[str], opener: str) -> None:
    _both((opener + "".join(tokens)).encode("utf-8"))


_json = st.recursive(
    st.one_of(st.sampled_from(TOKENS[21:47]), st.sampled_from(['"a"', "1", "null"])),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.lists(st.tuples(st.sampled_from(['"k"', '"a"', '"\\u0041"', "1"]), inner), max_size=4).map(
            lambda kv: "{" + ", ".join(f"{k}: {v}" for k, v in kv) + "}"
        ),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(_json.filter(lambda s: s[:1] in "[{"))
def test_structured(value: str) -> None:
    """Well-formed structure around any leaf (so most of them are judged whole)."""
    _both(value.encode("utf-8"))
