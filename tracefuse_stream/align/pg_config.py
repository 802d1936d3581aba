"""What a rank's header says about its process groups (``distributedInfo``), and the
``Process Group Ranks`` arg of collective kernels: the participants of a collective,
as align/collectives.py and align/gloo_groups.py need them."""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Mapping, Optional, Tuple

PgConfig = List[Tuple[str, Optional[Tuple[int, ...]]]]  # (pg_name, ranks) in pg_config order


def ranks_arg(v: Any) -> Optional[Tuple[int, ...]]:
    """``Process Group Ranks`` as Kineto writes it (the string ``"[0, 1]"``). Every
    collective kernel of a group carries the same string: it is parsed once."""
    return _ranks_of_text(v) if type(v) is str else _parse_ranks(v)


@functools.lru_cache(maxsize=4096)  # bounded: a run has a few groups, a hostile file any number
def _ranks_of_text(v: str) -> Optional[Tuple[int, ...]]:
    return _parse_ranks(v)


def _parse_ranks(v: Any) -> Optional[Tuple[int, ...]]:
    if isinstance(v, list):
        items = v
    elif isinstance(v, str) and v.strip().startswith("["):
        items = [x.strip() for x in v.strip()[1:-1].split(",") if x.strip()]
    else:
        return None
    try:
        return tuple(sorted({int(x) for x in items}))
    except (TypeError, ValueError):
        return None


def pg_config_of(header: Mapping[str, Any]) -> PgConfig:
    """``distributedInfo.pg_config`` as (name, ranks) pairs, in the order written."""
    di = header.get("distributedInfo")
    cfg = di.get("pg_config") if isinstance(di, dict) else None
    out: PgConfig = []
    for pg in cfg if isinstance(cfg, list) else []:
        if isinstance(pg, dict) and pg.get("pg_name") is not None:
            out.append((str(pg["pg_name"]), _ranks_of_member_list(pg.get("ranks"))))
    return out


#: id of a ``pg_config`` member list -> (the list, its ranks): read/head.py keeps one copy
#: of equal long lists for the whole run, so every rank's header holds the same list; one
#: tuple of it, not one per rank (O(world) a rank, O(world^2) the run: 32 MB at 2,048 ranks)
_BY_LIST: Dict[int, Tuple[Any, Optional[Tuple[int, ...]]]] = {}


def _ranks_of_member_list(v: Any) -> Optional[Tuple[int, ...]]:
    if type(v) is not list:
        return ranks_arg(v)
    hit = _BY_LIST.get(id(v))
    if hit is not None and hit[0] is v:  # the list is held with it: its id is not reused
        return hit[1]
    out = _parse_ranks(v)
    if len(_BY_LIST) >= 4096:  # bounded: a run has a few groups
        _BY_LIST.clear()
    _BY_LIST[id(v)] = (v, out)
    return out


def pg_count_of(header: Mapping[str, Any]) -> Optional[int]:
    """``distributedInfo.pg_count`` (how many process groups the rank's process made)."""
    di = header.get("distributedInfo")
    v = di.get("pg_count") if isinstance(di, dict) else None
    return v if type(v) is int else None


__all__ = ["PgConfig", "pg_config_of", "pg_count_of", "ranks_arg"]
