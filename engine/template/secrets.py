"""Secret masking: which values are secrets, and hiding them in everything shown or reported.

A secret is the value of a variable named like one (`*token*`, `*password*`, `*secret*`, `*api_key*`,
...) from any source (inventory, play, role parameters, task vars, -e, set_fact), of any type (an API
key given as digits is a secret too), and any set_fact value computed from one. Values are masked
wherever they appear as text; a mapping key named like a secret hides its value whatever it is.
The registered results the next tasks read stay intact: only what is shown or reported is masked.
Every value decrypted from Ansible Vault (engine/parsing/vault.py) is a secret too, whatever its name, and
is hidden even when it is shorter than MIN_LENGTH wherever it is a whole value.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from typing import Any

from engine.parsing import vault

MASK = "********"
# Shorter values are not hunted as substrings (masking "on" everywhere would garble every message);
# they are still hidden where a secret-named key holds them.
MIN_LENGTH = 4
# `token` but not `tokens` (num_speculative_tokens, smoke_tokens: counts), `tokenizer` (a model path) nor
# `token_id(s)` (mask_token_id, eos_token_id: vocabulary indices).
_NAME = re.compile(r"(token(?!s|iz|_?ids?(?![a-z]))|passw(or)?d|secret|api_?key|passphrase|credential|private_?key|vault_?pass|become_?pass)", re.I)
_NOT_SECRET_SUFFIXES = ("_file", "_path", "_dir", "_env_var")
_MAX_LEAVES = 10_000


def is_secret_name(name: Any) -> bool:
    """Named like a secret; `hf_token_file` (a path to one) is not."""
    return isinstance(name, str) and _secret_named(name)


@functools.lru_cache(maxsize=4096)  # every result of every host is walked: its keys are mostly the same few
def _secret_named(name: str) -> bool:
    return bool(_NAME.search(name)) and not name.lower().endswith(_NOT_SECRET_SUFFIXES)


def leaf_strings(value: Any) -> list[str]:
    """Every scalar inside `value` as text (bools and None are not secrets), at most _MAX_LEAVES of them."""
    out: list[str] = []
    stack = [value]
    while stack and len(out) < _MAX_LEAVES:
        v = stack.pop()
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, (str, int, float)):
            out.append(str(v))
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple, set)):
            stack.extend(v)
    return out


def spellings(text: str) -> set[str]:
    """A secret as written, and as JSON (to_json, the report), repr (debug var=, errors) and YAML escape it."""
    forms = {text, json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1], repr(text)[1:-1],
             text.encode("unicode_escape").decode("ascii")}
    return {f for f in forms if f}


def secret_leaves(value: Any, under_secret: bool = False, depth: int = 0) -> list:
    """The scalars of `value` that sit under a secret-named key at any depth (`creds: {password: ...}`)."""
    out: list = []
    if depth > 100:
        return out
    if isinstance(value, dict):
        for k, v in value.items():
            out += secret_leaves(v, under_secret or is_secret_name(k), depth + 1)
    elif isinstance(value, (list, tuple)):
        for v in value:
            out += secret_leaves(v, under_secret, depth + 1)
    elif under_secret and has_value(value):
        out.append(value)
    return out


def has_value(value: Any) -> bool:
    return any(leaf_strings(value))


class Secrets:
    """The run's secret values; thread-safe (hosts run in parallel)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: set[str] = set()
        self._primary: set[str] = set()  # not only computed from a secret: never forgotten
        self._ordered: tuple[str, ...] = ()
        self._vault_version = -1
        self._vault_values: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        self._sync_vault()
        return bool(self._ordered)

    def __contains__(self, text: str) -> bool:
        self._sync_vault()
        return self._known(text)

    def _known(self, text: str) -> bool:
        return text in self._values or text in self._vault_values

    def _sync_vault(self) -> None:
        """Take in what Ansible Vault decrypted since the last look (files can be read mid-run)."""
        version, values = vault.revealed()
        if version != self._vault_version:
            self._vault_version, self._vault_values = version, values
            self.add(list(values))

    def add(self, value: Any, derived: bool = False) -> None:
        """Remember every scalar inside `value` long enough to be hunted as a substring, with the spellings a
        message may hold it in (JSON's and Python's escapes of a backslash, a quote, a newline, non-ASCII).
        `derived`: a text computed from a secret (engine/template/templar.py keep_secret), which `forget` may take back."""
        forms = {v for s in leaf_strings(value) for v in spellings(s) if len(v) >= MIN_LENGTH}
        with self._lock:
            if not derived:
                self._primary |= forms
            new = forms - self._values
            if new:
                self._values |= new
                self._ordered = tuple(sorted(self._values, key=len, reverse=True))  # longest first

    def forget(self, text: str) -> None:
        """A text computed from a secret that was shown not to depend on its characters (a length): readable again."""
        forms = spellings(text) - self._primary
        with self._lock:
            if forms & self._values:
                self._values -= forms
                self._ordered = tuple(sorted(self._values, key=len, reverse=True))

    def substituted(self, value: Any) -> Any:
        """A copy with every known secret inside replaced by text of its length whose every character differs."""
        if isinstance(value, str):
            for s in self._ordered:
                if s in value:
                    value = value.replace(s, substitute(s))
            return value
        if isinstance(value, dict):  # a secret-named key's value whole, as redact_obj masks it whole
            return {k: substitute(v) if is_secret_name(k) and isinstance(v, str) else self.substituted(v)
                    for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.substituted(v) for v in value]
        return value

    def redact(self, text: str) -> str:
        self._sync_vault()
        return self._redact_text(text)

    def _redact_text(self, text: str) -> str:
        if text in self._vault_values:
            return MASK
        for s in self._ordered:
            if s in text:
                text = text.replace(s, MASK)
        return text

    def redact_obj(self, value: Any, key: Any = None, by_name: bool = True) -> Any:
        """A masked copy of a result: secret-named keys hidden whatever their value, secrets in text masked.

        `by_name=False` masks only known values (no name rule): what the inventory listing needs."""
        self._sync_vault()  # once per result, not per leaf: every result of every host comes through here
        return self._masked(value, key, by_name)

    def _masked(self, value: Any, key: Any, by_name: bool) -> Any:
        if by_name and is_secret_name(key) and has_value(value):
            return MASK
        if isinstance(value, str):
            return self._redact_text(value)
        if isinstance(value, dict):
            return {k: self._masked(v, k, by_name) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._masked(v, None, by_name) for v in value]
        if isinstance(value, (int, float)) and not isinstance(value, bool) and self._known(str(value)):
            return MASK
        return value


def substitute(text: str) -> str:
    """Text of the same length with every character different: a render that gives the same output with it as with
    the secret does not show the secret's characters (only, say, its length)."""
    return "".join("y" if c == "x" else "x" for c in text)


class Display:
    """How a message rendered again for display shows what is secret: the mask, or (to find out whether the message
    depends on a secret's characters at all) a substitute of the same length."""

    def __init__(self, secrets: Secrets, substituting: bool) -> None:
        self.secrets, self.substituting = secrets, substituting

    def whole(self, value: Any) -> Any:
        """A value that is a secret as a whole (a secret-named variable's, what a lookup found secret)."""
        if isinstance(value, (dict, list, tuple)):
            return self.inside(value)
        if self.substituting:
            return substitute(value) if isinstance(value, str) else value
        return MASK

    def inside(self, value: Any) -> Any:
        """A value that holds secrets (a registered result of a no_log task, a mapping with a secret-named key)."""
        return self.secrets.substituted(value) if self.substituting else self.secrets.redact_obj(value)


def mask_vault_values(value: Any) -> Any:
    """A copy with every value decrypted from Ansible Vault masked (inventory listings show the rest as is)."""
    return Secrets().redact_obj(value, key=None, by_name=False)
