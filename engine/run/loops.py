"""A task's loop turned into its items, as Ansible makes them: `loop` as given, and each with_* as the lookup of
that name over the task's rendered terms (with_items, with_list, with_dict, with_together, with_sequence,
with_nested, with_indexed_items, with_subelements, with_fileglob, with_random_choice; with_first_found through
the first_found lookup, engine/template/lookups.py). And what loop_control adds to each item's variables
(index_var, ansible_loop with `extended`, ansible_loop_var).

Trust (docs/SAFETY.md): with_fileglob reads the names of files on the control node, so its pattern must be the
playbook's own (a pattern built from what a host returned is refused)."""

from __future__ import annotations

import copy
import glob
import itertools
import os
import secrets
from pathlib import Path
from typing import Any

from engine.errors import TaskError
from engine.playbook.keywords import SequenceError, sequence_items
from engine.playbook.model import Play, Task


def _fail(task: Task, what: str) -> TaskError:
    return TaskError(f"{task.source} ('{task.name}'): {task.loop_kind}: {what}")


def _one_level(values: list) -> list:
    return [i for v in values for i in (v if isinstance(v, list) else [v])]


def loop_items(task: Task, value: Any, play: Play | None = None, from_host: bool = False) -> list:
    """The items of a rendered loop (`value`: the loop's terms after rendering); `from_host`: the terms read what
    a host returned (with_fileglob refuses them)."""
    kind = task.loop_kind
    if kind == "with_dict":
        return dict_items(task, value)
    if kind == "with_sequence":
        try:
            return [i for term in (value if isinstance(value, list) else [value]) for i in sequence_items(term)]
        except SequenceError as exc:
            raise _fail(task, f"{value!r}: {exc}") from None
    if kind == "with_subelements":
        return subelements(task, value)
    if kind == "with_fileglob":
        return fileglob(task, value if isinstance(value, list) else [value], play, from_host)
    if kind in ("with_list", "with_items", "with_random_choice", "with_indexed_items") and not isinstance(value, list):
        value = [value]  # a template that gave one value: that value is the one term
    if not isinstance(value, list):
        raise _fail(task, f"must be a list, got {type(value).__name__}")
    if kind == "with_items":
        return _one_level(value)
    if kind == "with_together":
        lists = [v if isinstance(v, list) else [v] for v in value]
        return [list(t) for t in itertools.zip_longest(*lists)]
    if kind == "with_nested":
        return nested(task, value)
    if kind == "with_indexed_items":
        return [[i, v] for i, v in enumerate(_one_level(value))]
    if kind == "with_random_choice":
        return [secrets.choice(value)] if value else []
    return value  # loop, with_list, with_first_found (its lookup already ran)


def dict_items(task: Task, value: Any) -> list:
    """with_dict: each term (one mapping, or a list of them) as {key, value} items; any other term fails with the
    dict lookup's message, which playbooks test for."""
    out: list = []
    for term in value if isinstance(value, list) else [value]:
        if not isinstance(term, dict):
            raise _fail(task, f"the 'dict' lookup plugin expects a dictionary, got '{term}' of type {type(term)})")
        out += [{"key": k, "value": v} for k, v in term.items()]
    return out


def nested(task: Task, lists: list) -> list:
    """with_nested: every combination, one item from each list in order, as one flat list."""
    if not lists:
        raise _fail(task, "with_nested needs at least one list")
    combos: list[list] = [[]]
    for values in lists:
        combos = [c + [v] for c in combos for v in (values if isinstance(values, list) else [values])]
    return [_one_level(c) for c in combos]


