"""``merge --verify`` for a Perfetto archive: every rank member against its input.

The verifier reads JSON traces, not TARs, so each rank member (a complete one-rank
merged trace, see :mod:`tracefuse_stream.write.archive`) is copied, streaming, into a
private temporary file and verified there against the rank's input, exactly as a
``--split-ranks 1`` file would be. The archive's layout is checked first: the manifest
is the first member, lists every rank member once, each on its own machine, and the
archive holds nothing else. A finding is reported under ``ARCHIVE/MEMBER``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tarfile
import tempfile
from typing import Any, Callable, Dict, List, Optional, Sequence

from tracefuse_stream.errors import InputError
from tracefuse_stream.read.toplevel import trailer_of_file
from tracefuse_stream.verify.jsonfile import against_files, verify_json
from tracefuse_stream.verify.report import Finding, VerifyReport
from tracefuse_stream.write.manifest import MANIFEST_NAME, archive_stem, member_name


def _layout_problem(path: str, names: List[str], manifest: Dict[str, Any], expected: List[str]) -> str:
    """What is wrong with the archive's layout, or ''."""
    if not names or names[0] != MANIFEST_NAME:
        return f"{path}: the first member is {names[:1]}, not {MANIFEST_NAME}"
    if names[1:] != expected:
        return f"{path}: members {names[1:]} differ from the ranks' members {expected}"
    files = manifest.get("perfetto_manifest", {}).get("files", [])
    listed = [f.get("path") for f in files]
    if listed != expected:
        return f"{path}: the manifest lists {listed}, the archive holds {expected}"
    machines = [(f.get("machine") or {}).get("name") for f in files]
    if len(set(machines)) != len(machines) or not all(machines):
        return f"{path}: the manifest's machines {machines} are not one per rank"
    return ""


class _Walk:
    """One streaming pass over an archive's members: the manifest is parsed, each other
    member is copied to a private temporary file and handed to ``check(name, file)``
    (None: not checked); the member names seen are kept for the layout check."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.names: List[str] = []
        self.manifest: Dict[str, Any] = {}

    def run(self, check: Callable[[str, str], Optional[VerifyReport]]) -> List[VerifyReport]:
        reports: List[VerifyReport] = []
        tmp = tempfile.mkdtemp(prefix=".tracefuse-verify-")
        try:
            with tarfile.open(self.path, "r|*") as tar:  # a stream: one pass, members in order
                for info in tar:
                    self.names.append(info.name)
                    f = tar.extractfile(info)
                    if f is None:
                        continue
                    if info.name == MANIFEST_NAME:
                        self.manifest = json.loads(f.read())
                        continue
                    member_path = os.path.join(tmp, "member.json")
                    with open(member_path, "wb") as dst:
                        shutil.copyfileobj(f, dst, 1 << 20)
                    report = check(info.name, member_path)
                    os.unlink(member_path)
                    if report is not None:
                        report.path = f"{self.path}/{info.name}"
                        reports.append(report)
        except (tarfile.TarError, OSError, ValueError) as e:
            raise InputError(self.path, f"cannot read the archive: {e}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return reports


def verify_archive(path: str, plans: Sequence[Any], *, against: bool = True) -> List[VerifyReport]:
    """One report per rank member (``against``: checked against the rank's input).

    A wrong layout is an error-level report for the archive itself (first in the
    list); :class:`InputError` when the archive cannot be read at all.
    """
    stem = archive_stem(path)
    expected = [member_name(stem, p.rank) for p in plans]
    source = {member_name(stem, p.rank): p.path for p in plans}

    def check(name: str, member: str) -> Optional[VerifyReport]:
        if name not in source:
            return None  # reported by the layout check
        return verify_json(member, against_files([source[name]]) if against else ())

    walk = _Walk(path)
    reports = walk.run(check)
    problem = _layout_problem(path, walk.names, walk.manifest, expected)
    if problem:  # the manifest disagrees with the members: Perfetto would mis-place ranks
        finding = Finding(level="error", code="header_mismatch", message=problem)
        reports.insert(
            0, VerifyReport(path=path, ok=False, errors=[finding], warnings=[], ranks={}, totals={})
        )
    return reports


def is_archive(path: str) -> bool:
    """Whether ``path`` is a TAR (plain or gzip): a Perfetto archive to check by member."""
    try:
        return tarfile.is_tarfile(path)
    except (OSError, tarfile.TarError):
        return False


def verify_archive_file(path: str, against: Sequence[str] = ()) -> VerifyReport:
    """``tracefuse verify ARCHIVE [--against INPUT...]``: the layout (manifest first,
    every member listed once, one machine each), then every member as a merged trace,
    against the inputs that its own ``tracefuse`` header names as its sources. One
    report: findings of a member are prefixed with its name."""
    used: set[str] = set()

    def check(name: str, member: str) -> VerifyReport:
        trailer = trailer_of_file(member)[0] or {}
        tf_any = trailer.get("tracefuse")
        tf: Dict[str, Any] = tf_any if isinstance(tf_any, dict) else {}
        sources = {
            os.path.realpath(str(r.get("source")))
            for r in (tf.get("ranks") or {}).values()
            if isinstance(r, dict)
        }
        mine = [a for a in against if os.path.realpath(a) in sources]
        used.update(mine)
        return verify_json(member, against_files(mine))

    walk = _Walk(path)
    reports = walk.run(check)
    listed = [f.get("path") for f in walk.manifest.get("perfetto_manifest", {}).get("files", [])]
    problem = (
        _layout_problem(path, walk.names, walk.manifest, listed) if listed else f"{path}: no {MANIFEST_NAME}"
    )
    out = _combined(path, reports, problem, list(against))
    unmatched = [a for a in against if a not in used]
    if unmatched:  # an input no member names as its source: the wrong run, or a rank missing
        out.errors.append(
            Finding(
                level="error",
                code="against_unmatched",
                message="--against input is not the source of any member",
                count=len(unmatched),
                examples=[{"input": a} for a in unmatched[:5]],
            )
        )
        out.ok = False
    return out


def _in_member(member: str, f: Finding) -> Finding:
    """A member's finding, named after the member."""
    return dataclasses.replace(f, message=f"{member}: {f.message}")


def _combined(path: str, reports: List[VerifyReport], problem: str, against: List[str]) -> VerifyReport:
    errors: List[Finding] = []
    warnings: List[Finding] = []
    if problem:
        errors.append(Finding(level="error", code="header_mismatch", message=problem))
    ranks: Dict[Any, Dict[str, Any]] = {}
    totals: Dict[str, Any] = {"members": len(reports)}
    for r in reports:
        member = r.path.rsplit("/", 1)[-1]
        errors.extend(_in_member(member, f) for f in r.errors)
        warnings.extend(_in_member(member, f) for f in r.warnings)
        ranks.update(r.ranks)
        for k, v in r.totals.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                totals[k] = totals.get(k, 0) + v
    return VerifyReport(
        path=path,
        ok=not errors,
        errors=errors,
        warnings=warnings,
        ranks=ranks,
        totals=totals,
        against=against,
    )


__all__ = ["is_archive", "verify_archive", "verify_archive_file"]
