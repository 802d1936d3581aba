"""align/p2p.py on hand-built scans: the peer of a send/recv read from its c10d op, the
group rank mapped to a global one, and every case where nothing is linked (with why).
The recorded pipelines are in tests/test_p2p_recorded.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Tuple

from tracefuse_stream.align.collective_event import CollectiveEvent
from tracefuse_stream.align.p2p import NO_PEER, P2pCall, match_pairs, p2p_call

MS = 1_000_000
WORLD = ("0", (0, 1, 2, 3))
EVEN = ("1", (0, 2))  # a sub-group: its group rank 1 is global rank 2


def _scan(rank: int, ops: List[Tuple[str, int, int, Optional[int], int]]) -> Any:
    """One rank's gloo send/recv (op, start ms, dur ms, peer as a group rank, tag), each
    inside its c10d call, in one step spanning 0-1000 ms."""
    events, calls = [], []
    for k, (op, at, dur, peer, tag) in enumerate(ops):
        name = "gloo:send" if op == "send" else "gloo:recv"
        events.append(CollectiveEvent(k, "gloo", name, at * MS + 10, dur * MS, 1, (), None, None, None, True))
        calls.append(P2pCall(op, at * MS, at * MS + 20, peer, None if peer is None else tag))
    return SimpleNamespace(rank=rank, base_ns=0, events=events, p2p_calls=calls, steps={7: (0, 1000 * MS)})


def _match(scans: Dict[int, Any], cfg: Any = (WORLD,)) -> Any:
    return match_pairs(scans, {r: list(cfg) for r in scans}, {r: "h" for r in scans}, {})


def test_a_send_is_linked_to_the_recv_with_its_peer_and_tag_in_order() -> None:
    scans = {
        0: _scan(0, [("send", 10, 1, 1, 0), ("send", 20, 1, 1, 5), ("send", 30, 1, 1, 0)]),
        1: _scan(1, [("recv", 5, 6, 0, 0), ("recv", 18, 3, 0, 5), ("recv", 25, 6, 0, 0)]),
    }
    res = _match(scans)
    assert res.unlinked == {} and res.spans == {0: [], 1: []}
    got = [
        (p.src, p.dst, p.tag, p.group, p.send.start_ns // MS, p.recv.start_ns // MS, p.send.step)
        for p in res.pairs
    ]
    assert sorted(got) == [(0, 1, 0, "0", 10, 5, 7), (0, 1, 0, "0", 30, 25, 7), (0, 1, 5, "0", 20, 18, 7)]


def test_the_peer_is_a_group_rank_resolved_by_the_op_the_other_way() -> None:
    """Rank 0 sends to group rank 1: global 1 in the world, global 2 in [0, 2]. Only rank
    2 receives from rank 0 (its group rank 0 in [0, 2], and in the world): rank 2."""
    scans = {r: _scan(r, []) for r in range(4)}
    scans[0] = _scan(0, [("send", 10, 1, 1, 0)])
    scans[2] = _scan(2, [("recv", 5, 6, 0, 0)])
    cfg = {0: [WORLD, EVEN], 1: [WORLD], 2: [WORLD, EVEN], 3: [WORLD]}
    res = match_pairs(scans, cfg, {r: "h" for r in scans}, {})
    assert [(p.src, p.dst, p.group) for p in res.pairs] == [(0, 2, "1")] and res.unlinked == {}


def test_a_peer_two_groups_explain_is_not_guessed() -> None:
    """Rank 1 and rank 2 both receive from (their) rank 0: the send could be either's."""
    scans = {r: _scan(r, []) for r in range(4)}
    scans[0] = _scan(0, [("send", 10, 1, 1, 0)])
    scans[1] = _scan(1, [("recv", 5, 6, 0, 0)])
    scans[2] = _scan(2, [("recv", 5, 6, 0, 0)])
    cfg = {0: [WORLD, EVEN], 1: [WORLD], 2: [WORLD, EVEN], 3: [WORLD]}
    res = match_pairs(scans, cfg, {r: "h" for r in scans}, {})
    assert res.pairs == []
    assert res.unlinked == {
        "peer ambiguous (a group rank in several process groups)": 1,
        "send and recv counts differ in the step": 2,
    }
    assert res.spans[0] == [(10 * MS + 10, 11 * MS + 10)]  # its gloo op's own span: waiting, as before


def test_what_is_not_linked_says_why() -> None:
    scans = {
        0: _scan(
            0, [("send", 10, 1, 1, 0), ("send", 20, 1, 1, 0), ("send", 30, 1, None, 0), ("send", 40, 1, 3, 0)]
        ),
        1: _scan(1, [("recv", 5, 6, 0, 0), ("recv", 50, 1, 0, 1)]),
    }
    scans[1].events.append(
        CollectiveEvent(9, "gloo", "gloo:recvAnysource", 60 * MS, MS, 1, (), None, None, None, True)
    )
    scans[1].p2p_calls.pop()  # its recv with tag 1 has no c10d op around it
    res = _match(scans, [("0", (0, 1))])
    assert res.pairs == []
    assert res.unlinked == {
        "send and recv counts differ in the step": 3,  # two sends of (0, 1, tag 0), one recv
        NO_PEER: 1,
        "peer not in any of the rank's process groups": 1,  # group rank 3 of a group of 2
        "no c10d::send / c10d::recv_ op around it": 1,
        "recv from any source (no peer)": 1,
    }
    assert len(res.spans[0]) == 4 and len(res.spans[1]) == 3


def test_a_recv_that_ends_before_its_send_starts_is_refused_on_one_clock() -> None:
    scans = {0: _scan(0, [("send", 30, 1, 1, 0)]), 1: _scan(1, [("recv", 5, 6, 0, 0)])}
    res = _match(scans)
    assert res.pairs == [] and res.unlinked == {"recv ends before its send starts (order off)": 2}
    other_hosts = match_pairs(scans, {0: [WORLD], 1: [WORLD]}, {0: "a", 1: "b"}, {})
    assert len(other_hosts.pairs) == 1  # two clocks: the order cannot be judged by time


def test_the_c10d_op_carries_the_peer_only_with_shapes() -> None:
    ev = {"ph": "X", "cat": "cpu_op", "name": "c10d::send", "ts": 10.5, "dur": 2,
          "args": {"Concrete Inputs": ["", "", "3", "7"], "Input type": ["TensorList", "", "Scalar", "Scalar"]}}  # fmt: skip
    assert p2p_call(ev) == P2pCall("send", 10_500, 12_500, 3, 7)
    assert p2p_call(dict(ev, name="c10d::recv_", args={"External id": 1})) == P2pCall(
        "recv", 10_500, 12_500, None, None
    )
    assert p2p_call(dict(ev, args={"Concrete Inputs": ["", "", "x", "7"]})).peer is None  # type: ignore[union-attr]
    assert p2p_call(dict(ev, name="c10d::allreduce_")) is None
