"""Ansible's lookups that only reshape what they are given (sequence, items, list, dict, indexed_items, nested,
together, subelements, random_choice) or read the inventory's groups (inventory_hostnames), as ansible-core 2.19 gives them.

Each takes a LookupCall (engine/template/lookups.py) and gives a list; none reads a file, the environment or the
network, so a term that came from a host's answer is data here like any other."""

from __future__ import annotations

import fnmatch
import itertools
import random
import re
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from engine.template.bounds import TemplateRefused, tick

if TYPE_CHECKING:
    from engine.template.lookups import LookupCall

MAX_ITEMS = 1_000_000  # the longest list sequence or nested may build (as the sandbox's MAX_SEQUENCE)
_NUM = r"(0?x?[0-9a-f]+)"
_SHORTCUT = re.compile(rf"^({_NUM}-)?{_NUM}(/{_NUM})?(:(.+))?$", re.I)  # [start-]end[/stride][:format]
_SEQUENCE_FIELDS = ("start", "end", "stride", "count", "format")


def _one_level(terms: list) -> list:
    """Lists among the terms spread one level (Ansible's LookupBase._flatten)."""
    out: list = []
    for term in terms:
        out.extend(term) if isinstance(term, (list, tuple)) else out.append(term)
    return out


def _bounded(call: LookupCall, count: int) -> None:
    if count > MAX_ITEMS:
        raise TemplateRefused(f"lookup('{call.name}') would build {count:,} items (limit {MAX_ITEMS:,})")


# -- sequence -------------------------------------------------------------------------------------------------------


def sequence_lookup(call: LookupCall) -> list:
    """'5', '2-10/2', '4:host%02d', 'start=1 end=10 stride=2 format=x%d', 'count=4', or options: the numbers as text."""
    terms = call.terms or ([""] if call.options else [])
    out: list[str] = []
    for term in terms:
        fields = {k: v for k, v in call.options.items() if k in _SEQUENCE_FIELDS}
        fields.update(_sequence_fields(call, term))
        out += _sequence(call, fields)
    return out


def _sequence_fields(call: LookupCall, term: Any) -> dict:
    if not isinstance(term, str):
        raise call.failed(f"a term is text such as 'start=1 end=5' or '1-5', not {term!r}")
    m = _SHORTCUT.match(term)
    if m:
        found = {"start": m.group(2), "end": m.group(3), "stride": m.group(5), "format": m.group(7)}
        return {k: v for k, v in found.items() if v is not None}
    try:
        words = shlex.split(term)
    except ValueError as exc:
        raise call.failed(f"cannot read {term!r}: {exc}") from None
    fields = {}
    for word in words:
        key, eq, value = word.partition("=")
        if not eq or key not in _SEQUENCE_FIELDS:
            raise call.failed(f"unrecognized argument {word!r} in {term!r}; it takes {', '.join(_SEQUENCE_FIELDS)} "
                              "(start=1 end=5) or the short form [start-]end[/stride][:format]")
        fields[key] = value
    return fields


