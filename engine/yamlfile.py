"""Load YAML files with errors that point at file:line:column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from engine.errors import UserError

try:  # the C loader is several times faster; fall back where libyaml is missing
    _Loader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader

_cache: dict[tuple[str, float], Any] = {}


def load_yaml(path: str | Path, what: str = "file") -> Any:
    """Parse a YAML file; a syntax error becomes a UserError naming file:line:column."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: {what} not found; check the path") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read {what}: {exc.strerror}") from None
    key = (str(path.resolve()), path.stat().st_mtime)
    if key in _cache:
        return _cache[key]
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = exc.problem or "invalid YAML"
        context = f" ({exc.context})" if exc.context else ""
        raise UserError(
            f"{where}: malformed YAML: {problem}{context}. Fix the syntax at that line "
            "(indentation, a missing ':' or an unclosed quote are the usual causes)."
        ) from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: malformed YAML: {exc}") from None
    _cache[key] = data
    return data
