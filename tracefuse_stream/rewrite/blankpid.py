"""Where Kineto's pid ``""`` goes: into the rank's CPU process (docs/OUTPUT_FORMAT.md)."""

from __future__ import annotations

from typing import Any, Optional

from tracefuse_stream.rewrite.contract import PID_DEVICE_LIMIT
from tracefuse_stream.rewrite.values import pid_key


def cpu_process(rw: Any) -> Optional[int]:
    """The output pid of the rank's main CPU process, when one is mapped already: the
    pid Kineto labels "CPU", else the first OS-like pid (rewrite/labels.py's rule).

    Kineto writes one global instant, "Record Window End" (``"s": "g"``), with pid
    and tid ``""`` at the end of each rank's trace. A process of its own per rank
    (``RANK 0 - pid ""``) held nothing else and read as a nameless process; the
    instant marks the end of the rank's recording, so it goes where the rank's
    other CPU events are, keeping its args.rank (Perfetto draws a global instant
    across the timeline whatever its pid)."""
    for ev in rw.metadata:
        args = ev.get("args")
        if ev.get("name") == "process_labels" and isinstance(args, dict):
            labels = args.get("labels")
            if isinstance(labels, str) and "CPU" in labels:
                out = rw.out_pid(ev.get("pid"))
                if out is not None:
                    return out
    for orig in rw.pid_order:
        if type(orig) is int and orig >= PID_DEVICE_LIMIT:
            return rw.pids[pid_key(orig)]
    return None


__all__ = ["cpu_process"]
