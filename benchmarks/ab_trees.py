#!/usr/bin/env python3
"""One command of two checkouts of tracefuse-stream, run alternately: CPU and peak RSS
ratios (issue 35, item 10: ``info --collectives`` with the cross-rank graph against the
code before it).

    python benchmarks/ab_trees.py --base /tmp/before --reps 7 DIR [DIR ...] \\
        [--args "info {dir} --collectives -j1"] [--json out.json]

``--base``: a checkout of the older commit (``git worktree add /tmp/before a4bcd79``,
its extension built there: ``python setup.py -q build_ext --inplace``); the other
tree is this one. Each repetition runs base, then this tree, each in its own process
measured as ``/usr/bin/time`` does (the child's rusage: user + sys CPU, peak
RSS), from a scratch directory with ``PYTHONPATH`` set to the tree, bytecode
compiled once per tree first. Why alternate and report ratios: the machine is shared;
pairs run seconds apart see the same load, so their ratio is steadier than either
time. Prints, per input, every pair and the median ratio; outputs of the two trees
are compared and said equal or not (a changed answer is not a speed-up).
"""

from __future__ import annotations

import argparse
import compileall
import hashlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

HERE = Path(__file__).resolve().parent.parent


def run(tree: Path, argv: List[str], cwd: str) -> Tuple[float, int, bytes]:
    """(user + sys s, peak RSS KiB, stdout's sha256) of ``python -m tracefuse_stream
    argv`` on ``tree``: the child's own rusage (``os.wait4``), not the sum over
    children. Why a digest, not the output: Linux starts a forked child's peak RSS at
    its parent's, so a parent holding every run's ``--json`` (100+ MB each) showed as
    the children's memory (281 MiB for a 72 MiB run)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen([sys.executable, "-m", "tracefuse_stream", *argv], cwd=cwd, env=env,
                             stdout=out, stderr=subprocess.DEVNULL)  # fmt: skip
        _pid, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            raise SystemExit(f"{tree}: {' '.join(argv)} exited {p.returncode}")
        out.seek(0)
        digest = hashlib.sha256()
        for block in iter(lambda: out.read(1 << 20), b""):
            digest.update(block)
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss, digest.digest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--base", type=Path, required=True, help="checkout of the older commit")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--args", default="info {dir} --collectives -j1", help="the command, {dir} the input")
    ap.add_argument("--json", type=Path, help="write every run here")
    a = ap.parse_args()
    trees = {"base": a.base.resolve(), "this": HERE}
    for t in trees.values():
        compileall.compile_dir(str(t / "tracefuse_stream"), quiet=1)
    record: Dict[str, Any] = {"base": str(trees["base"]), "this": str(HERE), "command": a.args, "inputs": {}}
    with tempfile.TemporaryDirectory() as cwd:
        for d in a.dirs:
            argv = shlex.split(a.args.format(dir=d.resolve()))
            pairs = []
            outs: Dict[str, bytes] = {}
            for _ in range(a.reps):
                pair = {}
                for name, tree in trees.items():
                    cpu, rss, out = run(tree, argv, cwd)
                    pair[name] = (cpu, rss)
                    outs[name] = out
                pairs.append(pair)
                print(f"{d.name}: base {pair['base'][0]:.2f} s {pair['base'][1] / 1024:.1f} MiB | "
                      f"this {pair['this'][0]:.2f} s {pair['this'][1] / 1024:.1f} MiB | "
                      f"{pair['this'][0] / pair['base'][0]:.2f}x", flush=True)  # fmt: skip
            ratio = statistics.median(p["this"][0] / p["base"][0] for p in pairs)
            same = outs["base"] == outs["this"]
            print(f"{d.name}: median CPU ratio this/base {ratio:.2f}x over {a.reps} pairs; "
                  f"peak RSS {max(p['base'][1] for p in pairs) / 1024:.1f} vs "
                  f"{max(p['this'][1] for p in pairs) / 1024:.1f} MiB; outputs {'equal' if same else 'differ'}")  # fmt: skip
            record["inputs"][str(d)] = {"pairs": pairs, "median_ratio": ratio, "outputs_equal": same}
    if a.json:
        a.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
