"""A selection's needles scoped to a category (``ScanSelection.name_contains_cats``,
``text_contains_cat``): the kernel hands over exactly the events the rule picks, and
any it cannot judge, on each of its paths (the walk, the validating scan, and the
skim, which leaves such a selection to the validating scan).

The rule, in Python below (:func:`_picked`): ``ph`` as given, and a name holding a
needle in that needle's category, or a text holding ``text_contains`` in its
category. info's pass uses it (analyze/onepass.py INFO_SELECTION) so that the
profiler's ``nccl:*`` annotations and ``record_param_comms`` ops, which the
collective collector does not keep, stay in the kernel.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, List, Optional

import pytest

from tracefuse_stream import native
from tracefuse_stream.analyze.onepass import INFO_SELECTION
from tracefuse_stream.read.scan import ScanSelection, _Args

pytestmark = pytest.mark.skipif(not native.available(), reason="the compiled kernel is not built here")

SEL = ScanSelection(
    ph="X",
    name_contains=("gloo:", "ProfilerStep#", "nccl"),
    name_contains_cats=("user_annotation", None, "kernel"),
    text_contains='"Collective name"',
    text_contains_cat="kernel",
)

CATS = ["kernel", "cpu_op", "user_annotation", "gpu_user_annotation", None]
NAMES = [
    "ncclDevKernel_AllReduce",
    "nccl:all_reduce",
    "gloo:broadcast",
    "ProfilerStep#3",
    "aten::mm",
    "x_nccl_gloo:",
]


def _event(cat: Optional[str], name: str, coll: bool, k: int) -> Dict[str, Any]:
    ev: Dict[str, Any] = {"ph": "X", "name": name, "pid": 1, "tid": 2, "ts": 100 + k, "dur": 1}
    if cat is not None:
        ev["cat"] = cat
    if coll:
        ev["args"] = {"Collective name": "allreduce", "Seq": k}
    return ev


def _picked(sel: ScanSelection, ev: Dict[str, Any]) -> bool:
    if ev.get("ph") != sel.ph:
        return False
    cats = sel.name_contains_cats or (None,) * len(sel.name_contains)
    for needle, cat in zip(sel.name_contains, cats):
        if needle in ev["name"] and (cat is None or ev.get("cat") == cat):
            return True
    return (
        sel.text_contains is not None
        and sel.text_contains in json.dumps(ev)
        and (sel.text_contains_cat is None or ev.get("cat") == sel.text_contains_cat)
    )


def _kernel_picks(sel: ScanSelection, events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    text = "[" + ", ".join(json.dumps(e) for e in events) + "]"
    out = native.kernel.scan(_Args(sel), bytearray(text.encode()), 1, False, True)  # type: ignore[union-attr]
    assert out[2] == 1  # the array's end
    assert out[5] + (len(json.loads("[" + out[0].decode() + "]")) if out[0] else 0) == len(events)
    return json.loads("[" + out[0].decode() + "]") if out[0] else []


def _events() -> List[Dict[str, Any]]:
    out = []
    for cat in CATS:
        for name in NAMES:
            for coll in (False, True):
                out.append(_event(cat, name, coll, len(out)))
    return out


@pytest.mark.parametrize(
    "paths",
    [dict(validate=True), dict(validate=False, extremes=True), dict(validate=False)],
    ids=["scan", "walk", "skim"],
)
def test_each_path_picks_what_the_rule_picks(paths: Dict[str, bool]) -> None:
    sel = dataclasses.replace(SEL, **paths)
    events = _events()
    want = [e for e in events if _picked(sel, e)]
    assert 0 < len(want) < len(events)
    assert _kernel_picks(sel, events) == want


def test_unscoped_needles_pick_more() -> None:
    events = _events()
    wide = dataclasses.replace(SEL, name_contains_cats=(), text_contains_cat=None)
    assert len(_kernel_picks(wide, events)) > len(_kernel_picks(SEL, events))
    assert _kernel_picks(wide, events) == [e for e in events if _picked(wide, e)]


def test_an_escaped_category_is_handed_over() -> None:
    """The kernel compares raw text: a category spelled with an escape is Python's."""
    text = '[{"ph": "X", "cat": "ker\\u006eel", "name": "ncclKernel", "ts": 1, "dur": 1}]'
    for paths in (dict(validate=True), dict(validate=False, extremes=True)):
        out = native.kernel.scan(  # type: ignore[union-attr]
            _Args(dataclasses.replace(SEL, **paths)), bytearray(text.encode()), 1, False, True
        )
        assert out[5] == 0  # not judged in C: handed over (selected or for Python to read)


def test_info_selection_scopes_the_collectives_needles() -> None:
    cats = dict(zip(INFO_SELECTION.name_contains, INFO_SELECTION.name_contains_cats))
    assert cats == {
        "gloo:": "user_annotation",
        "ProfilerStep#": None,
        "nccl": "kernel",
        "rccl": "kernel",
        "c10d::send": "cpu_op",
        "c10d::recv_": "cpu_op",
    }
    assert INFO_SELECTION.text_contains_cat == "kernel"


def test_one_category_per_needle() -> None:
    with pytest.raises(ValueError, match="one category"):
        ScanSelection(name_contains=("a", "b"), name_contains_cats=("kernel",))
    args = _Args(SEL)
    args.name_cats = (b"kernel",)  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        native.kernel.scan(args, bytearray(b"[]"), 1, False, True)  # type: ignore[union-attr]
