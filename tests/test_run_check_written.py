"""Issue 39, item 2: the run check's last gaps, on the real recorded traces.

* ``merge`` reads only each file's first events before it writes: the rules that need
  a pass (recordings of one host that do not overlap, steps with none in common) are
  applied to what both rewriters (the C kernel and ``TRACEFUSE_KERNEL=0``) wrote, and
  warn with the words ``info`` uses (plan/runcheck.written_findings);
* plain ``info`` reads the ProfilerStep numbers in its pass and warns about steps with
  none in common;
* two hosts whose clocks seem seconds apart are refused by the analyses unless
  ``--max-clock-offset`` / ``max_clock_offset_s`` accepts the offset
  (analyze/analysis.require_near_clocks).

The folders are copies of a few small recorded files (tests/data/recorded/ddp4_runs_a,
ddp4_runs_c: one job recorded twice, 39 s apart, on host ``vm``), some edited by a script
(a host name, the step numbers of one rank).
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path
from typing import Any, List, Tuple

import pytest

from tracefuse_stream import diff, stragglers
from tracefuse_stream.cli.app import main
from tracefuse_stream.errors import EXIT_OK, EXIT_USAGE, UsageError

RECORDED = Path(__file__).parent / "data" / "recorded"


@pytest.fixture(params=[True, False], ids=["kernel", "python"])
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    monkeypatch.setenv("TRACEFUSE_KERNEL", "1" if request.param else "0")
    return bool(request.param)


def _rank(path: Path) -> int:
    return int(json.loads(gzip.decompress(path.read_bytes()))["distributedInfo"]["rank"])


def _mixed(d: Path) -> Tuple[Path, List[Path]]:
    """Rank 0 of ddp4_runs_a with ranks 1-3 of ddp4_runs_c (39 s later, host vm), copied:
    (folder, the files by rank)."""
    d.mkdir()
    for run, keep in (("ddp4_runs_a", {0}), ("ddp4_runs_c", {1, 2, 3})):
        for f in sorted((RECORDED / run).glob("*.json.gz")):
            if _rank(f) in keep:
                shutil.copyfile(f, d / f.name)
    return d, sorted(d.iterdir(), key=_rank)


def _edit(path: Path, fn: Any) -> None:
    path.write_bytes(gzip.compress(fn(gzip.decompress(path.read_bytes()).decode()).encode()))


def cli(capsys: pytest.CaptureFixture[str], *args: Any) -> Tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def warnings_of(text: str) -> List[str]:
    return [line[len("warning: ") :] for line in text.splitlines() if line.startswith("warning: ")]


def merge_warnings(capsys: pytest.CaptureFixture[str], d: Path, out: Path) -> List[str]:
    code, text, _ = cli(capsys, "merge", d, "-o", out, "--force", "--json-summary", "-j", "1")
    assert code == EXIT_OK
    return list(json.loads(text)["warnings"])


# ------------------------------------------------------------------- gap 1: merge, one host
def test_merge_warns_two_runs_of_one_host_seconds_apart(tmp_path: Path, capsys, kernel) -> None:
    """The words ``info`` prints, from the span each rewriter wrote: the same first and
    last events as info's pass (the starts and the 38.8 s gap in the line are theirs)."""
    d, files = _mixed(tmp_path / "mixed")
    code, out, _ = cli(capsys, "info", d, "-j", "1")
    (want,) = warnings_of(out)
    assert code == EXIT_OK and want.startswith(
        "the inputs hold 2 runs: rank 0 from 2026-12-05 16:23:11.388317Z ("
    )
    assert want.endswith(
        "ranks 1-3 from 2026-12-05 16:23:50.457790Z ("
        + ", ".join(str(f) for f in files[1:])
        + "): their recordings on host vm (one clock) do not overlap, 38.8 s apart (one job's ranks record "
        "the same steps together)"
    )
    assert str(files[0]) in want
    assert merge_warnings(capsys, d, tmp_path / "m.json") == [want]
    # -q: no summary, the warning still said (stderr)
    code, out, err = cli(capsys, "merge", d, "-o", tmp_path / "m.json", "--force", "-q", "-j", "1")
    assert (code, out, warnings_of(err)) == (EXIT_OK, "", [want])
    # the summary as text names it too
    code, out, err = cli(capsys, "merge", d, "-o", tmp_path / "m.json", "--force", "-j", "1")
    assert code == EXIT_OK and warnings_of(out + err) == [want]


def test_merge_of_one_run_does_not_warn(tmp_path: Path, capsys, kernel) -> None:
    for name in ("ddp4_runs_a", "ddp4_runs_c"):
        assert merge_warnings(capsys, RECORDED / name, tmp_path / "m.json") == [], name


