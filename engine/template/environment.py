"""The Jinja2 environment every template renders in: Jinja2's immutable sandbox with bounds on `*`, `**` and
`range`, Ansible's filters and tests, and lookup()/query() (engine/template/lookups.py).

Built once per process (`environment()`); the template action builds one with its role's search path."""

from __future__ import annotations

import datetime
import functools
from collections import ChainMap
from typing import Any

import jinja2
from jinja2 import StrictUndefined, Undefined
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import missing

from engine.template import filters_data, filters_numbers, filters_paths, filters_text, tests_ansible
from engine.template.bounds import (
    BoundedRange,
    TemplateRefused,
    bound_filters,
    check_format,
    check_method,
    check_power,
    tick,
)
from engine.template.lookups import install
from engine.template.markers import to_bool
from engine.template.secrets import has_value, is_secret_name
from engine.template.taint import note_secret
from engine.template.versions import version_test


def _mandatory(value: Any, msg: str | None = None) -> Any:
    """Ansible's `mandatory`: an undefined value fails with `msg`, or Ansible's message naming the variable."""
    if isinstance(value, Undefined):
        name = getattr(value, "_undefined_name", None)
        raise jinja2.UndefinedError(msg or f"Mandatory variable {f'{name!r} ' if name else ''}not defined.")
    return value


# Limits of the sandbox: the largest string or list a `*` may build, the largest power, the longest range.
MAX_SEQUENCE = 1_000_000
MAX_EXPONENT = 1_000
MAX_RANGE = 100_000


# TemplateRefused (a template tried something the sandbox forbids) lives with the other bounds.


class LazyContext(Context):
    """A render's context that hands an {% include %} or {% import ... with context %} the variables as a view, not
    a copy: Jinja's dict() of them would render every variable, and one nobody reads may be undefined (Ansible
    renders only what the included template reads)."""

    def get_all(self) -> Any:
        if self.vars and self.parent:
            return ChainMap(self.vars, self.parent)
        return super().get_all()

    def resolve_or_missing(self, key: str) -> Any:
        """A variable whose own template reads an undefined name is undefined where a template reads it (`x is
        undefined`, `x | default(...)` work; using it fails naming the missing name), as Ansible's since 2.14."""
        try:
            return super().resolve_or_missing(key)
        except jinja2.UndefinedError as exc:
            return self.environment.undefined(hint=str(exc), name=key)


class LazyTemplate(jinja2.Template):
    """A template whose included render layers the includer's local names over its variables (Jinja copies them)."""

    def new_context(self, vars: Any = None, shared: bool = False, locals: Any = None) -> Context:  # noqa: A002 - Jinja's names
        if shared and locals and vars is not None:
            kept = {k: v for k, v in locals.items() if v is not missing}
            layered: Any = ChainMap(kept, vars)  # read as a Mapping only
            return self.environment.context_class(self.environment, layered, self.name, self.blocks,
                                                  globals=self.globals)
        return super().new_context(vars, shared, locals)


