"""Which process group each gloo op of each rank belongs to.

Why: Kineto writes nothing on a gloo op that names its process group (no
``record_param_comms``, no ``Process Group Name``, no ``Seq``); the op only sits on
one of gloo's ``pt_gloo_runloop`` threads. What is known for sure:

* every process group of a rank has its own runloop threads (two by default), which
  its constructor starts one after the other; groups are constructed one after the
  other on the main thread, in the order ``distributedInfo.pg_config`` lists them
  (``pg_name`` "0", "1", ...). So in creation order (OS tid order) a rank's gloo
  threads form one contiguous block per group, the blocks in ``pg_config`` order;
* one group's ops are spread over ALL of its threads (they take turns), and ops of
  the world group and of a sub-group interleave in time, so neither "one thread = one
  group" nor "ops that look alike = one group" holds;
* ``pg_config`` lists only the groups the rank belongs to; the union over the ranks
  gives every group and its ranks, also for a rank whose trace has no ``pg_config``.

What is not known is where one block ends and the next starts (how many threads a
group has, and whether all of them ran an op inside the profiling window). That is
decided by the other ranks: for every possible cut of a rank's threads into its
groups' blocks, the rank's per-group op sequences are compared with the same group's
sequence on up to :data:`PEERS` other members (:func:`~tracefuse_stream.align.
sequences.best_shift`: same names, same shapes where recorded, overlapping in time on
one host), and the cut under which most ops find their counterparts (and fewest do
not) wins; a group with no other member among the merged ranks gives no evidence. Each rank is
re-decided in turn until no cut changes (a few rounds). When two cuts fit equally well
the evidence does not decide: that rank's gloo ops are not attributed (reported with
the reason), and the other ranks' are still used.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from tracefuse_stream.align.sequences import best_shift

PEERS = 3  # other members a rank's sequence is compared with when judging a cut
MAX_CUTS = 400  # beyond this many ways to cut a rank's threads, do not search
ROUNDS = 5
PgConfig = List[Tuple[str, Optional[Tuple[int, ...]]]]


class Group(NamedTuple):
    name: str
    ranks: Optional[Tuple[int, ...]]  # None: every merged rank


def _creation_key(name: str) -> Tuple[int, int, str]:
    return (0, int(name), "") if name.isascii() and name.isdigit() else (1, 0, name)


def group_table(cfgs: Mapping[int, PgConfig], notes: List[str]) -> Dict[str, Optional[Tuple[int, ...]]]:
    """Every process group named in any rank's ``pg_config`` with its ranks; a group
    described differently by two ranks is dropped (and noted): its ops stay unmatched."""
    table: Dict[str, Optional[Tuple[int, ...]]] = {}
    bad = set()
    for r in sorted(cfgs):
        for name, ranks in cfgs[r]:
            if name in table and table[name] != ranks:
                bad.add(name)
            table.setdefault(name, ranks)
    for name in sorted(bad):
        notes.append(f"process group {name!r} has different ranks in different ranks' pg_config; not matched")
        del table[name]
    return table


def rank_groups(
    rank: int,
    cfg: PgConfig,
    table: Mapping[str, Optional[Tuple[int, ...]]],
    pg_count: Optional[int],
) -> Tuple[List[Group], Optional[str]]:
    """The rank's groups in creation order, or a reason why they are unknown."""
    if cfg:
        names = [n for n, _ in cfg]
        if any(n not in table for n in names):
            return [], "its pg_config disagrees with another rank's"
        return [Group(n, table[n]) for n in names], None
    if table:
        mine = [n for n, ranks in table.items() if ranks is None or rank in ranks]
        if not mine:
            return [], "no pg_config names a process group holding this rank"
        return [Group(n, table[n]) for n in sorted(mine, key=_creation_key)], None
    if pg_count is not None and pg_count > 1:
        return (
            [],
            f"the rank is in {pg_count} process groups but its trace lists none (no distributedInfo.pg_config)",
        )
    return [Group("", None)], None


def cuts(n: int, k: int) -> Iterator[Tuple[int, ...]]:
    """Every way to cut ``n`` ordered threads into ``k`` contiguous blocks (sizes >= 0)."""
    if k == 1:
        yield (n,)
        return
    for first in range(n + 1):
        for rest in cuts(n - first, k - 1):
            yield (first,) + rest


