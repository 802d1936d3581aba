"""Time keeps its precision, and no rank moves the others by accident (issue 21, item 2).

Perfetto's JSON importer reads a ``ts``/``dur`` that is not an integer token as a double
of microseconds and turns it into nanoseconds with ``llround(value * 1000.0)``; an
integer token is multiplied exactly (``CoerceToTs`` in
src/trace_processor/importers/json/json_utils.h). At epoch scale (~1.8e15 us) a double
resolves 0.25 us, so slices that abut or nest within a few hundred nanoseconds come out
overlapping. :func:`perfetto_ns` below is that rule; the tests apply it to the merged
JSON itself, as Perfetto would read it, and compare with the exact times of the inputs.

The check of relations: per thread, every ``X`` slice gives two endpoints (start, end);
the dense rank of each endpoint among all of the thread's endpoints decides every
relation between two slices (before, after, nested, equal, partially overlapping). The
ranks computed from the output with Perfetto's rule must equal those computed from the
inputs with exact decimal arithmetic: then nothing Perfetto builds (nesting, the
overlap errors it reports) differs from what the inputs really say.

Inputs: the recorded ddp4 job (Kineto with ``baseTimeNanoseconds``, ts up to 5.3e12 us)
and the same ranks as PyTorch <= 2.3 wrote them (no base, epoch ``ts`` with the same
three decimals), alone and mixed, plus the killed-rank case of the issue.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest
from conftest import BASE_FLOOR_NS, BASE_LEAD_NS

import tracefuse_stream
from tracefuse_stream.errors import OutputError

Token = Tuple[str, str]  # ("i" | "f", the number's text)
SMALL_US = 10**12  # every written ts below this: a double keeps every nanosecond


def _tok(kind: str) -> Any:
    return lambda text: (kind, text)


def load_tokens(path: Path) -> Any:
    """JSON with every number kept as its token text (and whether it is an integer)."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw, parse_int=_tok("i"), parse_float=_tok("f"))


def _llround(x: float) -> int:
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def perfetto_ns(t: Token) -> int:
    """Nanoseconds as Perfetto's JSON importer reads a ts/dur token (module docstring)."""
    kind, text = t
    return int(text) * 1000 if kind == "i" else _llround(float(text) * 1000.0)


def exact_ns(t: Token) -> int:
    return int(Decimal(t[1]) * 1000)


