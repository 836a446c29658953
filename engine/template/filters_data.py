"""Ansible's filters on lists and mappings (combine, dict2items, flatten, union, zip, product, subelements, ternary,
random, ...), with ansible-core 2.19's semantics, for the sandbox (engine/template/environment.py).

Pure functions of their arguments: what a value carries (a host's answer, a secret) follows it through them by the
render's taint frame (engine/template/taint.py), as through any Jinja filter. What Python's itertools give lazily
is a list here (a template's value must be data); the sizes they build are bounded like `*` in the sandbox."""

from __future__ import annotations

import itertools
import math
import random as _random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jinja2 import pass_environment

from engine.errors import TaskError
from engine.template.bounds import TemplateRefused, tick

MAX_ITEMS = 1_000_000  # the largest list a combinatorial filter may build (as MAX_SEQUENCE for `*`)
LIST_MERGES = ("replace", "keep", "append", "prepend", "append_rp", "prepend_rp")


def _fail(name: str, what: str) -> TaskError:
    return TaskError(f"the {name} filter: {what}")


def _is_list(value: Any) -> bool:
    """A sequence that is not text (Ansible's is_sequence)."""
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


# -- combine ------------------------------------------------------------------------------------------------------


def merge(low: Mapping, high: Mapping, recursive: bool, list_merge: str) -> dict:
    """`high` over a copy of `low`: nested mappings merged when recursive, lists as list_merge says."""
    out = dict(low)
    for key, new in high.items():
        tick()
        old = out.get(key, _MISSING)
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            out[key] = merge(old, new, recursive, list_merge) if recursive else new
        elif isinstance(old, list) and isinstance(new, list):
            out[key] = _merge_lists(old, new, list_merge)
        else:
            out[key] = new
    return out


_MISSING = object()


def _merge_lists(old: list, new: list, how: str) -> list:
    if how == "replace":
        return new
    if how == "keep":
        return old
    if how == "append":
        return old + new
    if how == "prepend":
        return new + old
    kept = [x for x in old if x not in new]
    return kept + new if how == "append_rp" else new + kept


def combine(*terms: Any, recursive: bool = False, list_merge: str = "replace", **unknown: Any) -> Any:
    """Ansible's `combine`: later mappings win; `[d1, d2] | combine` too."""
    if unknown:
        raise _fail("combine", f"it takes recursive and list_merge, not {', '.join(sorted(unknown))}")
    if list_merge not in LIST_MERGES:
        raise _fail("combine", f"list_merge must be one of {', '.join(LIST_MERGES)}, not {list_merge!r}")
    dicts = flatten(list(terms), levels=1)
    for d in dicts:
        if not isinstance(d, Mapping):
            raise _fail("combine", f"it combines mappings, and was given a {type(d).__name__} ({d!r:.80})")
    if not dicts:
        return {}
    if len(dicts) == 1:
        return dicts[0]
    out = dicts[-1]  # merged from the last (highest) down, as ansible-core does: list_merge results match
    for d in reversed(dicts[:-1]):
        out = merge(d, out, recursive, list_merge)
    return out


# -- reshaping ----------------------------------------------------------------------------------------------------


def dict2items(value: Any, key_name: str = "key", value_name: str = "value") -> list:
    if not isinstance(value, Mapping):
        raise _fail("dict2items", f"it needs a mapping, not a {type(value).__name__}")
    return [{key_name: k, value_name: v} for k, v in value.items()]


def items2dict(value: Any, key_name: str = "key", value_name: str = "value") -> dict:
    if not _is_list(value):
        raise _fail("items2dict", f"it needs a list of mappings, not a {type(value).__name__}")
    try:
        return {item[key_name]: item[value_name] for item in value}
    except (KeyError, TypeError):
        raise _fail("items2dict", f"each item must be a mapping with the keys {key_name!r} and {value_name!r}; "
                                  f"got {value!r:.200}") from None


def flatten(value: Any, levels: int | None = None, skip_nulls: bool = True) -> list:
    """Nested lists into one (`levels` deep at most); None, 'None' and 'null' items dropped unless skip_nulls=false."""
    out: list = []
    for item in value:
        tick()
        if skip_nulls and (item is None or item in ("None", "null")):
            continue
        if _is_list(item) and (levels is None or int(levels) >= 1):
            out.extend(flatten(item, None if levels is None else int(levels) - 1, skip_nulls))
        else:
            out.append(item)
    return out


def subelements(value: Any, path: Any, skip_missing: bool = False) -> list:
    """(item, sub) for each item of a list (or a mapping's values) and each sub of the list at `path` ('a.b')."""
    if isinstance(value, Mapping):
        items = list(value.values())
    elif isinstance(value, list):
        items = list(value)
    else:
        raise _fail("subelements", f"it needs a list of mappings or a mapping of them, not a {type(value).__name__}")
    if isinstance(path, str):
        keys = path.split(".")
    elif isinstance(path, list):
        keys = list(path)
    else:
        raise _fail("subelements", f"the key path must be a string such as 'groups' or 'a.b', not {path!r}")
    out = []
    for item in items:
        subs = _at_path(item, keys, skip_missing)
        if not isinstance(subs, list):
            raise _fail("subelements", f"the key {path!r} must name a list, and it holds {subs!r:.120}")
        out += [[item, sub] for sub in subs]
    return out


