"""Ansible's configuration settings the engine honours, found where Ansible looks for them.

Users keep settings in ansible.cfg and ANSIBLE_* variables (ansible-core's own test scripts set
ANSIBLE_ROLES_PATH per command), so a setting's value is the first of: the environment variable
ANSIBLE_<NAME>, the `[defaults]` key of the first ansible.cfg found ($ANSIBLE_CONFIG, ./ansible.cfg unless the
current folder is world-writable, ~/.ansible.cfg, /etc/ansible/ansible.cfg). Only the settings in SETTINGS are
read; the rest of the file is not an error (ansible.cfg holds settings for other tools too)."""

from __future__ import annotations

import configparser
import os
import stat
from pathlib import Path

from engine.errors import UserError

SETTINGS = {"roles_path": "ANSIBLE_ROLES_PATH", "force_handlers": "ANSIBLE_FORCE_HANDLERS",
            "allow_broken_conditionals": "ANSIBLE_ALLOW_BROKEN_CONDITIONALS",
            "deprecation_warnings": "ANSIBLE_DEPRECATION_WARNINGS", "collections_path": "ANSIBLE_COLLECTIONS_PATH",
            "error_on_missing_handler": "ANSIBLE_ERROR_ON_MISSING_HANDLER",
            "gathering": "ANSIBLE_GATHERING",  # implicit (the default), explicit: only `gather_facts: true` gathers
            "ansible_managed": None}  # None: ansible.cfg only (Ansible reads no environment variable for it)


def config_file() -> Path | None:
    """The ansible.cfg Ansible would read, or None."""
    if os.environ.get("ANSIBLE_CONFIG"):
        given = Path(os.environ["ANSIBLE_CONFIG"]).expanduser()
        return given / "ansible.cfg" if given.is_dir() else given
    cwd = Path.cwd()
    candidates = [] if cwd.stat().st_mode & stat.S_IWOTH else [cwd / "ansible.cfg"]
    candidates += [Path.home() / ".ansible.cfg", Path("/etc/ansible/ansible.cfg")]
    return next((c for c in candidates if c.is_file()), None)


def setting(name: str) -> str | None:
    """The raw text of one of SETTINGS, or None where neither the environment nor ansible.cfg sets it."""
    return located(name)[0]


def enabled(name: str) -> bool:
    """A boolean setting as Ansible reads one (yes/true/on/1, any case): False where unset."""
    return (setting(name) or "").strip().lower() in ("1", "true", "yes", "on", "y", "t")


def located(name: str) -> tuple[str | None, Path]:
    """A setting's text and the folder its relative paths start from: the current one for the environment,
    the file's own for ansible.cfg (as Ansible resolves a path setting)."""
    env_name = SETTINGS[name]
    env = os.environ.get(env_name) if env_name else None
    if env is not None:
        return env, Path.cwd()
    path = config_file()
    if path is None or not path.is_file():
        return None, Path.cwd()
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read(path)
    except configparser.Error as exc:
        raise UserError(f"{path}: not a valid ansible.cfg ({exc}); fix the file or set ANSIBLE_CONFIG to another") from None
    return parser.get("defaults", name, fallback=None), path.parent


def roles_path() -> list[Path]:
    """roles_path's folders (colon-separated, ~ expanded), a relative one from where it was set."""
    text, base = located("roles_path")
    return [(base / Path(p).expanduser()).resolve() for p in (text or "").split(os.pathsep) if p.strip()]
