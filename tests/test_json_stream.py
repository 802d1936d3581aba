"""report/json_stream.py writes exactly what ``json.dumps(obj, indent=2, default=str)``
writes (plus the newline ``print`` adds), item by item, lists given as generators
included; a float that is not finite is ``null`` (strict JSON)."""

from __future__ import annotations

import io
import json
import math
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tracefuse_stream.report import json_stream
from tracefuse_stream.report.json_stream import write_json

LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.decimals(allow_nan=False, allow_infinity=False, places=3)
)
KEYS = (
    st.text(max_size=6) | st.integers(-5, 5) | st.booleans() | st.none() | st.floats(-2, 2, allow_nan=False)
)
TREES = st.recursive(
    LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.dictionaries(KEYS, inner, max_size=4)
    ),
    max_leaves=30,
)


def _written(o: Any) -> str:
    out = io.StringIO()
    write_json(o, out)
    return out.getvalue()


@settings(max_examples=300, deadline=None)
@given(TREES)
def test_same_text_as_json_dumps(tree: Any) -> None:
    assert _written(tree) == json.dumps(tree, indent=2, default=str) + "\n"


def test_generators_are_lists_and_batches_join(monkeypatch: Any) -> None:
    monkeypatch.setattr(json_stream, "CHUNK", 7)  # many batches
    rows = [{"rank": r, "x": [r, r / 4, None], "s": "é"} for r in range(50)]
    gen = {"a": (dict(r) for r in rows), "empty": iter([]), "nested": [iter([1, iter([])])]}
    want = json.dumps({"a": rows, "empty": [], "nested": [[1, []]]}, indent=2) + "\n"
    assert _written(gen) == want


def test_not_finite_floats_are_null_and_the_text_is_strict() -> None:
    text = _written({"a": math.nan, "b": [math.inf, -math.inf], "c": Decimal("1.50")})
    assert json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c))) == {
        "a": None,
        "b": [None, None],
        "c": "1.50",
    }


def test_a_key_json_cannot_write_is_refused() -> None:
    try:
        _written({(1, 2): 3})
    except TypeError as e:
        assert "keys must be" in str(e)
    else:
        raise AssertionError("a tuple key was written")


def test_lazy_array_items_by_orjson_are_the_same_values() -> None:
    """A LazyArray's items go through orjson: the text parses to what json.dumps'
    does, stays ASCII and indented as json.dumps indents; what orjson cannot write
    as json.dumps would (non-ASCII text, an int beyond 64 bits, a list given as an
    iterator inside, a dataclass for ``default``) is written by the Python encoder,
    exactly as json.dumps."""
    from dataclasses import dataclass

    @dataclass
    class Odd:
        x: int

    items = [
        {
            "rank": 1,
            "gpu": {"compute_us": 1.25, "tiny": 1e-05, "cats": {"GEMM": 3.5}},
            "top": [["aten::mm", 2, 3]],
        },
        {"name": "é", "n": 2**70},
        {"lazy": iter([1, 2])},
        {"odd": Odd(3), 7: None, "nan": math.nan},
        [],
        {},
    ]
    doc = {"a": {"b": json_stream.LazyArray(lambda: iter(items))}}
    text = _written(doc)
    assert text.isascii()
    plain = [dict(i) if isinstance(i, dict) else i for i in items]
    plain[2] = {"lazy": [1, 2]}
    assert json.loads(text) == json.loads(json.dumps({"a": {"b": plain}}, default=str).replace("NaN", "null"))
    # the items orjson may not write as json.dumps does fall back to it, byte for byte
    for i in (1, 2, 3):
        one = json.dumps({"a": {"b": [plain[i]]}}, indent=2, default=str).replace("NaN", "null")
        assert one in _written(
            {"a": {"b": json_stream.LazyArray(lambda i=i: [items[i] if i != 2 else {"lazy": iter([1, 2])}])}}
        )
    # the first item: same indentation as json.dumps, only the small float's spelling differs
    want = json.dumps({"a": {"b": [items[0]]}}, indent=2).replace("1e-05", "0.00001")
    assert _written({"a": {"b": json_stream.LazyArray(lambda: [items[0]])}}) == want + "\n"


def test_a_plain_lazy_array_is_the_text_of_its_list_each_time_it_is_written() -> None:
    """``PlainLazyArray`` (the per-step and per-instance arrays of ``info --collectives
    --json``, made as they are written): the Python encoder's text, the very bytes of
    the same items in a list (``1e-05``, not orjson's ``0.00001``), and made afresh for
    each place the one object sits in (``collectives`` and its cycle)."""
    made = []

    def make() -> Any:
        made.append(1)
        return ({"step": s, "wait_us": {"0": 1e-05 * s, "1": 2.5}, "top": [s, None]} for s in range(3))

    lazy = json_stream.PlainLazyArray(make)
    doc = {"collectives": {"by_step": lazy}, "collectives_by_cycle": {"1": {"by_step": lazy}}}
    plain = {
        "collectives": {"by_step": list(make())},
        "collectives_by_cycle": {"1": {"by_step": list(make())}},
    }
    made.clear()
    text = _written(doc)
    assert text == json.dumps(plain, indent=2, default=str) + "\n"
    assert "1e-05" in text and made == [1, 1]
