"""One rank's step figures packed into one bytes object while the reduce waits for the
rest (issue 38, item 2: bounded memory).

Why: a rank's :class:`~tracefuse_stream.analyze.step_time.StepTime` rows are small
objects (a step's GPU and CPU sides, their figures, lists of name tuples): ~2.5 KB a
step in Python objects, ~24 KB a rank of 10 steps, the largest holder of the reduce at
thousands of ranks. Packed -- names as ids into one table of the reduce
(:class:`NameIds`, every rank names the same kernels and operators), every number as
it is, by ``marshal``, then compressed (analyze/block_codec.py) -- a rank's rows take
~180 bytes a step; they are decoded, one rank at a time, each time the report iterates them (the text report and
the JSON read them a few times: a rank's decode is ~0.1 ms). Decoding gives the same
values and types, so every report is the same bytes. In the reduce the packed bytes
go to the why's temporary file (analyze/unit_pack.py ``Spill``), read back as iterated.
"""

from __future__ import annotations

import marshal
from itertools import chain, islice
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union, overload

from tracefuse_stream.analyze.block_codec import pack_block, unpack_block
from tracefuse_stream.analyze.gpu_union import FIGURE_FIELDS, GpuFigures
from tracefuse_stream.analyze.step_time import CpuStep, GpuStep, StepTime
from tracefuse_stream.analyze.unit_pack import Spill


class NameIds:
    """One id per distinct name of the reduce (kernel, operator, category, device,
    thread): the strings every rank's packed rows refer to."""

    __slots__ = ("ids", "names")

    def __init__(self) -> None:
        self.ids: Dict[str, int] = {}
        self.names: List[str] = []

    def of(self, name: str) -> int:
        i = self.ids.get(name)
        if i is None:
            i = self.ids[name] = len(self.names)
            self.names.append(name)
        return i


def _enc(st: StepTime, t: NameIds) -> Tuple[Any, ...]:
    g = st.gpu
    gpu = None
    if g is not None:
        f = g.figures
        gpu = (
            (f.window_ns, *(getattr(f, k) for k in FIGURE_FIELDS)),
            t.of(g.device),
            tuple(x for k, v in g.categories.items() for x in (t.of(k), v)),
            tuple(x for n, ns, c in g.kernels for x in (t.of(n), ns, c)),
            tuple(x for n, ns in g.unknown for x in (t.of(n), ns)),
            g.device_pid,
        )
    c = st.cpu
    cpu = (
        None if c.thread is None else t.of(c.thread),
        tuple(x for n, ns, k in c.ops for x in (t.of(n), ns, k)),
        tuple(x for n, ns in c.outside for x in (t.of(n), ns)),
        c.dataloader_ns,
        c.optimizer_ns,
        c.collective_wait_ns,
        c.collective_comm_ns,
    )
    return (st.rank, st.step, st.start_ns, st.step_ns, gpu, cpu)


def _threes(flat: Sequence[Any], names: List[str]) -> List[Tuple[str, int, int]]:
    it = iter(flat)
    return [(names[n], a, b) for n, a, b in zip(it, it, it)]


def _twos(flat: Sequence[Any], names: List[str]) -> List[Tuple[str, int]]:
    it = iter(flat)
    return [(names[n], a) for n, a in zip(it, it)]


def _dec(row: Tuple[Any, ...], names: List[str]) -> StepTime:
    rank, step, start_ns, step_ns, gpu, cpu = row
    g = None
    if gpu is not None:
        figs, dev, cats, kernels, unknown, pid = gpu
        it = iter(cats)
        g = GpuStep(
            GpuFigures(*figs),
            names[dev],
            {names[k]: v for k, v in zip(it, it)},
            _threes(kernels, names),
            _twos(unknown, names),
            pid,
        )
    thread, ops, outside, dl, opt, wait, comm = cpu
    c = CpuStep(
        None if thread is None else names[thread],
        _threes(ops, names),
        _twos(outside, names),
        dl,
        opt,
        wait,
        comm,
    )
    return StepTime(rank, step, start_ns, step_ns, g, c)


