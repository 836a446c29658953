"""Ansible's Jinja tests (`x is changed`, `x is truthy`, `path is file`, `v is version('2', '>')`, ...) with
ansible-core 2.19's semantics, for the sandbox (engine/template/environment.py). Jinja's own tests (defined,
string, mapping, sequence, number, ...) stay as Jinja has them.

The file tests (file, directory, link, exists, same_file, mount, vaulted_file) look at the control node's paths, as
Ansible's do; they answer true or false only, never a file's contents."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

from jinja2 import Undefined

from engine.errors import TaskError
from engine.parsing import vault
from engine.parsing.yamlfile import is_written

_TRUE = frozenset({"y", "yes", "on", "1", "true", "t"})
_FALSE = frozenset({"n", "no", "off", "0", "false", "f"})


def _result(name: str, value: Any) -> Mapping:
    """A registered result; an undefined one fails as undefined, anything else names the test."""
    if isinstance(value, Undefined):
        value._fail_with_undefined_error()
    if not isinstance(value, Mapping):
        raise TaskError(f"the '{name}' test expects a task's result (a mapping, what `register:` keeps), not "
                        f"{type(value).__name__} {value!r:.80}")
    return value


def failed(r: Any) -> bool:
    return bool(_result("failed", r).get("failed"))


def success(r: Any) -> bool:
    return not bool(_result("success", r).get("failed"))


def changed(r: Any) -> bool:
    """`changed`, or for a loop's result without one, whether any item changed."""
    r = _result("changed", r)
    if "changed" in r:
        return bool(r["changed"])
    items = r.get("results")
    return isinstance(items, list) and bool(items) and isinstance(items[0], Mapping) and \
        any(isinstance(i, Mapping) and i.get("changed") for i in items)


def skipped(r: Any) -> bool:
    return bool(_result("skipped", r).get("skipped"))


def unreachable(r: Any) -> bool:
    return bool(_result("unreachable", r).get("unreachable"))


def reachable(r: Any) -> bool:
    return not unreachable(r)


def timedout(r: Any) -> bool:
    t = _result("timedout", r).get("timedout")
    return bool(t and isinstance(t, Mapping) and t.get("period"))


def finished(r: Any) -> bool:
    """An async result's `finished`; a result without it (not async) counts as finished, as in Ansible."""
    r = _result("finished", r)
    return bool(r["finished"]) if "finished" in r else True


def started(r: Any) -> bool:
    r = _result("started", r)
    return bool(r["started"]) if "started" in r else True


def _as_bool(value: Any) -> Any:
    """Ansible's strict boolean conversion of 'yes' / 'off' / 1 ...; anything else unchanged."""
    if isinstance(value, str):
        key = value.strip().lower()
        return True if key in _TRUE else False if key in _FALSE else value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    return value


def truthy(value: Any, convert_bool: bool = False) -> bool:
    return bool(_as_bool(value) if convert_bool else value)


def falsy(value: Any, convert_bool: bool = False) -> bool:
    return not truthy(value, convert_bool)


def nan(value: Any) -> bool:
    try:
        return math.isnan(value)
    except TypeError:
        return False


def _regex(value: Any, pattern: Any, ignorecase: bool, multiline: bool, how: str) -> bool:
    flags = (re.I if ignorecase else 0) | (re.M if multiline else 0)
    try:
        compiled = re.compile(str(pattern), flags)
    except re.error as exc:
        raise TaskError(f"the {how} test: the pattern {pattern!r} is not a regular expression: {exc}") from None
    return getattr(compiled, how if how in ("match", "search", "fullmatch") else "search")(str(value)) is not None


def match(value: Any, pattern: Any = "", ignorecase: bool = False, multiline: bool = False) -> bool:
    return _regex(value, pattern, ignorecase, multiline, "match")


def search(value: Any, pattern: Any = "", ignorecase: bool = False, multiline: bool = False) -> bool:
    return _regex(value, pattern, ignorecase, multiline, "search")