def test_merged_output_unchanged_by_the_check(tmp_path: Path, capsys) -> None:
    """Both rewriters write the same bytes with the run check's span and steps kept."""
    outs = []
    for k in ("1", "0"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("TRACEFUSE_KERNEL", k)
            out = tmp_path / f"m{k}.json"
            assert main(["merge", str(RECORDED / "ddp4_runs_a"), "-o", str(out), "-q", "-j", "1"]) == EXIT_OK
            outs.append(out.read_bytes())
    assert outs[0] == outs[1]


# ------------------------------------------------------------------- gap 3: steps in common
def _steps_apart(d: Path) -> Tuple[Path, List[Path]]:
    """ddp4_runs_a, rank 0's ProfilerStep numbers moved up by 10 (12-14, the others 2-4)."""
    shutil.copytree(RECORDED / "ddp4_runs_a", d)
    files = sorted(d.iterdir(), key=_rank)
    _edit(
        files[0], lambda t: re.sub(r"ProfilerStep#(\d+)", lambda m: f"ProfilerStep#{int(m.group(1)) + 10}", t)
    )
    return d, files


def test_steps_with_none_in_common_warned_by_info_and_merge(tmp_path: Path, capsys, kernel) -> None:
    d, files = _steps_apart(tmp_path / "steps")
    want = (
        f"the ranks recorded different steps, none in common: rank 0 ({files[0]}) recorded steps 12-14; "
        f"ranks 1-3 ({', '.join(str(f) for f in files[1:])}) recorded steps 2-4; one run?"
    )
    code, out, _ = cli(capsys, "info", d, "-j", "1")
    assert code == EXIT_OK and warnings_of(out) == [want]
    code, out, _ = cli(capsys, "info", d, "--json", "-j", "1")
    assert code == EXIT_OK and json.loads(out)["warnings"] == [want]
    assert merge_warnings(capsys, d, tmp_path / "m.json") == [want]
    # an error in the analyses, as before
    code, out, err = cli(capsys, "info", d, "--collectives", "-j", "1")
    assert (
        (code, out) == (EXIT_USAGE, "")
        and want in err
        and "choose: --ranks 1-3 (the ranks of one run)" in err
    )


# ------------------------------------------------------------------- gap 2: clocks far apart
def _two_hosts(d: Path) -> Tuple[Path, List[Path]]:
    """The mixed folder with rank 0 on host ``other``: a 39 s clock offset, or two runs."""
    d, files = _mixed(d)
    _edit(files[0], lambda t: t.replace('"host_name": "vm"', '"host_name": "other"', 1))
    return d, files


def _refusal(files: List[Path], flag: str) -> str:
    return (
        "the collectives analysis needs the hosts' clocks within 1 s of each other:\n"
        "  host vm's clock seems 39.1 s ahead of host other's, estimated from the collectives' ends: host vm: "
        f"ranks 1-3 ({', '.join(str(f) for f in files[1:])}); host other: rank 0 ({files[0]})\n"
        "synced hosts agree to milliseconds: these files may be two runs, not one. choose: one run's files "
        f"({'--ranks' if flag.startswith('--') else 'ranks'}), or, if the hosts' clocks do disagree by that much, "
        f"{flag} with SECONDS of at least 40 (the offset is then corrected, and noted)"
    )


def test_far_host_clocks_refused_unless_accepted(tmp_path: Path, capsys, kernel) -> None:
    d, files = _two_hosts(tmp_path / "mixed")
    want = _refusal(files, "--max-clock-offset SECONDS")
    for args in (["info", d, "--collectives"], ["info", d, "--collectives", "--json"],
                 ["report", d, "-o", tmp_path / "r.html"], ["diff", d, RECORDED / "ddp4_runs_a"]):  # fmt: skip
        code, out, err = cli(capsys, *args, "-j", "1")
        assert (code, out, err) == (EXIT_USAGE, "", f"tracefuse: error: {want}\n"), args
    assert not (tmp_path / "r.html").exists()
    with pytest.raises(UsageError) as e:
        stragglers(str(d), jobs=1)
    assert str(e.value) == _refusal(files, "max_clock_offset_s=SECONDS")
    with pytest.raises(UsageError):
        diff(str(d), str(RECORDED / "ddp4_runs_a"), jobs=1)

    # accepted: analysed on the corrected clocks, the offset said as a note
    note = (
        "host vm's clock is 39.1 s ahead of the lowest rank's host's, estimated from the collectives' ends; "
        "if the hosts' clocks agree, these files are not one run"
    )
    code, out, _ = cli(capsys, "info", d, "--collectives", "--max-clock-offset", "40", "-j", "1")
    assert code == EXIT_OK and f"note: {note}" in out.splitlines()
    code, out, _ = cli(capsys, "info", d, "--collectives", "--json", "--max-clock-offset", "40", "-j", "1")
    assert code == EXIT_OK and note in json.loads(out)["collectives"]["notes"]
    code, _, _ = cli(capsys, "report", d, "-o", tmp_path / "r.html", "--max-clock-offset", "40", "-j", "1")
    assert code == EXIT_OK and (tmp_path / "r.html").exists()
    assert note in stragglers(str(d), jobs=1, max_clock_offset_s=40)["notes"]
    # 39 s is not enough for 39.1 s
    code, _, err = cli(capsys, "info", d, "--collectives", "--max-clock-offset", "39", "-j", "1")
    assert code == EXIT_USAGE and "within 39 s of each other" in err


def test_max_clock_offset_values(tmp_path: Path, capsys) -> None:
    d = RECORDED / "ddp4_runs_a"
    for bad in ("-1", "nan", "x"):
        code, out, err = cli(capsys, "info", d, "--collectives", "--max-clock-offset", bad)
        assert (code, out) == (
            EXIT_USAGE,
            "",
        ) and f"--max-clock-offset must be a number of seconds, 0 or more, not {bad!r}" in err
    for value in (-1, True, "2", float("inf")):
        with pytest.raises(UsageError, match="^max_clock_offset_s must be a number of seconds, 0 or more"):
            stragglers(str(d), jobs=1, max_clock_offset_s=value)  # type: ignore[arg-type]
    # one host (one clock): no offset to refuse, whatever the limit
    assert stragglers(str(d), jobs=1, max_clock_offset_s=0)["ranks"] != []
