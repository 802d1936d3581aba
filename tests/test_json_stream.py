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
