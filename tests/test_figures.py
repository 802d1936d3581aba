"""Every printed figure adds up and agrees with every other place that prints it
(issue 28, item 6).

* per rank and in total: events in = kept + dropped + labels in (+ skipped), events
  out = kept + labels out (+ flows), in the table, the summary line and --json-summary,
  and out is what the file holds (``'1,087 in, 1,098 out, 0 dropped'`` added up nowhere);
* the "moved us" column is ``moved_ns`` of --json-summary, and the note gives the shift
  every rank shares (``0.000`` next to ``shift_ns -5298233133000000``);
* a cycle's or run's start is its earliest timed event in merge's errors and in info;
* verify counts ranks and names the Collectives process; ``--align``'s rule is the
  README's (spread below the offset); the API takes the CLI's ``--steps 9``; "workers".
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from tracefuse_stream import UsageError, merge
from tracefuse_stream.align.links import LINK_CAT
from tracefuse_stream.cli.app import main as cli_main
from tracefuse_stream.timeunits import iso_utc

REPO = Path(__file__).resolve().parents[1]
RECORDED = REPO / "tests" / "data" / "recorded"
ROW = re.compile(r"^\s*(\d+)\s")


def cli(*args: Any) -> Tuple[int, str, str]:
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        rc = cli_main([str(a) for a in args])
    return rc, o.getvalue(), e.getvalue()


def _num(cell: str) -> float:
    return float(cell.replace(",", ""))


def _table(text: str) -> Tuple[List[str], List[List[str]]]:
    """The summary table: its header's column names and its per-rank rows (cells)."""
    lines = text.splitlines()
    head = re.split(r"\s{2,}|\s(?=\S)", lines[0].strip())
    rows = [ln.split() for ln in lines[1:] if ROW.match(ln)]
    return head, rows


def _written(path: Path) -> Dict[int, Dict[str, int]]:
    """Per rank, the events of the merged file: metadata, merge-made flows, the rest."""
    out: Dict[int, Dict[str, int]] = {}
    for ev in json.loads(path.read_bytes())["traceEvents"]:
        r = (ev.get("args") or {}).get("rank")
        if type(r) is not int:
            continue
        c = out.setdefault(r, {"labels": 0, "flows": 0, "kept": 0})
        if ev["ph"] == "M":
            c["labels"] += 1
        elif ev.get("cat") == LINK_CAT:
            c["flows"] += 1
        else:
            c["kept"] += 1
    return out


CASES = [
    ("ddp4", []),
    ("ddp8_straggler", ["--window", "0:5"]),
    ("ddp4_samepid", ["--steps", "3"]),
    ("ddp4_subgroups", ["--link-collectives"]),
    ("ddp4", ["--include-pyfunc", "--args", "slim", "--name", "."]),
]


@pytest.mark.parametrize("run,opts", CASES)
def test_counts_add_up_in_the_table_the_line_the_json_and_the_file(
    tmp_path: Path, run: str, opts: List[str]
) -> None:
    out = tmp_path / "m.json"
    rc, text, err = cli("merge", RECORDED / run, "-o", out, "-j", "1", *opts)
    assert rc == 0, err
    rc, js, err = cli("merge", RECORDED / run, "-o", out, "--force", "-j", "1", "-q", "--json-summary", *opts)
    assert rc == 0, err
    d = json.loads(js)
    written = _written(out)
    _, rows = _table(text)
    assert len(rows) == len(d["ranks"])
    for row, r in zip(rows, d["ranks"]):
        assert r["events_in"] == r["events_kept"] + r["dropped"] + r["metadata_in"] + r["skipped"], r
        assert r["events_out"] == r["events_kept"] + r["metadata_out"] + r["flows_added"], r
        w = written.get(r["rank"], {"kept": 0, "labels": 0, "flows": 0})
        assert (w["kept"], w["labels"], w["flows"]) == (r["events_kept"], r["metadata_out"], r["flows_added"])
        cells = [
            int(_num(c)) for c in row[1 : 6 + (1 if r["flows_added"] or "--link-collectives" in opts else 0)]
        ]
        expect = [r["events_in"], r["events_kept"], r["dropped"], r["metadata_in"], r["metadata_out"]]
        if "--link-collectives" in opts:
            expect.append(r["flows_added"])
        assert cells == expect, (row, r)
        assert _num(row[-2]) * 1000 == r["moved_ns"]
    # the Collectives process (--link-collectives) is no rank's, but the file holds it
    assert d["events_out"] == sum(r["events_out"] for r in d["ranks"]) + d["collectives_events"]
    assert d["events_out"] == len(json.loads(out.read_bytes())["traceEvents"])
    assert (d["collectives_events"] > 0) == ("--link-collectives" in opts)
    for key in (
        "events_in",
        "events_kept",
        "dropped",
        "metadata_in",
        "metadata_out",
        "flows_added",
    ):
        assert d[key] == sum(r[key] for r in d["ranks"]), key
    line = next(ln for ln in text.splitlines() if ln.startswith("merged "))
    sums = f"{d['events_in']:,} events in = {d['events_kept']:,} kept + {d['dropped']:,} dropped + {d['metadata_in']:,} labels; "
    sums += f"{d['events_out']:,} out = {d['events_kept']:,} kept + {d['metadata_out']:,} labels"
    assert sums in line, line
    if "--link-collectives" in opts:
        assert d["flows_added"] > 0 and f" + {d['flows_added']:,} flow events " in line
        # the note counts in the same unit (and says how many arrows that is)
        assert f"linked by {d['flows_added']:,} flow events ({d['flows_added'] // 2} arrow(s)" in text
        assert f" + {d['collectives_events']:,} in the Collectives process " in line
        # verify counts the same events: the ranks' and the Collectives process's
        verify = json.loads(cli("verify", out, "--json")[1])
        assert verify["totals"]["events"] == d["events_out"], verify["totals"]
    assert "no workers (in this process)" in text and "job(s)" not in text