def _at_path(item: Any, keys: list, skip_missing: bool) -> Any:
    value = item
    for key in keys:
        try:
            value = value[key]
        except KeyError:
            if skip_missing:
                return []
            raise _fail("subelements", f"no key {key!r} in the item {value!r:.120}; add it or pass skip_missing=true") from None
        except TypeError:
            raise _fail("subelements", f"the key {key!r} must be read from a mapping, not {value!r:.120}") from None
    return value


def ternary(value: Any, true_val: Any, false_val: Any, none_val: Any = None) -> Any:
    if value is None and none_val is not None:
        return none_val
    return true_val if value else false_val


# -- sets, as ansible-core's mathstuff: a set when the items hash, else the order kept ---------------------------


def _unique(items: Iterable) -> list:
    out: list = []
    for x in items:
        tick()
        if x not in out:
            out.append(x)
    return out


@pass_environment
def unique(environment: Any, value: Any, case_sensitive: bool | None = None, attribute: Any = None) -> list:
    """Jinja's unique (case-insensitive by default, as Ansible calls it), as a list."""
    from jinja2.filters import do_unique

    return list(do_unique(environment, value, case_sensitive=bool(case_sensitive), attribute=attribute))


def _set_op(op: str, a: Any, b: Any) -> list:
    a, b = list(a), list(b)
    try:
        sa, sb = set(a), set(b)
    except TypeError:  # unhashable items (mappings, lists): by equality, in order
        if op == "union":
            return _unique(a + b)
        if op == "intersect":
            return _unique(x for x in a if x in b)
        if op == "difference":
            return _unique(x for x in a if x not in b)
        both = _set_op("intersect", a, b)
        return [x for x in _set_op("union", a, b) if x not in both]
    return list({"union": sa | sb, "intersect": sa & sb, "difference": sa - sb, "symmetric_difference": sa ^ sb}[op])


def union(a: Any, b: Any) -> list:
    return _set_op("union", a, b)


def intersect(a: Any, b: Any) -> list:
    return _set_op("intersect", a, b)


def difference(a: Any, b: Any) -> list:
    return _set_op("difference", a, b)


def symmetric_difference(a: Any, b: Any) -> list:
    return _set_op("symmetric_difference", a, b)


# -- zip and combinatorics -----------------------------------------------------------------------------------------


def _bounded_count(name: str, count: int) -> None:
    if count > MAX_ITEMS:
        raise TemplateRefused(f"the sandbox refuses the {name} filter's {count:,} items (limit {MAX_ITEMS:,})")


def _lists(args: tuple) -> list[list]:
    return [list(a) for a in args]


def zip_(*args: Any) -> list:
    return [list(t) for t in zip(*_lists(args))]


def zip_longest(*args: Any, fillvalue: Any = None) -> list:
    lists = _lists(args)
    _bounded_count("zip_longest", max((len(x) for x in lists), default=0))
    return [list(t) for t in itertools.zip_longest(*lists, fillvalue=fillvalue)]


def product(*args: Any, repeat: int = 1) -> list:
    lists = _lists(args)
    _bounded_count("product", math.prod(len(x) for x in lists) ** max(int(repeat), 0))
    return [list(t) for t in itertools.product(*lists, repeat=repeat)]


def permutations(value: Any, r: int | None = None) -> list:
    items = list(value)
    n, k = len(items), len(items) if r is None else int(r)
    _bounded_count("permutations", math.perm(n, k) if 0 <= k <= n else 0)
    return [list(t) for t in itertools.permutations(items, r)]


def combinations(value: Any, r: int) -> list:
    items = list(value)
    _bounded_count("combinations", math.comb(len(items), int(r)) if int(r) >= 0 else 0)
    return [list(t) for t in itertools.combinations(items, int(r))]


# -- random (a seed makes it repeatable, as Ansible's) -------------------------------------------------------------


def _rng(seed: Any) -> _random.Random:
    return _random.SystemRandom() if seed is None else _random.Random(seed)  # noqa: S311 - a seed asks for repeatable, as Ansible


def random(end: Any, start: Any = None, step: Any = None, seed: Any = None) -> Any:
    """A random int in range(start, end, step), or a random item of a list."""
    rng = _rng(seed)
    if isinstance(end, int) and not isinstance(end, bool):
        return rng.randrange(start or 0, end, step or 1)
    if isinstance(end, Iterable):
        if start or step:
            raise _fail("random", "start and step apply to a number, not to a list")
        return rng.choice(list(end) if not isinstance(end, Sequence) else end)
    raise _fail("random", f"it picks from a number or a list, not a {type(end).__name__}")


def shuffle(value: Any, seed: Any = None) -> list:
    items = list(value)
    if seed:
        _random.Random(seed).shuffle(items)  # noqa: S311 - a seed asks for repeatable, as Ansible
    else:
        _random.SystemRandom().shuffle(items)
    return items


FILTERS = {
    "combine": combine,
    "dict2items": dict2items,
    "items2dict": items2dict,
    "flatten": flatten,
    "subelements": subelements,
    "ternary": ternary,
    "unique": unique,
    "union": union,
    "intersect": intersect,
    "difference": difference,
    "symmetric_difference": symmetric_difference,
    "zip": zip_,
    "zip_longest": zip_longest,
    "product": product,
    "permutations": permutations,
    "combinations": combinations,
    "random": random,
    "shuffle": shuffle,
}
