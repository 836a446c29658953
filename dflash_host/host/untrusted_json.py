"""JSON that nobody on this host wrote (a checkpoint's header, config.json, an index), read safely.

Size, nesting, entry counts, number lengths and duplicate keys are bounded before json.loads builds
anything, so a hostile file costs neither memory nor a RecursionError; what is wrong is said in words
(UnsafeJSON). Used by models.safetensors_header and by modules reading a model's config.json.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat

MAX_JSON_FILE_BYTES = 100_000_000  # safetensors' own header limit; an index of a 1T-parameter model is ~10 MB
# Per file and per checkpoint. A whole 1T-parameter MoE (Kimi K2, DeepSeek-V3) names < 150,000 tensors
# across all its shards; one shard names a few thousand.
MAX_TENSORS = 500_000
MAX_JSON_DEPTH = 8  # a header nests 3 deep ({name: {"shape": [...]}}), an index 3 ({"weight_map": {...}})
# Before json.loads builds anything: objects and lists (entry, shape, offsets per tensor) and commas
# (fields, dimensions, offsets per tensor). Empty lists cost ~20 times their text once built.
MAX_JSON_CONTAINERS = 3 * MAX_TENSORS + 64
MAX_JSON_COMMAS = 16 * MAX_TENSORS
MAX_NUMBER_DIGITS = 20  # 2**64 has 20; int() of thousands of digits is slow or refused

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_INNERMOST = re.compile(rb"\[[^\[\]{}]*\]|\{[^\[\]{}]*\}")


class UnsafeJSON(ValueError):
    """JSON (or almost JSON) that no checkpoint or config holds; the message says what, in words."""


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_NUMBER_DIGITS:
        raise UnsafeJSON(f"a number has {digits} digits")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise UnsafeJSON(f"the number {text[:24]} is too large for a float")
    return value


def _parse_constant(name: str):
    raise UnsafeJSON(f"{name} is not a JSON value")


def _unique_keys(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set = set()
        for key, _ in pairs:
            if key in seen:
                raise UnsafeJSON(f"it names {brief_repr(key)} twice")
            seen.add(key)
    return out


def _check_json_shape(raw: bytes, max_depth: int) -> None:
    """Refuse nesting and entry counts no checkpoint or config has, before json.loads builds them.

    Deep nesting would raise RecursionError inside json; a million empty lists cost ~60 MB for 3 MB
    of text. Strings are blanked first so brackets and commas inside them do not count.
    """
    skeleton = _JSON_STRING.sub(b"0", raw)
    containers = skeleton.count(b"{") + skeleton.count(b"[")
    if containers > MAX_JSON_CONTAINERS:
        raise UnsafeJSON(f"it holds {containers} objects and lists, more objects and lists than {MAX_TENSORS} tensors need")
    commas = skeleton.count(b",")
    if commas > MAX_JSON_COMMAS:
        raise UnsafeJSON(f"it holds {commas} values, more values than {MAX_TENSORS} tensors need")
    for _ in range(max_depth):
        skeleton, replaced = _INNERMOST.subn(b"0", skeleton)
        if not replaced:
            break
    else:
        if _INNERMOST.search(skeleton):
            raise UnsafeJSON(f"its objects and lists nest deeper than {max_depth} levels")
    if any(b in skeleton for b in (b"{", b"[", b"]", b"}")):
        raise UnsafeJSON("its brackets or quotes do not pair up")


def loads_untrusted(raw: bytes, max_depth: int = MAX_JSON_DEPTH, unique_keys: bool = False):
    """json.loads for bytes a host did not write itself: UTF-8, bounded nesting and entry counts, no
    NaN/Infinity, no number of more than 20 digits, optionally no key given twice.

    Raises ValueError (UnicodeDecodeError, json.JSONDecodeError or UnsafeJSON) saying what is wrong.
    """
    text = raw.decode("utf-8")
    _check_json_shape(raw, max_depth)
    return json.loads(
        text,
        parse_int=_parse_int,
        parse_float=_parse_float,
        parse_constant=_parse_constant,
        object_pairs_hook=_unique_keys if unique_keys else None,
    )


def load_json_file(path: str, max_bytes: int = MAX_JSON_FILE_BYTES, max_depth: int = MAX_JSON_DEPTH, unique_keys: bool = False):
    """loads_untrusted on a regular file of at most max_bytes. Raises OSError or ValueError saying why."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):  # a FIFO would block the read forever
        raise UnsafeJSON("it is not a regular file")
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        # read(n) allocates n bytes up front: ask for what the file holds (+1 to see it grow), never max_bytes
        raw = fh.read(min(size, max_bytes) + 1)
    if len(raw) > max_bytes or size > max_bytes:
        raise UnsafeJSON(f"it is larger than {max_bytes} bytes, more than such a file ever is")
    return loads_untrusted(raw, max_depth, unique_keys)


def brief_repr(value, limit: int = 60) -> str:
    """repr(value), cut to `limit` characters: a hostile name or shape may be megabytes long."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
