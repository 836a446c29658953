"""Jinja2 templating in a sandbox, with StrictUndefined and lazily rendered variables.

Variables may refer to other variables (`vllm_log: "{{ dfp_root }}/logs/vllm.log"`); they are rendered
when read, so the order of definition does not matter and an undefined name is reported with the
task that needed it. A value that is exactly one expression (`"{{ ids }}"`) keeps its type.

Trust rule: templates come only from playbooks, roles and variable files (and -e). What a host returns
(registered results, facts, set_fact values once rendered, loop items) is data: it sits in a data layer
of the variables and is never rendered again, whatever `{{` it contains (Ansible's "unsafe" rule).
Every render runs in Jinja2's ImmutableSandboxedEnvironment with size limits, so even a trusted
template cannot reach Python internals or exhaust the control node's memory.
"""

from __future__ import annotations

import re
from collections import ChainMap
from collections.abc import Mapping
from typing import Any

import jinja2
from jinja2 import Undefined

from engine.errors import TaskError
from engine.template.bounds import (
    bounded_output,
    render_budget,
    tick,
)
from engine.template.markers import is_template, trailing_newlines_kept
from engine.template.overrides import split_overrides
from engine.template.secrets import has_value, is_secret_name, secret_leaves
from engine.template.taint import CLEAN, Taint, close_frame, note, open_frame

_SINGLE_EXPR = re.compile(r"\A\{\{\s*((?:(?!\{\{|\}\}).)*?)\s*\}\}\Z", re.S)  # "{{ x }}\n" is text, as Ansible's


