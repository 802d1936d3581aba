"""What a recorded run's own trace says its injected work took, for tests that check
the analysis against it (tests/data/recorded/README.md says what each recording does)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Dict

RECORDED = Path(__file__).parent / "data" / "recorded"


def mm_640_us(name: str, rank: int) -> Dict[int, float]:
    """step -> the rank's time in its 640 x 640 matmuls (the work a recording injects),
    µs, read from the rank's trace (the ProfilerStep#N on the main thread holding each)."""
    for f in sorted((RECORDED / name).glob("*.json.gz")):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        if doc["distributedInfo"]["rank"] == rank:
            break
    else:
        raise AssertionError(f"no rank {rank} in {RECORDED / name}")
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in ev if e["name"].startswith("ProfilerStep#")]
    out: Dict[int, float] = {}
    for e in ev:
        if e["name"] == "aten::mm" and e["args"].get("Input Dims") == [[640, 640], [640, 640]]:
            st = next(s for s in steps if s["ts"] <= e["ts"] <= s["ts"] + s["dur"])
            n = int(st["name"].split("#")[1])
            out[n] = out.get(n, 0.0) + e["dur"]
    return out
