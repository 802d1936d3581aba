"""Compare the step-time figures with HTA's on the real GPU fixtures (issue 36, item 6).

HTA (HolisticTraceAnalysis, https://github.com/facebookresearch/HolisticTraceAnalysis)
is the peer whose temporal breakdown, comm/comp overlap and idle-time breakdown the
step-time figures are modelled on. It is never a dependency of the package: run this
script with an interpreter that has it (``pip install HolisticTraceAnalysis
'pandas<3'`` in a venv of its own); the package is run as
``TRACEFUSE_PYTHON -m tracefuse_stream info --collectives --json`` in a subprocess::

    /path/to/hta-venv/bin/python tools/hta_compare.py [--fixtures ../shared/fixtures/real] \\
        [--tracefuse-python python]

Per fixture (one rank each), HTA's figures over what it analyses (every step but the
last when there are two or more; the span from its first kernel's start to its last
kernel's end) beside ours summed over the same steps (each step's window: the CPU
``ProfilerStep``). Definitions and the differences, with numbers: docs/collectives.md,
*Where every rank's step goes*, "Against HTA".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
FIXTURES = (
    "a100_nccl_rank0.json.gz",
    "h100_bert_small.json.gz",
    "mi300_resnet_rank0.json.gz",
    "mi250_minitoy.json.gz",
)


def _read(path: Path) -> bytes:
    import gzip

    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def hta_figures(d: Path) -> Dict[str, float]:
    """HTA's temporal breakdown, overlap and idle-time breakdown of the one rank in ``d``."""
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"  # ns timestamps as they are (TRACE_FORMAT_FACTS)
    from hta.trace_analysis import TraceAnalysis  # type: ignore[import-not-found]

    t = TraceAnalysis(trace_dir=str(d))
    tb = t.get_temporal_breakdown(visualize=False).iloc[0]
    ov = t.get_comm_comp_overlap(visualize=False).iloc[0]
    idle = t.get_idle_time_breakdown(visualize=False)[0]
    by_cat: Dict[str, float] = {}
    for _i, row in idle.iterrows():
        by_cat[str(row["idle_category"])] = by_cat.get(str(row["idle_category"]), 0.0) + float(
            row["idle_time"]
        )
    k = t.t.get_trace(t.t.get_ranks()[0])
    k = k[k["stream"].ne(-1)]
    # HTA's times: float us from the trace's start (its unix ns); ours: ns from the base
    zero = t.t.get_trace_start_unixtime_ns(t.t.get_ranks()[0]) - int(
        json.loads(_read(d / next(p.name for p in d.iterdir()))).get("baseTimeNanoseconds", 0)
    )
    window = (
        zero + round(float(k["ts"].min()) * 1000),
        zero + round(float((k["ts"] + k["dur"]).max()) * 1000),
    )
    return {
        "window_ns": window,
        "compute_us": float(tb["compute_time(us)"]),
        "non_compute_us": float(tb["non_compute_time(us)"]),
        "idle_us": float(tb["idle_time(us)"]),
        "span_us": float(tb["kernel_time(us)"]),
        "overlap_pct": float(ov["comp_comm_overlap_pctg"]),
        **{f"idle_{k}_per_stream_us": v for k, v in sorted(by_cat.items())},
    }


def our_figures(d: Path, python: str) -> Dict[str, Any]:
    """Ours over the steps HTA analyses (all but the last of two or more)."""
    out = subprocess.run(
        [python, "-m", "tracefuse_stream", "info", "--collectives", "--json", "-j", "1", str(d)],
        capture_output=True,
        text=True,
        check=True,
        cwd=str(HERE.parent),
        env={**os.environ, "PYTHONPATH": str(HERE.parent)},
    )
    rows = [r for r in json.loads(out.stdout)["collectives"]["step_time"] if r["gpu"] is not None]
    steps = sorted({r["step"] for r in rows})
    kept = steps[:-1] if len(steps) > 1 else steps
    mine = [r for r in rows if r["step"] in kept]

    def total(key: str) -> float:
        return round(sum(r["gpu"][key] for r in mine), 3)

    comm = total("comm_us")
    hidden = comm - total("comm_exposed_us")
    return {
        "steps": kept,
        "step_us": round(sum(r["step_us"] for r in mine), 3),
        "compute_us": total("compute_us"),
        "non_compute_us": round(total("comm_exposed_us") + total("memcpy_us"), 3),
        "idle_us": total("idle_us"),
        "idle_between_kernels_us": round(total("idle_host_wait_us") + total("idle_kernel_wait_us"), 3),
        "idle_other_us": total("idle_other_us"),
        "overlap_pct": None if comm == 0 else round(100 * hidden / comm, 2),
    }


def ours_in_window(path: Path, window: Any) -> Dict[str, Any]:
    """Our rule (analyze/gpu_union.py, the built-in categories) over HTA's window, on
    the trace's kernels, copies and memsets: what is left of a difference is the rule."""
    sys.path.insert(0, str(HERE.parent))
    from tracefuse_stream.analyze.gpu_union import window_figures
    from tracefuse_stream.analyze.kernel_categories import builtin

    kc = builtin()
    code = {"compute": 0, "communication": 1, "memory": 2}
    doc = json.loads(_read(path))
    evs = []
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            a = round(float(e["ts"]) * 1000)
            evs.append((a, a + round(float(e["dur"]) * 1000), code[kc.of(e["name"])[1]]))
    f = window_figures(evs, [window])[0]
    return {
        "compute_us": f.compute_ns / 1000,
        "non_compute_us": (f.comm_exposed_ns + f.memcpy_ns) / 1000,
        "idle_us": f.idle_ns / 1000,
        "overlap_pct": None if not f.comm_ns else round(100 * (f.comm_ns - f.comm_exposed_ns) / f.comm_ns, 2),
    }


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fixtures", default=str(HERE.parent.parent / "shared" / "fixtures" / "real"))
    ap.add_argument(
        "--tracefuse-python", default="python", help="an interpreter with the package's dependencies"
    )
    ap.add_argument(
        "--without-gpu-annotations",
        action="store_true",
        help="leave out the gpu_user_annotation events (spans on GPU streams that HTA counts as kernels)",
    )
    a = ap.parse_args(argv)
    report = {}
    for name in FIXTURES:
        src = Path(a.fixtures) / name
        if not src.exists():
            print(f"{name}: not found under {a.fixtures}", file=sys.stderr)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            if a.without_gpu_annotations:  # HTA takes them for kernels (docs/collectives.md)
                import gzip

                doc = json.loads(gzip.decompress(src.read_bytes()))
                doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "gpu_user_annotation"]
                (d / name).write_bytes(gzip.compress(json.dumps(doc).encode()))
            else:
                shutil.copy(src, d / name)
            hta = hta_figures(d)
            report[name] = {
                "hta": hta,
                "ours": our_figures(d, a.tracefuse_python),
                "ours_in_hta_window": ours_in_window(d / name, hta["window_ns"]),
            }
        print(name, json.dumps(report[name], indent=1), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
