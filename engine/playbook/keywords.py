"""Task and play keywords: which exist, and the check of each one's value at load time.

Each check returns the value in the type the runner expects, or raises one paragraph naming the place,
the keyword and the fix. They run when the playbook loads, so a wrongly typed keyword changes no host.
"""

from __future__ import annotations

import re
from typing import Any

from engine.errors import UserError
from engine.parsing.yamlfile import check_variable_names, is_variable_name
from engine.template.markers import is_template
from engine.template.secrets import is_secret_name

TASK_KEYWORDS = {
    "name",
    "register",
    "when",
    "loop",
    "with_items",
    "with_dict",
    "with_together",
    "with_list",
    "with_sequence",
    "with_nested",
    "with_indexed_items",
    "with_subelements",
    "with_first_found",
    "with_fileglob",
    "with_random_choice",
    "loop_control",
    "diff",
    "retries",
    "until",
    "delay",
    "notify",
    "tags",
    "ignore_errors",
    "changed_when",
    "failed_when",
    "no_log",
    "vars",
    "listen",
    "check_mode",
    "timeout",
    "any_errors_fatal",
    "environment",
    "run_once",
    "delegate_to",
    "delegate_facts",
    "args",
    *("become", "become_user", "become_method", "remote_user"),
}
# Who the task runs as: inherited together from play, role entry, block and import (remote_user: Ansible's login
# user for the task, engine/connection/login.py).
BECOME_KEYWORDS = ("become", "become_user", "become_method", "remote_user")
BECOME_METHODS = ("sudo",)
PLAY_KEYWORDS = {"name", "hosts", "vars", "roles", "tasks", "handlers", "gather_facts", "tags", "pre_tasks",
                 "serial", "max_fail_percentage", "any_errors_fatal", "environment", *BECOME_KEYWORDS}

# -- checks ---------------------------------------------------------------------------------
# Each returns the value in the type the runner expects, or raises one paragraph naming the place,
# the keyword and the fix. They run at load time, so a wrongly typed keyword changes no host.

BOOL_STRINGS = {"yes": True, "true": True, "on": True, "1": True, "no": False, "false": False, "off": False, "0": False}
# The runner reads these flags as plain booleans (it does not render them), so a template is refused.
FLAG_KEYWORDS = ("ignore_errors", "no_log", "check_mode", "gather_facts", "become", "any_errors_fatal", "run_once",
                 "delegate_facts", "diff")
LOOP_CONTROL_KEYS = {"loop_var", "index_var", "label", "pause", "extended", "extended_allitems"}
MAX_DELAY_S = 86400.0


def is_template_text(value: Any) -> bool:
    """A string that holds a template (engine/template/markers.py needs no Jinja2: checking a playbook loads none)."""
    return isinstance(value, str) and is_template(value)


_ASSIGNMENT = re.compile(r"^\s*([A-Za-z_][\w.-]*)\s*[=:]")


def shown(value: Any) -> str:
    """A keyword's value in a message: short strings quoted, anything else by its type; a string that assigns
    a secret-named variable (`db_password=...`) shows its name only."""
    if isinstance(value, str):
        assigned = _ASSIGNMENT.match(value)
        if assigned and is_secret_name(assigned.group(1)):
            return f"a string assigning {assigned.group(1)} (its value is not shown)"
        return repr(value) if len(value) <= 40 else repr(value[:37]) + "..."
    if value is None:
        return "nothing (an empty value)"
    if isinstance(value, (bool, int, float)):
        return f"{type(value).__name__} {value!r}"
    return f"a {'mapping' if isinstance(value, dict) else type(value).__name__}"


def wrong(where: str, key: str, expected: str, value: Any, example: str) -> UserError:
    return UserError(f"{where}: '{key}' must be {expected}, got {shown(value)}. Write it like: {key}: {example}")


