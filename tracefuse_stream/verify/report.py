"""What ``verify`` found: finding codes, the report object and its text/JSON forms.

Findings are aggregated by ``(code, rank)`` while the passes run (:class:`Findings`):
a count and the first few examples, so a file with a million bad events still gives
a report of a few lines and memory independent of the number of events.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Dict, List, Optional, Tuple

import orjson

from tracefuse_stream.rewrite.rules import PID_STRIDE
from tracefuse_stream.textout import printable, terminal

RankKey = Any  # an int rank, None (unknown) or "unknown" in the final report

#: Every finding code, its level and what it means.
CODES: Dict[str, Tuple[str, str]] = {
    "invalid_json": ("error", "the file is not strict JSON"),
    "no_trace_events": ("error", "no traceEvents array"),
    "event_not_object": ("error", "traceEvents item is not an object"),
    "pid_out_of_range": ("error", "pid outside Perfetto's uint32 range (becomes 0)"),
    "string_pid": ("error", "string pid (Perfetto merges equal strings across ranks)"),
    "pid_invalid": ("error", "pid missing or not an integer"),
    "zero_pid": ("error", "pid 0 on a non-metadata event"),
    "tid_out_of_range": ("error", "tid not an integer in 0..2^32-1 (Perfetto merges threads)"),
    "string_tid": ("warning", "string tid"),
    "tid_missing": ("warning", "non-metadata event without tid"),
    "rank_missing": ("warning", "event without an integer args.rank"),
    "pid_rank_mismatch": ("warning", f"pid // {PID_STRIDE} - 1 differs from args.rank"),
    "process_unnamed": ("error", "process with events but no process_name"),
    "process_named_twice": ("error", "process_name set more than once (the last one wins)"),
    "process_multi_rank": ("error", "one process carries events of several ranks"),
    "sort_index_not_int32": ("error", "sort_index is not an int32"),
    "flow_key_shared": ("error", "flow (cat, name, id) used by several ranks: arrows cross ranks"),
    "flow_float_id": ("error", "float flow id (Perfetto rejects it)"),
    "flow_bad_id": ("error", "flow event without a usable id"),
    "flow_orphan_end": ("warning", "flow end without a start (Perfetto: flow_end_without_start)"),
    "flow_duplicate_start": ("warning", "flow key started twice (the second start is ignored)"),
    "overlap_x": ("warning", "complete events overlap without nesting on one thread"),
    "x_negative_dur": ("warning", "complete event with a negative or non-numeric dur"),
    "gzip_multi_member": ("error", "gzip file with several members: Perfetto reads only the first"),
    "header_missing": ("warning", "no tracefuse header"),
    "header_mismatch": ("error", "tracefuse header disagrees with the file or the inputs"),
    "event_count_mismatch": ("error", "events_out in the header differs from the events in the file"),
    "pid_map_mismatch": ("error", "pid map in the header is wrong or incomplete"),
    "missing_event": ("error", "input event missing from the merged file"),
    "extra_event": ("error", "merged event that no kept input event accounts for"),
    "wrong_time": ("error", "event present with a different time"),
    "against_unmatched": ("error", "--against input matches no rank of the merged file"),
    "against_left_out": ("warning", "--against input left out by the merge's selection: not compared"),
    "against_order": ("error", "--against inputs not in the merge's order, which numbered ranks by position"),
    "against_input_invalid": ("error", "--against input is not valid JSON"),
    "against_skipped": ("warning", "event comparison skipped"),
    "time_shift": ("warning", "rank was shifted in time by an alignment"),
}


@dataclass
class Finding:
    """One problem: ``level`` is ``"error"`` or ``"warning"``, ``code`` a stable id."""

    level: str
    code: str
    message: str
    rank: Optional[int] = None
    count: int = 1
    examples: List[Any] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "level": self.level,
            "code": self.code,
            "message": self.message,
            "rank": self.rank,
            "count": self.count,
            "examples": self.examples,
        }


@dataclass
class VerifyReport:
    """The result of :func:`tracefuse_stream.verify.verify`; ``ok`` means no error-level finding."""

    path: str
    ok: bool
    errors: List[Finding]
    warnings: List[Finding]
    ranks: Dict[RankKey, Dict[str, Any]]
    totals: Dict[str, Any]
    against: List[str] = field(default_factory=list)

    def codes(self) -> List[str]:
        return [f.code for f in self.errors + self.warnings]

    def find(self, code: str) -> List[Finding]:
        return [f for f in self.errors + self.warnings if f.code == code]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "path": self.path,
            "ok": self.ok,
            "errors": [f.to_dict() for f in self.errors],
            "warnings": [f.to_dict() for f in self.warnings],
            "ranks": {str(k): v for k, v in sorted(self.ranks.items(), key=_rank_sort)},
            "totals": self.totals,
            "against": self.against,
        }

    def to_json(self, indent: bool = True) -> str:
        opt = orjson.OPT_INDENT_2 if indent else 0
        return orjson.dumps(
            self.to_dict(), option=opt | orjson.OPT_NON_STR_KEYS, default=json_default
        ).decode()

    def format_text(self) -> str:
        t = self.totals
        out = io.StringIO()
        mb = t.get("bytes", 0) / 1e6
        out.write(
            f"tracefuse verify: {printable(self.path)}\n"
            f"  {mb:.1f} MB decompressed, {t.get('events', 0):,} events, "
            f"{self._ranks_text()}, {t.get('seconds', 0):.2f} s "
            f"({t.get('mb_per_s', 0):.1f} MB/s)\n"
        )
        if self.against:
            left = sum(f.count for f in self.find("against_left_out"))
            compared = len(self.against) - left
            out.write(
                f"  checked against {len(self.against)} input(s)\n"
                if not left
                else f"  checked against {compared} of {len(self.against)} inputs "
                f"({left} left out by the merge's selection: not compared)\n"
            )
        out.write(self._table())
        for title, items in (("errors", self.errors), ("warnings", self.warnings)):
            if not items:
                continue
            out.write(f"\n{title.upper()} ({len(items)}):\n")
            for f in items:
                where = f" rank {f.rank}" if f.rank is not None else ""
                out.write(f"  [{f.code}]{where}: {f.message}\n")
                for ex in f.examples:
                    out.write(f"      e.g. {short_json(trim_strings(ex))}\n")
        if self.ok:
            n_warn = f" ({len(self.warnings)} warning(s))" if self.warnings else ""
            out.write(f"\nOK: no error-level findings{n_warn}\n")
        else:
            out.write(f"\nFAILED: {len(self.errors)} error-level finding(s)\n")
        return terminal(out.getvalue())  # names from the trace cannot restyle the terminal

    def _ranks_text(self) -> str:
        """``4 ranks`` (only the ranks: the rows that are ranks), ``+ the Collectives
        process`` and ``+ N events of no rank`` where the file has them."""
        n = sum(1 for r in self.ranks if isinstance(r, int))
        text = f"{n} rank{'s' if n != 1 else ''}"
        if "Collectives" in self.ranks:
            text += " + the Collectives process"
        unknown = self.ranks.get("unknown")
        if unknown is not None:
            text += f" + {unknown['events']:,} event(s) of no rank"
        return text

    def _table(self) -> str:
        t = self.totals
        cols = [
            "rank",
            "events",
            "X",
            "flow s/f",
            "orphan f",
            "overlaps",
            "procs",
            "threads",
            "span ms",
            "against",
        ]
        rows = []
        for r, st in sorted(self.ranks.items(), key=_rank_sort):
            span = ""
            if st.get("ts_min_ns") is not None and st.get("ts_max_ns") is not None:
                span = f"{(st['ts_max_ns'] - st['ts_min_ns']) / 1e6:.1f}"
            rows.append([
                str(r), f"{st['events']:,}", f"{st['complete']:,}",
                f"{st['flow_starts']}/{st['flow_ends']}", str(st["flow_orphan_ends"]),
                str(st["overlaps"]), str(st["processes"]), str(st["threads"]), span,
                st.get("against") or "-",
            ])  # fmt: skip
        rows.append([
            "total", f"{t.get('events', 0):,}", f"{t.get('complete', 0):,}",
            f"{t.get('flow_starts', 0)}/{t.get('flow_ends', 0)}", str(t.get("flow_orphan_ends", 0)),
            str(t.get("overlaps", 0)), str(t.get("processes", 0)), str(t.get("threads", 0)), "", "",
        ])  # fmt: skip
        widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
        lines = ["\n  " + "  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip() + "\n"]
        for row in rows:
            lines.append("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() + "\n")
        return "".join(lines)


def _rank_sort(item: Tuple[RankKey, Any]) -> Tuple[int, int, str]:
    k = item[0]
    return (0, k, "") if isinstance(k, int) else (1, 0, str(k))


def json_default(o: Any) -> Any:
    """orjson ``default=``: the exact numbers and odd values an example can hold."""
    if isinstance(o, Decimal):
        return float(o) if o.is_finite() else str(o)
    if isinstance(o, (set, frozenset)):
        return sorted(o, key=repr)
    if isinstance(o, bytes):
        return o.decode("utf-8", "replace")
    return repr(o)


def trim_strings(o: Any, limit: int = 60) -> Any:
    """Long strings (kernel names) shortened for the text report."""
    if isinstance(o, str):
        return o if len(o) <= limit else o[: limit - 3] + "..."
    if isinstance(o, dict):
        return {k: trim_strings(v, limit) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [trim_strings(v, limit) for v in o]
    return o


def short_json(ex: Any, limit: int = 240) -> str:
    """``ex`` as compact JSON (repr when it cannot be), cut to ``limit`` characters."""
    try:
        s = orjson.dumps(ex, default=json_default, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        s = repr(ex)
    return s if len(s) <= limit else s[: limit - 3] + "..."


class Findings:
    """Aggregates findings by (code, rank): a count and the first few examples."""

    def __init__(self, max_examples: int) -> None:
        self.max_examples = max_examples
        self._items: Dict[Tuple[str, Any], Finding] = {}

    def add(
        self,
        code: str,
        rank: Optional[int] = None,
        example: Any = None,
        message: Optional[str] = None,
        count: int = 1,
        level: Optional[str] = None,
    ) -> None:
        key = (code, rank)
        f = self._items.get(key)
        if f is None:
            lvl, desc = CODES.get(code, ("error", code))
            f = Finding(level or lvl, code, message or desc, rank, 0, [])
            self._items[key] = f
        f.count += count
        if example is not None and len(f.examples) < self.max_examples:
            f.examples.append(example)

    def get(self, code: str, rank: Optional[int] = None) -> Optional[Finding]:
        return self._items.get((code, rank))

    def finish(self) -> Tuple[List[Finding], List[Finding]]:
        """(errors, warnings), each sorted by code then rank; counts in the messages."""
        errs: List[Finding] = []
        warns: List[Finding] = []
        for f in self._items.values():
            if f.count > 1 and "occurrence" not in f.message:
                f.message = f"{f.message} ({f.count:,} occurrences)"
            (errs if f.level == "error" else warns).append(f)
        return sorted(errs, key=_finding_order), sorted(warns, key=_finding_order)


def _finding_order(f: Finding) -> Tuple[str, int]:
    r = f.rank
    return f.code, -1 if r is None else r if isinstance(r, int) else 1 << 40


__all__ = ["CODES", "Finding", "Findings", "VerifyReport", "json_default", "short_json", "trim_strings"]
