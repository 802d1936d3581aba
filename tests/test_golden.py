"""Golden digests: the merged bytes of fixed merges of real and bundled traces.

These pin the engine's output byte for byte across refactors (issue 11: behaviour
does not change). The digests in ``tests/golden/digests.json`` were recorded with the
code as it stood before the restructuring; regenerate them only when the output is
meant to change (``python tests/test_golden.py --record``), and say why in the commit.

Absolute input paths (the header's ``source``) and the tool version differ between
checkouts and releases, so both are replaced by placeholders before hashing; every
other byte counts.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DIGESTS = HERE / "golden" / "digests.json"
SAMPLE = REPO / "fixtures" / "sample_run"

sys.path.insert(0, str(HERE))
from conftest import decompress_bytes, shared_fixtures_dir  # noqa: E402


def _cases() -> List[Tuple[str, str, Any, Dict[str, Any]]]:
    """(case id, needs: 'repo'|'shared', inputs, merge kwargs)."""
    shared = shared_fixtures_dir()
    ddp4 = shared / "ddp4_transformer_tb"
    real = shared / "real"
    singles = sorted(real.glob("*.json.gz")) if real.is_dir() else []
    cases: List[Tuple[str, str, Any, Dict[str, Any]]] = [
        ("sample-default", "repo", [SAMPLE], {}),
        ("sample-pyfunc-align", "repo", [SAMPLE], {"include_pyfunc": True, "align": "collectives"}),
        ("sample-gz", "repo", [SAMPLE], {"_ext": ".json.gz"}),
        ("sample-zst", "repo", [SAMPLE], {"_ext": ".json.zst", "ranks": [1, 3]}),
        ("sample-window", "repo", [SAMPLE], {"window_ms": (2.0, 6.5)}),
        (
            "sample-filters",
            "repo",
            [SAMPLE],
            {"keep_cat": ["kernel", "cpu_op", "ac2g"], "name_regex": "^(nccl|aten|ac2g)"},
        ),
        ("ddp4-default", "shared", [ddp4], {}),
        ("ddp4-pyfunc", "shared", [ddp4], {"include_pyfunc": True}),
        ("ddp4-steps", "shared", [ddp4], {"steps": (3, 3)}),
        ("real-all-order", "shared", singles, {"rank_from": "order", "include_pyfunc": True}),
    ]
    for p in singles:
        cases.append((f"real-{p.name.split('.')[0]}", "shared", [p], {}))
    return cases


def merged_digest(tmp: Path, inputs: Any, kwargs: Dict[str, Any]) -> str:
    from tracefuse_stream import merge

    kw = dict(kwargs)
    ext = kw.pop("_ext", ".json")
    out = tmp / f"golden{ext}"
    old = os.environ.pop("TRACEFUSE_VERIFY", None)
    try:
        merge([str(i) for i in inputs], str(out), force=True, jobs=1, **kw)
    finally:
        if old is not None:
            os.environ["TRACEFUSE_VERIFY"] = old
    data = decompress_bytes(out.read_bytes())
    dirs = {
        Path(os.path.abspath(i)).parent if Path(i).is_file() else Path(os.path.abspath(i)) for i in inputs
    }
    for d in sorted(dirs, key=lambda d: -len(str(d))):
        data = data.replace(json.dumps(str(d))[1:-1].encode() + b"/", b"<DIR>/")
    data = data.replace(b'"version":"0.1.0"', b'"version":"<V>"')
    import tracefuse_stream

    data = data.replace(b'"version":"%s"' % tracefuse_stream.__version__.encode(), b'"version":"<V>"')
    return hashlib.sha256(data).hexdigest()


CASES = _cases()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_golden_digest(case: Tuple[str, str, Any, Dict[str, Any]], tmp_path: Path) -> None:
    name, needs, inputs, kwargs = case
    if needs == "shared" and not shared_fixtures_dir().is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but the shared fixtures are missing: {shared_fixtures_dir()}")
        pytest.skip(f"needs the shared real traces in {shared_fixtures_dir()}")
    expected = json.loads(DIGESTS.read_text())
    assert name in expected, f"no recorded digest for {name}; record with --record"
    assert merged_digest(tmp_path, inputs, kwargs) == expected[name]


if __name__ == "__main__" and "--record" in sys.argv:
    import tempfile

    out: Dict[str, str] = {}
    with tempfile.TemporaryDirectory() as t:
        for name, _needs, inputs, kwargs in CASES:
            out[name] = merged_digest(Path(t), inputs, kwargs)
            print(name, out[name])
    DIGESTS.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