def _events(doc: Any) -> List[Dict[str, Any]]:
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def endpoint_ranks(slices: Sequence[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """Each slice's (start, end) as dense ranks among all endpoints of its thread."""
    order = {v: i for i, v in enumerate(sorted({v for s in slices for v in s}))}
    return [(order[a], order[b]) for a, b in slices]


def spills(slices: Sequence[Tuple[int, int]]) -> int:
    """Slices that partially overlap an open one (Perfetto's
    ``slice_spill_overlapping_complete_event``), by the importer's stack rule."""
    stack: List[int] = []
    n = 0
    for a, b in sorted(slices, key=lambda s: s[0]):
        while stack and stack[-1] <= a:
            stack.pop()
        if stack and b > stack[-1]:
            n += 1
            continue
        stack.append(b)
    return n


def _rank_slices(inp: Any, out_events: List[Dict[str, Any]], rank: int) -> Dict[Any, List[Tuple[Any, Any]]]:
    """{input thread: [(input X event, output X event)]}: the output keeps the rank's X
    events in input order (the merges here keep every event)."""
    ins = [e for e in _events(inp) if e.get("ph") == "X"]
    outs = [e for e in out_events if e.get("ph") == "X" and e["args"]["rank"] == ("i", str(rank))]
    assert [e["name"] for e in ins] == [e["name"] for e in outs], f"rank {rank}: X events differ"
    groups: Dict[Any, List[Tuple[Any, Any]]] = defaultdict(list)
    for a, b in zip(ins, outs):
        groups[(json.dumps(a.get("pid")), json.dumps(a.get("tid")))].append((a, b))
    return groups


def check_precision(out_path: Path, inputs: Dict[int, Path]) -> Dict[str, int]:
    """Assert: every written ts is small; per thread, the output read as Perfetto reads
    it has exactly the inputs' exact relations. Returns overlap counts: the inputs
    loaded alone by Perfetto, exactly, and the output as Perfetto reads it."""
    out = load_tokens(out_path)
    out_events = _events(out)
    big = [e["ts"][1] for e in out_events if "ts" in e and abs(Decimal(e["ts"][1])) >= SMALL_US]
    assert not big, f"{len(big)} written ts >= 1e12 us, e.g. {big[:3]}"
    assert min(Decimal(e["ts"][1]) for e in out_events if "ts" in e) >= 0
    counts = {"alone": 0, "exact": 0, "merged": 0}
    for rank, path in inputs.items():
        for _thread, pairs in _rank_slices(load_tokens(path), out_events, rank).items():
            exact = [(exact_ns(a["ts"]), exact_ns(a["ts"]) + exact_ns(a["dur"])) for a, _ in pairs]
            alone = [(perfetto_ns(a["ts"]), perfetto_ns(a["ts"]) + perfetto_ns(a["dur"])) for a, _ in pairs]
            seen = [(perfetto_ns(b["ts"]), perfetto_ns(b["ts"]) + perfetto_ns(b["dur"])) for _, b in pairs]
            assert endpoint_ranks(seen) == endpoint_ranks(exact), f"rank {rank}: slice relations changed"
            counts["alone"] += spills(alone)
            counts["exact"] += spills(exact)
            counts["merged"] += spills(seen)
    return counts


def as_epoch(src: Path, dst: Path) -> None:
    """The trace as PyTorch <= 2.3 wrote it: no baseTimeNanoseconds, no distributedInfo,
    epoch ts (the same three decimals: the input the precision loss hits)."""
    text = gzip.decompress(src.read_bytes()).decode() if src.suffix == ".gz" else src.read_text()
    doc = json.loads(text, parse_float=Decimal)
    base = doc.pop("baseTimeNanoseconds")
    doc.pop("distributedInfo", None)
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] = Decimal(base).scaleb(-3) + e["ts"]
    body = json.dumps(doc, default=lambda d: f"@@{d}@@")
    dst.write_text(re.sub(r'"@@([^@]*)@@"', r"\1", body))


def _merge(inputs: Dict[int, Path], out: Path, **kw: Any) -> Any:
    return tracefuse_stream.merge(
        {r: str(p) for r, p in inputs.items()}, str(out), include_pyfunc=True, jobs=1, progress=False, **kw
    )


@pytest.fixture(scope="module")
def epoch_ddp4(
    rec_ddp4_by_rank: Dict[int, Path], tmp_path_factory: pytest.TempPathFactory
) -> Dict[int, Path]:
    d = tmp_path_factory.mktemp("epoch")
    out = {}
    for r, p in rec_ddp4_by_rank.items():
        out[r] = d / f"rank{r}.json"
        as_epoch(p, out[r])
    return out


def _first_abs_ns(path: Path) -> int:
    doc = load_tokens(path)
    base = int(doc.get("baseTimeNanoseconds", ("i", "0"))[1])
    first = next(e for e in _events(doc) if e.get("ph") != "M" and "ts" in e)
    return base + exact_ns(first["ts"])


def _expected_base(inputs: Dict[int, Path]) -> int:
    lead = min(_first_abs_ns(p) for p in inputs.values()) - BASE_LEAD_NS
    return lead - lead % BASE_FLOOR_NS


def test_old_epoch_traces_merge_with_small_exact_ts(epoch_ddp4: Dict[int, Path], tmp_path: Path) -> None:
    """All inputs old (epoch ts, no base): alone, Perfetto sees overlaps that are not
    there; the merge has exactly the real ones and keeps every relation."""
    out = tmp_path / "m.json"
    s = _merge(epoch_ddp4, out, verify=True)
    assert s.base_time_ns == _expected_base(epoch_ddp4) > 0
    counts = check_precision(out, epoch_ddp4)
    assert counts["merged"] == counts["exact"] < counts["alone"], counts


def test_old_and_new_traces_mixed(
    epoch_ddp4: Dict[int, Path], rec_ddp4_by_rank: Dict[int, Path], tmp_path: Path
) -> None:
    inputs = {0: epoch_ddp4[0], 1: rec_ddp4_by_rank[1], 2: epoch_ddp4[2], 3: rec_ddp4_by_rank[3]}
    out = tmp_path / "m.json.gz"
    s = _merge(inputs, out, verify=True)
    assert s.base_time_ns == _expected_base(inputs)
    counts = check_precision(out, inputs)
    assert counts["merged"] == counts["exact"] <= counts["alone"], counts


def test_new_traces_get_small_ts_too(rec_ddp4_by_rank: Dict[int, Path], tmp_path: Path) -> None:
    """Kineto's base is floored to ~91 days: its ts reach 7.9e12 us, where a double keeps
    only about a nanosecond. The merge moves every rank by the same whole microseconds."""
    out = tmp_path / "m.json"
    s = _merge(rec_ddp4_by_rank, out, verify=True)
    assert s.base_time_ns == _expected_base(rec_ddp4_by_rank)
    check_precision(out, rec_ddp4_by_rank)
    header = load_tokens(out)["tracefuse"]
    for r, info in header["ranks"].items():
        base_r = int(info["base_time_ns"][1])
        assert info["shift_ns"] == ("i", str(base_r - s.base_time_ns)), r  # an exact integer token
        assert Decimal(info["shift_us"][1]) * 1000 == base_r - s.base_time_ns  # exact, no float


def test_real_old_gpu_trace(tmp_path: Path) -> None:
    """The real PyTorch <= 2.3 trace of the shared fixtures (integer epoch ts)."""
    from conftest import require_shared

    path = require_shared("real", "a100_no_distinfo_epoch_ts.json.gz")
    out = tmp_path / "m.json"
    s = _merge({0: path}, out, verify=True)
    assert s.base_time_ns == _expected_base({0: path})
    counts = check_precision(out, {0: path})
    assert counts["merged"] == counts["exact"] == counts["alone"], counts
    # whole-ms base, integer ts: the integers stay integers
    assert all(e["ts"][0] == "i" for e in _events(load_tokens(out)) if e["ph"] == "X")


def _tiny(
    path: Path, base: Optional[int], events: List[Dict[str, Any]], rank: int, truncate: bool = False
) -> None:
    head: Dict[str, Any] = {"distributedInfo": {"rank": rank, "world_size": 2}}
    if base is not None:
        head["baseTimeNanoseconds"] = base
    text = json.dumps(dict(head, traceEvents=events))
    path.write_text(
        text[: text.index('"traceEvents": [') + 16] + json.dumps(events[0])[:-5] if truncate else text
    )


@pytest.mark.parametrize("align", [None, "collectives"])
def test_killed_rank_moves_nothing(tmp_path: Path, align: Optional[str]) -> None:
    """The issue's case: a rank killed before it wrote anything (no base, no events) is
    salvaged next to a rank with base 1.7e18 and ts 1.5: base and ts stay."""
    base = 1_700_000_000_000_000_000
    r0, r1 = tmp_path / "r0.json", tmp_path / "r1.json"
    _tiny(r0, base, [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1.5, "dur": 1}], 0)
    meta = {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "ts": 0.5, "args": {"name": "p"}}
    _tiny(r1, None, [meta], 1, truncate=True)  # cut inside its first event: no time at all
    out = tmp_path / "m.json"
    kw = {"align": align} if align else {}
    s = tracefuse_stream.merge([str(r0), str(r1)], str(out), salvage=True, progress=False, **kw)
    doc = load_tokens(out)
    assert s.base_time_ns == base and doc["baseTimeNanoseconds"] == ("i", str(base))
    assert [e["ts"] for e in doc["traceEvents"] if e["ph"] == "X"] == [("f", "1.5")]


