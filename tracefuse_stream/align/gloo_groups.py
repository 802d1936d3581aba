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
the reason), and the other ranks' are still used. When the result leaves ops unmatched,
the search is re-run from other starts and the results compared as a whole
(:func:`_starts`, :func:`_pick`), a tie again reported rather than guessed.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from tracefuse_stream.align.sequences import OVERLAP_TOLERANCE_NS, best_shift, is_symmetric, match_group

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
    searchable: Dict[int, List[Tuple[int, ...]]] = {}
    for r, rk in ranks.items():
        n_cuts = _count_cuts(len(rk.threads), len(rk.groups))
        if n_cuts > MAX_CUTS:
            undecided[r] = (
                f"{len(rk.threads)} gloo threads in {len(rk.groups)} groups: too many ways to attribute"
            )
        elif n_cuts > 1:
            searchable[r] = list(cuts(len(rk.threads), len(rk.groups)))
    starts = _starts(ranks, searchable)
    first = _descend(ranks, searchable, starts[0], hosts, merged)
    chosen: Dict[int, Tuple[int, ...]] = first
    ambiguous: Dict[int, str] = {}
    if searchable:  # every op matching is no proof: see _starts
        finals = {tuple(first[r] for r in searchable): first}
        for start in starts[1:]:
            state = _descend(ranks, searchable, start, hosts, merged)
            finals.setdefault(tuple(state[r] for r in searchable), state)
        fit = _matched_ops(first, ranks, hosts, merged)
        if fit[1]:
            chosen, ambiguous = _pick(list(finals.values()), ranks, hosts, merged)
        else:
            chosen = _clearly_better(first, fit[0], list(finals.values()), ranks, hosts, merged)
    for r, rk in ranks.items():
        rk.cut = chosen.get(r, rk.cut)
    current = {r: rk.seqs(rk.cut) for r, rk in ranks.items()}
    for r, options in searchable.items():
        scored = [(_score(r, ranks[r], c, current, hosts, merged), c) for c in options]
        best = max(s for s, _ in scored)
        tied = [c for s, c in scored if s == best]
        if len(tied) > 1:
            undecided[r] = (f"its {len(ranks[r].threads)} gloo threads fit {len(tied)} attributions to its "
                            f"{len(ranks[r].groups)} process groups equally well")  # fmt: skip
        elif r in ambiguous:
            undecided[r] = ambiguous[r]
    return {r: s for r, s in current.items() if r not in undecided}, undecided


def _starts(ranks: Mapping[int, _Rank], searchable: Mapping[int, Any]) -> List[Dict[int, Tuple[int, ...]]]:
    """Where the search starts: first threads spread evenly over each rank's groups
    (gloo starts as many threads for every group, two by default); then every rank's
    threads all in its k-th group (k = 0, 1, ...), always. Why: the search moves one
    rank at a time, so a state where the ranks of a group split its ops between two
    groups the same way is a fixed point it cannot leave (two pipelines on pair groups
    plus a world all-reduce, the pair groups' threads idle in the window: each rank
    shows only two threads). Such a state may even match every op: the even start put
    the world all-reduce of every other step, on gloo's second runloop thread, in the
    pair groups, and both pairs matched (recorded: two 2-stage pipelines on [0, 2] and
    [1, 3], send/recv on the main thread). So the results are always compared as a whole
    (:func:`_pick`; when the first matches every op, :func:`_clearly_better`: which
    threads' ids are consecutive, and the release times, tell them apart)."""
    out = [{r: rk.cut for r, rk in ranks.items()}]
    most = max((len(ranks[r].groups) for r in searchable), default=0)
    for k in range(most):
        state = {}
        for r, rk in ranks.items():
            g = min(k, len(rk.groups) - 1)
            state[r] = (
                tuple(len(rk.threads) if i == g else 0 for i in range(len(rk.groups)))
                if r in searchable
                else rk.cut
            )
        out.append(state)
    return out


def _descend(
    ranks: Mapping[int, _Rank],
    searchable: Mapping[int, List[Tuple[int, ...]]],
    start: Mapping[int, Tuple[int, ...]],
    hosts: Mapping[int, Optional[str]],
    merged: Sequence[int],
) -> Dict[int, Tuple[int, ...]]:
    """Re-decide each rank's cut against the others' until none changes (or :data:`ROUNDS`)."""
    state = dict(start)
    current = {r: rk.seqs(state[r]) for r, rk in ranks.items()}
    for _ in range(ROUNDS if searchable else 0):
        changed = False
        for r, options in searchable.items():
            scored = [(_score(r, ranks[r], c, current, hosts, merged), c) for c in options]
            best = max(s for s, _ in scored)
            if _score(r, ranks[r], state[r], current, hosts, merged) < best:
                state[r] = next(c for s, c in scored if s == best)
                current[r] = ranks[r].seqs(state[r])
                changed = True
        if not changed:
            break
    return state


