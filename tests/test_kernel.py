"""The C rewrite kernel writes exactly the bytes of the pure-Python path, or hands back.

Each case merges the same input twice in-process (``jobs=1``): with the kernel, and with
``TRACEFUSE_KERNEL=0`` (msgspec batches through ``RankRewriter.feed_batch``), and the
outputs must be equal byte for byte — or both merges must fail with the same error.
The cases aim at every rule of ``_kernel.c``: each hand-back (metadata, new pids, odd
tids and ids, escapes, exponents, ``-0``, tiny decimals, duplicate keys, a ``rank`` arg,
flows without ids), each rewrite (pid, ts shifts of every Decimal exponent, flow and
link ids, args trimming, added args), events cut at every buffer boundary, broken files,
and random events from hypothesis. ``test_kernel_ran`` makes sure the kernel really
wrote the events (a comparison of the Python path with itself proves nothing).

The kernel is optional (built where a compiler is available); outside CI the tests
skip without it, and in CI its absence is a failure.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracefuse_stream.read.batches as batches_mod
import tracefuse_stream.rewrite.kernel as kernel_mod
from tracefuse_stream import merge, native
from tracefuse_stream.errors import TraceFuseError


def _need_kernel() -> None:
    if native.kernel is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but the C rewrite kernel did not build (tracefuse_stream/_kernel.c)")
        pytest.skip("the optional C rewrite kernel is not built here (no compiler at install time)")


pytestmark = pytest.mark.usefixtures("kernel_built")


@pytest.fixture
def kernel_built() -> None:
    _need_kernel()


class _Counter:
    """Counts the events the kernel wrote (wraps KernelRewriter.__call__)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events = 0
        call = kernel_mod.KernelRewriter.__call__
        counter = self

        def counted(self: Any, *args: Any) -> Any:
            before = self.rw.events_out
            out = call(self, *args)
            counter.events += self.rw.events_out - before
            return out

        monkeypatch.setattr(kernel_mod.KernelRewriter, "__call__", counted)


def _merge(inputs: List[str], out: Path, kwargs: Dict[str, Any]) -> Tuple[Optional[bytes], Optional[str]]:
    old = os.environ.pop("TRACEFUSE_VERIFY", None)
    try:
        merge(inputs, str(out), force=True, jobs=1, **kwargs)
    except TraceFuseError as e:
        return None, f"{type(e).__name__}: {e}"
    finally:
        if old is not None:
            os.environ["TRACEFUSE_VERIFY"] = old
    return out.read_bytes(), None


def both_paths(
    tmp: Path, monkeypatch: pytest.MonkeyPatch, inputs: List[str], **kwargs: Any
) -> Tuple[Optional[bytes], int]:
    """Merge with and without the kernel; assert the same bytes (or the same error).
    Returns the output and how many events the kernel wrote."""
    counter = _Counter(monkeypatch)
    with_kernel, err_k = _merge(inputs, tmp / "kernel.json", kwargs)
    monkeypatch.setenv("TRACEFUSE_KERNEL", "0")
    python, err_p = _merge(inputs, tmp / "python.json", kwargs)
    monkeypatch.delenv("TRACEFUSE_KERNEL")
    assert err_k == err_p
    assert with_kernel == python
    return with_kernel, counter.events


def _rank_file(folder: Path, rank: int, events: List[str], base_ns: int, layout: str = "object") -> Path:
    body = ",\n  ".join(events)
    if layout == "array":
        text = f"[\n  {body}\n]"
    else:
        info = f'"distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": 3}}'
        text = f'{{{info}, "baseTimeNanoseconds": {base_ns}, "traceEvents": [\n  {body}\n], "traceName": "r{rank}"}}'
    path = folder / f"host.{rank}.pt.trace.json"
    path.write_text(text, encoding="utf-8")
    return path


