"""Ansible's INI inventory format, read into the same shape as a YAML inventory.

Most fleets' inventories are INI files (`[gpu]`, `[gpu:vars]`, `[all:children]`, `host key=value`), so
they are read with ansible-inventory's rules:
- lines before any section are ungrouped hosts; `#` and `;` start comments;
- a host line is split like a shell line; its `key=value` pairs are host variables whose values are read
  as Python literals (`8000` a number, `True` a boolean, `"a b"` a string, `[1, 2]` a list), and text
  that is not a literal stays text; `[group:vars]` values are read the same way (ansible-core does so,
  although its guide says strings);
- a section name is kept as written (`[gpu-nodes]` is gpu-nodes: ansible-core 2.19 no longer rewrites it);
- `[g:children]` may name a group defined by a later section, but every child and every `[g:vars]` must
  end up defined; host names take ranges (`gpu[01:64]`) and a `:port`.
"""

from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.inventory.ranges import expand, split_port
from engine.parsing.yamlfile import MAX_YAML_NODES, remember_written

_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$")
_GROUP_LINE = re.compile(r"^([^:\]\s]+)\s*(?:#.*)?$")


def parse_ini(text: str, path: Path, known_groups: set[str]) -> dict[str, dict]:
    """{group: {'hosts': {host: vars}, 'vars': {...}, 'children': [...]}} in the order the file gives them.

    `known_groups` are groups defined by earlier inventory sources: children and :vars may refer to them.
    """
    parser = _IniParser(path, known_groups)
    for number, raw in enumerate(text.splitlines(), start=1):
        parser.line(number, raw.strip())
    parser.finish()
    remember_written(parser.groups)  # an inventory's values are templates the person wrote, as YAML ones
    return parser.groups


_BLANK = " \t\r\n"
_DQUOTE_ESCAPES = '\\"'  # inside double quotes shlex's posix mode escapes only these


def split_line(line: str) -> list[str]:
    """A host line's words as shlex.split(line, comments=True) gives them (POSIX quotes and backslashes, a
    comment from an unquoted '#'), in one pass: shlex grows each word a character at a time, which made
    one 2 MB line take minutes."""
    tokens: list[str] = []
    buf: list[str] = []
    in_word, i, n = False, 0, len(line)
    while i < n:
        c = line[i]
        if c in _BLANK:
            if in_word:
                tokens.append("".join(buf))
                buf, in_word = [], False
            i += 1
        elif c == "#":  # outside quotes a '#' starts a comment, mid-word too (as shlex's posix mode reads it)
            break
        else:
            in_word = True
            i = _read_piece(line, i, buf)
    if in_word:
        tokens.append("".join(buf))
    return tokens


def _read_piece(line: str, i: int, buf: list[str]) -> int:
    """One character, escape or quoted run of a word at `i` into buf; the index after it."""
    c = line[i]
    if c == "\\":
        if i + 1 >= len(line):
            raise ValueError("No escaped character")
        buf.append(line[i + 1])
        return i + 2
    if c == "'":
        end = line.find("'", i + 1)
        if end < 0:
            raise ValueError("No closing quotation")
        buf.append(line[i + 1:end])
        return end + 1
    if c != '"':
        buf.append(c)
        return i + 1
    i += 1
    while i < len(line):
        c = line[i]
        if c == '"':
            return i + 1
        if c == "\\" and i + 1 >= len(line):
            raise ValueError("No escaped character")
        if c == "\\" and line[i + 1] in _DQUOTE_ESCAPES:
            buf.append(line[i + 1])
            i += 2
        else:
            buf.append(c)
            i += 1
    raise ValueError("No closing quotation")


