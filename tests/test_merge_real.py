"""The core merge on real PyTorch profiler traces, through the API: the 4-rank job
recorded in the repository (always) and the GPU traces of ../shared/fixtures (when
present; required in CI). Every expectation is derived from the input files in the test (conftest's
``check_merge`` replays the rules of docs/OUTPUT_FORMAT.md event by event): kept
events in input order with exact counts, absolute times to the nanosecond, pids,
tids, flow ids, correlation/External id, args.rank, regenerated metadata, header.
"""

from __future__ import annotations

import pytest

from tracefuse_stream import UsageError, merge

GPU_FILES = [
    "h100_bert_small.json.gz",
    "mi300_resnet_rank0.json.gz",
    "a100_nccl_rank0.json.gz",
    "mi250_minitoy.json.gz",
]


def key_position(trace, key):
    keys = list(trace)
    return "before" if keys.index(key) < keys.index("traceEvents") else "after"


def all_ts(out):
    return [e["ts"] for e in out["traceEvents"] if "ts" in e]


# ---------------------------------------------------------------- the 4-rank job
@pytest.fixture(scope="module")
def ddp4_merged(ddp4_job, tmp_path_factory, h):
    out = tmp_path_factory.mktemp("ddp4") / "merged.json"
    summary = merge([ddp4_job.dir], str(out), jobs=1)
    return summary, h.load_output(out, exact=True)


@pytest.fixture(scope="module")
def ddp4_by_rank_of_job(ddp4_job):
    return ddp4_job.by_rank


def test_ddp4_ranks_from_distributed_info_and_exact_counts(ddp4_merged, ddp4_by_rank_of_job, h):
    ddp4_by_rank = ddp4_by_rank_of_job
    summary, out = ddp4_merged
    # the file names carry no rank: ranks come from distributedInfo only
    for r, p in ddp4_by_rank.items():
        assert f".{r}." not in p.name and f"rank{r}" not in p.name
    h.check_merge(out, ddp4_by_rank)
    sections = h.split_by_rank(out)
    assert sorted(sections) == [0, 1, 2, 3]
    for r, path in ddp4_by_rank.items():
        evs = h.cached_input(path)["traceEvents"]
        n_kept = sum(1 for e in evs if e["ph"] != "M" and e.get("cat") != "python_function")
        n_pyfunc = sum(1 for e in evs if e.get("cat") == "python_function")
        assert n_pyfunc > 0
        assert len(h.non_meta(sections[r])) == n_kept
        assert not any(e.get("cat") == "python_function" for e in sections[r])
        rs = summary.ranks[r]
        assert (rs.rank, rs.events_in, rs.dropped) == (r, len(evs), n_pyfunc)
        assert rs.events_out == len(sections[r])
        assert out["tracefuse"]["ranks"][str(r)]["rank_from"] == "distributedInfo"
    assert summary.events_in == sum(len(h.cached_input(p)["traceEvents"]) for p in ddp4_by_rank.values())
    assert summary.events_out == len(out["traceEvents"])


