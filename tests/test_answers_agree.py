"""Issue 39 items 3, 5 and 6, re-audited (notes: the audit table in the session's notes):
what the first pass left. Every case is a recorded run (tests/data/recorded/) or a copy
of one changed by script here (a rank's file dropped, a file cut short).

* item 5: a headline naming some steps gives the rank's arrivals and own wait as what
  they are, figures over every step (they were read as the named step's: ddp4_case_d
  rank 1 "waited 3.495 ms itself" in step 3, where it waited 0); the page prints the
  diff's p values as the text does (``5e-07``, not JavaScript's ``5e-7``; ``2.7e-05``,
  not ``0.000027``); ``report --against`` keeps the page's budget whatever the changes'
  names (a 1 MB op name per change made a page past it);
* item 3: ``merge -q`` still prints the input warnings (``report -q`` did, ``merge -q``
  said nothing); a run none of whose files can be read says "not assessed" first (the
  text said "straggler: none"; the reason given was "no collective that two ranks
  share"), and the merge command suggested beside a broken file runs;
* item 6: ``stragglers()`` and ``diff()`` refuse ``jobs=-1`` as ``merge()`` does;
  ``open`` refuses a report page gzipped under a trace's name.
"""

from __future__ import annotations

import gzip
import json
import re
import shlex
import shutil
from pathlib import Path
from typing import Any, Dict, List

import pytest
from hostile import cli

import tracefuse_stream
from tracefuse_stream.errors import EXIT_INPUT, EXIT_OK, UsageError

RECORDED = Path(__file__).parent / "data" / "recorded"


@pytest.fixture(params=["1", "0"], ids=["kernel", "python"])
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TRACEFUSE_KERNEL", request.param)
    return str(request.param)


def embedded(page: Path) -> Dict[str, Any]:
    m = re.search(
        r'<script type="application/json" id="tracefuse-report">(.*?)</script>', page.read_text(), re.S
    )
    assert m
    return dict(json.loads(m.group(1)))


def ranks_0_to_2(d: Path) -> Path:
    """ddp4 (world size 4) without rank 3's file."""
    d.mkdir()
    for f in sorted((RECORDED / "ddp4").iterdir()):
        if json.loads(gzip.decompress(f.read_bytes()))["distributedInfo"]["rank"] != 3:
            shutil.copy(f, d / f.name)
    return d


def cut_short(dst: Path) -> Path:
    """ddp4's rank 0 cut after 3,000 bytes of its JSON: truncated in event #13."""
    src = sorted((RECORDED / "ddp4").iterdir())[0]
    dst.write_bytes(gzip.decompress(src.read_bytes())[:3000])
    return dst


# ----------------------------------------------------------------------------- item 5
def test_a_headline_of_some_steps_says_its_arrivals_and_own_wait_are_over_every_step(kernel: str) -> None:
    """ddp4_case_d: rank 1 held the others 150.383 ms in step 3 only; it was last in 1
    of its 3 instances and waited 3.495 ms itself -- 3.445 ms in step 2 and 0.050 ms in
    step 4, none in step 3: the line says those two figures are over every step."""
    code, out, _ = cli("info", "--collectives", RECORDED / "ddp4_case_d", "-j", "1")
    assert code == EXIT_OK
    (line,) = [x for x in out.splitlines() if x.startswith("straggler:")]
    assert line == (
        "straggler: rank 1 -- the others waited 150.383 ms for it (in step(s) #3); over every step: last to "
        "arrive in 1 of 3 instances, waited 3.495 ms itself; strong evidence by size only (p_chance 0.58, "
        "44.8 x the noise bound)"
    )
    code, out, _ = cli("info", "--collectives", RECORDED / "ddp4_case_d", "-j", "1", "--json")
    c = json.loads(out)["collectives"]
    wait = {b["step"]: b["wait_us"]["1"] for b in c["by_step"]}
    assert wait == {2: 3445.42, 3: 0.0, 4: 49.963}  # 3.495 ms, none of it in step 3
    assert [b["held_us"]["1"] for b in c["by_step"] if b["step"] == 3] == [150383.048]
    (s,) = c["stragglers"]
    assert (s["steps"], s["last_arrivals"], s["instances"]) == ([3], 1, 3)
    # a straggler of every step: its figures are those steps', nothing to say
    code, out, _ = cli("info", "--collectives", RECORDED / "ddp8_straggler", "-j", "1")
    (line,) = [x for x in out.splitlines() if x.startswith("straggler:")]
    assert "(in every step, 2 of 2); last to arrive in 2 of 2 instances, waited 0.000 ms itself;" in line


