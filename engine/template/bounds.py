"""Bounds on what a template may build and how long it may run (the sandbox's arithmetic is in templating.py).

A template is text from a playbook, a role or a variable file, rendered on the control node, which holds
keys to a fleet: it must not be able to take that machine's memory or CPU. Checked before the work is done:
- every way of widening text: `format` and `%` (a width or precision in the format), `center` / `ljust` /
  `rjust` / `zfill` / `expandtabs`, `replace` (the result's length from the count of matches), `join` and
  `indent` (the sum of the parts), `wordwrap`;
- integer powers whose result would have more than MAX_INT_BITS bits (`((10**1000)**1000)**1000`);
- the text a template renders in all (MAX_OUTPUT);
- a CPU deadline per task (RENDER_CPU_S, or the task's `timeout` when shorter), checked on every call, filter,
  operator, loop step over range() and piece of output, so nested loops end.
"""

from __future__ import annotations

import re
import threading
import time
from contextlib import contextmanager
from typing import Any

from jinja2.sandbox import SecurityError

MAX_TEXT = 1_000_000  # characters one operation may build (as `*` on a string: templating.MAX_SEQUENCE)
MAX_OUTPUT = 16 * 2**20  # characters one template may render (a config file is KBs)
MAX_INT_BITS = 100_000  # about 30,000 decimal digits
RENDER_CPU_S = 10.0

_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-+ #0]*(\d+|\*)?(?:\.(\d+|\*))?")
_BRACE_SPEC = re.compile(r"\{[^{}]*?:([^{}]*)\}")
_DIGITS = re.compile(r"\d+")
_state = threading.local()


class TemplateRefused(SecurityError):
    """A template tried something the sandbox bounds; the message says what and the limit."""


# -- the CPU deadline ---------------------------------------------------------------------------------------


@contextmanager
def render_budget(seconds: float | None = None):
    """Rendering inside this block has `seconds` of this thread's CPU (RENDER_CPU_S at most); nested blocks
    keep the outer deadline."""
    if getattr(_state, "deadline", None) is not None:
        yield
        return
    limit = min(RENDER_CPU_S, seconds) if seconds else RENDER_CPU_S
    _state.deadline, _state.limit = time.thread_time() + limit, limit
    try:
        yield
    finally:
        _state.deadline = None


def tick() -> None:
    deadline = getattr(_state, "deadline", None)
    if deadline is not None and time.thread_time() > deadline:
        _state.deadline = None  # the error's own rendering must not trip it again
        raise TemplateRefused(f"the template ran for more than {_state.limit:g} s of CPU (the render deadline: the "
                              "task's timeout, at most RENDER_CPU_S in engine/template/bounds.py); simplify it")


# -- checks before an operation builds its result -----------------------------------------------------------------


def refuse_text(size: int, what: str) -> None:
    if size > MAX_TEXT:
        raise TemplateRefused(f"the sandbox refuses to build {size:,} characters with {what} (limit {MAX_TEXT:,})")


def check_format(fmt: Any, what: str) -> None:
    """A %-format or str.format string whose widths or precisions would build more than MAX_TEXT."""
    if not isinstance(fmt, str):
        return
    for match in _PERCENT_SPEC.finditer(fmt):
        for group in match.groups():
            if group and group.isdigit():
                refuse_text(int(group) if len(group) < 12 else 10**12, what)
    for spec in _BRACE_SPEC.findall(fmt):
        for digits in _DIGITS.findall(spec):
            refuse_text(int(digits) if len(digits) < 12 else 10**12, what)


def check_width(width: Any, what: str) -> None:
    if isinstance(width, int) and not isinstance(width, bool):
        refuse_text(width, what)


def check_replace(text: Any, old: Any, new: Any, count: Any = -1) -> None:
    if not (isinstance(text, str) and isinstance(old, str) and isinstance(new, str)):
        return
    n = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and count >= 0:
        n = min(n, count)
    refuse_text(len(text) + n * (len(new) - len(old)), "replace")


def check_join(items: Any, sep: Any = "") -> None:
    if isinstance(items, (list, tuple)):
        total = sum(len(x) if isinstance(x, str) else len(str(x)) for x in items)
        refuse_text(total + len(str(sep)) * max(len(items) - 1, 0), "join")


