#!/usr/bin/env python3
"""Issue 14's ratios in one run: the merge and its side passes against the floors.

    python benchmarks/hotpath.py [--data-root /tmp/tfbench] [--reps 3] [--json r.json]
        [--mb-per-rank 20] [--ranks 8] [--tiny-ranks 4000] [--no-baseline]

Inputs (generated once, cached under ``--data-root``): ``hot-<R>x<MB>`` (``generate.py``,
real-like Kineto events with uint64 ``Comms Id``) and ``tiny-<N>`` (N ranks of 24 events
each, written here: the per-rank overhead case). Every command runs in its own
subprocess through ``bench.measure`` (tree RSS sampled, CPU from ``wait4``); repetitions
are interleaved; tables show medians; every ratio is a ratio of medians, printed with the
ratio of the fastest repetitions (best-of-N) beside it.

Commands on the main case: ``tokenize`` (benchmarks/tokenize_floor.py: msgspec
``list[Raw]`` decode + re-encode, the floor of issue 14), ``ijson`` (parse_floor.py, the
old floor), ``naive`` (naive_tracefuse.py, one repetition), ``merge`` (``merge -j 1
--include-pyfunc -o x.json``), ``merge-j2``, ``window`` / ``steps`` / ``align`` (the
merge plus ``--window``, ``--steps``, ``--align collectives``) and ``info``. On the tiny
case: ``tiny-j1``, ``tiny-j2`` and ``tiny-plan`` (``merge --dry-run``-free: ``info``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import bench  # noqa: E402

PY = sys.executable
MB = 1e6


def ensure_main(root: Path, ranks: int, mb: int) -> Path:
    d = root / f"hot-{ranks}x{mb}"
    if not (d.is_dir() and len(list(d.glob("*.json"))) == ranks):
        bench.subprocess.run(
            [
                PY,
                str(HERE / "generate.py"),
                str(d),
                "--ranks",
                str(ranks),
                "--mb-per-rank",
                str(mb),
                "--jobs",
                "2",
                "-q",
            ],
            check=True,
        )
    return d


def _tiny_rank(rank: int, world: int) -> bytes:
    base = 1_700_000_000_000_000_000 + rank * 1000
    evs = []
    for i in range(8):
        ts = 1_700_000_000_000.0 + i * 10.5 + rank
        evs.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"aten::op{i}",
                "pid": 100 + rank,
                "tid": 100 + rank,
                "ts": ts,
                "dur": 3.25,
                "args": {"External id": i + 1, "Ev Idx": i},
            }
        )
        evs.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"kernel{i}",
                "pid": 0,
                "tid": 7,
                "ts": ts + 1,
                "dur": 1.5,
                "args": {"External id": i + 1, "correlation": 10 + i, "device": 0},
            }
        )
        evs.append(
            {
                "ph": "f",
                "id": 10 + i,
                "pid": 0,
                "tid": 7,
                "ts": ts + 1,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )
    doc = {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "traceEvents": evs,
        "traceName": f"rank{rank}",
        "baseTimeNanoseconds": base,
    }
    return json.dumps(doc, indent=1).encode()


def ensure_tiny(root: Path, n: int) -> Path:
    d = root / f"tiny-{n}"
    if not (d.is_dir() and len(list(d.glob("*.json"))) == n):
        d.mkdir(parents=True, exist_ok=True)
        for r in range(n):
            (d / f"host_{r}.{r}.pt.trace.json").write_bytes(_tiny_rank(r, n))
    return d


def commands(main: Path, tiny: Path, out: Path, baseline: bool) -> Dict[str, tuple]:
    merge = [PY, "-m", "tracefuse_stream", "merge", "-q", "--force", "--include-pyfunc"]
    o = str(out / "x.json")
    c: Dict[str, tuple] = {
        "tokenize": ([PY, str(HERE / "tokenize_floor.py"), str(main)], None, "main"),
        "ijson": ([PY, str(HERE / "parse_floor.py"), str(main)], None, "main"),
        "merge": (merge + [str(main), "-o", o, "-j", "1"], Path(o), "main"),
        # the same merge with the C kernel switched off: the pure-Python path
        "merge-py": (
            ["env", "TRACEFUSE_KERNEL=0"] + merge + [str(main), "-o", o, "-j", "1"],
            Path(o),
            "main",
        ),
        "merge-j2": (merge + [str(main), "-o", o, "-j", "2"], Path(o), "main"),
        "window": (merge + [str(main), "-o", o, "-j", "1", "--window", "20:60"], Path(o), "main"),
        "steps": (merge + [str(main), "-o", o, "-j", "1", "--steps", "1:2"], Path(o), "main"),
        "align": (merge + [str(main), "-o", o, "-j", "1", "--align", "collectives"], Path(o), "main"),
        "info": ([PY, "-m", "tracefuse_stream", "info", str(main)], None, "main"),
        "tiny-j1": (merge + [str(tiny), "-o", o, "-j", "1"], Path(o), "tiny"),
        "tiny-j2": (merge + [str(tiny), "-o", o, "-j", "2"], Path(o), "tiny"),
        "tiny-info": ([PY, "-m", "tracefuse_stream", "info", str(tiny)], None, "tiny"),
    }
    if baseline:
        c["naive"] = (
            [PY, str(HERE / "naive_tracefuse.py"), str(main), "-o", str(out / "n.json.gz")],
            out / "n.json.gz",
            "main",
        )
    return c


def main(argv: List[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", type=Path, default=Path("/tmp/tfbench"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb-per-rank", type=int, default=20)
    ap.add_argument("--tiny-ranks", type=int, default=4000)
    ap.add_argument("--only", default="", help="comma-separated command names")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    main_d = ensure_main(a.data_root, a.ranks, a.mb_per_rank)
    tiny_d = ensure_tiny(a.data_root, a.tiny_ranks)
    out = a.data_root / "hot-out"
    out.mkdir(parents=True, exist_ok=True)
    cmds = commands(main_d, tiny_d, out, not a.no_baseline)
    if a.only:
        cmds = {k: v for k, v in cmds.items() if k in a.only.split(",")}
    sizes = {"main": bench.input_bytes(main_d), "tiny": bench.input_bytes(tiny_d)}
    runs: Dict[str, List[bench.Run]] = {k: [] for k in cmds}
    names = list(cmds)
    for rep in range(a.reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            if name == "naive" and rep > 0:
                continue
            argv_, o, _case = cmds[name]
            r = bench.measure(list(argv_), o, name, rep)
            runs[name].append(r)
            print(
                f"  [rep {rep + 1}] {name:<10} {r.wall_s:7.2f} s wall {r.cpu_s:7.2f} s CPU "
                f"{r.peak_tree_rss / MB:6.0f} MB tree rc={r.rc}",
                flush=True,
            )
    med = {k: statistics.median(r.wall_s for r in v) for k, v in runs.items() if v}
    best = {k: min(r.wall_s for r in v) for k, v in runs.items() if v}
    print("\n| command | case | wall s (min-max) | in MB/s | CPU s | tree RSS MB | maxrss MB |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for k, v in runs.items():
        case = cmds[k][2]
        w = [r.wall_s for r in v]
        print(
            f"| {k} | {case} | {med[k]:.2f} ({min(w):.2f}-{max(w):.2f}) | {sizes[case] / MB / med[k]:.1f} | "
            f"{statistics.median(r.cpu_s for r in v):.2f} | {max(r.peak_tree_rss for r in v) / MB:.0f} | "
            f"{max(r.ru_maxrss for r in v) / MB:.0f} |"
        )
    ratios = {}
    # best-of-N beside the median: on this shared machine a neighbour's burst can slow
    # any one repetition by 40%; the fastest repetition of each command is the least
    # disturbed (timeit's rule), so its ratio is the steadier of the two
    ratios_best = {}

    def ratio(name: str, num: str, den: str) -> None:
        if num in med and den in med:
            ratios[name] = med[num] / med[den]
            ratios_best[name] = best[num] / best[den]

    ratio("merge MB/s / tokenize MB/s (target >= 0.35)", "tokenize", "merge")
    ratio("merge-py MB/s / tokenize MB/s (the pure-Python path)", "tokenize", "merge-py")
    ratio("merge MB/s / merge-py MB/s (the kernel's speed-up)", "merge-py", "merge")
    ratio("merge MB/s / ijson-floor MB/s", "ijson", "merge")
    ratio("merge MB/s / naive MB/s", "naive", "merge")
    ratio("merge-j2 speedup over merge", "merge", "merge-j2")
    for s in ("window", "steps", "align"):
        ratio(f"{s} wall / merge wall (target <= 1.3)", s, "merge")
    ratio("info wall / merge wall (target <= 1.0)", "info", "merge")
    ratio("tiny -j2 wall / -j1 wall (target <= 1.2)", "tiny-j2", "tiny-j1")
    if "tiny-j1" in med:
        ratios["tiny -j1 ms per rank"] = 1000 * med["tiny-j1"] / a.tiny_ranks
    if "tiny-info" in med:
        ratios["tiny info ms per rank (open + plan scan)"] = 1000 * med["tiny-info"] / a.tiny_ranks
    print()
    for k, v in ratios.items():
        extra = f" (best-of-{a.reps}: {ratios_best[k]:.3f})" if k in ratios_best else ""
        print(f"{k}: {v:.3f}{extra}")
    if a.json:
        a.json.write_text(
            json.dumps(
                {
                    "sizes": sizes,
                    "argv": {k: bench.display(v[0]) for k, v in cmds.items()},
                    "runs": {k: [r.__dict__ for r in v] for k, v in runs.items()},
                    "medians_s": med,
                    "ratios": ratios,
                    "best_s": best,
                    "ratios_best_of_reps": ratios_best,
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
