"""Parsing of --ranks, --window and --steps."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracefuse_stream.errors import EXIT_USAGE, UsageError
from tracefuse_stream.rankset import (
    MAX_RANKS,
    compress_ranges,
    parse_rank_spec,
    parse_steps,
    parse_window_ms,
)


# ---------------------------------------------------------------- --ranks
@pytest.mark.parametrize(
    "spec, expected",
    [
        ("0,8,16-23,32-63:8", [0, 8, *range(16, 24), 32, 40, 48, 56]),
        ("5", [5]),
        ("0", [0]),
        ("007", [7]),
        ("3,1,2,1,3", [1, 2, 3]),
        ("0-3,2-5", [0, 1, 2, 3, 4, 5]),
        ("4-4", [4]),
        ("0-10:3", [0, 3, 6, 9]),
        ("0-9:100", [0]),
        (" 0 , 8 ,16 - 23, 32 - 63 : 8 ", [0, 8, *range(16, 24), 32, 40, 48, 56]),
        ("\t1,\n2 ", [1, 2]),
    ],
)
def test_parse_rank_spec_valid(spec, expected):
    assert parse_rank_spec(spec) == expected


@pytest.mark.parametrize(
    "spec, quoted, words",
    [
        ("0,,3", None, "empty part"),
        ("0,1,", None, "empty part"),
        (",0", None, "empty part"),
        ("5-3", "'5-3'", "before its start"),
        ("0,5-3", "'5-3'", "before its start"),
        ("-3", "'-3'", "negative"),
        ("1,-3", "'-3'", "negative"),
        ("0-3:0", "'0-3:0'", "stride"),
        ("abc", "'abc'", "expected N"),
        ("1,x", "'x'", "expected N"),
        ("1.5", "'1.5'", "expected N"),
        ("1-", "'1-'", "expected N"),
        ("-", "'-'", None),
        ("1 2", "'1 2'", "expected N"),
        ("3:2", "'3:2'", "range"),
        ("0-9:2:3", "'0-9:2:3'", None),
        ("\u0663", "'\u0663'", "expected N"),  # a non-ASCII digit
        ("0-99999999999", "'0-99999999999'", "expands to"),
    ],
)
def test_parse_rank_spec_errors(spec, quoted, words):
    with pytest.raises(UsageError) as ei:
        parse_rank_spec(spec)
    msg = str(ei.value)
    if quoted:
        assert quoted in msg
    if words:
        assert words in msg
    assert "\n" not in msg
    assert ei.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize("spec", ["", "   ", ","])
def test_parse_rank_spec_empty(spec):
    with pytest.raises(UsageError, match="empty"):
        parse_rank_spec(spec)


def test_parse_rank_spec_total_limit():
    half = MAX_RANKS // 2 + 1
    with pytest.raises(UsageError, match="more than"):
        parse_rank_spec(f"0-{half - 1},{half}-{2 * half}")


def test_parse_rank_spec_not_a_string():
    with pytest.raises(UsageError):
        parse_rank_spec(None)  # type: ignore[arg-type]


_part = st.one_of(
    st.tuples(st.just("single"), st.integers(0, 10_000)),
    st.tuples(st.just("range"), st.integers(0, 2_000), st.integers(0, 300)),
    st.tuples(st.just("stride"), st.integers(0, 2_000), st.integers(0, 300), st.integers(1, 50)),
)
_ws = st.sampled_from(["", " ", "  ", "\t"])


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(_part, min_size=1, max_size=8), data=st.data())
def test_parse_rank_spec_matches_direct_set(parts, data):
    expected = set()
    texts = []
    for p in parts:
        w = [data.draw(_ws) for _ in range(6)]
        if p[0] == "single":
            texts.append(f"{w[0]}{p[1]}{w[1]}")
            expected.add(p[1])
        elif p[0] == "range":
            a, b = p[1], p[1] + p[2]
            texts.append(f"{w[0]}{a}{w[1]}-{w[2]}{b}{w[3]}")
            expected.update(range(a, b + 1))
        else:
            a, b, s = p[1], p[1] + p[2], p[3]
            texts.append(f"{w[0]}{a}{w[1]}-{w[2]}{b}{w[3]}:{w[4]}{s}{w[5]}")
            expected.update(x for x in range(a, b + 1) if (x - a) % s == 0)
    spec = ",".join(texts)
    assert parse_rank_spec(spec) == sorted(expected)


@given(st.sets(st.integers(0, 500), max_size=60))
def test_compress_ranges_round_trips_through_parse(nums):
    text = compress_ranges(nums)
    if nums:
        assert parse_rank_spec(text) == sorted(nums)
    else:
        assert text == ""


def test_compress_ranges_examples():
    assert compress_ranges([2, 3, 4, 5, 6]) == "2-6"
    assert compress_ranges([9, 2, 3, 4, 6, 8]) == "2-4,6,8-9"


# ---------------------------------------------------------------- --window
@pytest.mark.parametrize(
    "spec, expected",
    [
        ("0:100", (0.0, 100.0)),
        ("1500:2250.5", (1500.0, 2250.5)),
        (" 0.25 : .5 ", (0.25, 0.5)),
        ("1.:2", (1.0, 2.0)),
        ("1e3:2e3", (1000.0, 2000.0)),
    ],
)
def test_parse_window_ms_valid(spec, expected):
    got = parse_window_ms(spec)
    assert got == expected
    assert all(isinstance(x, float) for x in got)


@pytest.mark.parametrize(
    "spec, words",
    [
        ("100", "START_MS:END_MS"),
        ("1:2:3", "START_MS:END_MS"),
        (":5", "missing"),
        ("5:", "missing"),
        ("-1:5", "negative"),
        ("1:-5", "negative"),
        ("5:5", "not before"),
        ("6:5", "not before"),
        ("a:5", "'a'"),
        ("1:b", "'b'"),
        ("inf:5", "'inf'"),
        ("0:nan", "'nan'"),
        ("0:1e999", "not finite"),
    ],
)
def test_parse_window_ms_errors(spec, words):
    with pytest.raises(UsageError) as ei:
        parse_window_ms(spec)
    assert words in str(ei.value)
    assert repr(spec) in str(ei.value) or spec in str(ei.value)


# ---------------------------------------------------------------- --steps
@pytest.mark.parametrize(
    "spec, expected",
    [("5", (5, 5)), ("3:7", (3, 7)), (" 3 : 3 ", (3, 3)), ("0:0", (0, 0)), ("02:10", (2, 10))],
)
def test_parse_steps_valid(spec, expected):
    assert parse_steps(spec) == expected


@pytest.mark.parametrize(
    "spec, words",
    [
        ("", "missing"),
        ("7:3", "after last step"),
        ("-1", "negative"),
        ("1:-2", "negative"),
        ("a:3", "'a'"),
        ("1.5", "'1.5'"),
        ("1:2:3", "expected A:B"),
        (":3", "missing"),
        ("3:", "missing"),
        ("3-5", "'3-5'"),
    ],
)
def test_parse_steps_errors(spec, words):
    with pytest.raises(UsageError) as ei:
        parse_steps(spec)
    assert words in str(ei.value)
