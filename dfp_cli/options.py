"""The option set every playbook command shares, defined once, and what the options turn into."""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from typing import Any, Callable

from engine.errors import UserError


@dataclass(frozen=True)
class Option:
    name: str
    default: Any
    help: str
    repeatable: bool = False  # -e may be given many times
    counter: bool = False  # -v, -vv


PLAYBOOK_OPTIONS = (
    Option("host", None, "run on this host only (a name from the inventory)"),
    Option("group", None, "run on the hosts of this group only"),
    Option("limit", None, "Ansible-style host pattern (e.g. 'gpu*:!gpu3')"),
    Option("check", False, "report what would change, change nothing"),
    Option("diff", False, "show before/after of what changes"),
    Option("extra_vars", None, "KEY=VALUE (repeatable); JSON values allowed; @FILE.yaml loads a file", repeatable=True),
    Option("tags", None, "only tasks with these tags (comma-separated)"),
    Option("skip_tags", None, "skip tasks with these tags (comma-separated)"),
    Option("forks", 8, "hosts in parallel (default 8)"),
    Option("report", None, "write a JSON report to this file"),
    Option("junit", None, "write a JUnit XML report to this file"),
    Option("inventory", None, "inventory file (default: inventory.yaml)"),
    Option("lock_wait", 60, "seconds to wait for another run's host lock before failing that host (default 60)"),
    Option("verbose", 0, "more output (-v: messages of ok tasks and progress, -vv: tracebacks of module crashes)", counter=True),
)
REPORT_OPTIONS = tuple(o for o in PLAYBOOK_OPTIONS if o.name in ("host", "group", "inventory", "extra_vars")) + (
    Option("json", False, "print JSON"),
)


def invoke_task(body: Callable, options: tuple[Option, ...], name: str, doc: str, positional: tuple[str, ...] = ()):
    """An Invoke task whose flags are `options`: `body(c, **values)` gets them by name.

    Invoke reads a task's flags from its signature; the signature is built here from the option table, so the
    table is the one place an option is written."""
    from invoke import Task

    params = [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in positional]
    params += [inspect.Parameter(o.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=o.default) for o in options]

    def run(c, *args, **kwargs):
        return body(c, *args, **kwargs)

    run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    run.__name__ = run.__qualname__ = name.replace("-", "_")
    run.__doc__ = doc
    return Task(run, name=name, help={o.name: o.help for o in options},
                iterable=[o.name for o in options if o.repeatable], incrementable=[o.name for o in options if o.counter])


def limit_of(host: str | None, group: str | None, limit: str | None) -> str | None:
    """--host a --group g means "a, if it is in g" (intersection), like Ansible's '&'."""
    parts = [p for p in (host, group, limit) if p]
    if len(parts) > 1:
        return ",".join([parts[0]] + [f"&{p}" for p in parts[1:]])
    return parts[0] if parts else None


def _extra_var(item: str, where: str) -> tuple[str, Any]:
    from engine.yamlfile import check_nesting

    if "=" not in item:
        raise UserError(f"{where}: extra variables are KEY=VALUE (or @file.yaml), and this one has no '='; e.g. -e "
                        "vllm_port=8001 (its text is not shown: it may be a secret)")
    key, _, raw = item.partition("=")
    key = key.strip()
    if not key.isidentifier():
        raise UserError(f"{where}: the text before '=' is not a valid variable name (letters, digits and _, not starting "
                        "with a digit); e.g. -e vllm_port=8001 (its text is not shown: it may be a secret)")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    except RecursionError:  # nested far deeper than check_nesting allows
        raise UserError(f"{where} ({key}): the JSON value nests lists/mappings too deep; flatten it") from None
    check_nesting(value, f"{where} ({key})")
    return key, value


def parse_extra_vars(items: list[str] | None) -> dict:
    """-e KEY=VALUE (JSON values) and -e @file.yaml, in order. Errors name the -e by position, never its
    text: a mistyped -e may be a secret (a token pasted without its KEY=)."""
    from engine.yamlfile import check_variable_names, load_yaml

    out: dict = {}
    for number, item in enumerate(items or [], start=1):
        if item.startswith("@"):
            data = load_yaml(item[1:], "extra vars file")
            if not isinstance(data, dict):
                raise UserError(f"{item[1:]}: an extra vars file must be a mapping of variable names to values")
            check_variable_names(data, item[1:])
            out.update(data)
        else:
            key, value = _extra_var(item, f"-e number {number}")
            out[key] = value
    return out
