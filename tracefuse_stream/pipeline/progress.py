"""The bytes-read progress bar of a merge (tqdm on stderr, only for a terminal)."""

from __future__ import annotations

import sys


class Progress:
    """Bytes-read progress bar on stderr (tqdm), only for a terminal and not --quiet."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(
                    total=total,
                    unit="B",
                    unit_scale=True,
                    unit_divisor=1024,
                    desc="merging",
                    file=sys.stderr,
                    leave=False,
                    dynamic_ncols=True,
                )
            except Exception:  # pragma: no cover - progress is best effort
                self.bar = None

    def __call__(self, n: int) -> None:
        if self.bar is not None and n > 0:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