def test_the_page_prints_the_diffs_p_values_as_the_text_does(tmp_path: Path) -> None:
    """ddp4_runs_a -> ddp4_runs_b: p values 5e-07, 2.7e-05 and 4.1e-05 among them. The
    page printed JavaScript's String() of the number (5e-7, 0.000027, 0.000041)."""
    from test_report_page import dump_dom, rendered_ok

    base, new = RECORDED / "ddp4_runs_a", RECORDED / "ddp4_runs_b"
    code, text, _ = cli("diff", base, new, "-j", "1")
    assert code == EXIT_OK
    in_text = re.findall(r"\bp (\d[\d.e+-]*)", text)
    assert in_text == ["0.00023", "0.0014", "0.0044", "0.00053", "5e-07", "2.7e-05", "4.1e-05"]
    d = tracefuse_stream.diff(str(base), str(new), jobs=1)
    assert [d["step_time"]["p_value_text"]] + [c["p_value_text"] for c in d["changes"]] == in_text
    page = tmp_path / "r.html"
    code, _, _ = cli("report", new, "--against", base, "-o", page, "-j", "1")
    assert code == EXIT_OK
    dom = dump_dom(page)
    rendered_ok(dom)
    summary = re.search(r'<div id="diff-summary".*?</div>', dom, re.S)
    assert summary and ", p 0.00023)" in summary.group(0)
    tips = re.findall(r"\), p ([^<\s]+)</title>", dom)
    assert tips == in_text[1:]  # each change's bar: the text's string, not 5e-7 or 0.000027


def test_report_against_keeps_the_page_budget_whatever_the_changes_names() -> None:
    """The diff of two recorded runs with each change named by 1 MB (the op names a
    trace may carry): the diff section's names are cut as the collectives' are, and the
    page says so; before, the embedded diff carried every name whole (12 MB for 12)."""
    from tracefuse_stream.report.page import CAPPED, EMBED_BUDGET, NAME_CAP, render_page

    d = tracefuse_stream.diff(str(RECORDED / "ddp4_runs_a"), str(RECORDED / "ddp4_runs_b"), jobs=1)
    assert len(d["changes"]) == 6
    for i, c in enumerate(d["changes"]):
        c["name"] = f"op{i}:" + "x" * 1_000_000
    doc = {"collectives": {"ranks": []}, "page": {}, "diff": d}
    page = render_page(doc)
    assert len(page.encode()) < EMBED_BUDGET
    m = re.search(r'id="tracefuse-report">(.*?)</script>', page, re.S)
    assert m
    data = json.loads(m.group(1))
    assert [c["name"] for c in data["diff"]["changes"]] == [
        (f"op{i}:" + "x" * 1_000_000)[:NAME_CAP] + "\u2026 [999,804 more characters]" for i in range(6)
    ]
    assert data["page"]["trimmed"] == [CAPPED]  # only the names: nothing else had to go
    assert data["diff"]["step_time"] == d["step_time"]


# ----------------------------------------------------------------------------- item 3
def test_merge_quiet_still_prints_the_input_warnings(tmp_path: Path) -> None:
    d = ranks_0_to_2(tmp_path / "three")
    want = (
        "warning: 1 of the world's 4 ranks have no file: rank(s) 3 (distributedInfo.world_size 4, 3 present); "
        "what they did is not in any answer\n"
    )
    code, out, err = cli("merge", d, "-o", tmp_path / "m.json", "-q", "-j", "1")
    assert (code, out, err) == (EXIT_OK, "", want)
    code, _, err = cli("report", d, "-o", tmp_path / "r.html", "-q", "-j", "1")
    assert (code, err) == (EXIT_OK, want)  # as report -q does
    code, out, err = cli("merge", RECORDED / "ddp4", "-o", tmp_path / "m2.json", "-q", "-j", "1")
    assert (code, out, err) == (EXIT_OK, "", "")  # one whole run: nothing to say