def regex(value: Any = "", pattern: Any = "", ignorecase: bool = False, multiline: bool = False,
          match_type: str = "search") -> bool:
    return _regex(value, pattern, ignorecase, multiline, match_type)


def vault_encrypted(value: Any) -> bool:
    """A value written as `!vault` (decrypted when the file loaded; the engine knows it by its plaintext, so a
    value of a vault-encrypted file or a file lookup of one also answers true: Ansible's answer there is false)."""
    return isinstance(value, str) and bool(value) and value in vault.revealed()[1]


def tagged_with(value: Any, tag: Any) -> bool:
    """Ansible 2.19's `ansible._protomatter.tagged_with`, for the one data tag kept here: TrustedAsTemplate, a
    string a playbook, role, variable file, inventory or -e wrote, handed over unchanged (not one a template
    computed nor one a module returned: engine/parsing/yamlfile.py is_written)."""
    if tag != "TrustedAsTemplate":
        raise TaskError(f"the tagged_with test: the tag {tag!r} is not kept here; only 'TrustedAsTemplate' is (a "
                        "string the playbook wrote, handed over unchanged)")
    return is_written(value)


def vaulted_file(path: Any) -> bool:
    try:
        with open(os.fsencode(str(path)), "rb") as fh:
            return vault.is_encrypted(fh.read(len(vault.HEADER) + 64))
    except OSError as exc:
        raise TaskError(f"the vaulted_file test: cannot read {path!r}: {exc.strerror or exc}") from None


def _path_test(check: Any) -> Any:
    def test(path: Any) -> bool:
        return bool(check(os.fsencode(str(path))))

    test.__name__ = check.__name__
    return test


def same_file(a: Any, b: Any) -> bool:
    try:
        return os.path.samefile(str(a), str(b))
    except OSError as exc:
        raise TaskError(f"the same_file test: {exc.strerror or exc} ({exc.filename})") from None


def _set_test(name: str, compare: Any) -> Any:
    def test(a: Any, b: Any) -> bool:
        try:
            return bool(compare(set(a), set(b)))
        except TypeError as exc:
            raise TaskError(f"the {name} test: {exc}") from None

    return test


def _names(*names: str) -> tuple:
    return names


TESTS: dict[tuple, Any] = {
    _names("failed", "failure"): failed,
    _names("success", "succeeded", "successful"): success,
    _names("changed", "change"): changed,
    _names("skipped", "skip"): skipped,
    _names("unreachable",): unreachable,
    _names("reachable",): reachable,
    _names("timedout",): timedout,
    _names("finished",): finished,
    _names("started",): started,
    _names("match",): match,
    _names("search",): search,
    _names("regex",): regex,
    _names("truthy",): truthy,
    _names("falsy",): falsy,
    _names("any",): any,
    _names("all",): all,
    _names("nan", "isnan"): nan,
    _names("subset", "issubset"): _set_test("subset", lambda a, b: a <= b),
    _names("superset", "issuperset"): _set_test("superset", lambda a, b: a >= b),
    _names("contains",): lambda seq, item: item in seq,
    _names("vault_encrypted",): vault_encrypted,
    _names("vaulted_file",): vaulted_file,
    _names("directory", "is_dir"): _path_test(os.path.isdir),
    _names("file", "is_file"): _path_test(os.path.isfile),
    _names("link", "is_link"): _path_test(os.path.islink),
    _names("exists",): _path_test(os.path.exists),
    _names("link_exists",): _path_test(os.path.lexists),
    _names("abs", "is_abs"): _path_test(os.path.isabs),
    _names("mount", "is_mount"): _path_test(os.path.ismount),
    _names("same_file", "is_same_file"): same_file,
    _names("ansible._protomatter.tagged_with",): tagged_with,
}


def install(tests: dict) -> None:
    """Ansible's tests under each of their names, next to Jinja's."""
    tests.update({name: test for names, test in TESTS.items() for name in names})