def check_power(base: Any, exponent: Any) -> None:
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        if base.bit_length() * exponent > MAX_INT_BITS:
            raise TemplateRefused(f"the sandbox refuses a power with more than {MAX_INT_BITS:,} bits "
                                  f"({base.bit_length()}-bit base, exponent {exponent})")


def check_method(obj: Any, args: tuple, kwargs: dict) -> None:
    """A str method that widens text, checked on its arguments before it runs."""
    owner, name = getattr(obj, "__self__", None), getattr(obj, "__name__", "")
    if not isinstance(owner, str):
        return
    if name in ("center", "ljust", "rjust", "zfill") and args:
        check_width(args[0], f"str.{name}")
    elif name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        if isinstance(size, int):
            refuse_text(owner.count("\t") * size + len(owner), "str.expandtabs")
    elif name in ("format", "format_map"):
        check_format(owner, f"str.{name}")
    elif name == "replace" and len(args) >= 2:
        check_replace(owner, args[0], args[1], args[2] if len(args) > 2 else -1)
    elif name == "join" and args:
        check_join(list(args[0]) if isinstance(args[0], (list, tuple)) else args[0], owner)


# -- filters wrapped with their checks ---------------------------------------------------------------------------


def _bounded(name: str, fn, check):
    def bounded(*args, **kwargs):
        tick()
        check(*args, **kwargs)
        return fn(*args, **kwargs)

    bounded.__name__ = f"bounded_{name}"
    for attr in ("jinja_pass_arg",):  # Jinja's pass_eval_context / pass_context marks
        if hasattr(fn, attr):
            setattr(bounded, attr, getattr(fn, attr))
    return bounded


def bound_filters(filters: dict) -> None:
    """Wrap the widening filters of an environment with their checks (and the deadline)."""
    checks = {
        "center": lambda v, width=80, *a, **k: check_width(width, "center"),
        "format": lambda v, *a, **k: check_format(v, "format"),
        "replace": lambda v, old="", new="", count=None, *a, **k: check_replace(v, old, new, -1 if count is None else count),
        "join": lambda v, d="", *a, **k: check_join(list(v) if isinstance(v, (list, tuple)) else v, d),
        "indent": lambda v, width=4, *a, **k: refuse_text(
            len(str(v)) + (str(v).count("\n") + 1) * (width if isinstance(width, int) else len(str(width))), "indent"),
        "wordwrap": lambda v, width=79, *a, **k: refuse_text(len(str(v)) * 2, "wordwrap"),
    }
    for name, check in checks.items():
        fn = filters.get(name)
        if fn is not None:
            filters[name] = _bounded(name, fn, _own_arguments(check, hasattr(fn, "jinja_pass_arg")))


def _own_arguments(check: Any, pass_ctx: bool) -> Any:
    """`check` called with the filter's own arguments (without the eval context Jinja passes some filters first)."""
    def call(*args: Any, **kwargs: Any) -> None:
        check(*(args[1:] if pass_ctx else args), **kwargs)

    return call


def bounded_output(chunks) -> str:
    """The template's output joined, refused past MAX_OUTPUT characters, the deadline checked per piece."""
    out, size = [], 0
    for chunk in chunks:
        tick()
        size += len(chunk)
        if size > MAX_OUTPUT:
            raise TemplateRefused(f"the template renders more than {MAX_OUTPUT:,} characters (MAX_OUTPUT in "
                                  "engine/template/bounds.py)")
        out.append(chunk)
    return "".join(out)


class BoundedRange:
    """range() for templates: at most MAX_RANGE items (templating.py), and the deadline checked per item so that
    nested loops end."""

    __slots__ = ("_r",)

    def __init__(self, r: range) -> None:
        self._r = r

    def __iter__(self):
        for i in self._r:
            tick()
            yield i

    def __len__(self) -> int:
        return len(self._r)

    def __getitem__(self, index):
        item = self._r[index]
        return BoundedRange(item) if isinstance(item, range) else item

    def __contains__(self, value) -> bool:
        return value in self._r

    def __reversed__(self):
        return iter(BoundedRange(self._r[::-1]))

    def __repr__(self) -> str:
        return repr(self._r)

