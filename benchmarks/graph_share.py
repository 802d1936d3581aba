#!/usr/bin/env python3
"""The cross-rank graph's own share of ``info --collectives`` (issue 35, item 10).

    python benchmarks/graph_share.py DIR [--reps 5] [--part graph|steps]
        [--args "info {dir} --collectives -j1"]

(``--part steps``: the same for every rank's step figures, analyze/step_time.py,
step_pack.py, imbalance.py, gpu_union.py and report/step_time_text.py.)

Why this and not only a comparison with the commit before the graph
(benchmarks/ab_trees.py): since that commit the command also computes other answers
(every rank's step figures, issue 36; the why's rows packed for the reduce's memory,
issue 38), so the whole command's ratio prices them too. The graph cannot be switched
off (the verdict's rows are read from it), so its cost is timed in place: the command
runs in this process with a timer around every function of the graph's modules
(analyze/graph.py, rootcause.py, pair_roles.py, p2p_steps.py, report/rootcause.py;
only the outermost call counted, so nested calls are not counted twice), plus their
modules' own import time (``-X importtime``'s self column: the modules they import are
imported by the command anyway), against the process's own CPU time (user + sys, the interpreter's start
not included: the share is of the work after it). Prints each repetition and the
median share.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import inspect
import io
import os
import re
import resource
import runpy
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

PARTS = {
    "graph": (
        "tracefuse_stream.analyze.graph",
        "tracefuse_stream.analyze.rootcause",
        "tracefuse_stream.analyze.pair_roles",
        "tracefuse_stream.analyze.p2p_steps",
        "tracefuse_stream.report.rootcause",
    ),
    # every rank's step figures (issue 36), for comparison
    "steps": (
        "tracefuse_stream.analyze.step_time",
        "tracefuse_stream.analyze.step_pack",
        "tracefuse_stream.analyze.imbalance",
        "tracefuse_stream.analyze.gpu_union",
        "tracefuse_stream.report.step_time_text",
    ),
}
MODULES = PARTS[os.environ.get("TF_SHARE_PART", "graph")]


def _child(argv: List[str]) -> None:
    """One run in this process: prints ``graph_s cpu_s`` (the graph's seconds, the
    process's CPU seconds since this function began)."""
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    spent = [0.0]
    depth = [0]
    mods = [importlib.import_module(m) for m in MODULES]  # their own import: see main

    def timed(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def w(*a: Any, **k: Any) -> Any:
            if depth[0]:
                return fn(*a, **k)
            depth[0] += 1
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t
                depth[0] -= 1

        return w

    originals: Dict[int, Any] = {}
    for m in mods:
        for name, fn in list(vars(m).items()):
            if inspect.isfunction(fn) and fn.__module__ == m.__name__:
                originals[id(fn)] = w = timed(fn)
                setattr(m, name, w)
    # the names other modules imported before (``from ... import x``) point at the wrapper too
    for mod in list(sys.modules.values()):
        if mod is None or not getattr(mod, "__name__", "").startswith("tracefuse_stream"):
            continue
        for name, v in list(vars(mod).items()):
            if inspect.isfunction(v) and id(v) in originals and mod not in mods:
                setattr(mod, name, originals[id(v)])
    sys.argv = ["tracefuse_stream", *argv]
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            runpy.run_module("tracefuse_stream", run_name="__main__")
        except SystemExit:
            pass
    r = resource.getrusage(resource.RUSAGE_SELF)
    print(f"{spent[0]:.6f} {r.ru_utime + r.ru_stime - r0.ru_utime - r0.ru_stime:.6f}")


def _own_imports(stderr: str) -> float:
    """Seconds the graph's modules took to import, their own code only."""
    us = 0
    for line in stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)$", line)
        if m and m.group(2) in MODULES:
            us += int(m.group(1))
    return us / 1e6


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--args", default="info {dir} --collectives -j1")
    ap.add_argument(
        "--part", choices=sorted(PARTS), default="graph", help="whose share (default: %(default)s)"
    )
    a = ap.parse_args()
    global MODULES
    MODULES = PARTS[a.part]
    argv = shlex.split(a.args.format(dir=a.dir.resolve()))
    tree = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(tree), TF_SHARE_PART=a.part)
    shares = []
    for _ in range(a.reps):
        out = subprocess.run(
            [sys.executable, "-X", "importtime", __file__, "--child", *argv], env=env, check=True,
            capture_output=True, text=True, cwd="/tmp",
        )  # fmt: skip
        g, cpu = map(float, out.stdout.split()[-2:])
        g += _own_imports(out.stderr)
        shares.append(g / cpu)
        print(f"{a.part} {g * 1000:.1f} ms of {cpu * 1000:.0f} ms CPU: {100 * g / cpu:.1f}%", flush=True)
    print(f"median share of the {a.part}: {100 * statistics.median(shares):.1f}% over {a.reps} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
