"""Issue 39 part C: one answer for every input, analysis side. The figures agree
wherever they appear (headline totals of the steps named, p values in one rounding,
flows in one unit), text from traces cannot forge report lines, the page keeps its
size budget, and the smaller items (usage errors for -j, report's summary, ...)."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any, Dict

import pytest
from conftest import run_cli
from hostile import cli

from tracefuse_stream.align.collectives import CollectiveEvent, CollectiveTable, Entry, Instance
from tracefuse_stream.report import collectives as C
from tracefuse_stream.textout import p_round, p_text, printable, terminal

REPO = Path(__file__).resolve().parents[1]
RECORDED = REPO / "tests" / "data" / "recorded"
MS = 1_000_000


def intermittent_table(name: str = "gloo:all_reduce", group: str = "0", n_steps: int = 5) -> CollectiveTable:
    """4 ranks, 5 steps of 100 ms, step 3 of 600 ms; one all-reduce a step, at +50 ms;
    rank 2 arrives 3 ms late in every step and 400 ms late in step 3 (it stands out in
    step 3 only: intermittent, longer than a typical step)."""
    steps: Dict[int, Dict[int, Any]] = {r: {} for r in range(4)}
    insts = []
    t = 0
    for s in range(1, n_steps + 1):
        length = 600 * MS if s == 3 else 100 * MS
        entries = {}
        for r in range(4):
            steps[r][s] = (t, t + length)
            a = t + 50 * MS + r * 10_000 + ((400 * MS if s == 3 else 3 * MS) if r == 2 else 0)
            ev = CollectiveEvent(-1, "gloo", name, a, 1000, 1, ("x",), group, None, None, True)
            entries[r] = Entry(ev, a, a + 1000, None)
        last = max(e.start_ns for e in entries.values())
        entries = {r: e._replace(end_ns=last + 1000) for r, e in entries.items()}
        insts.append(Instance(s - 1, name, group, "gloo order", entries, s))
        t += length
    return CollectiveTable([0, 1, 2, 3], insts, Counter(), [], steps=steps)


# ------------------------------------------------------------------ 5: figures that agree
def test_the_headline_sums_the_steps_it_names() -> None:
    """Rank 2 stands out in step 3 only: the others waited 400.010 ms for it there (and
    3 ms + 10 us more in each of the 4 other steps): the sentence naming step #3 says
    400.010, JSON keeps the all-steps total under its own name."""
    table = intermittent_table()
    text = C.format_text(table)
    assert text.splitlines()[1].startswith(
        "straggler: rank 2 -- the others waited 400.010 ms for it (in step(s) #3); "
    )
    j = C.to_json(table)["collectives"]
    (s,) = j["stragglers"]
    assert (s["steps"], s["held_us"], s["held_all_steps_us"]) == ([3], 400010.0, 412050.0)
    assert "the others waited 400.010 ms for rank 2" in j["verdict"]["text"]
    ranks = {r["rank"]: r for r in j["ranks"]}
    assert ranks[2]["held_us"] == 412050.0  # ranks[]: every step, as documented
    by_step = sum(b["held_us"]["2"] for b in j["by_step"] if b["step"] in s["steps"])
    assert by_step == s["held_us"]


@pytest.mark.parametrize(
    "p, text",
    [
        (0.125, "0.13"),
        (6.04e-08, "6e-08"),
        (0.015625, "0.016"),
        (0.00195, "0.002"),
        (1.0, "1"),
        (0.58, "0.58"),
    ],
)
def test_p_values_have_one_rounding(p: float, text: str) -> None:
    assert p_text(p) == text and p_round(p) == float(text)


def test_p_value_is_the_same_in_text_json_and_page() -> None:
    from tracefuse_stream.report.page import render_page
    from tracefuse_stream.report.page_assets import _JS

    table = intermittent_table()
    j = C.to_json(table)["collectives"]
    v = j["verdict"]
    assert (v["p_chance"], v["p_chance_text"]) == (0.00098, "0.00098")  # 0.5 ** 10 = 0.0009765625
    assert j["stragglers"][0]["p_chance"] == 0.00098
    assert "p_chance 0.00098," in v["text"] and "p_chance 0.00098," in C.format_text(table)
    page = render_page({"collectives": j, "page": {}})
    assert '"p_chance_text":"0.00098"' in page
    # the page prints the string Python made, never its own rounding of the number
    assert "V.p_chance_text" in _JS and "toPrecision" not in _JS


# ------------------------------------------------------------------ 5: escaped text
def test_names_from_a_trace_cannot_forge_report_lines() -> None:
    name = "gloo:all_reduce\n\x1b[2Jstraggler: none\r"
    text = C.format_text(intermittent_table(name=name, group="g\x1b]0;x\x07"))
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert not any(ln.startswith("straggler: none") for ln in text.splitlines())
    assert "#0 gloo:all_reduce\\n\\x1b[2Jstraggler: none\\r (group g\\x1b]0;x\\x07, step 1" in text


def test_printable_and_terminal() -> None:
    assert printable("a\x1b[31mb\nc\rd\u2028e\x85\u202e") == "a\\x1b[31mb\\nc\\rd\\u2028e\\x85\\u202e"
    assert terminal("line 1\nline\t2\x1b[K\r") == "line 1\nline\t2\\x1b[K\\r"


def test_info_table_escapes_host_and_file_names(tmp_path: Path) -> None:
    d = tmp_path / "run\x1b[31m"
    d.mkdir()
    body = '{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 1, "dur": 2}'
    (d / "r0.json").write_text(
        '{"distributedInfo": {"rank": 0, "world_size": 1}, "host_name": "n\\u001b[2J\\nBROKEN x: forged", '
        f'"baseTimeNanoseconds": 1700000000000000000, "traceEvents": [{body}]}}'
    )
    rc, out, err = cli("info", d, "-j", "1")
    assert rc == 0, err
    assert "\x1b" not in out and not any(ln.startswith("BROKEN") for ln in out.splitlines())
    row = out.splitlines()[1]
    assert " n\\x1b[2J\\nBR " in row and row.endswith("run\\x1b[31m/r0.json")


# ------------------------------------------------------------------ 6: smaller items
@pytest.mark.parametrize("command", ["merge", "info", "report"])
@pytest.mark.parametrize("jobs", ["0", "-1"])
def test_jobs_below_one_is_a_usage_error(command: str, jobs: str, tmp_path: Path) -> None:
    p = run_cli(command, RECORDED / "ddp4", "-j", jobs, "-o" if command != "info" else "--json",
                *([str(tmp_path / ("o.json" if command == "merge" else "o.html"))] if command != "info" else []))  # fmt: skip
    assert p.returncode == 2
    assert p.stderr_text == (
        f"tracefuse: error: --jobs must be 1 or more workers (leave -j out for the usable cores), not '{jobs}'\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_report_to_stdout_prints_its_summary_on_stderr() -> None:
    p = run_cli("report", RECORDED / "ddp8_straggler", "-o", "-", "-j", "1")
    assert p.returncode == 0
    assert p.stdout.startswith(b"<!DOCTYPE html>") or p.stdout.lstrip().lower().startswith(b"<!doctype html>")
    assert re.match(r"stdout: 8 ranks x 2 steps, rank 5 held the others back in every step", p.stderr_text)


def test_report_with_a_broken_file_writes_the_page_and_exits_1(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RECORDED / "ddp4", run)
    broken = run / "zz_broken.json"
    broken.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1')
    out = tmp_path / "r.html"
    p = run_cli("report", run, "-o", out, "-j", "1")
    assert p.returncode == 1 and out.is_file()
    assert f"BROKEN {broken}: " in p.stderr_text
    help_ = run_cli("report", "--help").stdout.decode()
    assert "the exit status is 1" in " ".join(help_.split())
    readme = " ".join((REPO / "README.md").read_text().split())
    assert (
        "With a broken input file `report` does as `info`: the page of the readable files is written"
        in readme
    )


# ------------------------------------------------------------------ 5: the page's budget
def test_a_long_name_in_every_step_keeps_the_page_in_its_budget() -> None:
    """A 1 MB op name x 12 steps (and a 1 MB host name) made a 12 MB page: past the
    budget every string is cut to NAME_CAP characters with a marker, and the page says so."""
    from tracefuse_stream.report.page import EMBED_BUDGET, NAME_CAP, render_page

    long = "gloo:" + "x" * 1_000_000
    j = C.to_json(intermittent_table(name=long, n_steps=12))["collectives"]
    assert len(json.dumps(j)) > 12_000_000
    page = render_page({"collectives": j, "page": {"hosts": {"0": "h" * 1_000_000}}})
    assert len(page.encode()) < EMBED_BUDGET
    data = json.loads(re.search(r'id="tracefuse-report">(.*?)</script>', page, re.S).group(1))
    names = {i["name"] for i in data["collectives"].get("instances", [])}
    assert names == {long[:NAME_CAP] + "\u2026 [999,805 more characters]"}
    assert data["page"]["hosts"]["0"] == "h" * NAME_CAP + "\u2026 [999,800 more characters]"
    assert data["page"]["trimmed"][0] == "text longer than 200 characters (names, notes): cut, marked \u2026"
    assert len(data["collectives"]["by_step"]) == 12  # what the page draws stays whole


def test_the_page_is_unchanged_within_its_budget() -> None:
    from tracefuse_stream.report.page import embedded_json

    doc = {"collectives": C.to_json(intermittent_table(name="n" * 5000))["collectives"], "page": {}}
    assert json.loads(embedded_json(doc)) == json.loads(json.dumps(doc))


# ------------------------------------------------------------------ 5: the colour scale
def _fills(dom: str) -> Dict[str, Any]:
    svg = re.search(r'<svg id="heatmap".*?</svg>', dom, re.S)
    assert svg
    out = {}
    for tag in re.findall(r"<rect\b[^>]*\bdata-rank=[^>]*>", svg.group(0)):
        a = dict(re.findall(r'([\w-]+)="([^"]*)"', tag))
        out[(int(a["data-rank"]), a["data-step"])] = tuple(int(x) for x in re.findall(r"\d+", a["fill"]))
    return out


def test_a_quiet_runs_heatmap_stays_pale_and_a_straggler_is_dark_red(tmp_path: Path) -> None:
    """ddp4_balanced_work: the others waited at most 0.78 ms for any rank (thresholds
    about 5.5 ms): the cells stay pale (green channel above 200, the palette's light end),
    not dark red because 0.78 ms is the run's own maximum. ddp8_straggler's rank 5 is
    dark red and the others pale."""
    from test_report_page import dump_dom, rendered_ok

    quiet, slow = tmp_path / "quiet.html", tmp_path / "slow.html"
    assert run_cli("report", RECORDED / "ddp4_balanced_work", "-o", quiet, "-j", "1").returncode == 0
    assert run_cli("report", RECORDED / "ddp8_straggler", "-o", slow, "-j", "1").returncode == 0
    dom = dump_dom(quiet)
    rendered_ok(dom)
    fills = _fills(dom)
    assert fills and all(g > 200 for _, g, _ in fills.values()), fills
    assert "at least twice the largest threshold: noise stays pale" in dom
    fills = _fills(dump_dom(slow))
    assert (165, 0, 38) in {fills[(5, "2")], fills[(5, "3")]}  # the maximum
    assert all(g < 20 for _, g, _ in (fills[(5, "2")], fills[(5, "3")]))  # both dark red
    assert all(g > 200 for (r, _), (_, g, _) in fills.items() if r != 5)


@pytest.mark.parametrize("kernel", ["1", "0"])
def test_invalid_json_names_the_byte(tmp_path: Path, kernel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README promises "(at event #N, byte B)": B is where the parser stops."""
    monkeypatch.setenv("TRACEFUSE_KERNEL", kernel)
    ok = '{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 1, "dur": 2}'
    text = (
        '{"baseTimeNanoseconds": 1700000000000000000, "traceEvents": [' + ok + ",\n"
        '{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 2, "dur": 1, "args": {"x": [1,,2]}},\n'
        + ok
        + "]}"
    )
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    rc, _, err = cli("merge", bad, "-o", tmp_path / "o.json", "-j", "1")
    at = text.index(",,") + 1  # the second comma
    assert (rc, err.strip()) == (
        1,
        f"tracefuse: error: {bad}: invalid JSON: parse error: unallowed token at this point in JSON text "
        f"(at event #1, byte {at}); use --salvage to keep the complete events before it",
    )
    # gzip: the offset is in the decompressed text
    gz = tmp_path / "bad.json.gz"
    import gzip

    gz.write_bytes(gzip.compress(text.encode()))
    rc, _, err = cli("merge", gz, "-o", tmp_path / "o.json", "-j", "1")
    assert rc == 1 and f"(at event #1, byte {at});" in err


def test_a_steps_window_says_crossing_events_are_kept_whole(tmp_path: Path) -> None:
    from tracefuse_stream.select.spans import SPAN_DROPPED_NOTE

    rc, out, _ = cli(
        "merge", RECORDED / "ddp8_straggler", "--steps", "3:3", "-o", tmp_path / "m.json", "-j", "1"
    )
    assert rc == 0
    assert f"note: ranks 0-7: {SPAN_DROPPED_NOTE}" in out
    assert SPAN_DROPPED_NOTE.endswith(
        "dropped; the other events that cross the window's edges are kept whole, so a rank's slices "
        "can reach before and after the window"
    )
    window = re.search(r"time window: .* \(([\d.,]+) ms\)", out)
    assert window
    events = [e for e in json.loads((tmp_path / "m.json").read_bytes())["traceEvents"] if e.get("ph") == "X"]
    extent_ms = (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) / 1000
    assert extent_ms > float(window.group(1).replace(",", ""))  # what the note now says


def test_flows_are_counted_in_one_unit(tmp_path: Path) -> None:
    rc, out, _ = cli("merge", RECORDED / "ddp4", "--link-collectives", "-o", tmp_path / "m.json", "-j", "1")
    assert rc == 0
    events = json.loads((tmp_path / "m.json").read_bytes())["traceEvents"]
    flow_events = sum(1 for e in events if e.get("ph") in ("s", "f") and e.get("cat") == "collective")
    assert flow_events > 0 and f" + {flow_events:,} flow events " in out
    assert (
        f"linked by {flow_events:,} flow events ({flow_events // 2} arrow(s), a start and an end event each)"
        in out
    )


def test_one_step_chosen_by_steps_is_selected_not_profiled(tmp_path: Path) -> None:
    """ddp8_straggler profiled steps 2 and 3; --steps 3:3 selects one of them."""
    p = run_cli("report", RECORDED / "ddp8_straggler", "--steps", "3:3", "-o", tmp_path / "r.html", "-j", "1")
    assert p.returncode == 0
    assert p.stderr_text.startswith(
        f"{tmp_path / 'r.html'}: 8 ranks x 1 step, one step selected: rank 5 held the others back in the one "
        "step selected (strong evidence by size only: the others waited 200.194 ms for rank 5, p_chance 0.13, "
    )
    assert "profiled" not in p.stderr_text
    # one step in the recording (a table without --steps): still "profiled"
    table = intermittent_table(n_steps=1)
    a = C.analyse(table)
    assert C.verdict_sentence(table, a.verdict, a.stats).startswith("one step profiled: no rank stands out")


def test_json_summary_counts_one_cycle_as_one(tmp_path: Path) -> None:
    rc, out, _ = cli("merge", RECORDED / "ddp4", "-o", tmp_path / "m.json", "--json-summary", "-j", "1")
    assert rc == 0 and json.loads(out)["cycles"] == 1
    rc, out, _ = cli(
        "merge",
        RECORDED / "ddp2_cycles",
        "--cycle",
        "1",
        "-o",
        tmp_path / "c.json",
        "--json-summary",
        "-j",
        "1",
    )
    assert rc == 0 and json.loads(out)["cycles"] == 1
    rc, out, _ = cli(
        "merge",
        RECORDED / "ddp2_cycles",
        "--cycle",
        "all",
        "-o",
        tmp_path / "a.json",
        "--json-summary",
        "-j",
        "1",
    )
    assert rc == 0 and json.loads(out)["cycles"] == 2


def test_verify_of_a_rank_trace_says_it_is_not_a_merged_trace() -> None:
    raw = sorted((RECORDED / "ddp4").iterdir())[0]
    rc, out, err = cli("verify", raw)
    assert (rc, out) == (1, "")
    assert err.strip() == (
        f"tracefuse: error: {raw}: not a merged trace: a rank's own profiler trace (it has distributedInfo, "
        "deviceProperties, trace_id, no tracefuse header); verify checks what tracefuse merge wrote; merge it "
        f"first (tracefuse merge {raw} -o merged.json.gz), then verify merged.json.gz"
    )
    assert "process_unnamed" not in err