def test_ddp4_pids_labels_and_flows(ddp4_merged, ddp4_by_rank_of_job, h):
    _, out = ddp4_merged
    sections = h.split_by_rank(out)
    in_fwdbwd = {}
    for r, path in ddp4_by_rank_of_job.items():
        evs = h.cached_input(path)["traceEvents"]
        os_pid = next(e["pid"] for e in evs if e["ph"] != "M" and isinstance(e["pid"], int))
        # the pid rule: integer pids below 5000 keep their value in the rank's block,
        # others get the rank's first slot from 5000 (the CPU pid comes first)
        cpu = (r + 1) * 10000 + (os_pid if 0 <= os_pid < 5000 else 5000)
        names = {m["pid"]: m["args"]["name"] for m in sections[r] if m.get("name") == "process_name"}
        assert names[cpu] == f"RANK {r} - CPU"  # TraceLens' name; the detail in process_labels
        labels = {m["pid"]: m["args"]["labels"] for m in sections[r] if m.get("name") == "process_labels"}
        assert labels[cpu].startswith(f"rank {r}, ") and f", pid {os_pid}, python" in labels[cpu]
        assert {e["pid"] for e in sections[r]} == set(names)
        in_fwdbwd[r] = {e["id"] for e in evs if e.get("cat") == "fwdbwd"}
        out_ids = {e["id"] for e in sections[r] if e.get("cat") == "fwdbwd"}
        assert out_ids == {(r << 32) + i for i in in_fwdbwd[r]}
    # precondition that makes the uniqueness meaningful: every rank used the same ids
    assert len(set.intersection(*in_fwdbwd.values())) >= 10
    sort = sorted(
        (m["args"]["sort_index"], m["args"]["rank"])
        for m in out["traceEvents"]
        if m.get("name") == "process_sort_index"
    )
    assert [r for _, r in sort] == sorted(r for _, r in sort)
    assert sort[0] == (0, 0) and all(-(2**31) <= s < 2**31 for s, _ in sort)


# ---------------------------------------------------------------- single-rank GPU traces
@pytest.fixture(scope="module")
def gpu_merged(real_dir, tmp_path_factory, h):
    paths = [real_dir / f for f in GPU_FILES]
    out = tmp_path_factory.mktemp("gpu") / "merged.json.gz"
    summary = merge(paths, str(out), rank_from="order", jobs=1)
    return {i: p for i, p in enumerate(paths)}, summary, h.load_output(out, exact=True)


def test_gpu_traces_with_rank_from_order(gpu_merged, h):
    inputs, summary, out = gpu_merged
    # precondition: two files claim distributedInfo rank 0, the bases all differ
    claimed = [h.cached_input(p).get("distributedInfo", {}).get("rank") for p in inputs.values()]
    assert claimed.count(0) == 2
    bases = [h.cached_input(p)["baseTimeNanoseconds"] for p in inputs.values()]
    assert len(set(bases)) == len(bases)
    h.check_merge(out, inputs)
    assert min(all_ts(out)) >= 0  # (check_merge: B, the rule of docs/OUTPUT_FORMAT.md)
    sections = h.split_by_rank(out)
    for r, p in inputs.items():
        evs = h.cached_input(p)["traceEvents"]
        n_kept = sum(1 for e in evs if e["ph"] != "M" and e.get("cat") != "python_function")
        assert len(h.non_meta(sections[r])) == n_kept
        assert out["tracefuse"]["ranks"][str(r)]["rank_from"] == "order"
        assert summary.ranks[r].shift_ns == bases[r] - summary.base_time_ns


def test_gpu_traces_ac2g_ids_equal_correlation(gpu_merged, h):
    """Wherever an ac2g flow id equalled args.correlation of the launch and of the
    kernel in the input, it still does (both rewritten to rank * 2**32 + id)."""
    inputs, _, out = gpu_merged
    sections = h.split_by_rank(out)

    def by_corr(events):
        m = {}
        for e in events:
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                m.setdefault(c, []).append((e.get("cat"), e.get("name"), e.get("ph")))
        return m

    for r, p in inputs.items():
        evs = [e for e in h.cached_input(p)["traceEvents"] if e.get("cat") != "python_function"]
        in_corr = by_corr(evs)
        in_flows = sorted((e["ph"], e["id"]) for e in evs if e.get("cat") == "ac2g" and e["id"] in in_corr)
        # precondition: real launch -> kernel flows, with both ends carrying the id
        assert len(in_flows) > 10
        assert any({c for c, _, _ in in_corr[i]} >= {"cuda_runtime", "kernel"} for _, i in in_flows)
        sec = sections[r]
        out_corr = by_corr(sec)
        out_flows = sorted((e["ph"], e["id"]) for e in sec if e.get("cat") == "ac2g" and e["id"] in out_corr)
        assert out_flows == [(ph, (r << 32) + i) for ph, i in in_flows]
        for _, i in in_flows:
            assert sorted(out_corr[(r << 32) + i]) == sorted(in_corr[i])
        assert set(out_corr) == {(r << 32) + c for c in in_corr}