def condition_list(value: Any, where: str, key: str) -> list:
    """`when` and friends: a Jinja2 expression, a boolean, or a list of those (all must hold)."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, bool) or (isinstance(item, str) and item.strip()):
            continue
        raise wrong(where, key, "an expression (a string), true/false, or a list of those", item, "result.rc == 0")
    return list(items)


def condition(value: Any, where: str, key: str) -> str | bool:
    """`changed_when`/`failed_when`/`until` are evaluated once: a list becomes one expression joined with `and`."""
    items = condition_list(value, where, key)
    if not items:
        raise wrong(where, key, "at least one condition", value, "result.rc != 0")
    if len(items) == 1:
        return items[0]
    return " and ".join(f"({str(item).lower() if isinstance(item, bool) else item})" for item in items)


def flag(value: Any, where: str, key: str) -> bool:
    """A boolean, or one of Ansible's boolean words (yes/no, true/false, on/off, 1/0; any case)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in BOOL_STRINGS:
        return BOOL_STRINGS[value.strip().lower()]
    if is_template_text(value):
        raise UserError(
            f"{where}: '{key}' is a template ({shown(value)}), which is not supported for '{key}' (the engine "
            f"reads it as a plain true/false). Write {key}: true or {key}: false."
        )
    raise wrong(where, key, "true or false (or yes/no, on/off, 1/0)", value, "true")