def test_a_salvaged_file_adds_up(tmp_path: Path) -> None:
    """A truncated file ('2 in, 0 out, 0 dropped': its metadata was counted nowhere) and
    one with unwritable events (skipped: they were counted nowhere, or as out)."""
    raw = gzip.decompress(sorted((RECORDED / "ddp4").iterdir())[0].read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[:3000])
    bad = tmp_path / "bad.json"
    bad.write_bytes(raw.replace(b'"dur": ', b'"dur": "x', 3))
    for path, skipped in ((cut, 0), (bad, 3)):
        s = merge([str(path)], str(tmp_path / "o.json"), force=True, salvage=True, progress=False)
        (r,) = s.ranks
        assert r.salvage is not None and r.skipped == skipped
        assert r.events_in == r.events_kept + r.dropped + r.metadata_in + r.skipped
        assert r.events_out == r.events_kept + r.metadata_out
        assert r.metadata_in > 0
    assert bad_events(raw) == s.events_in  # every event of the file, the 3 skipped included
    _, rows = _table(s.format_text())
    assert [int(_num(c)) for c in rows[0][1:7]] == [
        s.events_in,
        s.events_kept,
        s.dropped,
        s.metadata_in,
        3,
        s.metadata_out,
    ]


def bad_events(raw: bytes) -> int:
    return len(json.loads(raw)["traceEvents"])


def test_moved_us_is_moved_ns_and_the_shared_shift_is_not_noise(tmp_path: Path) -> None:
    """Every rank of ddp8_straggler is re-based by -5,255,675 s onto the output base;
    the column shows 0.000 for all; the shared shift is in --json-summary (shift_ns -
    moved_ns), not in a note on every merge (issue 39: it told nobody anything)."""
    s = merge([str(RECORDED / "ddp8_straggler")], str(tmp_path / "m.json"), jobs=1, progress=False)
    d = s.to_dict()
    shared = {r["shift_ns"] - r["moved_ns"] for r in d["ranks"]}
    assert len(shared) == 1 and shared != {0}
    (common,) = shared
    text = s.format_text()
    _, rows = _table(text)
    assert [_num(row[-2]) * 1000 for row in rows] == [r["moved_ns"] for r in d["ranks"]]
    assert common == d["ranks"][0]["shift_ns"] and common < -5_000_000_000_000_000
    assert "least-moved" not in text and f"{common / 1000:,.3f}" not in text
    assert [ln for ln in text.splitlines() if ln.startswith("note:")] == []


def _cycle_lines(text: str) -> List[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip().startswith("cycle ") and "starts" in ln]


def test_a_cycle_starts_at_its_earliest_event_in_merge_and_info() -> None:
    rc, out, _ = cli("info", RECORDED / "ddp2_cycles", "-j", "1")
    assert rc == 0
    rows = [ln.split() for ln in out.splitlines() if re.match(r"^\s+\d+\s+\d+\s", ln)]
    firsts: Dict[str, List[str]] = {}
    for row in rows:  # cycle, rank, ..., first event date and time, span, file
        firsts.setdefault(row[0], []).append(f"{row[-4]} {row[-3]}")
    info_lines = _cycle_lines(out)
    assert [ln.split(",")[0] for ln in info_lines] == [
        f"cycle {c}: starts {min(v)}" for c, v in sorted(firsts.items())
    ]
    rc, _, err = cli("merge", RECORDED / "ddp2_cycles", "-o", "/nonexistent-dir/m.json")
    assert rc == 2
    assert _cycle_lines(err) == info_lines
    js = json.loads(cli("info", RECORDED / "ddp2_cycles", "-j", "1", "--json")[1])
    assert [c["start_utc"] for c in js["cycles"]] == [min(v) for _, v in sorted(firsts.items())]
    assert [c["start_ns"] for c in js["cycles"]] == [
        min(r["first_ns"] for r in js["ranks"] if r["cycle"] == c["cycle"]) for c in js["cycles"]
    ]