def _run(
    tmp: Path, events: List[str], offsets: Tuple[int, ...] = (0, 1357, 1500), layout: str = "object"
) -> Path:
    """One rank per base-time offset (ns): the shifts exercise every Decimal exponent."""
    run = tmp / "run"
    run.mkdir()
    for rank, off in enumerate(offsets):
        _rank_file(run, rank, events, 1_700_000_000_000_000_000 + off, layout)
    return run


KINETO = [
    '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 77, "tid": 77,\n'
    '    "ts": 3057737580330.908, "dur": 18.153,\n    "args": {\n'
    '      "External id": 6,"Record function id": 6, "Input Dims": [[8, 512], [8, 512], []], "Ev Idx": 13\n    }\n  }',
    '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 77, "tid": 77,\n'
    '    "ts": 3057737580335.930, "dur": 8.506, "args": {"External id": 6, "cbid": 211, "correlation": 3}}',
    '{"ph": "s", "id": 3, "pid": 77, "tid": 77, "ts": 3057737580335.930, "cat": "ac2g", "name": "ac2g"}',
    '{"ph": "X", "cat": "kernel", "name": "void k<4>(float*)", "pid": 0, "tid": 7,\n'
    '    "ts": 3057737580342.765, "dur": 4.526, "args": {"External id": 6, "device": 0, "stream": 7,'
    ' "correlation": 3, "grid": [1, 1, 1], "bytes": 32768, "memory bandwidth (GB/s)": 7.239946973044631}}',
    '{"ph": "f", "id": 3, "pid": 0, "tid": 7, "ts": 3057737580342.765, "cat": "ac2g", "name": "ac2g", "bp": "e"}',
    '{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 77, "tid": 77,'
    ' "ts": 3057737580343.001, "args": {"Total Reserved": 2097152, "Bytes": -512, "Addr": 94811}}',
    '{"ph": "X", "cat": "python_function", "name": "<built-in method mm>", "pid": 77, "tid": 77,'
    ' "ts": 3057737580330.000, "dur": 20.5, "args": {"Python id": 12, "Python parent id": 11}}',
    '{"name": "process_name", "ph": "M", "ts": 3057737580330.908, "pid": 77, "tid": 0,'
    ' "args": {"name": "python3"}}',
    '{"name": "thread_name", "ph": "M", "ts": 3057737580330.908, "pid": 0, "tid": 7,'
    ' "args": {"name": "stream 7"}}',
]

