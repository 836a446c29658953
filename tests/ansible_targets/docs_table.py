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


def totals(table: dict[str, dict[str, int]]) -> dict[str, int]:
    """What README states of the table: the tasks each tool passes and the targets ours passes whole."""
    return {"ansible": sum(r["ansible"] for r in table.values()), "ours": sum(r["ours"] for r in table.values()),
            "whole": sum(1 for r in table.values() if r["ours_rc"] == 0 and r["ours"] == r["ansible"])}


def readme_claim(text: str) -> dict[str, int]:
    """README's sentence "Of the N tasks ansible-playbook passes, this tool passes M (P %); K of the 14 targets
    pass whole", as numbers."""
    flat = " ".join(text.split())
    m = re.search(r"Of the ([\d,]+) tasks ansible-playbook passes, this tool passes ([\d,]+) \(([\d.]+) ?%\); (\d+) "
                  r"of the (\d+) targets pass whole", flat)
    if not m:
        raise AssertionError("README.md has no sentence 'Of the N tasks ansible-playbook passes, this tool passes M "
                             "(P %); K of the 14 targets pass whole'")
    return {"ansible": int(m.group(1).replace(",", "")), "ours": int(m.group(2).replace(",", "")),
            "whole": int(m.group(4)), "percent_x10": round(float(m.group(3)) * 10), "targets": int(m.group(5))}


_CLAIM = re.compile(r"(Of\s+the\s+)(\S+)(\s+tasks\s+ansible-playbook\s+passes,\s+this\s+tool\s+passes\s+)(\S+)(\s+\()"
                    r"([\d.A-Z]+)(\s*%\);\s+)(\S+)(\s+of\s+the\s+)(\d+)(\s+targets\s+pass\s+whole)")


def write_readme(sums: dict[str, int], readme: Path = DOC.parent.parent / "README.md") -> None:
    """Put the table's sums into README's sentence, its line breaks kept."""
    percent = f"{100 * sums['ours'] / sums['ansible']:.1f}" if sums["ansible"] else "0"

    def numbers(m: re.Match) -> str:
        parts = list(m.groups())
        parts[1], parts[3], parts[5], parts[7] = f"{sums['ansible']:,}", f"{sums['ours']:,}", percent, str(sums["whole"])
        return "".join(parts)

    text = readme.read_text()
    new, count = _CLAIM.subn(numbers, text)
    if count != 1:
        raise AssertionError("README.md: the sentence 'Of the N tasks ansible-playbook passes ...' was not found once")
    readme.write_text(new)
