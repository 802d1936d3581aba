"""``merge --verify`` for a Perfetto archive: every rank member against its input.

The verifier reads JSON traces, not TARs, so each rank member (a complete one-rank
merged trace, see :mod:`tracefuse_stream.write.archive`) is copied, streaming, into a
private temporary file and verified there against the rank's input, exactly as a
``--split-ranks 1`` file would be. The archive's layout is checked first: the manifest
is the first member, lists every rank member once, each on its own machine, and the
archive holds nothing else. A finding is reported under ``ARCHIVE/MEMBER``.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
from typing import Any, Dict, List, Sequence

from tracefuse_stream.errors import InputError
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


def verify_archive(path: str, plans: Sequence[Any], *, against: bool = True) -> List[VerifyReport]:
    """One report per rank member (``against``: checked against the rank's input).

    A wrong layout is an error-level report for the archive itself (first in the
    list); :class:`InputError` when the archive cannot be read at all.
    """
    from tracefuse_stream.verify.check import verify as verify_file

    stem = archive_stem(path)
    expected = [member_name(stem, p.rank) for p in plans]
    source = {member_name(stem, p.rank): p.path for p in plans}
    tmp = tempfile.mkdtemp(prefix=".tracefuse-verify-")
    reports: List[VerifyReport] = []
    names: List[str] = []
    manifest: Dict[str, Any] = {}
    try:
        try:
            with tarfile.open(path, "r|*") as tar:  # a stream: one pass, members in order
                for info in tar:
                    names.append(info.name)
                    f = tar.extractfile(info)
                    if f is None:
                        continue
                    if info.name == MANIFEST_NAME:
                        manifest = json.loads(f.read())
                        continue
                    if info.name not in source:
                        continue  # reported by the layout check
                    member_path = os.path.join(tmp, "member.json")
                    with open(member_path, "wb") as out:
                        shutil.copyfileobj(f, out, 1 << 20)
                    report = verify_file(member_path, against=[source[info.name]] if against else None)
                    report.path = f"{path}/{info.name}"
                    reports.append(report)
                    os.unlink(member_path)
        except (tarfile.TarError, OSError, ValueError) as e:
            raise InputError(path, f"cannot read the archive: {e}") from None
        problem = _layout_problem(path, names, manifest, expected)
        if problem:  # the manifest disagrees with the members: Perfetto would mis-place ranks
            finding = Finding(level="error", code="header_mismatch", message=problem)
            reports.insert(
                0, VerifyReport(path=path, ok=False, errors=[finding], warnings=[], ranks={}, totals={})
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return reports


__all__ = ["verify_archive"]
