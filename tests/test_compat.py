"""``TraceFuse`` as in TraceLens: ``merge()`` in memory gives the file merge's events,
and a custom ``filter_fn`` replaces the default python_function drop, in ``merge()``
and ``merge_and_save()`` alike (expected counts derived from the inputs here)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest
from conftest import REPO, is_meta, load_input, load_output, shared_fixtures_dir

from tracefuse_stream import TraceFuse

RECORDED_DDP4 = REPO / "tests" / "data" / "recorded" / "ddp4"


def _ddp4_files() -> List[Path]:
    d = shared_fixtures_dir() / "ddp4_transformer_tb"
    files = sorted(d.glob("*.json.gz"))
    if len(files) != 4:
        why = f"the real 4-rank job is not at {d} (../shared/fixtures beside the repository)"
        if os.environ.get("CI"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return files


def _by_rank(files: List[Path]) -> List[Path]:
    """Files in rank order (TraceFuse's list position is the rank, as in TraceLens)."""
    return sorted(files, key=lambda f: load_input(f)["distributedInfo"]["rank"])


def _expected_non_meta(files: List[Path], keep: Callable[[Dict[str, Any]], bool]) -> int:
    return sum(1 for f in files for ev in load_input(f)["traceEvents"] if not is_meta(ev) and keep(ev))


def _non_meta(events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [ev for ev in events if not is_meta(ev)]


def _no_instants(ev: Dict[str, Any]) -> bool:
    return ev.get("cat") != "cpu_instant_event"


@pytest.mark.parametrize("source", ["fixture", "recorded"])
def test_merge_in_memory_equals_file_merge(tmp_path: Path, source: str) -> None:
    files = _ddp4_files() if source == "fixture" else sorted(RECORDED_DDP4.glob("*.json.gz"))
    if len(files) != 4:
        pytest.skip(f"{RECORDED_DDP4} has no 4-rank recording yet")
    files = _by_rank(files)
    fuser = TraceFuse(files)
    events = fuser.merge()
    assert isinstance(events, list)
    written = fuser.merge_and_save(str(tmp_path / "m.json"))
    assert written == str(tmp_path / "m.json.gz")
    on_disk = load_output(written)["traceEvents"]
    assert events == on_disk  # the same events, in the same order, with the same values
    want = _expected_non_meta(files, lambda ev: ev.get("cat") != "python_function")
    assert len(_non_meta(events)) == want
    trace = fuser.merge_trace()
    assert trace["traceEvents"] == events
    assert trace["baseTimeNanoseconds"] == min(load_input(f)["baseTimeNanoseconds"] for f in files)


@pytest.mark.parametrize("filter_fn", [None, _no_instants])
def test_filter_fn_replaces_the_python_function_drop(tmp_path: Path, filter_fn: Optional[Callable]) -> None:
    """TraceLens: with a filter_fn, only it decides (python_function is kept unless it
    drops it); without one, include_pyfunc decides."""
    files = _by_rank(_ddp4_files())
    fuser = TraceFuse(files)
    n_pyfunc = _expected_non_meta(files, lambda ev: ev.get("cat") == "python_function")
    assert n_pyfunc > 0  # the fixture is recorded with_stack
    if filter_fn is None:
        kept = fuser.merge(include_pyfunc=True)
        want = _expected_non_meta(files, lambda ev: True)
    else:
        kept = fuser.merge(filter_fn=filter_fn)  # include_pyfunc False: still kept
        want = _expected_non_meta(files, filter_fn)
        saved = load_output(fuser.merge_and_save(str(tmp_path / "f.json"), filter_fn=filter_fn))
        assert len(_non_meta(saved["traceEvents"])) == want
        assert sum(1 for ev in saved["traceEvents"] if ev.get("cat") == "python_function") == n_pyfunc
    assert len(_non_meta(kept)) == want
    assert sum(1 for ev in kept if ev.get("cat") == "python_function") == n_pyfunc
