"""The report page: the ``info --collectives --json`` object as ONE self-contained HTML
file that draws itself (inline JavaScript into hand-drawn SVG).

:func:`render_page` is pure: a dict in, the page's text out (no I/O). The dict is
``{"collectives": <info --collectives --json's "collectives">, "page": {...}}``
(report/page_data.py makes it); it is embedded unchanged as
``<script type="application/json" id="tracefuse-report">`` -- the page is a view of it
and computes no figure of its own beyond the per-host roll-ups (sums of held and wait,
means of the step-time figures) and the colour scales (a median of each step-time
figure: the step-time colours are time above it, or a share of the typical step). Keys
the JSON may not have yet (``verdict``, ``why``, ``per_collective``, ``hosts``,
``definitions``) are shown when present and as "not available" when absent.

Nothing is fetched: no script, style, font or image comes from anywhere but this
file (it opens from a login node's file system or as an e-mail attachment). Every
heatmap cell is an SVG ``rect`` with ``data-rank`` and ``data-step`` attributes
(``data-step`` is the step number, ``outside`` for collectives outside any step).
When rendered, ``<body>`` gets ``data-rendered="ok"`` (``"error"`` when a script error
happened: ``data-error-text`` says which) and ``data-render-ms``.

Size: for 1024 ranks x 10 steps the per-rank maps of ``by_step`` are ~0.6 MB and
``step_time`` ~20 MB (~2 KB a rank and step, most of it kernel and operator names).
When the embedded JSON would pass :data:`EMBED_BUDGET` bytes, the parts the page does
not draw are left out, largest first (first ``step_time``'s CPU side, kernel categories
and names; every string longer than :data:`NAME_CAP` characters is cut with a marker --
a 1 MB op name in every step made a 12 MB page --, then instances' per-rank times, the
``breakdown`` of every rank and step, the instances, the GPU figures of ``step_time``
the heatmap does not colour by (:data:`STEP_TIME_DRAWN` stay: ~1.1 MB at 1024 x 10), the
per-rank figures of ``by_step`` the page does not draw, and the lists that grow with
distinct names past :data:`LIST_CAP`); and last ``step_time`` as columns of what the
heatmap draws (:func:`_as_columns`): every rank's figures are never left out (issue 38,
item 1), so past that a page grows with the ranks (~45 bytes a rank and step). The
page says what was left out or reshaped (``page.trimmed``): ``info --collectives
--json`` always has everything.
Memory: ``report`` hands ``breakdown`` and ``step_time`` over lazy (``LazyArray``); they are
kept packed as JSON while the candidates are measured (report/page_items.py), and
each candidate's size is counted from orjson's bytes, never from its escaped text.
"""

from __future__ import annotations

import copy
import html
from typing import Any, Dict, List, Optional, Tuple

import orjson

from tracefuse_stream.report.json_stream import LazyArray
from tracefuse_stream.report.page_assets import _CSS, _HEAD, _JS
from tracefuse_stream.report.page_items import SKIP, PackedItems, packed_or_none
from tracefuse_stream.report.page_items import embedded_size as _embedded_size
from tracefuse_stream.report.page_items import raw_json as _raw

