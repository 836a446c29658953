"""Secrets the tool sends (hf_token / hf_token_file, vllm_api_key / vllm_api_key_file): the one reader, one rule.

Every consumer reads them here: the host's Hub fetch (library/models.py), the control node's relay
(engine/run/actions/models.py) and the vLLM launch (dflash_host/vllm/launch.py). Two readers once had two rules: a
token file of two lines passed one of them, went into `Authorization: Bearer ...`, and the HTTP library's
refusal quoted the whole header, token included, into the console and the reports.

The rule, for a value and a file alike: whitespace around the secret (a final newline, a CRLF, indentation)
is dropped; what is left must be one word of printable ASCII, no line break, space or control character
inside, since it goes into an HTTP header, the server's environment file and systemd's EnvironmentFile=.
Messages name the variable or the file and where the fault is, never the secret. Standard library only.
"""

from __future__ import annotations

import os
import re
import stat

from dflash_host.module import ModuleError

MAX_BYTES = 64 * 1024  # a token is tens of bytes; a file past this is not a token file
_NOT_TOKEN = re.compile(r"[^\x21-\x7e]")
_CHAR_NAMES = {"\n": "a newline", "\r": "a carriage return", "\x00": "a NUL byte", " ": "a space", "\t": "a tab"}
RULE = "a secret is one word of printable ASCII (it goes into an HTTP header and the server's environment file)"


def secret_problem(text: str) -> str | None:
    """What keeps `text` (already stripped) from being a secret the tool can send, in words; None when nothing."""
    if not text:
        return "is empty"
    found = _NOT_TOKEN.search(text)
    if found is None:
        return None
    char = found.group()
    if char in _CHAR_NAMES:
        name = _CHAR_NAMES[char]
    elif ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F:
        name = f"the control character U+{ord(char):04X}"
    else:
        name = f"the non-ASCII character U+{ord(char):04X}"
    return f"contains {name} (at character {found.start()})"


def read_secret_file(path: str, var: str) -> str:
    """The secret a `<var>_file` holds: a regular file of one line (whitespace around it dropped)."""
    path = os.path.expanduser(str(path))
    field = f"{var}_file {path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the run
    except OSError as exc:
        raise ModuleError(f"{field} cannot be read ({exc.strerror}); fix the path or its permissions") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ModuleError(f"{field} is not a regular file; point {var}_file at a file holding the secret alone")
        data = fh.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ModuleError(f"{field} is larger than {MAX_BYTES // 1024} KiB; it must hold the secret alone, on one line")
    try:
        text = data.decode("utf-8-sig").strip()
    except UnicodeDecodeError:
        raise ModuleError(f"{field} is not UTF-8 text; it must hold the secret alone, on one line") from None
    lines = len(text.splitlines())
    if lines > 1:
        raise ModuleError(f"{field} holds {lines} lines; it must hold the secret alone, on one line (a final "
                          "newline is fine): remove the other lines")
    problem = secret_problem(text)
    if problem:
        raise ModuleError(f"{field} {problem}; {RULE}: put the secret alone in the file")
    return text


def read_secret(value: object, file: object, var: str) -> str | None:
    """The secret `var` (a value) or `<var>_file` (a file) gives, checked by one rule; None when neither is set."""
    if value and file:
        raise ModuleError(f"both {var} and {var}_file are set; keep one of them")
    if file:
        return read_secret_file(str(file), var)
    if value is None or value == "":
        return None
    text = str(value).strip()
    problem = secret_problem(text)
    if problem:
        raise ModuleError(f"{var} {problem}; {RULE}: fix {var}")
    return text