def test_a_run_with_no_readable_file_says_not_assessed_first(tmp_path: Path, kernel: str) -> None:
    bad = cut_short(tmp_path / "rank0.json")
    said = "not assessed: no input file could be read (see the BROKEN lines); nobody is judged"
    broken = f"BROKEN {bad}: file ends in the middle of the events (truncated) while counting events (at event #13, byte 3000)"
    code, out, _ = cli("info", "--collectives", bad, "-j", "1")
    assert code == EXIT_INPUT
    lines = out.splitlines()
    assert (lines[0], lines[-1]) == (said, broken)
    code, out, _ = cli("info", "--collectives", bad, "-j", "1", "--json")
    assert code == EXIT_INPUT and json.loads(out)["collectives"]["not_assessed"] == said
    page = tmp_path / "r.html"
    code, _, err = cli("report", bad, "-o", page, "-j", "1")
    assert code == EXIT_INPUT
    assert re.fullmatch(
        rf"{re.escape(f'{page}: 0 ranks x 0 steps, {said}')} \(0\.\d\d MB\)\n{re.escape(broken)}\n", err
    )
    assert embedded(page)["page"]["not_assessed"] == said


def test_nothing_matched_is_said_once_in_reports_summary(tmp_path: Path) -> None:
    """natural_order (no collective): the reason, not the reason and the verdict's same words."""
    page = tmp_path / "r.html"
    code, _, err = cli("report", RECORDED / "natural_order", "-o", page, "-j", "1")
    assert code == EXIT_OK
    assert re.fullmatch(
        rf"{re.escape(str(page))}: 12 ranks x 0 steps, not assessed: no collective instance matched across "
        r"ranks \(the inputs hold no collective that two ranks share\); nobody is judged \(0\.\d\d MB\)\n",
        err,
    )


def test_the_merge_command_suggested_beside_a_broken_file_runs(tmp_path: Path, kernel: str) -> None:
    """ddp4 and a file that is not JSON in one folder: the suggested command named the
    folder, and merge stops at the broken file; it names the files read."""
    d = tmp_path / "run"
    shutil.copytree(RECORDED / "ddp4", d)
    (d / "zz_broken.json").write_text('{"traceEvents": [ {"ph": "X", "name": "a" ,, ]}')
    code, out, _ = cli("info", "--collectives", d, "-j", "1")
    assert code == EXIT_INPUT
    (cmd,) = [x.strip() for x in out.splitlines() if x.strip().startswith("tracefuse merge ")]
    args = shlex.split(cmd)[1:]
    files: List[str] = args[1 : args.index("--steps")]
    assert files == [str(p) for p in sorted(d.glob("*.json.gz"))] and str(d) not in args
    args[args.index("-o") + 1] = str(tmp_path / "worst.json.gz")
    assert cli(*args)[0] == EXIT_OK
    assert cli("merge", d, "-o", tmp_path / "folder.json.gz", "-q")[0] == EXIT_INPUT  # what it named before


# ----------------------------------------------------------------------------- item 6
@pytest.mark.parametrize("jobs", [-1, 1.5, True])
def test_the_analysis_api_refuses_a_jobs_count_merge_refuses(jobs: Any, tmp_path: Path) -> None:
    run = str(RECORDED / "ddp4")
    want = f"^jobs must be 0 \\(usable cores\\) or a positive number of workers, not {re.escape(repr(jobs))}$"
    for call in (
        lambda: tracefuse_stream.merge(run, str(tmp_path / "m.json"), jobs=jobs),
        lambda: tracefuse_stream.stragglers(run, jobs=jobs),
        lambda: tracefuse_stream.diff(run, run, jobs=jobs),
    ):
        with pytest.raises(UsageError, match=want):
            call()
    assert not (tmp_path / "m.json").exists()


