"""Ansible's one-line `key=value` arguments (`file: path=/x state=touch`, `action: copy src=a dest=b`).

A line is cut into words on spaces, as Ansible cuts it: a quoted stretch and a Jinja block (`{{ x }}`,
`{% if %}`, `{# #}`) stay one word whatever spaces they hold, runs of spaces and line breaks are kept inside the
words (so free-form text joins back unchanged), and a lone backslash at a line's end continues the line. Each word
that holds an `=` (not the first character, not escaped) is an option; the others are the free-form text,
`_raw_params` (a task file's name for include_tasks, the action for meta, the command line for command/shell).
Values stay strings, their outer quotes removed, as in Ansible (`mode=0644` is the string "0644").
"""

from __future__ import annotations

import codecs
import re

from engine.errors import UserError

# Jinja's delimiters: a word inside one of these pairs continues until the pair closes.
JINJA_PAIRS = (("{{", "}}"), ("{%", "%}"), ("{#", "#}"))

# The options command/shell (and raw, script) read from their one-line form; every other word is the command.
FREE_FORM_OPTIONS = ("creates", "removes", "chdir", "executable", "warn", "stdin", "stdin_add_newline",
                     "strip_empty_ends")

_ESCAPE = re.compile(r"""\\U[0-9a-fA-F]{8}|\\u[0-9a-fA-F]{4}|\\x[0-9a-fA-F]{2}|\\N\{[^}]+\}|\\[\\'"abfnrtv]""")


class _Words:
    """The words found so far, and the quote and Jinja blocks still open after the last one."""

    def __init__(self) -> None:
        self.words: list[str] = []
        self.quote: str | None = None
        self.depth = [0] * len(JINJA_PAIRS)

    def open_block(self) -> bool:
        return any(self.depth)

    def add_to_last(self, text: str) -> None:
        if not self.words:
            self.words.append("")
        self.words[-1] += text


def _quote_after(word: str, quote: str | None) -> str | None:
    """The quote character still open after `word`, given the one open before it; a quote right after a
    backslash is text."""
    previous = ""
    for char in word:
        if char in "\"'" and previous != "\\":
            if quote is None:
                quote = char
            elif char == quote:
                quote = None
        previous = char
    return quote


def _take_word(state: _Words, word: str, first_on_line: bool) -> None:
    """One space-separated piece of a line: a word of its own, or the continuation of a quoted stretch or an open
    Jinja block."""
    was_quoted = state.quote is not None
    state.quote = _quote_after(word, state.quote)
    quoted = state.quote is not None
    placed = False
    if quoted and not was_quoted and not state.open_block():
        state.words.append(word)
        placed = True
    elif state.open_block() or quoted or was_quoted:
        state.add_to_last(word if first_on_line else " " + word)
        placed = True
    for i, (opening, closing) in enumerate(JINJA_PAIRS):
        before = state.depth[i]
        opened, closed = word.count(opening), word.count(closing)
        if opened != closed:
            state.depth[i] = max(0, before + opened - closed)
        if state.depth[i] != before and not placed:
            state.words.append(word)
            placed = True
    if not placed and word and not quoted and not state.open_block():
        state.words.append(word)


def split_args(text: str) -> list[str]:
    """The words of a one-line argument string (see the module's docstring); an unclosed quote or Jinja block is
    a ValueError naming the text."""
    if not text:
        return []
    state = _Words()
    lines = text.split("\n")
    for number, line in enumerate(lines):
        continued = False
        for index, word in enumerate(line.split(" ")):
            if word == "" and index > 0:  # one more space: kept at the end of the word before it
                state.add_to_last(" ")
                continue
            if word == "\\" and state.quote is None:
                continued = True
                continue
            _take_word(state, word, index == 0)
        if number < len(lines) - 1 and not continued:
            state.add_to_last("\n")
    if state.quote is not None or state.open_block():
        raise ValueError(f"an unclosed quote or Jinja block in {text!r}")
    return state.words


def join_args(words: list[str]) -> str:
    """Words back into one line: a space between two words, none after a line break."""
    out = ""
    for word in words:
        out += word if not out or out.endswith("\n") else " " + word
    return out


def unquote(value: str) -> str:
    """A value without the quotes around it (when it starts and ends with the same quote, not escaped)."""
    if len(value) > 1 and value[0] == value[-1] and value[0] in "\"'" and value[-2] != "\\":
        return value[1:-1]
    return value


def _decode_escapes(word: str) -> str:
    return _ESCAPE.sub(lambda m: codecs.decode(m.group(0), "unicode-escape"), word)


def _equals_at(word: str) -> int:
    """Where the word's option name ends: its first `=` past the first character that no backslash escapes; -1
    when there is none."""
    for pos in range(1, len(word)):
        if word[pos] == "=" and word[pos - 1] != "\\":
            return pos
    return -1


def parse_kv(text: str, free_form: bool = False) -> dict:
    """{option: value} of a one-line argument string, the free-form words as `_raw_params`. With `free_form`
    (command, shell) only FREE_FORM_OPTIONS are options; any other `k=v` word is part of the command line."""
    options: dict = {}
    raw: list[str] = []
    for word in split_args(text):
        decoded = _decode_escapes(word)
        if "=" not in decoded:
            raw.append(word)
            continue
        pos = _equals_at(decoded)
        if pos < 0:
            raw.append(decoded.replace("\\=", "="))
        elif free_form and decoded[:pos] not in FREE_FORM_OPTIONS:
            raw.append(word)
        else:
            options[decoded[:pos].strip()] = unquote(decoded[pos + 1:].strip())
    if raw:
        options["_raw_params"] = join_args(raw)
    return options


def kv_arguments(text: str, where: str, module: str) -> dict:
    """parse_kv for a task's module, its failure one paragraph naming the task and the fix."""
    try:
        return parse_kv(text)
    except ValueError as exc:
        raise UserError(f"{where}: the one-line arguments of '{module}' have {exc.args[0].split(' in ')[0]}; close "
                        "it, or write the arguments as a mapping (key: value lines)") from None


def split_module_string(text: str) -> tuple[str, str]:
    """`action: copy src=a dest=b`: the module's name (the first word) and the rest of the line."""
    words = split_args(text)
    if not words:
        return "", ""
    return words[0].strip(), " ".join(words[1:])