def test_gpu_traces_idle_devices_get_no_process(gpu_merged, h):
    inputs, _, out = gpu_merged
    pids_out = {e["pid"] for e in out["traceEvents"]}
    for r, p in inputs.items():
        evs = h.cached_input(p)["traceEvents"]
        with_events = {e["pid"] for e in evs if e["ph"] != "M" and e.get("cat") != "python_function"}
        meta_only = {e["pid"] for e in evs if e["ph"] == "M"} - with_events
        devices = {x for x in meta_only if isinstance(x, int) and x < 5000}
        assert devices, f"precondition: {p.name} has idle device pids"
        assert not {(r + 1) * 10000 + d for d in devices} & pids_out


def test_negative_tids_become_their_absolute_value(gpu_merged, h):
    inputs, _, out = gpu_merged
    r = GPU_FILES.index("a100_nccl_rank0.json.gz")
    evs = h.cached_input(inputs[r])["traceEvents"]
    neg = {e["tid"] for e in evs if isinstance(e.get("tid"), int) and e["tid"] < 0 and e["ph"] != "M"}
    assert neg  # precondition
    tids = {e["tid"] for e in h.split_by_rank(out)[r]}
    assert {-t for t in neg} <= tids and not any(isinstance(t, int) and t < 0 for t in tids)


def test_duplicate_distributed_info_ranks_are_refused(real_dir, tmp_path):
    a, b = real_dir / "mi300_resnet_rank0.json.gz", real_dir / "a100_nccl_rank0.json.gz"
    with pytest.raises(UsageError) as ei:
        merge([a, b], str(tmp_path / "x.json"))
    msg = str(ei.value)
    assert str(a) in msg and str(b) in msg and 'rank_from="order"' in msg  # Python speaks keywords
    assert not (tmp_path / "x.json").exists()


def test_dict_inputs_keys_are_ranks(real_dir, ddp4_by_rank, tmp_path, h):
    inputs = {
        7: real_dir / "h100_bert_small.json.gz",
        2: real_dir / "mi250_minitoy.json.gz",
        4: ddp4_by_rank[3],
    }
    out = tmp_path / "m.json.zst"
    merge(inputs, str(out))
    o = h.load_output(out, exact=True)
    h.check_merge(o, inputs)
    assert sorted(h.split_by_rank(o)) == [2, 4, 7]
    assert {r: v["rank_from"] for r, v in o["tracefuse"]["ranks"].items()} == {
        "2": "explicit",
        "4": "explicit",
        "7": "explicit",
    }


@pytest.mark.parametrize("ranks", [[0, 2], [3], [1, 2, 3]])
def test_rank_subset(ddp4_job, ranks, tmp_path, h):
    out = tmp_path / "m.json"
    merge([ddp4_job.dir], str(out), ranks=ranks)
    o = h.load_output(out, exact=True)
    h.check_merge(o, {r: ddp4_job.by_rank[r] for r in ranks})
    assert sorted(h.split_by_rank(o)) == ranks
    with pytest.raises(UsageError, match="7"):
        merge([ddp4_job.dir], str(tmp_path / "n.json"), ranks=[0, 7])


