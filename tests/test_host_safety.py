"""Issue 22, item 4: nothing for tests in the package, and a merge never changes the
host program's garbage collector beyond its own run.

* The suite's switches (``TRACEFUSE_VERIFY=1`` verifying every merge, the signal at N
  bytes of test_faults.py) live in tests/site_hooks/; the package's own ``merge()``
  ignores both, shown in a subprocess that does not load the hooks.
* ``gc``: off while a rank streams in the main thread (seen from a filter callback,
  which runs per event), exactly as before afterwards, also after an error, also when
  the host had disabled it; a merge in another thread leaves the collector alone.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List

import pytest
from conftest import REPO, SITE_HOOKS, recorded

from tracefuse_stream import InputError, merge
from tracefuse_stream.gcpause import cyclic_gc_paused

TRACE = recorded("natural_order") / "rank_5.json"


def _merge_seeing_gc(out: Path, **kw: Any) -> List[bool]:
    """Merge with a filter callback that records the collector's state per event."""
    seen: List[bool] = []

    def keep(ev: Dict[str, Any]) -> bool:
        seen.append(gc.isenabled())
        return True

    merge([str(TRACE)], str(out), filter_fn=keep, jobs=1, verify=False, **kw)
    assert seen, "the filter callback never ran"
    return seen


@pytest.fixture
def gc_state():
    """Restore the collector whatever a test leaves behind (so a failure here cannot
    slow or change the rest of the suite)."""
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_gc_is_paused_during_a_rank_and_restored(tmp_path, gc_state):
    gc.enable()
    seen = _merge_seeing_gc(tmp_path / "m.json")
    assert set(seen) == {False}
    assert gc.isenabled()


def test_gc_disabled_by_the_host_stays_disabled(tmp_path, gc_state):
    gc.disable()
    _merge_seeing_gc(tmp_path / "m.json")
    assert not gc.isenabled()


def test_gc_restored_after_a_failed_merge(tmp_path, gc_state):
    bad = tmp_path / "bad.json"
    text = TRACE.read_bytes()
    bad.write_bytes(text[: len(text) * 2 // 3])  # truncated inside the events
    gc.enable()
    with pytest.raises(InputError):
        merge([str(bad)], str(tmp_path / "m.json"), jobs=1, verify=False)
    assert gc.isenabled()
    assert not (tmp_path / "m.json").exists()


def test_gc_restored_after_the_callback_raises(tmp_path, gc_state):
    gc.enable()

    def boom(ev: Dict[str, Any]) -> bool:
        assert not gc.isenabled()
        raise KeyError("from the host's callback")

    with pytest.raises(KeyError):
        merge([str(TRACE)], str(tmp_path / "m.json"), filter_fn=boom, jobs=1, verify=False)
    assert gc.isenabled()


def test_merge_in_another_thread_leaves_gc_alone(tmp_path, gc_state):
    gc.enable()
    result: Dict[str, Any] = {}

    def run() -> None:
        try:
            result["seen"] = _merge_seeing_gc(tmp_path / "m.json")
        except BaseException as e:  # pragma: no cover - reported below
            result["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join(120)
    assert "error" not in result, result.get("error")
    assert set(result["seen"]) == {True}
    assert gc.isenabled()


def test_nested_pauses_restore_once(gc_state):
    gc.enable()
    with cyclic_gc_paused():
        with cyclic_gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled(), "the inner pause switched the collector back on"
    assert gc.isenabled()


# --------------------------------------------------------------------------- no test switches
def test_package_has_no_test_switches():
    """No module of the package reads the suite's variables or sends test signals."""
    words = ("TRACEFUSE_VERIFY", "TEST_SIGNAL", "testhooks")
    hits = [
        f"{p.relative_to(REPO)}: {w}"
        for p in sorted((REPO / "tracefuse_stream").rglob("*.py"))
        for w in words
        if w in p.read_text(encoding="utf-8")
    ]
    assert hits == []


_PROBE = """
import json, sys
import tracefuse_stream
s = tracefuse_stream.merge([sys.argv[1]], sys.argv[2], jobs=1, force=True)
print(json.dumps({"verified": len(s.verify_reports)}))
"""


def _probe(tmp_path: Path, with_hooks: bool, verify_env: str) -> int:
    env = dict(os.environ, TRACEFUSE_VERIFY=verify_env)
    paths = [str(REPO)] + ([str(SITE_HOOKS)] if with_hooks else [])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    p = subprocess.run(
        [sys.executable, "-c", _PROBE, str(TRACE), str(tmp_path / "m.json")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    return int(json.loads(p.stdout.splitlines()[-1])["verified"])


def test_the_library_ignores_TRACEFUSE_VERIFY(tmp_path):
    """Without the suite's hooks, the variable changes nothing: merge() does not verify
    unless asked; with them (as every subprocess of the suite), it verifies."""
    assert _probe(tmp_path, with_hooks=False, verify_env="1") == 0
    assert _probe(tmp_path, with_hooks=True, verify_env="1") == 1
    assert _probe(tmp_path, with_hooks=True, verify_env="0") == 0
