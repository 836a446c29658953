"""docs/ANSIBLE.md's table of ansible-core's integration targets: read for the test, written by measure.

The table sits between two marker lines, so the numbers README and docs/ANSIBLE.md state are the ones the test
measured."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "ANSIBLE.md"
BEGIN, END = "<!-- targets table: begin -->", "<!-- targets table: end -->"
_ROW = re.compile(r"^\| (\w+) \| (\d+)[^|]* \| (\d+)(?: \(exit (\d+)\))? \|", re.M)


def documented(doc: Path = DOC) -> dict[str, dict[str, int]]:
    text = doc.read_text()
    table = text[text.index(BEGIN):text.index(END)]
    return {m.group(1): {"ansible": int(m.group(2)), "ours": int(m.group(3)), "ours_rc": int(m.group(4) or 0)}
            for m in _ROW.finditer(table)}


def write(markdown: str, doc: Path = DOC) -> None:
    text = doc.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    doc.write_text(text[:start] + "\n" + markdown + "\n" + text[end:])
