"""The options object, and the input edges and warnings an expert expects (issue 10/11).

* ``MergeOptions`` is frozen, validated once, and the flat keyword API maps onto it;
  invalid choices are usage errors (exit 2) before any file is opened.
* A UTF-8 byte order mark and NUL padding after the JSON are valid input in strict
  mode (nothing to salvage: exit 0, no salvage report); NUL inside the JSON is not.
* ``--steps``/``--window`` that leave a rank without events say so; the summary's MB/s
  is on decompressed JSON and it explains events out > in (regenerated labels).

All inputs are real recorded traces (tests/data/recorded) or the bundled sample.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from tracefuse_stream import UsageError, merge
from tracefuse_stream.errors import ErrorKind, InputError
from tracefuse_stream.options import Execution, Filters, MergeOptions, Selection, TimeWindow

HERE = Path(__file__).resolve().parent
NATURAL = HERE / "data" / "recorded" / "natural_order"
SAMPLE = HERE.parent / "fixtures" / "sample_run"


def _events(path: Path):
    return json.loads(path.read_bytes())["traceEvents"]


# --------------------------------------------------------------------------- options
def test_options_are_frozen_and_kwargs_map_onto_parts():
    opts = MergeOptions.from_kwargs(ranks=[3, 1, 1], jobs=2, keep_cat=["kernel"], align="collectives")
    assert opts.selection.ranks == (1, 3)
    assert opts.execution.jobs == 2
    assert opts.filters.keep_cat == frozenset({"kernel"})
    assert opts.alignment.mode == "collectives"
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.execution.jobs = 3  # type: ignore[misc]
    over = MergeOptions.from_kwargs(opts, jobs=1)  # kwargs on top of options
    assert over.execution.jobs == 1 and over.selection.ranks == (1, 3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'job'"):
        MergeOptions.from_kwargs(job=2)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Execution(jobs=-3), "^jobs must be 0"),
        (lambda: Selection(rank_from="name"), "^rank_from must be one of auto, order"),
        (lambda: Selection(ranks=(-1,)), "non-negative"),
        (lambda: Selection(cycle="first"), "^cycle must be"),
        (lambda: Filters(name_regex="("), "not a valid regular expression"),
        (lambda: Filters(keep_cat="kernel"), "list of categories"),
        (lambda: TimeWindow(steps=(3, 2)), "first step is after last step"),
        (lambda: TimeWindow(step_rank=1), "^step_rank only applies with steps"),
        (lambda: TimeWindow(steps=(1, 2), window_ms=(0, 1)), "either steps or window_ms"),
        (lambda: TimeWindow(window_ms=(5, 5)), "start is not before end"),
        (lambda: MergeOptions.from_kwargs(align="collectives", clock_offsets="o.json"), "alternatives"),
        (lambda: MergeOptions.from_kwargs(split_ranks=0), "^split_ranks"),
    ],
)
def test_invalid_choices_are_usage_errors(make, message):
    # raised to Python, the messages name keywords, not flags (the CLI's say flags: below)
    with pytest.raises(UsageError, match=message) as e:
        make()
    assert " --" not in f" {e.value}"


def test_cli_usage_errors_exit_2_before_reading(h, tmp_path):
    out = tmp_path / "m.json"
    for args, text in (
        (["-j", "-3"], "--jobs must be 1 or more workers (leave -j out for the usable cores), not '-3'"),
        (["-j", "0"], "--jobs must be 1 or more workers (leave -j out for the usable cores), not '0'"),
        (["--align", "collectives", "--clock-offsets", str(tmp_path / "o.json")], "alternatives"),
        (["--cycle", "0"], "--cycle must be"),
    ):
        r = h.run_cli("merge", str(SAMPLE), "-o", str(out), *args)
        assert r.returncode == 2, r.stderr_text
        assert text in r.stderr_text and r.stderr_text.count("\n") == 1
        assert not out.exists()


def test_clock_offsets_key_naming_nothing_is_exit_2(h, tmp_path):
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"node1": -1200.0, "node7": 5.0}))
    r = h.run_cli("merge", str(SAMPLE), "-o", str(tmp_path / "m.json"), "--clock-offsets", str(offsets))
    assert r.returncode == 2
    assert "'node7' name(s) no merged rank or host" in r.stderr_text and "node0, node1" in r.stderr_text


# --------------------------------------------------------------------------- input edges
def test_utf8_bom_and_nul_padding_are_valid_strict_input(tmp_path):
    src = NATURAL / "rank_3.json"
    text = src.read_bytes()
    variants = {  # (folder, file name: the rank comes from the name)
        ("bom", "rank_3.json"): b"\xef\xbb\xbf" + text,
        ("padded", "rank_3.json"): text + b"\x00" * 5000,
        ("padded_gz", "rank_3.json.gz"): gzip.compress(text + b"\x00" * 70000),
        ("both", "rank_3.json"): b"\xef\xbb\xbf" + text + b"\x00",
    }
    ref = merge([str(src)], str(tmp_path / "ref.json"))
    ref_events = _events(tmp_path / "ref.json")
    for (folder, fname), data in variants.items():
        name = f"{folder}/{fname}"
        (tmp_path / folder).mkdir()
        p = tmp_path / folder / fname
        p.write_bytes(data)
        for salvage in (False, True):
            out = tmp_path / f"{folder}.{salvage}.json"
            s = merge([str(p)], str(out), salvage=salvage)
            # nothing to salvage: the report says so and the CLI's exit code (4 only when
            # something was salvaged) agrees
            assert s.ranks[0].salvage is None, (name, s.ranks[0].salvage)
            assert _events(out) == ref_events, name
            assert s.events_in == ref.events_in


def test_nul_inside_the_json_is_still_an_error(tmp_path):
    text = (NATURAL / "rank_3.json").read_bytes()
    cut = text.index(b'"traceEvents"') + 40
    p = tmp_path / "nul.json"
    p.write_bytes(text[:cut] + b"\x00" + text[cut:])
    with pytest.raises(InputError) as ei:
        merge([str(p)], str(tmp_path / "o.json"))
    assert ei.value.kind in (ErrorKind.INVALID_JSON, ErrorKind.TRUNCATED)
    assert str(p) in str(ei.value)


# --------------------------------------------------------------------------- summary
def test_summary_speed_on_json_bytes_and_labels_explained(tmp_path):
    s = merge([str(SAMPLE)], str(tmp_path / "m.json.gz"))
    json_in = 0
    for f in SAMPLE.iterdir():
        data = f.read_bytes()
        json_in += len(gzip.decompress(data) if f.suffix == ".gz" else data)
    assert s.json_bytes_in == json_in > s.bytes_in  # two of the four inputs are gzip
    assert s.mb_per_s == pytest.approx(json_in / 1e6 / s.seconds)
    assert s.metadata_out == sum(r.metadata_out for r in s.ranks) > 0
    assert s.events_out - s.metadata_out <= s.events_in
    text = s.format_text()
    assert "labels written anew for each rank" in text and "MB/s of input JSON" in text
    assert (
        f"{s.events_in:,} events in = {s.events_kept:,} kept + {s.dropped:,} dropped + {s.metadata_in:,} labels; "
        f"{s.events_out:,} out = {s.events_kept:,} kept + {s.metadata_out:,} labels "
    ) in text
    d = s.to_dict()
    assert d["json_bytes_in"] == json_in and d["metadata_out"] == s.metadata_out


def test_window_leaving_ranks_empty_is_a_warning(tmp_path):
    s = merge([str(SAMPLE)], str(tmp_path / "m.json"), window_ms=(0, 0.001))
    empty = [r.rank for r in s.ranks if r.events_out == r.metadata_out]
    assert empty, "precondition: the 1 us window misses some ranks"
    warned = [w for w in s.warnings if "--window leaves rank(s)" in w]
    assert len(warned) == 1
    s2 = merge([str(SAMPLE)], str(tmp_path / "m2.json"), window_ms=(0, 5))
    assert not any("leaves rank" in w for w in s2.warnings)


def test_clock_correction_of_epoch_traces_never_gives_a_negative_base(tmp_path, h):
    """PyTorch <= 2.3 traces have no base (epoch-us ts, base 0). A clock correction that
    moves such a rank earlier must shift that rank negatively, never make the output
    base negative; absolute times stay exact. The epoch copies are made by script from
    real recorded traces (ts + base/1000, base removed)."""
    from decimal import Decimal

    paths = []
    for r in (0, 1):
        trace = json.loads((NATURAL / f"rank_{r}.json").read_bytes(), parse_float=Decimal)
        base = trace.pop("baseTimeNanoseconds")
        for ev in trace["traceEvents"]:
            if "ts" in ev:
                ev["ts"] = ev["ts"] + Decimal(base) / 1000
        paths.append(h.write_trace(trace, tmp_path / f"rank_{r}.json"))
    for p in paths:  # precondition: valid JSON with numeric epoch ts
        evs = json.loads(p.read_text())["traceEvents"]
        assert all(isinstance(e["ts"], (int, float)) and e["ts"] > 1e15 for e in evs if "ts" in e)
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"0": -5000.0}))  # rank 0's clock 5 ms ahead
    out = tmp_path / "m.json"
    s = merge([str(p) for p in paths], str(out), clock_offsets=str(offsets))
    o = json.loads(out.read_bytes(), parse_float=Decimal)
    B = o["baseTimeNanoseconds"]  # a whole ms just before the first (corrected) event, not 0
    assert B == s.base_time_ns and B > 0 and B % 1_000_000 == 0
    shifts = {r.rank: r.shift_ns for r in s.ranks}
    assert shifts == {0: -5_000_000 - B, 1: -B}
    src = {r: json.loads(paths[r].read_bytes(), parse_float=Decimal)["traceEvents"] for r in (0, 1)}
    got = [e for e in o["traceEvents"] if e["ph"] == "X" and e["args"]["rank"] == 0]
    want = [e for e in src[0] if e["ph"] == "X"]
    assert len(got) == len(want) > 0
    for g, w in zip(got, want):
        assert B + g["ts"] * 1000 == w["ts"] * 1000 - 5_000_000  # exact ns, moved 5 ms earlier
    assert min(e["ts"] for e in o["traceEvents"] if "ts" in e) >= 0
