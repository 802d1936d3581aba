"""Which GPU each GPU collective of a rank ran on, held as arrays (issue 38, item 2:
bounded memory).

Why: the why finds a stretch's GPU by the stream and start of the collective that ends
it (analyze/stretch.py). As a dict (stream tid, start ns) -> device that took ~140
bytes a collective (the key tuple, its int, the dict's slot), kept for every rank
until the why is written: two collectives a step are ~0.28 KB a rank and step. Here
each stream's starts are one sorted int64 array and the devices one byte each (an
index into the rank's few devices): ~9 bytes a collective. It answers the dict's
questions with the same answers; streams whose tids are not all ints or strings (one
tid ``1`` and one ``1.0`` are one key of the dict, but print apart) keep the dict.
"""

from __future__ import annotations

import bisect
from array import array
from typing import Any, Dict, Iterator, List, Tuple, Union

Key = Tuple[Any, int]  # (stream tid, start ns) of a GPU collective


class GpuDevices:
    """(stream tid, start ns) -> device, read like the dict it was made from
    (:meth:`get`, :meth:`values`, :meth:`items`)."""

    __slots__ = ("_streams", "_devices")

    def __init__(self, streams: Dict[Any, Tuple[array[int], bytes]], devices: List[bytes]) -> None:
        self._streams, self._devices = streams, devices

    def get(self, key: Key, default: Any = None) -> Any:
        tid, start = key
        got = self._streams.get(tid)
        if got is None:
            return default
        starts, which = got
        i = bisect.bisect_left(starts, start)
        if i < len(starts) and starts[i] == start:
            return self._devices[which[i]]
        return default

    def items(self) -> Iterator[Tuple[Key, bytes]]:
        for tid, (starts, which) in self._streams.items():
            for a, d in zip(starts, which):
                yield (tid, a), self._devices[d]

    def values(self) -> Iterator[bytes]:
        return (d for _k, d in self.items())

    def __len__(self) -> int:
        return sum(len(s) for s, _w in self._streams.values())


def gpu_devices(d: Dict[Key, bytes]) -> Union[GpuDevices, Dict[Key, bytes]]:
    """``d`` as a :class:`GpuDevices`, or ``d`` itself where that would not answer the same."""
    devices = sorted(set(d.values()))
    if len(devices) > 255 or any(type(t) is not int and type(t) is not str for t, _a in d):
        return d
    index = {dev: i for i, dev in enumerate(devices)}
    by: Dict[Any, List[Tuple[int, int]]] = {}
    for (t, a), dev in d.items():
        if type(a) is not int:
            return d
        by.setdefault(t, []).append((a, index[dev]))
    streams: Dict[Any, Tuple[array[int], bytes]] = {}
    for t, pairs in by.items():
        pairs.sort()
        try:
            starts = array("q", [a for a, _i in pairs])
        except OverflowError:
            return d
        streams[t] = (starts, bytes(i for _a, i in pairs))
    return GpuDevices(streams, devices)


__all__ = ["GpuDevices", "gpu_devices"]