def subelements(task: Task, terms: Any) -> list:
    """with_subelements: [LIST_OF_MAPPINGS, 'key.subkey', {skip_missing: bool}] -> [mapping, one of its subkey's
    items] pairs, as Ansible's subelements lookup (the mapping given without that key)."""
    if not isinstance(terms, list) or not 2 <= len(terms) <= 3 or not isinstance(terms[0], (list, dict)) \
            or not isinstance(terms[1], str):
        raise _fail(task, "expects a list of two or three items: a list (or mapping) of mappings, the subkey's name, "
                          "and optionally {skip_missing: true}")
    flags = terms[2] if len(terms) == 3 else {}
    if not isinstance(flags, dict) or set(flags) - {"skip_missing"}:
        raise _fail(task, "the optional third item must be a mapping of flags: {skip_missing: true}")
    skip_missing = str(flags.get("skip_missing", False)).lower() in ("true", "yes", "1", "on")
    elements = terms[0]
    if isinstance(elements, dict):
        if elements.get("skipped", False) is not False:
            return []
        elements = list(elements.values())
    keys = terms[1].split(".")
    out: list = []
    for element in elements:
        if not isinstance(element, dict):
            raise _fail(task, f"expects mappings in the list, got {element!r}")
        if element.get("skipped", False) is not False:
            continue
        shown = copy.deepcopy(element)  # given without the subkey, as Ansible's lookup gives it
        found = _subelement_list(task, shown, keys, skip_missing)
        if found is None:
            continue
        parent, sublist = found
        parent.pop(keys[-1], None)
        out += [[shown, sub] for sub in sublist]
    return out


def _subelement_list(task: Task, element: dict, keys: list[str], skip_missing: bool) -> tuple[dict, list] | None:
    value = element
    for depth, key in enumerate(keys):
        if not isinstance(value, dict) or key not in value:
            if skip_missing:
                return None
            raise _fail(task, f"could not find '{key}' key in iterated item {value!r}")
        if depth < len(keys) - 1:
            value = value[key]
            continue
        if not isinstance(value[key], list):
            raise _fail(task, f"the key {key} should point to a list, got {value[key]!r}")
        return value, value[key]
    return None


def _search_dirs(task: Task, play: Play | None) -> list[Path]:
    roots = ([task.role_dir] if task.role_dir is not None else []) + ([play.source.parent] if play else [Path.cwd()])
    return [d for root in roots for d in (root / "files", root)]


def fileglob(task: Task, patterns: list, play: Play | None, from_host: bool) -> list[str]:
    """with_fileglob: the control node's files (not folders) matching each pattern, sorted; a relative pattern in
    the first of the role's files/ and folder, the playbook's files/ and folder that has a match."""
    if from_host:
        raise _fail(task, "its pattern reads what a host returned; a control-node file pattern must be the "
                          "playbook's own (write it in the playbook or its vars)")
    out: list[str] = []
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern:
            raise _fail(task, f"a pattern must be a non-empty string, not {pattern!r}")
        pattern = os.path.expanduser(pattern)
        if os.path.isabs(pattern):
            out += sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
            continue
        for folder in _search_dirs(task, play):
            found = sorted(p for p in glob.glob(str(folder / pattern)) if os.path.isfile(p))
            if found:
                out += found
                break
    return out


def item_variables(task: Task, loop_var: str, items: list, index: int) -> dict:
    """The variables one item of a loop binds: the loop variable, ansible_loop_var, and with loop_control the
    index_var (ansible_index_var) and, with `extended`, ansible_loop (index, first, last, allitems, ...)."""
    control = task.loop_control
    names: dict[str, Any] = {loop_var: items[index], "ansible_loop_var": loop_var}
    if control.get("index_var"):
        names[control["index_var"]] = index
        names["ansible_index_var"] = control["index_var"]
    if control.get("extended"):
        length = len(items)
        info: dict[str, Any] = {"index": index + 1, "index0": index, "first": index == 0, "last": index == length - 1,
                                "length": length, "revindex": length - index, "revindex0": length - index - 1}
        if control.get("extended_allitems", True):
            info["allitems"] = items
        if index + 1 < length:
            info["nextitem"] = items[index + 1]
        if index > 0:
            info["previtem"] = items[index - 1]
        names["ansible_loop"] = info
    return names


def item_result_fields(task: Task, loop_var: str, names: dict) -> dict:
    """What Ansible adds to each item's result: the item under the loop variable's name, ansible_loop_var, the
    index_var and ansible_loop when loop_control asks for them."""
    keep = [loop_var, "ansible_loop_var", "ansible_index_var", "ansible_loop"]
    if task.loop_control.get("index_var"):
        keep.append(task.loop_control["index_var"])
    return {k: names[k] for k in keep if k in names}