def test_event_long_before_its_rank_start_is_placed_again(tmp_path: Path) -> None:
    """An event more than the lead (10 s) before its rank's first event in file order:
    the first writing finds it, the merge is written again from it, never a negative ts."""
    base = 1_700_000_000_000_000_000
    evs = [  # ts 6000 s after the base: B is chosen from the first event (6000 s - 10 s)
        {"ph": "X", "cat": "cpu_op", "name": "first", "pid": 1, "tid": 1, "ts": 6e9, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "early", "pid": 1, "tid": 1, "ts": 5980001234.5678, "dur": 1},
    ]
    r0 = tmp_path / "r0.json"
    _tiny(r0, base, evs, 0)
    out = tmp_path / "m.json"
    s = tracefuse_stream.merge([str(r0)], str(out), progress=False, verify=True)
    assert s.base_time_ns == base + 5_980_001_000_000  # the early event's ms
    ts = {e["name"]: e["ts"] for e in load_tokens(out)["traceEvents"] if e["ph"] == "X"}
    assert ts == {"early": ("f", "234.5678"), "first": ("f", "19999000.0")}
    # stdout cannot be written twice: a clear error, not a trace with negative ts
    with pytest.raises(OutputError, match="before the output base"):
        tracefuse_stream.merge([str(r0)], "-", progress=False)