class Sandbox(ImmutableSandboxedEnvironment):
    """Jinja2's immutable sandbox plus bounds on `*`, `**` and `range` (templates are text, not programs)."""

    intercepted_binops = frozenset({"*", "**", "%"})
    context_class = LazyContext
    template_class = LazyTemplate

    def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:
        tick()
        if operator == "%":
            check_format(left, "'%' formatting")
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(times, int) and len(seq) * times > MAX_SEQUENCE:
                    raise TemplateRefused(
                        f"the sandbox refuses to build a {type(seq).__name__} of {len(seq) * times:,} items with '*' "
                        f"(limit {MAX_SEQUENCE:,})"
                    )
        if operator == "**" and isinstance(right, (int, float)) and abs(right) > MAX_EXPONENT:
            raise TemplateRefused(f"the sandbox refuses '**' with an exponent of {right} (limit {MAX_EXPONENT})")
        if operator == "**":
            check_power(left, right)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context, __obj, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - Jinja's signature
        """Every call a template makes: the deadline, and a str method that widens text checked first."""
        tick()
        check_method(__obj, args, kwargs)
        return super().call(__context, __obj, *args, **kwargs)

    def wrap_str_format(self, value: Any) -> Any:
        """str.format / format_map as the sandbox runs them (Jinja wraps both at access): widths checked first."""
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        check_format(value.__self__, f"str.{value.__name__}")
        return wrapped

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        """Variable views (LazyVars, hostvars) show templates their Mapping reads only: never their layers
        (`raw()` would bypass rendering and secret masking) or their bookkeeping."""
        allowed = getattr(type(obj), "SANDBOX_ATTRS", None)
        if allowed is not None and attr not in allowed:
            return False
        return super().is_safe_attribute(obj, attr, value)

    def getattr(self, obj: Any, attribute: str) -> Any:
        """`view.name` on a variable view is the variable `name` (even `raw` or `keys`), as `view['name']`; an
        attribute of an undefined value is that undefined value (`a.b.c | default(1)`, as Ansible's)."""
        if isinstance(obj, Undefined):
            return obj
        allowed = getattr(type(obj), "SANDBOX_ATTRS", None)
        if allowed is not None and attribute not in allowed:
            try:
                return obj[attribute]
            except (TypeError, LookupError):
                return self.undefined(obj=obj, name=attribute)
        return _noted(attribute, super().getattr(obj, attribute))

    def getitem(self, obj: Any, argument: Any) -> Any:
        """`creds['password']`, `creds.password`, map(attribute='password'): a secret-named key's value is a secret.
        An item of an undefined value is that undefined value, as an attribute of one."""
        if isinstance(obj, Undefined):
            return obj
        return _noted(argument, super().getitem(obj, argument))


def _noted(key: Any, value: Any) -> Any:
    if isinstance(key, str) and not isinstance(value, Undefined) and is_secret_name(key) and has_value(value):
        note_secret()
    return value


def _bounded_range(*args: int) -> BoundedRange:
    r = range(*args)
    if len(r) > MAX_RANGE:
        raise TemplateRefused(f"the sandbox refuses range() of {len(r):,} items (limit {MAX_RANGE:,})")
    return BoundedRange(r)


def _extract(item: Any, container: Any, morekeys: Any = None) -> Any:
    """Ansible's `extract`: container[item], then each of morekeys (`map('extract', hostvars, 'x')`)."""
    value, path = container, [item, *([morekeys] if isinstance(morekeys, str) else (morekeys or []))]
    for key in path:
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            raise jinja2.UndefinedError(f"extract: '{key}' is undefined (path {path})") from None
    return value


def _listed(jinja_filter: Any) -> Any:
    """Jinja's map/select/... give a generator; Ansible's templates a list (`x | map('int') | length` works)."""
    @functools.wraps(jinja_filter)  # keeps Jinja's pass_context mark
    def listed(*args: Any, **kwargs: Any) -> list:
        return list(jinja_filter(*args, **kwargs))

    return listed


def make_environment(searchpath: list[str] | None = None) -> jinja2.Environment:
    env = Sandbox(
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,  # as Ansible's templating: the newline after a {% block %} tag goes
        loader=jinja2.FileSystemLoader(searchpath or []),
        autoescape=False,
    )
    env.filters.update(filters_text.FILTERS)
    env.filters.update(filters_data.FILTERS)
    env.filters.update(filters_paths.FILTERS)
    env.filters.update(filters_numbers.FILTERS)
    env.filters.update(
        bool=to_bool,
        mandatory=_mandatory,
        type_debug=lambda v: type(v).__name__,
        extract=_extract,
    )
    for name in ("map", "select", "reject", "selectattr", "rejectattr"):  # a list, as Ansible's templates give
        env.filters[name] = _listed(env.filters[name])
    env.globals.update(range=_bounded_range, now=_now, undef=lambda hint=None: env.undefined(hint=hint))
    bound_filters(env.filters)
    install(env)
    tests_ansible.install(env.tests)
    env.tests.update(version=version_test, version_compare=version_test)
    return env


def _now(utc: bool = False, fmt: str | None = None) -> Any:
    """Ansible's `now()`: the current time (UTC without a zone with utc=true), as text when given a strftime format."""
    moment = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) if utc else datetime.datetime.now()
    return moment.strftime(fmt) if fmt else moment


_ENV: jinja2.Environment | None = None


def environment() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        _ENV = make_environment()
    return _ENV
