"""The files a template's `{% include %}`, `{% import %}`, `{% from %}` and `{% extends %}` name, found as Ansible's
template action and template lookup find them: in each folder of the task's search path (its role's, the folder of
the file it is written in, the playbook's) and that folder's `templates/`, and in the template's own folder.

Trust rule (engine/template/templar.py): the playbook chooses which files a template may pull in. Jinja already keeps
a name inside the search folders (no '..', no absolute path); when the render has read what a host returned before
it names the file (`{% include out.stdout %}`), the file must also lie inside the role's or the playbook's folders
once symlinks are followed, so a host's answer never reaches a file the playbook did not lay out.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import jinja2

from engine.errors import TaskError
from engine.template.taint import current


def with_templates_dirs(folders: Iterable[str]) -> list[str]:
    """Each folder's `templates/` then the folder itself, once each, in order (Ansible's Jinja search path)."""
    unique = dict.fromkeys(str(f) for f in folders)
    return [p for f in unique for p in (os.path.join(f, "templates"), f)]


class SearchLoader(jinja2.FileSystemLoader):
    """A FileSystemLoader over `searchpath` that keeps a file a host's answer named inside `roots`."""

    def __init__(self, searchpath: list[str], roots: Iterable[str]) -> None:
        super().__init__(searchpath)
        self.roots = [Path(os.path.realpath(r)) for r in roots]

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, Callable[[], bool]]:
        source, filename, uptodate = super().get_source(environment, template)
        frame = current()
        if frame is not None and frame.hosts and not self._inside(filename):
            raise TaskError(f"the template {template!r} that a template pulls in ({{% include %}}, {{% import %}}) "
                            f"was named after reading what a host returned ({frame.describe()}), and it leads to "
                            f"{os.path.realpath(filename)}, outside {', '.join(map(str, self.roots))}; keep the "
                            "file inside the role's or the playbook's folders, or write its name in the template")
        return _without_trailing_newline(source), filename, uptodate

    def _inside(self, filename: str) -> bool:
        real = Path(os.path.realpath(filename))
        return any(real.is_relative_to(root) for root in self.roots)


def _without_trailing_newline(source: str) -> str:
    """An included file loses one trailing newline, as in Ansible (its Jinja keeps none; only the template the task
    names gets its trailing newlines back): `{% include 'a' %}{% include 'b' %}` joins their lines."""
    for end in ("\r\n", "\n", "\r"):
        if source.endswith(end):
            return source[:-len(end)]
    return source


def include_loader(search: Iterable[str], extra: Iterable[str] = (), first: Iterable[str] = ()) -> Any:
    """The loader for one template's render: `first` as they are (the lookup's file's folder), then the task's
    search path (ansible_search_path) and `extra` (the playbook's folder, the template's own), each with its
    `templates/`; a host-chosen name stays inside the search path's folders."""
    search = list(search)
    return SearchLoader([*first, *with_templates_dirs([*search, *extra])], search)