def _even_cut(n: int, k: int) -> Tuple[int, ...]:
    return tuple(n // k + (1 if i < n % k else 0) for i in range(k))


def _thread_order(tid: Any) -> Tuple[int, Any]:
    return (0, tid) if isinstance(tid, int) else (1, str(tid))


class _Rank:
    """One rank's gloo ops, its groups, and the cuts still possible."""

    def __init__(self, rank: int, ops: Sequence[Any], groups: List[Group]) -> None:
        self.rank = rank
        self.groups = groups
        self.threads = sorted({e.event.tid for e in ops}, key=_thread_order)
        self.by_thread: Dict[Any, List[Any]] = {}
        for e in ops:
            self.by_thread.setdefault(e.event.tid, []).append(e)
        self.cut = _even_cut(len(self.threads), len(groups))

    def seqs(self, cut: Tuple[int, ...]) -> Dict[str, List[Any]]:
        out: Dict[str, List[Any]] = {}
        i = 0
        for g, size in zip(self.groups, cut):
            ops = [e for t in self.threads[i : i + size] for e in self.by_thread[t]]
            ops.sort(key=lambda e: (e.start_ns, e.event.pos))
            out[g.name] = ops
            i += size
        return out


def assign(
    ops: Mapping[int, Sequence[Any]],
    groups: Mapping[int, List[Group]],
    hosts: Mapping[int, Optional[str]],
    merged: Sequence[int],
) -> Tuple[Dict[int, Dict[str, List[Any]]], Dict[int, str]]:
    """Per rank: group name -> its ops in start order; and per rank the reason its
    ops could not be attributed (see the module docstring)."""
    ranks = {r: _Rank(r, ops[r], groups[r]) for r in sorted(ops) if ops[r] and groups.get(r)}
    undecided: Dict[int, str] = {}
    searchable = {}
    for r, rk in ranks.items():
        n_cuts = _count_cuts(len(rk.threads), len(rk.groups))
        if n_cuts > MAX_CUTS:
            undecided[r] = (
                f"{len(rk.threads)} gloo threads in {len(rk.groups)} groups: too many ways to attribute"
            )
        elif n_cuts > 1:
            searchable[r] = list(cuts(len(rk.threads), len(rk.groups)))
    current = {r: rk.seqs(rk.cut) for r, rk in ranks.items()}
    for _ in range(ROUNDS if searchable else 0):
        changed = False
        for r, options in searchable.items():
            scored = [(_score(r, ranks[r], c, current, hosts, merged), c) for c in options]
            best = max(s for s, _ in scored)
            if _score(r, ranks[r], ranks[r].cut, current, hosts, merged) < best:
                ranks[r].cut = next(c for s, c in scored if s == best)
                current[r] = ranks[r].seqs(ranks[r].cut)
                changed = True
        if not changed:
            break
    for r, options in searchable.items():
        scored = [(_score(r, ranks[r], c, current, hosts, merged), c) for c in options]
        best = max(s for s, _ in scored)
        tied = [c for s, c in scored if s == best]
        if len(tied) > 1:
            undecided[r] = (f"its {len(ranks[r].threads)} gloo threads fit {len(tied)} attributions to its "
                            f"{len(ranks[r].groups)} process groups equally well")  # fmt: skip
    return {r: s for r, s in current.items() if r not in undecided}, undecided


def _count_cuts(n: int, k: int) -> int:
    from math import comb

    return comb(n + k - 1, k - 1) if k > 0 else 0


def _score(
    r: int,
    rk: _Rank,
    cut: Tuple[int, ...],
    current: Mapping[int, Mapping[str, List[Any]]],
    hosts: Mapping[int, Optional[str]],
    merged: Sequence[int],
) -> int:
    """Under ``cut``, per peer sequence compared: the ops of rank ``r`` that find a
    counterpart minus those that do not (an op put in the wrong group costs twice)."""
    total = 0
    for name, seq in rk.seqs(cut).items():
        g = next(g for g in rk.groups if g.name == name)
        members = merged if g.ranks is None else [q for q in g.ranks if q in current]
        peers = sorted(
            (q for q in members if q != r and name in current.get(q, {})), key=lambda q: (abs(q - r), q)
        )
        for q in peers[:PEERS]:
            same = (hosts.get(q) or f"rank {q}") == (hosts.get(r) or f"rank {r}")
            total += 2 * best_shift(seq, current[q][name], same)[1] - len(seq)
    return total


__all__ = ["Group", "assign", "cuts", "group_table", "rank_groups"]
