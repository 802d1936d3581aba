"""The ``verify`` subcommand's arguments and action, for the shared parser in
:mod:`tracefuse_stream.cli.app` (one error format, one error -> exit code mapping).

``--against`` takes one or more inputs and may stand before or after the merged
file. argparse hands every word after ``--against`` to it, so in
``verify --against A B MERGED`` the merged file arrives as the last of them; it is
taken back from there when no positional was given (exactly one merged file is
required, so this is never ambiguous).
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from tracefuse_stream.errors import EXIT_OK, EXIT_VERIFY, UsageError


def add_verify_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("merged", nargs="?", metavar="MERGED", help="merged trace (.json, .json.gz, .json.zst)")
    p.add_argument("--against", nargs="+", metavar="INPUT", default=None,
                   help="the merge's input files or directories")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--max-examples", type=int, default=5, metavar="N", help="examples kept per finding")


def merged_and_inputs(a: argparse.Namespace) -> tuple[str, Optional[List[str]]]:
    """The merged file and the ``--against`` inputs, whatever their order on the line."""
    merged: Optional[str] = a.merged
    against: Optional[List[str]] = list(a.against) if a.against is not None else None
    if merged is None and against is not None and len(against) >= 2:
        merged = against.pop()
    if merged is None:
        raise UsageError("verify: the merged file is required: verify MERGED [--against INPUT ...]")
    return merged, against


def cmd_verify(a: argparse.Namespace) -> int:
    """Run ``verify`` for parsed arguments: 0 when no error-level finding, 5 otherwise.
    A file that cannot be read raises (the shared CLI maps it to one line and exit 1)."""
    # the checker only when ``verify`` runs: cli.app imports this module for the
    # arguments of every command's parser
    from tracefuse_stream.verify.check import verify

    merged, against = merged_and_inputs(a)
    report = verify(merged, against=against, max_examples=a.max_examples)
    sys.stdout.write(report.to_json() + "\n" if a.json else report.format_text())
    sys.stdout.flush()
    return EXIT_OK if report.ok else EXIT_VERIFY


__all__ = ["add_verify_arguments", "cmd_verify", "merged_and_inputs"]
