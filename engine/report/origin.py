"""Where a task is written, for the `Origin: FILE:LINE:COL` block and its source lines that ansible-core 2.19
prints under a task's `[ERROR]:` line (scripts count the lines they grep, the source lines included). The
engine's tasks know their file and their place in its list ("FILE: task N"), not their line: the file is read
again here (YAML nodes only, nothing constructed) and the task found by its name or its module key."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import yaml

from engine.template.secrets import MASK, is_secret_name

_CACHE: dict[str, list[tuple[int, int, int, str | None, set[str]]]] = {}
_LOCK = threading.Lock()
_SOURCE = re.compile(r"^(?P<path>.+?): task \d+(?:.*: task (?P<inner>\d+))?$")  # "F: task 2 block: task 1"


def _mappings(path: str) -> list[tuple[int, int, int, str | None, set[str]]]:
    """Every mapping that is an item of a sequence in the file: (line, column, place in its list (1-based),
    its `name`, its keys), in file order; nothing when the file does not read as YAML."""
    with _LOCK:
        if path in _CACHE:
            return _CACHE[path]
    found: list[tuple[int, int, int, str | None, set[str]]] = []
    try:
        if Path(path).stat().st_size <= 4_000_000:
            with open(path, encoding="utf-8") as fh:
                for doc in yaml.compose_all(fh, Loader=yaml.SafeLoader):
                    _walk(doc, found)
    except (OSError, yaml.YAMLError, UnicodeDecodeError, RecursionError):
        found = []
    found.sort()
    with _LOCK:
        _CACHE[path] = found
    return found


def _walk(node, found: list) -> None:
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, yaml.SequenceNode):
            for i, item in enumerate(n.value, start=1):
                if isinstance(item, yaml.MappingNode):
                    keys = {k.value for k, _ in item.value if isinstance(k, yaml.ScalarNode)}
                    name = next((v.value for k, v in item.value if isinstance(k, yaml.ScalarNode) and k.value == "name"
                                 and isinstance(v, yaml.ScalarNode)), None)
                    found.append((item.start_mark.line + 1, item.start_mark.column + 1, i, name, keys))
            stack.extend(n.value)
        elif isinstance(n, yaml.MappingNode):
            stack.extend(v for _, v in n.value)


class Locator:
    """Finds the line of each task a run shows, in run order: of the places that fit, the first after the last
    one found in that file (tasks run in file order, a rescue after its block), else the first."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}

    def find(self, source: str | None, name: str, module: str) -> tuple[str, int, int] | None:
        m = _SOURCE.match(source or "")
        if not m or source is None:
            return None
        path = m.group("path")
        index = int(m.group("inner") or source.rsplit(" ", 1)[-1])
        fits = [(line, col) for line, col, place, own, keys in _mappings(path) if place == index and (
            own == name or (own is None and (module in keys or any(k.rsplit(".", 1)[-1] == module for k in keys))))]
        if not fits:
            return None
        last = self._last.get(path, 0)
        line, col = next(((ln, c) for ln, c in fits if ln > last), fits[0])
        self._last[path] = line
        return path, line, col


def origin_lines(path: str, line: int, col: int) -> list[str]:
    """`Origin: FILE:LINE:COL`, a blank line, the target line and the two before it (numbered as Ansible numbers
    them), a `^ column N` marker and a blank line."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = [next(fh, "") for _ in range(line)]
    except OSError:
        return [f"Origin: {path}:{line}:{col}", ""]
    first = max(0, line - 3)
    width = len(str(line))
    out = [f"Origin: {path}:{line}:{col}", ""]
    for number, src in enumerate(text[first:line], start=first + 1):
        src = src.rstrip("\n").replace("\t", " ")[:119 - width]
        out.append(f"{str(number).rjust(width)}{' ' if src else ''}{src}")
    out.append(f"{' ' * width} {' ' * (col - 1)}^ column {col}")
    out.append("")
    return out


_QUOTED_SETTING = re.compile(r"^(\s*\d+\s+(?:-\s+)?)([\w.-]+)(\s*:\s*)(\S.*)$")  # "3   password: x"


def error_origin(exc: BaseException) -> str:
    """The Origin block, a newline first, under a load error that names its task (`task_at`: source, name,
    module; engine/playbook/tasks.py TaskParserError), else nothing. Nothing of the run is known yet to mask
    with, so a quoted `KEY: VALUE` line whose key names a secret shows its value masked."""
    at = getattr(exc, "task_at", None)
    where = Locator().find(*at) if at else None
    if where is None:
        return ""
    lines = origin_lines(os.path.abspath(where[0]), where[1], where[2])
    masked = [m.group(1) + m.group(2) + m.group(3) + MASK if (m := _QUOTED_SETTING.match(line))
              and is_secret_name(m.group(2)) else line for line in lines]
    return "\n".join(["", *masked])