#: events the kernel must hand back (or, for some, may write): one rule each
ODD = [
    '{"ph": "X", "cat": "cpu_op", "name": "caf\\u00e9 \\/ \\"q\\" \\\\ \\n\\t", "pid": 77, "tid": 77, "ts": 1.5, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "naïve", "pid": 77, "tid": 77, "ts": 2.000, "dur": 1e5}',
    '{"ph": "X", "cat": "cpu_op", "name": "exp", "pid": 77, "tid": 77, "ts": 1E3, "dur": 0.0000001}',
    '{"ph": "X", "cat": "cpu_op", "name": "zeros", "pid": 77, "tid": -0, "ts": -0, "dur": -0.0}',
    '{"ph": "X", "cat": "cpu_op", "name": "dur -0", "pid": 77, "tid": 77, "ts": 2, "dur": -0}',
    '{"ph": "X", "cat": "cpu_op", "name": "dur 1e-7", "pid": 77, "tid": 77, "ts": 2, "dur": 0.0000001}',
    '{"ph": "X", "cat": "cpu_op", "name": "dur exponent", "pid": 77, "tid": 77, "ts": 2, "dur": 1.5E1}',
    '{"ph": "X", "cat": "my\\tcat", "name": "escaped cat", "pid": 77, "tid": 77, "ts": 2, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "neg", "pid": 77, "tid": -5, "ts": -12.250, "dur": 0.000000}',
    '{"ph": "X", "cat": "cpu_op", "name": "dup", "pid": 77, "tid": 77, "ts": 3, "ts": 4, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "dup args", "pid": 77, "tid": 77, "ts": 3, "args": {"a": 1, "a": 2}}',
    '{"ph": "X", "cat": "cpu_op", "name": "nested", "pid": 77, "tid": 77, "ts": 3, "args": {"o": {"k": 1, "k": 2}}}',
    '{"ph": "X", "cat": "cpu_op", "name": "rank arg", "pid": 77, "tid": 77, "ts": 3, "args": {"rank": 99}}',
    '{"ph": "X", "cat": "cpu_op", "name": "null args", "pid": 77, "tid": 77, "ts": null, "args": null}',
    '{"ph": "X", "cat": "cpu_op", "name": "no args", "pid": 77, "tid": 77, "ts": 5.123456789}',
    '{"ph": "X", "cat": "cpu_op", "name": "no tid", "pid": 77, "ts": 5}',
    '{"ph": "X", "cat": "cpu_op", "name": "no pid", "tid": 1, "ts": 5}',
    '{"ph": "X", "cat": "cpu_op", "name": "str pid", "pid": "77", "tid": 1, "ts": 5}',
    '{"ph": "X", "cat": "cpu_op", "name": "new pid", "pid": 4242, "tid": 4294967295, "ts": 5}',
    '{"ph": "X", "cat": "cpu_op", "name": "big tid", "pid": 77, "tid": 4294967296, "ts": 5}',
    '{"ph": "X", "cat": "gpu_memcpy", "name": "m", "pid": 0, "tid": 7, "ts": 7, "dur": 1,'
    ' "args": {"correlation": null, "External id": 4294967295, "wait_on_cuda_event_record_corr_id": -1,'
    ' "external id": 5, "Python id": null, "big": 340282366920938463463374607431768211456, "b": true,'
    ' "l": [], "e": {}, "s": "x"}}',
    '{"ph": "X", "cat": "cpu_op", "name": "bad link", "pid": 77, "tid": 77, "ts": 5, "args": {"correlation": "0x1f"}}',
    '{"ph": "t", "id": 4, "bind_id": 9, "pid": 77, "tid": 77, "ts": 5, "cat": "fwdbwd", "name": "fwdbwd"}',
    '{"ph": "i", "s": "g", "pid": 77, "tid": 77, "ts": 123456789012345678.123, "name": "huge ts"}',
    '{"ph": "X", "cat": ["a"], "name": "list cat", "pid": 77, "tid": 77, "ts": 5}',
    '{"ph": 5, "name": "numeric ph", "pid": 77, "tid": 77, "ts": 5}',
    '{"name": "ph late", "pid": 77, "tid": 77, "ts": 5, "extra": {"deep": [[{"x": [1, 2.50, "s"]}]]}, "ph": "X"}',
    "{ }",
]

NULL_ARGS = next(e for e in ODD if '"null args"' in e)


def test_kernel_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, written = both_paths(tmp_path, monkeypatch, [str(_run(tmp_path, KINETO * 50))], include_pyfunc=True)
    assert out is not None
    # 3 ranks x 50 copies x 7 non-metadata events, less the first few of each rank
    # that register new pids in Python
    assert written >= 3 * 50 * 7 - 3 * 4