class _IniParser:
    def __init__(self, path: Path, known_groups: set[str]) -> None:
        self.path = path
        self.groups: dict[str, dict] = {}
        self.defined = set(known_groups) | {"all", "ungrouped"}  # sections that define a group (not :vars)
        self.pending: dict[str, int] = {}  # group named by :children/:vars before it is defined -> line
        self.current, self.state, self.number = "ungrouped", "hosts", 0
        self.values = 0

    def where(self) -> str:
        return f"{self.path}:{self.number}"

    def count_values(self, n: int) -> None:
        """The same bound on values as a YAML inventory's (MAX_YAML_NODES), counted as the lines are read."""
        self.values += n
        if self.values > MAX_YAML_NODES:
            raise UserError(f"{self.where()}: the inventory holds more than {MAX_YAML_NODES:,} values (MAX_YAML_NODES in "
                            "engine/parsing/yamlfile.py), so it is refused; real inventories hold a few thousand. Check that the "
                            "path names the file you meant, or use host ranges (h[1:100]).")

    def group(self, name: str) -> dict:
        return self.groups.setdefault(name, {"hosts": {}, "vars": {}, "children": []})

    def line(self, number: int, line: str) -> None:
        self.number = number
        if not line or line[0] in "#;":
            return
        section = _SECTION.match(line)
        if section:
            self.start_section(section[1], section[2] or "hosts")
        elif line.startswith("[") and line.endswith("]"):
            raise UserError(f"{self.where()}: invalid section '{line}'; write [group], [group:vars] or [group:children] "
                            "without spaces.")
        elif self.state == "hosts":
            self.host_line(line)
        elif self.state == "vars":
            self.vars_line(line)
        else:
            self.child_line(line)

    def start_section(self, raw_name: str, state: str) -> None:
        if state not in ("hosts", "children", "vars"):
            raise UserError(f"{self.where()}: section [{raw_name}:{state}] has an unknown type '{state}'; "
                            "the types are :vars and :children.")
        name = raw_name
        self.current, self.state = name, state
        self.group(name)
        if state == "vars":
            if name not in self.defined:
                self.pending.setdefault(name, self.number)
        else:
            self.defined.add(name)
            self.pending.pop(name, None)

    def host_line(self, line: str) -> None:
        try:
            tokens = split_line(line)
            self.count_values(len(tokens))
        except ValueError as exc:
            raise UserError(f"{self.where()}: cannot read the host line ({exc}); check its quotes.") from None
        if not tokens:
            return
        if tokens[0] == "---" or tokens[0].endswith(":") and not tokens[0].startswith("["):
            raise UserError(f"{self.where()}: '{tokens[0]}' is not a host; is this file YAML? Name it .yaml/.yml "
                            "so it is read as YAML, or write it as INI ([group] then one host per line).")
        name, port = split_port(tokens[0])
        hvars: dict[str, Any] = {} if port is None else {"ansible_port": port}
        key = None
        for number, token in enumerate(tokens[1:], start=2):
            if "=" not in token and key is None:
                raise UserError(f"{self.where()}: expected key=value after the host name, got '{token}'; "
                                "quote values that contain spaces (key=\"a b\").")
            if "=" not in token:  # not quoted: after a value it may be the rest of a secret that held a space
                raise UserError(f"{self.where()}: word {number} of the host line is not key=value (after {key}=..., "
                                "whose value may hold an unquoted space); quote values that contain spaces (key=\"a b\").")
            key, value = token.split("=", 1)
            hvars[key] = parse_value(value)
        hosts = self.group(self.current)["hosts"]
        for host in expand(name, self.where()):
            hosts.setdefault(host, {}).update(hvars)

    def vars_line(self, line: str) -> None:
        self.count_values(1)
        if "=" not in line:  # only the first word: the rest may be a secret written as `key: value`
            first = re.split(r"[\s:]", line.strip(), maxsplit=1)[0][:60]
            raise UserError(f"{self.where()}: expected key=value in [{self.current}:vars], got a line without '=' "
                            f"(starting {first!r}); write {first}=VALUE.")
        key, value = (part.strip() for part in line.split("=", 1))
        self.group(self.current)["vars"][key] = parse_value(value)

    def child_line(self, line: str) -> None:
        match = _GROUP_LINE.match(line)
        if not match:
            raise UserError(f"{self.where()}: expected a group name in [{self.current}:children], got '{line}'.")
        child = match[1]
        children = self.group(self.current)["children"]
        if child not in children:
            children.append(child)
        if child not in self.defined:
            self.pending.setdefault(child, self.number)

    def finish(self) -> None:
        for name, number in self.pending.items():
            raise UserError(f"{self.path}:{number}: group '{name}' is used ([...:children] or [{name}:vars]) but "
                            f"never defined; add a [{name}] section (it may be empty) or fix the name.")


def parse_value(text: str) -> Any:
    """A variable's value as Ansible's INI plugin reads it: a Python literal if it is one, else the text."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    return _plain(value)


def _plain(value: Any) -> Any:
    """Tuples and sets become lists, bytes text, and types a variable cannot hold (complex, ...) their text."""
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if value is Ellipsis or isinstance(value, complex):
        return "..." if value is Ellipsis else str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value
