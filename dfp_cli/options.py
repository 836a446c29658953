"""The option set every playbook command shares, defined once, and what the options turn into.

Flags follow ansible-playbook where it has one: -i (repeatable), -e, -l, -t, -f, -C/--check, -D/--diff,
-v/-vv/--verbose=N, --skip-tags, --vault-password-file. The Invoke arguments are built here from the table
(not from a signature), so a flag's names, kind and help are written once.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

from invoke import Argument, Exit, Task

from engine.errors import UserError


@dataclass(frozen=True)
class Option:
    name: str
    default: Any
    help: str
    short: tuple[str, ...] = ()  # single letters, e.g. ("C", "c")
    repeatable: bool = False  # -e, -i may be given many times
    level: bool = False  # -v, -vv, --verbose=N


PLAYBOOK_OPTIONS = (
    # -H as Fabric spells a host: -h is help, in Invoke, Fabric and ansible-playbook alike (`invoke provision -h`)
    Option("host", None, "run on this host only (a name from the inventory)", ("H",)),
    Option("group", None, "run on the hosts of this group only", ("g",)),
    Option("limit", None, "Ansible-style host pattern (e.g. 'gpu*:!gpu3')", ("l",)),
    Option("check", False, "report what would change, change nothing (as ansible-playbook -C)", ("C", "c")),
    Option("diff", False, "show before/after of what changes (as ansible-playbook -D)", ("D", "d")),
    Option("extra_vars", None, "KEY=VALUE (JSON values), a JSON/YAML mapping '{\"k\": 1}', or @FILE.yaml; "
           "repeatable, later wins", ("e",), repeatable=True),
    Option("tags", None, "only tasks with these tags (comma-separated, repeatable; also all, tagged, untagged); "
           "a tag no task has is warned about", ("t",), repeatable=True),
    Option("skip_tags", None, "skip tasks with these tags (comma-separated, repeatable; also all, tagged, untagged); "
           "a tag no task has is warned about", ("s",), repeatable=True),
    Option("forks", 8, "hosts in parallel (default 8)", ("f",)),
    Option("report", None, "write a JSON report to this file", ("r",)),
    Option("junit", None, "write a JUnit XML report to this file", ("j",)),
    Option("inventory", None, "inventory file (default: inventory.yaml); repeatable, later files win", ("i",),
           repeatable=True),
    Option("vault_password_file", None, "file holding the Ansible Vault password (or an executable printing it); "
           "default: $ANSIBLE_VAULT_PASSWORD_FILE"),
    Option("lock_wait", 60, "seconds to wait for another run's host lock before failing that host (default 60)", ("o",)),
    Option("verbose", 0, "more output: -v messages of ok tasks and progress, -vv (or --verbose=2) tracebacks of "
           "module crashes", ("v",), level=True),
    Option("syntax_check", False, "check the playbook and inventory as a run would before touching any host, "
           "then stop (as ansible-playbook --syntax-check)"),
    Option("list_hosts", False, "list each play's hosts (after --limit) and stop, as ansible-playbook does"),
    Option("list_tasks", False, "list each play's tasks (after --tags/--skip-tags) and stop, as ansible-playbook does"),
    Option("list_tags", False, "list each play's task tags and stop, as ansible-playbook does"),
    Option("start_at_task", None, "start at the first task of this name (a glob; 'ROLE : NAME' for a role's task), "
           "as ansible-playbook does"),
    Option("flush_cache", False, "forget every host's facts kept by ANSIBLE_CACHE_PLUGIN=jsonfile before the run (as "
           "ansible-playbook --flush-cache)"),
    Option("force_handlers", False, "run the handlers a host notified even when it fails later (as ansible-playbook "
           "--force-handlers; a play's force_handlers keyword wins)"),
    # Connection and become defaults, as ansible-playbook's: a host's inventory variables and the playbook's
    # keywords win over them (engine/inventory/manager.py set_defaults).
    Option("user", None, "connect as this user where the inventory sets no ansible_user", ("u",)),
    Option("connection", None, "connection type (local or ssh) where the inventory sets no ansible_connection, "
           "as ansible-playbook's -c (here --connection only: -c is --check)"),
    Option("private_key", None, "ssh key file where the inventory sets no ansible_ssh_private_key_file"),
    Option("become", False, "run tasks with become (sudo) where neither playbook nor inventory says otherwise", ("b",)),
    Option("become_user", None, "the user become runs tasks as (default root), where nothing else says"),
    Option("ask_become_pass", False, "ask for the sudo password once, for every host (as ansible-playbook -K)",
           ("K",)),
)
# -u/--private-key/-b/--become-user/-K as the inventory variables they stand for
HOST_DEFAULT_OPTIONS = {"connection": "ansible_connection", "user": "ansible_user", "private_key": "ansible_ssh_private_key_file",
                        "become": "ansible_become", "become_user": "ansible_become_user"}
LISTING_OPTIONS = {"list_hosts": "hosts", "list_tasks": "tasks", "list_tags": "tags"}
_READ_ONLY = ("host", "group", "limit", "inventory", "extra_vars", "vault_password_file", "connection", "user",
              "private_key")
REPORT_OPTIONS = tuple(o for o in PLAYBOOK_OPTIONS if o.name in _READ_ONLY) + (Option("json", False, "print JSON"),)
MONITORING_OPTIONS = tuple(o for o in REPORT_OPTIONS if o.name != "json") + (
    Option("out", None, "folder to write prometheus.yml, rules/dflash.rules.yml and targets/*.yml to (required)"),)
INVENTORY_OPTIONS = (
    Option("list", False, "all hosts and groups (like ansible-inventory --list)"),
    Option("host", None, "one host's merged variables"),
    *(o for o in PLAYBOOK_OPTIONS if o.name in ("inventory", "vault_password_file")),
)


class FlagArgument(Argument):
    """An Invoke argument copied flat where Invoke deep-copies it: its parser copies every task's arguments on
    each parse (ParseMachine), walking each one's names, help and default, yet parsing only rebinds an
    argument's attributes (`_value`, `raw_value`), so a flat copy is as good."""

    def __deepcopy__(self, memo: dict) -> FlagArgument:
        return copy.copy(self)


