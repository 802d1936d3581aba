"""The optional compiled kernel (``_kernel.c``): whether it is here, and its switch.

``setup.py`` builds it where a C compiler and the Python headers are available; where
not, ``kernel`` is ``None`` and every stage runs its pure-Python path, which writes the
same bytes (tests/test_kernel.py compares the two). Two stages use it, each through its
own wrapper: the merge's rewrite (rewrite/kernel.py) and the side passes' scan
(read/scan.py). ``TRACEFUSE_KERNEL=0`` in the environment turns it off, for the tests
and for a user who suspects it.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Optional

kernel: Optional[ModuleType]
try:
    import tracefuse_stream._kernel as kernel  # type: ignore[import-not-found,no-redef,unused-ignore]
except ImportError:  # not compiled here
    kernel = None


def available() -> bool:
    """Whether the compiled kernel is importable and not switched off."""
    return kernel is not None and os.environ.get("TRACEFUSE_KERNEL", "1") != "0"


__all__ = ["available", "kernel"]
