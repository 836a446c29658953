"""Ansible's `version` test (`'2.10' is version('2.9', '>')`, old name `version_compare`): loose versions by
default, `strict=true`, or `version_type` loose / strict / semver / semantic / pep440, with ansible-core 2.19's
rules for each and its messages for an empty value, a bad operator or type."""

from __future__ import annotations

import functools
import operator as ops
import re
from typing import Any

from engine.errors import TaskError

OPERATORS = {"==": "eq", "=": "eq", "eq": "eq", "<": "lt", "lt": "lt", "<=": "le", "le": "le", ">": "gt", "gt": "gt",
             ">=": "ge", "ge": "ge", "!=": "ne", "<>": "ne", "ne": "ne"}
TYPES = ("loose", "strict", "semver", "semantic", "pep440")
_LOOSE_PARTS = re.compile(r"(\d+|[a-z]+|\.)")
_STRICT = re.compile(r"^(\d+)\.(\d+)(\.(\d+))?([ab](\d+))?$", re.A)
_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                     r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
                     r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$")


def _fail(what: str) -> TaskError:
    return TaskError(f"the version test: {what}")


def loose_key(text: str) -> list:
    """A loose version's parts: numbers as numbers, any other run of text as text (as distutils' LooseVersion)."""
    return [int(p) if p.isdigit() else p for p in _LOOSE_PARTS.split(text) if p and p != "."]


def strict_key(text: str) -> tuple:
    """X.Y[.Z][a|bN]: a release without a pre-release mark is above one with it."""
    m = _STRICT.match(text)
    if m is None:
        raise ValueError(f"invalid version number '{text}'")
    major, minor, patch = int(m.group(1)), int(m.group(2)), int(m.group(4) or 0)
    pre = (0, m.group(5)[0], int(m.group(6))) if m.group(5) else (1, "", 0)
    return (major, minor, patch, pre)


@functools.total_ordering
class _SemverPre:
    """A semver pre-release for ordering: numeric identifiers below text ones, fewer identifiers first."""

    def __init__(self, text: str | None) -> None:
        self.parts = None if text is None else [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in text.split(".")]

    def _key(self) -> tuple:
        return (1, []) if self.parts is None else (0, self.parts)

    def __lt__(self, other: _SemverPre) -> bool:
        return self._key() < other._key()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _SemverPre) and self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]


def semver_key(text: str) -> tuple:
    m = _SEMVER.match(text)
    if m is None:
        raise ValueError(f"invalid semantic version '{text}'")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)), _SemverPre(m.group(4)))


def pep440_key(text: str) -> Any:
    from packaging.version import Version

    return Version(text)


_KEYS = {"loose": loose_key, "strict": strict_key, "semver": semver_key, "semantic": semver_key, "pep440": pep440_key}


def version_test(value: Any, version: Any, operator: str = "eq", strict: Any = None, version_type: Any = None) -> bool:
    """value OPERATOR version, each read as `version_type` says."""
    if strict is not None and version_type is not None:
        raise _fail("give strict or version_type, not both")
    if not value:
        raise _fail("Input version value cannot be empty")
    if not version:
        raise _fail("Version parameter to compare against cannot be empty")
    kind = "strict" if strict else (version_type or "loose")
    if kind not in _KEYS:
        raise _fail(f"Invalid version type ({kind}). Must be one of {', '.join(map(repr, TYPES))}")
    if operator not in OPERATORS:
        raise _fail(f"Invalid operator type ({operator}). Must be one of {', '.join(map(repr, OPERATORS))}")
    try:
        return bool(getattr(ops, OPERATORS[operator])(_KEYS[kind](str(value)), _KEYS[kind](str(version))))
    except Exception as exc:  # noqa: BLE001 - a version a kind cannot read, or parts it cannot order
        raise _fail(f"Version comparison failed: {exc}") from None