#: the most bytes of JSON embedded before parts the page does not draw are left out
EMBED_BUDGET = 4_000_000
#: past the budget, strings (op, group, host, file names; notes) are cut to this many characters
NAME_CAP = 200
#: what ``page.trimmed`` says when strings past :data:`NAME_CAP` were cut
CAPPED = f"text longer than {NAME_CAP} characters (names, notes): cut, marked \u2026"
#: ... and, last, the lists that grow with distinct names to this many entries
LIST_CAP = 100
#: the figures of a ``step_time`` entry's ``gpu`` object the page shows (hover), and ...
STEP_TIME_SHOWN = (
    "compute_us", "comm_exposed_us", "memcpy_us", "idle_us", "overlap_pct",
    "idle_host_wait_us", "idle_kernel_wait_us", "idle_other_us",
)  # fmt: skip
#: ... those the heatmap colours by (page.js ``METRICS``): kept until ``step_time`` goes
STEP_TIME_DRAWN = ("compute_us", "comm_exposed_us", "idle_us")
#: what ``page.trimmed`` said when ``step_time`` itself was left out (pages of an older
#: tracefuse; page.js still looks for it): now it is kept as columns (STEP_TIME_COLUMNS)
STEP_TIME_LEFT_OUT = "step_time (every rank and step): the step-time colours are not offered"
#: what ``page.trimmed`` says when ``step_time`` is kept as columns of what the page draws
STEP_TIME_COLUMNS = (
    "step_time: as columns of the figures the heatmap draws (every rank and step kept, "
    "~45 bytes each: the page grows past its budget with the ranks)"
)
#: the columns, in order: ``gpu`` is 1 where the entry has a ``gpu`` object, else 0
#: (its figures then null)
COLUMNS = ("rank", "step", "step_us", "gpu", *STEP_TIME_DRAWN)


def _escaped(raw: bytes) -> str:
    """``raw`` as the page's text: inside <script>, no "</script>", no "<!--";
    JSON.parse reads the \\u escapes back."""
    text = raw.decode("utf-8")
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _as_columns(c: Dict[str, Any]) -> None:
    """The trim step that keeps every rank's figures at any size (issue 38, item 1):
    ``step_time``, already cut to the figures the heatmap draws, as one array per
    :data:`COLUMNS` (``{"columns": [...], "rank": [...], ...}``, page.js makes the
    entries back), not one object of repeated keys per rank and step."""
    cols: Dict[str, List[Any]] = {k: [] for k in COLUMNS}
    for e in c["step_time"]:  # packed items read back one at a time, through their cuts
        g = e.get("gpu")
        cols["rank"].append(e.get("rank"))
        cols["step"].append(e.get("step"))
        cols["step_us"].append(e.get("step_us"))
        cols["gpu"].append(1 if isinstance(g, dict) else 0)
        for k in STEP_TIME_DRAWN:
            cols[k].append(g.get(k) if isinstance(g, dict) else None)
    c["step_time"] = {"columns": list(COLUMNS), **cols}


def _step_time_keeping(keys: Tuple[str, ...]) -> Any:
    """A trim step: every ``step_time`` entry as rank, step, ``step_us`` and ``keys`` of
    its ``gpu`` object (``null`` stays ``null``: no GPU events on that rank)."""

    def gpu(g: Any) -> Any:
        return {k: v for k, v in g.items() if k in keys} if isinstance(g, dict) else None

    def one(e: Any) -> Any:
        if not isinstance(e, dict):
            return SKIP
        return {
            "rank": e.get("rank"),
            "step": e.get("step"),
            "step_us": e.get("step_us"),
            "gpu": gpu(e.get("gpu")),
        }

    def f(c: Dict[str, Any]) -> None:
        c["step_time"] = _each(c["step_time"], one)

    return f


def _each(v: Any, cut: Any) -> Any:
    """``cut`` applied to every item of an array of the document (SKIP: left out)."""
    if isinstance(v, PackedItems):
        return v.then(cut)
    return [x for x in map(cut, v) if x is not SKIP]


def _filled(v: Any) -> bool:
    """Whether ``v`` is a non-empty array (a list or packed items)."""
    return isinstance(v, (list, PackedItems)) and len(v) > 0


