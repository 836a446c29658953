"""Privilege escalation (become), as Ansible users expect: which identity a task runs as, and starting a
worker as that identity through sudo.

Which identity: the task's become/become_user/become_method (inherited from its block, role entry and play
by engine/playbook/tasks.py), else the host's variables ansible_become, ansible_become_user, ansible_become_method,
else no become (user root, method sudo when become is on). The password: ansible_become_password (alias
ansible_become_pass), else the file named by ansible_become_password_file, read on the control node. Each
value found is added to the run's secrets, so it is masked wherever it would be shown. What a person types
(-K) and what the file holds are data, never templates: the file is read as it is, and the typed password joins
the variables quoted (`typed`), so `a{{b}}c` or `{% raw %}` reaches sudo byte for byte.

How: a second worker on another exec channel of the host's SSH connection (engine/connection/transport.py
SpawnedTransport), `sudo -H -S -p PROMPT -u USER -- python3 -u -c BECOME_BOOTSTRAP`, where PROMPT is random
text: the password is written on stdin only when that prompt appears on stderr (never in argv, never
logged). Without a password `sudo -n` is used, so a sudo that wants one fails at once instead of waiting.
sudo's refusals (wrong password, not in sudoers, no sudo, unknown user) become one-paragraph errors; in each
case sudo ran nothing, so nothing changed on the host.
"""

from __future__ import annotations

import os
import re
import secrets as _random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from jinja2 import TemplateError

from engine.connection.transport import BECOME_BOOTSTRAP, SpawnedTransport, Transport
from engine.errors import TaskError
from engine.template.markers import to_bool

PASSWORD_VARS = ("ansible_become_password", "ansible_become_pass")
PASSWORD_FILE_VAR = "ansible_become_password_file"  # noqa: S105 - a variable name, not a password
START_TIMEOUT_S = 30.0  # sudo's answer and the worker's start; a PAM delay after a wrong password is ~2 s
_USER = re.compile(r"^#?[A-Za-z0-9_][A-Za-z0-9_.@-]*\$?$")


class BecomeError(TaskError):
    """sudo refused or could not start the worker as the become user; nothing ran as that user."""


@dataclass(frozen=True)
class Become:
    """One identity to run as: the user, the method, and the password for it (never shown: repr=False)."""

    user: str
    method: str = "sudo"
    password: str | None = field(default=None, repr=False, compare=False)
    password_from: str = field(default="", compare=False)  # the variable that gave it (for messages)


def identity(become: bool | None, user: Any, method: str | None, view, templar, secrets) -> Become | None:
    """The identity for keywords as said (None: not said, the host's ansible_become* variables decide)."""
    on = to_bool(_read("ansible_become", lambda: view.get("ansible_become", False))) if become is None else bool(become)
    if not on:
        return None
    method = method or str(_read("ansible_become_method", lambda: view.get("ansible_become_method")) or "sudo")
    if method != "sudo":
        raise TaskError(f"ansible_become_method is {method!r}; the only supported method is sudo")
    if user is None:
        user = _read("ansible_become_user", lambda: view.get("ansible_become_user", "root"))
    elif isinstance(user, str):
        said = user
        user = _read("become_user", lambda: templar.render_value(said, view))
    if not isinstance(user, str) or not _USER.match(user.strip()):
        raise TaskError(f"become_user (or ansible_become_user) is {user!r}, which is not a user name; give one such as "
                        "root or vllm")
    password, source = password_of(view)
    if password:
        secrets.add(password)
    return Become(user.strip(), method, password, source)


def _read(name: str, value: Callable[[], Any]) -> Any:
    """`value()`: a become variable's (or keyword's) value, rendered. A template in it that cannot be rendered is
    one paragraph naming the variable, not a traceback; a password's text and error are never quoted."""
    try:
        return value()
    except TemplateError as exc:
        secret = name in PASSWORD_VARS
        detail = "" if secret else f": {getattr(exc, 'message', None) or type(exc).__name__}"
        raise TaskError(
            f"{name} is a template that cannot be rendered ({type(exc).__name__}{detail}). Fix its value where it is "
            "set (inventory, group_vars/host_vars, the play); a password holding {{ or {% goes between {% raw %} and "
            "{% endraw %}, or in the file named by " + PASSWORD_FILE_VAR + " (read as it is), or is typed at -K"
            + (" (its value is not shown: it is a secret)." if secret else ".")
        ) from None


def for_task(task, view, templar, secrets) -> Become | None:
    return identity(task.become, task.become_user, task.become_method, view, templar, secrets)


def for_play(play, view, templar, secrets) -> Become | None:
    """The play's identity for what runs outside its tasks (host lock, facts): its own keywords (play.become, a
    dict as engine/keywords.become_of gives), else the host's ansible_become* variables."""
    said = getattr(play, "become", None) or {}
    return identity(said.get("become"), said.get("become_user"), said.get("become_method"), view, templar, secrets)


