"""A template's {% include %} and {% import %} (engine/template/loader.py) find their files as Ansible's template
action and lookup do: the role's templates/, the playbook's templates/, the template's own folder, without
rendering the variables the included file does not read; compared with real ansible-playbook on a local host. A file a host's answer names stays inside the role's or the playbook's folders."""

from __future__ import annotations

import os
from collections import ChainMap
from pathlib import Path

import jinja2
import pytest
import yaml

from engine.errors import TaskError
from engine.template.environment import environment
from engine.template.loader import include_loader
from engine.template.taint import Taint, close_frame, note, open_frame
from engine.template.templar import Templar
from tests.engine.playbook.ansible_side import both_succeed, local_inventory

FILES = {
    "templates/shared.j2": "shared {{ x }}\n",
    "templates/deep/play.j2": "{% set y = x %}{% include 'shared.j2' %}{% include 'beside.j2' %}{% from 'macros.j2' import hi with context %}"
                              "{{ hi() }}\n",
    "templates/deep/beside.j2": "beside\n",
    "templates/macros.j2": "{% macro hi() %}play macro {{ x }}{% endmacro %}",
    "roles/r/templates/sub/main.j2": "{% import 'macros.j2' as m with context %}{{ m.hi() }}\n"
                                     "{% include 'shared.j2' %}{% include 'near.j2' %}{% include 'loose' %}"
                                     "{% set z = x %}{% include 'reads.j2' %}",
    "roles/r/templates/reads.j2": "[{{ lookup('file', 'data.txt') }} {{ z }}]",
    "roles/r/files/data.txt": "role data\n",
    "roles/r/templates/sub/near.j2": "near {{ x }}\n",
    "roles/r/templates/macros.j2": "{% macro hi() %}role macro {{ x }}{% endmacro %}",
    "roles/r/loose": "in the role's own folder\n",
    "roles/r/tasks/main.yml": "- template: {src: sub/main.j2, dest: '{{ out }}/role.txt'}\n",
}


def _book(tree: Path, side: str) -> Path:
    out = tree / side
    out.mkdir()
    play = {"hosts": "all", "gather_facts": False, "roles": ["r"],
            "vars": {"x": "X", "out": str(out), "unread": "{{ nowhere }}"},  # an include does not render it
            "tasks": [{"template": {"src": "deep/play.j2", "dest": f"{out}/play.txt"}},
                      {"copy": {"content": "{{ lookup('template', 'deep/play.j2') }}", "dest": f"{out}/lookup.txt"}}]}
    book = tree / f"{side}.yml"
    book.write_text(yaml.safe_dump([play], sort_keys=False))
    return book


def _read(folder: Path) -> dict:
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


def test_includes_and_imports_are_found_as_ansible_finds_them(tmp_path):
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    both_succeed(_book(tmp_path, "ansible"), _book(tmp_path, "ours"), local_inventory(tmp_path))
    assert _read(tmp_path / "ours") == _read(tmp_path / "ansible")
    assert _read(tmp_path / "ours")["role.txt"] == "role macro X\nshared Xnear Xin the role's own folder[role data X]"  # one newline gone


def _render_as_host_named(loader, name: str = "", template=None) -> str:
    """Load `name` (or render `template`) while the render in progress has read a host's answer."""
    frame = open_frame()
    try:
        note(Taint(("gpu1",)))
        return (template or environment().overlay(loader=loader).get_template(name)).render()
    finally:
        close_frame(frame)


def test_a_lookup_in_an_imported_macro_takes_its_arguments_as_a_hosts(tmp_path):
    """What built an imported macro's arguments is not known where it runs: after a render read a host's answer,
    its lookups are held to the rules for a host's paths (with the task's variables or without)."""
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "m.j2").write_text("{% macro f(p) %}{{ lookup('file', p) }}{% endmacro %}")
    loader = include_loader([str(tmp_path)])
    env = environment().overlay(loader=loader)
    template = env.from_string("{% from 'm.j2' import f %}{{ f('/etc/hostname') }}")
    with pytest.raises(TaskError, match="comes from what a host returned"):
        _render_as_host_named(loader, template=template)
    answers = {"where": "/etc/hostname"}  # a data layer: a host's answer
    t = Templar(environment())
    view = t.view(ChainMap(answers), data=(answers,))
    with pytest.raises(TaskError, match="comes from what a host returned"):  # imported with the task's variables
        t.render_text("{% from 'm.j2' import f with context %}{{ f(where) }}", view, None, loader)


def test_a_host_named_file_stays_inside_the_playbooks_folders(tmp_path):
    (tmp_path / "play" / "templates").mkdir(parents=True)
    (tmp_path / "play" / "templates" / "ok.j2").write_text("ok")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "secret").write_text("s")
    os.symlink(tmp_path / "elsewhere" / "secret", tmp_path / "play" / "templates" / "link")
    loader = include_loader([str(tmp_path / "play")])
    assert _render_as_host_named(loader, "ok.j2") == "ok"
    with pytest.raises(jinja2.TemplateNotFound):
        _render_as_host_named(loader, "../elsewhere/secret")
    with pytest.raises(TaskError, match="outside"):
        _render_as_host_named(loader, "link")
    assert environment().overlay(loader=loader).get_template("link").render() == "s"  # the playbook's own name: as Ansible
