"""The variables Ansible's template action gives a template's render: template_host, template_path,
template_fullpath, template_destpath, template_uid, template_run_date, template_mtime, and ansible_managed
(unless the play sets it): ansible.cfg's `[defaults] ansible_managed` ("Ansible managed" by default) with {host},
{uid} and {file} standing for those variables and strftime of the template's mtime, then rendered (the text is
the operator's own, as trusted as the playbook; a file name in it is a variable's value, never template code)."""

from __future__ import annotations

import datetime
import pwd
import socket
import time
from pathlib import Path
from typing import Any

from engine.parsing import ansible_cfg

MANAGED_DEFAULT = "Ansible managed"


def template_variables(src: Path, path_given: str, dest: str | None) -> dict[str, Any]:
    """The template_* variables for the file `src` (the task's src as written: `path_given`)."""
    st = src.stat()
    try:
        uid: Any = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        uid = st.st_uid
    return {"template_host": socket.gethostname(), "template_path": path_given,
            "template_mtime": datetime.datetime.fromtimestamp(st.st_mtime), "template_uid": uid,
            "template_run_date": datetime.datetime.now(), "template_destpath": dest,
            "template_fullpath": str(src)}


def managed_text(mtime: float) -> str:
    """ansible_managed as a template: the setting with its {host}/{uid}/{file} as variable reads, strftime applied."""
    setting = ansible_cfg.setting("ansible_managed") or MANAGED_DEFAULT
    text = setting.format(host="{{ template_host }}", uid="{{ template_uid }}", file="{{ template_path }}")
    return time.strftime(text, time.localtime(mtime))


def with_template_variables(view: Any, templar: Any, src: Path, path_given: str, dest: str | None) -> Any:
    """`view` with the template variables read first (ansible_managed only where the play has none)."""
    names = template_variables(src, path_given, dest)
    if "ansible_managed" not in view:
        managed = managed_text(src.stat().st_mtime)
        names["ansible_managed"] = templar.render_value(managed, view.with_overlay(names))
    return view.with_overlay(names)