def test_open_refuses_a_report_page_gzipped_under_a_traces_name(tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    assert cli("report", RECORDED / "ddp4", "-o", page, "-j", "1", "-q")[0] == EXIT_OK
    for name in ("page.json.gz", "page.html.gz"):
        (tmp_path / name).write_bytes(gzip.compress(page.read_bytes()))
        # --timeout: served (the old answer), it would wait for a download
        code, out, err = cli("open", tmp_path / name, "--no-browser", "--port", "0", "--timeout", "2")
        assert (code, out) == (EXIT_INPUT, "")
        assert err.startswith(
            f"tracefuse: error: {tmp_path / name}: is an HTML page (tracefuse report writes one)"
        )


def test_the_page_of_no_readable_file_says_not_assessed_once(tmp_path: Path) -> None:
    """In the not-the-all-clear colour, and not followed by the verdict's same words."""
    from test_report_page import dump_dom, rendered_ok

    page = tmp_path / "r.html"
    assert cli("report", cut_short(tmp_path / "rank0.json"), "-o", page, "-j", "1")[0] == EXIT_INPUT
    dom = dump_dom(page)
    rendered_ok(dom)
    m = re.search(r'<div id="verdict" class="(\w*)">(.*?)</div>', dom, re.S)
    assert m and m.groups() == (
        "unassessed",
        "<b>Not assessed: no input file could be read (see the BROKEN lines); nobody is judged.</b>",
    )


def test_a_rank_whose_first_written_event_is_40_days_on_does_not_start_40_days_apart(
    tmp_path: Path, kernel: str
) -> None:
    """ddp4 with the first complete event written in rank 0's file moved 40 days on (the
    rest as recorded): the ranks' earliest events are 10 us apart. The warnings judged
    by that first-written event and printed the earliest ones: "ranks start 40.0 days
    apart: rank(s) 1-3 start ...52.285748Z; rank(s) 0 start ...52.285738Z", then (the
    run check) "2 runs ... 960.0 h apart", under info's "ranks start within 3.519 ms"."""
    d = tmp_path / "run"
    d.mkdir()
    for f in sorted((RECORDED / "ddp4").iterdir()):
        text = gzip.decompress(f.read_bytes()).decode()
        if json.loads(text)["distributedInfo"]["rank"] == 0:
            m = re.search(r'"ph": "X".*?"ts": (\d+)\.', text, re.S)
            assert m and m.group(1) == "5255626301754"
            text = text[: m.start(1)] + str(5255626301754 + 40 * 86400 * 10**6) + text[m.end(1) :]
        (d / f.name).write_bytes(gzip.compress(text.encode()))
    code, out, _ = cli("info", d, "-j", "1")
    assert code == EXIT_OK and out.splitlines()[-1] == "ranks start within 3.519 ms of each other"
    code, out, _ = cli("info", d, "-j", "1", "--json")
    assert code == EXIT_OK and json.loads(out)["warnings"] == []
    code, out, _ = cli("merge", d, "-o", tmp_path / "m.json", "-j", "1", "--json-summary")
    assert code == EXIT_OK and json.loads(out)["warnings"] == []
    # ranks that do start apart still do: rank 3's base 180 days on
    far = tmp_path / "far"
    shutil.copytree(RECORDED / "ddp4", far)
    f3 = sorted(far.iterdir())[3]
    text = gzip.decompress(f3.read_bytes()).decode()
    text = text.replace(
        '"baseTimeNanoseconds": 1790857026000000000',
        f'"baseTimeNanoseconds": {1790857026000000000 + 180 * 86400 * 10**9}',
    )
    f3.write_bytes(gzip.compress(text.encode()))
    code, out, _ = cli("info", far, "-j", "1", "--json")
    assert json.loads(out)["warnings"] == [
        "ranks start 180.0 days apart (more than 1 day): rank(s) 0-2 start 2026-12-01 08:10:52.285738Z; "
        "rank(s) 3 start 2027-05-30 08:10:52.287295Z; are these traces from one run?"
    ]