def password_of(view) -> tuple[str | None, str]:
    """(password, the variable it came from) or (None, ""). sudo reads one line: a line break inside would be a
    second attempt, one at the end (a YAML `|` value) would reach the worker, so it is refused / dropped."""
    for name in PASSWORD_VARS:
        value = _read(name, lambda: view.get(name))  # noqa: B023 - called at once, inside this iteration
        if value is not None and str(value) != "":
            text = str(value).rstrip("\r\n")
            if "\n" in text or "\r" in text:
                raise TaskError(f"{name} holds a line break inside it; sudo reads one line. Write the password on "
                                "one line (its value is not shown: it is a secret)")
            return text, name
    path = _read(PASSWORD_FILE_VAR, lambda: view.get(PASSWORD_FILE_VAR))
    if path is None or str(path) == "":
        return None, ""
    path = os.path.expanduser(str(path))
    try:
        with open(path, encoding="utf-8") as fh:
            value = fh.read().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"{PASSWORD_FILE_VAR} names {path}, which cannot be read on the control node "
                        f"({getattr(exc, 'strerror', None) or exc}); fix the path or its permissions") from None
    if not value:
        raise TaskError(f"{PASSWORD_FILE_VAR} names {path}, which is empty; write the sudo password in it")
    if "\n" in value or "\r" in value:
        raise TaskError(f"{PASSWORD_FILE_VAR} names {path}, which holds more than one line; sudo reads one: keep "
                        "only the password in it")
    return value, PASSWORD_FILE_VAR


def sudo_argv(python: str, become: Become, prompt: str) -> list[str]:
    """The command that starts the worker as become.user; the password never appears in it."""
    ask = ["-p", prompt] if become.password else ["-n"]
    return ["sudo", "-H", "-S", *ask, "-u", become.user, "--", python, "-u", "-c", BECOME_BOOTSTRAP]


def start_become(parent: Transport, become: Become, timeout_s: float = START_TIMEOUT_S) -> SpawnedTransport:
    """A worker running as become.user beside `parent`'s (same connection), its source sent; BecomeError when
    sudo refuses (the channel is closed, sudo ran nothing)."""
    prompt = f"[dfp-become-{_random.token_hex(8)}] password: "
    spawned = SpawnedTransport(parent, sudo_argv(parent.python(), become, prompt))
    try:
        spawned.open()
        _answer_sudo(spawned, become, prompt, timeout_s)
        spawned.send_worker()
    except BecomeError:
        spawned.close()
        raise
    except Exception as exc:
        spawned.close()
        raise BecomeError(f"could not start a worker as {become.user} through sudo on {parent.host.name}: "
                          f"{type(exc).__name__}: {exc}") from None
    return spawned


def _answer_sudo(spawned: SpawnedTransport, become: Become, prompt: str, timeout_s: float) -> None:
    """Wait for the worker's ready line, writing the password once at sudo's prompt; a second prompt means a
    wrong password (not answered again: no lock-out from repeated attempts)."""
    deadline = time.monotonic() + timeout_s
    answered = False
    while not spawned.ready.is_set():
        text = spawned.stderr_text()
        prompts = text.count(prompt)
        if spawned.ended.is_set() or prompts > 1 or "Sorry, try again" in text:
            raise BecomeError(refusal(spawned.host.name, become, text.replace(prompt, ""), answered))
        if prompts == 1 and not answered:
            spawned._write(become.password.encode("utf-8") + b"\n")  # type: ignore[union-attr] # prompted only with one
            answered = True
        if time.monotonic() > deadline:
            raise BecomeError(
                f"sudo on {spawned.host.name} did not start the worker as {become.user} within {timeout_s:g} s "
                f"(what it said: {_said(text.replace(prompt, '')) or 'nothing'}); check sudo there (sudo -l as the "
                "login user). Nothing ran as that user.")
        spawned.activity.wait(0.05)
        spawned.activity.clear()


def _said(text: str) -> str:
    return " ".join(text.split())[:300]


def refusal(host: str, become: Become, text: str, answered: bool) -> str:
    """One paragraph for sudo's refusal, from what it printed; nothing ran as the become user."""
    low = text.lower()
    who = f"become (sudo -u {become.user}) on {host}"
    tail = " Nothing ran as that user; nothing was changed on the host."
    if "sorry, try again" in low or "incorrect password" in low:
        return (f"{who} failed: incorrect password (from {become.password_from}). Fix the password "
                f"(ansible_become_password or the file named by {PASSWORD_FILE_VAR}); it was tried once." + tail)
    if "password is required" in low:
        return (f"{who} failed: sudo asks for a password and none is configured. Set ansible_become_password (in a "
                f"vault-kept inventory file or with -e @file), or {PASSWORD_FILE_VAR}: a file on the control node "
                "holding it; or give the login user NOPASSWD rights for this." + tail)
    if "not in the sudoers" in low or "not allowed to" in low or "may not run sudo" in low:
        return (f"{who} failed: the login user may not run commands as {become.user} with sudo ({_said(text)}). "
                "Grant it in /etc/sudoers.d on the host, or log in as a user that may." + tail)
    if "unknown user" in low:
        return f"{who} failed: there is no user {become.user} on the host ({_said(text)}); fix become_user." + tail
    if "sudo: not found" in low or "sudo: command not found" in low or "no such file" in low and "sudo" in low:
        return (f"{who} failed: sudo is not installed on the host. Install it (apt-get install sudo), or log in as "
                f"{become.user} (ansible_user) instead of using become." + tail)
    return f"{who} failed: {_said(text) or 'sudo exited without a message'}." + tail
