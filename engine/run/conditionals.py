"""Conditionals (`when`, `changed_when`, `failed_when`, `until`, assert's `that`) as ansible-core 2.19 evaluates
them: an expression whose result must be a boolean.

- A boolean written in the playbook is its own result; any other value that is not a string is refused
  ("Conditional expressions must be strings."), an empty or null one too ("Empty conditional expressions are not
  allowed.").
- A string is a Jinja expression. One wholly wrapped in template delimiters (`"{{ checks_ok }}"`) is rendered
  first: a non-string result stands as the result (Ansible's deprecation warning); a string result is evaluated
  as an expression only when the playbook wrote it and a variable brought it here (`when: "{{ rule }}"` with
  `rule: "1 == 1"` in the play's vars). A string the template computed (`"{{ '1 == 1' }}"`), one a module
  returned (a local host's too), or one tagged `!unsafe` is data: "Encountered untrusted template or expression."
- A result that is not a boolean fails the task ("Conditional result (True) was derived from value of type
  'str' ... Conditionals must have a boolean result."), unless the ALLOW_BROKEN_CONDITIONALS setting
  (ANSIBLE_ALLOW_BROKEN_CONDITIONALS, or `allow_broken_conditionals` in ansible.cfg's [defaults]) is on: then
  its truth counts, with Ansible's deprecation warning.

Each refusal is the task's failure, in Ansible's words (`Task failed: ...`).
"""

from __future__ import annotations

import sys
import threading
from collections import ChainMap
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jinja2 import TemplateSyntaxError, nodes

from engine.errors import TaskError
from engine.parsing import ansible_cfg
from engine.parsing.yamlfile import is_written
from engine.template.markers import Unsafe, is_template
from engine.template.templar import LazyVars

if TYPE_CHECKING:
    from engine.template.templar import Templar

EMPTY = "Empty conditional expressions are not allowed."
NOT_STRING = "Conditional expressions must be strings."
UNTRUSTED = "Encountered untrusted template or expression."
AS_TEMPLATE = "Conditionals should not be surrounded by templating delimiters such as {{ }} or {% %}."
ALLOWED = ("Broken conditionals are currently allowed because the `ALLOW_BROKEN_CONDITIONALS` configuration option "
           "is enabled.")
EMBEDDED = ("Jinja constant strings should not contain embedded templates. This feature will be disabled by default "
            "in ansible-core 2.23.")
EMBEDDED_HELP = 'Use inline expressions, for example: `when: "{{ a_var }}" == 42` becomes `when: a_var == 42`'
TRUE_WORDS = ("y", "yes", "on", "1", "true", "t")  # Ansible's boolean settings


class BrokenConditional(TaskError):
    """A conditional Ansible 2.19 refuses: the task fails with these words."""

    def __init__(self, message: str) -> None:
        super().__init__(f"Task failed: {message}")


def evaluate(templar: Templar, conditional: Any, view: Mapping) -> bool:
    """The boolean a conditional gives for these variables, or BrokenConditional."""
    result = _value(templar, conditional, view)
    if isinstance(result, bool):
        return result
    origin = "<unknown>" if result is None else _place(view)
    message = (f"Conditional result ({bool(result)}) was derived from value of type {_type_name(result)!r} at "
               f"{origin!r}. Conditionals must have a boolean result.")
    if setting_on("allow_broken_conditionals"):
        deprecated(message, ALLOWED)
        return bool(result)
    raise BrokenConditional(message)


def _value(templar: Templar, conditional: Any, view: Mapping) -> Any:
    """The conditional's value before the boolean check: a boolean as written, an expression's result, or a
    template's (a string it gives evaluated again when it is trusted)."""
    conditional = _stripped(conditional)
    if isinstance(conditional, bool):
        return conditional
    if not isinstance(conditional, str):
        if setting_on("allow_broken_conditionals"):
            return templar.render_value(conditional, view)  # its truth then counts, with the warning
        raise BrokenConditional(NOT_STRING)
    if isinstance(conditional, Unsafe):
        raise BrokenConditional(UNTRUSTED)
    if not all_template(conditional):
        return _expression(templar, conditional, view)
    rendered, taint = templar.render_tracked(conditional, view)
    written = is_written(rendered)  # the string as the playbook (or a variable file, -e) wrote it, not a result's
    rendered = _stripped(rendered)
    if not isinstance(rendered, str):
        deprecated(AS_TEMPLATE)
        return rendered
    if isinstance(rendered, Unsafe) or taint.hosts or not written or not indirect(templar, conditional, view):
        raise BrokenConditional(UNTRUSTED)
    return _expression(templar, rendered, view)