def _trim_steps(doc: Dict[str, Any]) -> List[Tuple[str, Any]]:
    """What can be left out, in order: (what the page says, a function that drops it)."""

    def drop_instance_keys(keys: Tuple[str, ...]) -> Any:
        def f(c: Dict[str, Any]) -> None:
            c["instances"] = _each(
                c.get("instances") or [], lambda i: {k: v for k, v in i.items() if k not in keys}
            )

        return f

    def cut_breakdown(c: Dict[str, Any]) -> None:
        c["breakdown"] = _each(
            c["breakdown"], lambda b: dict(b, contributors=(b.get("contributors") or [])[:3])
        )

    def drop(key: str) -> Any:
        def f(c: Dict[str, Any]) -> None:
            c.pop(key, None)

        return f

    def cap_names(c: Dict[str, Any]) -> None:
        c.update(capped(c))

    def drop_step_keys(c: Dict[str, Any]) -> None:
        c["by_step"] = _each(
            c["by_step"], lambda b: {k: v for k, v in b.items() if k not in ("lateness_us", "busy_us")}
        )

    def cut_lists(c: Dict[str, Any]) -> None:
        for key in ("per_collective", "notes", "why"):
            if isinstance(c.get(key), list):
                c[key] = c[key][:LIST_CAP]
        u = c.get("unmatched")
        if isinstance(u, dict) and isinstance(u.get("by_reason"), list):
            c["unmatched"] = dict(u, by_reason=u["by_reason"][:LIST_CAP])

    c = doc.get("collectives") or {}
    steps: List[Tuple[str, Any]] = []
    st = _filled(c.get("step_time"))
    if st:
        steps.append(
            (
                "step_time: the CPU side, kernel categories and kernel names of every rank and step",
                _step_time_keeping(STEP_TIME_SHOWN),
            )
        )
    rest = {k: v for k, v in c.items() if k != "step_time"}  # step_time's names went above
    if _has_long(rest):
        steps.append((CAPPED, cap_names))
    if c.get("instances"):
        steps.append(
            ("instances: arrival_ns and end_ns per rank", drop_instance_keys(("arrival_ns", "end_ns")))
        )
    if _filled(c.get("breakdown")):
        steps.append(("breakdown: contributors after the first 3 of each rank and step", cut_breakdown))
        steps.append(("breakdown (every rank and step)", drop("breakdown")))
    if c.get("instances"):
        steps.append(("instances: wait_us per rank", drop_instance_keys(("arrival_ns", "end_ns", "wait_us"))))
        steps.append(("instances (the list; by_step has their sums)", drop("instances")))
    if st:
        steps.append(
            (
                "step_time: the GPU figures the heatmap does not colour by (copies, overlap, the idle split)",
                _step_time_keeping(STEP_TIME_DRAWN),
            )
        )
    if c.get("by_step"):
        steps.append(("by_step: lateness_us and busy_us per rank", drop_step_keys))
    steps.append((f"per_collective, unmatched reasons, notes and why after the first {LIST_CAP}", cut_lists))
    if st:  # drawn: the last step, never left out (every rank's figures at any size)
        steps.append((STEP_TIME_COLUMNS, _as_columns))
    return steps