# ---------------------------------------------------------------- key orders and bases
@pytest.mark.parametrize(
    "rel, base_is",
    [
        ("real/mi300_resnet_rank0.json.gz", "after"),
        ("real/a100_nccl_rank0.json.gz", "after"),
        ("real/h100_bert_small.json.gz", "after"),
        ("real/mi250_minitoy.json.gz", "after"),
        ("ddp4", "before"),
        ("shared_ddp4", "before"),
    ],
)
def test_both_key_orders_single_file(rel, base_is, rec_ddp4_by_rank, request, tmp_path, h):
    if rel == "ddp4":  # the recorded job
        path = rec_ddp4_by_rank[1]
    elif rel == "shared_ddp4":
        path = request.getfixturevalue("ddp4_by_rank")[1]
    else:
        path = h.require_shared(*rel.split("/"))
    trace = h.cached_input(path)
    assert key_position(trace, "baseTimeNanoseconds") == base_is  # what the file really is
    out = tmp_path / "one.json"
    merge([path], str(out))
    o = h.load_output(out, exact=True)
    r = trace.get("distributedInfo", {}).get("rank", 0)
    h.check_merge(o, {r: path})
    # B: just before the first event (issue 21: small ts), one shift for the whole rank
    assert 0 < o["baseTimeNanoseconds"] - trace["baseTimeNanoseconds"] < min(all_ts(trace)) * 1000
    assert (
        o["tracefuse"]["ranks"][str(r)]["shift_ns"] == trace["baseTimeNanoseconds"] - o["baseTimeNanoseconds"]
    )


@pytest.mark.parametrize("variant", ["distinfo_after", "distinfo_and_base_after_compact"])
def test_resaved_file_with_distributed_info_after_events(variant, ddp4_job, tmp_path, h):
    ddp4_by_rank = ddp4_job.by_rank
    src = h.cached_input(ddp4_by_rank[2], exact=True)
    assert key_position(src, "distributedInfo") == "before"
    keys = [k for k in src if k not in ("distributedInfo", "baseTimeNanoseconds", "traceEvents")]
    if variant == "distinfo_after":
        order = keys + ["baseTimeNanoseconds", "traceEvents", "distributedInfo"]
    else:
        order = keys + ["traceEvents", "distributedInfo", "baseTimeNanoseconds"]
    d = tmp_path / "in"
    d.mkdir()
    resaved = h.write_trace(
        src, d / "vm_99.1795938942000000000.pt.trace.json.gz", order, indent=variant == "distinfo_after"
    )
    back = h.load_input(resaved, exact=True)
    assert key_position(back, "distributedInfo") == "after"
    # re-saved first in the list: its rank must still come from distributedInfo
    files = [resaved, ddp4_by_rank[0], ddp4_by_rank[3], ddp4_by_rank[1]]
    out = tmp_path / "m.json.gz"
    merge(files, str(out))
    o = h.load_output(out, exact=True)
    inputs = {0: ddp4_by_rank[0], 1: ddp4_by_rank[1], 2: resaved, 3: ddp4_by_rank[3]}
    h.check_merge(o, inputs)
    assert o["tracefuse"]["ranks"]["2"]["rank_from"] == "distributedInfo"
    assert o["tracefuse"]["ranks"]["2"]["header"]["distributedInfo"]["rank"] == 2


def test_resaved_trailer_with_device_properties_and_tricky_strings(real_dir, tmp_path, h):
    """Keys after the events that include another top-level array (deviceProperties)
    and strings with brackets and escaped quotes; no indentation."""
    src = dict(h.cached_input(real_dir / "h100_bert_small.json.gz", exact=True))
    src["distributedInfo"] = {"backend": "nccl", "rank": 1, "world_size": 2}
    src["traceName"] = '/tmp/run "a]"/x}.json'
    order = [
        "schemaVersion",
        "traceEvents",
        "deviceProperties",
        "distributedInfo",
        "traceName",
        "baseTimeNanoseconds",
    ]
    resaved = h.write_trace(src, tmp_path / "h100_resaved.json", order, indent=False)
    other = real_dir / "mi250_minitoy.json.gz"
    out = tmp_path / "m.json"
    merge([other, resaved], str(out))
    o = h.load_output(out, exact=True)
    h.check_merge(o, {0: other, 1: resaved})
    assert o["tracefuse"]["ranks"]["1"]["header"]["traceName"] == src["traceName"]