def _expression(templar: Templar, expression: str, view: Mapping) -> Any:
    """The expression's value; a string constant in it that is a template (`x == "{{ y }}"`) is rendered first,
    as Ansible 2.19 still does in conditionals (with its warning)."""
    if not is_template(expression):
        return templar.evaluate(expression, view)
    try:
        tokens = list(templar.env.lexer.tokeniter(expression, None, state="variable"))
    except TemplateSyntaxError:
        return templar.evaluate(expression, view)  # its error in the words every expression's has
    constants: dict[str, Any] = {}
    pieces = []
    for lineno, kind, raw in tokens:
        text = next(iter(templar.env.lexer.wrap([(lineno, kind, raw)]))).value if kind == "string" else None
        if isinstance(text, str) and is_template(text):
            name = f"dfp_constant_{len(constants)}"
            constants[name] = templar.render_value(text, view)
            pieces.append(name)
        else:
            pieces.append(raw)
    if not constants:
        return templar.evaluate(expression, view)
    warn(EMBEDDED, EMBEDDED_HELP)
    overlay = view.with_overlay(constants) if isinstance(view, LazyVars) else ChainMap(constants, dict(view))
    return templar.evaluate("".join(pieces), overlay)


def _stripped(conditional: Any) -> Any:
    """Surrounding blanks dropped; None or "" refused, or True under ALLOW_BROKEN_CONDITIONALS (deprecated)."""
    if isinstance(conditional, str):
        conditional = type(conditional)(conditional.strip())  # an !unsafe one stays unsafe
    if conditional is None or conditional == "":
        if setting_on("allow_broken_conditionals"):
            deprecated("Empty conditional expression was evaluated as True.", ALLOWED)
            return True
        raise BrokenConditional(EMPTY)
    return conditional


def all_template(text: str) -> bool:
    """Starts and ends with template delimiters (`{{ x }}`, `{% if %}...{% endif %}`), as Ansible's test."""
    return text.startswith(("{{", "{%")) and text.endswith(("}}", "%}"))


def as_template(conditional: str) -> str:
    """The conditional as a template reading what its evaluation reads (for what looks at it before the run)."""
    return conditional if all_template(conditional.strip()) else "{{ " + conditional + " }}"


def indirect(templar: Templar, text: str, view: Mapping) -> bool:
    """`{{ name }}`, `{{ a.b }}` or `{{ a['b'] }}` alone, reading a value the playbook wrote as it is (not a
    template of its own): the string it hands over stays the playbook's. Anything else computes a new one."""
    path = _reference_path(templar, text)
    if path is None:
        return False
    raw: Any = view.raw() if isinstance(view, LazyVars) else view
    for key in path:
        if not isinstance(raw, Mapping) or key not in raw:
            return True  # reached through a rendered value: what the variable's own template handed over
        raw = raw[key]
    return not (isinstance(raw, str) and is_template(raw) and _reference_path(templar, raw) is None)


def _reference_path(templar: Templar, text: str) -> list | None:
    """['a', 'b'] for `{{ a.b }}` / `{{ a['b'] }}`; None for a template that computes its value."""
    try:
        body = templar.env.parse(text).body
    except TemplateSyntaxError:
        return None
    if not (len(body) == 1 and isinstance(body[0], nodes.Output) and len(body[0].nodes) == 1):
        return None
    node, path = body[0].nodes[0], []
    while isinstance(node, (nodes.Getattr, nodes.Getitem)):
        if isinstance(node, nodes.Getattr):
            path.append(node.attr)
        elif isinstance(node.arg, nodes.Const):
            path.append(node.arg.value)
        else:
            return None
        node = node.node
    return [node.name, *reversed(path)] if isinstance(node, nodes.Name) else None


def _type_name(value: Any) -> str:
    """Python's name of the value's type, ours (Unsafe, a lazy mapping) shown as the plain type it stands for."""
    for plain in (bool, str, int, float, list, dict, tuple):
        if isinstance(value, plain):
            return plain.__name__
    return "dict" if isinstance(value, Mapping) else type(value).__name__


def _place(view: Mapping) -> str:
    """Where the conditional was written: its task's place (Ansible names the value's own origin, which is not
    kept here)."""
    task = getattr(getattr(view, "origin", None), "task", None)
    return str(getattr(task, "source", None) or "<unknown>")


# -- settings and warnings -----------------------------------------------------------------------------------------


def setting_on(name: str) -> bool:
    """A boolean setting of engine/parsing/ansible_cfg.py: on when its text is one of Ansible's true words."""
    text = ansible_cfg.setting(name)
    return text is not None and text.strip().lower() in TRUE_WORDS


_shown: set[str] = set()
_shown_lock = threading.Lock()


def deprecated(message: str, help_text: str = "") -> None:
    """Ansible's `[DEPRECATION WARNING]:` line on stderr, once per message (off with deprecation_warnings=False)."""
    text = ansible_cfg.setting("deprecation_warnings")
    if text is not None and text.strip().lower() not in TRUE_WORDS:
        return
    _once(f"[DEPRECATION WARNING]: {message} This feature will be removed from ansible-core version 2.23.", help_text)


def warn(message: str, help_text: str = "") -> None:
    """Ansible's `[WARNING]:` line on stderr, once per message."""
    _once(f"[WARNING]: {message}", help_text)


def _once(line: str, help_text: str) -> None:
    if help_text:
        line += f"\n{help_text}"
    with _shown_lock:
        if line in _shown:
            return
        _shown.add(line)
    print(line, file=sys.stderr, flush=True)
