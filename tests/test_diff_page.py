"""``tracefuse report NEW --against BASE``: the page with a diff section.

The section is the ``tracefuse diff BASE NEW --json`` object, embedded unchanged as
``diff`` and drawn: one bar per listed change, one heatmap cell per rank and step pair
(the step-time change). On the recorded pair where rank 2 of NEW calls
torch.linalg.svd every step (tests/data/recorded/README.md, issue-37 sets).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_report_page import REPO, dump_dom, embedded, rendered_ok, run_cli

import tracefuse_stream

BASE = REPO / "tests" / "data" / "recorded" / "ddp4_runs_a"
NEW = REPO / "tests" / "data" / "recorded" / "ddp4_runs_c"


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("diffpage") / "report.html"
    p = run_cli("report", NEW, "--against", BASE, "-o", out, "-j", "1")
    assert p.returncode == 0, p.stderr
    assert "against the base run: changed, 3 change(s) listed" in p.stderr
    return out


def test_the_page_embeds_the_diff_object(page: Path) -> None:
    data = embedded(page.read_text())
    assert data["diff"] == tracefuse_stream.diff(str(BASE), str(NEW))
    assert data["page"]["command"].endswith(f"--against {BASE} -o {page}")
    assert data["collectives"]["ranks"][0]["rank"] == 0  # the report of NEW, as without --against


def test_browser_draws_the_ranked_changes_and_the_step_time_heatmap(page: Path) -> None:
    dom = dump_dom(page)
    rendered_ok(dom)
    d = embedded(page.read_text())["diff"]
    bars = re.findall(r'<g class="diff-bar" data-kind="([^"]+)" data-class="([^"]+)"', dom)
    assert bars == [(c["kind"], c["class"]) for c in d["changes"]] and bars[0] == ("op", "new")
    assert re.search(r"aten::_linalg_svd · rank 2<", dom)
    heat = re.search(r'<svg id="diff-heat".*?</svg>', dom, re.S)
    assert heat
    got = re.findall(r'<rect data-rank="(\d+)" data-pair="(\d+)"', heat.group(0))
    assert sorted(got) == [(str(r), str(j)) for r in range(4) for j in range(3)]
    assert '<div id="diff-summary" class=""><b>changed</b>' in dom


def test_no_against_no_section(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    assert run_cli("report", NEW, "-o", out, "-j", "1", "-q").returncode == 0
    assert "diff" not in embedded(out.read_text())


def test_each_file_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page and its diff section share NEW's pass: every file of both runs is opened
    for its events once (the page's diff equals ``diff()``, test above)."""
    from tracefuse_stream.cli.app import main
    from tracefuse_stream.report import diff_api, page_data

    passes: list = []
    for mod in (diff_api, page_data):
        real = mod.collect_info

        def counting(inputs, *args, _real=real, **kw):  # type: ignore[no-untyped-def]
            passes.append(sorted(str(Path(x).name) for x in inputs))
            return _real(inputs, *args, **kw)

        monkeypatch.setattr(mod, "collect_info", counting)
    out = tmp_path / "r.html"
    assert main(["report", str(NEW), "--against", str(BASE), "-o", str(out), "-j", "1", "-q"]) == 0
    assert passes == [[NEW.name], [BASE.name]]