class _Decoded(Sequence[StepTime]):
    """Rows decoded as they are iterated: an index decodes them all (rare: the readers
    iterate)."""

    __slots__ = ()

    @overload
    def __getitem__(self, i: int) -> StepTime: ...

    @overload
    def __getitem__(self, i: slice) -> List[StepTime]: ...

    def __getitem__(self, i: Union[int, slice]) -> Union[StepTime, List[StepTime]]:
        return list(self)[i]


#: rows a packed chunk holds: a rank's rows are decoded a chunk at a time, never all
#: its steps at once (1,600 steps decoded: ~5 MB, the reduce's peak at 8 ranks)
CHUNK_ROWS = 64


class PackedSteps(_Decoded):
    """One rank's step rows as compressed chunks of :data:`CHUNK_ROWS` rows (in ``spill``,
    when given), decoded a chunk at a time each time they are iterated."""

    __slots__ = ("_blob", "_n", "_names", "_spill")

    def __init__(self, rows: Iterable[StepTime], names: NameIds, spill: Optional[Spill] = None) -> None:
        self._names = names
        self._spill = spill
        self._blob: Sequence[bytes] = ()
        self._n = 0
        self.pack(rows)

    def pack(self, rows: Iterable[StepTime]) -> None:
        """Hold ``rows`` (again: after :func:`~tracefuse_stream.analyze.step_time.fill_blocked`,
        which may pass these rows decoded as they are iterated: the new chunks are
        made aside, the old ones read until the last)."""
        it = iter(rows)
        chunks: List[bytes] = []
        n = 0
        while True:
            part = tuple(_enc(st, self._names) for st in islice(it, CHUNK_ROWS))
            if not part:
                break
            n += len(part)
            chunks.append(pack_block(marshal.dumps(part)))
        self._blob = self._spill.put(chunks) if self._spill is not None else tuple(chunks)
        self._n = n

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[StepTime]:
        names = self._names.names
        return (_dec(row, names) for b in self._blob for row in marshal.loads(unpack_block(b)))


class StepRows(_Decoded):
    """Every rank's rows in rank order (each rank's by step), without holding them
    decoded: what :attr:`Analysis.step_time` is (analyze/analysis.py)."""

    __slots__ = ("_parts",)

    def __init__(self, parts: Sequence[Sequence[StepTime]]) -> None:
        self._parts = list(parts)

    def __len__(self) -> int:
        return sum(len(p) for p in self._parts)

    def __iter__(self) -> Iterator[StepTime]:
        return chain.from_iterable(self._parts)


#: rows the reduce holds as they are (all ranks together) before it packs: ~2.5 KB
#: each, 5 MB at most. Why not pack every rank: on small runs (8 ranks of 50 steps)
#: packing and decoding the rows each time a report reads them was ~10% of
#: ``info --collectives``; the bound is what issue 38 asks, not packing as such
HELD_ROWS = 2048


class HoldBudget:
    """How many more rows the reduce may hold unpacked (:data:`HELD_ROWS` at first):
    the first ranks' rows are held as they are until it is spent, every later rank's
    are packed, so the unpacked rows never exceed it whatever the ranks and steps."""

    __slots__ = ("left",)

    def __init__(self, rows: Optional[int] = None) -> None:
        self.left = HELD_ROWS if rows is None else rows

    def take(self, n: int) -> bool:
        """True (and ``n`` taken): hold ``n`` rows unpacked."""
        if n > self.left:
            self.left = 0  # spent: later ranks are packed, even a smaller one (rank order kept simple)
            return False
        self.left -= n
        return True


def pack_rows(
    rows: Optional[Sequence[StepTime]],
    names: NameIds,
    spill: Optional[Spill] = None,
    budget: Optional[HoldBudget] = None,
) -> Sequence[StepTime]:
    """``rows`` packed (in ``spill``, when given), or as they are while ``budget``
    allows (a list: an empty list stays one, a rank without steps)."""
    if not rows:
        return []
    if budget is not None and isinstance(rows, list) and budget.take(len(rows)):
        return rows
    return PackedSteps(rows, names, spill)


__all__ = ["HELD_ROWS", "HoldBudget", "NameIds", "PackedSteps", "StepRows", "pack_rows"]
