"""Start-up: a command imports what it runs, not the whole package.

Every command pays its imports before it reads a byte; the merge pipeline (rewrite,
write, verify, the kernel context, archives) was most of them, and ``info``, ``verify``,
``open`` and ``--help`` paid it too (0.10 s of an 0.31 s ``info --collectives`` of
8 x 20 MB, benchmarks/collectives.py). ``tracefuse_stream`` loads its merge API on
first use (PEP 562 ``__getattr__``) and ``cli.app`` imports a command's module when
that command runs. Each check runs in a fresh interpreter: this one has imported
everything already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "fixtures" / "sample_run"

PIPELINE = ("tracefuse_stream.pipeline", "tracefuse_stream.rewrite", "tracefuse_stream.compat")
SERVER = ("http.server", "webbrowser")
POOL = ("multiprocessing", "concurrent.futures", "socket")  # a pool's, loaded only when one starts


def _modules_after(code: str) -> List[str]:
    """``sys.modules`` of a fresh interpreter after ``code`` (stdout redirected away)."""
    probe = (
        "import contextlib, io, json, sys\n"
        f"with contextlib.redirect_stdout(io.StringIO()):\n    {code}\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _loaded(mods: List[str], prefixes: tuple) -> List[str]:
    return [m for m in mods if any(m == p or m.startswith(p + ".") for p in prefixes)]


def test_importing_the_package_loads_no_pipeline() -> None:
    mods = _modules_after("import tracefuse_stream")
    assert _loaded(mods, PIPELINE + SERVER + ("tracefuse_stream.options",)) == []
    assert "tracefuse_stream.errors" in mods  # the error classes are plain attributes


@pytest.mark.parametrize(
    "argv",
    [
        ["info", str(SAMPLE)],
        ["info", "--collectives", "--steps", "--align", "-j", "1", str(SAMPLE)],
        ["verify", "--help"],
        ["--version"],
    ],
    ids=["info", "info-sections", "verify-help", "version"],
)
def test_a_command_that_does_not_merge_imports_no_pipeline(argv: List[str]) -> None:
    code = f"from tracefuse_stream.cli.app import main\n    try:\n        main({argv!r})\n    except SystemExit:\n        pass"
    mods = _modules_after(code)
    assert "tracefuse_stream.cli.app" in mods
    assert _loaded(mods, PIPELINE + SERVER) == []
    assert ("tracefuse_stream.cli.info_cmd" in mods) == (argv[0] == "info")
    if "-j" in argv or argv[0] != "info":  # no worker pool: its modules are not loaded
        assert _loaded(mods, POOL) == [], argv


def test_merge_imports_its_pipeline_and_not_the_server(tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    code = f"from tracefuse_stream.cli.app import main\n    main(['merge', {str(SAMPLE)!r}, '-o', {str(out)!r}, '-q', '-j', '1'])"
    mods = _modules_after(code)
    assert "tracefuse_stream.pipeline.orchestrate" in mods
    assert _loaded(mods, SERVER) == []
    assert out.stat().st_size > 0


def test_the_public_names_load_on_first_use() -> None:
    import tracefuse_stream as tf
    from tracefuse_stream.compat import TraceFuse
    from tracefuse_stream.options import MergeOptions
    from tracefuse_stream.pipeline.orchestrate import MergeSummary, RankSummary, merge

    assert (tf.merge, tf.MergeOptions, tf.MergeSummary, tf.RankSummary, tf.TraceFuse) == (
        merge,
        MergeOptions,
        MergeSummary,
        RankSummary,
        TraceFuse,
    )
    assert set(tf.__all__) <= set(dir(tf))
    with pytest.raises(AttributeError, match="no attribute 'mergee'"):
        tf.mergee  # noqa: B018
    namespace: dict = {}
    exec("from tracefuse_stream import *", namespace)
    assert namespace["merge"] is merge and namespace["TraceFuse"] is TraceFuse
