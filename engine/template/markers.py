"""What every stage may ask of a value without importing Jinja2: is it a template, is it typed text (never one),
its truth as Ansible reads it; and the small text rules of rendering (trailing newlines, an undefined name)."""

from __future__ import annotations

import re
from typing import Any

from engine.parsing.yamlfile import Unsafe  # the class lives where YAML makes it (!unsafe)


def to_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def is_template(value: str) -> bool:
    return ("{{" in value or "{%" in value) and not isinstance(value, Unsafe)




def trailing_newlines_kept(source: str, out: str) -> str:
    """As Ansible's templating: the text ends in at least as many line breaks as the template did (trim_blocks
    takes the one after a closing `{% endfor %}`; Ansible gives it back)."""
    missing = (len(source) - len(source.rstrip("\n"))) - (len(out) - len(out.rstrip("\n")))
    return out + "\n" * missing if missing > 0 else out


def undefined_name(exc: Exception) -> str | None:
    """The variable name in a Jinja2 'X is undefined' message, if there is one."""
    m = re.search(r"'([^']+)' is undefined", str(exc))
    if m:
        return m.group(1)
    m = re.search(r"has no attribute '([^']+)'", str(exc))
    return m.group(1) if m else None
