"""Constants and the two number/string renderers every part of the generator shares.

Why a module of its own: the templates, the rank renderer, the trace writer and the
run driver all print times and names the same way (integer ns -> ``us.nnn``, JSON
string literals rendered once per template); one definition keeps the files they
write byte-identical whichever part renders an event.
"""

from __future__ import annotations

import os
from typing import Union

import orjson

#: 1790857026 s = 227 periods of 7,889,238 s: a base Kineto could really write.
DEFAULT_BASE_TIME_NS = 1790857026000000000
KEY_ORDERS = ("base_first", "base_after", "distinfo_after")
COMPRESSIONS = (None, "gzip", "zstd")
#: Flush the pending event strings to the file after this many (bounds memory).
FLUSH_EVENTS = 2048
#: Largest ts (in us) that Kineto-style floats keep exact to the nanosecond.
MAX_TS_US = 2**43
#: CUDA streams: compute and NCCL.
COMPUTE_STREAM = 7
COMM_STREAM = 20
GPU_SORT_BASE = 16777216
SPANS_SORT_INDEX = 536870912

PathLike = Union[str, "os.PathLike[str]"]

_US = 1000  # ns per microsecond


def _j(s: str) -> str:
    """JSON string literal (names are rendered once per template, not per event)."""
    return orjson.dumps(s).decode()


def _t(ns: int) -> str:
    """Integer nanoseconds -> microseconds with exactly three decimals."""
    return f"{ns // 1000}.{ns % 1000:03d}"