def _integer(call: LookupCall, key: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*[-+]?\d+\s*", value):
        return int(value)
    raise call.failed(f"{key} must be a whole number, not {value!r}")


def _sequence(call: LookupCall, fields: dict) -> list[str]:
    start, stride = _integer(call, "start", fields.get("start", 1)), _integer(call, "stride", fields.get("stride", 1))
    fmt = str(fields.get("format") or "%d")
    count, end = fields.get("count"), fields.get("end")
    if count is None and end is None:
        raise call.failed("give count or end (start=1 end=5, or count=5)")
    if count is not None and end is not None:
        raise call.failed("give count or end, not both")
    if count is not None:
        count = _integer(call, "count", count)
        if count == 0:
            return []
        end = start + count * stride - 1
    end = _integer(call, "end", end)
    if stride > 0 and end < start:
        raise call.failed(f"end {end} is below start {start}: to count backwards make stride negative")
    if stride < 0 and end > start:
        raise call.failed(f"end {end} is above start {start}: to count forward make stride positive")
    if stride == 0:
        return []
    if fmt.count("%") != 1:
        raise call.failed(f"the format {fmt!r} must hold exactly one % field, such as %d or %02x")
    numbers = range(start, end + (1 if stride > 0 else -1), stride)
    _bounded(call, len(numbers))
    try:
        return [fmt % i for i in numbers]
    except (ValueError, TypeError) as exc:
        raise call.failed(f"the format {fmt!r} cannot format a number: {exc}") from None


# -- the reshaping lookups ----------------------------------------------------------------------------------------


def items_lookup(call: LookupCall) -> list:
    return _one_level(call.terms)


def list_lookup(call: LookupCall) -> list:
    return list(call.terms)


def dict_lookup(call: LookupCall) -> list:
    out = []
    for term in call.terms:
        if not isinstance(term, Mapping):
            raise call.failed(f"it takes mappings, and was given {type(term).__name__} {term!r:.80}")
        out += [{"key": k, "value": v} for k, v in term.items()]
    return out


def indexed_items_lookup(call: LookupCall) -> list:
    return [[i, item] for i, item in enumerate(_one_level(call.terms))]


def nested_lookup(call: LookupCall) -> list:
    """Every combination of one item of each list, in order (with_nested)."""
    lists = _lists(call)
    count = 1
    for x in lists:
        count *= len(x)
    _bounded(call, count)
    return [_one_level(list(combo)) for combo in itertools.product(*lists)]


def together_lookup(call: LookupCall) -> list:
    """The lists side by side, the shorter ones padded with None (with_together)."""
    lists = _lists(call)
    return [_one_level(list(row)) for row in itertools.zip_longest(*lists)]


def _lists(call: LookupCall) -> list[list]:
    """The terms, each a list (with_nested: [[a, b], [c]] gives the terms [a, b] and [c])."""
    if not call.terms:
        raise call.failed("it needs at least one list")
    for term in call.terms:
        if not isinstance(term, (list, tuple)):
            raise call.failed(f"each term must be a list, not {type(term).__name__} {term!r:.80}")
    return [list(t) for t in call.terms]


def subelements_lookup(call: LookupCall) -> list:
    """[item, sub] for each item of a list (or a mapping's values) and each sub of its list at a key path 'a.b'."""
    terms = list(call.terms)
    if not 2 <= len(terms) <= 3 or not isinstance(terms[0], (list, dict)) or not isinstance(terms[1], str):
        raise call.failed("it takes a list of mappings (or a mapping of them), a key path such as 'groups' or "
                          "'a.b', and optionally {'skip_missing': true}")
    flags = terms[2] if len(terms) == 3 else {}
    if not isinstance(flags, Mapping) or set(flags) - {"skip_missing"}:
        raise call.failed(f"the third term is a mapping of flags (skip_missing), not {flags!r}")
    skip = call.flag("skip_missing", False, flags.get("skip_missing", False))
    elements = terms[0]
    if isinstance(elements, dict):
        if elements.get("skipped", False) is not False:
            return []
        elements = list(elements.values())
    out = []
    for item in elements:
        tick()
        if not isinstance(item, dict):
            raise call.failed(f"each element must be a mapping, not {item!r:.80}")
        if item.get("skipped", False) is not False:
            continue
        keys = terms[1].split(".")
        subs = _sublist(call, item, keys, skip)
        shown = _without(item, keys) if subs or _has_path(item, keys) else item
        out += [[shown, sub] for sub in subs]
    return out


def _has_path(item: Any, keys: list) -> bool:
    for key in keys:
        if not isinstance(item, Mapping) or key not in item:
            return False
        item = item[key]
    return True


def _without(item: dict, keys: list) -> dict:
    """The item without the list it was split on, as ansible-core gives it (its lookup takes the list out of the
    item); a copy: the variable itself keeps it."""
    copy = dict(item)
    if len(keys) == 1:
        copy.pop(keys[0], None)
    elif isinstance(copy.get(keys[0]), Mapping):
        copy[keys[0]] = _without(copy[keys[0]], keys[1:])
    return copy


def _sublist(call: LookupCall, item: dict, keys: list, skip: bool) -> list:
    value: Any = item
    for i, key in enumerate(keys):
        if not isinstance(value, Mapping) or key not in value:
            if skip:
                return []
            raise call.failed(f"no key {key!r} in the item {value!r:.120}; add it or pass {{'skip_missing': true}}")
        value = value[key]
        last = i == len(keys) - 1
        if not last and not isinstance(value, Mapping):
            if skip:
                return []
            raise call.failed(f"the key {key!r} must hold a mapping, and holds {value!r:.120}")
        if last and not isinstance(value, list):
            raise call.failed(f"the key {key!r} must hold a list, and holds {value!r:.120}")
    return list(value)


def random_choice_lookup(call: LookupCall) -> list:
    """One of the terms, picked at random ([] when none)."""
    return [random.SystemRandom().choice(call.terms)] if call.terms else []


# -- inventory_hostnames --------------------------------------------------------------------------------------------


def inventory_hostnames_lookup(call: LookupCall) -> list:
    """The hosts a pattern names ('all', 'web:&prod', 'db*:!db3'), from the `groups` variable; [] when none match."""
    groups = call.variables.get("groups") if isinstance(call.variables, Mapping) else None
    if not isinstance(groups, Mapping):
        raise call.failed("the `groups` variable is missing; it reads the inventory's groups")
    patterns = [p for t in _one_level(call.terms) for p in re.split(r"[,:]", str(t)) if p.strip()]
    return _select(groups, [p.strip() for p in patterns])


def _select(groups: Mapping, parts: list[str]) -> list[str]:
    every = list(groups.get("all", []))
    chosen: list[str] = []
    for part in [p for p in parts if p[0] not in "!&"]:
        chosen += [h for h in _match(groups, every, part) if h not in chosen]
    if parts and all(p[0] in "!&" for p in parts):
        chosen = list(every)
    for part in [p for p in parts if p[0] == "&"]:
        keep = set(_match(groups, every, part[1:]))
        chosen = [h for h in chosen if h in keep]
    for part in [p for p in parts if p[0] == "!"]:
        drop = set(_match(groups, every, part[1:]))
        chosen = [h for h in chosen if h not in drop]
    return chosen


def _match(groups: Mapping, every: list[str], part: str) -> list[str]:
    if part in groups:
        return list(groups[part])
    if part in every:
        return [part]
    if any(c in part for c in "*?["):
        hits = [h for h in every if fnmatch.fnmatchcase(h, part)]
        for name, members in groups.items():
            if name != "all" and fnmatch.fnmatchcase(name, part):
                hits += [h for h in members if h not in hits]
        return hits
    return []


PLUGINS: dict[str, tuple[Any, frozenset[str]]] = {
    "sequence": (sequence_lookup, frozenset(_SEQUENCE_FIELDS)),
    "items": (items_lookup, frozenset()),
    "list": (list_lookup, frozenset()),
    "dict": (dict_lookup, frozenset()),
    "indexed_items": (indexed_items_lookup, frozenset()),
    "nested": (nested_lookup, frozenset()),
    "together": (together_lookup, frozenset()),
    "subelements": (subelements_lookup, frozenset({"skip_missing"})),
    "inventory_hostnames": (inventory_hostnames_lookup, frozenset()),
    "random_choice": (random_choice_lookup, frozenset()),
}

