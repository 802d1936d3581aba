"""Issue 22, item 6: the public API a user imports, and ``info --json``'s one shape.

* ``MergeOptions``, every error type and ``VerifyFailed`` come from the top level;
  ``merge(inputs, output, options=None, **overrides)`` keeps its signature through the
  interrupt wrapper (for ``inspect`` and type checkers), and the old call forms
  (keywords only, options positionally, options plus overrides) give the same merge.
* ``info --json`` prints an object with the same keys for every flag combination,
  single run or several profiling cycles (recorded traces, tests/data/recorded).
"""

from __future__ import annotations

import inspect
import json
import typing
from pathlib import Path
from typing import Any, Dict, List

import pytest
from conftest import RECORDED, load_output

import tracefuse_stream
from tracefuse_stream import (
    ErrorKind,
    InputError,
    Interrupted,
    MergeOptions,
    OutputError,
    TraceFuseError,
    UsageError,
    VerifyFailed,
    merge,
)
from tracefuse_stream.cli.app import main as cli_main
from tracefuse_stream.errors import EXIT_INPUT, EXIT_INTERRUPTED, EXIT_OUTPUT, EXIT_USAGE, EXIT_VERIFY
from tracefuse_stream.options import Execution, Filters
from tracefuse_stream.report.info import INFO_JSON_KEYS

DDP4 = RECORDED / "ddp4"


def test_top_level_names():
    for name in tracefuse_stream.__all__:
        assert hasattr(tracefuse_stream, name), name
    assert {"merge", "MergeOptions", "VerifyFailed", "TraceFuseError", "InputError", "UsageError"} <= set(
        tracefuse_stream.__all__
    )
    codes = {
        InputError: (EXIT_INPUT, None),
        UsageError: (EXIT_USAGE, ErrorKind.USAGE),
        OutputError: (EXIT_OUTPUT, ErrorKind.OUTPUT),
        Interrupted: (EXIT_INTERRUPTED, ErrorKind.INTERRUPTED),
        VerifyFailed: (EXIT_VERIFY, ErrorKind.VERIFY),
    }
    for cls, (code, kind) in codes.items():
        assert issubclass(cls, TraceFuseError) and cls.exit_code == code, cls
        if kind is not None:
            assert cls.kind is kind, cls
    # the old home of VerifyFailed still works (same class)
    from tracefuse_stream.pipeline.orchestrate import VerifyFailed as old

    assert old is VerifyFailed


def test_merge_signature_survives_the_wrapper():
    sig = inspect.signature(merge)
    assert list(sig.parameters) == ["inputs", "output", "options", "overrides"]
    assert sig.parameters["options"].default is None
    assert sig.parameters["overrides"].kind is inspect.Parameter.VAR_KEYWORD
    hints = typing.get_type_hints(merge)
    assert hints["options"] == typing.Optional[MergeOptions]
    assert hints["return"] is tracefuse_stream.MergeSummary
    assert tracefuse_stream.__file__ and (Path(tracefuse_stream.__file__).parent / "py.typed").exists()


def _events(path: Path) -> List[Dict[str, Any]]:
    return load_output(path)["traceEvents"]


def test_old_and_new_call_forms_give_the_same_merge(tmp_path):
    files = sorted(str(p) for p in DDP4.glob("*.json*"))
    assert len(files) == 4
    outs = [tmp_path / f"m{i}.json" for i in range(4)]
    merge(files, str(outs[0]), ranks=[0, 2], include_pyfunc=True, jobs=1)
    opts = MergeOptions.from_kwargs(ranks=[0, 2])
    merge(
        files,
        str(outs[1]),
        MergeOptions(filters=Filters(include_pyfunc=True), execution=Execution(jobs=1)),
        ranks=[0, 2],
    )
    merge(files, str(outs[2]), options=opts, include_pyfunc=True, jobs=1)
    s = merge(files, output=str(outs[3]), options=opts, **{"include_pyfunc": True, "jobs": 1})
    assert [r.rank for r in s.ranks] == [0, 2]
    first = _events(outs[0])
    assert len(first) > 1000
    for o in outs[1:]:
        assert _events(o) == first, o.name
    with pytest.raises(TypeError, match="unexpected keyword argument 'rank'"):
        merge(files, str(tmp_path / "x.json"), rank=[0])


def _info_json(capsys: pytest.CaptureFixture, *args: Any) -> Dict[str, Any]:
    rc = cli_main(["info", *map(str, args), "--json"])
    assert rc == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("inputs", ["ddp4", "ddp2_cycles"])
def test_info_json_has_one_shape(capsys, inputs):
    d = RECORDED / inputs
    plain = _info_json(capsys, d)
    assert tuple(plain) == INFO_JSON_KEYS
    n_cycles = 2 if inputs == "ddp2_cycles" else 1
    assert len(plain["cycles"]) == n_cycles
    assert [k for k in INFO_JSON_KEYS if plain[k] is None] == [
        "steps",
        "align",
        "collectives",
        "collectives_by_cycle",
    ]
    ranks = [r["rank"] for r in plain["ranks"]]
    assert len(ranks) == 4  # ddp4: 4 ranks; ddp2_cycles: 2 ranks x 2 cycles
    for flags, filled in (
        (["--steps"], {"steps"}),
        (["--align"], {"align"}),
        (["--steps", "--align"], {"steps", "align"}),
        (["--collectives"], {"collectives"} | ({"collectives_by_cycle"} if n_cycles > 1 else set())),
    ):
        got = _info_json(capsys, d, *flags)
        assert tuple(got) == INFO_JSON_KEYS, flags
        assert {
            k for k in ("steps", "align", "collectives", "collectives_by_cycle") if got[k] is not None
        } == filled
        assert got["ranks"] == plain["ranks"] and got["cycles"] == plain["cycles"], flags
    coll = _info_json(capsys, d, "--collectives")["collectives"]
    assert {"ranks", "instances"} <= set(coll)