class LevelArgument(FlagArgument):
    """-v, -vv, -v -v and --verbose=N (or -v N) all give a level, as ansible-playbook's -v does.

    Invoke's counting flags take no value (--verbose=2 was refused) and its value flags do not count, so this
    flag takes an optional value: seen bare it adds one; '-vv' reaches it as '-v' with the value 'v'."""

    def set_value(self, value: Any, cast: bool = True) -> None:
        current = self._value if isinstance(self._value, int) else 0
        if value is True:  # the flag without a value; raw_value stays unset so a repeated -v counts again
            self._value = current + 1
            return
        self.raw_value = value
        text = str(value)
        if text and set(text) == {"v"}:  # -vv, -vvv
            self._value = current + 1 + len(text)
        elif text.isdigit():
            self._value = int(text)
        else:
            self._value = text  # refused by verbosity_of with a message


def verbosity_of(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise UserError("--verbose takes a level: -v, -vv, -vvv or --verbose=N with N a whole number (e.g. --verbose=2)")


def _argument(o: Option) -> Argument:
    long = o.name.replace("_", "-")
    names = (long, *o.short)
    common: dict[str, Any] = {"names": names, "help": o.help, "attr_name": o.name if "_" in o.name else None}
    if o.level:
        return LevelArgument(kind=str, optional=True, default=o.default, **common)
    if o.repeatable:
        return FlagArgument(kind=list, default=[], **common)
    kind = type(o.default) if o.default is not None else str
    if kind in (int, float):  # converted by the task itself: a bad number is one paragraph, exit 4 (numbers_of)
        kind = str
    return FlagArgument(kind=kind, default=o.default, **common)


def numbers_of(options: tuple[Option, ...], values: dict) -> dict:
    """The numeric options' values as numbers; a value that is not one is a UserError naming the flag."""
    out = dict(values)
    for o in options:
        kind = type(o.default)
        if o.level or kind not in (int, float) or isinstance(o.default, bool) or not isinstance(out.get(o.name), str):
            continue
        text = out[o.name]
        try:
            out[o.name] = kind(text.strip())
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise UserError(f"--{o.name.replace('_', '-')} takes {what}, not {text[:40]!r}; e.g. "
                            f"--{o.name.replace('_', '-')} {o.default}") from None
    return out


class OptionTask(Task):
    """An Invoke task whose flags come from an option table instead of its body's signature."""

    def __init__(self, body: Callable, options: tuple[Option, ...], positional: tuple[str, ...] = (), **kwargs: Any):
        self.options = options
        super().__init__(body, positional=list(positional), auto_shortflags=False, **kwargs)

    def get_arguments(self, ignore_unknown_help: bool | None = None) -> list[Argument]:
        return [FlagArgument(name=p, positional=True) for p in self.positional] + [_argument(o) for o in self.options]

    def __deepcopy__(self, memo: dict) -> OptionTask:
        """Itself: Invoke deep-copies every task of the collection on each start (its name transform), which
        walked each option table: about 0.1 s of `invoke --list` on 2 cores (0.29 -> 0.19 s); a task is never changed after it is made
        (its flags are fresh Arguments from get_arguments each time)."""
        return self


def invoke_task(body: Callable, options: tuple[Option, ...], name: str, doc: str, positional: tuple[str, ...] = ()):
    """An Invoke task whose flags are `options`: `body(c, *positional, **values)` gets them by name."""
    params = [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in positional]
    params += [inspect.Parameter(o.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=o.default) for o in options]

    def run(c, *args, **kwargs):
        if any(a in HELP_FLAGS for a in (*args, *(kwargs.get(p) for p in positional))):
            print_help(name)
            return None
        try:
            kwargs = numbers_of(options, kwargs)
        except UserError as exc:
            print(f"ERROR: {exc}", file=sys.stderr)
            raise Exit(code=4) from None
        return body(c, *args, **kwargs)

    run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    run.__name__ = run.__qualname__ = name.replace("-", "_")
    run.__doc__ = doc
    return OptionTask(run, options, positional, name=name)


HELP_FLAGS = ("-h", "--help")


def print_help(name: str) -> None:
    """`invoke play -h`: Invoke hands a task's positional argument whatever word comes next, its own -h/--help
    included (`invoke play --help` answered "playbook '--help' not found"), so the task prints its help itself."""
    from invoke.main import program

    try:
        program.print_task_help(name)
    except (AttributeError, KeyError):  # not the `invoke` program (an in-process caller): no parser to ask
        print(f"{name}: `invoke --help {name}` lists its options")


def limit_of(host: str | None, group: str | None, limit: str | None) -> str | None:
    """--host a --group g means "a, if it is in g" (intersection), like Ansible's '&'."""
    parts = [p for p in (host, group, limit) if p]
    if len(parts) > 1:
        return ",".join([parts[0]] + [f"&{p}" for p in parts[1:]])
    return parts[0] if parts else None


def inventories_of(value: list[str] | str | None, default: str) -> list[str]:
    """-i given zero, one or several times: the files in order (later wins); none: the default inventory."""
    if isinstance(value, str):
        return [value]
    return list(value) if value else [default]


def use_vault_password_file(path: str | None) -> None:
    """--vault-password-file for this process; without it engine.parsing.vault reads ANSIBLE_VAULT_PASSWORD_FILE."""
    from engine.api import vault
    vault.use_password_file(path or None)


def host_defaults_of(opts: dict, ask=None) -> dict:
    """The inventory variables -u, --private-key, -b, --become-user and -K stand for (the inventory's own win);
    -K asks once, through `ask` (getpass), before any host is touched. The typed password is data, never a
    template: it joins the variables as unsafe text (engine/template/templar.py Unsafe): it reaches sudo as typed."""
    out = {var: opts[name] for name, var in HOST_DEFAULT_OPTIONS.items() if opts.get(name)}
    if out.get("ansible_ssh_private_key_file"):
        out["ansible_ssh_private_key_file"] = os.path.expanduser(out["ansible_ssh_private_key_file"])
    if opts.get("ask_become_pass"):
        from engine.api import Unsafe

        if ask is None:
            import getpass

            ask = getpass.getpass
        out["ansible_become_password"] = Unsafe(ask("BECOME password: "))  # data, never a template
    return out


def split_tags(given: str | list[str] | None) -> list[str]:
    """--tags a,b --tags c: every name, as ansible-playbook joins repeated and comma-separated ones."""
    texts = [given] if isinstance(given, str) else list(given or [])
    return [t.strip() for text in texts for t in text.split(",") if t.strip()]


# -- extra variables (-e) --------------------------------------------------------------------------------
# As in ansible-playbook: -e KEY=VALUE, -e '{"key": value}' (JSON, or YAML flow as Ansible accepts) and
# -e @file.yaml, later ones winning. Unlike Ansible, a KEY=VALUE value that is valid JSON keeps its type
# (-e vllm_port=8001 is a number, -e 'ids=[1,2]' a list; Ansible would pass the strings), as this project
# has always documented; a value that starts like JSON ([, {, ") but is not valid JSON is refused instead
# of silently becoming a string. Templates ({{ ... }}) are strings, rendered when read.
_JSON_START = ("[", "{", '"')
_TEMPLATE_START = ("{{", "{%", "{#")
_TEXT_NOT_SHOWN = "(its text is not shown: it may be a secret)"


def _starts_like_json(text: str) -> bool:
    t = text.lstrip()
    return t.startswith(_JSON_START) and not t.startswith(_TEMPLATE_START)


def _json_value(raw: str, where: str) -> Any:
    """A KEY=VALUE value: JSON when it is valid JSON, an error when it starts like JSON, else the string."""
    try:
        return json.loads(raw)
    except RecursionError:  # nested far deeper than check_nesting allows
        raise UserError(f"{where}: the JSON value nests lists/mappings too deep; flatten it") from None
    except ValueError as exc:  # JSONDecodeError, or a number past int's digit limit
        if not _starts_like_json(raw):
            return raw
        detail = (f"{exc.msg}; character {exc.pos + 1} of the value" if isinstance(exc, json.JSONDecodeError)
                  else str(exc))
        raise UserError(
            f"{where}: the value starts like JSON (with [, {{ or \") but is not valid JSON ({detail}) "
            f"{_TEXT_NOT_SHOWN}. Write valid JSON, e.g. -e 'dirs=[\"/tmp\", \"/data\"]'; a string that starts "
            "with one of those characters goes in JSON quotes: -e 'note=\"[x] y\"'."
        ) from None


def _extra_var(item: str, where: str) -> tuple[str, Any]:
    from engine.api import check_nesting

    if "=" not in item:
        raise UserError(f"{where}: extra variables are KEY=VALUE, a JSON mapping or @file.yaml, and this one has no "
                        f"'='; e.g. -e vllm_port=8001 {_TEXT_NOT_SHOWN}")
    key, _, raw = item.partition("=")
    key = key.strip()
    if not key.isidentifier():
        raise UserError(f"{where}: the text before '=' is not a valid variable name (letters, digits and _, not starting "
                        f"with a digit); e.g. -e vllm_port=8001 {_TEXT_NOT_SHOWN}")
    where = f"{where} ({key})"
    value = _json_value(raw, where)
    check_nesting(value, where)
    return key, value


def _mapping_arg(item: str, where: str) -> dict:
    """-e '{"a": 1, "b": [2]}': a JSON object or YAML flow mapping whose keys are the variables (as in Ansible)."""
    from pathlib import Path

    from engine.api import check_nesting, check_variable_names, parse_text

    try:
        data = parse_text(item, Path(where), "extra variables")
    except UserError as exc:
        raise UserError(f"{exc} An -e that starts with '{{' or '[' is read as a JSON object or YAML flow mapping of "
                        f"variables, e.g. -e '{{\"vllm_port\": 8001}}' {_TEXT_NOT_SHOWN}") from None
    if not isinstance(data, dict):
        raise UserError(f"{where}: an -e that starts with '{{' or '[' must be a mapping of variable names to values, "
                        f"e.g. -e '{{\"vllm_port\": 8001}}' {_TEXT_NOT_SHOWN}")
    check_variable_names(data, where)
    check_nesting(data, where)
    return data


def parse_extra_vars(items: list[str] | None) -> dict:
    """-e KEY=VALUE, -e '{JSON}' and -e @file.yaml, in order (later wins). Errors name the -e by position,
    never its text: a mistyped -e may be a secret (a token pasted without its KEY=)."""
    from engine.api import check_variable_names, load_yaml

    out: dict = {}
    for number, item in enumerate(items or [], start=1):
        where = f"-e number {number}"
        if item.startswith("@"):
            data = load_yaml(item[1:], "extra vars file")
            if not isinstance(data, dict):
                raise UserError(f"{item[1:]}: an extra vars file must be a mapping of variable names to values")
            check_variable_names(data, item[1:])
            out.update(data)
        elif _starts_like_json(item):
            out.update(_mapping_arg(item, where))
        else:
            for word in _kv_words(item):
                key, value = _extra_var(word, where)
                out[key] = value
    return out


def _kv_words(item: str) -> list[str]:
    """`-e "a=1 b=2"`: several KEY=VALUE words in one -e (split as a shell would, quotes kept together), as
    ansible-playbook reads them; one word, or words that are not all KEY=VALUE, stay one KEY=VALUE."""
    import shlex

    try:
        words = shlex.split(item)
    except ValueError:  # an unclosed quote: one value, as written
        return [item]
    if len(words) > 1 and all(w.partition("=")[0].isidentifier() and "=" in w for w in words):
        return words
    return [item]
