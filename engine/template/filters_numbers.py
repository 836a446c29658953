"""Ansible's filters on numbers and dates (log, pow, root, human_readable, human_to_bytes, strftime, to_datetime),
with ansible-core 2.19's semantics, for the sandbox (engine/template/environment.py)."""

from __future__ import annotations

import datetime
import math
import re
import time
from typing import Any

from engine.errors import TaskError

# Each unit's letter and its size, the largest first (ansible-core's table: binary multiples).
_UNITS = [("Y", 1 << 80), ("Z", 1 << 70), ("E", 1 << 60), ("P", 1 << 50), ("T", 1 << 40), ("G", 1 << 30),
          ("M", 1 << 20), ("K", 1 << 10), ("B", 1)]
_UNIT_NAMES = {"B": "byte", "K": "kilobyte", "M": "megabyte", "G": "gigabyte", "T": "terabyte", "P": "petabyte",
               "E": "exabyte", "Z": "zetabyte", "Y": "yottabyte"}  # ansible-core spells zettabyte so


def _fail(name: str, what: str) -> TaskError:
    return TaskError(f"the {name} filter: {what}")


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(name, f"it works on numbers, not on {value!r:.80} ({type(value).__name__}); convert with | int or | float")
    return value


def log(x: Any, base: Any = math.e) -> float:
    x = _number("log", x)
    try:
        return math.log10(x) if base == 10 else math.log(x, _number("log", base))
    except (ValueError, ZeroDivisionError) as exc:
        raise _fail("log", f"log({x}, {base}): {exc}") from None


def pow_(x: Any, y: Any) -> float:
    try:
        return math.pow(_number("pow", x), _number("pow", y))
    except (ValueError, OverflowError) as exc:
        raise _fail("pow", f"pow({x}, {y}): {exc}") from None


def root(x: Any, base: Any = 2) -> float:
    x = _number("root", x)
    try:
        return math.sqrt(x) if base == 2 else math.pow(x, 1.0 / float(base))
    except (ValueError, ZeroDivisionError, TypeError) as exc:
        raise _fail("root", f"root({x}, {base}): {exc}") from None


def human_readable(size: Any, isbits: bool = False, unit: Any = None) -> str:
    """'1.00 KB', '2.00 Mb', '10.00 Bytes': the largest unit the size reaches, or the one given."""
    size = _number("human_readable", size)
    base = "bits" if isbits else "Bytes"
    letter, limit = _UNITS[-1]
    for letter, limit in _UNITS:
        if (unit is None and size >= limit) or (unit is not None and str(unit)[:1].upper() == letter):
            break
    suffix = letter + base[0] if limit != 1 else base
    return f"{size / limit:.2f} {suffix}"


def human_to_bytes(size: Any, default_unit: Any = None, isbits: bool = False) -> int:
    """'10M' or '1.5 GB' as a number of bytes (bits with isbits=true; then the unit's b must be lowercase)."""
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)(?:\s*([A-Za-z]+))?\s*", str(size))
    if m is None:
        raise _fail("human_to_bytes", f"it cannot read {size!r} as a size such as '10M' or '1.5 GB'")
    number, unit = float(m.group(1)), m.group(2) or default_unit
    if unit is None:
        return int(round(number))
    sizes = dict(_UNITS)
    letter = str(unit)[0].upper()
    if letter not in sizes:
        raise _fail("human_to_bytes", f"the unit of {size!r} must start with one of {', '.join(sizes)}")
    if len(unit) > 1 and not _unit_fits(unit, letter, isbits):
        want = ("b or bit" if isbits else "B or byte") if letter == "B" else f"{letter}{'b' if isbits else 'B'} or {letter}"
        raise _fail("human_to_bytes", f"the unit of {size!r} is not one it reads (expect {want})")
    return int(round(number * sizes[letter]))


def _unit_fits(unit: str, letter: str, isbits: bool) -> bool:
    """'KB' / 'kilobyte' for bytes, 'Kb' / 'kilobit' for bits."""
    name = _UNIT_NAMES[letter]
    name = name[:-4] + "bit" if isbits else name
    return unit.lower() == name or (letter != "B" and unit == letter + ("b" if isbits else "B"))


def strftime(fmt: Any, second: Any = None, utc: bool = False) -> str:
    """The time `second` (now when none), local or UTC, formatted as time.strftime does."""
    if second is not None:
        try:
            second = float(second)
        except (TypeError, ValueError):
            raise _fail("strftime", f"the time must be seconds since the epoch, not {second!r}") from None
    try:
        return time.strftime(str(fmt), (time.gmtime if utc else time.localtime)(second))
    except (ValueError, OverflowError, OSError) as exc:
        raise _fail("strftime", str(exc)) from None


def to_datetime(value: Any, format: str = "%Y-%m-%d %H:%M:%S") -> datetime.datetime:  # noqa: A002 - Ansible's name
    try:
        return datetime.datetime.strptime(str(value), format)
    except ValueError as exc:
        raise _fail("to_datetime", str(exc)) from None


FILTERS = {
    "log": log,
    "pow": pow_,
    "root": root,
    "human_readable": human_readable,
    "human_to_bytes": human_to_bytes,
    "strftime": strftime,
    "to_datetime": to_datetime,
}
