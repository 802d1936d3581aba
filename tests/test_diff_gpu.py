"""``tracefuse diff`` on a GPU pair edited at run time from the real A100 NCCL trace.

BASE: 2 ranks, each the fixture as recorded (tests/gpu_cases.py writes the copies with
their own rank, world size and trace id; each rank's events moved by a few µs so that
the copies are not one recording under two ranks). NEW: the same, with every cutlass
GEMM kernel (``s1688gemm`` in its name) 3 times as long on every rank, every later event of
the rank moved by the time added before it (the trace stays consistent). The diff must
name the GEMM kernels first (their category, then the largest ones), on all ranks,
uniform, longer calls, about 3x.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import gpu_cases
import pytest

import tracefuse_stream

GEMM = "s1688gemm"


@pytest.fixture(scope="module")
def fixture_path(h: Any) -> Path:
    return h.require_shared(*gpu_cases.FIXTURE_PARTS)


def _build(out: Path, fixture: Path, factor: float, world_size: int = 2) -> Dict[int, str]:
    """``world_size`` copies of the fixture with every GEMM kernel ``factor`` times as
    long (rank r's events all ``r`` µs later)."""
    src = gpu_cases.load_source(str(fixture))
    added: List[Tuple[int, int]] = []
    for j in src.kernels:
        d = src.dur[j] or 0
        if GEMM in src.events[j]["name"] and d > 0:
            added.append((src.ts[j] + d, round(d * (factor - 1.0))))
    bodies = {}
    for r in range(world_size):
        ts, dur = gpu_cases._warped(src, gpu_cases._Warp(added + [(min(src.ts), 1000 * r)]))
        bodies[r] = gpu_cases._render(src, ts, dur, world_size)
    return gpu_cases._write(out, src, bodies, world_size, f"gemm{factor}", False)


def _files(d: Dict[int, str]) -> List[str]:
    return [d[r] for r in sorted(d)]


def test_gemm_kernels_longer_on_every_rank(tmp_path: Path, fixture_path: Path) -> None:
    base = _build(tmp_path / "base", fixture_path, 1.0)
    new = _build(tmp_path / "new", fixture_path, 3.0)
    d = tracefuse_stream.diff(_files(base), _files(new))
    assert d["ranks"] == [0, 1] and d["steps"]["pairs"] == [[4, 4], [5, 5], [6, 6]]
    every = [c for c in d["changes"] if not c["waiting"]]
    # the step's GPU compute (issue 36's union) grew on every rank, by the GEMMs' extra
    union = [c for c in every if c["kind"] == "gpu_step"]
    assert union and (union[0]["name"], union[0]["ranks"], union[0]["class"]) == ("compute", "all", "uniform")
    assert not [c for c in union if c["name"] in ("comm", "memcpy")]
    causes = [c for c in every if c["kind"] != "gpu_step"]
    top: Optional[Dict[str, Any]] = causes[0] if causes else None
    assert top is not None, d["changes"]
    assert union[0]["delta_us"] == pytest.approx(top["delta_us"], rel=0.05)
    # by category first: every GEMM kernel of the step together (all of them 3x)
    assert (top["kind"], top["name"], top["where"]) == ("kernel_category", "GEMM", "GPU")
    assert (top["ranks"], top["class"], top["how"]) == ("all", "uniform", "longer calls")
    assert top["count_base"] == top["count_new"] and top["ratio"] == pytest.approx(3.0, abs=0.1)
    kernel = causes[1]
    assert (
        kernel["kind"] == "kernel"
        and GEMM in kernel["name"]
        and kernel["ratio"] == pytest.approx(3.0, abs=0.01)
    )
    assert (kernel["ranks"], kernel["class"], kernel["how"]) == ("all", "uniform", "longer calls")
    gemm = [c for c in d["changes"] if c["kind"] == "kernel" and GEMM in c["name"]]
    assert len(gemm) == 3 and all(c["ranks"] == "all" and c["delta_us"] > 0 for c in gemm)
    assert sum(c["delta_us"] for c in gemm) < top["delta_us"]  # the smaller GEMMs: below the floor alone
    assert not [c for c in d["changes"] if c["kind"] == "kernel" and GEMM not in c["name"]]
    assert [c["name"] for c in d["changes"] if c["kind"] == "kernel_category"] == ["GEMM"]
    assert d["step_time"]["delta_us"] > 0 and d["step_time"]["significant"]


def test_the_same_gpu_run_twice_is_no_significant_change(tmp_path: Path, fixture_path: Path) -> None:
    base = _build(tmp_path / "base", fixture_path, 1.0)
    again = _build(tmp_path / "again", fixture_path, 1.0)
    d = tracefuse_stream.diff(_files(base), _files(again))
    assert d["significant"] is False and d["changes"] == []