def _has_long(obj: Any, cap: int = NAME_CAP) -> bool:
    """Whether :func:`capped` would cut anything in ``obj``."""
    if isinstance(obj, str):
        return len(obj) > cap
    if isinstance(obj, PackedItems):
        return obj.long  # found as packed (with NAME_CAP: the only cap asked)
    if isinstance(obj, dict):
        return any(_has_long(k, cap) or _has_long(v, cap) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return any(_has_long(v, cap) for v in obj)
    return False


def cap_text(s: str, cap: int = NAME_CAP) -> str:
    """``s``, or its first ``cap`` characters and a marker saying how many more there were."""
    return s if len(s) <= cap else s[:cap] + f"\u2026 [{len(s) - cap:,} more characters]"


def capped(obj: Any, cap: int = NAME_CAP) -> Any:
    """``obj`` with every string (values and keys) longer than ``cap`` cut by :func:`cap_text`."""
    if isinstance(obj, str):
        return cap_text(obj, cap)
    if isinstance(obj, PackedItems):
        return obj.then(lambda x: capped(x, cap))
    if isinstance(obj, dict):
        return {(cap_text(k, cap) if isinstance(k, str) else k): capped(v, cap) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [capped(v, cap) for v in obj]
    return obj


def pack_array(v: Any) -> Any:
    """``v`` packed when it is a ``LazyArray`` whose items read back as written
    (report/page_items.py), else as a list; anything else as it is."""
    if not isinstance(v, LazyArray):
        return v
    p = packed_or_none(v, _has_long)
    return p if p is not None else list(v)


def _packed(doc: Dict[str, Any]) -> Dict[str, Any]:
    """``doc`` with the ``LazyArray`` values of its ``collectives`` (report/page_data.py:
    ``breakdown`` and ``step_time``, every rank and step) packed (report/page_items.py)."""
    c = doc.get("collectives")
    if not isinstance(c, dict) or not any(isinstance(v, LazyArray) for v in c.values()):
        return doc
    return dict(doc, collectives={k: pack_array(v) for k, v in c.items()})  # the rest as they are


def _shell(out: Dict[str, Any], fill: Any) -> Dict[str, Any]:
    c = out.get("collectives")
    if not isinstance(c, dict) or not any(isinstance(v, PackedItems) for v in c.values()):
        return out
    return dict(out, collectives={k: fill(v) if isinstance(v, PackedItems) else v for k, v in c.items()})


def _measure(out: Dict[str, Any]) -> Tuple[int, Optional[bytes]]:
    """A candidate's embedded size, and its raw JSON when it has no packed arrays (made
    then anyway); a packed array is measured item by item, never made whole."""
    shell = _shell(out, lambda p: orjson.Fragment(b"[]"))
    if shell is out:
        raw = _raw(out)
        return _embedded_size(raw), raw
    c = out["collectives"]
    arrays = sum(v.embedded_size() - 2 for v in c.values() if isinstance(v, PackedItems))
    return _embedded_size(_raw(shell)) + arrays, None


def _text(out: Dict[str, Any], raw: Optional[bytes]) -> str:
    return _escaped(raw if raw is not None else _raw(_shell(out, lambda p: p.fragment())))


def embedded_json(doc: Dict[str, Any], budget: int = EMBED_BUDGET) -> str:
    """The JSON text the page embeds: ``doc`` whole, or -- past ``budget`` bytes -- with
    the parts the page does not draw left out and named in ``page.trimmed``."""
    doc = _packed(doc)
    size, raw = _measure(doc)
    if size <= budget:
        return _text(doc, raw)
    out = dict(doc)
    out["collectives"] = copy.copy(doc.get("collectives") or {})
    out["page"] = capped(dict(doc.get("page") or {}))  # inputs, hosts, commands: names too
    trimmed: List[str] = []
    if "diff" in doc:  # report --against: the changes' names (a 1 MB op name each)
        out["diff"] = capped(doc["diff"])
    if _has_long(doc.get("page")) or _has_long(doc.get("diff")):  # cut at once: said at once
        trimmed.append(CAPPED)
        out["page"]["trimmed"] = list(trimmed)
        del raw  # one candidate's bytes at a time
        size, raw = _measure(out)
        if size <= budget:
            return _text(out, raw)
    for what, apply in _trim_steps(doc):
        apply(out["collectives"])
        if what not in trimmed:
            trimmed.append(what)
        out["page"]["trimmed"] = list(trimmed)
        del raw
        size, raw = _measure(out)
        if size <= budget:
            break
    return _text(out, raw)


def render_page(doc: Dict[str, Any], budget: int = EMBED_BUDGET) -> str:
    """The whole HTML page for ``doc`` (see the module docstring), its JSON within
    ``budget`` bytes where leaving out what may go is enough."""
    c = doc.get("collectives") or {}
    n = len(c.get("ranks") or [])
    title = f"tracefuse report: {n} ranks"
    return (
        _HEAD.replace("@TITLE@", html.escape(title))
        .replace("@CSS@", _CSS)
        .replace("@JS@", _JS)
        .replace("@DATA@", embedded_json(doc, budget))  # last: the data's text is never searched
    )


__all__ = [
    "CAPPED",
    "EMBED_BUDGET",
    "LIST_CAP",
    "NAME_CAP",
    "COLUMNS",
    "STEP_TIME_COLUMNS",
    "STEP_TIME_DRAWN",
    "STEP_TIME_LEFT_OUT",
    "STEP_TIME_SHOWN",
    "cap_text",
    "capped",
    "embedded_json",
    "pack_array",
    "render_page",
]
