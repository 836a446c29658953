"""A template file's own Jinja settings: a first line `#jinja2: key: value, key: value` (Ansible's in-template
overrides), e.g. `#jinja2: lstrip_blocks: True` or `#jinja2:variable_start_string:'<<', variable_end_string:'>>'`.

The line is dropped from the text and its settings win over the task's (template's trim_blocks, ...), as in
Ansible. Each value is a Python literal read with ast.literal_eval (a string, a boolean, None): never code."""

from __future__ import annotations

import ast

HEADER = "#jinja2:"
KEYS = frozenset({"block_start_string", "block_end_string", "variable_start_string", "variable_end_string",
                  "comment_start_string", "comment_end_string", "line_statement_prefix", "line_comment_prefix",
                  "trim_blocks", "lstrip_blocks", "newline_sequence", "keep_trailing_newline"})
STARTS = {"block_start_string": "{%", "variable_start_string": "{{", "comment_start_string": "{#"}


class OverrideError(ValueError):
    """A `#jinja2:` line Ansible refuses; its message has Ansible's words ("Missing key-value separator", ...)."""


def split_overrides(source: str, options: dict | None) -> tuple[str, dict | None]:
    """The template text without its `#jinja2:` line, and the task's options with that line's settings on top."""
    if not source.startswith(HEADER):
        return source, options
    eol = source.find("\n")
    if eol == -1:
        raise OverrideError(f"Syntax error in template: Missing newline after {HEADER!r} override.")
    merged = {**(options or {}), **_pairs(source[len(HEADER):eol])}
    starts = [merged.get(key, default) for key, default in STARTS.items()]
    if len(set(starts)) != len(starts):
        raise OverrideError("Syntax error in template: Block, variable and comment start strings must be different.")
    return source[eol + 1:], merged


def _pairs(line: str) -> dict:
    """`key: value, key: value` as a mapping, with Ansible's refusals."""
    found = {}
    for pair in line.split(","):
        if not pair.strip():
            raise OverrideError(f"Syntax error in template: Empty {HEADER!r} override pair not allowed.")
        if ":" not in pair:
            raise OverrideError(f"Syntax error in template: Missing key-value separator `:` in {HEADER!r} override "
                                f"pair {pair!r}.")
        key, value = (part.strip() for part in pair.split(":", 1))
        if key not in KEYS:
            raise OverrideError(f"Syntax error in template: Invalid {HEADER!r} override key {key!r}.")
        try:
            found[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise OverrideError(f"Syntax error in template: the {HEADER!r} override {key} needs a quoted string, "
                                f"True, False or None, not {value!r}.") from None
    return found
