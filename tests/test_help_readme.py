"""``--help`` and the README's option tables say the same (issue 23 item 4).

Every subcommand's ``--help`` is parsed (its option lines: flags, metavar, ``{a,b}``
choices) and so is the README's table under "`COMMAND` options:" (the flags in the
first cell's code spans, and the ``a|b`` choices written after a flag). Both ways:
each option of ``--help`` is in the table with the same choices, and each flag of the
table is an option of the command. A new option goes into both, or this fails.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Tuple

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
COMMANDS = ("merge", "info", "verify", "open", "report", "diff")

#: one option entry of --help: its flags and its choices (None: no fixed choices)
Option = Tuple[FrozenSet[str], Optional[FrozenSet[str]]]


def _choices(word: str) -> Optional[FrozenSet[str]]:
    """``{a,b}`` (argparse choices) or ``N|latest|all`` (a metavar listing them)."""
    word = word.replace("\\|", "|")
    if word.startswith("{") and word.endswith("}"):
        return frozenset(word[1:-1].split(","))
    if "|" in word:
        return frozenset(word.split("|"))
    return None


def help_options(command: str, monkeypatch: pytest.MonkeyPatch) -> List[Option]:
    """The options ``tracefuse COMMAND --help`` prints (help and positionals aside)."""
    from tracefuse_stream.cli.app import main

    monkeypatch.setenv("COLUMNS", "300")  # one option per line, nothing wrapped
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    text = out.getvalue()
    section = text[text.index("\noptions:\n") :]
    options: List[Option] = []
    for line in section.splitlines()[1:]:
        if not line.startswith("  -"):
            continue  # a help text's continuation line
        spec = re.split(r"\s{2,}", line.strip())[0]  # "-o OUTPUT, --output OUTPUT"
        flags, choices = set(), None
        for part in re.split(r", (?=-)", spec):
            flag, *meta = part.split()
            flags.add(flag)
            choices = choices or (_choices(meta[0]) if meta else None)
        if flags & {"-h", "--help"}:
            continue
        options.append((frozenset(flags), choices))
    return options


def readme_options(command: str) -> Dict[str, Optional[FrozenSet[str]]]:
    """``{flag: choices}`` from the README's table under "`COMMAND` options"."""
    text = README.read_text()
    m = re.search(rf"^`{command}` options[^\n]*:\n\n((?:\|[^\n]*\n)+)", text, re.M)
    assert m, f"README has no table under '`{command}` options ...:'"
    flags: Dict[str, Optional[FrozenSet[str]]] = {}
    for row in m.group(1).splitlines()[2:]:  # after the header and the --- row
        first = row.split(" | ")[0].lstrip("| ")
        for span in re.findall(r"`([^`]+)`", first):
            words = span.split()
            for i, w in enumerate(words):
                if w.startswith("-"):
                    nxt = words[i + 1] if i + 1 < len(words) else ""
                    flags[w] = _choices(nxt) if nxt else None
    return flags


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_option_is_in_the_readme_table_with_its_choices(command, monkeypatch):
    table = readme_options(command)
    opts = help_options(command, monkeypatch)
    assert opts, f"no options parsed from {command} --help"
    for flags, choices in opts:
        named = [f for f in flags if f in table]
        assert named, f"{command} {'/'.join(sorted(flags))} is in --help but not in the README's table"
        for f in named:
            if choices is not None or table[f] is not None:
                assert table[f] == choices, (command, f, table[f], choices)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_readme_table_flag_is_an_option_of_the_command(command, monkeypatch):
    known = {f: c for flags, c in help_options(command, monkeypatch) for f in flags}
    for flag, choices in readme_options(command).items():
        assert flag in known, f"README's `{command}` table names {flag}, which {command} --help does not have"
        if choices is not None:
            assert known[flag] == choices, (command, flag, choices, known[flag])


def test_the_parsers_see_real_differences(monkeypatch):
    """The comparison can fail: a choice or a flag the other side lacks is caught."""
    table = readme_options("merge")
    assert table["--args"] == frozenset({"all", "slim", "none"})
    assert table["--cycle"] == frozenset({"N", "latest", "all"})
    opts = dict((min(f), c) for f, c in help_options("merge", monkeypatch))
    assert opts["--align"] == frozenset({"base", "collectives"})
    assert "--no-such-option" not in table
    assert _choices("{auto,order}") != _choices("auto\\|order\\|name")
