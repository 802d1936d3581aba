"""Unit tests of verify's parts that need no trace: the µs -> ns rule it shares with
the merge, its argument order, and the pid rule it imports."""

from __future__ import annotations

import argparse
import random
from decimal import Decimal

import pytest

from tracefuse_stream.cli.verify_cmd import add_verify_arguments, merged_and_inputs
from tracefuse_stream.errors import UsageError
from tracefuse_stream.rewrite.rules import PID_DEVICE_LIMIT, RankRewriter, output_pid
from tracefuse_stream.select.filters import EventFilter
from tracefuse_stream.timeunits import FLOAT_FAST_LIMIT, us_to_ns
from tracefuse_stream.verify.against import RankInput, input_tuples
from tracefuse_stream.verify.digest import event_tuple
from tracefuse_stream.verify.events import MergedChecker
from tracefuse_stream.verify.header import pid_follows_rule


def _old_shortcut(v: float) -> int:
    """verify's conversion before it used timeunits: a float shortcut up to 2**43."""
    if abs(v) < 2.0**43:
        return round(v * 1000)
    return int(Decimal(repr(v)) * 1000)


def _float_where_shortcut_is_off() -> float:
    """A float in [2**42, 2**43) us whose ``round(v * 1000)`` misses the exact ns by one
    (about 0.6% of them do: 1,208 of 200,000 in the issue's count)."""
    rng = random.Random(42)
    for _ in range(200_000):
        v = round(rng.uniform(2.0**42, 2.0**43), 3)
        if _old_shortcut(v) != int(Decimal(repr(v)) * 1000):
            return v
    raise AssertionError("no float found where the old shortcut is off")


def test_float_time_in_2_42_to_2_43_is_exact_as_in_the_merge():
    v = _float_where_shortcut_is_off()
    assert FLOAT_FAST_LIMIT <= v < 2.0**43
    exact = int(Decimal(repr(v)) * 1000)  # the number as written in the JSON, times 1000
    assert abs(_old_shortcut(v) - exact) == 1
    # the merge's rule (timeunits, used by rewrite and window) ...
    assert us_to_ns(v) == exact
    # ... and every place verify turns a time into ns: the merged side's hot loop,
    # the canonical tuple of the mismatch passes, and the input side
    ev = {"ph": "X", "ts": v, "dur": 1, "pid": 10001, "tid": 1, "name": "k", "args": {"rank": 0}}
    checker = MergedChecker("m.json", [], 5, None)
    checker.handle([ev])
    assert checker.ranks[0]["ts_min_ns"] == exact
    assert event_tuple(ev, 10001)[3] == exact
    ctx = RankInput(0, "in.json", {}, 0, 0, {1: 10001}, EventFilter())
    assert next(input_tuples(ctx, [dict(ev, pid=1)], None))[3] == exact


def _parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_verify_arguments(p)
    return p.parse_args(list(argv))


@pytest.mark.parametrize(
    "argv",
    [
        ("m.json", "--against", "a", "b"),
        ("--against", "a", "b", "m.json"),
        ("--against", "a", "b", "--json", "m.json"),
        ("--json", "m.json", "--against", "a", "b"),
    ],
)
def test_merged_file_found_in_any_order(argv):
    assert merged_and_inputs(_parse(*argv)) == ("m.json", ["a", "b"])


def test_merged_file_required():
    assert merged_and_inputs(_parse("m.json")) == ("m.json", None)
    with pytest.raises(UsageError, match="merged file is required"):
        merged_and_inputs(_parse("--against", "a"))


def test_pid_rule_is_the_rewriters(tmp_path):
    """verify's pid-map check accepts exactly the pids the rewriter hands out."""
    rw = RankRewriter(3, 0, EventFilter(), 0, "x")
    pids = [0, 7, PID_DEVICE_LIMIT - 1, PID_DEVICE_LIMIT, 123456, "Spans", -1]
    out = {}
    for p in pids:
        ev = rw.feed({"ph": "X", "pid": p, "tid": 1, "ts": 1, "dur": 1, "name": "n"})
        out[p] = ev["pid"] if ev is not None else None
    assert out[7] == output_pid(3, 7)
    for p, o in out.items():
        assert o is not None and pid_follows_rule(3, p, o), (p, o)
    assert not pid_follows_rule(3, 7, output_pid(3, 8))
    assert not pid_follows_rule(3, "Spans", output_pid(4, PID_DEVICE_LIMIT))
