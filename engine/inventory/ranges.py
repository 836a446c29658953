"""Ansible host patterns in inventories: ranges (`gpu[01:64]`, `node-[a:f]`, `[0:20:5]`) and `host:port`.

Fleets are written as ranges, so `gpu[01:03]` must mean gpu01, gpu02, gpu03 exactly as ansible-inventory
expands it: begin:end[:step], inclusive; a begin with a leading zero pads every number to its width (and
the end must be written with the same width); letters run through a-z then A-Z; several ranges in one
name multiply. Where Ansible would silently produce nothing (begin after end) or crash (step 0), this
refuses with one paragraph instead; a range may not produce more than MAX_HOSTS names.
"""

from __future__ import annotations

import re
import string

from engine.errors import UserError

MAX_HOSTS = 100_000  # far beyond a real fleet; a typo like [1:10000000] would otherwise fill memory
_PORT = re.compile(r"^(?P<name>.+):(?P<port>[0-9]+)$")
_BRACKETED_IPV6 = re.compile(r"^\[(?P<name>[0-9A-Fa-f:.]+)\](?::(?P<port>[0-9]+))?$")


def split_port(pattern: str) -> tuple[str, int | None]:
    """`name:2222` -> ('name', 2222); `[::1]:22` -> ('::1', 22); a bare IPv6 address keeps its colons."""
    bracketed = _BRACKETED_IPV6.match(pattern)
    if bracketed and ":" in bracketed["name"]:
        port = bracketed["port"]
        return bracketed["name"], int(port) if port else None
    outside = re.sub(r"\[[^\]]*\]", "", pattern)  # colons inside ranges are not port separators
    match = _PORT.match(pattern)
    if match and outside.count(":") == 1:
        return match["name"], int(match["port"])
    return pattern, None


def expand(pattern: str, where: str) -> list[str]:
    """Every host name a pattern stands for (the pattern itself when it holds no range)."""
    names = [pattern]
    while any("[" in n for n in names):
        first = _expand_first(names[0], where) if "[" in names[0] else [names[0]]
        if len(names) * len(first) > MAX_HOSTS:  # every name has the same ranges left: check before building
            raise UserError(f"{where}: host range '{pattern}' makes more than {MAX_HOSTS:,} hosts (MAX_HOSTS in "
                            "engine/inventory/ranges.py); check the bounds.")
        names = first + [out for n in names[1:] for out in (_expand_first(n, where) if "[" in n else [n])]
        if len(names) > MAX_HOSTS:
            raise UserError(f"{where}: host range '{pattern}' makes more than {MAX_HOSTS:,} hosts (MAX_HOSTS in "
                            "engine/inventory/ranges.py); check the bounds.")
    return names


def _expand_first(name: str, where: str) -> list[str]:
    """Expand the first [..] of a name; the rest is expanded by the caller's loop."""
    match = re.match(r"^(?P<head>[^\[]*)\[(?P<body>[^\]]*)\](?P<tail>.*)$", name, re.S)
    if not match:
        raise _bad(name, where, "a '[' without its closing ']'")
    head, body, tail = match["head"], match["body"], match["tail"]
    return [f"{head}{item}{tail}" for item in _range_items(body, name, where)]


def _range_items(body: str, name: str, where: str) -> list[str]:
    bounds = body.split(":")
    if len(bounds) not in (2, 3):
        raise _bad(name, where, f"'[{body}]' is not begin:end or begin:end:step")
    begin, end = bounds[0] or "0", bounds[1]
    step = _step(bounds[2] if len(bounds) == 3 else "1", name, where)
    if not end:
        raise _bad(name, where, f"'[{body}]' has no end")
    if len(begin) == 1 and len(end) == 1 and begin in string.ascii_letters and end in string.ascii_letters:
        first, last = string.ascii_letters.index(begin), string.ascii_letters.index(end)
        if first > last:
            raise _bad(name, where, f"'[{body}]' begins after it ends")
        return list(string.ascii_letters[first : last + 1 : step])
    if not (begin.isdigit() and end.isdigit() and begin.isascii() and end.isascii()):
        raise _bad(name, where, f"'[{body}]' mixes letters and numbers or is neither (write [01:64] or [a:f])")
    width = len(begin) if begin.startswith("0") and len(begin) > 1 else 0
    if width and len(end) != width:
        raise _bad(name, where, f"'[{body}]': a zero-padded begin needs an end of the same width (e.g. [{begin}:{end.zfill(width)}])")
    if int(begin) > int(end):
        raise _bad(name, where, f"'[{body}]' begins after it ends")
    if (int(end) - int(begin)) // step + 1 > MAX_HOSTS:
        raise _bad(name, where, f"'[{body}]' makes more than {MAX_HOSTS:,} hosts")
    return [str(n).zfill(width) for n in range(int(begin), int(end) + 1, step)]


def _step(text: str, name: str, where: str) -> int:
    if not (text.isdigit() and text.isascii()) or int(text) < 1:
        raise _bad(name, where, f"the step '{text}' is not a whole number from 1 up")
    return int(text)


def _bad(name: str, where: str, why: str) -> UserError:
    return UserError(f"{where}: host range '{name}' is not valid: {why}. Ranges are written begin:end or "
                     "begin:end:step, e.g. gpu[01:64], node-[a:f] or web[0:20:5].")
