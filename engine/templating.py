"""Jinja2 templating with StrictUndefined and lazily rendered variables.

Variables may refer to other variables (`vllm_log: "{{ dfp_root }}/logs/vllm.log"`); they are rendered
when read, so the order of definition does not matter and an undefined name is reported with the
task that needed it. A value that is exactly one expression (`"{{ ids }}"`) keeps its type.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping
from typing import Any

import jinja2
from jinja2 import StrictUndefined, Undefined
from jinja2.utils import concat

from engine.errors import TaskError

_SINGLE_EXPR = re.compile(r"^\{\{\s*((?:(?!\{\{|\}\}).)*?)\s*\}\}$", re.S)


def to_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def _regex_search(value: str, pattern: str, group: int = 0) -> str | None:
    m = re.search(pattern, str(value))
    return m.group(group) if m else None


def _mandatory(value: Any, msg: str | None = None) -> Any:
    if isinstance(value, Undefined):
        raise jinja2.UndefinedError(msg or "mandatory variable is undefined")
    return value


def make_environment(searchpath: list[str] | None = None) -> jinja2.Environment:
    env = jinja2.Environment(
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        loader=jinja2.FileSystemLoader(searchpath or []),
        autoescape=False,
    )
    env.filters.update(
        to_json=lambda v, **kw: json.dumps(v, **kw),
        to_nice_json=lambda v, indent=2: json.dumps(v, indent=indent, sort_keys=True),
        from_json=json.loads,
        bool=to_bool,
        basename=os.path.basename,
        dirname=os.path.dirname,
        expanduser=os.path.expanduser,
        quote=lambda v: shlex.quote(str(v)),
        regex_search=_regex_search,
        regex_replace=lambda v, p, r="": re.sub(p, r, str(v)),
        mandatory=_mandatory,
        type_debug=lambda v: type(v).__name__,
    )
    env.tests.update(
        success=lambda r: isinstance(r, Mapping) and not r.get("failed"),
        failed=lambda r: isinstance(r, Mapping) and bool(r.get("failed")),
        changed=lambda r: isinstance(r, Mapping) and bool(r.get("changed")),
        skipped=lambda r: isinstance(r, Mapping) and bool(r.get("skipped")),
    )
    return env


_ENV: jinja2.Environment | None = None


def environment() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        _ENV = make_environment()
    return _ENV


def is_template(value: str) -> bool:
    return "{{" in value or "{%" in value


class LazyVars(Mapping):
    """A read-only view over layered variables that renders each value when it is read."""

    def __init__(self, layers: Mapping[str, Any], templar: Templar) -> None:
        self._layers = layers
        self._templar = templar
        self._done: dict[str, Any] = {}
        self._busy: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        if key in self._done:
            return self._done[key]
        raw = self._layers[key]
        if key in self._busy:
            raise TaskError(f"variable '{key}' refers to itself (through {', '.join(sorted(self._busy))})")
        self._busy.add(key)
        try:
            value = self._templar.render_value(raw, self)
        finally:
            self._busy.discard(key)
        self._done[key] = value
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._layers

    def __iter__(self):
        return iter(self._layers)

    def __len__(self) -> int:
        return len(self._layers)

    def raw(self) -> Mapping[str, Any]:
        return self._layers


class Templar:
    """Render strings, nested structures and bare expressions against a LazyVars view."""

    def __init__(self, env: jinja2.Environment | None = None) -> None:
        self.env = env or environment()
        self._compiled: dict[str, Any] = {}
        self._exprs: dict[str, Any] = {}

    def view(self, layers: Mapping[str, Any]) -> LazyVars:
        return LazyVars(layers, self)

    def _template(self, source: str):
        t = self._compiled.get(source)
        if t is None:
            t = self._compiled[source] = self.env.from_string(source)
        return t

    def render_string(self, source: str, variables: Mapping) -> Any:
        if not is_template(source):
            return source
        m = _SINGLE_EXPR.match(source)
        if m and "{%" not in source:
            return self.evaluate(m.group(1), variables)
        template = self._template(source)
        ctx = template.new_context(variables, shared=True)
        return concat(template.root_render_func(ctx))

    def render_value(self, value: Any, variables: Mapping) -> Any:
        if isinstance(value, str):
            return self.render_string(value, variables)
        if isinstance(value, dict):
            return {self.render_value(k, variables): self.render_value(v, variables) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.render_value(v, variables) for v in value]
        return value

    def evaluate(self, expression: Any, variables: Mapping) -> Any:
        """Evaluate a bare Jinja2 expression (as in `when:`) and return its native value."""
        if not isinstance(expression, str):
            return expression
        expr = self._exprs.get(expression)
        if expr is None:
            expr = self._exprs[expression] = self.env.compile_expression(expression, undefined_to_none=False)
        template = expr._template  # the compiled `result = <expr>` template
        ctx = template.new_context(variables, shared=True)
        for _ in template.root_render_func(ctx):
            pass
        result = ctx.vars["result"]
        if isinstance(result, Undefined):
            result._fail_with_undefined_error()
        if isinstance(result, LazyVars):
            return dict(result)
        return result

    def render_file(self, path: str, variables: Mapping) -> str:
        with open(path, encoding="utf-8") as fh:
            source = fh.read()
        template = self._template(source)
        ctx = template.new_context(variables, shared=True)
        return concat(template.root_render_func(ctx))


def undefined_name(exc: Exception) -> str | None:
    """The variable name in a Jinja2 'X is undefined' message, if there is one."""
    m = re.search(r"'([^']+)' is undefined", str(exc))
    if m:
        return m.group(1)
    m = re.search(r"has no attribute '([^']+)'", str(exc))
    return m.group(1) if m else None
