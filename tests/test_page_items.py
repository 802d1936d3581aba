"""The page's packed arrays (report/page_items.py ``PackedItems``; issue 38): the items
read back and written as the list they came from, whatever the chunks (by count or by
bytes), through cuts; and ``report``'s document holding its per-rank arrays packed."""

from __future__ import annotations

import json
import random
from pathlib import Path

import orjson
import pytest

from tracefuse_stream.report import page_items
from tracefuse_stream.report.json_stream import LazyArray
from tracefuse_stream.report.page_data import report_data
from tracefuse_stream.report.page_items import SKIP, PackedItems
from tracefuse_synth.run import write_run


def _items(seed: int, n: int) -> list:
    rng = random.Random(seed)
    return [
        {"rank": i, "name": "x" * rng.randint(0, 300), "us": round(rng.random() * 1e4, 3), "per": {str(k): k for k in range(rng.randint(0, 50))}}
        for i in range(n)
    ]  # fmt: skip


def test_items_read_back_and_write_as_the_list_in_chunks_by_count_and_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seed = random.randrange(1 << 30)
    print("seed", seed)
    items = _items(seed, 700)
    monkeypatch.setattr(page_items, "CHUNK_BYTES", 4096)  # several items a chunk, never 256
    p = PackedItems(LazyArray(lambda: iter(items)), lambda _x: False)
    assert len(p._chunks) > 700 // 256 + 1  # cut by bytes, not only by count
    assert len(p) == 700 and list(p) == items
    assert orjson.dumps(p.fragment()) == orjson.dumps(items)
    cut = p.then(lambda it: SKIP if it["rank"] % 3 else dict(it, name=it["name"][:5]))
    want = [dict(it, name=it["name"][:5]) for it in items if it["rank"] % 3 == 0]
    assert list(cut) == want and orjson.dumps(cut.fragment()) == orjson.dumps(want)
    assert cut.embedded_size() == len(orjson.dumps(want))  # no <, >, & in these items


def test_an_empty_array_writes_brackets() -> None:
    p = PackedItems(LazyArray(lambda: iter(())), lambda _x: False)
    assert len(p) == 0 and list(p) == [] and orjson.dumps(p.fragment()) == b"[]"


def test_the_report_document_holds_every_rank_s_arrays_packed(tmp_path: Path) -> None:
    write_run(tmp_path, 4, steps=3, layers=1)
    d = report_data(
        [str(tmp_path)], rank_from="auto", ranks=None, cycle=None, steps=None, jobs=1, command="x"
    )
    c = d.document["collectives"]
    for key in ("instances", "by_step", "step_skew"):
        assert isinstance(c[key], PackedItems), key
    assert len(c["by_step"]) == 3 and [b["step"] for b in c["by_step"]] == sorted(
        b["step"] for b in c["by_step"]
    )
    assert len(c["instances"]) > 0 and all(
        set(i["arrival_ns"]) == {"0", "1", "2", "3"} for i in c["instances"]
    )
    json.dumps(list(c["step_skew"]))  # plain JSON items
