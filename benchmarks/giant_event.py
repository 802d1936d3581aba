#!/usr/bin/env python3
"""One giant event: time must grow linearly with its size (hostile-input check).

    python benchmarks/giant_event.py [--sizes 8,16,32,60] [--reps 2] [--baseline DIR]

Each input is one rank whose first event carries an ``args`` string of N MB (plain
JSON, cached in ``/tmp/tfbench/giant``), then a second, small event. ``merge`` and
``info`` read it as every trace is read: discovery's and the planner's look at the
start (ijson), the event pass (the kernel and msgspec up to 16 MB, ijson beyond). yajl,
ijson's parser, lexes a string that spans two of its buffers again from its start with
each new buffer (lloyd/yajl#202): with the reader handing it one 256 KiB block at a time,
time grew as N^2 (a 100 MB string: ~50 s per merge). Sizes stay under the 64 MiB an event
may have (read/toplevel.py ``MAX_EVENT_BYTES``): a larger one is an error. Printed per size: best wall time of
``--reps`` runs, MB/s, and the growth exponent against the previous size
(log(t2/t1) / log(N2/N1): 1 is linear, 2 quadratic), peak RSS. ``--baseline DIR``: the
same commands with ``PYTHONPATH=DIR`` (another checkout), side by side.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

ROOT = Path("/tmp/tfbench/giant")


def ensure(mb: int) -> Path:
    p = ROOT / f"giant_{mb}mb.json"
    if not p.exists():
        ROOT.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(b'{"traceEvents":[{"ph":"X","name":"big","pid":1,"tid":1,"ts":1000,"dur":5,"args":{"s":"')
            block = b"abcdefghij" * (1 << 16)
            for _ in range(mb * (1 << 20) // len(block)):
                f.write(block)
            f.write(b'"}},{"ph":"X","name":"small","pid":1,"tid":1,"ts":2000,"dur":5}]}')
        os.replace(tmp, p)
    return p


def run(argv: List[str], path: Optional[str], reps: int, out: Optional[Path]) -> Tuple[float, int]:
    env_path = bench.ENV.get("PYTHONPATH")
    bench.ENV["PYTHONPATH"] = path or str(bench.REPO)
    try:
        runs = [bench.measure(argv, out, argv[3], i) for i in range(reps)]
    finally:
        if env_path is None:
            bench.ENV.pop("PYTHONPATH", None)
        else:
            bench.ENV["PYTHONPATH"] = env_path
    bad = [r for r in runs if r.rc != 0]
    if bad:
        raise SystemExit(f"{' '.join(argv)}: exit {bad[0].rc}")
    return min(r.wall_s for r in runs), max(r.peak_tree_rss for r in runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="8,16,32,60")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--baseline", help="another checkout's root, run with PYTHONPATH=it")
    a = ap.parse_args()
    bench.ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    sizes = [int(s) for s in a.sizes.split(",")]
    out = ROOT / "out.json"
    versions: Dict[str, Optional[str]] = {"this": None}
    if a.baseline:
        versions["baseline"] = a.baseline
    print(
        f"{'version':9s} {'command':6s} {'MB':>5s} {'best s':>8s} {'MB/s':>7s} {'growth':>7s} {'peak RSS MB':>12s}"
    )
    for name, path in versions.items():
        for cmd in ("merge", "info"):
            prev: Optional[Tuple[int, float]] = None
            for mb in sizes:
                src = ensure(mb)
                argv = [bench.PY, "-m", "tracefuse_stream", cmd, str(src)]
                argv += ["-o", str(out), "-q", "--force", "-j", "1"] if cmd == "merge" else []
                wall, rss = run(argv, path, a.reps, out if cmd == "merge" else None)
                growth = "" if prev is None else f"{math.log(wall / prev[1]) / math.log(mb / prev[0]):.2f}"
                print(f"{name:9s} {cmd:6s} {mb:5d} {wall:8.2f} {mb / wall:7.1f} {growth:>7s} {rss / 1e6:12.1f}",
                      flush=True)  # fmt: skip
                prev = (mb, wall)
    return 0


if __name__ == "__main__":
    sys.exit(main())
