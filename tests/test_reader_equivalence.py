"""The batched (msgspec) reader writes the same bytes as the exact (ijson) reader.

Issue 14: a faster reader may join only if every input merges to the same bytes as
today. This is the harness: each input is merged three times in-process (``jobs=1``):
normally (the C rewrite kernel, where it is built), with the kernel off
(``TRACEFUSE_KERNEL=0``: msgspec batches and the Python rules), and with the batched
reader refusing every rank (it raises ``Handover``, so the exact ijson reader reads
it); the three outputs must be equal byte for byte.
Inputs: every real trace of the shared fixtures (each alone, and the ddp4 job), every
recorded job of ``tests/data/recorded``, and generated runs in two key orders carrying
the exact numbers a trace can hold (uint64 ``Comms Id``, integers beyond 64 bits, long
decimals, epoch-microsecond timestamps, a negative zero and exponents).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from conftest import decompress_bytes, recorded, shared_fixtures_dir  # noqa: E402

RECORDED = sorted(p.name for p in (HERE / "data" / "recorded").iterdir() if p.is_dir())

# Exact numbers next to ordinary Kineto events; the epoch-us ts needs 16+ digits.
EXACT_EVENTS: List[str] = [
    '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 77, "tid": 77, "ts": 1764000000123456.789,'
    ' "dur": 12.3456789012345678901, "args": {"External id": 5, "Comms Id": 18446744073709551615,'
    ' "big": 340282366920938463463374607431768211456, "neg": -0.0, "exp": 1e5, "tiny": 0.0000001,'
    ' "Input Dims": [[512, 1], []]}}',
    '{"ph": "X", "cat": "kernel", "name": "k\\u00e9rnel \\/ <&>", "pid": 0, "tid": 7, "ts": 1764000000123460,'
    ' "dur": 1E-3, "args": {"correlation": 9, "External id": 5, "device": 0}}',
    '{"ph": "f", "id": 9, "pid": 0, "tid": 7, "ts": 1764000000123460.000, "cat": "ac2g", "name": "ac2g", "bp": "e"}',
    '{"name": "odd order", "ph": "i", "s": "t", "pid": 77, "tid": 77, "ts": 1764000000123461.5}',
]


def _exact_run(folder: Path, key_first: bool) -> Path:
    """Two ranks of hand-written events with exact numbers, keys in either order."""
    folder.mkdir()
    for rank in range(2):
        events = ",\n".join(EXACT_EVENTS)
        info = f'"distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": 2}}'
        base = f'"baseTimeNanoseconds": {1764000000000000000 + rank * 1357}'
        head = f"{info}, {base}, " if key_first else ""
        tail = "" if key_first else f", {info}, {base}"
        text = f'{{{head}"traceEvents": [\n{events}\n]{tail}}}'
        json.loads(text)  # the fixture itself is valid JSON
        (folder / f"host.{rank}.pt.trace.json").write_text(text)
    return folder


def _merged(tmp: Path, inputs: List[str], kwargs: Dict[str, Any], tag: str) -> bytes:
    from tracefuse_stream import merge

    out = tmp / f"{tag}.json"
    old = os.environ.pop("TRACEFUSE_VERIFY", None)
    try:
        merge(inputs, str(out), force=True, jobs=1, **kwargs)
    finally:
        if old is not None:
            os.environ["TRACEFUSE_VERIFY"] = old
    return decompress_bytes(out.read_bytes())


def _both(tmp: Path, monkeypatch: pytest.MonkeyPatch, inputs: List[str], kwargs: Dict[str, Any]) -> None:
    import tracefuse_stream.pipeline.stream as stream
    from tracefuse_stream import native
    from tracefuse_stream.read.readers import Handover

    monkeypatch.setenv("TRACEFUSE_KERNEL", "0")
    python = _merged(tmp, inputs, kwargs, "python")  # msgspec batches, the Python rules
    monkeypatch.delenv("TRACEFUSE_KERNEL")
    calls: List[str] = []

    def refuse(path: str, *_a: Any, **_k: Any) -> Any:
        calls.append(path)
        raise Handover("refused by the test")

    batched = stream.BatchedReader
    monkeypatch.setattr(stream, "BatchedReader", refuse)
    exact = _merged(tmp, inputs, kwargs, "exact")
    assert calls, "the batched reader was never asked: the comparison compared nothing"
    assert python == exact
    monkeypatch.setattr(stream, "BatchedReader", batched)
    if native.kernel is None:  # without it, "normal" would be the Python path again
        if os.environ.get("CI"):
            pytest.fail("CI is set but the C kernel did not build (tracefuse_stream/_kernel.c)")
        pytest.skip("the C kernel is not built here: batched = exact reader checked, kernel = Python not")
    normal = _merged(tmp, inputs, kwargs, "normal")  # the C kernel
    assert normal == python


def _need_shared() -> Path:
    shared = shared_fixtures_dir()
    if not shared.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but the shared fixtures are missing: {shared}")
        pytest.skip(f"needs the shared real traces in {shared}")
    return shared


@pytest.mark.parametrize(
    "name",
    [
        "a100_nccl_rank0",
        "a100_no_distinfo_epoch_ts",
        "h100_bert_small",
        "mi250_minitoy",
        "mi300_resnet_rank0",
    ],
)
def test_real_single(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _need_shared() / "real" / f"{name}.json.gz"
    assert path.is_file(), f"{path} is missing from the shared fixtures"
    _both(tmp_path, monkeypatch, [str(path)], {"include_pyfunc": True})


def test_real_ddp4(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _both(tmp_path, monkeypatch, [str(_need_shared() / "ddp4_transformer_tb")], {"include_pyfunc": True})


@pytest.mark.parametrize("name", RECORDED)
def test_recorded(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kwargs: Dict[str, Any] = {"include_pyfunc": True}
    if name == "ddp2_cycles":
        kwargs["cycle"] = "latest"  # two profiling cycles: one output is one cycle
    _both(tmp_path, monkeypatch, [str(recorded(name))], kwargs)


@pytest.mark.parametrize("key_first", [True, False], ids=["keys-first", "keys-after"])
def test_exact_numbers(key_first: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _exact_run(tmp_path / "run", key_first)
    _both(tmp_path, monkeypatch, [str(run)], {"include_pyfunc": True})


@pytest.mark.parametrize("key_order", ["base_first", "base_after"])
def test_generated(key_order: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tracefuse_synth.generator import main as generate

    run = tmp_path / "gen"
    assert generate([str(run), "--ranks", "2", "--steps", "2", "--key-order", key_order, "-q"]) in (0, None)
    _both(tmp_path, monkeypatch, [str(run)], {"include_pyfunc": True})