@pytest.mark.parametrize("later_rank", [1, 0])
@pytest.mark.parametrize("src_name", ["ddp4", "shared_ddp4", "h100"])
def test_two_ranks_with_bases_one_period_apart(src_name, later_rank, rec_ddp4_by_rank, request, tmp_path, h):
    if src_name == "ddp4":  # the recorded job
        path = rec_ddp4_by_rank[0]
    elif src_name == "shared_ddp4":
        path = request.getfixturevalue("ddp4_by_rank")[0]
    else:
        path = h.require_shared("real", "h100_bert_small.json.gz")
    src = h.cached_input(path, exact=True)
    copy = h.shifted_copy(src, h.PERIOD_NS, rank=None)
    copy.pop("distributedInfo", None)
    later = h.write_trace(copy, tmp_path / "later.pt.trace.json.gz")
    # precondition: the copy really is one Kineto period later, ts moved the other way
    back = h.load_input(later, exact=True)
    assert back["baseTimeNanoseconds"] - src["baseTimeNanoseconds"] == 7_889_238_000_000_000
    assert all(e["ts"] < 0 for e in back["traceEvents"])
    inputs = {later_rank: later, 1 - later_rank: path}
    out = tmp_path / "m.json.gz"
    merge(inputs, str(out))
    o = h.load_output(out, exact=True)
    h.check_merge(o, inputs)  # B: just before the first event, whatever the bases
    assert min(all_ts(o)) >= 0, "negative ts in the merged trace"
    rh = o["tracefuse"]["ranks"]
    assert rh[str(later_rank)]["shift_ns"] - rh[str(1 - later_rank)]["shift_ns"] == h.PERIOD_NS
    # same absolute times => the two ranks' events have identical ts in the output
    secs = h.split_by_rank(o)
    ts_a = [e["ts"] for e in h.non_meta(secs[0])]
    ts_b = [e["ts"] for e in h.non_meta(secs[1])]
    assert ts_a == ts_b and len(ts_a) > 400


