"""Ansible's persistent fact cache, the `jsonfile` plugin only: with ANSIBLE_CACHE_PLUGIN=jsonfile a host's cached
facts (what setup gathered, a module's ansible_facts, set_fact with `cacheable: true`) are written at the end of
the run to ANSIBLE_CACHE_PLUGIN_CONNECTION/<ANSIBLE_CACHE_PLUGIN_PREFIX><host> as JSON, and read back as that
host's facts when a later run starts (unless older than ANSIBLE_CACHE_PLUGIN_TIMEOUT seconds, 86400 by default;
0: never old). `--flush-cache` removes them first.

Trust (docs/SAFETY.md): the files hold data only; they are read as JSON, never rendered (a template in them stays
text, as a host's answer)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from engine.errors import UserError

PLUGINS = ("jsonfile", "ansible.builtin.jsonfile")


def _folder() -> tuple[Path, str] | None:
    """(folder, file prefix) when the jsonfile cache is on; None otherwise (the memory cache: nothing kept)."""
    plugin = os.environ.get("ANSIBLE_CACHE_PLUGIN", "memory")
    if plugin in ("", "memory", "ansible.builtin.memory"):
        return None
    if plugin not in PLUGINS:
        raise UserError(f"ANSIBLE_CACHE_PLUGIN={plugin!r}: the only fact cache plugins here are memory and jsonfile; "
                        "set ANSIBLE_CACHE_PLUGIN=jsonfile (with ANSIBLE_CACHE_PLUGIN_CONNECTION=FOLDER) or unset it.")
    where = os.environ.get("ANSIBLE_CACHE_PLUGIN_CONNECTION", "")
    if not where:
        raise UserError("ANSIBLE_CACHE_PLUGIN=jsonfile needs ANSIBLE_CACHE_PLUGIN_CONNECTION, the folder the facts are "
                        "kept in; set it (e.g. ANSIBLE_CACHE_PLUGIN_CONNECTION=~/.cache/facts).")
    return Path(where).expanduser(), os.environ.get("ANSIBLE_CACHE_PLUGIN_PREFIX", "ansible_facts")


def _timeout() -> float:
    text = os.environ.get("ANSIBLE_CACHE_PLUGIN_TIMEOUT", "86400")
    try:
        return float(text)
    except ValueError:
        raise UserError(f"ANSIBLE_CACHE_PLUGIN_TIMEOUT={text!r} must be a number of seconds (0: facts never "
                        "expire); fix the environment variable.") from None


def load(host: str) -> dict:
    """The facts a former run kept for `host` ({} when none, when expired, or when the cache is off)."""
    place = _folder()
    if place is None:
        return {}
    path = place[0] / f"{place[1]}{host}"
    try:
        timeout = _timeout()
        if timeout and time.time() - path.stat().st_mtime > timeout:
            return {}
        facts = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # no file, or one that does not parse: no cached facts, as Ansible's jsonfile plugin
    return facts if isinstance(facts, dict) else {}


def save(host: str, facts: dict) -> None:
    """Keep `host`'s facts for the next run (nothing when the cache is off or there is nothing to keep)."""
    place = _folder()
    if place is None or not facts:
        return
    place[0].mkdir(parents=True, exist_ok=True)
    path = place[0] / f"{place[1]}{host}"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(facts, default=str, sort_keys=True, indent=4), encoding="utf-8")
    tmp.replace(path)


def flush(hosts: list[str] | None = None) -> None:
    """--flush-cache: forget the kept facts (of `hosts`, or of every host)."""
    place = _folder()
    if place is None or not place[0].is_dir():
        return
    for path in place[0].iterdir():
        name = path.name
        if name.startswith(place[1]) and (hosts is None or name[len(place[1]):] in hosts) and path.is_file():
            path.unlink()
