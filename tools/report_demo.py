#!/usr/bin/env python3
"""The report page's screenshots (docs/report_*.png) and the runs behind them.

    python tools/report_demo.py slow-host OUT_DIR [--ranks 512] [--hosts 64] [--steps 10] [--slow-host 3]
    python tools/report_demo.py screenshot PAGE.html OUT.png [--width 1200] [--height 1500]

``slow-host``: a synthetic run made with ``tracefuse_synth`` (deterministic Kineto
traces: NCCL kernels with ``Seq``, ProfilerSteps, ``host_name`` node0..), then made to
have one slow host: on every rank of the OTHER hosts each NCCL kernel starts
``--late-us`` (1.5-2.5 ms, by step) earlier and lasts as much longer, so its end -- where
the ranks of one collective meet -- stays where it was: those ranks wait, the slow
host's ranks arrive last. The files are rewritten with ``json`` (one rank at a time).
``screenshot``: headless Chromium (``chromium``/``chromium-browser``/``google-chrome``)
``--screenshot`` of a page, then -- when Pillow is installed -- quantized to a small PNG.
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
from typing import Optional

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> Optional[str]:
    """The first headless-capable Chromium on PATH (``TRACEFUSE_CHROMIUM`` overrides)."""
    env = os.environ.get("TRACEFUSE_CHROMIUM")
    if env:
        return env if shutil.which(env) or os.path.exists(env) else None
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def chromium_args(browser: str, user_dir: str) -> list:
    return [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            "--disable-extensions", "--disable-background-networking", f"--user-data-dir={user_dir}"]  # fmt: skip


def slow_host(out: Path, ranks: int, hosts: int, steps: int, slow: int, jobs: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "tracefuse_synth", str(out), "--ranks", str(ranks), "--hosts", str(hosts),
         "--steps", str(steps), "--layers", "1", "--jobs", str(jobs), "-q"],
        check=True,
    )  # fmt: skip
    for f in sorted(out.glob("*.json")):
        d = json.loads(f.read_text())
        if d.get("host_name") == f"node{slow}":
            continue
        step_of = []  # (start, end, step) of the CPU ProfilerSteps
        for e in d["traceEvents"]:
            name = str(e.get("name", ""))
            if name.startswith("ProfilerStep#") and e.get("cat") == "user_annotation":
                step_of.append((e["ts"], e["ts"] + e["dur"], int(name.split("#")[1])))
        for e in d["traceEvents"]:
            if e.get("cat") == "kernel" and str(e.get("name", "")).startswith("ncclDevKernel"):
                st = next((s for a, b, s in step_of if a <= e["ts"] <= b + 2000), 0)
                late = 1500.0 + 500.0 * (st % 3)
                e["ts"] = round(e["ts"] - late, 3)
                e["dur"] = round(e["dur"] + late, 3)
        f.write_text(json.dumps(d))


def screenshot(page: Path, png: Path, width: int, height: int) -> None:
    browser = find_browser()
    if browser is None:
        sys.exit("no chromium on PATH (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "shot.png"
        subprocess.run(
            chromium_args(browser, tmp)
            + [f"--window-size={width},{height}", "--virtual-time-budget=5000", f"--screenshot={raw}",
               page.resolve().as_uri()],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        try:
            from PIL import Image
        except ImportError:
            shutil.copyfile(raw, png)
            return
        Image.open(raw).convert("RGB").quantize(colors=96).save(png, optimize=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("slow-host")
    s.add_argument("out", type=Path)
    s.add_argument("--ranks", type=int, default=512)
    s.add_argument("--hosts", type=int, default=64)
    s.add_argument("--steps", type=int, default=10)
    s.add_argument("--slow-host", type=int, default=3)
    s.add_argument("--jobs", type=int, default=2)
    c = sub.add_parser("screenshot")
    c.add_argument("page", type=Path)
    c.add_argument("png", type=Path)
    c.add_argument("--width", type=int, default=1200)
    c.add_argument("--height", type=int, default=1500)
    a = ap.parse_args()
    if a.cmd == "slow-host":
        slow_host(a.out, a.ranks, a.hosts, a.steps, a.slow_host, a.jobs)
    else:
        screenshot(a.page, a.png, a.width, a.height)


if __name__ == "__main__":
    main()
