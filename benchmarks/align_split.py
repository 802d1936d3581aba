#!/usr/bin/env python3
"""Where an aligned merge's time goes: the collective pass vs the writing.

    python benchmarks/align_split.py [DIR] [--reps 5]

Alternates ``merge(DIR, align="base")`` and ``merge(DIR, align="collectives")`` in one
process (``-j 1``, ``include_pyfunc``), with timers monkeypatched around the two seams
of ``pipeline.orchestrate`` (package code unchanged): ``apply_alignment`` (the
collective pass, ``align/ends.py``) and ``_write_files`` (reading, rewriting and
writing every rank). DIR defaults to hotpath.py's ``hot-8x20``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.pop("TRACEFUSE_VERIFY", None)

import tracefuse_stream.pipeline.orchestrate as orchestrate  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", nargs="?", default="/tmp/tfbench/hot-8x20")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    seams: Dict[str, float] = {}

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                seams[name] = time.perf_counter() - t

        return wrapper

    orchestrate.apply_alignment = timed("align pass", orchestrate.apply_alignment)  # type: ignore[assignment]
    orchestrate._write_files = timed("write", orchestrate._write_files)  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.reps):
            for mode in ("base", "collectives"):
                seams.clear()
                t, c = time.perf_counter(), time.process_time()
                orchestrate.merge(
                    [a.input], str(Path(tmp) / "x.json"), jobs=1, include_pyfunc=True, align=mode, force=True
                )
                parts = "  ".join(f"{k} {v:.3f} s" for k, v in seams.items())
                print(
                    f"rep {rep + 1} --align {mode:<11} wall {time.perf_counter() - t:.2f} s  "
                    f"CPU {time.process_time() - c:.2f} s  {parts}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