@pytest.mark.parametrize("args", ["all", "slim", "none"])
@pytest.mark.parametrize("pyfunc", [True, False], ids=["pyfunc", "no-pyfunc"])
def test_kineto_events(args: str, pyfunc: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    both_paths(tmp_path, monkeypatch, [str(_run(tmp_path, KINETO * 3))], include_pyfunc=pyfunc, args=args)


@pytest.mark.parametrize("odd", range(len(ODD)))
def test_each_rule(odd: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every odd event between ordinary ones: the same bytes (or error) both ways,
    with a strict merge and with the odd event's rank-1 copy shifted."""
    events = KINETO[:6] + [ODD[odd]] + KINETO[:6]
    both_paths(tmp_path, monkeypatch, [str(_run(tmp_path, events))], include_pyfunc=True)


@pytest.mark.parametrize("offsets", [(0, 10), (0, 2000), (0, -3_000_001), (5, 0)])
def test_shifts(offsets: Tuple[int, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = KINETO + [
        '{"ph": "X", "cat": "c", "name": "int ts", "pid": 77, "tid": 77, "ts": 12, "dur": 3}',
        '{"ph": "X", "cat": "c", "name": "1 decimal", "pid": 77, "tid": 77, "ts": 12.5}',
        '{"ph": "X", "cat": "c", "name": "9 decimals", "pid": 77, "tid": 77, "ts": 0.000001234}',
        '{"ph": "X", "cat": "c", "name": "epoch", "pid": 77, "tid": 77, "ts": 1764000000123456.789}',
        '{"ph": "X", "cat": "c", "name": "small", "pid": 77, "tid": 77, "ts": 0.001}',
    ]
    both_paths(tmp_path, monkeypatch, [str(_run(tmp_path, events, offsets))], include_pyfunc=True)


@pytest.mark.parametrize("chunk", [1, 7, 64, 333])
def test_every_cut(chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Events cut at every buffer position: the kernel waits for the rest."""
    monkeypatch.setattr(batches_mod, "CHUNK_BYTES", chunk)
    both_paths(tmp_path, monkeypatch, [str(_run(tmp_path, KINETO + ODD[:3] + KINETO))], include_pyfunc=True)


@pytest.mark.parametrize(
    "text",
    [
        '{"traceEvents": [EV, EV]}',
        '{"traceEvents": [EV EV]}',
        '{"traceEvents": [EV,, EV]}',
        '{"traceEvents": [EV, EV,]}',
        '{"traceEvents": [EV, EV',
        '{"traceEvents": [EV, {"ph": "X", "pid": 77, "tid": 77, "ts": 1',
        '{"traceEvents": []}',
        '{"traceEvents": [ ]  , "after": {"x": [1, 2]}}',
        "[EV, EV]",
        "[EV, EV",
        "[EV, EV,",
        "[EV, 5]",
        '{"traceEvents": [EV, {"ph": "X", "name": "bad \\x", "pid": 77, "tid": 77, "ts": 1}]}',
    ],
)
def test_broken_and_odd_files(text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "one.json"
    path.write_text(text.replace("EV", KINETO[1]), encoding="utf-8")
    both_paths(tmp_path, monkeypatch, [str(path)])


def test_array_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    both_paths(
        tmp_path, monkeypatch, [str(_run(tmp_path, KINETO + ODD, layout="array"))], include_pyfunc=True
    )


# -- random events --------------------------------------------------------------------
_numbers = st.sampled_from(
    [
        "0",
        "-0",
        "7",
        "-7",
        "4294967295",
        "4294967296",
        "18446744073709551616",
        "1.5",
        "1.500",
        "-0.0",
        "0.000001",
        "0.0000001",
        "0.0000000",
        "1e5",
        "2E-3",
        "123456789012.345",
        "1764000000123456.789",
    ]
)
_strings = st.sampled_from(
    ['"a"', '""', '"\\u00e9"', '"é"', '"\\/"', '"\\"\\\\\\b\\f\\n\\r\\t"', '"x y"', '"rank"', '"kernel"']
)
_scalars = st.one_of(_numbers, _strings, st.sampled_from(["true", "false", "null"]))
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.lists(st.tuples(st.sampled_from(['"k"', '"j"', '"rank"']), inner), max_size=3).map(
            lambda kv: "{" + ", ".join(f"{k}: {v}" for k, v in kv) + "}"
        ),
    ),
    max_leaves=6,
)
_keys = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bind_id", "args", "s", "bp", "other"]
_arg_keys = [
    "External id",
    "correlation",
    "external id",
    "Python id",
    "wait_on_cuda_event_id",
    "Input Dims",
    "rank",
    "grid",
    "x",
]


def _member(key: str) -> st.SearchStrategy[str]:
    if key == "ph":
        v = st.sampled_from(['"X"', '"i"', '"s"', '"f"', '"t"', '"M"', '"C"', "5"])
    elif key == "cat":
        v = st.sampled_from(['"cpu_op"', '"kernel"', '"python_function"', '"ac2g"', "null", '["a"]'])
    elif key in ("pid", "tid", "id", "bind_id"):
        v = st.one_of(
            st.sampled_from(["77", "0", "7", "-1", "4294967296", '"77"', '"0x1f"', "true"]), _numbers
        )
    elif key == "ts":
        v = st.one_of(_numbers, st.sampled_from(["null", '"5"']))
    elif key == "args":
        v = st.one_of(
            st.sampled_from(["null", "[]", "5"]),
            st.lists(st.tuples(st.sampled_from(_arg_keys), _values), max_size=4).map(
                lambda kv: "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in kv) + "}"
            ),
        )
    else:
        v = _values
    return v.map(lambda text: f'"{key}": {text}')


@st.composite
def _events(draw: Any) -> str:
    keys = draw(st.lists(st.sampled_from(_keys), min_size=1, max_size=8))
    members = [draw(_member(k)) for k in keys]
    ws = draw(st.sampled_from([", ", ",", ",\n    "]))
    return "{" + ws.join(members) + "}"


# random here, derandomized under CI (the conftest's "ci" profile)
@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(events=st.lists(_events(), min_size=1, max_size=6))
def test_random_events(
    events: List[str], tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp = tmp_path_factory.mktemp("k")
    # ordinary events first, so the pids are known and the kernel runs on the odd ones
    both_paths(tmp, monkeypatch, [str(_run(tmp, KINETO[:6] + events, (0, 1500)))], include_pyfunc=True)


@pytest.mark.parametrize("window_ms", [(0.002, 0.009), (0, 0.0001), (0.0051, 1000)])
def test_window(window_ms: Tuple[float, float], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--window drops on the unshifted ts (and dur for X events), as RankRewriter does."""
    events = [
        f'{{"ph": "X", "cat": "cpu_op", "name": "op{i}", "pid": 77, "tid": 77, "ts": {3057737580330.5 + i:.3f},'
        f' "dur": {i % 4}.250, "args": {{"External id": {i}}}}}'
        for i in range(12)
    ] + ['{"ph": "i", "s": "t", "name": "no time", "pid": 77, "tid": 77}', KINETO[2], KINETO[4], NULL_ARGS]
    _, written = both_paths(tmp_path, monkeypatch, [str(_run(tmp_path, events))], window_ms=window_ms)
    assert written > 0 or window_ms == (0, 0.0001)


def test_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import recorded

    _, written = both_paths(tmp_path, monkeypatch, [str(recorded("ddp4"))], steps=(2, 3), include_pyfunc=True)
    assert written > 100


# -- the side passes' scan (read/scan.py) ------------------------------------------------
def _side_passes(inputs: List[str]) -> Any:
    """What info, --steps and --align collectives learn from the inputs."""
    from tracefuse_stream.align.ends import collect_collective_ends
    from tracefuse_stream.report.info import collect_info
    from tracefuse_stream.select.window import list_steps

    plans, rows, listing, _ = collect_info(inputs)
    steps = {p.path: list_steps(p.path, strict=False) for p in plans}
    ends = {p.path: vars(collect_collective_ends(p.path, p.base_time_ns)) for p in plans}
    return listing, steps, ends


def _scan_inputs(tmp: Path) -> List[List[str]]:
    from conftest import recorded, shared_fixtures_dir

    step = (
        '{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#N", "pid": 77, "tid": 77, '
        '"ts": 3057737580330.TS, "dur": 100.5, "args": {}}'
    )
    steps = [step.replace("N", str(i % 3)).replace("TS", f"{i:03d}") for i in range(6)]
    nccl = (
        '{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", '
        '"pid": 0, "tid": 7, "ts": 3057737580400.123, "dur": 55.000, "args": {"correlation": 9, "stream": 7}}'
    )
    events = KINETO + ODD + steps + [nccl, nccl.replace("400.123", "500.124")] + ['{"ph": "M", "ts": -1}']
    sets = [[str(_run(tmp, events))], [str(recorded("ddp4"))], [str(recorded("ddp8_straggler"))]]
    real = shared_fixtures_dir() / "real"
    if real.is_dir():
        sets += [[str(p)] for p in sorted(real.glob("*.json.gz"))]
    return sets


def test_side_passes_same_with_and_without_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scanned = 0
    real_scan = native.kernel.scan  # type: ignore[union-attr]

    def counting_scan(*args: Any) -> Any:
        nonlocal scanned
        out = real_scan(*args)
        scanned += out[5]
        return out

    monkeypatch.setattr(native.kernel, "scan", counting_scan)
    for inputs in _scan_inputs(tmp_path):
        with_kernel = _side_passes(inputs)
        monkeypatch.setenv("TRACEFUSE_KERNEL", "0")
        python = _side_passes(inputs)
        monkeypatch.delenv("TRACEFUSE_KERNEL")
        assert with_kernel == python, inputs
    assert scanned > 10_000  # the kernel judged most events itself


@pytest.mark.parametrize("chunk", [3, 50])
def test_scan_every_cut(chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batches_mod, "CHUNK_BYTES", chunk)
    inputs = _scan_inputs(tmp_path)[0]
    with_kernel = _side_passes(inputs)
    monkeypatch.setenv("TRACEFUSE_KERNEL", "0")
    assert _side_passes(inputs) == with_kernel


def test_skim_finds_what_the_validating_scan_finds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--align on a strict merge skims (validate=False): same ends as the validating
    scan and as the Python path, on valid inputs with braces, quotes and escapes in
    names and args, NCCL kernels named or described by args, and every buffer cut."""
    from tracefuse_stream.align.ends import collect_collective_ends

    tricky = [
        '{"ph": "X", "cat": "kernel", "name": "k{\\"}[\\\\", "pid": 0, "tid": 7, "ts": 5.000, "dur": 1,'
        ' "args": {"Collective name": "allreduce", "x": "}]{"}}',
        '{"ph": "X", "cat": "kern\\u0065l", "name": "ncclDevKernel_x", "pid": 0, "tid": 7, "ts": 6.5, "dur": 2}',
        '{"ph": "X", "cat": "kernel", "name": ["ncclKernel"], "pid": 0, "tid": 7, "ts": 7, "dur": 2}',
        '{"ph": "X", "cat": "kernel", "n\\u0061me": "ncclKernel", "pid": 0, "tid": 7, "ts": 8, "dur": 2}',
        '{"cat": "kernel", "ph": "X", "args": {"nested": {"cat": "cpu_op"}}, "name": "rcclKernel", "pid": 0,'
        ' "tid": 7, "ts": 9, "dur": 3}',
    ]
    (tmp_path / "t").mkdir()
    small = sorted(_run(tmp_path / "t", tricky * 3 + KINETO).glob("*.json"))
    inputs = [Path(p) for ps in _scan_inputs(tmp_path) for p in ps]
    files = [f for p in inputs for f in (sorted(p.glob("*.json*")) if p.is_dir() else [p])] + small
    assert len(files) >= 15
    for chunk in (None, 5):
        if chunk is not None:
            monkeypatch.setattr(batches_mod, "CHUNK_BYTES", chunk)
            files = small  # 5-byte reads: every event cut everywhere
        for path in files:
            skim = vars(collect_collective_ends(path, 0, validate=False))
            assert skim == vars(collect_collective_ends(path, 0)), path
            monkeypatch.setenv("TRACEFUSE_KERNEL", "0")
            assert skim == vars(collect_collective_ends(path, 0)), path
            monkeypatch.delenv("TRACEFUSE_KERNEL")


_json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.text(max_size=12),
        # long strings of JSON's own bytes, no escapes: strings across the 64-byte blocks
        st.text(alphabet='{}[],: "kernlcC#', max_size=150).map(lambda t: t.replace('"', "")),
        st.sampled_from(["nccl", "kernel", '"X"']),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
_skim_keys = st.sampled_from(["ph", "cat", "name", "args", "ts", "x", "Collective name"])


@settings(max_examples=150, deadline=None)
@given(
    events=st.lists(
        st.dictionaries(
            _skim_keys,
            st.one_of(
                st.sampled_from(["X", "kernel", "ProfilerStep#3", "ncclKernel_x", "cpu_op"]), _json_values
            ),
            max_size=6,
        ),
        min_size=1,
        max_size=8,
    ),
    ascii_only=st.booleans(),
)
def test_skim_selects_a_superset(events: List[Dict[str, Any]], ascii_only: bool) -> None:
    """On any valid events (strings with braces, quotes, escapes, non-ASCII), the skim
    and the validating scan both hand over every event a pass wants (the selection's
    meaning on the decoded event), and count the rest."""
    from tracefuse_stream.read.scan import ScanSelection, _Args

    text = ("[" + ", ".join(json.dumps(e, ensure_ascii=ascii_only) for e in events) + "]").encode()
    selections = [
        ScanSelection(cat="kernel", name_contains=("nccl", "rccl"), text_contains='"Collective name"'),
        ScanSelection(ph="X", name_prefix="ProfilerStep#"),
        ScanSelection(cat="kernel"),
        ScanSelection(ph="X", text_contains='"ts"'),  # a quoted needle: looked for at string starts
        ScanSelection(cat="kernel", text_contains='": "X'),  # not one: searched for
    ]

    def wanted(e: Dict[str, Any], sel: ScanSelection) -> bool:
        name = e.get("name")
        if (sel.ph and e.get("ph") != sel.ph) or (sel.cat and e.get("cat") != sel.cat):
            return False
        if sel.name_prefix and not (isinstance(name, str) and name.startswith(sel.name_prefix)):
            return False
        if not sel.name_contains and not sel.text_contains:
            return True
        named = isinstance(name, str) and any(n in name for n in sel.name_contains)
        return named or (sel.text_contains or "\0") in json.dumps(e, ensure_ascii=False)

    def scan_all(args: Any) -> Tuple[List[Any], int]:
        """The scan over the whole array; an event handed back counts as chosen."""
        chosen: List[Any] = []
        judged, pos, need_sep, at_start = 0, 1, False, True
        while True:
            out, pos, status, skip_to, need_sep, n, _, _ = native.kernel.scan(  # type: ignore[union-attr]
                args, text, pos, need_sep, at_start
            )
            chosen += json.loads(b"[" + out + b"]")
            judged += n
            at_start = False
            if status == 1:
                assert pos == len(text) - 1
                return chosen, judged
            assert status == 2 and skip_to > pos
            chosen.append(json.loads(text[pos:skip_to]))
            pos, need_sep = skip_to, True

    for sel in selections:
        for validate in (True, False):
            chosen, judged = scan_all(_Args(ScanSelection(**{**vars(sel), "validate": validate})))
            assert len(chosen) + judged == len(events)
            assert all(e in chosen for e in events if wanted(e, sel)), (sel, validate)


def test_strict_merge_with_align_still_reports_invalid_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The skim does not validate: a strict merge does, right after it, and fails with the
    same error naming the file as without --align; --salvage uses the validating scan."""
    broken = (
        KINETO
        + ['{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_x", "pid": 0, "tid": 7, "ts": 9, "dur": nul}']
        + KINETO
    )
    run = str(_run(tmp_path, broken))
    _, plain = _merge([run], tmp_path / "plain.json", {})
    _, aligned = _merge([run], tmp_path / "aligned.json", {"align": "collectives"})
    assert plain and plain == aligned and "host.0.pt.trace.json" in plain
    assert not (tmp_path / "aligned.json").exists()
    both_paths(tmp_path, monkeypatch, [run], align="collectives", salvage=True)
