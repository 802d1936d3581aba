"""A send/recv pair seen from one of its ranks, for the what-if's cut (analyze/graph.py
``extra_cut``).

Why apart: a stage's own work before a send or recv is compared with the other ranks'
before theirs, and which of theirs is the same moment of a pipeline's step is its own
question: the direction (activations one way, gradients back) and the occurrence (the
last stage's first backward send follows its forward and its backward). Reads only the
pairs (``Instance.sender`` and its entries), never the graph.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Tuple


def pair_roles(
    order: Mapping[int, List[int]], by_id: Mapping[int, Any], rank: int, own: Mapping[Tuple[int, int], int]
) -> Dict[Any, List[int]]:
    """The other ranks' gaps before their sends and recvs, by role (:func:`pair_role`) and
    by (role, k): before their k-th of that role in the step. A stage is compared with
    the others' same moment first: the last stage's first backward send follows its
    forward *and* backward, the other stages' later ones a backward alone."""
    out: Dict[Any, List[int]] = {}
    for q, ids in order.items():
        if q == rank:
            continue
        seen: Dict[Tuple[bool, bool], int] = {}
        for i in ids:
            if by_id[i].sender is None:
                continue
            role = pair_role(by_id[i], q)
            k = seen[role] = seen.get(role, -1) + 1
            out.setdefault(role, []).append(own[(q, i)])
            out.setdefault((role, k), []).append(own[(q, i)])
    return out


def pair_role(inst: Any, rank: int, flip: bool = False) -> Tuple[bool, bool]:
    """A send/recv pair seen from one of its ranks: (it sends, the data goes to the higher
    rank). A pipeline's stages hand activations one way and gradients back the other,
    and a stage's work before its forward send is not its work before a backward one:
    a slow stage's forward is compared with the other stages' forwards (``flip``: the
    other direction, where no other rank sent this way)."""
    ranks = sorted(inst.entries)
    up = inst.sender == ranks[0]
    return inst.sender == rank, up != flip


def alike(
    order: Mapping[int, List[int]], by_id: Mapping[int, Any], rank: int, inst: int, own: Mapping[Tuple[int, int], int],
    skip: Any,
) -> List[int]:  # fmt: skip
    """The other ranks' (not in ``skip``) own work before the same collective of another
    group of its size: their k-th instance of the step where ``inst`` is ``rank``'s k-th.
    Why: both ranks of a pair slowed alike (one slow node of a tensor-parallel pair) have
    no other member to be compared with there; the other pairs are the same moment."""
    k, n = order[rank].index(inst), len(by_id[inst].entries)
    out = []
    for q, ids in order.items():
        if (
            q not in skip
            and len(ids) > k
            and by_id[ids[k]].sender is None
            and len(by_id[ids[k]].entries) == n
        ):
            out.append(own[(q, ids[k])])
    return out


__all__ = ["alike", "pair_role", "pair_roles"]