def test_two_runs_start_where_info_says(tmp_path: Path) -> None:
    """The same ranks in two folders: the error's run starts are info's first events."""
    shutil.copytree(RECORDED / "ddp4", tmp_path / "a")
    shutil.copytree(RECORDED / "ddp4_balanced", tmp_path / "b")  # ranks 0-3 again, another job
    rc, _, err = cli("merge", tmp_path / "a", tmp_path / "b", "-o", tmp_path / "m.json")
    assert rc == 2 and "files of 2 runs?" in err, err
    starts = re.findall(r"run \d+: starts (\S+ \S+),", err)
    rc, out, _ = cli("info", tmp_path / "a", tmp_path / "b", "-j", "1", "--json")
    firsts: Dict[str, List[int]] = {}
    for r in json.loads(out)["ranks"]:
        firsts.setdefault(Path(r["path"]).parent.name, []).append(r["first_ns"])
    assert starts == [iso_utc(min(firsts["a"])), iso_utc(min(firsts["b"]))]


def test_verify_counts_ranks_and_names_the_collectives_process(tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    assert cli("merge", RECORDED / "ddp4", "-o", out, "-j", "1", "-q", "--link-collectives")[0] == 0
    rc, text, _ = cli("verify", out)
    assert rc == 0
    assert ", 4 ranks + the Collectives process, " in text.splitlines()[1]
    names = [ln.split()[0] for ln in text.splitlines()[3:] if ln.strip()]
    assert "Collectives" in names and "unknown" not in names
    js = json.loads(cli("verify", out, "--json")[1])
    assert js["totals"]["ranks"] == 4 and "Collectives" in js["ranks"]


def test_align_applies_an_offset_only_with_a_spread_below_it() -> None:
    """README: "applied only with >= 3 matches and a spread (MAD) below the offset";
    +0.500 us with a spread of 0.500 us was printed "applied yes"."""
    from tracefuse_stream.align.clock import RankCollectives
    from tracefuse_stream.align.offsets import estimate_offsets, significant

    assert "a spread (MAD) below the offset" in (REPO / "README.md").read_text()
    assert not significant(500, 500) and significant(501, 500) and significant(0, 0)
    ref = {("seq", "0", "allreduce", i): 10**18 + i * 5_000_000 for i in range(8)}
    # differences 0 and 1000 ns alternating: median 500, MAD 500
    other = {k: v - (1000 if k[3] % 2 else 0) for k, v in ref.items()}
    other[("seq", "0", "allreduce", 7)] = ref[("seq", "0", "allreduce", 7)] - 1000
    data = {0: RankCollectives(ends=ref, count=8), 1: RankCollectives(ends=other, count=8)}
    a = estimate_offsets(data, {0: "a", 1: "b"})[1]
    assert a.estimate_ns == 500 and a.spread_us == 0.5
    assert not a.applied and a.offset_ns == 0 and "is not below it" in a.reason


def test_the_api_takes_what_the_cli_takes(tmp_path: Path) -> None:
    run = RECORDED / "ddp4"
    assert (
        cli("merge", run, "-o", tmp_path / "cli.json", "-j", "1", "-q", "--steps", "2", "--ranks", "0,2-3")[0]
        == 0
    )
    for steps, ranks in (("9", None), ("2", "0,2-3"), (2, [0, 2, 3]), ((2, 2), "0,2-3")):
        out = tmp_path / f"api_{steps!r}_{ranks!r}.json".replace(" ", "")
        if steps == "9":
            with pytest.raises(UsageError, match="ProfilerStep#9|step 9"):  # the CLI's answer too
                merge([str(run)], str(out), steps=steps, jobs=1, progress=False)
            continue
        merge([str(run)], str(out), steps=steps, ranks=ranks, jobs=1, progress=False)
        assert out.read_bytes() == (tmp_path / "cli.json").read_bytes()
    rc, _, err = cli("merge", run, "-o", tmp_path / "c9.json", "-j", "1", "-q", "--steps", "9")
    assert rc == 2 and ("ProfilerStep#9" in err or "step 9" in err), err
    with pytest.raises(UsageError, match="bad window_ms '5'"):
        merge([str(run)], str(tmp_path / "w.json"), window_ms="5")


def test_a_copy_is_named_with_the_instant_info_shows(tmp_path: Path) -> None:
    """Two files of rank 0 from the same instant: the error's instant is info's first event."""
    src = sorted((RECORDED / "ddp4").iterdir())[0]
    raw = gzip.decompress(src.read_bytes())
    (tmp_path / "a.json").write_bytes(raw)
    (tmp_path / "b.json").write_bytes(raw.replace(b'"traceName"', b'"traceName2"', 1))  # not the same bytes
    rc, _, err = cli("merge", tmp_path / "a.json", tmp_path / "b.json", "-o", tmp_path / "m.json")
    assert rc == 2 and "from the same instant" in err, err
    info = json.loads(cli("info", tmp_path / "a.json", "-j", "1", "--json")[1])
    assert f"from the same instant ({iso_utc(info['ranks'][0]['first_ns'])})" in err