def test_old_trace_without_base_with_a_new_one(ddp4_by_rank, real_dir, tmp_path, h):
    old = real_dir / "a100_no_distinfo_epoch_ts.json.gz"
    old_trace = h.cached_input(old)
    assert "baseTimeNanoseconds" not in old_trace and "distributedInfo" not in old_trace
    assert all(type(e["ts"]) is int for e in old_trace["traceEvents"])  # integer epoch us
    new = ddp4_by_rank[0]
    out = tmp_path / "m.json.gz"
    merge([new, old], str(out))
    o = h.load_output(out, exact=True)
    inputs = {0: new, 1: old}
    h.check_merge(o, inputs)
    B = o["baseTimeNanoseconds"]  # not 0 (epoch ts): a whole ms just before the first event
    assert B > 0 and B % 1_000_000 == 0
    rh = o["tracefuse"]["ranks"]
    assert rh["1"]["base_time_ns"] is None and rh["1"]["shift_ns"] == -B
    assert rh["0"]["shift_ns"] == h.cached_input(new)["baseTimeNanoseconds"] - B
    assert min(all_ts(o)) >= 0
    secs = h.split_by_rank(o)
    # the old rank's integer ts stay integers (a whole-ms shift), every ts is small
    assert [e["ts"] for e in h.non_meta(secs[1])] == [e["ts"] - B // 1000 for e in old_trace["traceEvents"]]
    assert all(0 <= e["ts"] < 10**12 for e in h.non_meta(secs[1]))  # the earliest rank: small
    assert min(e["ts"] for e in h.non_meta(secs[0])) >= 0  # the new one: 4 years later, exact


# ---------------------------------------------------------------- filters
FILTERS = {
    "default": {},
    "include_pyfunc": {"include_pyfunc": True},
    "keep_cat_kernel": {"keep_cat": ["kernel"]},
    "keep_cat_two": {"keep_cat": ["cpu_op", "ac2g"]},
    "drop_cat": {"drop_cat": ["cpu_op", "cuda_runtime"]},
    "name_regex": {"name_regex": r"^(aten::(mm|add)|ProfilerStep#)"},
    "filter_fn": {"fn": lambda e: e.get("dur") is not None and e["dur"] > 20},
}


# worker processes (jobs=2) with a lambda filter_fn and with keep_cat
@pytest.mark.parametrize("name, jobs", [(n, 1) for n in FILTERS] + [("filter_fn", 2), ("keep_cat_kernel", 2)])
def test_filters(name, jobs, ddp4_by_rank, real_dir, tmp_path, h):
    flt = FILTERS[name]
    inputs = {0: ddp4_by_rank[0], 1: real_dir / "h100_bert_small.json.gz"}
    out = tmp_path / "m.json"
    kw = {
        "include_pyfunc": flt.get("include_pyfunc", False),
        "keep_cat": flt.get("keep_cat"),
        "drop_cat": flt.get("drop_cat"),
        "name_regex": flt.get("name_regex"),
        "filter_fn": flt.get("fn"),
    }
    merge(inputs, str(out), jobs=jobs, **kw)
    o = h.load_output(out, exact=True)
    h.check_merge(o, inputs, **flt)
    secs = h.split_by_rank(o)
    for r, p in inputs.items():
        want = len(h.kept_events(h.cached_input(p, exact=True)["traceEvents"], **flt))
        assert len(h.non_meta(secs.get(r, []))) == want
    f = o["tracefuse"]["filters"]
    assert f["include_pyfunc"] == kw["include_pyfunc"]
    assert f["keep_cat"] == (sorted(kw["keep_cat"]) if kw["keep_cat"] else None)
    assert f["drop_cat"] == sorted(kw["drop_cat"] or [])
    assert f["name_regex"] == kw["name_regex"]
    assert f["custom_filter_fn"] == (kw["filter_fn"] is not None)
    if name == "include_pyfunc":
        assert sum(e.get("cat") == "python_function" for e in o["traceEvents"]) == sum(
            e.get("cat") == "python_function"
            for p in inputs.values()
            for e in h.cached_input(p)["traceEvents"]
        )
    if name == "keep_cat_kernel":
        # rank 0 (CPU-only job) keeps nothing: no section; rank 1's CPU gets no metadata
        assert 0 not in secs
        cpu_pid = next(
            e["pid"]
            for e in h.cached_input(inputs[1])["traceEvents"]
            if e["ph"] != "M" and isinstance(e["pid"], int) and e["pid"] >= 5000
        )
        mapped = dict(map(tuple, o["tracefuse"]["ranks"]["1"]["pids"])).get(cpu_pid)
        assert mapped is None or mapped not in {e["pid"] for e in o["traceEvents"]}
        assert not any(e["pid"] == 20000 + 5000 for e in o["traceEvents"])
        names = [e["args"]["name"] for e in o["traceEvents"] if e.get("name") == "process_name"]
        assert names == ["RANK 1 - GPU"]


@pytest.mark.parametrize("out_name", ["e.json", "e.json.gz", "e.json.zst"])
@pytest.mark.parametrize("empty_rank", [1, 2])
def test_ranks_that_keep_nothing_leave_valid_json(empty_rank, out_name, ddp4_by_rank, real_dir, tmp_path, h):
    """A CPU-only rank under --keep-cat kernel keeps no event: no section, no stray
    separator, whether it is in the middle or last."""
    gpu = [real_dir / "h100_bert_small.json.gz", real_dir / "mi250_minitoy.json.gz"]
    inputs = {empty_rank: ddp4_by_rank[0]}
    inputs.update({r: gpu.pop() for r in (0, 1, 2) if r != empty_rank})
    out = tmp_path / out_name
    merge(inputs, str(out), keep_cat=["kernel"])
    o = h.load_output(out, exact=True)  # strict JSON
    h.check_merge(o, inputs, keep_cat=["kernel"])
    secs = h.split_by_rank(o)
    assert sorted(secs) == sorted(r for r in inputs if r != empty_rank)
    assert o["tracefuse"]["ranks"][str(empty_rank)]["events_out"] == 0