def _pick(
    states: List[Dict[int, Tuple[int, ...]]],
    ranks: Mapping[int, _Rank],
    hosts: Mapping[int, Optional[str]],
    merged: Sequence[int],
) -> Tuple[Dict[int, Tuple[int, ...]], Dict[int, str]]:
    """The state under which most ops match across their group's members; among states
    that match as many, the one whose instances release their members most alike
    (:func:`_release_spread`), when that is clear; else the ranks whose attribution
    differs between the tied states, each with the reason (not guessed)."""
    if len(states) == 1:
        return states[0], {}
    fits = [(_matched_ops(st, ranks, hosts, merged), st) for st in states]
    key = [(sum(len(i) for i in inst), -left) for (inst, left), _ in fits]
    tied = [(inst, st) for k, ((inst, _), st) in zip(key, fits) if k == max(key)]
    if len(tied) == 1:
        return tied[0][1], {}
    spread = sorted((_release_spread(inst, hosts), i) for i, (inst, _) in enumerate(tied))
    (best, i), (second, _) = spread[0], spread[1]
    if 2 * best < second and second - best > OVERLAP_TOLERANCE_NS:
        return tied[i][1], {}
    differ = {r for _, st in tied for r in st if st[r] != tied[0][1][r]}
    why = (f"its gloo ops fit {len(tied)} attributions to its process groups equally well (every op matches "
           "either way, and the collectives' release times do not tell them apart)")  # fmt: skip
    return tied[0][1], {r: why for r in differ}


def _clearly_better(
    first: Dict[int, Tuple[int, ...]],
    inst: List[Any],
    states: List[Dict[int, Tuple[int, ...]]],
    ranks: Mapping[int, _Rank],
    hosts: Mapping[int, Optional[str]],
    merged: Sequence[int],
) -> Dict[int, Tuple[int, ...]]:
    """``first`` matches every op (``inst``: its instances); another state that matches
    as many replaces it only when it cuts fewer pairs of threads with consecutive ids
    apart (:func:`_splits`: a
    group's constructor starts its threads back to back, other threads start between two
    groups) and its instances release their members no less alike
    (:func:`_release_spread`). Else ``first`` stays: no worse evidence than before the
    other starts were tried (two pairs side by side fit either way)."""
    best, best_splits, spread = first, _splits(first, ranks), _release_spread(inst, hosts)
    n = sum(len(i) for i in inst)
    for st in states:
        other, left = _matched_ops(st, ranks, hosts, merged)
        if st is first or left or sum(len(i) for i in other) < n:
            continue
        k = _splits(st, ranks)
        if k < best_splits and _release_spread(other, hosts) <= spread:
            best, best_splits = st, k
    return best


def _splits(state: Mapping[int, Tuple[int, ...]], ranks: Mapping[int, _Rank]) -> int:
    """How many pairs of threads with consecutive ids (tid and tid + 1) ``state`` puts
    in two different groups, over the ranks."""
    out = 0
    for r, cut in state.items():
        threads, at = ranks[r].threads, 0
        for size in cut[:-1]:
            at += size
            if 0 < at < len(threads):
                a, b = threads[at - 1], threads[at]
                out += isinstance(a, int) and isinstance(b, int) and b == a + 1
    return out


def _matched_ops(
    state: Mapping[int, Tuple[int, ...]],
    ranks: Mapping[int, _Rank],
    hosts: Mapping[int, Optional[str]],
    merged: Sequence[int],
) -> Tuple[List[Any], int]:
    """(each matched op, how many ops are left unmatched in a group with another merged
    member) when every rank's threads are cut as in ``state``; a group with no other
    merged member can match nothing, so its ops count as neither."""
    seqs = {r: rk.seqs(state[r]) for r, rk in ranks.items()}
    table = {g.name: g.ranks for rk in ranks.values() for g in rk.groups}
    matched: List[Any] = []
    left = 0
    for name, granks in table.items():
        members = [q for q in (merged if granks is None else granks) if q in merged]
        mine = {q: seqs[q][name] for q in members if name in seqs.get(q, {})}
        found, _ = match_group(members, mine, hosts)
        matched += found
        if len(members) > 1:
            left += sum(len(v) for v in mine.values()) - sum(len(i) for i in found)
    return matched, left


def _release_spread(instances: Sequence[Mapping[int, Any]], hosts: Mapping[int, Optional[str]]) -> int:
    """How unlike each other the instances' release delays are, ns: per op (name and
    shapes), the summed distance of each instance's delay from their median.

    Why: the release delay (first member to leave minus last member to arrive, on one
    clock) of a real instance is the op's communication time, about the same for every
    instance of one op. Reading one group's instances as two smaller groups' leaves the
    early group's members blocked on until the other group arrived (delay = comm + the
    gap); reading two groups' instances as one shortens it by the gap (or makes it
    negative, which the matching already rejects). Either wrong reading spreads the
    delays by the gaps between the groups' arrivals; the right one does not."""
    by_op: Dict[Tuple[str, Any], List[int]] = {}
    for inst in instances:
        ev = next(iter(inst.values())).event
        if not is_symmetric(ev.name):
            continue
        by_host: Dict[str, List[Any]] = {}
        for r, e in inst.items():
            by_host.setdefault(hosts.get(r) or f"rank {r}", []).append(e)
        for es in by_host.values():
            if len(es) > 1:
                d = min(e.end_ns for e in es) - max(e.start_ns for e in es)
                by_op.setdefault((ev.name, ev.signature), []).append(d)
    total = 0
    for ds in by_op.values():
        ds.sort()
        mid = ds[len(ds) // 2]
        total += sum(abs(d - mid) for d in ds)
    return total


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
