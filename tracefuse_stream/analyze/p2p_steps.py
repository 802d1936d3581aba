"""A step of send/recv pairs alone (a pipeline without a collective): its end read as
the collective every rank meets.

Why: the verdict (analyze/stragglers.py) reads lateness, held and the own lateness that
caps held at collectives, and a pure pipeline (pipeline parallel without data
parallel: torch's pipelining only sends and receives) has none in its steps. Its
stages are coupled by their linked send/recv pairs (align/p2p.py), so they end a step
together: the **step end** is where each rank's own time (the graph's gaps, waiting
and communication in send/recv left out: analyze/graph.py ``own_to_end``) is compared
with the others' median, as it is at a collective's arrival. A stage doing extra work
has more own time to the step end than the others; they wait for it in send/recv: a
receiver blocked in recv before its sender's send started, or a sender held in send
until its receiver posted the recv, waits for the later of the two, and that is held
time of the later one (the pairs are the step's instances for wait and held), the
cascade followed through the re-timed graph (analyze/graph.py ``held_through``), so
the same threshold, evidence, why, delayed ranks and what-if apply.

The step end is one pseudo-instance per such step and per set of ranks the step's pairs
connect (``match`` and name ``step end``, ids after the pairs'): two pipelines side by
side never wait for each other, so a slow stage of one is compared with, and holds up,
its own pipeline's stages only (one end for all would take the median over both, and
the other pipeline's stages, not held at all, would hide it). The ends are kept on the
step's graph (``StepGraph.ends``), never among the graph's instances: the re-timing and
the critical path are the pairs' alone.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from tracefuse_stream.align.collectives import CollectiveTable, Entry, Instance
from tracefuse_stream.analyze import graph as G
from tracefuse_stream.analyze.medians import median

STEP_END = "step end"  # the pseudo-instance's name and match

DEFINITIONS = (
    "no collective in the steps (a pipeline): wait = union of a rank's time in its linked send/recv pairs "
    "before the other rank arrives (within its step); held = median over the other ranks of the union of "
    "their time in pairs before the rank arrived, or how much earlier they would end the step without the "
    "rank's extra own time (the pairs re-timed), at most its own lateness; lateness = its step (start to end) "
    "minus the others' median; own lateness = its own time to its step end (waiting and communication in "
    "send/recv left out) minus the others' median; busy step = step - wait"
)


def add_step_ends(table: CollectiveTable, graphs: Dict[Optional[int], G.StepGraph]) -> None:
    """Give each graph made of send/recv pairs alone its step ends, one per set of ranks
    its pairs connect (ids after every
    instance's and pair's, in step order) and each rank's own time to it."""
    ids = [i.id for i in [*table.instances, *table.p2p_pairs]]
    next_id = max(ids, default=-1) + 1
    for step in sorted(graphs, key=lambda s: (s is None, s or 0)):
        g = graphs[step]
        if step is None or not g.by_id or any(i.sender is None for i in g.by_id.values()):
            continue
        sets = _connected(g)
        for ranks in sets:
            if len(sets) > 1:
                G.skews_within(table, g, ranks)
            entries: Dict[int, Entry] = {}
            for r in ranks:
                span = table.steps.get(r, {}).get(step)
                at = span[1] if span else g.end[r]  # the step's end: a cut of the why's segments
                entries[r] = Entry(g.by_id[g.order[r][-1]].entries[r].event, at, at, None)
            end = Instance(next_id, STEP_END, "", STEP_END, entries, step)
            g.ends.append(end)
            for r in ranks:
                g.own[(r, next_id)] = G.own_to_end(g, r)
            next_id += 1


def held_in_pipeline(
    g: G.StepGraph, rank: int, now: Dict[Tuple[int, int], int], fixed: Dict[Tuple[int, int], int]
) -> int:
    """How long ``rank``'s own pipeline was held up by it, where the pipelines meet: the
    median over the ranks its send/recv pairs connect it to of how much earlier each
    would arrive at its last collective of the step without ``rank``'s extra own work
    (analyze/graph.py ``extra_cut``, the graph re-timed: ``now`` and ``fixed``, the
    arrivals of :func:`~tracefuse_stream.analyze.graph.retime_ends` as recorded and cut).

    Why: beside another pipeline whose own slow rank (or late entry) sets the step, the
    step end (``held_through``) says nobody was held up, and so does the median over
    every rank of their direct waits: a stage 1.2 ms a step slower vanished behind a rank
    of the other pipeline entering 2 ms late, though it cost the step as much as that
    rank (issue 35: two causes in two pipelines). 0 in a step without both pairs and
    collectives."""
    mine = next((s for s in _connected(g, pairs_only=True) if rank in s), [])
    last = {}
    for q in mine:
        ids = [i for i in g.order.get(q, []) if g.by_id[i].sender is None]
        if q != rank and ids:
            last[q] = ids[-1]
    if not last:
        return 0
    return max(0, median([now[(q, i)] - fixed[(q, i)] for q, i in last.items()]))


def _connected(g: G.StepGraph, pairs_only: bool = False) -> List[List[int]]:
    """The step's ranks in the sets its send/recv pairs connect (``pairs_only``: through
    its pairs alone, not its collectives), each sorted, in order of their lowest rank."""
    parent = {r: r for r in g.order}

    def root(r: int) -> int:
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    for inst in g.by_id.values():
        if pairs_only and inst.sender is None:
            continue
        a, *rest = sorted(inst.entries)
        for b in rest:
            parent[root(b)] = root(a)
    sets: Dict[int, List[int]] = {}
    for r in sorted(g.order):
        sets.setdefault(root(r), []).append(r)
    return sorted(sets.values())


def pipeline_only(g: Optional[G.StepGraph]) -> bool:
    """The step's graph is its send/recv pairs alone (it has a step end)."""
    return g is not None and bool(g.ends)


__all__ = ["DEFINITIONS", "STEP_END", "add_step_ends", "held_in_pipeline", "pipeline_only"]