class LazyVars(Mapping):
    """A read-only view over layered variables that renders each template value when it is read.

    `layers` is a ChainMap (first map wins). Maps listed in `data` hold data, not templates (registered
    results, facts, loop items): their values are returned as they are, never rendered.
    """

    # What a template may call on a view (engine/templating.Sandbox): the Mapping reads, nothing else.
    SANDBOX_ATTRS = frozenset({"get", "keys", "items", "values"})

    def __init__(self, layers: Mapping[str, Any], templar: Templar, data: tuple = (), clean: tuple = ()) -> None:
        self._layers = layers
        self._templar = templar
        self._data_ids = {id(m) for m in data}
        self._clean_ids = {id(m) for m in clean}  # data layers of the engine's own words (magic names)
        self._done: dict[str, Any] = {}
        self._done_taint: dict[str, Taint] = {}
        self._busy: set[str] = set()
        self.touched: set[str] = set()  # every name read through this view
        self.origin: Any = None  # the play and task it renders for (engine/template/lookups.py Origin), set by engine/run/variables.py
        # What the data layers carry (engine/template/taint.py): a name's own record (registered, set_fact, loop item),
        # else the answer of the host whose data the view holds.
        self.provenance: Mapping[str, Taint] = {}
        self.host_taint = Taint(("a host",))
        self.masking: Any = None  # a message rendered again for display: how a secret shows (engine/template/secrets.py Display)

    @property
    def templar(self) -> Templar:
        return self._templar

    @property
    def rendering(self) -> frozenset[str]:
        """The variables whose values are being rendered right now (a lookup inside one of them lands in it)."""
        return frozenset(self._busy)

    def with_overlay(self, overlay: dict, masking: Any = None) -> LazyVars:
        """The same variables with `overlay`'s names (data, never rendered) read first: a message rendered
        again with its secrets replaced by the mask, the variables a looked-up template is given."""
        maps = getattr(self._layers, "maps", [self._layers])
        view = LazyVars(ChainMap(overlay, *maps), self._templar)
        view._data_ids = self._data_ids | {id(overlay)}
        view._clean_ids = self._clean_ids | {id(overlay)}
        view.origin, view.provenance, view.host_taint = self.origin, self.provenance, self.host_taint
        view.masking = masking or self.masking
        return view

    def _layer(self, key: str) -> Mapping:
        for m in getattr(self._layers, "maps", (self._layers,)):
            if key in m:
                return m
        raise KeyError(key)

    def is_data(self, key: str) -> bool:
        """True when the value that `key` reads comes from a data layer (a host, not a template author)."""
        try:
            return id(self._layer(key)) in self._data_ids
        except KeyError:
            return False

    def taint_of(self, key: str) -> Taint:
        """What reading `key` carries (engine/template/taint.py)."""
        frame = open_frame()
        try:
            self[key]
        finally:
            close_frame(frame)
        return frame

    def _data_taint(self, key: str, layer: Mapping, raw: Any) -> Taint:
        taint = self.provenance.get(key)
        if taint is None:
            taint = CLEAN if id(layer) in self._clean_ids else self.host_taint
        if not taint.secret and is_secret_name(key) and has_value(raw):
            taint = Taint(taint.hosts, True, taint.names)
        return taint.named(key)

    def __getitem__(self, key: str) -> Any:
        self.touched.add(key)
        if key in self._done:
            note(self._done_taint[key])
            return self._done[key]
        layer = self._layer(key)
        raw = layer[key]
        if id(layer) in self._data_ids:
            note(self._data_taint(key, layer, raw))
            return raw
        if key in self._busy:
            raise TaskError(f"variable '{key}' refers to itself (through {', '.join(sorted(self._busy))})")
        self._busy.add(key)
        frame = open_frame()
        try:
            value = self._templar.render_value(raw, self)
            if is_secret_name(key) and has_value(value):
                frame.secret = True
        finally:
            self._busy.discard(key)
            close_frame(frame)
        self._done[key] = value
        self._done_taint[key] = frame
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

    def __init__(self, env: jinja2.Environment) -> None:
        self.env = env  # engine.template.environment.environment(), or one with a search path
        self._compiled: dict[str, Any] = {}
        self._exprs: dict[str, Any] = {}

    def view(self, layers: Mapping[str, Any], data: tuple = (), clean: tuple = ()) -> LazyVars:
        return LazyVars(layers, self, data, clean)

    def _scope(self, variables: Mapping) -> Mapping:
        """Variables first, then the sandbox's globals (range, dict, lipsum...): no copy of the variables."""
        return ChainMap(variables, self.env.globals)  # type: ignore[arg-type]

    def _template(self, source: str):
        t = self._compiled.get(source)
        if t is None:
            t = self._compiled[source] = self.env.from_string(source)
        return t

    def render_string(self, source: str, variables: Mapping) -> Any:
        if not is_template(source):
            return source
        expression = self._one_expression(source)
        if expression is not None:
            return self.evaluate(expression, variables)
        template = self._template(source)
        with render_budget():
            ctx = template.new_context(self._scope(variables), shared=True)
            return trailing_newlines_kept(source, bounded_output(template.root_render_func(ctx)))

    def _one_expression(self, source: str) -> str | None:
        """The expression of a template that is one `{{ expr }}` alone, which keeps its value's type; braces inside
        its string constants (`{{ x == "{{ y }}" }}`) do not make it text, as Jinja's lexer reads it."""
        m = _SINGLE_EXPR.match(source)
        if m and "{%" not in source and not source.startswith("{{-") and not source.endswith("-}}"):
            return m.group(1)
        if not (source.startswith("{{") and source.endswith("}}")):
            return None
        try:
            tokens = [t for t in self.env.lexer.tokeniter(source, None) if t[1] != "whitespace"]
        except jinja2.TemplateSyntaxError:
            return None  # its error comes from the render, in the words every template's has
        kinds = [kind for _, kind, _ in tokens]
        if kinds[0] != "variable_begin" or kinds[-1] != "variable_end" or kinds.count("variable_begin") != 1:
            return None
        return source[len(tokens[0][2]):len(source) - len(tokens[-1][2])]

    def render_value(self, value: Any, variables: Mapping) -> Any:
        """Render strings inside `value`; a string rendered from a secret joins the run's secrets (engine/template/taint.py)."""
        if isinstance(value, str):
            return self._tracked(self.render_string, value, variables, True)[0] if is_template(value) else value
        if isinstance(value, dict):
            return {self.render_value(k, variables): self.render_value(v, variables) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.render_value(v, variables) for v in value]
        return value

    def render_tracked(self, value: Any, variables: Mapping) -> tuple[Any, Taint]:
        """`value` rendered, and what the render read: the hosts whose answers, whether a secret."""
        return self._tracked(self.render_value, value, variables, False)

    @staticmethod
    def _tracked(render, value: Any, variables: Mapping, keep: bool) -> tuple[Any, Taint]:
        """render(value, variables) in a taint frame of its own (engine/template/taint.py); with `keep`, what it gives joins
        the secrets when it read one."""
        frame = open_frame()
        try:
            out = render(value, variables)
        finally:
            close_frame(frame)
        if keep and frame.secret:
            keep_secret(variables, out)
        return out, frame

    def evaluate(self, expression: Any, variables: Mapping) -> Any:
        """Evaluate a bare Jinja2 expression (as in `when:`) and return its native value."""
        if not isinstance(expression, str):
            return expression
        expr = self._exprs.get(expression)
        if expr is None:
            expr = self._exprs[expression] = self.env.compile_expression(expression, undefined_to_none=False)
        template = expr._template  # the compiled `result = <expr>` template
        with render_budget():
            ctx = template.new_context(self._scope(variables), shared=True)  # type: ignore[arg-type]  # any Mapping works
            for _ in template.root_render_func(ctx):
                tick()
        result = ctx.vars["result"]
        if isinstance(result, Undefined):
            result._fail_with_undefined_error()
        if isinstance(result, LazyVars):
            return dict(result)
        return result

    def evaluate_tracked(self, expression: Any, variables: Mapping) -> tuple[Any, Taint]:
        """A bare expression's value and what it read; a value computed from a secret joins the secrets."""
        return self._tracked(self.evaluate, expression, variables, True)

    def render_file(self, path: str, variables: Mapping, options: dict | None = None, loader: Any = None) -> str:
        """A template file; `options` are Jinja environment settings for this one (template's trim_blocks,
        lstrip_blocks, newline_sequence, block_start_string, ...), the sandbox kept; `loader` finds the files its
        {% include %} and {% import %} name (engine/template/loader.py)."""
        with open(path, encoding="utf-8") as fh:
            return self.render_text(fh.read(), variables, options, loader)

    def render_text(self, source: str, variables: Mapping, options: dict | None = None, loader: Any = None) -> str:
        """A whole template as text, even when it is one expression (a file's trailing newline is kept). It renders
        in a taint frame of its own, so its loader knows whether a host's answer named a file it pulls in. A first
        line `#jinja2: ...` sets its own options (engine/template/overrides.py)."""
        source, options = split_overrides(source, options)
        settings = {**(options or {}), **({"loader": loader} if loader is not None else {})}
        template = self.env.overlay(**settings).from_string(source) if settings else self._template(source)
        frame = open_frame()
        try:
            with render_budget():
                ctx = template.new_context(self._scope(variables), shared=True)  # type: ignore[arg-type]  # any Mapping works
                return trailing_newlines_kept(source, bounded_output(template.root_render_func(ctx)))
        finally:
            close_frame(frame)


def keep_secret(variables: Mapping, value: Any) -> None:
    """What a render that read a secret gave is a secret too (masked wherever shown), however it was transformed:
    the whole text, not only the secret inside it. A mapping's secret-named leaves stand for it when it has some
    (`creds` shown whole: `user` stays readable); a number or a truth computed from a secret (a length, a
    comparison) is not its text."""
    secrets = getattr(getattr(variables, "origin", None), "secrets", None)
    if secrets is None or not isinstance(value, (str, dict, list, tuple)) or getattr(variables, "masking", False):
        return
    if isinstance(value, (dict, list, tuple)):
        value = secret_leaves(value) or value
    secrets.add(value, derived=True)
