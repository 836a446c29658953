"""Requirement strings as the pip task reads them (library/pip.py): name[extras] with version specifiers, split as
Ansible's pip splits a list (`django>1.11,<2` or `['django>1.11', '<2']` is one requirement), and whether a
`pip list --format=freeze` line satisfies one: what check mode decides from. Versions are compared as PEP 440's
release numbers (a pre-release suffix ranks below its release); a name that is no plain requirement (a URL, a
path, a VCS spec) is never satisfied, as Ansible's. Standard library only (the host may lack `packaging`).
"""

from __future__ import annotations

import re

OPERATORS = ("===", "~=", "==", "!=", "<=", ">=", "<", ">")
NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")
SPEC = re.compile(r"^\s*(===|~=|==|!=|<=|>=|<|>)\s*([^\s,;]+)\s*$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def join_names(names: list) -> list[str]:
    """A list of names and stray specifiers regrouped into requirements (Ansible's _recover_package_name)."""
    parts = [p for item in names for p in str(item).split(",")]
    out: list[str] = []
    for part in parts:
        if out and part.lstrip().startswith(OPERATORS):
            out[-1] = f"{out[-1]},{part.strip()}"
        else:
            out.append(part.strip())
    return [p for p in out if p]


class Requirement:
    """One requirement: its canonical name and specifiers, or `plain` false when it is a URL, path or VCS spec."""

    def __init__(self, text: str, version: str | None = None) -> None:
        self.text, self.plain, self.name, self.specs = text, False, text, []
        if version:
            version = version.lstrip()
            text = f"{text}=={version}" if version[:1].isdigit() else f"{text} {version}"
            self.text = text
        match = NAME.match(text)
        if not match or "/" in text or "://" in text:
            return
        rest = match.group(3).strip()
        specs = []
        for piece in filter(None, (p.strip() for p in rest.split(","))):
            spec = SPEC.match(piece)
            if spec is None:
                return
            specs.append((spec.group(1), spec.group(2)))
        self.plain, self.name, self.specs = True, canonical(match.group(1)), specs

    def __str__(self) -> str:
        return self.text

    def satisfied_by(self, version: str) -> bool:
        return self.plain and all(_holds(op, version, wanted) for op, wanted in self.specs)


def _key(version: str) -> tuple:
    """A version's sort key: its release numbers, then 0 for a final release and -1 for a pre-release (1.0rc1 < 1.0)."""
    main = re.match(r"^v?(\d+(?:\.\d+)*)(.*)$", version.strip().lower())
    if not main:
        return ((), 0, version)
    numbers = tuple(int(n) for n in main.group(1).split("."))
    while numbers and numbers[-1] == 0:
        numbers = numbers[:-1]
    tail = main.group(2)
    rank = 0 if not tail or tail.startswith(("+", ".post", "post")) else -1
    return (numbers, rank, tail)


def _holds(op: str, have: str, wanted: str) -> bool:
    if wanted.endswith(".*") and op in ("==", "!="):
        prefix = _key(wanted[:-2])[0]
        same = _key(have)[0][:len(prefix)] == prefix
        return same if op == "==" else not same
    a, b = _key(have), _key(wanted)
    if op == "~=":
        release = _key(wanted)[0]
        return a >= b and a[0][:max(len(release) - 1, 1)] == release[:max(len(release) - 1, 1)]
    return {"==": a == b, "===": have == wanted, "!=": a != b, "<=": a <= b, ">=": a >= b, "<": a < b,
            ">": a > b}[op]


def installed(freeze_lines: list[str]) -> dict[str, str]:
    """{canonical name: version} of `pip list --format=freeze` (or `pip freeze`) lines."""
    out = {}
    for line in freeze_lines:
        if "==" in line:
            name, _, version = line.partition("==")
            out[canonical(name.strip())] = version.strip()
    return out


def present(req: Requirement, have: dict[str, str]) -> bool:
    return req.plain and req.name in have and req.satisfied_by(have[req.name])