def retries_of(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise wrong(where, "retries", "a whole number >= 0", value, "3")
    return value


def delay_of(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_DELAY_S:
        raise wrong(where, "delay", f"a number of seconds from 0 to {MAX_DELAY_S:.0f}", value, "5")
    return float(value)


def timeout_of(value: Any, where: str) -> float:
    """`timeout`: seconds a task may run on the host before the worker stops it (as Ansible's keyword)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_DELAY_S:
        raise wrong(where, "timeout", f"a number of seconds above 0, at most {MAX_DELAY_S:.0f}", value, "600")
    return float(value)


def names(value: Any, where: str, key: str) -> list[str]:
    """`notify`/`tags`/`listen`: a string or a list of strings. Tags as Ansible reads them: `tags: a,b` is two
    tags, a number is its text, and a template (`tags: "{{ x }}"`) stays one entry, rendered when the run selects
    tasks (engine/run/runner.py resolve_tags)."""
    if key == "tags":
        return tag_names(value, where)
    items = value if isinstance(value, list) else [value]
    for item in items:
        if not (isinstance(item, str) and item.strip()):
            raise wrong(where, key, "a name or a list of names (strings)", item, "[name1, name2]")
    return list(items)


def tag_names(value: Any, where: str) -> list[str]:
    """`tags`: a name, names separated by commas, a number, a template, or a list of those."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()] if not is_template_text(value) else [value]
    items = value if isinstance(value, list) else [value]
    out: list[str] = []
    for item in items:
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            item = str(item)
        if not (isinstance(item, str) and item.strip()):
            raise wrong(where, "tags", "a name, names separated by commas, or a list of names", item, "[name1, name2]")
        out.append(item.strip())
    return out


def identifier(value: Any, where: str, key: str) -> str:
    if not is_variable_name(value):
        raise wrong(where, key, "a variable name (letters, digits and _, not starting with a digit)", value, "my_result")
    return value


def variables_of(value: Any, where: str, key: str = "vars") -> dict:
    """A mapping of variable names to values (an empty `vars:` is an empty mapping)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise wrong(where, key, "a mapping of variable names to values", value, "{model_path: /models/x}")
    check_variable_names(value, f"{where}: '{key}'")
    return value


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def environment_of(value: Any, where: str) -> dict | str:
    """`environment` (play, block, task): a mapping of environment variable names to values (strings, numbers,
    true/false, or templates), or a template that gives such a mapping, as in Ansible."""
    if is_template_text(value):
        return value
    if not isinstance(value, dict):
        raise wrong(where, "environment", "a mapping of variable names to values (or a template giving one)", value,
                    "{HF_HOME: /data/hf, CUDA_VISIBLE_DEVICES: '0'}")
    for name, item in value.items():
        if not (isinstance(name, str) and _ENV_NAME.fullmatch(name)):
            raise UserError(f"{where}: 'environment' has the name {shown(name)}, which is not an environment variable "
                            "name (letters, digits and _, not starting with a digit); rename it")
        if item is None or isinstance(item, (dict, list)):
            raise UserError(f"{where}: 'environment' {name} must be a string, a number or true/false, got "
                            f"{shown(item)}; write it as a string")
        if isinstance(item, str) and "\0" in item:
            raise UserError(f"{where}: 'environment' {name} holds a NUL character, which no process environment can "
                            "carry; remove it")
    return value


# The loops: `loop`, and the with_* forms (each one Ansible's lookup of that name over the task's terms); how each
# kind turns into items: engine/run/loops.py.
LOOP_KEYWORDS = ("loop", "with_items", "with_dict", "with_together", "with_list", "with_sequence", "with_nested",
                 "with_indexed_items", "with_subelements", "with_first_found", "with_fileglob", "with_random_choice")
# what each takes when written out (a template giving it is checked when it renders)
_LOOP_SHAPES: dict[str, tuple[Any, str, str]] = {"with_dict": ((dict, list), "a mapping (or a list of them)", '"{{ users }}"'),
                "with_sequence": ((str, int, list), "a sequence such as 'start=1 end=5' or 'count=3'", "count=3"),
                "with_first_found": ((str, list, dict), "a file name, a list of them, or {files, paths}",
                                     "[{files: [a.yml, default.yml], paths: [vars]}]"),
                "with_fileglob": ((str, list), "a file pattern or a list of them", "'files/*.conf'")}


def loop_of(raw: dict, where: str) -> tuple[Any, str]:
    """(`loop` or a legacy with_* loop's value, which one): a list (with_dict: a mapping; with_sequence: its
    `start=1 end=5` text), or a template that gives one."""
    keys = [k for k in LOOP_KEYWORDS if k in raw]
    if len(keys) > 1:
        raise UserError(f"{where}: the task has {' and '.join(repr(k) for k in keys)}; keep one of them")
    if not keys:
        return None, "loop"
    kind, value = keys[0], raw[keys[0]]
    types, expected, example = _LOOP_SHAPES.get(kind, (list, "a list", '"{{ models }}"'))
    if kind in ("with_list", "with_items", "with_random_choice") and not isinstance(value, list) \
            and not is_template_text(value) and value is not None:
        value = [value]  # a single term, as Ansible takes it
    if is_template_text(value) or isinstance(value, types) and not isinstance(value, bool):
        if kind == "with_sequence":
            check_sequence_terms(value, where)
        return value, kind
    raise wrong(where, kind, f"{expected}, or a template that gives one", value, example)


def check_sequence_terms(value: Any, where: str) -> None:
    """with_sequence written out (no template in it): its `start= end= stride= format=` / `count=` / `4-8/2:fmt`
    text is parsed now, so a mistake is a load error (engine/run/loops.py reads it the same way at run time)."""
    terms = value if isinstance(value, list) else [value]
    if any(is_template_text(t) for t in terms):
        return
    try:
        for term in terms:
            sequence_items(term)
    except SequenceError as exc:
        raise UserError(f"{where}: with_sequence {shown(value)}: {exc}") from None


class SequenceError(ValueError):
    """A with_sequence text that makes no sequence (the message says which part)."""


_SEQ_NUM = r"(0?x?[0-9a-f]+)"
_SEQ_SHORT = re.compile(rf"^({_SEQ_NUM}-)?{_SEQ_NUM}(/{_SEQ_NUM})?(:(.+))?$", re.IGNORECASE)
_SEQ_FIELDS = ("start", "end", "stride", "count", "format")
MAX_SEQUENCE = 100_000  # items of one with_sequence: a bigger one is a typo (end=1e9), not a loop


def _seq_int(key: str, text: Any) -> int:
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    try:
        return int(str(text), 10)
    except ValueError:
        try:
            return int(str(text), 0)
        except ValueError:
            raise SequenceError(f"{key}={text!r} is not a whole number") from None


def sequence_items(term: Any) -> list[str]:
    """Ansible's with_sequence of one term: `[start-]end[/stride][:format]` or `start= end= stride= format=` /
    `count=`; the numbers as text, formatted by `format` (printf style, default %d)."""
    text = str(term).strip()
    fields: dict[str, Any] = {}
    short = _SEQ_SHORT.match(text)
    if short:
        fields = {k: v for k, v in zip(("start", "end", "stride", "format"), short.group(2, 3, 5, 7)) if v is not None}
    else:
        for part in text.split():
            key, eq, value = part.partition("=")
            if not eq or key not in _SEQ_FIELDS:
                raise SequenceError(f"{part!r} is not one of {', '.join(f + '=' for f in _SEQ_FIELDS)}")
            fields[key] = value
    start, stride = _seq_int("start", fields.get("start", 1)), _seq_int("stride", fields.get("stride", 1))
    fmt = str(fields.get("format", "%d"))
    if ("count" in fields) == ("end" in fields):
        raise SequenceError("give either end= or count=, one of them")
    if "count" in fields:
        count = _seq_int("count", fields["count"])
        if count == 0:
            return []
        end = start + count * stride - 1
    else:
        end = _seq_int("end", fields["end"])
    if stride > 0 and end < start:
        raise SequenceError("to count backwards make stride negative")
    if stride < 0 and end > start:
        raise SequenceError("to count forward do not make stride negative")
    if stride == 0:
        return []
    if fmt.count("%") != 1:
        raise SequenceError(f"bad format {fmt!r}: it needs exactly one % field, as %d or %02x")
    numbers = range(start, end + (1 if stride > 0 else -1), stride)
    if len(numbers) > MAX_SEQUENCE:
        raise SequenceError(f"it makes {len(numbers)} items, more than {MAX_SEQUENCE}")
    try:
        return [fmt % n for n in numbers]
    except (TypeError, ValueError):
        raise SequenceError(f"format {fmt!r} does not format a number") from None


def loop_control_of(value: Any, where: str) -> tuple[str, dict]:
    """`loop_control`: (loop_var, the other keys checked: index_var, label, pause, extended, extended_allitems)."""
    if not isinstance(value, dict):
        raise wrong(where, "loop_control", "a mapping", value, "{loop_var: model}")
    unknown = sorted(map(str, set(value) - LOOP_CONTROL_KEYS))
    if unknown:
        raise UserError(
            f"{where}: 'loop_control' has unknown key(s) {', '.join(unknown)}; it takes "
            f"{', '.join(sorted(LOOP_CONTROL_KEYS))} (e.g. loop_control: {{loop_var: model, label: '{{{{ model }}}}'}})."
        )
    loop_var = value.get("loop_var", "item")
    if not is_template_text(loop_var):
        loop_var = identifier(loop_var, where, "loop_control.loop_var")
    out: dict[str, Any] = {}
    if "index_var" in value:
        out["index_var"] = identifier(value["index_var"], where, "loop_control.index_var")
    for key in ("extended", "extended_allitems"):
        if key in value:
            out[key] = flag(value[key], where, f"loop_control.{key}")
    if "pause" in value:
        pause = value["pause"]
        if not is_template_text(pause) and (isinstance(pause, bool) or not isinstance(pause, (int, float))
                                            or not 0 <= pause <= MAX_DELAY_S):
            raise wrong(where, "loop_control.pause", f"seconds between items, 0 to {MAX_DELAY_S:.0f}", pause, "0.5")
        out["pause"] = pause
    if "label" in value:
        out["label"] = value["label"]
    return loop_var, out


def become_of(raw: dict, where: str) -> dict:
    """become/become_user/become_method/remote_user as given at this level (absent keys are inherited from above)."""
    out: dict[str, Any] = {}
    if "become" in raw:
        out["become"] = flag(raw["become"], where, "become")
    for key in ("become_user", "remote_user"):
        if key in raw:
            out[key] = _user_name(raw[key], where, key)
    if "become_method" in raw:
        method = raw["become_method"]
        if method not in BECOME_METHODS:
            raise wrong(where, "become_method", f"one of {', '.join(BECOME_METHODS)} (the only supported method)",
                        method, "sudo")
        out["become_method"] = method
    return out


def _user_name(user: Any, where: str, key: str) -> str:
    """A user name keyword: one word (or a template giving one)."""
    plain_name_ok = isinstance(user, str) and not any(c in user for c in " \t\n\r\0") and not user.startswith("-")
    if not (isinstance(user, str) and user.strip()) or not (plain_name_ok or is_template_text(user)):
        raise wrong(where, key, "a user name (or a template giving one)", user, "root")
    return user


def delegate_to_of(value: Any, where: str) -> str:
    """`delegate_to`: an inventory host's name, `localhost`, or a template giving one (rendered per host and item)."""
    if not (isinstance(value, str) and value.strip()) or any(c in value for c in "\t\n\r\0"):
        raise wrong(where, "delegate_to", "a host name of the inventory, localhost, or a template giving one", value,
                    "localhost")
    return value.strip()


def serial_of(value: Any, where: str) -> list:
    """`serial`: a number of hosts, a percentage ("30%"), a template giving one, or a list of those (growing
    batches; the last size repeats)."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise wrong(where, "serial", "a batch size, a percentage or a list of them", value, "[1, 5, '25%']")
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
            continue
        if isinstance(item, str) and (is_template_text(item) or re.fullmatch(r"\s*\d+(\.\d+)?\s*%\s*|\s*\d+\s*", item)):
            continue
        raise wrong(where, "serial", "a whole number of hosts >= 0 (0: all), a percentage like '25%', a template "
                    "giving one, or a list of those", item, "[1, '25%']")
    return list(items)


def max_fail_percentage_of(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
        raise wrong(where, "max_fail_percentage", "a number from 0 to 100", value, "0")
    return float(value)


def task_keywords(raw: dict, where: str) -> dict:
    """The task's keywords, checked and converted to the types of the Task fields."""
    loop, loop_kind = loop_of(raw, where)
    out: dict[str, Any] = {"loop": loop, "loop_kind": loop_kind}
    for key in ("when",):
        if key in raw:
            out[key] = condition_list(raw[key], where, key)
    for key in ("changed_when", "failed_when", "until"):
        if key in raw:
            out[key] = condition(raw[key], where, key)
    for key in ("notify", "tags", "listen"):
        if key in raw:
            out[key] = names(raw[key], where, key)
    for key in FLAG_KEYWORDS:
        if key in raw:  # a templated run_once renders when the task runs (engine/run/runner.py run_once_holds)
            out[key] = raw[key] if key == "run_once" and is_template_text(raw[key]) else flag(raw[key], where, key)
    if "tags" in out:
        out["tags"] = set(out["tags"])
    if "loop_control" in raw:
        out["loop_var"], out["loop_control"] = loop_control_of(raw["loop_control"], where)
    if "register" in raw:
        out["register"] = identifier(raw["register"], where, "register")
    if "retries" in raw:
        out["retries"] = retries_of(raw["retries"], where)
    if "delay" in raw:
        out["delay"] = delay_of(raw["delay"], where)
    if "timeout" in raw:
        out["timeout"] = timeout_of(raw["timeout"], where)
    out["vars"] = variables_of(raw.get("vars"), where)
    if "environment" in raw:
        out["environment"] = [environment_of(raw["environment"], where)]
    if "delegate_to" in raw:
        out["delegate_to"] = delegate_to_of(raw["delegate_to"], where)
    out.update(become_of(raw, where))
    return out
